"""Phase markers end to end: the public API (tests/progs/phases.c), NVTX
ranges through NVTX_INJECTION64_PATH (tests/progs/nvtx.c), Python through
ctypes (preload/gpumemtrace_markers.py), and the reports built on them:
`gpumemreport phases` and the per-interval rise of `growth`."""
import json
import os
import shutil
import subprocess
import time

from gmt import *

MiB = 1 << 20
KiB = 1 << 10
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def phases_json(trace, *args):
    return json.loads(report("phases", "--json", *args, trace).stdout)["traces"][0]


def by_name(doc, kind):
    return {p["name"]: p for p in doc["phases"] if p["kind"] == kind}


def strings_in(trace):
    """The string definitions of a trace, as dump shows them."""
    return [l for l in dump(trace, "--no-stacks")
            if "ext-kind=6" in l or l.split()[4:5] == ["string"]]


def test_phases_figures():
    p = run([prog("phases"), "basic"])
    expect(p.stdout.strip() == "active 1", p.stdout)
    d = phases_json(one_trace())
    expect(d["markers"] == 2 + 3 * 7 + 1 and d["marks"] == 4 and d["pushes"] == 10 and
           d["pops"] == 10 and d["unbalanced_pops"] == 0 and d["regions_open_at_end"] == 0, d)
    marks, regions = by_name(d, "mark"), by_name(d, "region")
    expect(list(marks) == ["step", "eval"], list(marks))
    expect(list(regions) == ["setup", "forward", "backward", "backward/allreduce"], list(regions))
    want = {  # count, peak, peak occurrence, live start, live end, nets, allocations
        ("mark", "step"): (3, 21 * MiB, 3, 8 * MiB, 11 * MiB, MiB, MiB, MiB, 19),
        ("mark", "eval"): (1, 14 * MiB, 1, 11 * MiB, 11 * MiB, 0, 0, 0, 1),
        ("region", "setup"): (1, 8 * MiB, 1, 0, 8 * MiB, 8 * MiB, 8 * MiB, 8 * MiB, 1),
        ("region", "forward"): (3, 16 * MiB, 3, 8 * MiB, 16 * MiB, 6 * MiB, 6 * MiB, 6 * MiB, 9),
        ("region", "backward"): (3, 21 * MiB, 3, 14 * MiB, 10 * MiB, -6 * MiB, -6 * MiB,
                                 -6 * MiB, 6),
        ("region", "backward/allreduce"): (3, 21 * MiB, 3, 18 * MiB, 20 * MiB, 0, 0, 0, 3),
    }
    for (kind, name), w in want.items():
        ph = (marks if kind == "mark" else regions)[name]
        got = (ph["count"], ph["peak_requested"], ph["peak_occurrence"], ph["live_at_start"],
               ph["live_at_end"], ph["net_mean"], ph["net_first"], ph["net_last"],
               ph["allocations"])
        expect(got == w, f"{kind} {name}: {got} != {w}")
        expect(ph["total_ns"] > 0 or name == "backward/allreduce", ph)
    expect(regions["backward/allreduce"]["depth"] == 1 and regions["backward"]["depth"] == 0,
           regions)
    # the last occurrence of a mark runs to the end of the trace
    expect(marks["step"]["to_end"] == 1 and regions["forward"]["to_end"] == 0, marks)
    text = report("phases", one_trace()).stdout
    rows = [" ".join(l.split()) for l in text.splitlines()]
    for line in ("marks (each runs to the next mark of the same name, or to the end):",
                 "regions (push..pop per thread, nested ones as outer/inner):"):
        expect(line in rows, f"{line!r} not in\n{text}")
    # count, time (2 words), then the figures
    for row in ("3 21.00 MiB #3 8.00 MiB 11.00 MiB +1.00 MiB +1.00 MiB +1.00 MiB 19 step",
                "3 21.00 MiB #3 18.00 MiB 20.00 MiB 0 B 0 B 0 B 3 backward/allreduce"):
        expect(any(r and r.split()[0] == row.split()[0] and r.split()[3:] == row.split()[1:]
                   for r in rows), f"{row!r} not in\n{text}")
    md = report("phases", "--markdown", one_trace()).stdout
    expect("| count | time | peak |" in md and "| backward/allreduce |" in md, md)


