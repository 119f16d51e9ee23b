#!/usr/bin/env python3
"""The Python-stack proof on a GPU (each allocation's Python line in the
trace), run by hand from the repository root:

    tests/gpu/gpu_lines_check.py BUNDLE OUTDIR

1. `gpumemtrace -- python tests/gpu/torch_lines.py 6`: the launcher routes
   PyTorch's allocations to the pool (every tensor visible), Python stacks
   are on by default. The peak table must name lines of torch_lines.py -
   attention, feed-forward, the optimizer's state - with the op beneath.
2. The same with --leak: the growth report must flag a line of the model
   (the un-detached outputs kept each step hold their activations).
3. NVTX ranges of the script become markers: `gpumemreport phases`.
Writes every report under OUTDIR; prints PASS/FAIL lines and figures.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLE, OUT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
LAUNCHER = os.path.join(BUNDLE, "gpumemtrace")
REPORT = os.path.join(BUNDLE, "gpumemreport")
SCRIPT = os.path.join(ROOT, "tests", "gpu", "torch_lines.py")
failed = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failed.append(what)


def lines():
    found = {}
    for no, text in enumerate(open(SCRIPT), 1):
        m = re.search(r"# LINE (\w+)", text)
        if m:
            found[m.group(1)] = no
    return found


def traced(name, *args):
    os.makedirs(os.path.join(OUT, name), exist_ok=True)
    pattern = os.path.join(OUT, name, "t.%p.gmt")
    p = subprocess.run([LAUNCHER, "-o", pattern, "--", sys.executable, SCRIPT, *args],
                       capture_output=True, text=True)
    open(os.path.join(OUT, name, "stdout"), "w").write(p.stdout)
    open(os.path.join(OUT, name, "stderr"), "w").write(p.stderr)
    check(p.returncode == 0, f"{name}: launcher exit {p.returncode}")
    traces = sorted(f for f in os.listdir(os.path.join(OUT, name)) if f.endswith(".gmt"))
    check(len(traces) == 1, f"{name}: one trace ({traces})")
    print(p.stderr.strip().splitlines()[-3:] if p.stderr.strip() else "", flush=True)
    return os.path.join(OUT, name, traces[0]), json.loads(p.stdout.strip().splitlines()[-1])


def report(name, *args):
    p = subprocess.run([REPORT, *args], capture_output=True, text=True)
    open(os.path.join(OUT, name), "w").write(p.stdout + p.stderr)
    return p.stdout


L = lines()
trace, run = traced("lines", "6")
print(report("peak.txt", "peak", "--top", "20", trace))
report("peak-stack.txt", "peak", "--group", "stack", "--depth", "4", "--top", "10", trace)
report("summary.txt", "summary", trace)
info = json.loads(report("info.json", "info", "--json", trace))[0]
print("notes:", info.get("notes"))
check(info["features"] & 2, "Python stacks recorded")
peak = json.loads(report("peak.json", "peak", "--json", "--top", "0", trace))["traces"][0]
named = {}
for s in peak["sites"]:
    m = re.match(r".*?\(torch_lines\.py:(\d+)\)", s["site"])
    if m:
        line = int(m.group(1))
        name = next((k for k, v in L.items() if v == line), f"line {line}")
        named[name] = named.get(name, 0) + s["bytes"]
total = peak["peak_requested"]
print(f"peak requested {total} B; by line of torch_lines.py:")
for k, v in sorted(named.items(), key=lambda kv: -kv[1]):
    print(f"  {k:14} {v / 2**20:10.1f} MiB  {100 * v / total:5.1f}%")
check(any(k.startswith("attn") for k in named), "peak names an attention line")
check(any(k.startswith("ffn") for k in named), "peak names a feed-forward line")
check("opt_step" in named, "peak names the optimizer step (its state)")
ops = [s["site"] for s in peak["sites"] if "torch_lines.py" in s["site"] and " > " in s["site"]]
check(len(ops) > 0, f"sites carry the op beneath ({ops[:3]})")
print(report("phases.txt", "phases", trace))

trace, run = traced("leak", "6", "--leak")
growth = json.loads(report("growth.json", "growth", "--json", trace))["traces"][0]
print(report("growth.txt", "growth", trace))
model_lines = [s for s in growth["sites"] if "torch_lines.py" in s["site"]]
check(len(model_lines) > 0, f"growth flags lines of the model: "
      f"{[s['site'] for s in model_lines[:4]]}")
print("FAILED: " + "; ".join(failed) if failed else "ALL PASSED")
sys.exit(1 if failed else 0)
