#!/usr/bin/env python3
"""Step time and memory of PyTorch training under each allocator, on a GPU.

usage: scripts/bench-pool-gpu.py [--bundle DIR] [--repeats N] [--json FILE]
                                 [--workloads transformer,mlp] [--configs a,b,...]
                                 [--keep DIR] [--pin CPUS] [--steps N]

Workloads (--workloads, default transformer,mlp): from
tests/gpu/torch_train.py the GPU-bound transformer (TransformerEncoder, 6
layers, d=1024, 16 heads, FFN 4096, batch 16x512, AdamW, fp32) and the
launch-bound small MLP (12 x Linear 256 + GELU + LayerNorm, batch 64,
Adam); from tests/gpu/torch_models.py the real models gpt2 (HuggingFace
GPT2LMHeadModel training, bf16 autocast, AdamW), timm (resnet50 training,
fp32, SGD), and their inference gpt2-infer and timm-infer (fp32); tv-vit, bert,
llama and effnet (training, bf16 autocast; see torch_models.py). Configurations:

  baseline       PyTorch's caching allocator, no library
  uncached       PYTORCH_NO_CUDA_MEMORY_CACHING=1, no library
  pool           uncached + libgpumemtrace.so, stacks off
  pool+native    uncached + libgpumemtrace.so, native stacks only (64 frames)
  pool+stacks    uncached + libgpumemtrace.so, the default: native and
                 Python stacks
  pool+vmm       pool with GPUMEMTRACE_POOL_VMM=1: blocks over 1 MiB on
                 virtual memory (2 MiB pages, mappings of up to 16 MiB)
                 that moves between free blocks
  pool+vmm-c8, pool+vmm-c32
                 the same with mappings of up to 8 and 32 MiB
                 (GPUMEMTRACE_POOL_VMM_CHUNK_MB)
  pool+vmm-p4    pages of 4 MiB (GPUMEMTRACE_POOL_VMM_PAGE_MB)
  pool-nofences, pool+stacks-nofences
                 pool, pool+stacks with GPUMEMTRACE_POOL_FENCES=0: freed
                 blocks wait for device-wide synchronizations only
  pool+stacks-nodriver
                 the default without the driver-level observer
                 (GPUMEMTRACE_DRIVER=0): its cost is pool+stacks over this
  expandable     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  expandable+tool  the same under libgpumemtrace.so: the driver observer
                 sees its virtual memory calls
  async          PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  async+tool     the same under libgpumemtrace.so

--define NAME=BASE:KEY=VALUE,... adds a configuration: BASE's environment
plus those variables (then name it in --configs). LD_PRELOAD=PATH there
runs another build of the library: before and after a change, in one run.

Runs alternate between configurations, REPEATS rounds; each figure is the
median step time (warm-up steps dropped) divided by the baseline's, from
the same invocation; "paired" is the median over rounds of each round's
ratio to the baseline run just before it, which cancels the host's drift
between rounds (runs of one configuration moved 10-45% between rounds on
the shared hosts). --steps N: steps per run of the real models (default
15, the first 3 dropped). Memory: peak reserved / peak requested bytes, from
PyTorch's statistics, or for the pool from its trace (live requested bytes
and live segments replayed in order). Also: the pool's device
synchronizations per step, the fences it waited for and recorded per
step and the time it spent waiting (and why fences were off, if they
were), with virtual memory the mappings made and the time in the driver
per step, and the pool core's CPU microbenchmark at 1-16
threads (tests/bench/bench_pool.c, if built in the bundle). --keep DIR
keeps the last trace of each workload and configuration there; --pin
CPUS runs every configuration under `taskset -c CPUS` (the launch-bound
MLP's step time moves by up to 20% between unpinned runs on a shared host).
"""
import json
import re
import shutil
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


