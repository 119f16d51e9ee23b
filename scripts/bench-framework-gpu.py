#!/usr/bin/env python3
"""Step time and memory of PyTorch models traced with the framework
bridge (PyTorch's caching allocator left on, every block recorded with
its Python and native stacks) against the same program untraced.

usage: scripts/bench-framework-gpu.py [--bundle DIR] [--repeats N]
           [--workloads transformer,mlp,gpt2,timm] [--json FILE]

Workloads (tests/gpu/torch_models.py): the GPU-bound transformer
(TransformerEncoder 6 x d=1024, batch 16x512, AdamW, fp32), the
launch-bound small MLP (12 x Linear 256, batch 64, Adam, fp32), a
HuggingFace GPT-2 (6 layers, batch 8x512, AdamW) and a timm resnet50
(batch 32, SGD), both under bf16 autocast; gpt2-infer and timm-infer
run inference. Configurations: baseline (no library) and traced
(LD_PRELOAD=libgpumemtrace.so, default options). Runs alternate,
REPEATS rounds; each figure is the median step time (warm-up steps
dropped) over the baseline's median from the same invocation, and
PyTorch's max_memory_reserved / max_memory_allocated traced over
untraced. The bridge is built once before the timed runs.
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
LIB = os.path.join(BUNDLE, "libgpumemtrace.so")
STEPS = {"transformer": 30, "mlp": 300, "gpt2": 30, "timm": 30, "gpt2-infer": 40,
         "timm-infer": 60}
WARMUP = {"transformer": 5, "mlp": 50, "gpt2": 5, "timm": 5, "gpt2-infer": 5, "timm-infer": 10}
BF16 = {"gpt2", "timm", "gpt2-infer", "timm-infer"}
CACHE = tempfile.mkdtemp(prefix="gmt-bridge-")


def run(workload, traced, tmp):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k not in ("LD_PRELOAD",
                                                             "PYTORCH_NO_CUDA_MEMORY_CACHING")}
    if traced:
        env["LD_PRELOAD"] = LIB
        env["GPUMEMTRACE_OUTPUT"] = os.path.join(tmp, f"{workload}.%p.gmt")
        env["GPUMEMTRACE_CACHE"] = CACHE
    args = [sys.executable, APP, workload, "--steps", str(STEPS.get(workload, 20))]
    if workload in BF16:
        args.append("--bf16")
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{workload} traced={traced} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["step"] = statistics.median(r["step_times"][WARMUP.get(workload, 3):])
    r["stderr"] = p.stderr[-500:]
    return r


def main():
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        run("mlp", True, tmp)  # builds the bridge into CACHE
        for w in WORKLOADS:
            runs = {"baseline": [], "traced": []}
            for i in range(REPEATS):
                for cfg in ("baseline", "traced") if i % 2 == 0 else ("traced", "baseline"):
                    r = run(w, cfg == "traced", tmp)
                    runs[cfg].append(r)
                    print(f"  {w} {cfg} {r['step'] * 1e3:.2f} ms", file=sys.stderr, flush=True)
                    for f in os.listdir(tmp):
                        os.unlink(os.path.join(tmp, f))
            base = statistics.median(r["step"] for r in runs["baseline"])
            traced = statistics.median(r["step"] for r in runs["traced"])
            b0, t0 = runs["baseline"][0], runs["traced"][0]
            results[w] = {
                "baseline_ms": base * 1e3, "traced_ms": traced * 1e3, "step_ratio": traced / base,
                "baseline_runs_ms": [r["step"] * 1e3 for r in runs["baseline"]],
                "traced_runs_ms": [r["step"] * 1e3 for r in runs["traced"]],
                "reserved_ratio": t0["max_memory_reserved"] / b0["max_memory_reserved"],
                "allocated_ratio": t0["max_memory_allocated"] / b0["max_memory_allocated"],
                "baseline_reserved": b0["max_memory_reserved"],
                "traced_reserved": t0["max_memory_reserved"],
                "same_result": all(r["result"] == b0["result"] for r in runs["baseline"] + runs["traced"]),
            }
    print("| workload | baseline ms/step | traced ms/step | step time | reserved | allocated | same loss |")
    print("|---|---|---|---|---|---|---|")
    for w, r in results.items():
        print(f"| {w} | {r['baseline_ms']:.2f} | {r['traced_ms']:.2f} | {r['step_ratio']:.3f} | "
              f"{r['reserved_ratio']:.3f} | {r['allocated_ratio']:.3f} | {r['same_result']} |")
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
