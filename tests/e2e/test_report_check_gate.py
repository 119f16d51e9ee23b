"""gpumemreport check must not pass on a broken artifact, and gates growth
per step.

A trace cut in transfer (read as 0 events) or one whose process was
killed (never closed) is an error: exit 2, nothing on stdout, and a last
stderr line naming the trace and what is wrong - in the limits mode and
the baseline mode, for every trace given. --allow-damaged judges what was
read and says, in text, Markdown and JSON, that the trace is damaged.

--max-growth SIZE/step fails (exit 1) on a site growing by more than SIZE
a step, naming it with its bytes per step and first step; a run without
steps cannot be judged per step and fails too. Programs: example (steps
of 256 KiB kept), die (killed with SIGKILL), lifecycle (no steps) and
py/step_app.py over the simulated runtime (1 MiB kept a step, or none)."""
import json
import os
import re
import sys

from gmt import *

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
STEP_APP = os.path.join(HERE, "py", "step_app.py")


def trace_of(name, *argv):
    run([prog(argv[0]), *argv[1:]], GPUMEMTRACE_OUTPUT=f"{name}.gmt")
    expect(os.path.exists(f"{name}.gmt"), f"no trace {name}.gmt")
    return f"{name}.gmt"


def cut_in_transfer(src, dst, keep):
    """The first `keep` bytes of src: a copy interrupted after them."""
    data = open(src, "rb").read()
    expect(len(data) > keep, f"{src}: {len(data)} bytes")
    open(dst, "wb").write(data[:keep])
    return dst


def refused(args, trace, *words):
    """check exits 2, prints nothing on stdout, and its last stderr line
    is the error naming the trace, with every word."""
    p = report("check", *args, check_rc=2)
    expect(p.stdout == "", f"{args}: output on error: {p.stdout[:300]}")
    last = p.stderr.strip().splitlines()[-1]
    expect(last.startswith(f"gpumemreport: {trace}: damaged trace, not judged: ") and
           "--allow-damaged" in last and all(w in last for w in words), f"{args}: {p.stderr}")
    return last


def test_cut_in_transfer_is_an_error():
    a = trace_of("a", "example", "5")
    # into the first chunk: the reader salvages nothing
    cut = cut_in_transfer(a, "cut.gmt", 4096 + 1000)
    got = info(cut)
    expect(got["events"] == 0 and got["closed"], f"{got}")
    refused(["--max-peak", "10M", cut], cut, "nothing could be read from it (0 events)",
            "a partial chunk at the end (1000 bytes)")
    refused(["--json", "--max-peak", "10M", cut], cut, "0 events")
    # at a chunk's edge: no partial chunk, but fewer bytes than were written
    edge = cut_in_transfer(a, "edge.gmt", 4096)
    refused(["--max-peak", "10M", edge], edge, "0 events",
            f"the file has 4096 of the {os.path.getsize(a)} bytes its writer left")
    # every trace given: one damaged among intact ones
    refused(["--max-peak", "1G", a, cut], cut, "0 events")
    # the baseline mode: a damaged run, and a damaged baseline
    refused(["--baseline", a, cut], cut, "0 events")
    p = report("check", "--baseline", cut, a, check_rc=2)
    expect(p.stdout == "" and p.stderr.strip().splitlines()[-1].startswith(
        f"gpumemreport: baseline {cut}: damaged trace, not judged: "), p.stderr)
    # the intact trace still passes
    report("check", "--max-peak", "1G", a, check_rc=0)


def test_allow_damaged_judges_and_says_so():
    a = trace_of("a", "example", "5")
    cut = cut_in_transfer(a, "cut.gmt", 4096 + 1000)
    p = report("check", "--allow-damaged", "--max-peak", "10M", cut, check_rc=0)
    out = p.stdout.splitlines()
    expect(out[0] == "gpumemtrace check: PASS (judged on 1 damaged trace)", p.stdout)
    expect(any(l.startswith("damaged trace cut.gmt: nothing could be read from it (0 events)")
               for l in out), p.stdout)
    md = report("check", "--allow-damaged", "--markdown", "--max-peak", "10M", cut).stdout
    expect(md.startswith("## gpumemtrace check: PASS (judged on 1 damaged trace)\n") and
           "- **damaged trace** `cut.gmt`: nothing could be read" in md, md)
    doc = json.loads(report("check", "--allow-damaged", "--json", "--max-peak", "10M", cut)
                     .stdout)
    expect(doc["passed"] and doc["allow_damaged"], f"{doc}")
    expect([(d["trace"], d["baseline"]) for d in doc["damaged"]] == [("cut.gmt", False)] and
           "0 events" in doc["damaged"][0]["damage"], f"{doc['damaged']}")
    t = doc["traces"][0]
    expect(t["events"] == 0 and t["damage"] == doc["damaged"][0]["damage"], f"{t}")
    # a damaged baseline, judged: said as the baseline's
    doc = json.loads(report("check", "--allow-damaged", "--json", "--baseline", cut, a,
                            check_rc=1).stdout)
    expect([(d["trace"], d["baseline"]) for d in doc["damaged"]] == [("cut.gmt", True)],
           f"{doc['damaged']}")
    # an intact run: nothing damaged, the headline as ever
    doc = json.loads(report("check", "--json", "--max-peak", "1G", a).stdout)
    expect(doc["damaged"] == [] and not doc["allow_damaged"] and
           doc["traces"][0]["damage"] is None and doc["traces"][0]["events"] > 0, f"{doc}")


