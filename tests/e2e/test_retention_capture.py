"""Retention captures in a traced process: GPUMEMTRACE_RETENTION has the
interpreter walk its own objects at exit or on SIGUSR2 (preload/retention.c
runs preload/retention.py), and `gpumemreport retention` shows the holders
with the sites that allocated what they hold. The program
(tests/e2e/py/retention_app.py) holds "device" memory of the simulated
runtime through PyTorch tensors (CPU PyTorch: Debian's python3-torch) by
references it knows; the report must name each holder, its bytes exactly,
and the line that allocated them."""
import atexit
import json
import os
import shutil
import tempfile

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "py", "retention_app.py")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch
MiB = 1 << 20


_checked = []


def has_torch():
    if _checked:
        return
    p = run([PYTHON, "-c", "import torch"], traced=False, check=False)
    expect(p.returncode == 0, "no PyTorch for /usr/bin/python3: scripts/install-deps.sh "
           f"installs python3-torch\n{p.stderr[-400:]}")
    _checked.append(True)


# Runs several tests read (each starts PyTorch, seconds): made once, the
# trace copied into each test's directory.
_runs = {}
_kept = []


def app(mode, retention="exit,all", out="t.gmt"):
    has_torch()
    key = (mode, retention)
    if key in _runs:
        p, trace = _runs[key]
        shutil.copyfile(trace, out)
        return p
    env = {"PYALLOC_LIB": prog("libpyalloc.so"), "GPUMEMTRACE_OUTPUT": out,
           "GMT_PRELOAD_DIR": os.path.join(HERE, "..", "..", "preload")}
    if retention is not None:
        env["GPUMEMTRACE_RETENTION"] = retention
    p = run([PYTHON, APP, mode], **env)
    if mode in ("exit", "steps"):  # what is read, not what runs, differs between tests
        if not _kept:  # the runner's scratch directory, which it removes
            scratch = os.environ.get("GMT_TEST_SCRATCH")
            _kept.append(tempfile.mkdtemp(prefix="gmt-retention-", dir=scratch))
            if scratch is None:
                atexit.register(shutil.rmtree, _kept[0], True)
        keep = os.path.join(_kept[0], "%s-%s.gmt" % (mode, retention))
        shutil.copyfile(out, keep)
        _runs[key] = (p, keep)
    return p


def captures(trace):
    doc = json.loads(report("retention", "--json", "--top", "0", trace).stdout)
    expect(doc["schema"] == "gpumemtrace.retention/1", doc)
    return doc["traces"][0]


def holders(cap):
    return {"".join(h["chain"]): h for h in cap["holders"]}


def sites():
    """The labels of the app's two allocating lines."""
    lines = site_lines(APP)
    return (f"alloc (retention_app.py:{lines['alloc']}) > pyalloc_alloc",
            f"alloc_cache (retention_app.py:{lines['cache']}) > pyalloc_alloc")


def test_capture_at_exit_names_holders_bytes_and_sites():
    p = app("exit")
    expect(p.stdout == "ok\n" and p.stderr == "", (p.stdout, p.stderr))
    got = captures("t.gmt")
    expect(len(got["captures"]) == 1, got)
    cap = got["captures"][0]
    expect(cap["reason"] == "exit" and cap["bound"] == "" and cap["storages"] == 4, cap)
    h = holders(cap)
    expect(set(h) == {"__main__.memory", "__main__.CACHE"}, sorted(h))
    site, csite = sites()
    mem, cache = h["__main__.memory"], h["__main__.CACHE"]
    expect(mem["retained"] == 12 * MiB and mem["storages"] == 3, mem)
    expect(cache["retained"] == 2 * MiB and cache["storages"] == 1, cache)
    # the storages are the trace's blocks: the allocating line, exact bytes
    expect(mem["sites"] == [{"site": site, "bytes": 12 * MiB}] and
           mem["not_in_trace_bytes"] == 0, mem)
    expect(cache["sites"] == [{"site": csite, "bytes": 2 * MiB}], cache)
    text = report("retention", "t.gmt").stdout
    expect("capture 1 at exit" in text and "__main__.memory" in text and
           f"{site} 12.00 MiB" in text, text)


