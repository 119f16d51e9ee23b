#!/usr/bin/env python3
"""Step time and memory of PyTorch models traced with the framework
bridge (PyTorch's caching allocator left on, every block recorded with
its Python and native stacks) against the same program untraced.

usage: scripts/bench-framework-gpu.py [--bundle DIR] [--repeats N]
           [--workloads transformer,mlp,gpt2,timm] [--configs traced,...]
           [--pin CPUS] [--json FILE]

Workloads (tests/gpu/torch_models.py): the GPU-bound transformer
(TransformerEncoder 6 x d=1024, batch 16x512, AdamW, fp32), the
launch-bound small MLP (12 x Linear 256, batch 64, Adam, fp32), a
HuggingFace GPT-2 (6 layers, batch 8x512, AdamW) and a timm resnet50
(batch 32, SGD), both under bf16 autocast; gpt2-infer and timm-infer
run inference. NAME:B runs gpt2 or timm at batch B (gpt2:32, timm:128:
GPU-bound). Configurations: baseline (no library) and traced
(LD_PRELOAD=libgpumemtrace.so, default options); for finding where the
time goes, also native (no Python frames), python (no native frames),
nostacks (neither), depth16 (16 native frames) and cacheoff (the old route: PyTorch's cache off,
every tensor a cudaMalloc served by the pool, full stacks). Runs alternate,
REPEATS rounds; each figure is the median step time (warm-up steps
dropped) over the baseline's median from the same invocation, and the
median over rounds of the ratio within a round (the two runs of a round
ran one after the other, so drift between rounds cancels), and
PyTorch's max_memory_reserved / max_memory_allocated traced over
untraced. The bridge is built once before the timed runs. --pin CPUS
runs everything under `taskset -c CPUS` (launch-bound step times move
by up to 20% between unpinned runs on a shared host).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "tests", "gpu", "torch_models.py")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


BUNDLE = os.path.abspath(arg("--bundle", os.path.join(ROOT, ".gpubundle")))
REPEATS = int(arg("--repeats", "3"))
WORKLOADS = arg("--workloads", "transformer,mlp,gpt2,timm").split(",")
JSON_OUT = arg("--json", None)
PIN = arg("--pin", None)
LIB = os.path.join(BUNDLE, "libgpumemtrace.so")
STEPS = {"transformer": 30, "mlp": 300, "gpt2": 30, "timm": 30, "gpt2-infer": 40,
         "timm-infer": 60}
WARMUP = {"transformer": 5, "mlp": 50, "gpt2": 5, "timm": 5, "gpt2-infer": 5, "timm-infer": 10}
BF16 = {"gpt2", "timm", "gpt2-infer", "timm-infer"}
CACHE = tempfile.mkdtemp(prefix="gmt-bridge-")
CONFIGS = {"traced": {}, "native": {"GPUMEMTRACE_PYTHON": "0"},
           "python": {"GPUMEMTRACE_STACK_DEPTH": "0"},
           "nostacks": {"GPUMEMTRACE_PYTHON": "0", "GPUMEMTRACE_STACK_DEPTH": "0"},
           "depth16": {"GPUMEMTRACE_STACK_DEPTH": "16"},
           "cacheoff": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}}
CONFIG_NAMES = arg("--configs", "traced").split(",")


def run(workload, config, tmp):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k not in ("LD_PRELOAD",
                                                             "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    traced = config != "baseline"
    if traced:
        env.update(CONFIGS[config])
        env["LD_PRELOAD"] = LIB
        env["GPUMEMTRACE_OUTPUT"] = os.path.join(tmp, f"{workload}.%p.gmt")
        env["GPUMEMTRACE_CACHE"] = CACHE
    name, _, batch = workload.partition(":")  # gpt2:32 - gpt2 at batch 32
    args = ([] if PIN is None else ["taskset", "-c", PIN]) + [
        sys.executable, APP, name, "--steps", str(STEPS.get(name, 20))]
    if name in BF16:
        args.append("--bf16")
    if batch:
        args += ["--batch", batch]
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{workload} {config} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["step"] = statistics.median(r["step_times"][WARMUP.get(name, 3):])
    r["stderr"] = p.stderr[-500:]
    return r


def main():
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        run("mlp", CONFIG_NAMES[0], tmp)  # builds the bridge into CACHE
        order = ["baseline"] + CONFIG_NAMES
        for w in WORKLOADS:
            runs = {c: [] for c in order}
            for i in range(REPEATS):
                for cfg in order if i % 2 == 0 else order[::-1]:
                    r = run(w, cfg, tmp)
                    runs[cfg].append(r)
                    print(f"  {w} {cfg} {r['step'] * 1e3:.2f} ms", file=sys.stderr, flush=True)
                    for f in os.listdir(tmp):
                        os.unlink(os.path.join(tmp, f))
            base = statistics.median(r["step"] for r in runs["baseline"])
            b0 = runs["baseline"][0]
            for cfg in CONFIG_NAMES:
                med = statistics.median(r["step"] for r in runs[cfg])
                t0 = runs[cfg][0]
                # round i's runs of both sides ran next to each other: the
                # ratio within a round is free of drift between rounds
                pairs = sorted(t["step"] / b["step"] for t, b in zip(runs[cfg], runs["baseline"]))
                results[f"{w}/{cfg}"] = {
                    "baseline_ms": base * 1e3, "traced_ms": med * 1e3, "step_ratio": med / base,
                    "pair_ratio": statistics.median(pairs), "pair_ratios": pairs,
                    "baseline_runs_ms": [r["step"] * 1e3 for r in runs["baseline"]],
                    "traced_runs_ms": [r["step"] * 1e3 for r in runs[cfg]],
                    "reserved_ratio": t0["max_memory_reserved"] / b0["max_memory_reserved"],
                    "allocated_ratio": t0["max_memory_allocated"] / b0["max_memory_allocated"],
                    "baseline_reserved": b0["max_memory_reserved"],
                    "traced_reserved": t0["max_memory_reserved"],
                    "same_result": all(r["result"] == b0["result"]
                                       for r in runs["baseline"] + runs[cfg]),
                    "baseline_results": [r["result"] for r in runs["baseline"]],
                    "traced_results": [r["result"] for r in runs[cfg]],
                }
    print("| workload/config | baseline ms/step | traced ms/step | step time (medians) | "
          "step time (median of rounds, range) | reserved | allocated | same loss |")
    print("|---|---|---|---|---|---|---|---|")
    for w, r in results.items():
        pr = r["pair_ratios"]
        print(f"| {w} | {r['baseline_ms']:.2f} | {r['traced_ms']:.2f} | {r['step_ratio']:.3f} | "
              f"{r['pair_ratio']:.3f} ({pr[0]:.3f}-{pr[-1]:.3f}) | "
              f"{r['reserved_ratio']:.3f} | {r['allocated_ratio']:.3f} | {r['same_result']} |")
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