def test_killed_process_is_an_error():
    p = run([prog("die"), "kill", "2", "200", "counts"], check=False, timeout=120)
    expect(p.returncode == -9, f"exit {p.returncode}: {p.stderr}")
    t = one_trace()
    expect(not info(t)["closed"], f"{t} closed")
    refused(["--max-peak", "1T", t], t, "not closed normally (the process was killed or crashed")
    refused(["--baseline", t, t], t, "not closed normally")
    # judged on request: its figures as read, the verdict says damaged
    doc = json.loads(report("check", "--allow-damaged", "--json", "--max-peak", "1T", t).stdout)
    expect(doc["passed"] and doc["damaged"][0]["trace"] == t and
           "not closed normally" in doc["damaged"][0]["damage"] and
           not doc["traces"][0]["closed"], f"{doc}")


def step_trace(name, steps, leak):
    p = run([sys.executable, STEP_APP, str(steps), str(leak)],
            PYALLOC_LIB=prog("libpyalloc.so"), GPUMEMTRACE_OUTPUT=name)
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    return name


def leak_site():
    with open(STEP_APP) as f:
        no = next(i for i, l in enumerate(f, 1) if re.search(r"# SITE leak\b", l))
    return f"<module> (step_app.py:{no}) > pyalloc_alloc"


def step_rows(doc):
    return [c for c in doc["checks"] if c["check"] == "growth_per_step"]


def test_max_growth_per_step():
    leaky = step_trace("leak.gmt", 10, MiB)
    site = leak_site()
    doc = json.loads(report("check", "--json", "--max-growth", "512KiB/step", leaky,
                            check_rc=1).stdout)
    rows = step_rows(doc)
    expect([(r["site"], r["value"], r["first_step"], r["limit"], r["judged"], r["passed"])
            for r in rows] == [(site, MiB, 1, 512 * 1024, True, False)], f"{rows}")
    expect(doc["traces"][0]["steps"] == 10 and doc["traces"][0]["growth_per_step"] == MiB,
           f"{doc['traces']}")
    text = report("check", "--max-growth", "512KiB/step", leaky, check_rc=1).stdout
    expect(any(l.startswith(f"FAIL growth per step in leak.gmt") and
               f"{site} grows 1.00 MiB/step from step 1" in l for l in text.splitlines()), text)
    md = report("check", "--markdown", "--max-growth", "512KiB/step", leaky, check_rc=1).stdout
    expect(f"| growth per step: `{site}` (from step 1) |" in md and "| **FAIL** |" in md, md)
    # the limit is inclusive, and takes the other limits' sizes
    report("check", "--max-growth", "1MiB/step", leaky, check_rc=0)
    report("check", "--max-growth", "1048576/step", leaky, check_rc=0)
    report("check", "--max-growth", "1048575/step", leaky, check_rc=1)
    # a clean loop under the same limit passes: its steps found, nothing grows
    clean = step_trace("clean.gmt", 10, 0)
    doc = json.loads(report("check", "--json", "--max-growth", "512KiB/step", clean,
                            check_rc=0).stdout)
    rows = step_rows(doc)
    expect([(r["site"], r["value"], r["judged"], r["passed"]) for r in rows] ==
           [(None, 0, True, True)] and doc["traces"][0]["steps"] == 10, f"{doc}")


def test_max_growth_per_step_without_steps_fails():
    h = trace_of("h", "lifecycle")
    p = report("check", "--max-growth", "1GiB/step", h, check_rc=1)
    expect("no steps found: growth per step cannot be judged" in p.stdout, p.stdout)
    doc = json.loads(report("check", "--json", "--max-growth", "1GiB/step", h,
                            check_rc=1).stdout)
    rows = step_rows(doc)
    expect([(r["judged"], r["value"], r["site"], r["passed"], r["reason"]) for r in rows] ==
           [(False, None, None, False, "no steps found: growth per step cannot be judged")]
           and doc["traces"][0]["steps"] is None, f"{doc}")


def test_max_growth_per_step_syntax():
    h = trace_of("h", "lifecycle")
    for arg, msg in [("512KiB/steps", "--max-growth: '512KiB/steps' is not a rate"),
                     ("/step", "is not a size per step"),
                     ("-1/step", "cannot be negative"),
                     ("1.5.5M/step", "is not a size per step")]:
        p = report("check", "--max-growth", arg, h, check_rc=2)
        expect(msg in p.stderr.splitlines()[0], f"{arg}: {p.stderr}")
    p = report("check", "--max-peak", "1MiB/step", h, check_rc=2)
    expect("a size per step (/step) is for --max-growth" in p.stderr, p.stderr)
    # a rate per second is still a rate; both limits may be given
    doc = json.loads(report("check", "--json", "--max-growth", "1TiB/s", "--max-growth",
                            "1MiB/step", h, check_rc=1).stdout)
    expect([(c["check"], c["passed"]) for c in doc["checks"]] ==
           [("growth", True), ("growth_per_step", False), ("ooms", True)], f"{doc['checks']}")
