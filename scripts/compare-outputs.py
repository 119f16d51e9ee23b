#!/usr/bin/env python3
"""scripts/compare-outputs.py BEFORE AFTER TRACE_OR_DIR... - every report
command, byte for byte, from two builds of gpumemreport.

BEFORE and AFTER are build directories (or gpumemreport binaries). Each
trace (a .gmt, or a .gmt.xz of tests/corpus/, unpacked to a temporary
directory) goes through every command in its text, --json and --markdown
forms, the exports, html, whatif and check; diff runs on neighbouring
pairs and ranks on each directory given. Standard output, standard error,
the exit status and any file written must be equal; the version string
(it names the git revision) is the one thing masked. A refactoring that
should change no output is shown to by this, on the corpus and on the
e2e tests' traces (GMT_TEST_KEEP=DIR tests/run.py build keeps them).

Prints one line per difference and a count; exit status 1 on any.
  -j N     commands in parallel (default: the CPUs)
  --quick  the text and --json forms only, no dump
"""
import concurrent.futures
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile

COMMANDS = [
    ["summary"], ["summary", "--json"], ["summary", "--markdown"], ["summary", "--bytes"],
    ["peak"], ["peak", "--json"], ["peak", "--group", "stack", "--depth", "4"],
    ["frag"], ["frag", "--json"],
    ["timeline"], ["timeline", "--csv"], ["timeline", "--json"],
    ["leaks"], ["leaks", "--json"], ["leaks", "--markdown"],
    ["growth"], ["growth", "--json"],
    ["phases"], ["phases", "--json"],
    ["transfers"], ["transfers", "--json"],
    ["flamegraph"], ["flamegraph", "--total"], ["flamegraph", "--json"],
    ["info"], ["info", "--json"],
    ["whatif"], ["whatif", "--json"],
    ["check", "--max-peak", "1MiB", "--allow-damaged"],
    ["check", "--max-peak", "1TiB", "--max-leaked", "1GiB", "--json", "--allow-damaged"],
    ["html", "-o", "{out}/page.html"],
    ["export", "--format", "memory-viz", "-o", "{out}/x.pickle"],
    ["export", "--format", "perfetto", "-o", "{out}/x.json"],
    ["export", "--format", "speedscope", "-o", "{out}/x.speedscope"],
    ["export", "--format", "pprof", "-o", "{out}/x.pb.gz"],
]
SLOW = [["dump"]]
QUICK = {"--json"}

VERSION = re.compile(rb"\d+\.\d+\.\d+ \([0-9a-f]{7,}(-dirty)?\)|\([0-9a-f]{7}(-dirty)?\)|unknown")


def binary(p):
    return os.path.join(p, "gpumemreport") if os.path.isdir(p) else p


def run(exe, args, out):
    args = [a.replace("{out}", out) for a in args]
    env = dict(os.environ, GPUMEMREPORT_PROGRESS="0", LC_ALL="C", TZ="UTC")
    try:
        p = subprocess.run([exe] + args, capture_output=True, timeout=600, env=env,
                           stdin=subprocess.DEVNULL)
        got = [p.returncode, VERSION.sub(b"V", p.stdout), VERSION.sub(b"V", p.stderr)]
    except subprocess.TimeoutExpired:
        got = ["timeout", b"", b""]
    for f in sorted(os.listdir(out)):
        with open(os.path.join(out, f), "rb") as fh:
            got.append((f, VERSION.sub(b"V", fh.read())))
        os.unlink(os.path.join(out, f))
    return got


def one(before, after, args, tmp):
    shown = " ".join(args)
    outs = []
    for i, exe in enumerate((before, after)):
        d = tempfile.mkdtemp(dir=tmp)
        # the traces' paths are the same for both: they are the operands
        outs.append(run(exe, args, d))
        shutil.rmtree(d, ignore_errors=True)
    if outs[0] == outs[1]:
        return None
    what = []
    a, b = outs
    if a[0] != b[0]:
        what.append(f"exit {a[0]} vs {b[0]}")
    for name, x, y in (("stdout", a[1], b[1]), ("stderr", a[2], b[2])):
        if x != y:
            what.append(f"{name} differs ({len(x)} vs {len(y)} bytes)")
    if a[3:] != b[3:]:
        what.append("files differ")
    return f"DIFF  {shown}: {'; '.join(what)}"


def main():
    argv = sys.argv[1:]
    jobs = os.cpu_count() or 2
    quick = False
    if "-j" in argv:
        i = argv.index("-j")
        jobs = int(argv[i + 1])
        del argv[i:i + 2]
    if "--quick" in argv:
        quick = True
        argv.remove("--quick")
    if len(argv) < 3:
        sys.exit(__doc__.strip().splitlines()[0])
    before, after = binary(argv[0]), binary(argv[1])
    tmp = tempfile.mkdtemp(prefix="gmt-compare-")
    traces, dirs = [], []
    for p in argv[2:]:
        if os.path.isdir(p):
            dirs.append(p)
            for root, _, files in os.walk(p):
                traces += [os.path.join(root, f) for f in sorted(files)
                           if f.endswith((".gmt", ".gmt.xz"))]
        else:
            traces.append(p)
    plain = []
    for t in traces:
        if t.endswith(".xz"):
            dest = os.path.join(tmp, t.replace("/", "_")[:-3])
            with lzma.open(t) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            plain.append(dest)
        else:
            plain.append(t)
    cmds = COMMANDS if not quick else [c for c in COMMANDS if len(c) == 1 or c[1] in QUICK]
    if not quick:
        cmds = cmds + SLOW
    work = [c + [t] for t in plain for c in cmds]
    work += [["diff", a, b] for a, b in zip(plain, plain[1:])]
    work += [["ranks", d] for d in dirs] + [["ranks", "--json", d] for d in dirs]
    diffs = 0
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for line in ex.map(lambda a: one(before, after, a, tmp), work):
            if line:
                diffs += 1
                print(line, flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(work)} runs on {len(plain)} traces, {diffs} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
