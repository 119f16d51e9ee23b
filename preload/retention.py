"""Who keeps this GPU memory alive: a walk of the traced process's own
Python object graph, from its roots to every tensor storage, run at a
chosen moment (exit, a signal, a marker) under the GIL.

The library execs this file's source in a fresh namespace and calls
capture(reason, emit). The walk answers, for every storage, what a heap
analyzer's "path to GC roots" and "retained size" do:

  - the shortest chain of references from a root (a module global, a local
    of a live frame) to the tensor that owns it: a breadth-first walk, roots
    in a fixed order, first discovery wins, so chains are short and the same
    from one capture to the next. The program's own references come first:
    the walk follows the plain ones (gc's referents: attributes, items,
    closures) as far as they go before it takes an autograd edge, so a
    parameter is model.fc.weight even when a kept graph also saves it;
  - its holder: the object nearest a root that every chain to the storage
    passes through (its highest dominator below the roots), and so what the
    holder's bytes are: one list that keeps 2,000 autograd graphs alive is
    one holder of their total, not 2,000 lines;
  - and inside a holder, the collection that keeps it (its lowest
    dominator that is a list, tuple, deque, set or dict of the program's,
    not an object's __dict__ or an nn.Module's own tables): the list a
    forward hook closes over inside the model, an optimizer's state. Such
    nested holders come with what they dominate too; siblings under one
    more collection are that one (opt.state, not one line per parameter);
    a nested holder must keep 2 storages or 1% of its top-level holder.

Edges are gc.get_referents() plus what it does not show, the autograd
edges: a tensor's .grad_fn, ._base and .grad, an autograd node's saved
tensors (every _saved_* attribute, which unpacks what the node saved, a
tuple of them included), its .next_functions and an AccumulateGrad's
.variable. Objects no root reaches but that gc.get_objects() lists are
sorted the way the collector would: kept by a reference from outside
Python objects (C, C++), or garbage in a reference cycle that the next
collection frees.

Records go to emit(line), one per call, fields separated by TAB (the C side
writes each as one trace record; docs/trace-format.md):

  capture  reason, objects walked, storages, holder lines, seconds, bound
  holder   retained bytes, storages, chain, the index of the top-level
           holder it lies in (-1: it is one)
  block    data_ptr (hex), bytes, index of its top-level holder or -1, chain

Holder lines: the top-level holders, largest first, each followed by its
nested holders, largest first; an index is among the capture's holder
lines. A chain is its steps joined by \\x1f: "__main__.memory", "[3]",
".grad_fn", "._saved_self". The bound is "" when the walk finished, else
what cut it: "objects", "seconds", "depth", or "error: ..." (capture never
raises).

What the walk must not do, since it runs inside the program it measures:
allocate device memory (it only reads tensor attributes, never creates or
copies a tensor), run the program's code (no repr, hash or getattr on
arbitrary objects: ids key every table, only builtin types are repr'd, and
torch's __torch_function__ overrides are off while it runs; but a graph
recorded under saved_tensors_hooks gives its saved tensors through the
program's unpack hook), collect
garbage (gc is off during the walk, as it was or on again after), or keep
anything alive afterwards (no reference cycles in its own state; a function
frame's f_locals snapshot, which CPython before 3.13 keeps on the frame, is
emptied again).

Fast enough to run on a large heap: the walk expands a batch of up to 4096
nodes with a few maps in C (referents, ids, the set of ids met) and loops
in Python only per storage and per autograd node; nodes are integers in
compact arrays. A million tracked objects take 1.5-2.5 s on a 2-core VM
(the dominators, the nested holders: a tenth of it); untracked containers
(a dict of ints) cost nothing, they hold no tensor.
"""
import gc
import sys
import time
import types
import _thread
from array import array
from bisect import bisect_right
from collections import deque
from heapq import heapify, heappop, heappush
from itertools import accumulate, chain, compress, repeat
from operator import and_, eq, is_, ne, not_

CYCLE = "unreachable cycle (gc would free it)"
OUTSIDE = "held outside Python (no path from a module or frame)"
LINE_MAX = 8000   # bytes in one record, the C side's limit
STEP_MAX = 500    # characters in one step
KEY_MAX = 60      # characters of a dict key's repr

# What a node's type says about walking it. LEAF: never expanded.
_PLAIN, _TENSOR, _NODE, _LEAF = 0, 1, 2, 3

_NO_TRACE_CLEAR = sys.version_info >= (3, 13)  # f_locals is a proxy there
_ModuleType = types.ModuleType
_FunctionType = types.FunctionType
_Descriptors = (types.GetSetDescriptorType, types.MemberDescriptorType)
_type_mro = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_type_module = type.__dict__["__module__"].__get__
_ATOMS = (str, int, float, bool, bytes, complex, type(None))
_COLLECTIONS = (list, tuple, deque, set, frozenset, dict)
_GEN_FRAME = {types.GeneratorType: "gi_frame", types.CoroutineType: "cr_frame",
              types.AsyncGeneratorType: "ag_frame"}


class _Storage:
    """A storage's node: a tensor's edge leads to it, nothing leads out."""
    __slots__ = ()


class _Walk:
    """The walk's state. Nodes are integers in the order found (objs is
    also the breadth-first queue): objs[i] is the object, parent[i] the node
    that found it (-1 for a root), and node i's edges are the ids in
    adj[start[i]:start[i + 1]] (its plain ones) and in xadj.get(i) (the
    autograd edges of a tensor or an autograd node). seen holds the id of
    every object met, node or not (the objects never entered: modules,
    what the collector says is alive but no root reaches). Edges are kept as ids, not node
    numbers: a set of ids is the cheapest way to tell new from met, and
    only the few nodes that reach a storage need a number later. Nothing
    here refers back to the walk, so it all goes when capture returns."""
    __slots__ = ("objs", "seen", "phase", "parent", "start", "adj", "roots", "vroots",
                 "elabel", "storage", "sindex", "kinds", "saved", "tensor", "module",
                 "device", "untyped", "memo", "clear", "deadline", "max_objects",
                 "max_depth", "cut", "tracing", "probes", "pending", "xadj",
                 "colls")

    def __init__(self):
        self.objs = []
        self.seen = set()
        self.phase = None    # after the roots' walk: the ids of this phase's nodes
        self.parent = array("i")
        self.start = array("i")
        self.adj = array("Q")
        self.xadj = {}       # node -> ids its autograd edges lead to
        self.pending = []    # this round's tensors and nodes, autograd edges to come
        self.cut = False
        self.roots = {}      # node -> tuple of the root's steps
        self.vroots = []     # the roots the dominators start from
        self.elabel = {}     # node -> its step, when found by an autograd edge
        self.storage = {}    # storage node -> (data_ptr, bytes)
        self.sindex = {}     # data_ptr -> storage node
        self.kinds = {_Storage: _LEAF}
        self.colls = {}      # type -> whether it is a collection (_nested)
        self.saved = {}      # autograd node type -> its _saved_* names
        self.memo = {}       # node -> {id(child): step} of a large container
        self.clear = []      # f_locals snapshots to empty after the walk


