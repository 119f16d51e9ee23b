"""The CUDA runtime through ctypes: ctypes.CDLL finds
the runtime's functions with dlsym(handle), which used to bypass the
library's hooks and pool. Allocates 1 MiB, sets it, reads it back, frees
it, and leaves 3 MiB allocated; prints one JSON line: the results of the
calls and whether the bytes read back were the ones set.

usage: python3 tests/gpu/ctypes_rt.py
"""
import ctypes
import glob
import json
import os
import sys


def runtime():
    tried = ["libcudart.so.13"]
    for d in sys.path:
        tried += sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudart.so.1*")))
    tried += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so.1*"))
    for name in tried:
        try:
            return ctypes.CDLL(name), name
        except OSError:
            pass
    sys.exit("ctypes_rt: no libcudart found")


def main():
    rt, name = runtime()
    n = 1 << 20
    p, q = ctypes.c_void_p(), ctypes.c_void_p()
    r = {"runtime": name}
    r["malloc"] = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))  # SITE ctypes_malloc
    r["memset"] = rt.cudaMemset(p, 0x5A, ctypes.c_size_t(n))
    buf = ctypes.create_string_buffer(n)
    r["memcpy"] = rt.cudaMemcpy(buf, p, ctypes.c_size_t(n), 2)  # device to host
    r["bytes_ok"] = buf.raw == b"\x5a" * n
    r["leak"] = rt.cudaMalloc(ctypes.byref(q), ctypes.c_size_t(3 * n))  # SITE ctypes_leak
    r["free"] = rt.cudaFree(p)
    print(json.dumps(r))
    return 0 if not any(r[k] for k in ("malloc", "memset", "memcpy", "leak", "free")) \
        and r["bytes_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
