"""A training-like loop for the tests of growth per step:
weights allocated once, then STEPS steps that each make three 4 MiB
"activations" (freed at the end of the step), a 1 MiB temporary (freed at
once) and, with LEAK > 0, keep LEAK bytes in a list - the classic leak of
keeping a step's output. With --mark each step is a region "step" (as an
NVTX range would be); without it nothing marks the steps.

With --twin, a step is instead two layers alike one op apart, as a
two-layer model's: an input (pre), the layer's output (lin, one line and
one stack for both layers), an activation between them (mid), the layer
again - so lin recurs regularly twice a step - and with LEAK > 0 each
step's activation (LEAK bytes) is kept, as a graph kept alive keeps it.

usage: step_app.py STEPS LEAK [--mark] [--twin]
"""
import ctypes
import os
import sys

MiB = 1 << 20
lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]
lib.pyalloc_free.argtypes = [ctypes.c_uint64]
marks = ctypes.CDLL(None) if "--mark" in sys.argv else None
steps, leak = int(sys.argv[1]), int(sys.argv[2])

weights = [lib.pyalloc_alloc(8 * MiB) for _ in range(2)]  # SITE weights
kept = []


def layer():
    return lib.pyalloc_alloc(64 * 1024)  # SITE lin


if "--twin" in sys.argv:
    for step in range(steps):
        p = lib.pyalloc_alloc(64 * 1024)  # SITE pre
        outs = []
        for i in range(2):
            outs.append(layer())
            if i == 0:
                m = lib.pyalloc_alloc(leak or 4096)  # SITE mid
        for q in [p] + outs:
            lib.pyalloc_free(q)
        if leak:
            kept.append(m)
        else:
            lib.pyalloc_free(m)
    print("ok")
    sys.exit(0)
for step in range(steps):
    if marks:
        marks.gpumemtrace_push(b"step")
    acts = [lib.pyalloc_alloc(4 * MiB) for _ in range(3)]  # SITE act
    tmp = lib.pyalloc_alloc(MiB)  # SITE tmp
    lib.pyalloc_free(tmp)
    if leak:
        kept.append(lib.pyalloc_alloc(leak))  # SITE leak
    for a in acts:
        lib.pyalloc_free(a)
    if marks:
        marks.gpumemtrace_pop()
print("ok")