def capture(reason, emit, device="cuda", max_objects=5_000_000, max_seconds=20.0,
            max_depth=200):
    """Walk the object graph and emit the capture, holder and block lines.
    Returns nothing and never raises: a failure is a capture line whose
    bound is "error: ..."."""
    t0 = time.monotonic()
    stats = [0, 0, 0]
    gc_on = gc.isenabled()
    interval = None
    lines = ()
    try:
        try:
            interval = sys.getswitchinterval()
        except BaseException:
            interval = None
        gc.disable()
        if interval is not None:
            # other threads would mutate the graph under the walk if it let
            # the GIL go every 5 ms; and a thread that does get it must give
            # it back within a second (a waiting thread asks only after an
            # interval), so not longer
            sys.setswitchinterval(max(interval, 1.0))
        lines = _capture(reason, emit, device, int(max_objects), float(max_seconds),
                         int(max_depth), t0, stats)
    except BaseException as e:
        lines = [_capture_line(reason, stats, t0, "error: " + _error_text(e))]
    finally:
        if interval is not None:
            try:
                sys.setswitchinterval(interval)
            except BaseException:
                pass
        if gc_on:
            gc.enable()
    try:
        for line in lines:
            emit(line)
    except BaseException:
        pass


def _capture(reason, emit, device, max_objects, max_seconds, max_depth, t0, stats):
    torch = sys.modules.get("torch")
    tensor = _vars(torch).get("Tensor") if torch is not None else None
    if not isinstance(tensor, type):
        # torch never imported (or half imported): there are no tensors
        return [_capture_line(reason, stats, t0, "")]
    W = _Walk()
    W.tensor = tensor
    W.device = None if device == "all" else str(device)
    W.untyped = _has(tensor, "untyped_storage")  # torch >= 2.0; storage() warns there
    mod = _vars(sys.modules.get("torch.nn.modules.module")).get("Module")
    W.module = mod if isinstance(mod, type) else None
    W.deadline = t0 + max_seconds
    W.max_objects = max_objects
    W.max_depth = max_depth
    W.probes = _probes()
    C = _vars(torch).get("_C")
    off = getattr(C, "DisableTorchFunction", None) if C is not None else None
    try:
        if off is not None:
            with off():
                return _run(W, reason, emit, t0, stats)
        return _run(W, reason, emit, t0, stats)
    finally:
        _forget_locals(W)


def _run(W, reason, emit, t0, stats):
    bound = _roots(W, emit)
    if not bound:
        bound = _bfs(W, 0)
    _fill(W)
    if not bound:
        bound = _unreachable(W)
        _fill(W)
    stats[0] = len(W.objs) - len(W.storage)
    stats[1] = len(W.storage)
    holders, blocks = _retained(W)
    stats[2] = len(holders)
    lines = [_capture_line(reason, stats, t0, bound)]
    for steps, nbytes, count, h in holders:
        lines.append(_line(("holder", str(nbytes), str(count)), steps, str(h)))
    for ptr, nbytes, h, steps in blocks:
        lines.append(_line(("block", "%x" % ptr, str(nbytes), str(h)), steps))
    return lines


# --- roots ---------------------------------------------------------------

def _roots(W, emit):
    """Seed the walk: first the objects it must never enter (modules, whose
    globals are roots of their own, their dicts, sys.modules, this walker's
    namespace and emit), then module globals sorted by module and name,
    then the locals of every thread's frames, innermost first."""
    own = _capture.__globals__
    mods = []
    for name, m in list(sys.modules.items()):
        if not issubclass(type(m), _ModuleType):
            continue
        d = _instance_dict(m)
        _skip(W, m)
        if d is not None:
            _skip(W, d)
            if type(name) is str and name != "builtins" and d is not own:
                mods.append((name, id(m), d))
    for o in (sys.modules, own, emit, own.get("_BOOT_NS")):
        if o is not None:
            _skip(W, o)
    mods.sort(key=_first)
    first = len(W.objs)
    seen = set()
    for name, mid, d in mods:
        if mid in seen:
            continue
        seen.add(mid)
        items = [(k, v) for k, v in list(dict.items(d))
                 if not (type(k) is str and k == "__builtins__")]
        items.sort(key=_item_order)
        for k, v in items:
            _seed(W, v, name + "." + k if type(k) is str else "%s[%s]" % (name, _key_text(W, k)))
    th = _vars(sys.modules.get("threading"))
    W.tracing = (sys.gettrace() is not None or sys.getprofile() is not None
                 or th.get("_trace_hook") is not None or th.get("_profile_hook") is not None)
    frames = sys._current_frames()
    me = _thread.get_ident()
    # the frames of the code that asked for this capture (the bootstrap's
    # hooks: its namespace is said in ours) are not the program's
    boot = own.get("_BOOT_NS")
    stacks = []
    for tid in sorted(frames, key=lambda t: (t != me, t)):
        f = frames[tid]
        while f is not None:
            if f.f_globals is not own and f.f_globals is not boot:
                stacks.append(f)
            f = f.f_back
    # the program's own frames before its libraries' (a capture at an
    # optimizer step runs inside torch's step(): the program's `opt` is a
    # local of its loop, and of torch's wrapper as `self`)
    for lib in (False, True):
        for f in stacks:
            if _library_frame(f) is lib:
                _seed_frame(W, f)
    frames = stacks = f = boot = None
    W.vroots = list(range(first, len(W.objs)))
    if W.cut:
        return "objects"
    if time.monotonic() > W.deadline:
        return "seconds"
    return ""


_LIBRARY_DIRS = ("/site-packages/", "/dist-packages/")


def _library_frame(f):
    """Is f a frame of an installed package or of Python's own library
    (rather than of the program)?"""
    name = f.f_code.co_filename
    if name.startswith("<"):
        return name.startswith("<frozen")
    if any(d in name for d in _LIBRARY_DIRS):
        return True
    std = _STDLIB
    return std is not None and name.startswith(std)


