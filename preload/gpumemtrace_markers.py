"""Phase markers for gpumemtrace, from Python.

When the program runs under libgpumemtrace.so (LD_PRELOAD, or the
gpumemtrace launcher), these record markers in its trace, which
`gpumemreport phases` and `gpumemreport growth` report on. Without the
library they do nothing and cost a function call. Pure Python (ctypes),
no dependencies: `make install` puts it where python3 imports from;
else copy this file next to your script, or put preload/ on sys.path.

    import gpumemtrace_markers as gmt

    for batch in loader:
        gmt.mark("step")                 # each step: mark to next mark
        with gmt.phase("forward"):       # a region: push .. pop
            loss = model(batch)
        with gmt.phase("backward"):
            loss.backward()

    @gmt.phase("evaluate")               # also a decorator
    def evaluate(): ...

    gmt.retention("after eval")          # which objects hold the tensors now

Names are str (UTF-8) or bytes, at most 256 bytes recorded. Regions are
per thread: push and pop on the same thread. The calls never take or
release the GIL themselves (ctypes releases it around the call, and the
library takes no lock of Python's), and never raise. retention() is the
exception to the first: it walks the program's objects on the calling
thread, holding the GIL, and `gpumemreport retention` shows what it found.

The library itself is reached through the process's global symbols:
    ctypes.CDLL(None).gpumemtrace_mark(b"step")
"""
import ctypes
import functools

__all__ = ["mark", "push", "pop", "phase", "active", "loaded", "retention"]


def _bind():
    try:
        lib = ctypes.CDLL(None)
        fns = lib.gpumemtrace_mark, lib.gpumemtrace_push, lib.gpumemtrace_pop, \
            lib.gpumemtrace_active
    except (OSError, AttributeError):
        return None
    for f in fns[:2]:
        f.argtypes, f.restype = [ctypes.c_char_p], None
    fns[2].argtypes, fns[2].restype = [], None
    fns[3].argtypes, fns[3].restype = [], ctypes.c_int
    return fns


_fns = _bind()


def _bind_retention():
    # PyDLL, not CDLL: the walk runs Python code, so the GIL stays held
    try:
        f = ctypes.PyDLL(None).gpumemtrace_retention_now
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = [ctypes.c_char_p], ctypes.c_int
    return f


_retention = _bind_retention()


def _name(name):
    if isinstance(name, bytes):
        return name
    return str(name).encode("utf-8", "replace")


def loaded():
    """True when libgpumemtrace.so is in this process."""
    return _fns is not None


def active():
    """True when this process is recording a trace (starts tracing if the
    library is loaded and tracing has not started yet)."""
    return bool(_fns and _fns[3]())


def mark(name):
    """A moment: each mark of a name runs to its next mark (or the end)."""
    if _fns:
        _fns[0](_name(name))


def push(name):
    """Open a region on this thread, until the matching pop()."""
    if _fns:
        _fns[1](_name(name))


def pop():
    """Close this thread's innermost region."""
    if _fns:
        _fns[2]()


class phase:
    """A region as a context manager or a decorator."""

    def __init__(self, name):
        self._name = _name(name)

    def __enter__(self):
        if _fns:
            _fns[1](self._name)
        return self

    def __exit__(self, *exc):
        if _fns:
            _fns[2]()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


def retention(reason="marker"):
    """Record now which objects keep the CUDA tensors alive: the chains of
    references from the program's globals and frames to them, and the
    bytes each holder retains (`gpumemreport retention TRACE`). Takes as
    long as walking every object takes (about a second a million); True
    when a capture was recorded. Works without GPUMEMTRACE_RETENTION; with
    it, `all` there counts CPU tensors too."""
    if _retention is None or not active():
        return False
    try:
        return bool(_retention(_name(reason)))
    except Exception:
        return False
