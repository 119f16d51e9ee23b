"""A Python program that allocates through the PyTorch stand-in
(build/tests/torch/lib/libc10_cuda.so, tests/sim/torch) as a PyTorch
program allocates tensors, for the tests of gpumemtrace's PyTorch bridge
(tests/e2e/test_framework.py). Calls go through ctypes, which releases
the GIL around them as PyTorch's ops do; each allocation's line carries a
"# SITE name" comment and the test finds the line numbers from these.

What it does, in order (sizes as the stand-in's rules make them; the
segments are what PyTorch's allocator would take):

  first     with --two-devices: two threads make their devices' first
            allocations at about the same time (device 0, then device 1
            0.3 s later, while the first may still be in the library's
            attach), one block each, freed; needs SIM_CUDA_DEVICES=2
  small     4 bytes: a 512-byte block in a new 2 MiB small segment
  mid       3 MiB: carved from a new 20 MiB large segment; freed (the
            segment is whole and free again)
  whole     20 MiB - 0.5 MiB - 100 bytes: takes that free 20 MiB segment
            whole (0.5 MiB left is not worth a split), so the block is
            20 MiB, not the 19.5 MiB the request rounds to
  loop      N times 2 MiB + a little, freed at once (one new 20 MiB segment)
  kept      3 x 5 MiB, from that segment
  scratch   12 MiB: a 12 MiB segment of its own; freed (cached, unsplit)
  worker    with --threads N: N threads allocating and freeing small and
            large blocks at once
  deferred  with --record-stream: a block used on a second stream, freed
            while that stream still runs (its free completes later)
  pooled    with --pool: 3 blocks from a private memory pool {0, 7}
  retention with --retention-line, right after `whole`: a retention
            capture naming its block (see retention_line)
  oom       with --oom MIB: a request that cannot be met (the cached
            segment is given back first, then out of memory)

then frees everything, empties the cache, and prints one JSON object on
stdout with the allocator's own figures for device 0: peak and current
allocated and reserved bytes, event counts, the sizes of the blocks above
as the allocator keeps them, and whether the OOM request failed (with
--two-devices, "dev1": device 1's peaks and counts).

usage: torch_app.py [--lib PATH] [--loop N] [--threads N] [--record-stream]
                    [--pool] [--oom MIB] [--two-devices]
The library: --lib, else $SIM_TORCH_LIB, else $GMT_BUILD (default
../../../build) /tests/torch/lib/libc10_cuda.so.
"""
import argparse
import ctypes
import json
import os
import sys
import threading
import time

MiB = 1 << 20
WHOLE = 20 * MiB - MiB // 2 - 100

ap = argparse.ArgumentParser()
ap.add_argument("--lib")
ap.add_argument("--loop", type=int, default=10)
ap.add_argument("--threads", type=int, default=0)
ap.add_argument("--record-stream", action="store_true")
ap.add_argument("--pool", action="store_true")
ap.add_argument("--oom", type=int, default=0, metavar="MIB")
ap.add_argument("--two-devices", action="store_true")
ap.add_argument("--retention-line", action="store_true")
args = ap.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
build = os.environ.get("GMT_BUILD", os.path.join(here, "..", "..", "..", "build"))
path = args.lib or os.environ.get("SIM_TORCH_LIB") or \
    os.path.join(build, "tests", "torch", "lib", "libc10_cuda.so")
lib = ctypes.CDLL(path)
vp, sz, ull = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulonglong
for name, res, argt in [
        ("sim_torch_init", ctypes.c_int, [ctypes.c_int]),
        ("sim_torch_backend", ctypes.c_char_p, []),
        ("sim_torch_malloc", vp, [sz, vp]),
        ("sim_torch_malloc_pool", vp, [sz, vp, ull, ull]),
        ("sim_torch_free", ctypes.c_int, [vp]),
        ("sim_torch_record_stream", ctypes.c_int, [vp, vp]),
        ("sim_torch_empty_cache", None, []),
        ("sim_torch_release_pool", ctypes.c_int, [ull, ull]),
        ("sim_torch_stats", None, [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]),
        ("sim_torch_counts", None, [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]),
        ("sim_torch_stat", ctypes.c_longlong, [ctypes.c_int, ctypes.c_char_p]),
        ("sim_torch_block_size", sz, [vp]),
        ("sim_torch_stream_create", vp, []),
        ("sim_torch_stream_sleep", ctypes.c_int, [vp, ctypes.c_uint]),
        ("sim_torch_synchronize", ctypes.c_int, []),
        ("sim_torch_set_device", ctypes.c_int, [ctypes.c_int])]:
    fn = getattr(lib, name)
    fn.restype = res
    fn.argtypes = argt

blocks = {}


def first(dev, out):
    lib.sim_torch_set_device(dev)
    if dev:
        time.sleep(0.3)
    out[dev] = lib.sim_torch_malloc(1000, None)  # SITE first


