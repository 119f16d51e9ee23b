"""Python stacks: a Python program (tests/e2e/py/alloc_app.py) allocates
through ctypes, which releases the GIL as PyTorch does, from nested calls,
a generator, a method, four threads and functions that are created and
thrown away (their code objects' addresses get reused). The reports must
name the right file:line and function for every byte, under every CPython
this machine has (the system python3, and 3.9-3.13 when pyenv has them)."""
import glob
import json
import os
import re
import shutil
import subprocess

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "py", "alloc_app.py")
FORK_APP = os.path.join(HERE, "py", "fork_app.py")
MiB = 1 << 20


def interpreters():
    """Every CPython 3.9+ found: the system one first, then pyenv's."""
    found = []
    for path in [shutil.which("python3") or "/usr/bin/python3", "/usr/bin/python3"] + \
            sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*[0-9]"))):
        if not os.access(path, os.X_OK):
            continue
        v = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, env=clean_env())
        if v.returncode != 0:
            continue
        ver = tuple(int(x) for x in v.stdout.split("."))
        if ver >= (3, 9) and all(os.path.realpath(path) != os.path.realpath(p) for p, _ in found):
            found.append((path, ver))
    return found


def site_lines(path=APP):
    """name -> line number of the "# SITE name" comments."""
    lines = {}
    with open(path) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"# SITE (\w+)", text)
            if m:
                lines[m.group(1)] = no
    return lines


def run_app(python, out, *args, **env):
    return run([python, APP, *args], PYALLOC_LIB=prog("libpyalloc.so"),
               GPUMEMTRACE_OUTPUT=out, **env)


def peak_sites(trace, *args):
    doc = json.loads(report("peak", "--json", "--top", "0", *args, trace).stdout)
    return {s["site"]: (s["bytes"], s["allocations"]) for s in doc["traces"][0]["sites"]}


def check_app_trace(trace, ver):
    L = site_lines()
    method = "Model.forward" if ver >= (3, 11) else "forward"  # qualnames: 3.11+
    want = {
        f"worker (alloc_app.py:{L['worker']}) > pyalloc_alloc": (12 * MiB, 4),
        f"alloc (alloc_app.py:{L['alloc']}) > pyalloc_alloc": (7 * MiB, 1),
        f"{method} (alloc_app.py:{L['forward']}) > pyalloc_alloc": (4 * MiB, 1),
        f"gen (alloc_app.py:{L['gen']}) > pyalloc_alloc": (4 * MiB, 2),
        f"inner (alloc_app.py:{L['inner']}) > pyalloc_alloc": (1 * MiB, 1),
    }
    got = peak_sites(trace)
    for site, v in want.items():
        expect(got.get(site) == v, f"Python {ver}: {site}: wanted {v}, got {got}")
    # whole stacks, innermost Python frame first, through nested calls
    stack = peak_sites(trace, "--group", "stack", "--depth", "3")
    nested = [s for s in stack if s.startswith(f"inner (alloc_app.py:{L['inner']}) <- outer (")]
    expect(len(nested) == 1 and " <- main (alloc_app.py:" in nested[0] and
           nested[0].endswith(" > pyalloc_alloc"), f"Python {ver}: {list(stack)}")
    threads = [s for s in stack if s.startswith("worker (")]
    expect(len(threads) == 1 and "run (threading.py:" in threads[0], f"Python {ver}: {threads}")
    # every byte of the thrown-away functions under its own name
    folded = report("flamegraph", "--total", trace).stdout.splitlines()
    total = {}
    for line in folded:
        stack_text, count = line.rsplit(" ", 1)
        for name in ("dyn_a", "dyn_b"):
            if f";{name} ({name}.py:2);pyalloc_alloc" in stack_text:
                total[name] = total.get(name, 0) + int(count)
    expect(total == {"dyn_a": 20 * 5 * MiB, "dyn_b": 20 * 6 * MiB},
           f"Python {ver}: reused code addresses misattributed: {total}")
    i = info(trace)
    expect(i["features"] & 2, i["features"])  # python stacks
    expect(any(f"Python {ver[0]}.{ver[1]}: recording Python frames" in n for n in i["notes"]),
           i["notes"])


def test_python_stacks_every_interpreter():
    found = interpreters()
    expect(found, "no python3 found")
    for python, ver in found:
        out = f"py{ver[0]}{ver[1]}.gmt"
        p = run_app(python, out, "40")
        expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
        check_app_trace(out, ver)


def test_native_stacks_end_at_the_interpreter():
    # Under Python, a native stack stops at the interpreter's first frame;
    # without Python frames (GPUMEMTRACE_PYTHON=0) it goes on through it.
    python, ver = interpreters()[0]

    def interpreter_frames(trace):
        return sum(1 for l in dump(trace) if re.search(
            r"#\d+\s+(python3|libpython3)[^ ]*\+0x", l))

    run_app(python, "cut.gmt", "2")
    run_app(python, "full.gmt", "2", GPUMEMTRACE_PYTHON=0)
    expect(interpreter_frames("full.gmt") > 0, "the interpreter is not in native stacks")
    expect(interpreter_frames("cut.gmt") == 0, "native stacks go on past the interpreter")
    # and the sites keep their op: the pyalloc frame stays
    L = site_lines()
    expect(peak_sites("cut.gmt").get(f"inner (alloc_app.py:{L['inner']}) > pyalloc_alloc")
           == (1 * MiB, 1), peak_sites("cut.gmt"))


