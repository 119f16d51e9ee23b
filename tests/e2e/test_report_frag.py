"""gpumemreport frag: the pool's state rebuilt from the trace, checked
against a program that makes a known fragmentation pattern
(tests/progs/frag.c prints the figures it expects as "expect NAME VALUE")
and against the pool's own record at the out-of-memory event."""
import json
import random
import re

from gmt import *


def frag_run(scenario="pattern", **env):
    """Run the test program; its trace and the figures it expects."""
    env.setdefault("SIM_CUDA_MEM", "32M")
    env.setdefault("GPUMEMTRACE_SAMPLE_MS", "1")
    p = run([prog("frag"), scenario], **env)
    expect(p.stdout.rstrip().endswith("ok"), p.stdout)
    want = {}
    for line in p.stdout.splitlines():
        if line.startswith("expect "):
            _, name, value = line.split()
            want[name] = int(value)
    return one_trace(), want, p.stdout


def frag_json(path, *args):
    doc = json.loads(report("frag", "--json", *args, path).stdout)
    expect(doc["schema"] == "gpumemtrace.frag/1", doc.get("schema"))
    expect(len(doc["traces"]) == 1, doc)
    return doc["traces"][0]


def same(got, want, prefix, names):
    for n in names:
        expect(got[n] == want[f"{prefix}.{n}"],
               f"{prefix}.{n}: report {got[n]}, program expects {want[prefix + '.' + n]}")


def test_peak_figures():
    t, want, out = frag_run()
    expect("layout pool" in out, out)
    got = frag_json(t)
    expect(got["pool"] is True and got["inconsistencies"] == 0, f"{got['pool']} {got['inconsistencies']}")
    peak = got["peak"]
    same(peak, want, "peak", ["requested", "reserved", "allocated", "pending", "free",
                              "largest_free", "free_blocks", "live_blocks", "rounding_waste",
                              "allocations", "unpooled_allocated"])
    expect(peak["unpooled_allocations"] == 1 and peak["segments"] == 2, peak)
    expect(peak["idle"] == peak["reserved"] - peak["allocated"] == peak["pending"] + peak["free"], peak)
    expect(round(peak["fragmentation"] * 1e6) == want["peak.fragmentation_ppm"],
           f"fragmentation {peak['fragmentation']}")
    summary = json.loads(report("summary", "--json", t).stdout)["traces"][0]
    expect(peak["requested"] == summary["peak_requested"], f"{peak} {summary}")


def test_segment_table():
    t, want, _ = frag_run()
    segs = frag_json(t)["peak"]["segment_table"]
    KiB = 1024
    # most free first: S1 (the 8 gaps of 128 KiB, block 0 pending), then S2
    expect(len(segs) == 2, segs)
    s1, s2 = segs
    expect((s1["size"], s1["allocated"], s1["pending"], s1["free"], s1["largest_gap"],
            s1["gaps"], s1["live_blocks"]) == (2048 * KiB, 7 * 128 * KiB, 128 * KiB, 1024 * KiB,
                                               128 * KiB, 8, 7), s1)
    expect((s2["size"], s2["allocated"], s2["pending"], s2["free"], s2["largest_gap"],
            s2["gaps"], s2["live_blocks"]) == (2048 * KiB, 6 * 256 * KiB, 0, 512 * KiB,
                                               512 * KiB, 1, 6), s2)
    expect(all(re.fullmatch(r"0x[0-9a-f]+", s["address"]) and s["device"] == 0 for s in segs), segs)
    # --top 1: one segment, the other summed in one row
    got = frag_json(t, "--top", "1")["peak"]
    expect(len(got["segment_table"]) == 1 and got["segments_omitted"] == 1, got)
    text = report("frag", "--bytes", "--top", "1", t).stdout
    rows = [l.split() for l in text.splitlines() if l.startswith("0x") or l.startswith("(1 more")]
    expect(rows[0][1:] == ["2097152", "917504", "131072", "1048576", "131072", "8", "7"], text)
    expect(rows[1] == ["(1", "more", "segments)", "2097152", "1572864", "0", "524288",
                       "524288", "1", "6"], text)


