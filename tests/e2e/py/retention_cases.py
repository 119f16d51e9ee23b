"""The situations that keep tensors alive, each built on a CPU PyTorch and
walked by preload/retention.py's capture() from inside this process, for
tests/e2e/test_retention.py. Each case is a function that builds its
situation in this module's globals (what a program's leak looks like) and
returns extra facts the test checks; the capture's lines and the facts are
printed as one JSON object.

usage: retention_cases.py CASE
"""
import gc
import json
import os
import sys
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
WALKER = os.path.join(HERE, "..", "..", "..", "preload", "retention.py")


def load():
    """The walker as the library runs it: its source exec'd in a fresh
    namespace (once: each namespace is a cycle of its functions and
    itself that only the collector frees)."""
    global capture
    if capture is None:
        ns = {}
        with open(WALKER) as f:
            exec(compile(f.read(), WALKER, "exec"), ns)
        capture = ns["capture"]
    return capture


capture = None


def walk(**kw):
    kw.setdefault("device", "all")
    lines = []
    load()("test", lines.append, **kw)
    return lines


def import_torch():
    try:
        import torch
    except Exception as e:
        sys.exit(f"retention_cases: cannot import torch under {sys.executable}: {e!r} "
                 "(scripts/install-deps.sh installs Debian's python3-torch)")
    torch.manual_seed(0)
    return torch


def case_list():
    """Un-detached results kept in a list: each keeps its graph, and the
    graph keeps the input it saved."""
    global memory
    torch = import_torch()
    memory = []
    for i in range(4):
        x = torch.ones(64, 256) * i          # only saved by the graph
        w = torch.ones(256, requires_grad=True)  # only the graph's leaf
        memory.append(x * w)
    return {}


def case_cache():
    global CACHE
    torch = import_torch()
    CACHE = {}
    CACHE["k1"] = torch.zeros(1000)
    CACHE["k2"] = torch.zeros(10, 10)
    return {}


def make_scorer(torch):
    table = torch.ones(500)

    def score(v):
        return v * table
    return score


def case_closure():
    global fn
    fn = make_scorer(import_torch())
    return {}


def case_global():
    global big
    big = import_torch().empty(1024, 256)
    return {}


class Node:
    pass


def case_cycle():
    """A cycle only the collector frees, gc off so that it stays."""
    torch = import_torch()
    gc.disable()
    a = Node()
    b = Node()
    a.peer = b
    b.peer = a
    a.t = torch.ones(300)
    return {}


def case_optimizer():
    """Adam's state for parameters that left the model."""
    global model, opt
    torch = import_torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(1024, 1024)

        def forward(self, x):
            return self.fc(x)
    model = Net()
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(8, 1024)).sum().backward()
    opt.step()
    model.fc = torch.nn.Linear(1024, 1024)
    return {}


def make_hook():
    outs = []

    def hook(module, inputs, output):
        outs.append(output)
    return hook


def case_hook():
    """A forward hook that keeps every output, and so its graph."""
    global model
    torch = import_torch()
    model = torch.nn.Linear(64, 32)
    model.register_forward_hook(make_hook())
    for _ in range(3):
        model(torch.ones(16, 64))
    return {}


class Trainer:
    pass


def case_nested():
    """Collections inside a holder: a dict of two lists (the lists are
    siblings: the dict stands for them), lists of lists of records, a
    dict too small to show; a list of records (the list is the holder
    itself), and a list with one dict beside a tensor."""
    global trainer, records, mixed
    torch = import_torch()
    trainer = Trainer()
    trainer.history = {"loss": [torch.ones(10) for _ in range(5)],
                       "acc": [torch.ones(3) for _ in range(2)]}
    trainer.big = torch.ones(1000)
    trainer.grid = [[{"a": torch.ones(4), "b": torch.ones(4)} for _ in range(3)]
                    for _ in range(4)]
    trainer.small = {"x": torch.ones(2)}  # 1 storage, under 1% of the trainer's bytes
    records = [{"out": torch.ones(6), "aux": torch.ones(2)} for _ in range(3)]
    mixed = [torch.ones(5), {"a": torch.ones(7), "b": torch.ones(7)}]
    return {}


