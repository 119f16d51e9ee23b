#!/usr/bin/env python3
"""Run the CPU test suite: unit test binaries, the simulated runtime's self
test, and the end-to-end tests in tests/e2e (functions named test_* in
test_*.py files). Each case runs with a time limit in its own scratch
directory. Prints one line per case and, last, "N passed, N failed".

Cases run in -j N processes at once (default: the CPUs this process may
use, or GMT_TEST_JOBS), forked after the cases are collected, so each
runs as it would alone: its own scratch directory and current directory.
The few that build into the build directory (SERIAL) run first, alone.
GMT_TEST_SCRATCH names a directory for the whole run (tests keep what
several of them read there); it is removed at the end.

usage: tests/run.py [BUILD_DIR] [-k SUBSTRING] [-j N]
"""
import importlib.util
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from itertools import chain

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def binary_cases(build):
    cases = []
    unit_dir = os.path.join(build, "tests", "unit")
    if os.path.isdir(unit_dir):
        for name in sorted(os.listdir(unit_dir)):
            path = os.path.join(unit_dir, name)
            if name.startswith("test_") and os.access(path, os.X_OK) and "." not in name:
                cases.append(("unit/" + name, path))
    selftest = os.path.join(build, "tests", "sim-selftest")
    if os.path.exists(selftest):
        cases.append(("sim/selftest", selftest))
    smoke = os.path.join(build, "tests", "fuzz_smoke")
    if os.path.exists(smoke):
        # the reader under ASan/UBSan: the committed corpus and mutations
        cases.append(("fuzz/smoke", [smoke, os.path.join(HERE, "fuzz", "corpus"), "5000"]))
    smoke = os.path.join(build, "tests", "fuzz_smoke_commands")
    if os.path.exists(smoke):
        # every command in-process on the same corpus (traces) and mutations
        cases.append(("fuzz/smoke_commands", [smoke, os.path.join(HERE, "fuzz", "corpus"), "1000"]))
    smoke = os.path.join(build, "tests", "fuzz_smoke_baseline")
    if os.path.exists(smoke):
        # check's baseline reader (JSON) on its corpus and mutations
        cases.append(("fuzz/smoke_baseline",
                      [smoke, os.path.join(HERE, "fuzz", "corpus_baseline"), "5000"]))
    return cases


def run_binary(path):
    argv = path if isinstance(path, list) else [path]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(os.path.dirname(argv[0]), "..", "..", "sim")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\n{p.stdout}{p.stderr}")


def e2e_cases():
    cases = []
    e2e = os.path.join(HERE, "e2e")
    sys.path.insert(0, e2e)
    for name in sorted(os.listdir(e2e)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(e2e, name))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for attr in sorted(vars(mod)):
            fn = getattr(mod, attr)
            if attr.startswith("test_") and callable(fn):
                cases.append((f"e2e/{name[5:-3]}/{attr[5:]}", fn))
    return cases


def keep_traces(tmp, dest):
    """Copy the traces a case wrote (GMT_TEST_KEEP=DIR): the corpus of
    e2e traces that scripts/compare-outputs.py runs every command on."""
    for dirpath, _, files in os.walk(tmp):
        for f in files:
            if f.endswith(".gmt"):
                os.makedirs(dest, exist_ok=True)
                rel = os.path.relpath(os.path.join(dirpath, f), tmp).replace("/", "_")
                shutil.copyfile(os.path.join(dirpath, f), os.path.join(dest, rel))


def main():
    args = sys.argv[1:]
    pattern = None
    if "-k" in args:
        i = args.index("-k")
        pattern = args[i + 1]
        del args[i:i + 2]
    jobs_arg = None
    if "-j" in args:
        i = args.index("-j")
        jobs_arg = args[i + 1]
        del args[i:i + 2]
    build = os.path.abspath(args[0] if args else os.path.join(ROOT, "build"))
    os.environ["GMT_BUILD"] = build
    cases = [(n, lambda p=p: run_binary(p)) for n, p in binary_cases(build)]
    cases += e2e_cases()
    if pattern:
        cases = [c for c in cases if pattern in c[0]]
    jobs = int(jobs_arg or os.environ.get("GMT_TEST_JOBS") or len(os.sched_getaffinity(0)))
    scratch = tempfile.mkdtemp(prefix="gmt-run-")
    os.environ["GMT_TEST_SCRATCH"] = scratch
    global CASES
    CASES = cases
    passed = failed = 0
    try:
        serial = [i for i, c in enumerate(cases) if c[0].startswith(SERIAL)]
        rest = [i for i in range(len(cases)) if i not in serial]
        # the serial cases end before the others start: a pool begins
        # handing out its cases as soon as it is asked for them
        results = list(map(run_case, serial))
        pool = None
        if jobs > 1 and len(rest) > 1:
            pool = multiprocessing.get_context("fork").Pool(jobs)
            results = chain(results, pool.imap_unordered(run_case, rest))
        else:
            results = chain(results, map(run_case, rest))
        for name, ok, detail, dt in results:
            if ok:
                passed += 1
                print(f"ok    {name} ({dt:.1f}s)", flush=True)
            else:
                failed += 1
                print(f"FAIL  {name} ({dt:.1f}s)", flush=True)
                for line in detail.rstrip().splitlines()[-40:]:
                    print("      " + line, flush=True)
        if pool:
            pool.close()
            pool.join()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


# Cases that build into the build directory the others run from.
SERIAL = ("e2e/fuzz_script/", "e2e/markers/make_install")
CASES = []


def run_case(i):
    """Case i of CASES in a scratch directory of its own: (name, passed,
    what failed, seconds)."""
    name, fn = CASES[i]
    keep = os.environ.get("GMT_TEST_KEEP")
    start_dir = os.getcwd()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gmt-test-") as tmp:
        os.chdir(tmp)
        try:
            fn()
            ok, detail = True, ""
        except Exception:
            ok, detail = False, traceback.format_exc()
        finally:
            os.chdir(start_dir)
            if keep:
                keep_traces(tmp, os.path.join(keep, name.replace("/", "_")))
    return name, ok, detail, time.monotonic() - t0


if __name__ == "__main__":
    sys.exit(main())