def test_out_of_memory_picture_matches_the_pool():
    t, want, _ = frag_run()
    got = frag_json(t)
    expect(got["ooms_total"] == 1 and len(got["ooms"]) == 1, got["ooms"])
    oom = got["ooms"][0]
    same(oom, want, "oom", ["size", "pending", "free", "largest_free", "free_blocks"])
    rec = oom["recorded"]
    # the pool wrote its own state before failing: the rebuilt one agrees
    expect((rec["reserved"], rec["allocated"], rec["largest_free"]) ==
           (oom["reserved"], oom["allocated"], oom["largest_free"]), oom)
    expect(oom["device"] == 0 and oom["seq"] > got["peak"]["seq"], oom)


def test_text_report():
    t, want, _ = frag_run()
    out = report("frag", "--bytes", t).stdout
    lines = [l.rstrip() for l in out.splitlines()]
    expect(lines[0].endswith("gpumemtrace's pool on; out-of-memory events: 1"), lines[0])
    for pattern in (rf"at the peak of requested memory: {want['peak.requested']} at \d+\.\d{{3}} s",
                    rf"  free +{want['peak.free']}  in 9 free blocks, largest {want['peak.largest_free']}",
                    rf"  pending +{want['peak.pending']}  freed, not yet reusable",
                    r"  fragmentation +66\.7%  1 - largest free / free",
                    r"  fragmentation +69\.2%  1 - largest free / free",
                    rf"  rounding waste +{want['peak.rounding_waste']}  block - requested bytes.*",
                    r"  outside pool +4096  in 1 allocation the pool does not serve",
                    r"at out-of-memory #1: 67108864 requested on device 0 at \d+\.\d{3} s",
                    r"  the pool recorded reserved 4194304, allocated 2490368, largest free 524288"):
        expect(any(re.fullmatch(pattern, l) for l in lines), f"no line like {pattern!r}:\n{out}")
    md = report("frag", "--markdown", t).stdout
    expect(re.search(r"^\| segment \| size \|", md, re.M), md)


def test_over_time_from_samples():
    t, want, _ = frag_run()
    got = frag_json(t)
    rows = got["over_time"]
    expect(got["samples"] >= 5 and 3 <= len(rows) <= 12, f"{got['samples']} {rows}")
    expect([r["at_ns"] for r in rows] == sorted(r["at_ns"] for r in rows), rows)
    expect(sum(r["samples"] for r in rows) == got["samples"], rows)
    # the worst moment: from the out-of-memory on, 512 KiB is the largest
    # of 1.625 MiB free (pending bytes do not count as free)
    worst = 1 - want["oom.largest_free"] / want["oom.free"]
    expect(abs(got["max_sample_fragmentation"] - worst) < 1e-6, got["max_sample_fragmentation"])
    expect(all(0 <= r["fragmentation"] <= 1 and r["reserved"] >= r["allocated"] for r in rows), rows)
    text = report("frag", t).stdout
    expect(re.search(r"fragmentation over time: \d+ samples, highest 69\.2% at", text), text)


def test_large_block_keeps_its_tail():
    """A 13.75 MiB request in a 14 MiB segment: the pool does not split off
    0.25 MiB, so there is no gap - and the block's real size agrees with
    the one the pool later reports as reusable (no inconsistency)."""
    t, want, _ = frag_run("tail")
    got = frag_json(t)
    expect(got["inconsistencies"] == 0, got["inconsistencies"])
    same(got["peak"], want, "peak", ["requested", "reserved", "allocated", "free",
                                     "free_blocks", "rounding_waste"])
    expect(got["peak"]["fragmentation"] == 0 and got["peak"]["largest_free"] == 0, got["peak"])


def test_large_block_gives_up_its_segment_end():
    """A 13.5 MiB request in a 14 MiB segment: the 0.5 MiB at the
    segment's end is split off, free (for small requests), and the report
    rebuilds it so - the block's real size agrees with the pool's."""
    t, want, _ = frag_run("endsplit")
    got = frag_json(t)
    expect(got["inconsistencies"] == 0, got["inconsistencies"])
    same(got["peak"], want, "peak", ["requested", "reserved", "allocated", "free",
                                     "free_blocks", "rounding_waste"])
    expect(got["peak"]["largest_free"] == want["peak.free"], got["peak"])