def make_block(torch, on_ctx):
    """A transformer block as BERT and GPT-2 have them: layer norms,
    softmax attention by matmuls, a GELU MLP, dropout in training; and a
    custom autograd Function, which keeps one tensor by save_for_backward
    and one as an attribute of its ctx (on_ctx(t) is told of that one:
    no hook of PyTorch's sees it)."""
    nn = torch.nn

    class Gate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.mask = x > 0
            on_ctx(ctx.mask)
            return x * ctx.mask

        @staticmethod
        def backward(ctx, g):
            return g * ctx.mask

    class Block(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.act, self.drop = nn.GELU(), nn.Dropout(0.1)

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(d, dim=-1))
            att = self.drop((q @ k.transpose(-2, -1) / (d // h) ** 0.5).softmax(-1))
            x = x + self.drop(self.proj((att @ v).transpose(1, 2).reshape(b, t, d)))
            return x + self.drop(self.down(Gate.apply(self.act(self.up(self.ln2(x))))))
    return Block().train()


def storage_of(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def case_block():
    """Outputs of a transformer block in training kept in a list, each
    with its graph: what they keep is every tensor autograd saved (the
    layer norms' inputs and statistics, the dropout masks, the softmax
    result, the matmuls' operands) and the outputs. PyTorch itself says
    what it saved: a saved_tensors_hooks pack hook sees every tensor a
    node saves. `hooked` is kept under that hook, which records each
    saved tensor's storage; `outs` the same passes without it, as a
    program runs them."""
    global model, outs, hooked
    torch = import_torch()
    saved = {}
    on_ctx = {}
    model = make_block(torch, lambda t: on_ctx.__setitem__(*storage_of(t)))

    def pack(t):
        ptr, nbytes = storage_of(t)
        saved[ptr] = nbytes
        return t

    def unpack(t):
        return t
    outs, hooked = [], []
    for _ in range(3):
        outs.append(model(torch.randn(2, 16, 32)))
    on_ctx.clear()  # the ctx attributes of hooked's passes only
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        for _ in range(3):
            hooked.append(model(torch.randn(2, 16, 32)))
    params = {storage_of(p)[0] for p in model.parameters()}
    param_bytes = sum(dict(storage_of(p) for p in model.parameters()).values())
    saved.update(on_ctx)
    truth = {ptr: n for ptr, n in saved.items() if ptr not in params}
    for o in hooked:
        ptr, nbytes = storage_of(o)
        truth[ptr] = nbytes
    nodes, stack, met = set(), [o.grad_fn for o in outs], []
    while stack:
        fn = stack.pop()
        if fn is None or any(fn is m for m in met):
            continue
        met.append(fn)
        nodes.add(type(fn).__name__)
        stack += [f for f, _ in fn.next_functions]
    return {"truth": sorted(truth.items()), "nodes": sorted(nodes),
            "params": sorted(params), "param_bytes": param_bytes}


def work(torch):
    t = torch.zeros(2048)
    ref = weakref.ref(t)
    lines = walk()  # SITE work
    del t  # the frame's f_locals snapshot, emptied, no longer holds it
    return lines, ref() is None


def case_local():
    """A local of a live frame; and once it is deleted, gone, though the
    frame still runs."""
    global lines_from_work
    lines_from_work, freed = work(import_torch())
    return {"local_freed": freed}


def case_shared():
    """One tensor in two lists: neither list holds it alone."""
    global left, right
    t = import_torch().ones(13)
    left = [t]
    right = {"t": t}
    return {}


def case_shared_params():
    """A model whose outputs are kept with their graphs: each graph
    reaches every weight (its AccumulateGrad nodes hold them, and the
    matmuls saved the second and third), so the model and the list both
    hold the three - one line, shared by the two."""
    global model, kept
    torch = import_torch()
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(),
                          nn.Linear(32, 32, bias=False), nn.ReLU(),
                          nn.Linear(32, 8, bias=False))
    kept = [model(torch.randn(4, 16)) for _ in range(3)]
    return {}


def case_outside():
    """A tensor only the atexit module's C state holds."""
    import atexit
    atexit.register(id, import_torch().ones(11))
    return {}


def case_cuda_only():
    """The default device: the CPU tensors of case_list do not count."""
    case_list()
    return {"device": "cuda"}


def fake_torch():
    """A stand-in torch, for the interpreters that have no PyTorch: tensors
    with a storage, autograd nodes with a saved tensor, as much as the walk
    reads."""
    import types
    torch = types.ModuleType("torch")

    class Device:
        type = "cpu"

    class Storage:
        def __init__(self, buf):
            self.buf = buf

        def data_ptr(self):
            return id(self.buf)

        def nbytes(self):
            return len(self.buf)

    class Node:
        next_functions = ()

        def __init__(self, saved):
            self._saved_self = saved

        def register_hook(self, fn):
            pass

    class Tensor:
        device = Device()
        _base = grad = None

        def __init__(self, n, grad_fn=None):
            self.buf = bytearray(4 * n)
            self.grad_fn = grad_fn
            self.is_leaf = grad_fn is None
            self.shape = (n,)

        def untyped_storage(self):
            return Storage(self.buf)
    torch.Tensor = Tensor
    torch.Node = Node
    sys.modules["torch"] = torch
    return torch


def fake_work(torch):
    t = torch.Tensor(50)
    ref = weakref.ref(t)
    lines = walk()  # SITE fake_work
    del t
    return lines, ref() is None


def case_fake():
    """The walk under any CPython, on the stand-in: a list with a graph,
    a reference cycle, a frame's local."""
    global memory, lines_from_work
    torch = fake_torch()
    memory = [torch.Tensor(10), torch.Tensor(20, grad_fn=torch.Node(torch.Tensor(30)))]
    gc.disable()
    a = Node()
    b = Node()
    a.peer = b
    b.peer = a
    a.t = torch.Tensor(40)
    del a, b
    lines_from_work, freed = fake_work(torch)
    return {"local_freed": freed}


def case_notorch():
    return {"torch_imported": "torch" in sys.modules}


def case_bound_objects():
    import_torch()
    return {"max_objects": 1000}


def case_bound_depth():
    global chain
    torch = import_torch()
    chain = [torch.ones(5)]
    for _ in range(100):
        chain = [chain]
    return {"max_depth": 50}


def case_odd_names():
    global keys
    torch = import_torch()
    globals()["bad\tname"] = torch.ones(3)
    keys = {"a\tb\nc": torch.ones(5)}

    class Box:
        pass
    globals()["box"] = Box()
    setattr(box, "x\ny", torch.ones(7))  # noqa: F821
    return {}


def case_long_chain():
    global deep
    torch = import_torch()
    deep = {}
    d = deep
    for i in range(150):
        d["%03d" % i + "k" * 80] = d = {}
    d["t"] = torch.ones(9)
    return {}


def case_error():
    import_torch()
    return {"max_objects": "many"}


def case_unchanged():
    """The walk leaves the program as it found it: gc's state, the switch
    interval, no objects kept, the tensors it walked free to go."""
    global memory
    torch = import_torch()
    facts = {}
    memory = []
    for i in range(3):
        x = torch.ones(32, 32) * i
        w = torch.ones(32, requires_grad=True)
        memory.append(x * w)
    del x, w
    ref_out = weakref.ref(memory[0])
    ref_saved = weakref.ref(memory[0].grad_fn._saved_self)
    interval = sys.getswitchinterval()
    walk()  # the first walk wraps saved tensors once (torch keeps those wrappers)
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        before = len(gc.get_objects())
        walk()
        facts["objects_delta_gc_%s" % ("on" if enabled else "off")] = \
            len(gc.get_objects()) - before
        facts["gc_kept_%s" % ("on" if enabled else "off")] = gc.isenabled() == enabled
    gc.enable()
    facts["interval_kept"] = sys.getswitchinterval() == interval
    del memory
    facts["output_freed"] = ref_out() is None
    facts["saved_freed"] = ref_saved() is None
    return facts


def main():
    name = sys.argv[1]
    facts = globals()["case_" + name]()
    kw = {k: facts.pop(k) for k in ("max_objects", "max_depth", "device") if k in facts}
    if name in ("local", "fake"):
        lines = lines_from_work
    elif name == "unchanged":
        lines = []
    else:
        lines = walk(**kw)
    print(json.dumps({"lines": lines, "facts": facts}))


if __name__ == "__main__":
    main()
