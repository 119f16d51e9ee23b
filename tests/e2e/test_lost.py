"""A trace whose recorder lost something says so: the file header counts the
events, other records and stacks it could not record and why (format 1.3),
every report prints it in its header and its JSON, `info` shows it, and
`check` refuses to judge such a trace unless --allow-damaged. Traces before
1.3 carry no counts and read as complete."""
import json
import os
import re
import resource
import signal
import struct
import subprocess

from gmt import *

ITERS = 100000
LIMIT = 200 * 1024  # the trace file's size limit: a few percent of the trace


def run_size_limited(cmd, limit, **extra_env):
    """cmd traced, with the file size limit at `limit` bytes and SIGXFSZ
    ignored: every write or fallocate past it fails with EFBIG, as a full
    disk fails with ENOSPC, from the kernel itself."""
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    env = clean_env(**extra_env)
    env["LD_PRELOAD"] = SANITIZED or LIB
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=limited)


def header_lines(text, n=6):
    """A text report's first lines: where its header notes are."""
    return text.splitlines()[:n]


def test_full_trace_file_says_events_lost():
    # A program whose trace hits the file size limit: recording stops (said
    # once on stderr), and the trace, closed normally, held a few percent
    # of the events with nothing saying the rest were lost - every report
    # and `check` took it as complete.
    bench = [prog("bench"), "allocfree", "1", str(ITERS), "4"]
    p = run_size_limited(bench, LIMIT, GPUMEMTRACE_CHUNK_KB="4", GPUMEMTRACE_OUTPUT="full.gmt")
    expect(p.returncode == 0, (p.returncode, p.stderr))
    said = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace:")]
    expect(len(said) == 1 and "File too large" in said[0], p.stderr)
    expect(os.path.getsize("full.gmt") <= LIMIT, os.path.getsize("full.gmt"))
    # the same run with room: what the full one should have held
    run(bench, GPUMEMTRACE_CHUNK_KB="4", GPUMEMTRACE_OUTPUT="room.gmt")
    whole = info("room.gmt")
    expect(whole["lost"] is None, whole["lost"])

    i = info("full.gmt")
    lost = i["lost"]
    expect(i["closed"] and lost is not None, (i["closed"], lost))
    # every event is either in the file or counted as lost: an allocation,
    # a free and a block made reusable per iteration, and a few of the
    # pool's own (segments, samples and fence waits, which vary with timing)
    total = i["events"] + lost["events"]
    expect(3 * ITERS <= total <= 3 * ITERS + 200 and
           3 * ITERS <= whole["events"] <= 3 * ITERS + 200,
           (i["events"], lost["events"], whole["events"]))
    expect(lost["events"] > 0.9 * total, (lost, total))
    expect(lost["why"] == ["file_full"] and lost["error"] == "File too large", lost)
    n = lost["events"]
    said = f"the recorder lost {n} events"
    expect(lost["text"].startswith(said) and "could not grow (File too large)" in lost["text"],
           lost["text"])
    text = report("info", "full.gmt").stdout.splitlines()
    expect("state:      closed normally" in text, text)
    expect(any(l.startswith("lost:       INCOMPLETE - " + said) for l in text), text)

    # every report: a header line, and the JSON field
    for cmd in ("summary", "peak", "leaks", "timeline", "transfers", "frag"):
        p = report(cmd, "full.gmt")
        head = header_lines(p.stdout)
        expect(any(l.startswith("note: INCOMPLETE TRACE - " + said) for l in head), (cmd, head))
        expect(f"full.gmt: incomplete trace: {said}" in p.stderr, (cmd, p.stderr))
        t = json.loads(report(cmd, "--json", "full.gmt").stdout)["traces"][0]
        expect(t["lost"] == lost, (cmd, t["lost"], lost))
    # ranks: a note naming the process, and its JSON field
    r = report("ranks", "room.gmt", "full.gmt").stdout
    expect(re.search(r"^note: .*: INCOMPLETE TRACE - " + re.escape(said), r, re.M), r)
    jobs = json.loads(report("ranks", "--json", "room.gmt", "full.gmt").stdout)["jobs"]
    ranks = [q for j in jobs for q in j["ranks"]]
    expect(sorted((q["lost"] or {}).get("events", 0) for q in ranks) == [0, n], ranks)
    # the HTML page: under the trace's heading, as Chromium shows it
    from test_html import browse
    report("html", "-o", "full.html", "full.gmt")
    shown = browse("full.html")["text"]
    expect("incomplete trace: " + said in shown, shown[:2000])
    d = report("diff", "room.gmt", "full.gmt").stdout.splitlines()
    expect(any(l.startswith("note: B: INCOMPLETE TRACE - " + said) for l in d[:8]), d[:8])
    expect(not any("A: INCOMPLETE" in l for l in d), d[:8])

    # check: not judged (exit 2, one line naming the trace and the loss) ...
    p = report("check", "--max-peak", "1G", "full.gmt", check_rc=2)
    errors = [l for l in p.stderr.splitlines() if not l.startswith("gpumemreport: warning:")]
    expect(len(errors) == 1 and p.stdout == "", (p.stdout, p.stderr))
    expect(re.match(r"gpumemreport: full\.gmt: damaged trace, not judged: incomplete: "
                    rf"{said}: .*File too large.*--allow-damaged", errors[0]), errors[0])
    # ... unless allowed: judged on what was read, and said so
    p = report("check", "--max-peak", "1G", "--allow-damaged", "full.gmt")
    expect(p.stdout.startswith("gpumemtrace check: PASS (judged on 1 damaged trace)"), p.stdout)
    expect(f"damaged trace full.gmt: incomplete: {said}" in p.stdout, p.stdout)
    j = json.loads(report("check", "--max-peak", "1G", "--allow-damaged", "--json",
                          "full.gmt").stdout)
    expect(j["passed"] and len(j["damaged"]) == 1 and said in j["damaged"][0]["damage"],
           j["damaged"])
    expect(j["traces"][0]["lost"] == lost["text"], j["traces"][0])
    # the complete run is judged as before
    report("check", "--max-peak", "1G", "room.gmt")


