"""A Python program that runs out of memory through the PyTorch stand-in
(build/tests/torch/lib/libc10_cuda.so), for the tests of what the report
says at an out-of-memory event (tests/e2e/test_report_oom.py). Each
allocation's line carries a "# SITE name" comment; the test finds the
line numbers from these.

What it does, in order:

  peak      2 x 40 MiB, held 0.5 s, then freed and the cache emptied:
            the run's peak, long gone by the out-of-memory event
  held      2 x 10 MiB, kept: what is live at the event
  mark      gpumemtrace_mark("before_oom") (the library's, preloaded)
  oom       a request of OOM_MIB (default 200) MiB, more than the
            simulated device has (SIM_CUDA_MEM=128M): PyTorch's
            allocator frees its cache, retries and raises out of memory

then frees what it held and prints one JSON object: whether the request
failed, and the allocator's own out-of-memory count.

usage: oom_app.py [OOM_MIB]   (the library: $SIM_TORCH_LIB)
"""
import ctypes
import json
import os
import sys
import time

MiB = 1 << 20
lib = ctypes.CDLL(os.environ["SIM_TORCH_LIB"])
vp, sz = ctypes.c_void_p, ctypes.c_size_t
for name, res, argt in [
        ("sim_torch_init", ctypes.c_int, [ctypes.c_int]),
        ("sim_torch_malloc", vp, [sz, vp]),
        ("sim_torch_free", ctypes.c_int, [vp]),
        ("sim_torch_empty_cache", None, []),
        ("sim_torch_counts", None, [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)])]:
    fn = getattr(lib, name)
    fn.restype = res
    fn.argtypes = argt
oom_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def peak():
    ps = []
    for _ in range(2):
        ps.append(lib.sim_torch_malloc(40 * MiB, None))  # SITE peak
    time.sleep(0.5)
    for p in ps:
        lib.sim_torch_free(p)
    lib.sim_torch_empty_cache()


def held():
    ps = []
    for _ in range(2):
        ps.append(lib.sim_torch_malloc(10 * MiB, None))  # SITE held
    return ps


def oom():
    p = lib.sim_torch_malloc(oom_mib * MiB, None)  # SITE oom
    return p is None


def main():
    if lib.sim_torch_init(1) != 0:
        sys.exit("sim_torch_init failed")
    peak()
    kept = held()
    ctypes.CDLL(None).gpumemtrace_mark(b"before_oom")
    failed = oom()
    for p in kept:
        lib.sim_torch_free(p)
    c = (ctypes.c_longlong * 6)()
    lib.sim_torch_counts(0, c)
    print(json.dumps({"oom_failed": failed, "ooms": c[5]}))


main()
