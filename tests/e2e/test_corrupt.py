"""gpumemreport treats traces as hostile: bad files get one clear error
line and exit status 2, never a crash or a hang."""
import json
import os
import random
import struct

from gmt import *


def make_trace():
    run([prog("calls")])
    return one_trace()


def assert_rejected(path, words):
    for cmd in ("info", "dump"):
        p = report(cmd, path, check_rc=None)
        expect(p.returncode == 2, f"{cmd} {path}: exit {p.returncode}\n{p.stderr}")
        lines = p.stderr.strip().splitlines()
        expect(len(lines) == 1, f"{cmd}: want one error line, got {lines}")
        expect(lines[0].startswith("gpumemreport: ") and words in lines[0], lines[0])


def test_wrong_magic():
    t = make_trace()
    data = bytearray(open(t, "rb").read())
    data[0:8] = b"NOTATRCE"
    open("bad.gmt", "wb").write(data)
    assert_rejected("bad.gmt", "not a gpumemtrace trace")


def test_newer_version():
    t = make_trace()
    data = bytearray(open(t, "rb").read())
    struct.pack_into("<HHHH", data, 8, 2, 0, 2, 0)  # version 2.0, needs 2.0
    open("new.gmt", "wb").write(data)
    assert_rejected("new.gmt", "needs a reader of version 2.0")


def test_newer_minor_version_still_reads():
    t = make_trace()
    data = bytearray(open(t, "rb").read())
    struct.pack_into("<HH", data, 8, 1, 7)  # written by 1.7, readable by 1.0
    open("minor.gmt", "wb").write(data)
    expect(info("minor.gmt")["by_api"] == info(t)["by_api"], "1.7 file read differently")


def test_truncated():
    t = make_trace()
    data = open(t, "rb").read()
    for n in (0, 10, 100, 4095):
        open("cut.gmt", "wb").write(data[:n])
        p = report("info", "cut.gmt", check_rc=2)
        expect(len(p.stderr.strip().splitlines()) == 1, p.stderr)
        expect(any(w in p.stderr for w in ("truncated", "empty", "too short")), p.stderr)


def test_cut_mid_chunk_reads_its_whole_chunks():
    # a trace cut by an interrupted copy could not be
    # read at all. Its whole chunks are read; the partial one is said.
    run([prog("threads")], GPUMEMTRACE_CHUNK_KB="4")
    t = one_trace()
    data = open(t, "rb").read()
    whole = info(t)
    chunks = (len(data) - 4096) // 4096
    expect(chunks >= 3, chunks)
    open("cut.gmt", "wb").write(data[:len(data) - 1000])  # into the last chunk
    p = report("info", "--json", "cut.gmt", check_rc=0)
    got = json.loads(p.stdout)[0]
    lines = p.stderr.strip().splitlines()
    expect(len(lines) == 1 and "damaged trace, read where intact: a partial chunk at the "
           "end (3096 bytes)" in lines[0], p.stderr)
    expect(0 < got["events"] < whole["events"], (got["events"], whole["events"]))
    # report commands too, one warning each
    p = report("summary", "cut.gmt", check_rc=0)
    expect(sum("damaged trace" in l for l in p.stderr.splitlines()) == 1, p.stderr)


def test_flipped_chunk_header_loses_that_chunk_only():
    # one flipped bit used to lose the whole trace
    run([prog("threads")], GPUMEMTRACE_CHUNK_KB="4")
    t = one_trace()
    data = bytearray(open(t, "rb").read())
    whole = info(t)
    data[4096 + 4096] ^= 0x40  # the magic of chunk 1
    open("flip.gmt", "wb").write(data)
    p = report("info", "--json", "flip.gmt", check_rc=0)
    got = json.loads(p.stdout)[0]
    expect("1 damaged chunk left out" in p.stderr and "chunk 1 at offset 8192 has a bad magic"
           in p.stderr, p.stderr)
    expect(0 < got["events"] < whole["events"], (got["events"], whole["events"]))
    # a malformed record inside a chunk: the records before it are kept
    data = bytearray(open(t, "rb").read())
    data[4096 + 32] = 0x00  # chunk 0's first record: kind 0, which none is
    open("rec.gmt", "wb").write(data)
    p = report("info", "--json", "rec.gmt", check_rc=0)
    got = json.loads(p.stdout)[0]
    expect("the rest of 1 chunk after a malformed record" in p.stderr and
           "chunk 0, byte 32: unknown record kind" in p.stderr, p.stderr)
    expect(0 < got["events"] < whole["events"], (got["events"], whole["events"]))


def test_random_bytes():
    rnd = random.Random(1)
    for i in range(20):
        open("rand.gmt", "wb").write(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 70000))))
        report("info", "rand.gmt", check_rc=2)


def test_not_a_file():
    os.mkdir("dir.gmt")
    assert_rejected("dir.gmt", "not a regular file")
    assert_rejected("missing.gmt", "cannot open")


def test_flipped_bytes_never_crash():
    """Corrupt bytes anywhere: the tool exits 0 (damage not detectable,
    e.g. inside an address, or read around with a warning) or 2 (the
    header), never with a signal."""
    t = make_trace()
    data = open(t, "rb").read()
    rnd = random.Random(7)
    outcomes = set()
    for i in range(150):
        bad = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            pos = rnd.randrange(len(bad)) if rnd.random() < 0.5 else rnd.randrange(4096, min(len(bad), 4096 + 2048))
            bad[pos] = rnd.getrandbits(8)
        open("flip.gmt", "wb").write(bad)
        for cmd in ("info", "dump"):
            p = report(cmd, "flip.gmt", check_rc=None, timeout=30)
            expect(p.returncode in (0, 2), f"{cmd}: exit {p.returncode} on corrupt input\n{p.stderr}")
            if p.returncode == 2:
                expect(len(p.stderr.strip().splitlines()) == 1, p.stderr)
            outcomes.add("warned" if "damaged trace" in p.stderr else p.returncode)
    expect({0, "warned"} <= outcomes,
           f"outcomes {outcomes}: the corruption test is not exercising both paths")
