"""A Python program whose "device" memory is held by references it knows,
for the tests of retention captures (tests/e2e/test_retention_capture.py).

It allocates through the simulated CUDA runtime (libpyalloc.so, by ctypes)
and wraps each allocation in a PyTorch tensor over that memory (the
simulated device is host memory), so the tensors' storages are the
trace's blocks, allocated at the line marked "# SITE alloc":

  __main__.memory   a list of three 4 MiB tensors
  __main__.CACHE    a dict: 'k' -> a 2 MiB tensor

Modes (argv[1]):
  exit      nothing more: the capture at exit sees both
  signal    SIGUSR2 to itself (a capture then), memory cleared, exit
  own       the program handles SIGUSR2 itself first, then as `signal`
Prints "ok" and exits 0.
"""
import ctypes
import os
import signal
import sys
import time

import torch

lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = (ctypes.c_uint64,)
MiB = 1 << 20


def alloc(n):
    p = lib.pyalloc_alloc(n)  # SITE alloc
    buf = (ctypes.c_uint8 * n).from_address(p)
    return torch.frombuffer(buf, dtype=torch.uint8)


mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
if mode == "own":
    signal.signal(signal.SIGUSR2, lambda signum, frame: print("own handler"))
memory = [alloc(4 * MiB) for i in range(3)]
CACHE = {"k": alloc(2 * MiB)}
if mode in ("signal", "own"):
    os.kill(os.getpid(), signal.SIGUSR2)
    for i in range(50):  # Python runs the handler at its next safe point
        time.sleep(0.01)
    memory.clear()
print("ok")