def test_python_frames_without_native_stacks():
    python, ver = interpreters()[0]
    run_app(python, "t.gmt", "2", GPUMEMTRACE_STACK_DEPTH=0)
    L = site_lines()
    got = peak_sites("t.gmt")
    # no native frames: no op after the line
    expect(got.get(f"inner (alloc_app.py:{L['inner']})") == (1 * MiB, 1), got)
    expect(not info("t.gmt")["features"] & 1, info("t.gmt")["features"])  # no native stacks


def test_python_off():
    python, ver = interpreters()[0]
    run_app(python, "t.gmt", "2", GPUMEMTRACE_PYTHON=0)
    i = info("t.gmt")
    expect(not i["features"] & 2 and i["python_code_objects"] == 0, i)
    got = peak_sites("t.gmt")
    # native only: the innermost user frame is the ctypes callee
    expect(got.get("pyalloc_alloc (pyalloc.c:11)", (0, 0))[0] == 34 * MiB, got)


def test_depth_limit_keeps_innermost_frames():
    python, ver = interpreters()[0]
    run_app(python, "t.gmt", "2", GPUMEMTRACE_PYTHON=2)
    L = site_lines()
    stack = peak_sites("t.gmt", "--group", "stack")
    inner = [s for s in stack if s.startswith("inner (")]
    expect(inner == [f"inner (alloc_app.py:{L['inner']}) <- outer (alloc_app.py:"
                     f"{L['outer']}) > pyalloc_alloc"], inner)


def test_fork_child_describes_its_own_code():
    """CUDA cannot be used in a forked child (its cudaMalloc fails, here
    as on a GPU), but the failed call is recorded, with a Python stack
    whose code objects the child's own trace describes again."""
    python, ver = interpreters()[0]
    p = run([python, FORK_APP], PYALLOC_LIB=prog("libpyalloc.so"),
            GPUMEMTRACE_OUTPUT="f.%p.gmt")
    pids = dict(line.split() for line in p.stdout.split("\n") if line.strip())
    L = site_lines(FORK_APP)
    got = peak_sites(f"f.{pids['parent']}.gmt")
    expect(f"before_fork (fork_app.py:{L['before_fork']}) > pyalloc_alloc" in got, got)
    child = dump(f"f.{pids['child']}.gmt")
    codes = [l for l in child if " pycode " in l]
    expect(any(" in_child (" in l for l in codes) and any(" <module> (" in l for l in codes),
           "\n".join(codes))
    failed = [l for l in child if " alloc_failed " in l]
    expect(len(failed) == 1 and "size=2097152" in failed[0], "\n".join(child[-5:]))


def test_unknown_interpreter_layout_is_noted():
    """A process whose Python the tracer does not know records no Python
    frames, and the trace says why (libfakepy.so claims to be 3.99)."""
    env = clean_env(GPUMEMTRACE_OUTPUT="t.gmt")
    env["LD_PRELOAD"] = f"{LIB} {prog('libfakepy.so')}"
    run([prog("hello")], traced=False, env=env, check=False)  # hello exits 3
    i = info("t.gmt")
    expect(not i["features"] & 2, i["features"])
    expect(any("Python 3.99: interpreter layout not known" in n for n in i["notes"]),
           i["notes"])
    text = report("info", "t.gmt").stdout
    expect("note:       warning: Python 3.99: interpreter layout not known" in text, text)


def test_layout_table_matches_each_interpreters_headers():
    """preload/pystack.c's offsets are what scripts/py-offsets.sh measures
    from the headers of every interpreter here that has them."""
    root = os.path.dirname(os.path.dirname(HERE))
    with open(os.path.join(root, "preload", "pystack.c")) as f:
        table = " ".join(f.read().split("g_layouts[] = {", 1)[1].split("};", 1)[0].split())
    checked = 0
    for python, ver in interpreters():
        p = subprocess.run([os.path.join(root, "scripts", "py-offsets.sh"), python],
                           capture_output=True, text=True)
        if p.returncode == 2 and "no Python.h" in p.stderr:
            continue  # no headers for this one (a system python without -dev)
        expect(p.returncode == 0, p.stderr)
        row = " ".join(p.stdout.split())
        expect(row in table, f"Python {ver}: measured {row}\nnot in the table:\n{table}")
        checked += 1
    expect(checked >= 1, "no interpreter with headers to check the table against")


def test_growth_through_swings_within_each_step():
    """A site that swings by 10 MiB within every step but keeps 2 MiB per
    step grows; per step of the "step" region, by exactly 2 MiB."""
    python, ver = interpreters()[0]
    app = os.path.join(HERE, "py", "leak_app.py")
    run([python, app], PYALLOC_LIB=prog("libpyalloc.so"), GPUMEMTRACE_OUTPUT="g.gmt")
    L = site_lines(app)
    doc = json.loads(report("growth", "--json", "g.gmt").stdout)["traces"][0]
    sites = {s["site"]: s for s in doc["sites"]}
    site = f"forward (leak_app.py:{L['act']}) > pyalloc_alloc"
    expect(site in sites, f"{site} not among {list(sites)}")
    expect(doc["interval_mark"] == "step" and doc["interval_marks"] == 16, doc)
    expect(sites[site]["rise_per_interval"] == 2 * MiB, sites[site])