def test_stack_cap_says_stacks_lost():
    # GPUMEMTRACE_MAX_STACKS: past the cap, new stacks are recorded as none
    # (one warning and one note). The events are all there, but their sites
    # are not: the header counts the events recorded without their stack.
    p = run([prog("stackbomb"), "300"], GPUMEMTRACE_OUTPUT="s.gmt",
            GPUMEMTRACE_MAX_STACKS="100")
    expect(sum("GPUMEMTRACE_MAX_STACKS" in l for l in p.stderr.splitlines()) == 1, p.stderr)
    lines = dump("s.gmt", "--no-stacks")
    calls = [l for l in lines if " alloc " in l or " free_requested " in l]
    bare = [l for l in calls if "stack=" not in l]
    expect(len(calls) == 600 and len(bare) > 0, (len(calls), len(bare)))
    i = info("s.gmt")
    lost = i["lost"]
    expect(lost is not None and i["stacks"] == 100, (lost, i["stacks"]))
    expect((lost["events"], lost["records"], lost["stacks"]) == (0, 0, len(bare)), lost)
    expect(lost["why"] == ["stack_cap"] and lost["error"] is None, lost)
    said = f"the recorder lost the stacks of {len(bare)} events: GPUMEMTRACE_MAX_STACKS"
    expect(lost["text"].startswith(said), lost["text"])
    text = report("info", "s.gmt").stdout
    expect("lost:       INCOMPLETE - " + said in text, text)
    for cmd in ("summary", "peak"):
        head = header_lines(report(cmd, "s.gmt").stdout)
        expect(any(l.startswith("note: INCOMPLETE TRACE - " + said) for l in head), (cmd, head))
    p = report("check", "--max-peak", "1G", "s.gmt", check_rc=2)
    expect("s.gmt: damaged trace, not judged: incomplete: " + said in p.stderr, p.stderr)
    report("check", "--max-peak", "1G", "--allow-damaged", "s.gmt")


def test_trace_before_1_3_reads_as_complete():
    # The loss counters are 1.3's: a 1.2 file never wrote those bytes, so
    # whatever they hold, a reader takes nothing as lost.
    run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="new.gmt")
    with open("new.gmt", "rb") as f:
        data = bytearray(f.read())
    expect(struct.unpack_from("<HH", data, 8) == (1, 3), struct.unpack_from("<HH", data, 8))
    struct.pack_into("<H", data, 10, 2)                  # version_minor 2
    struct.pack_into("<QQQIi", data, 192, 7, 8, 9, 1, 28)  # lost_* as if set
    with open("old.gmt", "wb") as f:
        f.write(data)
    i = info("old.gmt")
    expect(i["format"] == "1.2" and i["lost"] is None, (i["format"], i["lost"]))
    p = report("summary", "old.gmt")
    expect("INCOMPLETE" not in p.stdout and "incomplete" not in p.stderr, (p.stdout, p.stderr))
    report("check", "--max-peak", "1G", "old.gmt")
    # the same bytes in a 1.3 file are a loss
    struct.pack_into("<H", data, 10, 3)
    with open("lost.gmt", "wb") as f:
        f.write(data)
    lost = info("lost.gmt")["lost"]
    expect((lost["events"], lost["records"], lost["stacks"], lost["why"]) ==
           (7, 8, 9, ["file_full"]), lost)
    report("check", "--max-peak", "1G", "lost.gmt", check_rc=2)
