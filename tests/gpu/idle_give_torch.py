"""Memory the caching pool holds idle goes to the process's other
allocators on a nearly full card, as it would untraced.

usage: idle_give_torch.py [--cache-off]

PyTorch fills the card but for about 2 GiB with 1 GiB tensors, frees
them and calls torch.cuda.empty_cache(): untraced, the memory is the
driver's again. With --cache-off (PYTORCH_NO_CUDA_MEMORY_CACHING=1 set by
the caller) PyTorch's cudaMalloc and cudaFree go to gpumemtrace's pool,
which then holds the memory idle. Then, on the same card, other
allocators ask for half of it: the driver (cuMemAlloc through ctypes) and
CuPy (cudaMallocAsync and cudaMallocManaged through its runtime), each
freed after. Prints one line per request - its size and whether it was
served - the same traced as untraced, then "ok" when all were.
"""
import ctypes
import sys

import torch


def fill():
    held = []
    while torch.cuda.mem_get_info()[0] > 3 << 30:
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    n = len(held)
    del held
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return n


def driver(size):
    cu = ctypes.CDLL("libcuda.so.1")
    p = ctypes.c_uint64(0)
    r = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
    if r == 0:
        r = cu.cuMemFree_v2(p)
    return r


def cupy_calls(size):
    try:
        import cupy
    except ImportError:
        return {}
    rt = cupy.cuda.runtime
    out = {}
    for name, alloc, free in (
            ("cupy mallocAsync", lambda: rt.mallocAsync(size, 0), lambda p: rt.freeAsync(p, 0)),
            ("cupy mallocManaged", lambda: rt.mallocManaged(size, 1), rt.free)):
        try:
            p = alloc()
            free(p)
            rt.deviceSynchronize()
            out[name] = 0
        except Exception as e:  # a CUDARuntimeError says out of memory
            out[name] = str(e).split(":")[0]
    return out


def main():
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    n = fill()
    half = (total // 2) & ~((1 << 21) - 1)
    print(f"filled {n} GiB and freed it")
    results = {"cuMemAlloc": driver(half)}
    results.update(cupy_calls(half))
    for k, v in results.items():
        print(f"{k} {half >> 20} MiB: {'served' if v == 0 else 'failed ' + str(v)}")
    print("ok" if all(v == 0 for v in results.values()) else "FAILED")
    return 0 if all(v == 0 for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