def _stdlib_dir():
    try:
        import sysconfig
        return sysconfig.get_paths()["stdlib"].rstrip("/") + "/"
    except BaseException:
        return None


_STDLIB = _stdlib_dir()


def _seed_frame(W, f):
    code = f.f_code
    func = getattr(code, "co_qualname", None) or code.co_name
    where = "%s (%s:%s) local " % (func, code.co_filename.rsplit("/", 1)[-1],
                                   f.f_lineno if f.f_lineno is not None else "?")
    loc = _frame_locals(W, f)
    if loc is None:
        return
    for k, v in list(loc.items()):
        _seed(W, v, where + (k if type(k) is str else _key_text(W, k)))


def _frame_locals(W, f):
    """f.f_locals, remembering a function frame's snapshot dict (CPython
    before 3.13 keeps it on the frame, holding the values it had now) so
    that _forget_locals empties it. Not while a Python tracer runs: a trace
    function's return writes that dict back into the frame."""
    loc = f.f_locals
    if (not _NO_TRACE_CLEAR and type(loc) is dict and f.f_code.co_flags & 1
            and not W.tracing and f.f_trace is None):
        W.clear.append(loc)
    return loc


def _forget_locals(W):
    for d in W.clear:
        try:
            d.clear()
        except BaseException:
            pass
    W.clear = []


def _seed(W, v, label):
    if not gc.is_tracked(v):
        return  # an atom, or a container of atoms: holds no tensor
    k = id(v)
    if k in W.seen:
        return  # first root wins
    if len(W.objs) >= W.max_objects:
        W.cut = True
        return
    W.seen.add(k)
    W.roots[len(W.objs)] = (label,)
    W.objs.append(v)
    W.parent.append(-1)


def _skip(W, o):
    """o is met but never entered: edges to it lead nowhere."""
    W.seen.add(id(o))


def _fill(W):
    """Empty edge ranges for the nodes a cut walk left unexpanded."""
    missing = len(W.objs) - len(W.start)
    if missing > 0:
        W.start.extend(repeat(len(W.adj), missing))


# --- the walk --------------------------------------------------------------

def _bfs(W, i):
    """Breadth-first from node i on, in rounds: a round walks the plain
    references (gc's referents, a tensor's storage) level by level; then
    the autograd edges of the tensors and nodes it met find the next
    round's nodes. So a chain takes as few autograd edges as it can, then
    as few steps: a parameter is named by its module even when a kept
    graph reaches it too. Returns the bound that cut it, or ""."""
    while True:
        bound = _round(W, i)
        if bound:
            return bound
        i = len(W.objs)
        pending = W.pending
        W.pending = []
        for p in pending:
            _autograd(W, p)
        if len(W.objs) == i:
            return ""
        if len(W.objs) > W.max_objects:
            return "objects"


def _round(W, i):
    """One round's plain walk from node i on, in node order, a batch of
    one level's nodes at a time (max_depth counts a round's levels)."""
    objs = W.objs
    kget = W.kinds.get
    start = W.start
    adj = W.adj
    level = 1
    level_end = len(objs)
    while i < len(objs):
        if i >= level_end:
            level += 1
            level_end = len(objs)
            if level >= W.max_depth:
                bound = _deeper(W, i)
                if bound:
                    return bound  # else the rest adds edges, no nodes
        if time.monotonic() > W.deadline:
            return "seconds"
        end = min(level_end, i + 4096)
        kl = list(map(kget, map(type, objs[i:end])))
        if None in kl:
            for x in compress(range(len(kl)), map(is_, kl, repeat(None))):
                kl[x] = _kind(W, type(objs[i + x]))
        x = i
        for y in compress(range(i, end), kl):  # the tensors, nodes and leaves
            if y > x:
                _plain(W, x, y)
            start.append(len(adj))
            if kl[y - i] != _LEAF:
                adj.extend(_special(W, y, objs[y], kl[y - i]))
            x = y + 1
        if end > x:
            _plain(W, x, end)
        i = end
        if len(objs) > W.max_objects:
            return "objects"
    return ""


def _plain(W, lo, hi):
    """Expand nodes lo..hi-1, none a tensor or an autograd node: their
    tracked referents (the untracked are atoms, or containers of atoms)
    are edges, and nodes if new, in the order found. Each step is a map
    over the whole batch: the interpreter itself never loops per object."""
    objs = W.objs
    seen = W.seen
    refs = list(map(list, map(filter, repeat(gc.is_tracked),
                              map(gc.get_referents, objs[lo:hi]))))
    counts = list(map(len, refs))
    flat = list(chain.from_iterable(refs))
    refs = None
    ids = list(map(id, flat))
    have = list(map(seen.__contains__, ids))
    if not all(have):
        new = list(map(not_, have))  # the mask of the first findings
        fids = list(compress(ids, new))
        before = len(seen)
        seen.update(fids)
        if len(seen) - before != len(fids):
            # found twice in this batch: the first finding is its parent
            fresh = list(compress(range(len(ids)), new))
            new = bytearray(len(ids))
            for p in dict(zip(reversed(fids), reversed(fresh))).values():
                new[p] = 1
            fids = list(compress(ids, new))
        objs.extend(compress(flat, new))
        W.parent.extend(compress(chain.from_iterable(map(repeat, range(lo, hi), counts)), new))
        if W.phase is not None:
            W.phase.update(fids)
    adj = W.adj
    if W.phase is None:
        W.start.extend(accumulate(counts[:-1], initial=len(adj)))
        adj.extend(ids)
        return
    # a later phase keeps only the edges among its own nodes
    phase = W.phase
    at = 0
    for c in counts:
        W.start.append(len(adj))
        adj.extend([k for k in ids[at:at + c] if k in phase])
        at += c


def _deeper(W, i):
    """The walk reached max_depth at node i: "depth" if anything lay
    beyond."""
    for o in W.objs[i:]:
        kind = W.kinds.get(type(o))
        if kind == _LEAF:
            continue
        if kind != _PLAIN:
            return "depth"
        for r in gc.get_referents(o):
            if gc.is_tracked(r) and id(r) not in W.seen:
                return "depth"
    return ""


def _kind(W, tp):
    if issubclass(tp, W.tensor):
        kind = _TENSOR
    elif _has(tp, "next_functions") and _has(tp, "register_hook"):
        kind = _NODE  # autograd node, C++ or a custom Function's
    else:
        kind = _PLAIN
    W.kinds[tp] = kind
    return kind


