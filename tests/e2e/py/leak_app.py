"""A training-like loop that keeps one of each step's buffers: every step
allocates six 2 MiB "activations" at one line and frees five of them at the
end of the step, so the site's live bytes swing by 10 MiB within a step
while only 2 MiB per step is kept. The growth report must still flag it.
Steps are pushed as regions named "step" (as NVTX ranges would be)."""
import ctypes
import os
import time

MiB = 1 << 20
lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]
lib.pyalloc_free.argtypes = [ctypes.c_uint64]
mark = ctypes.CDLL(None)
kept = []


def forward():
    outs = []
    for _ in range(6):
        outs.append(lib.pyalloc_alloc(2 * MiB))  # SITE act
    return outs


for step in range(16):
    mark.gpumemtrace_push(b"step")
    outs = forward()
    time.sleep(0.004)
    kept.append(outs[-1])  # the un-detached output
    for p in outs[:-1]:
        lib.pyalloc_free(p)
    time.sleep(0.002)
    mark.gpumemtrace_pop()
print("ok")