def test_capture_on_a_signal_then_at_exit():
    p = app("signal", retention="signal,exit,all")
    expect(p.stdout == "ok\n", p.stdout)
    caps = captures("t.gmt")["captures"]
    expect([c["reason"] for c in caps] == ["signal", "exit"], caps)
    # on the signal the list still held its tensors; at exit it is empty
    expect(holders(caps[0])["__main__.memory"]["retained"] == 12 * MiB, caps[0])
    expect(set(holders(caps[1])) == {"__main__.CACHE"}, caps[1])
    expect(caps[0]["at_ns"] < caps[1]["at_ns"], caps)


def test_capture_at_a_mark():
    """mark:NAME: the first mark named so queues a capture, which runs at
    the interpreter's next safe point - before the program clears its
    list."""
    p = app("mark", retention="mark:checkpoint,exit,all")
    expect(p.stdout == "ok\n" and p.stderr == "", (p.stdout, p.stderr))
    got = captures("t.gmt")
    expect([c["reason"] for c in got["captures"]] == ["mark checkpoint", "exit"], got)
    first, last = got["captures"]
    expect(holders(first)["__main__.memory"]["retained"] == 12 * MiB, first)
    expect(set(holders(last)) == {"__main__.CACHE"}, last)


def test_capture_after_step_n():
    """step:N counts the program's "step" marks: after the fourth, four
    of the five tensors are kept, and only one capture is taken."""
    app("steps", retention="step:4,all")
    got = captures("t.gmt")
    expect(len(got["captures"]) == 1, got)
    cap = got["captures"][0]
    kept = holders(cap)["__main__.kept"]
    expect(cap["reason"] == "step 4" and kept["retained"] == 4 * MiB and
           kept["storages"] == 4, cap)


def test_the_programs_frame_names_a_holder_before_a_librarys():
    """A capture asked for from inside a library (torch's optimizer step,
    here a module under site-packages) that holds the program's tensor in
    a local of its own: the holder is the program's local, not the
    library's."""
    app("libframe", retention="all")
    caps = captures("t.gmt")["captures"]
    expect([c["reason"] for c in caps] == ["in a library"], caps)
    h = holders(caps[0])
    line = [n for n, t in enumerate(open(APP), 1) if "steplib.step(mine)" in t][0]
    expect(f"main (retention_app.py:{line}) local mine" in h, sorted(h))
    expect(not any("steplib" in k for k in h), sorted(h))


def optimhook(mode, retention):
    """tests/e2e/py/optimhook_app.py under GPUMEMTRACE_RETENTION: the
    reasons of its captures."""
    p = run([PYTHON, os.path.join(HERE, "py", "optimhook_app.py"), mode],
            PYALLOC_LIB=prog("libpyalloc.so"), GPUMEMTRACE_OUTPUT=f"{mode}.gmt",
            GPUMEMTRACE_RETENTION=retention)
    expect(p.stdout == "ok\n" and p.stderr == "", (p.stdout, p.stderr))
    return [c["reason"] for c in captures(f"{mode}.gmt")["captures"]]


def test_capture_at_an_optimizer_step_and_on_growth():
    """PyTorch's global optimizer hook (a stand-in of it: Debian's PyTorch
    is older) counts the steps: step:3 after the third; growth once, after
    the sixth, when what PyTorch holds rose at five steps in a row - and
    never on a loop that holds the same each step."""
    expect(optimhook("leak", "growth,step:3") ==
           ["step 3", "growth: 5000 bytes more in 5 steps, to step 6"], "leak")
    expect(optimhook("clean", "growth,step:3") == ["step 3"], "clean")


def test_optimizer_hook_found_when_torch_comes_after_the_first_cuda_call():
    """The bootstrap runs at the first CUDA call; torch imported after it
    is found at a later allocation, and no step is counted twice."""
    expect(optimhook("late", "growth,step:4") ==
           ["step 4", "growth: 5000 bytes more in 5 steps, to step 6"], "late")


def test_a_program_asks_for_a_capture_itself():
    """gpumemtrace_markers.retention(): the capture is taken at once, on
    the caller's thread, with no GPUMEMTRACE_RETENTION at all; it sees
    CUDA tensors only (none in this CPU PyTorch), so its storages are 0
    and its reason is the program's."""
    p = app("api", retention=None)
    expect(p.stdout == "took\nok\n" and p.stderr == "", (p.stdout, p.stderr))
    got = captures("t.gmt")
    expect([c["reason"] for c in got["captures"]] == ["after load"], got)
    expect(got["captures"][0]["storages"] == 0, got)
    # with `all` asked for, the CPU tensors count, and the capture at exit
    # is a second one
    p = app("api", retention="exit,all", out="all.gmt")
    got = captures("all.gmt")
    expect([c["reason"] for c in got["captures"]] == ["after load", "exit"], got)
    expect(holders(got["captures"][0])["__main__.memory"]["retained"] == 12 * MiB, got)