def _special(W, i, o, kind):
    """Expand a tensor or an autograd node over its plain edges: a
    tensor's storage, then its gc referents but the autograd nodes among
    them (a tensor may show its grad_fn to gc: that is an autograd edge,
    named .grad_fn in the next round). Its autograd edges wait for the
    round's end (W.pending). Returns the ids its edges lead to."""
    objs = W.objs
    seen = W.seen
    phase = W.phase
    out = []
    if kind == _TENSOR:
        st = _storage(W, o)
        if st is not None:
            j = W.sindex.get(st[0])
            if j is None:
                j = len(objs)
                objs.append(_Storage())
                W.parent.append(i)
                W.sindex[st[0]] = j
                W.storage[j] = st
                W.elabel[j] = ""
                if phase is not None:
                    phase.add(id(objs[j]))
            k = id(objs[j])
            if phase is None or k in phase:
                out.append(k)
    kget = W.kinds.get
    for r in gc.get_referents(o):
        if not gc.is_tracked(r):
            continue
        kr = kget(type(r))
        if kr is None:
            kr = _kind(W, type(r))
        if kr == _NODE:
            continue
        k = id(r)
        if k not in seen:
            seen.add(k)
            objs.append(r)
            W.parent.append(i)
            if phase is not None:
                phase.add(k)
        if phase is None or k in phase:
            out.append(k)
    W.pending.append(i)
    return out


def _autograd(W, i):
    """Node i's autograd edges (labelled now: unpacking a saved tensor
    makes a new object each time, so they cannot be matched later), kept
    apart from its plain edges in W.xadj."""
    objs = W.objs
    seen = W.seen
    phase = W.phase
    o = objs[i]
    edges = _tensor_edges(o) if W.kinds.get(type(o)) == _TENSOR else _node_edges(W, o)
    out = []
    for label, r in edges:
        k = id(r)
        if k not in seen:
            seen.add(k)
            W.elabel[len(objs)] = label
            objs.append(r)
            W.parent.append(i)
            if phase is not None:
                phase.add(k)
        if phase is None or k in phase:
            out.append(k)
    if out:
        W.xadj[i] = out


def _storage(W, t):
    """(data_ptr, bytes) of the storage under t, or None: another device,
    no storage (meta, sparse, wrapper subclasses), or empty."""
    try:
        if W.device is not None and t.device.type != W.device:
            return None
        s = t.untyped_storage() if W.untyped else t.storage()
        ptr = s.data_ptr()
        try:
            nbytes = s.nbytes()
        except Exception:
            nbytes = s.size() * t.element_size()
    except Exception:
        return None
    if not ptr or nbytes <= 0:
        return None
    return (ptr, nbytes)


def _tensor_edges(t):
    out = []
    for name in ("grad_fn", "_base"):
        try:
            v = getattr(t, name)
        except Exception:
            continue
        if v is not None:
            out.append(("." + name, v))
    try:
        # .grad of a non-leaf warns unless it retains its grad
        if t.is_leaf or getattr(t, "retains_grad", False):
            g = t.grad
            if g is not None:
                out.append((".grad", g))
    except Exception:
        pass
    return out


def _node_edges(W, node):
    tp = type(node)
    names = W.saved.get(tp)
    if names is None:
        try:
            d = dir(node)
        except Exception:
            d = []
        names = [a for a in d if a.startswith("_saved_")]
        # the saved variables (those with a _raw_saved_ twin) hold
        # tensors; the other _saved_ fields are sizes, dims and flags
        raw = {a[4:] for a in d if a.startswith("_raw_saved_")}
        if raw:
            names = [a for a in names if a in raw]
        if _has(tp, "saved_tensors"):
            names.append("saved_tensors")  # a custom Function's ctx
        W.saved[tp] = names
    out = []
    tensor = W.tensor
    for name in names:
        try:
            v = getattr(node, name)
        except Exception:
            # freed by backward: a backward releases all of a node's saved
            # variables at once, and each refusal costs PyTorch an error
            # with its message (0.6 ms on PyTorch 1.13)
            break
        if issubclass(type(v), tensor):
            out.append(("." + name, v))
        elif type(v) in (tuple, list):
            for x, e in enumerate(v):
                if issubclass(type(e), tensor):
                    out.append((".%s[%d]" % (name, x), e))
    try:
        for x, pair in enumerate(node.next_functions):
            if pair[0] is not None:
                out.append((".next_functions[%d]" % x, pair[0]))
    except Exception:
        pass
    if _has(tp, "variable"):
        try:
            v = node.variable
            if v is not None:
                out.append((".variable", v))
        except Exception:
            pass
    return out


# --- what no root reaches -----------------------------------------------

def _unreachable(W):
    """Tracked objects the walk did not reach, sorted as the collector
    would: those a reference from outside them keeps (their refcount is
    more than the references among them; C and C++ hold these) and what
    they reach are alive; the rest is garbage. The garbage's source cycles
    (strongly connected components nothing else in the garbage points at)
    become roots that the dominators start from, and the tensors kept from
    outside become roots of their own that no holder owns."""
    seen = W.seen
    everything = gc.get_objects()
    # most captures have no tensor the roots missed: then nothing to sort
    types_ = list(map(type, everything))
    for tp in set(compress(types_, map(is_, map(W.kinds.get, types_), repeat(None)))):
        _kind(W, tp)
    kl = list(map(W.kinds.get, types_))
    types_ = None
    if all(map(seen.__contains__, map(id, compress(everything, map(eq, kl, repeat(_TENSOR)))))):
        return ""
    U = list(compress(everything, map(not_, map(seen.__contains__, map(id, everything)))))
    everything = kl = None
    U.append([])  # the probe: the same references as U's own, and no more
    rc = [sys.getrefcount(o) for o in U]
    U.pop()
    base = rc.pop()
    ui = {}
    for k, o in enumerate(U):
        ui[id(o)] = k
    uget = ui.get
    inner = [0] * len(U)
    uadj = []
    for k, o in enumerate(U):
        js = [j for j in map(uget, map(id, gc.get_referents(o))) if j is not None]
        for j in js:
            inner[j] += 1
        uadj.append(js)
        if not k & 4095 and time.monotonic() > W.deadline:
            return "seconds"
    alive = bytearray(len(U))
    stack = [k for k in range(len(U)) if rc[k] - base > inner[k]]
    for k in stack:
        alive[k] = 1
    while stack:
        for j in uadj[stack.pop()]:
            if not alive[j]:
                alive[j] = 1
                stack.append(j)
    entries = _source_cycles(uadj, alive)
    kl = list(map(W.kinds.get, map(type, U)))
    outside = list(compress(U, map(and_, alive, map(eq, kl, repeat(_TENSOR)))))
    # the rest of what is alive: never entered (U keeps their ids valid)
    seen.update(map(id, compress(U, map(and_, alive, map(ne, kl, repeat(_TENSOR))))))
    kl = None
    # kept from outside: walked, but not under the dominators' root; then
    # the garbage, each phase with only its own edges
    bound = ""
    for label, found in ((OUTSIDE, outside), (CYCLE, [U[k] for k in entries])):
        first = len(W.objs)
        W.phase = set()
        for o in found:
            if id(o) in seen:
                continue
            j = len(W.objs)
            seen.add(id(o))
            W.phase.add(id(o))
            W.objs.append(o)
            W.parent.append(-1)
            W.roots[j] = (label, _obj_text(W, o))
            if label is CYCLE:
                W.vroots.append(j)
        bound = _bfs(W, first)
        W.phase = None
        if bound:
            break
        _fill(W)
    U = None  # it kept the ids in seen valid until here
    return bound


