"""Steps counted per thread: a training-like loop of 12 steps on the main
thread (three 4 MiB activations, a 1 MiB temporary, 1 MiB kept each step:
the leak) while a second thread allocates and frees small blocks at an
irregular pace (2 to 9 at a time, seeded), as a data loader's pinned
copies or a logger's would - interleaved with the steps differently on
every run.

usage: thread_app.py
"""
import ctypes
import os
import random
import threading
import time

MiB = 1 << 20
lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]
lib.pyalloc_free.argtypes = [ctypes.c_uint64]
done = threading.Event()


def background():
    rng = random.Random(7)
    while not done.is_set():
        blocks = [lib.pyalloc_alloc(64 * 1024) for _ in range(rng.randint(2, 9))]  # SITE bg
        for b in blocks:
            lib.pyalloc_free(b)
        time.sleep(rng.random() / 500)


t = threading.Thread(target=background)
t.start()
kept = []
for step in range(12):
    acts = [lib.pyalloc_alloc(4 * MiB) for _ in range(3)]  # SITE act
    tmp = lib.pyalloc_alloc(MiB)  # SITE tmp
    lib.pyalloc_free(tmp)
    kept.append(lib.pyalloc_alloc(MiB))  # SITE leak
    for a in acts:
        lib.pyalloc_free(a)
    time.sleep(0.003)
done.set()
t.join()
print("ok")