def two_devices():
    out = {}
    threads = [threading.Thread(target=first, args=(d, out)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in (0, 1):
        lib.sim_torch_set_device(d)
        lib.sim_torch_free(out[d])
    lib.sim_torch_set_device(0)
    return all(out.values())


def small():
    p = lib.sim_torch_malloc(4, None)  # SITE small
    blocks["small"] = lib.sim_torch_block_size(p)
    return p


def mid():
    p = lib.sim_torch_malloc(3 * MiB, None)  # SITE mid
    blocks["mid"] = lib.sim_torch_block_size(p)
    lib.sim_torch_free(p)


def retention_line(p):
    """A capture naming the "whole" block, written through the library's
    entry point before the allocator's next event: the bridge says that
    block's real size (the whole segment) only at that event, after it."""
    line = ctypes.CDLL(None).gpumemtrace_retention_line
    line.argtypes = (ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t)
    for text in ["capture\ttest\t1\t1\t1\t0.000\t", f"holder\t{WHOLE}\t1\t__main__.w\t-1",
                 f"block\t{p:x}\t{WHOLE}\t0\t__main__.w"]:
        b = text.encode()
        line(1, b, len(b))


def whole():
    p = lib.sim_torch_malloc(WHOLE, None)  # SITE whole
    blocks["whole"] = lib.sim_torch_block_size(p)
    return p


def loop(n):
    for i in range(n):
        p = lib.sim_torch_malloc(2 * MiB + 4096 * (i % 4), None)  # SITE loop
        lib.sim_torch_free(p)


def keep():
    kept = []
    for _ in range(3):  # a loop, not a comprehension: its own frame before 3.12
        kept.append(lib.sim_torch_malloc(5 * MiB, None))  # SITE kept
    return kept


def scratch():
    p = lib.sim_torch_malloc(12 * MiB, None)  # SITE scratch
    blocks["scratch"] = lib.sim_torch_block_size(p)
    lib.sim_torch_free(p)


def worker(seed, barrier):
    x = seed
    live = []
    barrier.wait()
    for _ in range(200):
        x = (x * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        if len(live) < 6 and x >> 62:
            n = (x >> 20) % (3 * MiB) + 1 if (x >> 40) & 1 else (x >> 20) % 65536 + 1
            p = lib.sim_torch_malloc(n, None)  # SITE worker
            if p:
                live.append(p)
        elif live:
            lib.sim_torch_free(live.pop((x >> 24) % len(live)))
    for p in live:
        lib.sim_torch_free(p)


def deferred():
    s2 = lib.sim_torch_stream_create()
    p = lib.sim_torch_malloc(3000, None)  # SITE deferred
    lib.sim_torch_record_stream(p, s2)
    lib.sim_torch_stream_sleep(s2, 100000)
    lib.sim_torch_free(p)  # completes at a later allocation or empty_cache


def pooled():
    ps = []
    for _ in range(3):
        ps.append(lib.sim_torch_malloc_pool(64 * 1024, None, 0, 7))  # SITE pooled
    for p in ps:
        lib.sim_torch_free(p)
    lib.sim_torch_release_pool(0, 7)


def oom(mib):
    p = lib.sim_torch_malloc(mib * MiB, None)  # SITE oom
    return p is None


def main():
    if lib.sim_torch_init(2 if args.two_devices else 1) != 0:
        sys.exit("sim_torch_init failed")
    result = {"backend": lib.sim_torch_backend().decode()}
    if args.two_devices:
        result["two_devices"] = two_devices()
    a = small()
    mid()
    w = whole()
    if args.retention_line:
        retention_line(w)
    loop(args.loop)
    kept = keep()
    scratch()
    if args.threads:
        barrier = threading.Barrier(args.threads)
        threads = [threading.Thread(target=worker, args=(i + 1, barrier))
                   for i in range(args.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if args.record_stream:
        deferred()
    if args.pool:
        pooled()
    if args.oom:
        result["oom_failed"] = oom(args.oom)
    for p in [a, w] + kept:
        lib.sim_torch_free(p)
    lib.sim_torch_empty_cache()

    st = (ctypes.c_longlong * 4)()
    lib.sim_torch_stats(0, st)
    c = (ctypes.c_longlong * 6)()
    lib.sim_torch_counts(0, c)
    result.update({
        "allocated": st[0], "peak_allocated": st[1],
        "reserved": st[2], "peak_reserved": st[3],
        "allocs": c[0], "frees": c[1], "frees_completed": c[2],
        "segments": c[3], "segment_frees": c[4], "ooms": c[5],
        "peak_requested": lib.sim_torch_stat(0, b"requested_bytes.peak"),
        "blocks": blocks,
    })
    if args.two_devices:
        lib.sim_torch_stats(1, st)
        lib.sim_torch_counts(1, c)
        result["dev1"] = {"peak_allocated": st[1], "peak_reserved": st[3],
                          "allocs": c[0], "segments": c[3]}
    print(json.dumps(result, sort_keys=True))


main()