def _source_cycles(uadj, alive):
    """The first member (in gc.get_objects() order) of every strongly
    connected component of the garbage that no other garbage refers to.
    Tarjan's algorithm, iterative."""
    n = len(uadj)
    num = [-1] * n
    low = [0] * n
    comp = [-1] * n
    onstack = bytearray(n)
    stack = []
    ncomp = 0
    counter = 0
    for s in range(n):
        if alive[s] or num[s] != -1:
            continue
        work = [(s, 0)]
        while work:
            v, e = work[-1]
            if e == 0:
                num[v] = low[v] = counter
                counter += 1
                stack.append(v)
                onstack[v] = 1
            edges = uadj[v]
            while e < len(edges):
                w = edges[e]
                e += 1
                if alive[w]:
                    continue
                if num[w] == -1:
                    work[-1] = (v, e)
                    work.append((w, 0))
                    break
                if onstack[w] and num[w] < low[v]:
                    low[v] = num[w]
            else:
                work.pop()
                if work and low[v] < low[work[-1][0]]:
                    low[work[-1][0]] = low[v]
                if low[v] == num[v]:
                    while True:
                        w = stack.pop()
                        onstack[w] = 0
                        comp[w] = ncomp
                        if w == v:
                            break
                    ncomp += 1
                continue
    entered = bytearray(ncomp)
    for v in range(n):
        if comp[v] < 0:
            continue
        for w in uadj[v]:
            if comp[w] >= 0 and comp[w] != comp[v]:
                entered[comp[w]] = 1
    first = {}
    for v in range(n):
        c = comp[v]
        if c >= 0 and not entered[c] and c not in first:
            first[c] = v
    return sorted(first.values())


# --- holders -------------------------------------------------------------

def _retained(W):
    """Holders and blocks. The graph is cut down to the nodes that reach a
    storage; a virtual root points at the roots; immediate dominators come
    from Cooper, Harvey and Kennedy's iterative algorithm on a reverse
    postorder. A storage's holder is its dominator just below the virtual
    root (itself when two roots reach it); the nested holders inside one
    come from the same dominator tree (_nested). Returns the holders, in
    the order of their lines: (chain, bytes, storages, index of the
    top-level holder or -1), and the blocks: (data_ptr, bytes, index of
    the top-level holder or -1, chain)."""
    objs = W.objs
    n = len(objs)
    if not W.storage:
        return [], []
    adj = W.adj
    xadj = W.xadj
    start = W.start
    start.append(len(adj))
    parent = W.parent
    rel = {}  # id -> node, of the nodes that reach a storage
    for s in W.storage:
        j = s
        while j >= 0 and id(objs[j]) not in rel:
            rel[id(objs[j])] = j
            j = parent[j]
    # whatever has an edge into rel joins it (with the nodes that found
    # it), until nothing changes; one pass over the plain edges in C finds
    # them, a loop over the few nodes with autograd edges the others
    while True:
        hits = bytes(map(rel.__contains__, adj))
        changed = False
        found = []
        p = hits.find(1)
        while p >= 0:
            s = bisect_right(start, p) - 1
            found.append(s)
            p = hits.find(1, start[s + 1])
        for s, ks in xadj.items():
            if any(map(rel.__contains__, ks)):
                found.append(s)
        for s in found:
            if id(objs[s]) not in rel:
                changed = True
                j = s
                while j >= 0 and id(objs[j]) not in rel:
                    rel[id(objs[j])] = j
                    j = parent[j]
        if not changed:
            break
    hits = found = None
    # depth-first from the virtual root: the reverse postorder; a node's
    # plain edges first, then its autograd edges
    seen = bytearray(n)
    succs = {}
    post = []
    for r in W.vroots:
        if id(objs[r]) not in rel or seen[r]:
            continue
        seen[r] = 1
        succ = [rel[k] for k in chain(adj[start[r]:start[r + 1]], xadj.get(r, ())) if k in rel]
        succs[r] = succ
        stack = [(r, iter(succ))]
        while stack:
            v, it = stack[-1]
            for j in it:
                if not seen[j]:
                    seen[j] = 1
                    succ = [rel[k] for k in chain(adj[start[j]:start[j + 1]], xadj.get(j, ()))
                            if k in rel]
                    succs[j] = succ
                    stack.append((j, iter(succ)))
                    break
            else:
                stack.pop()
                post.append(v)
    order = [-1] + post[::-1]
    num = {}
    for x, v in enumerate(order):
        num[v] = x
    preds = [[] for _ in order]
    for r in W.vroots:
        if seen[r]:
            preds[num[r]].append(0)
    for v in post:
        nv = num[v]
        for j in succs[v]:
            preds[num[j]].append(nv)
    succs = None
    N = len(order)
    idom = [-1] * N
    idom[0] = 0
    changed = True
    while changed:
        changed = False
        for b in range(1, N):
            new = -1
            for p in preds[b]:
                if idom[p] == -1:
                    continue
                if new == -1:
                    new = p
                    continue
                x, y = p, new
                while x != y:
                    while x > y:
                        x = idom[x]
                    while y > x:
                        y = idom[y]
                new = x
            if idom[b] != new:
                idom[b] = new
                changed = True
    top = [0] * N
    for b in range(1, N):
        top[b] = b if idom[b] == 0 else top[idom[b]]
    group = _shared_groups(W, order, preds, idom, top)
    preds = None
    # the top-level holders: their bytes
    per = {}
    of = {}
    for s, (ptr, nbytes) in W.storage.items():
        if seen[s]:
            h = top[num[s]]
            of[s] = h
            acc = per.get(h)
            if acc is None:
                per[h] = [nbytes, 1]
            else:
                acc[0] += nbytes
                acc[1] += 1
    inner = _nested(W, order, num, idom, top, per)
    # holders shared by the same top-level holders become one line
    gchain = {}
    for h in list(per):
        g = group.get(h)
        if g is None:
            continue
        key, steps = g
        nbytes, count = per.pop(h)
        inner.pop(h, None)
        acc = per.get(key)
        if acc is None:
            per[key] = [nbytes, count]
            gchain[key] = steps
        else:
            acc[0] += nbytes
            acc[1] += count
    for s_, h in list(of.items()):
        if h in group:
            of[s_] = group[h][0]
    # then their lines, sorted, each followed by the holders inside it
    hl = []
    for h, (nbytes, count) in per.items():
        hl.append((-nbytes, -count, gchain[h] if h in gchain else _chain(W, order[h]), h))
    hl.sort(key=_no_node)
    hidx = {}
    holders = []
    for nb, nc, steps, h in hl:
        hidx[h] = x = len(holders)
        holders.append((steps, -nb, -nc, -1))
        il = [(-nbytes, -count, _chain(W, order[c]), c) for c, (nbytes, count) in inner.get(h, ())]
        il.sort(key=_no_node)
        for inb, inc, isteps, _ in il:
            holders.append((isteps, -inb, -inc, x))
    bl = []
    for s, (ptr, nbytes) in W.storage.items():
        h = hidx.get(of.get(s), -1)
        bl.append((h if h >= 0 else len(holders), -nbytes, _chain(W, s), ptr, h))
    bl.sort(key=_no_ptr)
    blocks = [(ptr, -nb, h, steps) for _, nb, steps, ptr, h in bl]
    return holders, blocks