BUNDLE = os.path.abspath(arg("--bundle", os.path.join(ROOT, ".gpubundle")))
REPEATS = int(arg("--repeats", "2"))
JSON_OUT = arg("--json", None)
WORKLOADS = arg("--workloads", "transformer,mlp").split(",")
CONFIG_NAMES = arg("--configs", None)
KEEP = arg("--keep", None)  # a folder: keep the last trace of each run there
PIN = arg("--pin", None)    # CPUs for taskset: every run on the same cores
LIB = os.path.join(BUNDLE, "libgpumemtrace.so")
REPORT = os.path.join(BUNDLE, "gpumemreport")
REPORT_ENV = dict(os.environ, LD_LIBRARY_PATH=BUNDLE)  # libdw and friends
TRAIN = os.path.join(ROOT, "tests", "gpu", "torch_train.py")
MODELS = os.path.join(ROOT, "tests", "gpu", "torch_models.py")
STEPS = {"transformer": 25, "mlp": 400}
WARMUP = {"transformer": 5, "mlp": 50}
# the real models: torch_models.py's arguments
MODEL_ARGS = {"gpt2": ["gpt2", "--bf16"], "timm": ["timm"], "gpt2-infer": ["gpt2-infer"],
              "timm-infer": ["timm-infer"], "tv-vit": ["tv-vit", "--bf16"],
              "bert": ["bert", "--bf16"], "llama": ["llama", "--bf16"],
              "effnet": ["effnet", "--bf16"]}
# NAME@N: a real model at batch size N (a larger batch makes the step bound
# by the GPU rather than by the CPU that queues its work)
for _w in WORKLOADS:
    _m, _, _b = _w.partition("@")
    if _b and _m in MODEL_ARGS and _b.isdigit() and int(_b) > 0:
        MODEL_ARGS[_w] = MODEL_ARGS[_m] + ["--batch", _b]
    elif _b:
        sys.exit(f"bench-pool-gpu.py: bad workload {_w!r} (NAME@BATCH of a real model)")
for _w in MODEL_ARGS:
    STEPS[_w], WARMUP[_w] = int(arg("--steps", "15")), 3

CONFIGS = {
    "baseline": ({}, False),
    "uncached": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, False),
    "pool": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0"}, True),
    "pool+native": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_PYTHON": "0"}, True),
    "pool+stacks": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, True),
    "pool+vmm": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0",
                  "GPUMEMTRACE_POOL_VMM": "1"}, True),
    "pool+vmm-c8": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0",
                     "GPUMEMTRACE_POOL_VMM": "1", "GPUMEMTRACE_POOL_VMM_CHUNK_MB": "8"}, True),
    "pool+vmm-c32": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0",
                      "GPUMEMTRACE_POOL_VMM": "1", "GPUMEMTRACE_POOL_VMM_CHUNK_MB": "32"}, True),
    "pool+vmm-p4": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0",
                     "GPUMEMTRACE_POOL_VMM": "1", "GPUMEMTRACE_POOL_VMM_PAGE_MB": "4"}, True),
    "pool-nofences": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "GPUMEMTRACE_STACK_DEPTH": "0",
                       "GPUMEMTRACE_POOL_FENCES": "0"}, True),
    "pool+stacks-nofences": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                              "GPUMEMTRACE_POOL_FENCES": "0"}, True),
    "pool+stacks-nodriver": ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                              "GPUMEMTRACE_DRIVER": "0"}, True),
    "expandable": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
    "expandable+tool": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
    "async": ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, False),
    "async+tool": ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, True),
}


# --define NAME=BASE:KEY=VALUE,KEY=VALUE (repeatable): a configuration of
# BASE's environment plus those variables, for experiments
for i, a in enumerate(sys.argv):
    if a == "--define":
        name, _, rest = sys.argv[i + 1].partition("=") if i + 1 < len(sys.argv) else ("", "", "")
        base, _, kvs = rest.partition(":")
        if not name or base not in CONFIGS or any("=" not in kv for kv in kvs.split(",") if kv):
            sys.exit("bench-pool-gpu: --define wants NAME=BASE:KEY=VALUE,... with BASE one of "
                     + ", ".join(CONFIGS))
        env_base, traced_base = CONFIGS[base]
        CONFIGS[name] = (dict(env_base, **dict(kv.split("=", 1) for kv in kvs.split(",") if kv)),
                         traced_base)

if CONFIG_NAMES:
    CONFIGS = {c: CONFIGS[c] for c in ["baseline"] + [c for c in CONFIG_NAMES.split(",")
                                                     if c != "baseline"]}