def held(row):
    return [("".join(h["chain"]), h["bytes"], h["retained"], h["capture"], h["reason"])
            for h in row["held_by"]]


def test_held_by_under_the_sites_of_peak_and_leaks():
    """peak and leaks name, under each site, the holders of its memory at
    the capture: the list holds all three tensors of the first line, the
    dict the one of the second."""
    app("exit")
    site, csite = sites()
    peak = json.loads(report("peak", "--json", "t.gmt").stdout)["traces"][0]
    rows = {r["site"]: r for r in peak["sites"]}
    expect(held(rows[site]) == [("__main__.memory", 12 * MiB, 12 * MiB, 1, "exit")], rows)
    expect(held(rows[csite]) == [("__main__.CACHE", 2 * MiB, 2 * MiB, 1, "exit")], rows)
    text = report("peak", "t.gmt").stdout.splitlines()
    at = [i for i, t in enumerate(text) if t.endswith(site)][0]
    expect(text[at + 1].split() == ["12.00", "MiB", "held", "by", "__main__.memory",
                                    "(capture", "1,", "exit)"], text)
    leaks = json.loads(report("leaks", "--json", "t.gmt").stdout)["traces"][0]
    rows = {r["site"]: r for sec in ("grew", "own", "in_use_at_end") for r in leaks[sec]["sites"]}
    expect(held(rows[site]) == [("__main__.memory", 12 * MiB, 12 * MiB, 1, "exit")], rows)
    expect("    held by __main__.CACHE (capture 1, exit)" in report("leaks", "t.gmt").stdout,
           "leaks text")


def test_held_by_under_a_growing_site():
    """growth by steps: the site that grows by 1 MiB a step; at the
    capture after step 4 its memory was held by the list made before the
    loop (12 MiB) and the list the loop fills (4 MiB)."""
    app("steps", retention="step:4,all")
    site, _ = sites()
    g = json.loads(report("growth", "--json", "t.gmt").stdout)["traces"][0]
    rows = {r["site"]: r for r in g["sites"]}
    expect(set(rows) == {site} and rows[site]["per_step"] == MiB, g)
    expect(held(rows[site]) == [("__main__.memory", 12 * MiB, 12 * MiB, 1, "step 4"),
                                ("__main__.kept", 4 * MiB, 4 * MiB, 1, "step 4")], rows)
    text = report("growth", "t.gmt").stdout
    expect("held by __main__.kept (capture 1, step 4)" in text, text)


def test_held_by_in_the_html_page():
    """The page, in headless Chromium: a "held by" row under each site of
    the peak, live-at-exit and growth tables, and the holders of a
    block's site in the block's hover card on the pool's map."""
    from test_html import browse
    app("steps", retention="step:4,all")
    report("html", "t.gmt", "-o", "t.html")
    t = browse("t.html")["traces"][0]
    site, csite = sites()
    mem = "held by __main__.memory: 12.00 MiB (capture 1, step 4; it retains 12.00 MiB in all)"
    kept = "held by __main__.kept: 4.00 MiB (capture 1, step 4; it retains 4.00 MiB in all)"
    cache = "held by __main__.CACHE: 2.00 MiB (capture 1, step 4; it retains 2.00 MiB in all)"
    rows = [(r["table"].split(":")[0].split(" (")[0], r["site"], r["text"]) for r in t["held_rows"]]
    expect(all(r["visible"] for r in t["held_rows"]), t["held_rows"])
    expect(rows == [("At the peak", site, mem), ("At the peak", site, kept),
                    ("At the peak", csite, cache),
                    ("Live at exit", site, mem), ("Live at exit", site, kept),
                    ("Live at exit", csite, cache),
                    ("Growth per step", site, mem), ("Growth per step", site, kept)], rows)
    tip = t["block_tip"].splitlines()
    expect(tip[2] == f"site {site}" and tip[3] == "the site's memory " + mem and
           tip[4] == "the site's memory " + kept, tip)