def test_phases_occurrences():
    run([prog("phases"), "basic"])
    d = phases_json(one_trace(), "--occurrences")
    steps = [o for o in d["occurrences"] if o["name"] == "step"]
    expect([o["index"] for o in steps] == [1, 2, 3], steps)
    expect([o["peak_requested"] for o in steps] == [19 * MiB, 20 * MiB, 21 * MiB], steps)
    expect([o["live_at_start"] for o in steps] == [8 * MiB, 9 * MiB, 10 * MiB], steps)
    expect([o["to_end"] for o in steps] == [False, False, True], steps)
    starts = [o["start_ns"] for o in d["occurrences"]]
    expect(starts == sorted(starts) and len(starts) == 1 + 3 + 3 * 3 + 1, starts)
    expect(d["occurrences_dropped"] == 0, d)
    text = report("phases", "--all", one_trace()).stdout
    expect("occurrences:" in text and text.count(" step\n") == 4, text)  # 1 table row + 3


def test_markers_without_the_library():
    p = run([prog("phases"), "basic"], traced=False)
    expect(p.stdout.strip() == "active -1" and not traces(), p.stdout)


def test_disabled_tracer_records_nothing():
    p = run([prog("phases"), "basic"], GPUMEMTRACE_DISABLE=1)
    expect(p.stdout.strip() == "active 0" and not traces(), p.stdout)


def test_first_marker_starts_tracing():
    # phases.c's first call is push("setup"), before any CUDA call
    run([prog("phases"), "basic"])
    events = [l.split()[4] for l in dump(one_trace(), "--no-stacks")[1:]
              if l.split()[3] != "-"]
    expect(events[0] == "marker", events[:3])


def test_no_markers():
    run([prog("report_known")])
    t = one_trace()
    text = report("phases", t).stdout
    expect("no markers in this trace" in text and "gpumemtrace_mark" in text, text)
    d = phases_json(t)
    expect(d["markers"] == 0 and d["phases"] == [], d)


def test_growth_per_step():
    run([prog("phases"), "growth"])
    g = json.loads(report("growth", "--json", one_trace()).stdout)["traces"][0]
    expect(g["interval_mark"] == "step" and g["interval_marks"] == 20, g)
    sites = {s["site"].split(" ")[0]: s for s in g["sites"]}
    expect(list(sites) == ["history"], sites)
    expect(sites["history"]["rise_per_interval"] == 256 * KiB, sites)
    text = report("growth", one_trace()).stdout
    expect('per interval of mark "step" (20 marks)' in text and "per step" in text and
           "+256.00 KiB" in text, text)


def test_verbose_hook_cost_per_step():
    # 20 "step" marks, each step 2 cudaMalloc and 1 cudaFree: the steady
    # figures leave out the 3 warm-up steps and the time after the last mark
    p = run([prog("phases"), "growth"], GPUMEMTRACE_VERBOSE="1")
    line = [l for l in p.stderr.splitlines() if "per step after" in l]
    expect(len(line) == 1 and 'after 3 warm-up steps (16 steps between "step" marks): '
           '2 cudaMalloc calls took' in line[0] and ", 1 cudaFree calls" in line[0], p.stderr)
    # without step marks there is no steady state to say
    p = run([prog("phases"), "basic"], GPUMEMTRACE_VERBOSE="1")
    expect("hooks: " in p.stderr and "per step after" not in p.stderr, p.stderr)


def test_growth_without_marks():
    # no marks: no per-interval figures; the steps are found from the
    # allocations instead (report_known's 20 steps, 256 KiB kept in each)
    run([prog("report_known")])
    g = json.loads(report("growth", "--json", one_trace()).stdout)["traces"][0]
    expect(g["interval_mark"] is None and g["sites"][0]["rise_per_interval"] is None, g)
    expect(g["steps"] == 20 and g["sites"][0]["per_step"] == 256 * KiB, g)
    text = report("growth", one_trace()).stdout
    expect("mark" not in text and "per step" in text.splitlines()[1], text)


def test_markers_from_threads():
    run([prog("phases"), "threads", "4"])
    d = phases_json(one_trace(), "--occurrences")
    regions, marks = by_name(d, "region"), by_name(d, "mark")
    # every thread's "worker" is open at once: per-thread stacks keep them
    # apart (a shared stack would make "worker/worker/...")
    expect(list(regions) == ["worker"] and regions["worker"]["count"] == 20, regions)
    expect(marks["tick"]["count"] == 20 and d["unbalanced_pops"] == 0, d)
    threads = {o["thread"] for o in d["occurrences"] if o["name"] == "worker"}
    expect(len(threads) == 4, threads)
    expect(regions["worker"]["allocations"] >= 20, regions)