def _shared_groups(W, order, preds, idom, top):
    """Holders that no root holds alone (a parameter reached from its model
    and from a kept graph: neither letting go would free it), grouped by
    the top-level holders that reach them: a group of two or more is one
    line, "shared by A and B", where each alone would be a line of its
    own. Returns {holder: (group key, chain)}, in dominator-tree numbers;
    a group's key is a number no node has (below 0)."""
    N = len(order)
    shared = [False] * N
    for b in range(1, N):
        shared[b] = idom[b] == 0 and 0 not in preds[b]
    owners = {}
    by = {}
    for b in range(1, N):
        if shared[b]:
            o = _owners_of(owners, preds, top, shared, b, set())
            if len(o) >= 2:
                by.setdefault(o, []).append(b)
    out = {}
    key = -1
    for o, members in by.items():
        if len(members) < 2:
            continue
        key -= 1
        names = sorted(_chain_text(_chain(W, order[t])) for t in o)
        shown = names[:3] + (["%d more" % (len(names) - 3)] if len(names) > 3 else [])
        steps = ["shared by " + ", ".join(shown[:-1]) + " and " + shown[-1]]
        for b in members:
            out[b] = (key, steps)
    return out


def _owners_of(owners, preds, top, shared, b, busy):
    """The top-level holders that reach the shared holder b, through other
    shared ones (memoized in owners; not a closure: a recursive one is a
    cycle only the collector frees, and a walk leaves nothing behind)."""
    got = owners.get(b)
    if got is not None:
        return got
    busy.add(b)
    out = set()
    for p in preds[b]:
        if p == 0:
            continue
        t = top[p]
        if t == b or t in busy:
            continue
        if shared[t]:
            out |= _owners_of(owners, preds, top, shared, t, busy)
        else:
            out.add(t)
    busy.discard(b)
    got = frozenset(out)
    owners[b] = got
    return got


def _chain_text(steps):
    """A chain's steps as one line: attribute and item steps follow the
    step before them, others after an arrow."""
    out = ""
    for t in steps:
        out += t if not out or t[:1] in ".[{" else " -> " + t
    return out


def _nested(W, order, num, idom, top, per):
    """The containers inside the top-level holders that keep tensors: for
    each storage, its lowest dominator that is a collection (_collection)
    below its top-level holder. Where two or more of these lie directly
    under one more collection (Adam's per-parameter state dicts under
    opt.state; a list of the outputs' dicts), that one stands for them,
    deepest first, and is no holder of its own if it is the top-level
    holder. Each keeps what it dominates, and is shown if that is
    at least 2 storages or 1% of its top-level holder's bytes. Returns
    {top-level holder: [(holder, (bytes, storages))]}, in dominator-tree
    numbers."""
    N = len(order)
    objs = W.objs
    tget = W.colls.get
    # low[b]: the nearest collection among b and its dominators, below b's
    # top-level holder; -1 for none (a dominator precedes its nodes)
    low = [-1] * N
    tops = set()  # the top-level holders that are collections themselves
    for b in range(1, N):
        v = order[b]
        c = tget(type(objs[v]))
        if c is None:
            c = _coll_type(W, type(objs[v]))
        c = c and _collection(W, v)
        if idom[b] == 0:
            if c:
                tops.add(b)  # what contains it is not inside it: low stays -1
            continue
        low[b] = b if c else low[idom[b]]
    cands = set()
    for s in W.storage:
        b = num.get(s)
        if b is not None and low[b] >= 0:
            cands.add(low[b])
    # the collections directly above two or more: deepest first (a
    # dominator has the smaller number), each once
    # collections directly above two or more: deepest first (a dominator
    # has the smaller number), each once; a top-level holder that is a
    # collection stands for those directly in it (a list of dicts)
    under = {}
    for c in cands:
        u = low[idom[c]]
        if u < 0 and top[c] in tops:
            u = top[c]
        if u >= 0:
            under.setdefault(u, set()).add(c)
    heap = [-u for u, cs in under.items() if len(cs) >= 2]
    heapify(heap)
    done = set()
    while heap:
        u = -heappop(heap)
        if u in done:
            continue
        done.add(u)
        cands.difference_update(under[u])
        if u in tops:
            continue
        cands.add(u)
        w = low[idom[u]]
        if w < 0 and top[u] in tops:
            w = top[u]
        if w >= 0:
            g = under.setdefault(w, set())
            g.add(u)
            if len(g) >= 2:
                heappush(heap, -w)
    if not cands:
        return {}
    acc = {}
    for s, (ptr, nbytes) in W.storage.items():
        b = num.get(s)
        c = low[b] if b is not None else -1
        while c >= 0:
            if c in cands:
                a = acc.get(c)
                if a is None:
                    acc[c] = [nbytes, 1]
                else:
                    a[0] += nbytes
                    a[1] += 1
            c = low[idom[c]]
    out = {}
    for c, (nbytes, count) in acc.items():
        h = top[c]
        if count >= 2 or nbytes * 100 >= per[h][0]:
            out.setdefault(h, []).append((c, (nbytes, count)))
    return out


