#!/usr/bin/env python3
"""Recording cost of libgpumemtrace.so on the CPU, against the simulated
CUDA runtime (tests/sim). Targets: per-event cost <= 100 ns with
stacks off and <= 1 us with 32-frame stacks (medians, one thread); <= 16
bytes per event on an alloc/free/copy mix; >= 1M events/s from 16 threads
with nothing lost.

Every figure is a ratio or difference of runs made side by side in this
one invocation (with and without the tracer, alternating), medians of
REPEATS runs.

usage: scripts/bench-record.py [BUILD_DIR] [--repeats N] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

build = os.path.abspath(next((a for a in sys.argv[1:] if not a.startswith("-")
                              and not a.isdigit() and not a.endswith(".json")), "build"))
repeats = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 7
json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
BENCH = os.path.join(build, "tests", "bench")
LIB = os.path.join(build, "libgpumemtrace.so")
REPORT = os.path.join(build, "gpumemreport")


def run(args, traced, depth=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")}
    env.pop("LD_PRELOAD", None)
    if traced:
        env["LD_PRELOAD"] = LIB
        if depth is not None:
            env["GPUMEMTRACE_STACK_DEPTH"] = str(depth)
    out = subprocess.run([BENCH, *map(str, args)], env=env, cwd=cwd, capture_output=True,
                         text=True, check=True).stdout.split()
    return dict(zip(out[::2], map(float, out[1::2])))


def median_cost(workload, iters, depth_frames, stack_depth):
    """Median ns per iteration without the tracer and with it, alternating."""
    plain, traced = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            plain.append(run([workload, 1, iters, depth_frames], False, cwd=tmp)["ns_per_iter"])
            traced.append(run([workload, 1, iters, depth_frames], True, stack_depth, cwd=tmp)["ns_per_iter"])
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
    return statistics.median(plain), statistics.median(traced)


def trace_size(workload, iters):
    with tempfile.TemporaryDirectory() as tmp:
        run([workload, 1, iters, 40], True, cwd=tmp)
        path = os.path.join(tmp, os.listdir(tmp)[0])
        info = json.loads(subprocess.run([REPORT, "info", "--json", path], capture_output=True,
                                         text=True, check=True).stdout)[0]
        with open(path, "rb") as f:
            data = f.read()
        chunk = int.from_bytes(data[32:36], "little")
        used = sum(int.from_bytes(data[off + 4:off + 8], "little") - 32
                   for off in range(4096, len(data), chunk)
                   if data[off:off + 4] == b"GMTC")
        return info["events"], info["records"], used, len(data)


def throughput(threads, pairs, stack_depth):
    with tempfile.TemporaryDirectory() as tmp:
        rates = []
        for _ in range(max(3, repeats // 2)):
            r = run(["allocfree", threads, pairs, 8], True, stack_depth, cwd=tmp)
            path = os.path.join(tmp, os.listdir(tmp)[0])
            info = json.loads(subprocess.run([REPORT, "info", "--json", path], capture_output=True,
                                             text=True, check=True).stdout)[0]
            lost = threads * pairs * 2 + 1 - info["events"]  # + the warm-up call
            rates.append((r["events_per_sec"], lost))
            os.unlink(path)
        return statistics.median(r for r, _ in rates), max(l for _, l in rates)


def main():
    results = {}
    rows = []
    for workload, iters, per in (("setdevice", 2_000_000, 1), ("allocfree", 500_000, 2)):
        for label, sd in (("stacks off", 0), ("32-frame stacks", 32)):
            plain, traced = median_cost(workload, iters, 40, sd)
            cost = (traced - plain) / per
            results[f"{workload}/{label}"] = {"plain_ns_per_iter": plain, "traced_ns_per_iter": traced,
                                              "cost_ns_per_event": cost, "ratio": traced / plain}
            rows.append(f"| {workload} | {label} | {plain:.0f} | {traced:.0f} | {traced / plain:.2f}x | {cost:.0f} ns |")
    events, records, used, size = trace_size("mix", 200_000)
    results["mix/size"] = {"events": events, "records": records, "record_bytes": used,
                           "file_bytes": size, "bytes_per_event": used / events,
                           "file_bytes_per_event": size / events}
    for threads, sd in ((16, 0), (16, 64)):
        rate, lost = throughput(threads, 50_000, sd)
        results[f"threads{threads}/stacks{sd}"] = {"events_per_sec": rate, "lost": lost}
    print(f"recording cost, one thread, medians of {repeats} alternating runs "
          f"(simulated runtime; the program's stack is 40+ frames deep)\n")
    print("| workload | stacks | ns/iter without | ns/iter with | ratio | cost per event |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    s = results["mix/size"]
    print(f"\ntrace size, alloc/copy/set/free mix: {s['events']} events, "
          f"{s['bytes_per_event']:.2f} record bytes per event, "
          f"{s['file_bytes_per_event']:.2f} file bytes per event (definitions, headers and "
          f"unused chunk space included)")
    for k in ("threads16/stacks0", "threads16/stacks64"):
        print(f"{k}: {results[k]['events_per_sec'] / 1e6:.2f} M events/s in total, "
              f"{results[k]['lost']} events lost")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