def replay(trace):
    """Peak live requested bytes and peak reserved bytes from a trace."""
    out = subprocess.run([REPORT, "dump", "--no-stacks", trace], capture_output=True,
                         text=True, check=True, env=REPORT_ENV).stdout
    live, segs = {}, {}
    req = res = peak_req = peak_res = 0
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) < 6:
            continue
        kind = f[4]
        kv = dict(x.split("=", 1) for x in f[5:] if "=" in x)
        if kind == "alloc" and f[5] == "cudaMalloc" and "->" not in line:
            size = int(kv["size"])
            live[kv["ptr"]] = size
            req += size
            peak_req = max(peak_req, req)
        elif kind == "free_requested" and kv.get("ptr") in live:
            req -= live.pop(kv["ptr"])
        elif kind == "segment_alloc":
            segs[kv["ptr"]] = int(kv["size"])
            res += int(kv["size"])
            peak_res = max(peak_res, res)
        elif kind == "segment_free" and kv.get("ptr") in segs:
            res -= segs.pop(kv["ptr"])
    return peak_req, peak_res


def run(workload, config, tmp):
    env_extra, traced = CONFIGS[config]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")
           and k not in ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD")}
    env.update(env_extra)
    trace = os.path.join(tmp, f"{workload}-{config}-{time.monotonic_ns()}.gmt")
    if traced:  # a --define may name another build's library (before/after)
        env["LD_PRELOAD"] = env_extra.get("LD_PRELOAD", LIB)
        env["GPUMEMTRACE_OUTPUT"] = trace
        env["GPUMEMTRACE_VERBOSE"] = "1"  # the fence counts at exit
    args = ([] if PIN is None else ["taskset", "-c", PIN]) + [sys.executable]
    if workload in MODEL_ARGS:
        args += [MODELS, *MODEL_ARGS[workload], "--steps", str(STEPS[workload])]
    else:
        args += [TRAIN, workload, str(STEPS[workload])]
    if workload == "transformer":
        args.append("--full")
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{workload}/{config} failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["step"] = statistics.median(r["step_times"][WARMUP[workload]:])
    if r.get("launch_times"):  # torch_models.py: until the step's work is queued
        r["launch"] = statistics.median(r["launch_times"][WARMUP[workload]:])
    r.setdefault("losses", r.get("result"))  # torch_models.py: the last loss or a checksum
    if not traced and r.get("max_memory_reserved"):  # PyTorch's own figures
        r["peak_reserved"] = r["max_memory_reserved"]
        r["peak_requested"] = r["requested_bytes.all.peak"]
    if traced:
        info = json.loads(subprocess.run([REPORT, "info", "--json", trace], capture_output=True,
                                         text=True, check=True, env=REPORT_ENV).stdout)[0]
        r["pool_syncs"] = info["pool"]["syncs"]
        r["fence_waits"] = info["pool"].get("fence_waits", 0)
        r["segments_allocated"] = info["pool"]["segments_allocated"]
        m = re.search(r"pool: (\d+) fences recorded, \d+ waited for in ([0-9.]+) ms"
                      r"(; fences off: .*)?", p.stderr)
        r["fences_recorded"] = int(m.group(1)) if m else None
        r["fence_wait_ms"] = float(m.group(2)) if m else None
        r["fences_off"] = m.group(3)[len("; fences off: "):] if m and m.group(3) else None
        m = re.search(r"pool, device 0: .* ([0-9]+) mappings, .* ([0-9.]+) ms in the driver", p.stderr)
        r["driver_ms"] = float(m.group(2)) if m else None
        m = re.search(r"driver ms creating ([0-9.]+), mapping ([0-9.]+), unmapping ([0-9.]+) "
                      r"at once and ([0-9.]+) before waits \((\d+) calls\), giving back ([0-9.]+) "
                      r"\(\d+ calls\); (\d+) waits", p.stderr)
        r["driver_split_ms"] = dict(zip(("create", "map", "unmap", "unmap_before_wait",
                                         "unmaps_before_wait", "destroy", "idle_waits"),
                                        map(float, m.groups()))) if m else None
        m = re.search(r"pool: recording the fences took ([0-9.]+) ms", p.stderr)
        r["fence_record_ms"] = float(m.group(1)) if m else None
        m = re.search(r"hooks: \d+ cudaMalloc calls took ([0-9.]+) ms, \d+ cudaFree calls "
                      r"([0-9.]+) ms", p.stderr)
        r["hook_ms"] = (float(m.group(1)), float(m.group(2))) if m else None
        m = re.search(r"per step after \d+ warm-up steps \(\d+ steps between \"step\" marks\): "
                      r"(\d+) cudaMalloc calls took ([0-9.]+) ms, (\d+) cudaFree calls ([0-9.]+) ms; "
                      r"(\d+) fences recorded in ([0-9.]+) ms(?:, (\d+) event queries)?", p.stderr)
        # (a library before 7ca322a, run with LD_PRELOAD=, counts no queries)
        r["steady"] = dict(zip(("mallocs", "malloc_ms", "frees", "free_ms", "fences",
                                "fence_record_ms", "queries"),
                               (float(g) if g is not None else None for g in m.groups()))) \
            if m else None
        m = re.search(r"ordered reuse: (\d+) fences made", p.stderr)
        r["fences_issued"] = int(m.group(1)) if m else None
        r["peak_requested"], r["peak_reserved"] = replay(trace)
        if KEEP:
            os.makedirs(KEEP, exist_ok=True)
            shutil.move(trace, os.path.join(KEEP, f"{workload}-{config}.gmt"))
            with open(os.path.join(KEEP, f"{workload}-{config}.err"), "w") as f:
                f.write(p.stderr)  # the library's verbose lines
        else:
            os.unlink(trace)
    return r