def _coll_type(W, tp):
    c = issubclass(tp, _COLLECTIONS)
    W.colls[tp] = c
    return c


def _collection(W, v):
    """Whether node v, a list, tuple, deque, set or dict, is a collection
    of the program's rather than a part of an object: not an object's
    __dict__, a type's or a function's tuple or dict (bases, closure,
    defaults), nor an nn.Module's own tables (_parameters, _buffers,
    _modules, its hooks). What found it tells: an object's only referrer
    is its owner."""
    p = W.parent[v]
    if p < 0:
        return True
    o = W.objs[v]
    po = W.objs[p]
    ptp = type(po)
    if ptp is _FunctionType or issubclass(ptp, type):
        return False
    if not issubclass(type(o), dict):
        return True
    if o is _instance_dict(po):
        return False
    if W.module is None:
        return True
    if issubclass(ptp, W.module):
        d, a = _instance_dict(po), -p - 1  # its attributes, not in a dict of their own yet
    else:
        g = W.parent[p]
        if g < 0 or not issubclass(type(W.objs[g]), W.module) or \
                po is not _instance_dict(W.objs[g]):
            return True
        d, a = po, p
    if type(d) is not dict:
        return True
    f = _dict_find(W, a, d, o)
    if f is None or not f[0] or type(f[1]) is not str:
        return True
    k = f[1]
    return not (k in ("_parameters", "_buffers", "_modules") or (k[:1] == "_" and "hook" in k))


# --- chains --------------------------------------------------------------

def _chain(W, j):
    """The steps from the root to node j (to the tensor, for a storage)."""
    if j in W.storage:
        j = W.parent[j]
    path = []
    while j >= 0:
        path.append(j)
        j = W.parent[j]
    path.reverse()
    steps = list(W.roots.get(path[0], ("?",)))
    mode = owner = None
    merge = False
    objs = W.objs
    for x in range(1, len(path)):
        try:
            text, mode, owner = _step(W, path[x - 1], path[x], mode, owner)
        except Exception:
            text, mode, owner = _other(objs[path[x]]), None, None
        if text:
            if merge and text[0] == "[":
                steps[-1] += text
            else:
                steps.append(text)
        merge = mode == "merge"
        if merge:
            mode = None
    return steps


def _step(W, a, b, mode, owner):
    """The step from node a to node b. mode says how a was reached:
    "attrs" (a is owner's __dict__: items are attributes), "items" (a is an
    nn.Module's _modules, _parameters or _buffers: items are its
    children), "closure" (a is owner's __closure__), "cell" (a is a closure
    cell: no step to its contents)."""
    label = W.elabel.get(b)
    if label is not None:
        return label, None, None
    p = W.objs[a]
    c = W.objs[b]
    if mode == "cell":
        return "", None, None
    if mode == "closure":
        x = _index_of(W, a, p, c)
        names = owner.__code__.co_freevars
        if 0 <= x < len(names):
            return "." + names[x], "cell", None
        return "[%d]" % x, None, None
    if mode == "attrs" or mode == "items":
        f = _dict_find(W, a, p, c)
        if f is None:
            return _other(c), None, None
        if not f[0]:
            return "{key %s}" % _key_text(W, f[1]), None, None
        if mode == "attrs":
            return _attr(W, owner, f[1], c)
        k = f[1]
        if type(k) is str and k.isdigit():
            return "[%s]" % k, None, None
        if type(k) is str and k.isidentifier():
            return "." + k, None, None
        return "[%s]" % _key_text(W, k), None, None
    tp = type(p)
    if issubclass(tp, dict):
        f = _dict_find(W, a, p, c)
        if f is not None:
            if f[0]:
                return "[%s]" % _key_text(W, f[1]), None, None
            return "{key %s}" % _key_text(W, f[1]), None, None
    elif issubclass(tp, (list, tuple, deque)):
        x = _index_of(W, a, p, c)
        if x >= 0:
            return "[%d]" % x, None, None
    elif issubclass(tp, (set, frozenset)):
        if c is not tp:
            d = _instance_dict(p) if tp not in (set, frozenset) else None
            if d is None or c is not d:
                return "{%s}" % _key_text(W, c), None, None
    elif tp is _FunctionType:
        if c is p.__closure__:
            return "", "closure", p
    elif issubclass(tp, type):
        if type(c) is dict and c is gc.get_referents(_type_dict(p))[0]:
            return "", "attrs", p
    for name in W.probes.get(tp, ()):
        try:
            if getattr(p, name) is c:
                return "." + name, None, None
        except Exception:
            pass
    if tp is types.FrameType:
        return _local_step(W, p, c, ".f_locals[%s]")
    attr = _GEN_FRAME.get(tp)
    if attr is not None:
        f = getattr(p, attr)
        if f is not None:
            return _local_step(W, f, c, "." + attr + ".f_locals[%s]")
    if issubclass(tp, BaseException):
        for name in ("__traceback__", "__context__", "__cause__", "args"):
            if getattr(p, name, None) is c:
                return "." + name, None, None
    d = _instance_dict(p)
    if d is not None:
        if c is d:
            return "", "attrs", p
        f = _dict_find(W, -a - 1, d, c)
        if f is not None and f[0]:
            return _attr(W, p, f[1], c)
    for k in _type_mro(tp):
        for name, desc in list(_type_dict(k).items()):
            if type(desc) is types.MemberDescriptorType:
                try:
                    if desc.__get__(p, tp) is c:
                        return "." + name, None, None
                except Exception:
                    pass
    if c is tp:
        return ".__class__", None, None
    return _other(c), None, None


def _attr(W, owner, k, c):
    """The step for attribute k of owner: nn.Module's children, parameters
    and buffers read as attributes (model.encoder.layer[3].weight), and its
    other dicts merge with their item (model._forward_hooks[0])."""
    if type(k) is not str:
        return ".__dict__[%s]" % _key_text(W, k), None, None
    if W.module is not None and issubclass(type(owner), W.module):
        if k in ("_modules", "_parameters", "_buffers"):
            return "", "items", None
        if k[:1] == "_" and issubclass(type(c), dict):
            return "." + k, "merge", None
    return "." + k, None, None


