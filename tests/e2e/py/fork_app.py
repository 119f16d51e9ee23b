"""Allocates in a parent and in a forked child; prints "parent PID" and
"child PID". The child's trace is a file of its own and must describe the
code objects it uses again."""
import ctypes
import os

lib = ctypes.CDLL(os.environ["PYALLOC_LIB"])
lib.pyalloc_alloc.restype = ctypes.c_uint64
lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]


def before_fork():
    return lib.pyalloc_alloc(1 << 20)  # SITE before_fork


def in_child():
    return lib.pyalloc_alloc(2 << 20)  # SITE in_child


before_fork()
pid = os.fork()
if pid == 0:
    in_child()
    os._exit(0)
os.waitpid(pid, 0)
print("parent", os.getpid())
print("child", pid)