def main():
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in WORKLOADS:
            runs = {c: [] for c in CONFIGS}
            for _ in range(REPEATS if workload == "transformer" else REPEATS + 1):
                for c in CONFIGS:
                    runs[c].append(run(workload, c, tmp))
                    print(f"  {workload} {c}: {runs[c][-1]['step'] * 1e3:.2f} ms/step",
                          file=sys.stderr, flush=True)
            base = statistics.median(r["step"] for r in runs["baseline"])
            rows = {}
            for c, rs in runs.items():
                step = statistics.median(r["step"] for r in rs)
                row = {"step_ms": step * 1e3, "ratio": step / base,
                       "paired": statistics.median(r["step"] / b["step"]
                                                   for r, b in zip(rs, runs["baseline"])),
                       "runs": [r["step"] * 1e3 for r in rs],
                       "step_times_ms": [[round(t * 1e3, 3) for t in r["step_times"]] for r in rs]}
                if all(r.get("launch") for r in rs):
                    row["launch_ms"] = statistics.median(r["launch"] for r in rs) * 1e3
                last = rs[-1]
                if last.get("peak_requested"):
                    row["peak_requested"] = last["peak_requested"]
                    row["peak_reserved"] = last["peak_reserved"]
                    row["mem_ratio"] = last["peak_reserved"] / last["peak_requested"]
                if "pool_syncs" in last:
                    row["pool_syncs_per_step"] = last["pool_syncs"] / STEPS[workload]
                    row["fence_waits_per_step"] = last["fence_waits"] / STEPS[workload]
                    if last["fences_recorded"] is not None:
                        row["fences_per_step"] = last["fences_recorded"] / STEPS[workload]
                        row["fence_wait_ms_per_step"] = last["fence_wait_ms"] / STEPS[workload]
                    if last["driver_ms"] is not None:
                        row["vmm_driver_ms_per_step"] = last["driver_ms"] / STEPS[workload]
                    if last.get("driver_split_ms"):
                        row["vmm_driver_split_per_step"] = {
                            k: v / STEPS[workload] for k, v in last["driver_split_ms"].items()}
                    row["fences_off"] = last["fences_off"]
                    if last.get("fences_issued") is not None:
                        row["fences_issued_per_step"] = last["fences_issued"] / STEPS[workload]
                    row["segments_allocated_per_step"] = last["segments_allocated"] / STEPS[workload]
                    if last.get("fence_record_ms") is not None:
                        row["fence_record_ms_per_step"] = last["fence_record_ms"] / STEPS[workload]
                    if last.get("steady"):  # per step, warm-up left out
                        row["steady_per_step"] = last["steady"]
                    if last.get("hook_ms"):
                        row["malloc_ms_per_step"] = last["hook_ms"][0] / STEPS[workload]
                        row["free_ms_per_step"] = last["hook_ms"][1] / STEPS[workload]
                row["losses_equal_baseline"] = last["losses"] == runs["baseline"][-1]["losses"]
                rows[c] = row
            results[workload] = rows
            print(f"\n{workload}: baseline {base * 1e3:.2f} ms/step, "
                  f"medians of {REPEATS} alternating runs")
            print("| configuration | step time / baseline | paired | peak reserved / peak requested | "
                  "pool syncs per step | fences waited for / recorded per step |")
            print("|---|---|---|---|---|---|")
            for c, row in rows.items():
                mem = f"{row['mem_ratio']:.3f}" if "mem_ratio" in row else "n/a"
                syncs = f"{row['pool_syncs_per_step']:.2f}" if "pool_syncs_per_step" in row else ""
                fences = ""
                if "fence_waits_per_step" in row:
                    fences = (f"{row['fence_waits_per_step']:.2f} / "
                              f"{row.get('fences_per_step', float('nan')):.2f}")
                    if row.get("fences_off"):
                        fences += f" (off: {row['fences_off']})"
                extra = ""
                if row.get("launch_ms") is not None:  # near the step time: bound by the CPU
                    extra += f" launch {row['launch_ms']:.2f} of {row['step_ms']:.2f} ms,"
                if row.get("fence_wait_ms_per_step") is not None:
                    extra += f" waits {row['fence_wait_ms_per_step']:.2f} ms/step"
                if row.get("vmm_driver_ms_per_step") is not None:
                    extra += (f", {row['segments_allocated_per_step']:.1f} mappings and "
                              f"{row['vmm_driver_ms_per_step']:.2f} ms in the driver per step")
                if row.get("steady_per_step"):
                    st = row["steady_per_step"]
                    extra += (f", per step after warm-up: {st['mallocs']:.0f} cudaMalloc "
                              f"{st['malloc_ms']:.3f} ms, {st['frees']:.0f} cudaFree "
                              f"{st['free_ms']:.3f} ms, {st['fences']:.0f} fences recorded "
                              f"{st['fence_record_ms']:.3f} ms")
                    if st["queries"] is not None:
                        extra += f", {st['queries']:.0f} queries"
                elif row.get("malloc_ms_per_step") is not None:
                    extra += (f", in cudaMalloc {row['malloc_ms_per_step']:.2f} and cudaFree "
                              f"{row['free_ms_per_step']:.2f} ms/step (whole run over steps: "
                              f"the first steps' segment growth included)")
                if row.get("fence_record_ms_per_step") is not None:
                    extra += f" (recording fences {row['fence_record_ms_per_step']:.2f})"
                if row.get("fences_issued_per_step") is not None:
                    extra += f", {row['fences_issued_per_step']:.1f} fences issued (ordered)/step"
                if row.get("vmm_driver_split_per_step"):
                    extra += " (" + ", ".join(f"{k} {v:.2f}" for k, v in
                                              row["vmm_driver_split_per_step"].items()) + ")"
                print(f"| {c} | {row['ratio']:.3f} | {row['paired']:.3f} | {mem} | {syncs} | "
                      f"{fences} |{extra}",
                      flush=True)
    bench = os.path.join(BUNDLE, "bench_pool")
    if os.path.exists(bench):
        print("\npool core, CPU (host-memory upstream): threads, median ns per pair, pairs/s")
        results["bench_pool"] = []
        for n in (1, 2, 4, 8, 16):
            out = subprocess.run([bench, str(n), "2000000"], capture_output=True, text=True).stdout
            f = out.split()
            results["bench_pool"].append({"threads": n, "ns_per_pair": float(f[3]),
                                          "pairs_per_sec": float(f[5])})
            print(f"  {n:2d} threads: {float(f[3]):7.1f} ns/pair, {float(f[5]) / 1e6:6.2f} M pairs/s",
                  flush=True)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