def test_without_the_pool():
    t, want, out = frag_run(GPUMEMTRACE_POOL="0")
    expect("layout other" in out, out)
    text = report("frag", "--bytes", t).stdout
    expect("no pool state to report: the driver does the caching" in text, text)
    expect(re.search(rf"^  rounding waste +{want['nopool.rounding_waste']}  block - requested "
                     rf"bytes of 14 live allocations$", text, re.M), text)
    expect("no samples in this trace" in text and "segment" not in text, text)
    got = frag_json(t)
    expect(got["pool"] is False and got["ooms_total"] == 1 and got["ooms"] == [], got)
    expect(got["peak"] == {"seq": got["peak"]["seq"], "at_ns": got["peak"]["at_ns"],
                           "requested": want["peak.requested"], "allocations": 14,
                           "rounding_waste": want["nopool.rounding_waste"]}, got["peak"])


def test_several_traces_one_document():
    t, _, _ = frag_run()
    doc = json.loads(report("frag", "--json", t, t).stdout)
    expect(len(doc["traces"]) == 2 and doc["traces"][0] == doc["traces"][1], "not reproducible")


def test_help_and_bad_usage():
    p = report("frag", "--help")
    expect(p.stdout.startswith("usage: gpumemreport frag") and "--top N" in p.stdout, p.stdout)
    expect(report("help", "frag").stdout == p.stdout, "help frag differs from frag --help")
    expect("frag " in report("help").stdout, "frag missing from the command list")
    for args in ([], ["--top", "x", "t.gmt"], ["--no-such-option", "t.gmt"]):
        p = report("frag", *args, check_rc=2)
        expect(p.stdout == "", p.stdout)
    p = report("frag", "--top", "x", "t.gmt", check_rc=2)
    expect(p.stderr.strip() == "gpumemreport frag: --top needs a number, not 'x'; "
           "try 'gpumemreport frag --help'", p.stderr)


def test_corrupt_trace():
    t, _, _ = frag_run()
    data = bytearray(open(t, "rb").read())
    data[4096 + 232:4096 + 292] = bytes(60)  # zeroes inside chunk 0's records
    open("bad.gmt", "wb").write(data)
    # read where intact: the rest of chunk 0 is skipped, said
    for args in ([], ["--json"]):
        p = report("frag", *args, "bad.gmt", check_rc=0)
        lines = p.stderr.strip().splitlines()
        expect(len(lines) == 1 and lines[0].startswith(
            "gpumemreport: warning: bad.gmt: damaged trace, read where intact: the rest "
            "of 1 chunk after a malformed record"), p.stderr)
    # a trace that cannot be read at all (its header): a good trace next
    # to it is still reported; the exit status says 2
    data[0:8] = b"NOTATRCE"
    open("bad.gmt", "wb").write(data)
    p = report("frag", "--json", t, "bad.gmt", check_rc=2)
    expect(len(json.loads(p.stdout)["traces"]) == 1, p.stdout)


def test_flipped_bytes_never_crash():
    t, _, _ = frag_run()
    data = open(t, "rb").read()
    rnd = random.Random(11)
    seen = set()
    for _ in range(40):
        bad = bytearray(data)
        for _ in range(rnd.randint(1, 6)):
            bad[rnd.randrange(4096, min(len(bad), 4096 + 4096))] = rnd.getrandbits(8)
        open("flip.gmt", "wb").write(bad)
        p = report("frag", "--json", "flip.gmt", check_rc=None, timeout=30)
        expect(p.returncode in (0, 2), f"exit {p.returncode}\n{p.stderr}")
        if p.returncode == 0:
            json.loads(p.stdout)
        # damage inside chunks is read around and said
        seen.add("warned" if "damaged trace" in p.stderr else p.returncode)
    expect("warned" in seen, f"outcomes {seen}: no damage detected")
