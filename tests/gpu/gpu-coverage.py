#!/usr/bin/env python3
"""What the library sees of each kind of CUDA program, on a GPU: the
coverage table of docs/validation.md (the driver-level observer).

usage: tests/gpu/gpu-coverage.py [--bundle DIR] [--out DIR] [--only a,b]

For each program - tests/gpu/drv_prog.cu built with nvcc's default static
cudart and with -cudart shared; PyTorch with its caching allocator,
uncached, expandable segments and the cudaMallocAsync backend, and under
torch.profiler; CuPy's default memory pool; JAX by default and with
XLA_PYTHON_CLIENT_ALLOCATOR=platform - run it under LD_PRELOAD of the
bundle's library and report: allocations seen by the runtime hooks and by
the driver observer, the trace's peak device bytes against the program's
or framework's own figure, and anomalies (driver calls recorded under a
runtime call = counted twice; warnings from the library). Prints a
Markdown table; writes JSON and every log under --out.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


BUNDLE = os.path.abspath(arg("--bundle", os.path.join(ROOT, ".gpubundle")))
OUT = os.path.abspath(arg("--out", os.environ.get("OUT", "/tmp/gmt-coverage")))
ONLY = arg("--only", None)
LIB = os.path.join(BUNDLE, "libgpumemtrace.so")
REPORT = os.path.join(BUNDLE, "gpumemreport")
FW = os.path.join(ROOT, "tests", "gpu", "frameworks.py")
PY = sys.executable
TORCH_ENV = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF")

CASES = [
    # name, argv, extra env, the framework's figure to compare with (key or None)
    ("nvcc static cudart", ["@static"], {}, "peak"),
    ("nvcc -cudart shared", ["@shared"], {}, "peak"),
    ("PyTorch caching (default)", [PY, FW, "torch"], {}, "max_memory_reserved"),
    ("PyTorch uncached", [PY, FW, "torch"], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
     "max_memory_allocated"),
    ("PyTorch expandable_segments", [PY, FW, "torch"],
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "max_memory_reserved"),
    ("PyTorch backend:cudaMallocAsync", [PY, FW, "torch"],
     {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, "max_memory_reserved"),
    ("PyTorch + torch.profiler", [PY, FW, "torch-profiler"], {}, "max_memory_reserved"),
    ("CuPy default memory pool", [PY, FW, "cupy"], {}, "pool_total_bytes_peak"),
    ("JAX default", [PY, FW, "jax"], {}, "bytes_reserved"),
    ("JAX platform allocator", [PY, FW, "jax"], {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
     "peak_bytes_in_use"),
]


def build(tmp):
    src = os.path.join(ROOT, "tests", "gpu", "drv_prog.cu")
    exe = {"@static": os.path.join(tmp, "drv_static"), "@shared": os.path.join(tmp, "drv_shared")}
    subprocess.run(["nvcc", "-o", exe["@static"], src], check=True)
    subprocess.run(["nvcc", "-cudart", "shared", "-o", exe["@shared"], src], check=True)
    return exe


def json_of(cmd):
    # the report tool finds libdw and friends in the bundle
    env = dict(os.environ, LD_LIBRARY_PATH=BUNDLE)
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True,
                                     env=env).stdout)


def run(name, argv, extra, tmp, traced):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k not in TORCH_ENV and k != "LD_PRELOAD"}
    env.update(extra)
    trace = os.path.join(tmp, name.replace(" ", "_").replace("/", "_") + ".gmt")
    if traced:
        env["LD_PRELOAD"] = LIB
        env["GPUMEMTRACE_OUTPUT"] = trace
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    tag = "traced" if traced else "plain"
    safe = name.replace(" ", "_").replace("/", "_").replace(":", "_").replace("(", "")
    safe = safe.replace(")", "").replace("+", "")
    with open(os.path.join(OUT, f"{safe}.{tag}.log"), "w") as f:
        f.write(f"$ {' '.join(argv)}\nenv: {extra}\nexit {p.returncode}\n--- stdout\n{p.stdout}"
                f"\n--- stderr\n{p.stderr}")
    fig = {}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            fig = json.loads(line)
            break
    return p, fig, trace


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        for name, argv, extra, key in CASES:
            if ONLY and not any(o in name for o in ONLY.split(",")):
                continue
            argv = [exe.get(a, a) for a in argv]
            p, fig, trace = run(name, argv, extra, tmp, True)
            row = {"case": name, "exit": p.returncode, "framework": fig, "key": key}
            if name == "PyTorch + torch.profiler":
                _, plain_fig, _ = run(name, argv, extra, tmp, False)
                row["kernel_events_plain"] = plain_fig.get("cuda_kernel_events")
            warnings = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace")]
            row["library_messages"] = warnings
            if os.path.exists(trace):
                s = json_of([REPORT, "summary", "--json", trace])["traces"][0]
                inf = json_of([REPORT, "info", "--json", trace])[0]
                by_api = inf["by_api"]
                drv = {k: v for k, v in by_api.items() if k.startswith("cu") and
                       not k.startswith("cuda")}
                rt = {k: v for k, v in by_api.items() if k.startswith("cuda")}
                peak = subprocess.run([REPORT, "peak", "--top", "8", trace], capture_output=True,
                                      text=True, env=dict(os.environ, LD_LIBRARY_PATH=BUNDLE))
                with open(os.path.join(OUT, f"{name}.peak.txt".replace(" ", "_")
                                       .replace("/", "_").replace(":", "_").replace("(", "")
                                       .replace(")", "").replace("+", "")), "w") as f:
                    f.write(peak.stdout + peak.stderr)
                row.update(peak_requested=s["peak_requested"], peak_reserved=s["peak_reserved"],
                           allocations=s["allocations"], driver_allocations=s["driver_allocations"],
                           peak_mapped=s["peak_mapped"],
                           pools_peak_reserved=s["pools_peak_reserved"],
                           pools_peak_used=s["pools_peak_used"], by_api=by_api, driver_calls=drv,
                           runtime_calls=rt, pool_segments=inf.get("pool", {}).get("segments"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(OUT, "coverage.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n| program | exit | runtime-hook allocations | driver-observed allocations | "
          "peak device bytes (trace) | framework's figure | other |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rt_allocs = r.get("allocations", 0) - r.get("driver_allocations", 0)
        fw = r["framework"].get(r["key"]) if r["key"] else None
        other = []
        if "kernel_events_plain" in r:
            other.append(f"CUDA kernel events {r['framework'].get('cuda_kernel_events')} "
                         f"(without the tool {r['kernel_events_plain']})")
        copies = sum(v for k, v in r.get("driver_calls", {}).items()
                     if k.startswith(("cuMemcpy", "cuMemset")))
        if copies:
            other.append(f"{copies} driver-level copies/sets")
        if r.get("pools_peak_reserved"):
            other.append(f"stream-ordered pools: peak reserved {r['pools_peak_reserved']}, "
                         f"used {r['pools_peak_used']}")
        if r.get("peak_mapped"):
            other.append(f"peak mapped {r['peak_mapped']}")
        if r["library_messages"]:
            other.append("; ".join(r["library_messages"])[:200])
        print(f"| {r['case']} | {r['exit']} | {rt_allocs} | {r.get('driver_allocations', 0)} | "
              f"{r.get('peak_requested', 'no trace')} | {r['key']}={fw} | {'; '.join(other)} |")


if __name__ == "__main__":
    main()
