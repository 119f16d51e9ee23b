"""A small Python program with known allocation sites, for the Python
stack tests. Each allocation's line carries a "# SITE name" comment; the
test finds the line numbers from these comments. Allocations go through
ctypes into tests/progs/libs/pyalloc.c (the GIL is released, as in
PyTorch). Sizes in MiB; everything stays allocated until the end unless
noted, so the peak holds all of it."""
import ctypes
import gc
import os
import sys
import threading

MiB = 1 << 20
lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]
lib.pyalloc_free.argtypes = [ctypes.c_uint64]
kept = []


def alloc(n):
    p = lib.pyalloc_alloc(n)  # SITE alloc
    assert p, "allocation failed"
    return p


def inner():
    kept.append(lib.pyalloc_alloc(1 * MiB))  # SITE inner


def outer():
    inner()  # SITE outer


def gen():
    for i in range(2):
        yield lib.pyalloc_alloc(2 * MiB)  # SITE gen


class Model:
    def forward(self):
        kept.append(lib.pyalloc_alloc(4 * MiB))  # SITE forward
        return self


def worker(barrier):
    barrier.wait()
    kept.append(lib.pyalloc_alloc(3 * MiB))  # SITE worker


def dynamic(rounds):
    """Functions made, called and thrown away: their code objects die and
    new ones may take their addresses."""
    for i in range(rounds):
        name = "dyn_a" if i % 2 == 0 else "dyn_b"
        size = 5 if name == "dyn_a" else 6
        ns = {"lib": lib, "MiB": MiB}
        src = f"def {name}():\n    return lib.pyalloc_alloc({size} * MiB)\n"
        exec(compile(src, f"{name}.py", "exec"), ns)
        p = ns[name]()
        lib.pyalloc_free(p)
        del ns
        gc.collect()


def main():
    outer()
    kept.extend(gen())
    Model().forward()
    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=worker, args=(barrier,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept.append(alloc(7 * MiB))
    dynamic(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
    print("ok")


main()