def test_no_held_by_without_a_capture():
    app("exit", retention=None)
    peak = json.loads(report("peak", "--json", "t.gmt").stdout)["traces"][0]
    expect(peak["sites"] and all("held_by" not in r for r in peak["sites"]), peak)
    expect("held by" not in report("peak", "t.gmt").stdout, "peak text")


def test_the_programs_own_signal_handler_stays_its_own():
    p = app("own", retention="signal,all")
    # the program's handler ran, ours was not installed over it
    expect(p.stdout == "own handler\nok\n", p.stdout)
    got = captures("t.gmt")
    expect(got["captures"] == [] and "SIGUSR2 is the program's" in got["why"], got)


def test_without_the_option_nothing_runs_and_the_report_says_how():
    p = app("exit", retention=None)
    expect(p.stdout == "ok\n", p.stdout)
    got = captures("t.gmt")
    expect(got["captures"] == [] and "GPUMEMTRACE_RETENTION=exit" in got["why"], got)
    expect(info("t.gmt")["records"] > 0, "the trace was recorded")


def test_cuda_tensors_only_by_default():
    """Without `all`, only CUDA tensors count: this CPU PyTorch has none,
    and the capture says so rather than naming CPU tensors."""
    app("exit", retention="exit")
    cap = captures("t.gmt")["captures"][0]
    expect(cap["storages"] == 0 and cap["holders"] == [], cap)


def test_a_program_without_python_says_so():
    run([prog("hello")], check=False, GPUMEMTRACE_RETENTION="exit", GPUMEMTRACE_OUTPUT="h.gmt")
    got = captures("h.gmt")
    expect(got["captures"] == [] and "without Python" in got["why"], got)


def kept_block(cap):
    return [b["address"] for b in cap["blocks"] if b["chain"] == ["__main__.kept"]][0]


def test_malformed_lines_are_counted_and_skipped():
    """tests/progs/retention_lines.c writes one well-formed capture and 14
    lines a damaged or hostile recorder might: the report shows the first
    and says how many it skipped."""
    p = run([prog("retention_lines")], GPUMEMTRACE_OUTPUT="l.gmt")
    expect(p.stdout == "ok\n", p.stdout)
    r = report("retention", "--json", "l.gmt")
    expect("14 retention lines did not parse" in r.stderr, r.stderr)
    got = json.loads(r.stdout)["traces"][0]
    expect(got["skipped_lines"] == 14 and len(got["captures"]) == 1, got)
    cap = got["captures"][0]
    expect(cap["reason"] == "test" and cap["objects"] == 100, cap)
    h = holders(cap)
    expect(set(h) == {"__main__.kept", "__main__.other.cache['k']",
                      "__main__.other.cache['k'][1]"}, sorted(h))
    # the nested one right after the holder it lies in
    expect([("".join(x["chain"]), x["parent"]) for x in cap["holders"]] ==
           [("__main__.kept", -1), ("__main__.other.cache['k']", -1),
            ("__main__.other.cache['k'][1]", 1)] and cap["holders_total"] == 2, cap["holders"])
    kept = h["__main__.kept"]
    line = [n for n, t in enumerate(open(os.path.join(HERE, "..", "progs", "retention_lines.c")),
                                    1) if "cudaMalloc(&p" in t][0]
    expect(kept["retained"] == 1 << 20 and
           kept["sites"] == [{"site": f"main (retention_lines.c:{line})", "bytes": 1 << 20}], kept)
    other = h["__main__.other.cache['k']"]
    expect(other["sites"] == [] and other["not_in_trace_bytes"] == 4096, other)
    # the nested holder's storages: those whose chain runs through it
    inner = h["__main__.other.cache['k'][1]"]
    expect(inner["allocated"] == 2048 and inner["not_in_trace_bytes"] == 2048, inner)
    expect(sorted((b["address"], b["holder"], b["nested"]) for b in cap["blocks"]) ==
           sorted([(0xdeadbeef000, 1, -1), (0xdeadbeef800, 1, 2),
                   (kept_block(cap), 0, -1)]), cap["blocks"])
    text = report("retention", "l.gmt").stdout
    expect("__main__.other.cache['k']" in text and "not in the trace" in text and
           "  in it: __main__.other.cache['k'][1]" in text and "2 holders" in text, text)