def test_markers_from_threads_at_full_speed():
    # small chunks: every thread crosses many chunk boundaries
    run([prog("phases"), "stress", "8", "20000"], GPUMEMTRACE_CHUNK_KB=4)
    d = phases_json(one_trace())
    n = 8 * 20000
    expect((d["pushes"], d["pops"], d["marks"], d["unbalanced_pops"]) == (n, n, n, 0), d)
    regions, marks = by_name(d, "region"), by_name(d, "mark")
    expect(list(regions) == ["s"] and regions["s"]["count"] == n, regions)
    # marks tile the run: every allocation (each after its thread's first
    # mark) falls in exactly one occurrence of "m"
    expect(marks["m"]["count"] == n and marks["m"]["allocations"] == 8 * (20000 // 64 + 1),
           d["phases"])


def test_killed_while_marking_reads_cleanly():
    p = subprocess.Popen([prog("phases"), "stress", "4", "-1"], stdout=subprocess.PIPE,
                         env=dict(clean_env(), LD_PRELOAD=LIB))
    try:
        expect(p.stdout.readline().strip() == b"ready", "no ready line")
        time.sleep(0.2)
    finally:
        p.kill()
        p.wait()
    r = report("phases", "--json", one_trace())  # exit 0: no partial record
    d = json.loads(r.stdout)["traces"][0]
    expect(d["marks"] > 1000 and "without closing" in r.stderr, (d["marks"], r.stderr))
    # each thread stopped inside or outside its region: at most 4 open
    expect(d["regions_open_at_end"] <= 4 and abs(d["pushes"] - d["pops"]) <= 4, d)


def test_fork_child_defines_its_own_names():
    p = run([prog("phases"), "fork"])
    child = int(p.stdout.split()[1])
    files = {info(t)["pid"]: t for t in traces()}
    expect(len(files) == 2 and child in files, files)
    c = phases_json(files[child])
    expect(set(by_name(c, "mark")) == {"parent", "child"}, c["phases"])
    expect(by_name(c, "region")["shared"]["count"] == 1, c["phases"])
    # the child's file has its own definitions: "parent" was interned in
    # the parent before the fork, and is defined again in the child
    defs = strings_in(files[child])
    expect(len(defs) == 3, defs)
    parent = [t for pid, t in files.items() if pid != child][0]
    pp = phases_json(parent)
    expect(set(by_name(pp, "mark")) == {"parent"} and
           by_name(pp, "region")["shared"]["count"] == 1, pp["phases"])


def test_unbalanced_pops():
    run([prog("phases"), "unbalanced"])
    d = phases_json(one_trace())
    regions = by_name(d, "region")
    expect(d["unbalanced_pops"] == 2 and d["pops"] == 3 and d["pushes"] == 2, d)
    expect(regions["a"]["count"] == 1 and regions["a"]["peak_requested"] == MiB, regions)
    lo = regions["left-open"]
    expect(lo["to_end"] == 1 and lo["net_first"] == 2 * MiB and d["regions_open_at_end"] == 1,
           lo)
    text = report("phases", one_trace()).stdout
    expect("2 pops without a push" in text and "1 region never popped" in text, text)


def test_long_and_odd_names():
    run([prog("phases"), "names"])  # exits 4 if a marker changed errno
    d = phases_json(one_trace())
    marks = by_name(d, "mark")
    expect("x" * 256 in marks and not any(n.startswith("x" * 257) for n in marks), list(marks))
    # the cut would split a 2-byte character: it is left out whole
    expect("y" * 255 in marks, [n[:8] + "..." + str(len(n)) for n in marks])
    expect("(null)" in marks and "" in marks and "(null)" in by_name(d, "region"), list(marks))


def test_many_names_stay_right():
    # more distinct names than the library interns: each use past the
    # table's capacity writes its own definition, names stay right
    n = 66000
    run([prog("phases"), "many", str(n)])
    d = phases_json(one_trace())
    marks = by_name(d, "mark")
    expect(len(marks) == n, len(marks))
    expect(marks["n0"]["count"] == 2 and marks[f"n{n - 1}"]["count"] == 2, marks["n0"])


def nvtx_run(**env):
    return run([prog("nvtx")], NVTX_INJECTION64_PATH=LIB, **env)


def test_nvtx_ranges_become_markers():
    p = nvtx_run()
    # NVTX's push and pop return levels: our per-thread count
    expect(p.stdout.strip() == "levels 0 1 1 1 2 2 1 0 extra -1", p.stdout)
    d = phases_json(one_trace())
    regions, marks = by_name(d, "region"), by_name(d, "mark")
    expect(list(regions) == ["train", "train/fwd-\u00e9", "train/ex-ascii",
                             "train/ex-ascii/registered"], list(regions))
    expect(list(marks) == ["checkpoint", "ex-mark"], list(marks))
    tr = regions["train"]
    expect(tr["peak_requested"] == 3 * MiB and tr["allocations"] == 2 and
           tr["net_first"] == 2 * MiB, tr)
    expect(d["unbalanced_pops"] == 1, d)


def test_nvtx_without_preload_records_nothing():
    p = run([prog("nvtx")], traced=False, NVTX_INJECTION64_PATH=LIB)
    expect("levels -2" in p.stdout and not traces(), p.stdout)  # NVTX's "no tool"
    expect("not preloaded" in p.stderr, p.stderr)


def test_nvtx_through_another_copy_of_the_library():
    # the launcher may name another path: the preloaded copy records
    shutil.copy(LIB, "copy.so")
    p = run([prog("nvtx")], NVTX_INJECTION64_PATH=os.path.abspath("copy.so"))
    expect(p.stdout.startswith("levels 0 1"), p.stdout)
    d = phases_json(one_trace())
    expect(d["markers"] == 11, d)
    expect(info(one_trace())["by_kind"].get("alloc") == 2, "allocations and markers apart")


def test_nvtx_tracer_disabled():
    p = nvtx_run(GPUMEMTRACE_DISABLE=1)
    expect(p.stdout.startswith("levels 0 1") and not traces(), p.stdout)


PY_APP = r"""
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import gpumemtrace_markers as gmt
lib = ctypes.CDLL(sys.argv[2])
lib.markalloc_alloc.restype = ctypes.c_uint64
lib.markalloc_alloc.argtypes = [ctypes.c_uint64]
lib.markalloc_free.argtypes = [ctypes.c_uint64]
MiB = 1 << 20
keep = []
with gmt.phase("load"):
    keep.append(lib.markalloc_alloc(4 * MiB))
for i in range(3):
    gmt.mark("epoch")
    with gmt.phase("train"):
        lib.markalloc_free(lib.markalloc_alloc(2 * MiB))
    keep.append(lib.markalloc_alloc(MiB))

@gmt.phase(b"eval")
def evaluate():
    lib.markalloc_free(lib.markalloc_alloc(MiB))

evaluate()
if gmt.loaded():
    ctypes.CDLL(None).gpumemtrace_mark(b"raw")
gmt.mark("\u00fcn\u00efcode")
gmt.pop()
print("loaded", gmt.loaded(), "active", gmt.active())
"""


def python3():
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")


def test_python_markers_through_ctypes():
    with open("app.py", "w") as f:
        f.write(PY_APP)
    argv = [python3(), "app.py", os.path.join(ROOT, "preload"), prog("libmarkalloc.so")]
    p = run(argv)
    expect(p.stdout.strip() == "loaded True active True", p.stdout + p.stderr)
    d = phases_json(one_trace())
    marks, regions = by_name(d, "mark"), by_name(d, "region")
    expect(list(marks) == ["epoch", "raw", "\u00fcn\u00efcode"], list(marks))
    expect(list(regions) == ["load", "train", "eval"], list(regions))
    ep, tr = marks["epoch"], regions["train"]
    expect((ep["count"], ep["net_first"], ep["live_at_start"]) == (3, MiB, 4 * MiB), ep)
    expect((tr["count"], tr["peak_requested"], tr["peak_occurrence"]) == (3, 8 * MiB, 3), tr)
    expect(regions["load"]["net_first"] == 4 * MiB and d["unbalanced_pops"] == 1, d)
    # the same program without the library: the helper does nothing
    os.remove(one_trace())
    p = run(argv, traced=False)
    expect(p.stdout.strip() == "loaded False active False" and not traces(), p.stdout)


def test_make_install_puts_the_module_where_python_imports_from():
    """make install: the library, the header, both programs, and the
    markers module in a directory of PREFIX's that python3 imports from
    (or PREFIX's site-packages), where it imports and does nothing without
    the library."""
    dest = os.path.abspath("dest")
    p = subprocess.run(["make", "-s", "-C", ROOT, f"O={BUILD}", "install", f"DESTDIR={dest}",
                        "PREFIX=/opt/gmt"], capture_output=True, text=True, timeout=600)
    expect(p.returncode == 0, p.stdout + p.stderr)
    for f in ("lib/libgpumemtrace.so", "include/gpumemtrace.h", "bin/gpumemreport",
              "bin/gpumemtrace"):
        expect(os.path.isfile(os.path.join(dest, "opt/gmt", f)), f)
    found = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs
             if f == "gpumemtrace_markers.py"]
    expect(len(found) == 1 and found[0].startswith(os.path.join(dest, "opt/gmt/lib/python")) and
           found[0].endswith("-packages/gpumemtrace_markers.py"), found)
    site = os.path.dirname(found[0])[len(dest):]
    expect(f"INSTALL  {site}/gpumemtrace_markers.py" in p.stdout, p.stdout)
    r = subprocess.run([python3(), "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                        "import gpumemtrace_markers as g; g.mark('x'); "
                        "print(g.__file__)", os.path.dirname(found[0])],
                       capture_output=True, text=True, env=clean_env(), timeout=60)
    expect(r.returncode == 0 and r.stdout.strip() == found[0], r.stdout + r.stderr)