def _local_step(W, f, c, shape):
    loc = _frame_locals(W, f)
    for k, v in list(loc.items()):
        if v is c:
            return shape % (k if type(k) is str else _key_text(W, k)), None, None
    return _other(c), None, None


def _dict_find(W, a, d, c):
    """(True, key) when c is d's value under key, (False, key) when c is
    the key itself, else None. Large dicts are indexed once per capture."""
    m = W.memo.get(a)
    if m is None:
        if len(d) <= 16:
            for k, v in list(dict.items(d)):
                if v is c:
                    return (True, k)
            for k in list(dict.keys(d)):
                if k is c:
                    return (False, k)
            return None
        m = {}
        for k, v in list(dict.items(d)):
            m.setdefault(id(v), (True, k))
        for k in list(dict.keys(d)):
            m.setdefault(id(k), (False, k))
        W.memo[a] = m
    return m.get(id(c))


def _index_of(W, a, seq, c):
    it = tuple.__iter__(seq) if isinstance(seq, tuple) else \
        list.__iter__(seq) if isinstance(seq, list) else iter(seq)
    m = W.memo.get(a)
    if m is None:
        if len(seq) <= 16:
            for x, e in enumerate(it):
                if e is c:
                    return x
            return -1
        m = {}
        for x, e in enumerate(it):
            m.setdefault(id(e), x)
        W.memo[a] = m
    return m.get(id(c), -1)


def _probes():
    """Attributes to try, by type, for the builtin objects whose
    referents are not items or a __dict__. Reading them runs no user
    code."""
    p = {
        types.MethodType: ("__self__", "__func__"),
        types.BuiltinMethodType: ("__self__",),
        types.FunctionType: ("__defaults__", "__kwdefaults__", "__globals__"),
        types.FrameType: ("f_back", "f_globals", "f_builtins", "f_trace"),
        types.TracebackType: ("tb_frame", "tb_next"),
        types.CellType: ("cell_contents",),
        type: ("__mro__", "__bases__", "__base__"),
        property: ("fget", "fset", "fdel"),
        staticmethod: ("__func__",),
        classmethod: ("__func__",),
    }
    ft = sys.modules.get("functools")
    partial = _vars(ft).get("partial")
    if isinstance(partial, type):
        p[partial] = ("func", "args", "keywords")
    return p


def _other(c):
    """A step no label fits: the type of what it reaches."""
    return ".<%s>" % _type_qualname(type(c))


def _obj_text(W, o):
    tp = type(o)
    if issubclass(tp, W.tensor):
        return _tensor_text(o)
    mod = _type_module(tp)
    name = _type_qualname(tp)
    if type(mod) is str and mod != "builtins":
        name = mod + "." + name
    return "<%s object>" % name


def _tensor_text(t):
    try:
        shape = "x".join(str(int(s)) for s in t.shape) or "scalar"
    except Exception:
        shape = "?"
    return "<%s %s>" % (_type_qualname(type(t)), shape)


def _key_text(W, k):
    """A dict key or a set member as a step shows it: repr for builtin
    atoms and tuples of them, <Parameter 1024x1024> for a tensor, else the
    type (a user class's __repr__ is the program's code). At most KEY_MAX
    characters."""
    tp = type(k)
    if tp in _ATOMS:
        r = repr(k)
    elif tp is tuple and len(k) <= 8:
        r = "(" + ", ".join(_key_text(W, e) for e in k) + ("," if len(k) == 1 else "") + ")"
    elif issubclass(tp, W.tensor):
        r = _tensor_text(k)
    else:
        r = _obj_text(W, k)
    if len(r) > KEY_MAX:
        r = r[:KEY_MAX - 3] + "..."
    return r


# --- small helpers -------------------------------------------------------

def _instance_dict(o):
    """o.__dict__ through the type's own descriptor, so that no
    __getattribute__ or property of the program runs; None when o has
    none."""
    tp = type(o)
    for k in _type_mro(tp):
        d = _type_dict(k).get("__dict__")
        if d is not None:
            if type(d) in _Descriptors:
                try:
                    return d.__get__(o, tp)
                except Exception:
                    return None
            return None
    return None


def _vars(m):
    d = _instance_dict(m) if m is not None else None
    return d if type(d) is dict else {}


def _has(tp, name):
    for k in _type_mro(tp):
        if name in _type_dict(k):
            return True
    return False


def _first(m):
    return m[0]


def _item_order(kv):
    return (0, kv[0]) if type(kv[0]) is str else (1, _type_qualname(type(kv[0])))


def _no_node(h):
    return h[:3]


def _no_ptr(b):
    return b[:3]


def _clean(s):
    """A step or field as a record carries it: no TAB, newline or \\x1f,
    valid UTF-8, at most STEP_MAX characters."""
    s = s.replace("\t", " ").replace("\n", " ").replace("\r", " ").replace("\x1f", " ")
    if len(s) > STEP_MAX:
        s = s[:STEP_MAX - 3] + "..."
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _line(fields, steps, tail=None):
    """fields, the chain, and the tail field if any, as one record of at
    most LINE_MAX bytes: a chain too long keeps its first step, "...", and
    as many of its last steps as fit."""
    head = "\t".join(fields) + "\t"
    end = "" if tail is None else "\t" + tail
    steps = [_clean(s) for s in steps]
    line = head + "\x1f".join(steps) + end
    if len(line.encode("utf-8")) <= LINE_MAX:
        return line
    room = (LINE_MAX - len(head.encode("utf-8")) - len(end.encode("utf-8"))
            - len(steps[0].encode("utf-8")) - 4 - 1)
    tail = []
    for s in reversed(steps[1:]):
        size = len(s.encode("utf-8")) + 1
        if size > room:
            break
        room -= size
        tail.append(s)
    tail.reverse()
    return head + "\x1f".join([steps[0], "..."] + tail) + end


def _capture_line(reason, stats, t0, bound):
    try:
        reason = str(reason)
    except BaseException:
        reason = "?"
    return "\t".join(("capture", _clean(reason), str(stats[0]), str(stats[1]), str(stats[2]),
                      "%.3f" % (time.monotonic() - t0), _clean(bound)))


def _error_text(e):
    try:
        text = "%s: %s" % (type(e).__name__, e)
    except BaseException:
        text = type(e).__name__
    return text.splitlines()[0] if text else "?"
