#!/usr/bin/env python3
"""Compare what a GPU program says it did with what its trace says.

usage:
  gpu_check.py calls PROGRAM_OUTPUT TRACE
      PROGRAM_OUTPUT is what tests/gpu/gpu_calls printed: per-entry-point
      and per-kind counts and the bytes it allocated with cudaMalloc.
  gpu_check.py torch CACHED_JSON TRACE
      CACHED_JSON is torch_train.py's output from a run with PyTorch's
      caching allocator (no tracer); TRACE is the trace of the same
      program run with PYTORCH_NO_CUDA_MEMORY_CACHING=1, where every tensor
      allocation is a cudaMalloc of its requested size.

Prints a JSON summary line and exits 1 if a check failed.
"""
import json
import os
import subprocess
import sys

REPORT = os.environ.get("GPUMEMREPORT", "gpumemreport")


def info(trace):
    out = subprocess.run([REPORT, "info", "--json", trace], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)[0]


def check_calls(prog_out, trace):
    want_api, want_kind, want_bytes = {}, {}, None
    for line in open(prog_out):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "api":
            want_api[parts[1]] = int(parts[2])
        elif len(parts) == 3 and parts[0] == "kind":
            want_kind[parts[1]] = int(parts[2])
        elif len(parts) == 2 and parts[0] == "bytes_allocated":
            want_bytes = int(parts[1])
    got = info(trace)
    pool_kinds = {"segment_alloc", "segment_free", "free_completed", "sample", "oom_state"}
    kinds = {k: v for k, v in got["by_kind"].items() if v and k not in pool_kinds}
    result = {
        "check": "calls",
        "entry_points": len(want_api),
        "events": got["events"],
        "api_match": got["by_api"] == want_api,
        "kind_match": kinds == want_kind,
        "cudaMalloc_bytes_trace": got["bytes_by_api"].get("cudaMalloc"),
        "cudaMalloc_bytes_program": want_bytes,
        "devices": got["devices"],
        "closed": got["closed"],
    }
    if not result["api_match"]:
        result["api_trace"], result["api_program"] = got["by_api"], want_api
    if not result["kind_match"]:
        result["kind_trace"], result["kind_program"] = kinds, want_kind
    ok = (result["api_match"] and result["kind_match"] and got["closed"]
          and result["cudaMalloc_bytes_trace"] == want_bytes)
    return ok, result


def check_torch(cached_json, trace):
    cached = json.loads(open(cached_json).read().strip().splitlines()[-1])
    got = info(trace)
    mallocs = got["by_api"].get("cudaMalloc", 0) - got["by_kind"].get("oom", 0)
    frees = got["by_api"].get("cudaFree", 0)
    result = {
        "check": "torch",
        "steps": cached["steps"],
        "trace_cudaMalloc": mallocs,
        "torch_allocations": cached["alloc_count"],
        "trace_cudaMalloc_bytes": got["bytes_by_api"].get("cudaMalloc", 0),
        "torch_requested_bytes": cached["requested_bytes"],
        "trace_cudaFree": frees,
        "torch_frees": cached["free_count"],
        "events": got["events"],
        "stacks": got["stacks"],
        "closed": got["closed"],
    }
    ok = (mallocs == cached["alloc_count"]
          and result["trace_cudaMalloc_bytes"] == cached["requested_bytes"]
          and got["closed"])
    return ok, result


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("calls", "torch"):
        print(__doc__, file=sys.stderr)
        return 2
    fn = check_calls if sys.argv[1] == "calls" else check_torch
    ok, result = fn(sys.argv[2], sys.argv[3])
    result["ok"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
