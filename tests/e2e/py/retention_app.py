"""A Python program whose "device" memory is held by references it knows,
for the tests of retention captures (tests/e2e/test_retention_capture.py).

It allocates through the simulated CUDA runtime (libpyalloc.so, by ctypes)
and wraps each allocation in a PyTorch tensor over that memory (the
simulated device is host memory), so the tensors' storages are the
trace's blocks, allocated at the line marked "# SITE alloc":

  __main__.memory   a list of three 4 MiB tensors
  __main__.CACHE    a dict: 'k' -> a 2 MiB tensor, allocated at the line
                    marked "# SITE cache"

Modes (argv[1]):
  exit      nothing more: the capture at exit sees both
  signal    SIGUSR2 to itself (a capture then), memory cleared, exit
  own       the program handles SIGUSR2 itself first, then as `signal`
  mark      gpumemtrace_markers.mark("checkpoint"), memory cleared, exit
  steps     five steps, each keeping one more 1 MiB tensor in
            __main__.kept and marking "step"; memory cleared, exit
  api       gpumemtrace_markers.retention("after load"), memory
            cleared, exit
  libframe  main() keeps a 1 MiB tensor in its local `mine` and hands it
            to a library (tests/e2e/py/libframe/site-packages/steplib.py)
            that asks for a capture with it in a local of its own
Prints "ok" and exits 0.
"""
import ctypes
import os
import signal
import sys
import time

import torch

sys.path.insert(0, os.environ["GMT_PRELOAD_DIR"])
import gpumemtrace_markers as gmt  # noqa: E402

lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = (ctypes.c_uint64,)
MiB = 1 << 20


def tensor_at(p, n):
    buf = (ctypes.c_uint8 * n).from_address(p)
    return torch.frombuffer(buf, dtype=torch.uint8)


def alloc(n):
    return tensor_at(lib.pyalloc_alloc(n), n)  # SITE alloc


def alloc_cache(n):
    return tensor_at(lib.pyalloc_alloc(n), n)  # SITE cache


mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
if mode == "own":
    signal.signal(signal.SIGUSR2, lambda signum, frame: print("own handler"))
memory = [alloc(4 * MiB) for i in range(3)]
CACHE = {"k": alloc_cache(2 * MiB)}
if mode in ("signal", "own"):
    os.kill(os.getpid(), signal.SIGUSR2)
    for i in range(50):  # Python runs the handler at its next safe point
        time.sleep(0.01)
    memory.clear()
elif mode == "mark":
    gmt.mark("checkpoint")
    for i in range(50):  # the capture runs at the next safe point
        time.sleep(0.01)
    memory.clear()
elif mode == "steps":
    kept = []
    for i in range(5):
        kept.append(alloc(MiB))
        gmt.mark("step")
        for j in range(20):
            time.sleep(0.01)
    kept.clear()
    memory.clear()
elif mode == "libframe":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "libframe",
                                    "site-packages"))
    import steplib

    def main():
        mine = alloc(MiB)
        steplib.step(mine)
    main()
elif mode == "api":
    took = gmt.retention("after load")
    memory.clear()
    print("took" if took else "not taken")
print("ok")
