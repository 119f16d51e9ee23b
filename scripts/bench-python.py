#!/usr/bin/env python3
"""Cost of Python stacks, on the CPU against the simulated CUDA runtime.

A Python program recurses DEPTH Python frames (a training step is 10-30
deep: loop, model, modules, layers), then calls a CUDA function through
ctypes (which drops the GIL, as PyTorch does) ITERS times. Per call, the
difference with and without the tracer is the cost of recording one event
with: no stacks; native stacks only; native + Python stacks (the default).
Runs alternate, medians of REPEATS, all in this one invocation.

usage: scripts/bench-python.py [BUILD_DIR] [--repeats N] [--depth D] [--iters N]
"""
import os
import statistics
import subprocess
import sys
import tempfile

args = sys.argv[1:]


def opt(name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


if "--child" in args:
    import ctypes
    import time
    lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
    depth, iters = opt("--depth", 20), opt("--iters", 200000)

    def step(n):
        if n > 1:
            return step(n - 1)
        f = lib.pyalloc_set_device
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        return time.perf_counter() - t0

    print(step(depth) / iters * 1e9)
    sys.exit(0)

build = os.path.abspath(next((a for a in args if not a.startswith("-") and not a.isdigit()),
                             "build"))
repeats, depth, iters = opt("--repeats", 7), opt("--depth", 20), opt("--iters", 200000)
LIB = os.path.join(build, "libgpumemtrace.so")
MODES = {
    "no tool": None,
    "no stacks": {"GPUMEMTRACE_STACK_DEPTH": "0", "GPUMEMTRACE_PYTHON": "0"},
    "native stacks": {"GPUMEMTRACE_PYTHON": "0"},
    "Python stacks only": {"GPUMEMTRACE_STACK_DEPTH": "0"},
    "native + Python (default)": {},
}


def once(mode, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")}
    env.pop("LD_PRELOAD", None)
    env["PYALLOC_LIB"] = os.path.join(build, "tests", "libpyalloc.so")
    if MODES[mode] is not None:
        env.update(MODES[mode], LD_PRELOAD=LIB,
                   GPUMEMTRACE_OUTPUT=os.path.join(tmp, "b.%p.gmt"))
    out = subprocess.run([sys.executable, __file__, "--child", "--depth", str(depth),
                          "--iters", str(iters)], env=env, capture_output=True, text=True,
                         check=True).stdout
    return float(out)


with tempfile.TemporaryDirectory() as tmp:
    times = {m: [] for m in MODES}
    for _ in range(repeats):
        for m in MODES:
            times[m].append(once(m, tmp))
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
base = statistics.median(times["no tool"])
print(f"Python {sys.version.split()[0]}, {depth} Python frames deep, {iters} calls, "
      f"median of {repeats}")
print(f"{'mode':28} {'ns/call':>8} {'+ns/event':>10}")
for m in MODES:
    med = statistics.median(times[m])
    print(f"{m:28} {med:8.0f} {med - base:10.0f}")
