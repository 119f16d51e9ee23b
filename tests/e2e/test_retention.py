"""Who keeps this GPU memory alive (issue 41): preload/retention.py, the
walk of a program's own object graph, on real PyTorch autograd graphs
(Debian's python3-torch, on the CPU: device "all"). tests/e2e/py/
retention_cases.py builds each situation a leak takes (a list of
un-detached results, a cache, a closure, a global, a reference cycle,
optimizer state of replaced parameters, a forward hook, a frame's local,
collections nested in a holder, a transformer block's graphs in training)
and prints the lines capture() emitted; each test asserts the holder's
chain and its retained bytes exactly, computed from the shapes or, for the
transformer block, from what PyTorch's own saved_tensors_hooks saw it
save; the holders nested in each; and the chain of every storage. The
system python3 runs the cases, in a clean
environment: PyTorch is installed there, and tests/e2e/py/site-packages
(a stand-in torch) is not on its path."""
import glob
import json
import os
import subprocess

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "py", "retention_cases.py")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch (scripts/install-deps.sh)
CYCLE = "unreachable cycle (gc would free it)"
OUTSIDE = "held outside Python (no path from a module or frame)"
F4 = 4  # bytes of a float32


class Capture:
    """One capture's lines, parsed and checked against the record format:
    the capture line first, then the holders, then one block per storage;
    TAB-separated fields with no TAB, newline or \\x1f inside; at most
    8000 bytes a line. Holders: the top-level ones (fifth field -1) largest
    first, each followed by the holders nested inside it (fifth field: its
    index), largest first, none larger than it; a top-level holder's
    totals are the sums of its blocks, and a block names its top-level
    holder."""

    def __init__(self, lines):
        expect(lines, "no lines")
        self.lines = lines
        for line in lines:
            expect(isinstance(line, str) and "\n" not in line and "\r" not in line,
                   f"a line with a newline: {line!r}")
            expect(len(line.encode()) <= 8000, f"a line of {len(line.encode())} bytes")
        head = lines[0].split("\t")
        expect(len(head) == 7 and head[0] == "capture", f"capture line: {lines[0]!r}")
        self.reason = head[1]
        self.objects, self.storages, self.nholders = int(head[2]), int(head[3]), int(head[4])
        expect(head[5].count(".") == 1 and len(head[5].split(".")[1]) == 3,
               f"seconds not %.3f: {head[5]!r}")
        self.bound = head[6]
        self.holders = []  # (bytes, storages, chain, index of its top-level holder or -1)
        self.blocks = []
        for line in lines[1:]:
            f = line.split("\t")
            if f[0] == "holder":
                expect(len(f) == 5 and not self.blocks, f"holder line: {line!r}")
                self.holders.append((int(f[1]), int(f[2]), tuple(f[3].split("\x1f")),
                                     int(f[4])))
            else:
                expect(f[0] == "block" and len(f) == 5, f"block line: {line!r}")
                expect(f[1] == "%x" % int(f[1], 16), f"data_ptr not lowercase hex: {f[1]!r}")
                self.blocks.append((int(f[1], 16), int(f[2]), int(f[3]),
                                    tuple(f[4].split("\x1f"))))
        expect(len(self.holders) == self.nholders and len(self.blocks) == self.storages,
               f"capture line says {self.nholders} holders, {self.storages} storages: "
               f"{len(self.holders)} and {len(self.blocks)} lines")
        expect(len({b[0] for b in self.blocks}) == len(self.blocks), "a data_ptr twice")
        tops = [x for x, h in enumerate(self.holders) if h[3] == -1]
        sizes = [self.holders[x][0] for x in tops]
        expect(sizes == sorted(sizes, reverse=True), f"holders not largest first: {sizes}")
        expect(not self.holders or self.holders[0][3] == -1, self.holders)
        for x, (nbytes, count, chain, up) in enumerate(self.holders):
            if up >= 0:
                # right after its top-level holder or a sibling, smaller
                expect(up in tops and up < x and all(h[3] == up for h in self.holders[up + 1:x]),
                       f"nested holder {chain} under {up}: {self.holders}")
                prev = self.holders[x - 1]
                expect(nbytes <= self.holders[up][0] and count <= self.holders[up][1] and
                       (prev[3] == -1 or prev[0] >= nbytes), f"nested holder {chain}")
                continue
            mine = [b for b in self.blocks if b[2] == x]
            expect(sum(b[1] for b in mine) == nbytes and len(mine) == count,
                   f"holder {chain}: {nbytes} bytes in {count}, its blocks: {mine}")
        expect(all(b[2] in tops or b[2] == -1 for b in self.blocks), "holder index")

    def holder(self, chain):
        """(bytes, storages) of the top-level holder with this chain, and its
        blocks as a sorted list of (chain, bytes)."""
        found = [x for x, h in enumerate(self.holders) if h[2] == tuple(chain) and h[3] == -1]
        expect(len(found) == 1, f"no holder {chain}; holders: {self.holders}")
        x = found[0]
        return (self.holders[x][0], self.holders[x][1],
                sorted((b[3], b[1]) for b in self.blocks if b[2] == x))

    def main_holders(self):
        """The top-level holders the case's own module keeps (torch may
        have its own tensors in its modules): (chain, bytes, storages)."""
        return sorted((h[2], h[0], h[1]) for h in self.holders
                      if h[3] == -1 and not h[2][0].startswith(("torch", "unittest")))

    def nested(self):
        """The nested holders of the case's own top-level holders:
        (chain of the top-level one, chain, bytes, storages), in line
        order."""
        return [(self.holders[h[3]][2], h[2], h[0], h[1]) for h in self.holders
                if h[3] >= 0 and not self.holders[h[3]][2][0].startswith(("torch", "unittest"))]


def env():
    e = clean_env()
    for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH"):
        e.pop(k, None)
    return e


def case(name, python=PYTHON):
    p = subprocess.run([python, CASES, name], capture_output=True, text=True, timeout=300,
                       env=env())
    expect(p.returncode == 0, f"{python} {CASES} {name} exited {p.returncode}\n"
                              f"stderr: {p.stderr[-3000:]}")
    doc = json.loads(p.stdout)
    return (Capture(doc["lines"]) if doc["lines"] else None), doc["facts"]


def finished(c, nested=()):
    """The walk finished, and these are the case's nested holders."""
    expect(c.reason == "test" and c.bound == "", f"bound {c.bound!r}")
    expect(c.nested() == list(nested), f"nested holders: {c.nested()}")


def test_torch_is_there():
    p = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, env=clean_env())
    expect(p.returncode == 0, f"{PYTHON} cannot import torch: the retention tests walk real "
                              f"autograd graphs (scripts/install-deps.sh installs Debian's "
                              f"python3-torch)\n{p.stderr[-2000:]}")


def test_list_of_undetached_results():
    c, _ = case("list")
    finished(c)
    x, w, out = 64 * 256 * F4, 256 * F4, 64 * 256 * F4
    blocks = []
    for i in range(4):
        m = ("__main__.memory", "[%d]" % i)
        blocks += [(m, out), (m + (".grad_fn", "._saved_self"), x),
                   (m + (".grad_fn", ".next_functions[1]", ".variable"), w)]
    expect(c.main_holders() == [(("__main__.memory",), 4 * (x + w + out), 12)],
           c.main_holders())
    expect(c.holder(["__main__.memory"])[2] == sorted(blocks), c.holder(["__main__.memory"]))


def test_dict_cache():
    c, _ = case("cache")
    finished(c)
    expect(c.main_holders() == [(("__main__.CACHE",), 1000 * F4 + 100 * F4, 2)],
           c.main_holders())
    expect(c.holder(["__main__.CACHE"])[2] == [(("__main__.CACHE", "['k1']"), 1000 * F4),
                                               (("__main__.CACHE", "['k2']"), 100 * F4)],
           c.blocks)


def test_closure_variable():
    c, _ = case("closure")
    finished(c)
    expect(c.main_holders() == [(("__main__.fn",), 500 * F4, 1)], c.main_holders())
    expect(c.holder(["__main__.fn"])[2] == [(("__main__.fn", ".table"), 500 * F4)], c.blocks)


def test_module_global():
    c, _ = case("global")
    finished(c)
    expect(c.main_holders() == [(("__main__.big",), 1024 * 256 * F4, 1)], c.main_holders())
    expect(c.holder(["__main__.big"])[2] == [(("__main__.big",), 1024 * 256 * F4)], c.blocks)


def test_reference_cycle_only_gc_frees():
    c, _ = case("cycle")
    finished(c)
    entry = (CYCLE, "<__main__.Node object>")
    expect(c.main_holders() == [(entry, 300 * F4, 1)], c.holders)
    expect(c.holder(entry)[2] == [(entry + (".t",), 300 * F4)], c.blocks)


def test_optimizer_state_of_replaced_parameters():
    c, _ = case("optimizer")
    W, B = 1024 * 1024 * F4, 1024 * F4
    state = 2 * (W + B) + 2 * F4  # the moments, the steps
    kept = state + (W + B) + (W + B)  # and the parameters, their grads
    # the per-parameter dicts of the state are not holders each: the
    # state that collects them is, nested in the optimizer
    finished(c, [(("__main__.opt",), ("__main__.opt", ".state"), state, 6)])
    expect(c.main_holders() == [(("__main__.model",), W + B, 2), (("__main__.opt",), kept, 10)],
           c.main_holders())
    state = ("__main__.opt", ".state")
    want = []
    for shape, size in (("1024x1024", W), ("1024", B)):
        item = state + ("[<Parameter %s>]" % shape,)
        key = state + ("{key <Parameter %s>}" % shape,)
        want += [(item + ("['exp_avg']",), size), (item + ("['exp_avg_sq']",), size),
                 (item + ("['step']",), F4), (key, size), (key + (".grad",), size)]
    expect(c.holder(["__main__.opt"])[2] == sorted(want), c.holder(["__main__.opt"]))
    expect(c.holder(["__main__.model"])[2] == [(("__main__.model", ".fc", ".bias"), B),
                                               (("__main__.model", ".fc", ".weight"), W)],
           c.holder(["__main__.model"]))


def test_nested_holders():
    c, _ = case("nested")
    history, grid = (5 * 10 + 2 * 3) * F4, 4 * 3 * 2 * 4 * F4
    trainer = history + 1000 * F4 + grid + 2 * F4
    T = ("__main__.trainer",)
    finished(c, [(T, T + (".grid",), grid, 24), (T, T + (".history",), history, 7),
                 (("__main__.mixed",), ("__main__.mixed", "[1]"), 14 * F4, 2)])
    expect(c.main_holders() == [(("__main__.mixed",), 19 * F4, 3),
                                (("__main__.records",), 3 * 8 * F4, 6), (T, trainer, 33)],
           c.main_holders())


def test_forward_hook_that_keeps_outputs():
    c, _ = case("hook")
    out, inp = 16 * 32 * F4, 16 * 64 * F4
    weight, bias = 64 * 32 * F4, 32 * F4
    # the list the hook closes over, inside the model that holds the hook:
    # the outputs and the inputs their graphs saved, not the weights
    finished(c, [(("__main__.model",), ("__main__.model", "._forward_hooks[0]", ".outs"),
                  3 * (out + inp), 6)])
    expect(c.main_holders() == [(("__main__.model",), 3 * (out + inp) + weight + bias, 8)],
           c.main_holders())
    want = [(("__main__.model", ".weight"), weight), (("__main__.model", ".bias"), bias)]
    for i in range(3):
        o = ("__main__.model", "._forward_hooks[0]", ".outs", "[%d]" % i)
        want += [(o, out), (o + (".grad_fn", "._saved_mat1"), inp)]
    expect(c.holder(["__main__.model"])[2] == sorted(want), c.holder(["__main__.model"]))


def test_transformer_block_keeps_what_autograd_saved():
    c, facts = case("block")
    finished(c)
    # the case runs what BERT and GPT-2 blocks run in training
    nodes = {"NativeLayerNormBackward0", "AddmmBackward0", "BmmBackward0", "SoftmaxBackward0",
             "GeluBackward0", "MulBackward0", "DivBackward0", "GateBackward"}
    expect(nodes <= set(facts["nodes"]), facts["nodes"])
    # under the pack hook: the storages PyTorch says it saved (a custom
    # Function's save_for_backward too), the one its ctx keeps as an
    # attribute, and the outputs, none of them a parameter's, exactly
    truth = dict(facts["truth"])
    nbytes, count, blocks = c.holder(["__main__.hooked"])
    mine = {b[0]: b[1] for b in c.blocks if b[3][0] == "__main__.hooked"}
    expect((nbytes, count) == (sum(truth.values()), len(truth)) and mine == truth,
           f"hooked: {nbytes} B in {count}; PyTorch saved {sum(truth.values())} B in "
           f"{len(truth)}; missed {sorted(set(truth) - set(mine))}, "
           f"extra {sorted(set(mine) - set(truth))}")
    # the same passes as a program runs them keep as much
    expect(c.holder(["__main__.outs"])[:2] == (nbytes, count), c.main_holders())
    # every graph reaches the parameters too (AccumulateGrad): no one of
    # the three holders would free them alone, and they are one line
    # shared by the three, not twelve; each one's chain goes through its
    # module
    params = [h for h in c.main_holders() if h[0][0] not in ("__main__.outs", "__main__.hooked")]
    expect(params == [(("shared by __main__.hooked, __main__.model and __main__.outs",),
                       facts["param_bytes"], 12)], params)
    expect(sorted(b[0] for b in c.blocks if b[3][0] == "__main__.model") ==
           sorted(facts["params"]), "a parameter's chain through a graph")


def test_local_of_a_live_frame():
    c, facts = case("local")
    finished(c)
    local = "work (retention_cases.py:%d) local t" % site_lines(CASES)["work"]
    expect(c.main_holders() == [((local,), 2048 * F4, 1)], c.main_holders())
    # the frame's f_locals snapshot was emptied: t went with the frame
    expect(facts == {"local_freed": True}, facts)


def interpreters():
    """Every CPython 3.9+ here: the system one, then pyenv's."""
    found = {}
    for path in [PYTHON] + sorted(glob.glob(os.path.expanduser(
            "~/.pyenv/versions/3.*/bin/python3.*[0-9]"))):
        v = subprocess.run([path, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                           capture_output=True, text=True, env=env())
        if v.stdout.strip() == "True":
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def test_every_python_on_a_stand_in_torch():
    # the frame's snapshot of its locals (a dict before 3.13, a view
    # since) must not keep a deleted local alive
    local = "fake_work (retention_cases.py:%d) local t" % site_lines(CASES)["fake_work"]
    entry = (CYCLE, "<__main__.Node object>")
    pythons = interpreters()
    expect(PYTHON in pythons, pythons)
    for python in pythons:
        c, facts = case("fake", python)
        finished(c)
        expect(facts == {"local_freed": True}, f"{python}: {facts}")
        expect(c.main_holders() == sorted([((local,), 200, 1), (("__main__.memory",), 240, 3),
                                           (entry, 160, 1)]), f"{python}: {c.holders}")
        expect(sorted((b[3], b[1]) for b in c.blocks) == sorted([
            ((local,), 200), (("__main__.memory", "[0]"), 40),
            (("__main__.memory", "[1]"), 80),
            (("__main__.memory", "[1]", ".grad_fn", "._saved_self"), 120),
            (entry + (".t",), 160)]), f"{python}: {c.blocks}")


def test_shared_tensor_is_its_own_holder():
    c, _ = case("shared")
    finished(c)
    expect(c.main_holders() == [(("__main__.left", "[0]"), 13 * F4, 1)], c.holders)


def test_parameters_shared_by_a_model_and_kept_graphs_are_one_line():
    """Three kept outputs' graphs reach every weight of the model (through
    their AccumulateGrad nodes): neither the model nor the list alone
    would free them. The three are one holder, shared by the two, not
    three; the list retains the activations it alone keeps."""
    c, _ = case("shared_params")
    finished(c)
    got = dict((h[0], (h[1], h[2])) for h in c.main_holders())
    shared = ("shared by __main__.kept and __main__.model",)
    expect(got.get(shared) == ((32 * 16 + 32 * 32 + 8 * 32) * F4, 3), c.holders)
    # no parameter is a holder of its own any more, and the model keeps
    # nothing alone
    expect(set(got) == {shared, ("__main__.kept",)}, sorted(got))
    x = [i for i, h in enumerate(c.holders) if h[2] == shared][0]
    mine = sorted(b[3] for b in c.blocks if b[2] == x)
    expect(mine == [("__main__.model", "[%d]" % i, ".weight") for i in (0, 2, 4)], mine)


def test_tensor_held_from_outside_python():
    c, _ = case("outside")
    finished(c)
    mine = [b for b in c.blocks if b[3][0] == OUTSIDE]
    expect([(b[1], b[2], b[3]) for b in mine] == [(11 * F4, -1, (OUTSIDE, "<Tensor 11>"))],
           c.blocks)
    expect(not c.main_holders(), c.holders)


def test_device_filter():
    c, _ = case("cuda_only")
    finished(c)
    expect(c.storages == 0 and not c.holders and not c.blocks, c.holders)


def test_no_torch_no_walk():
    c, facts = case("notorch")
    expect(facts == {"torch_imported": False}, facts)
    expect((c.objects, c.storages, c.nholders, c.bound) == (0, 0, 0, "") and
           not c.holders and not c.blocks, vars(c))


def test_bound_objects():
    c, _ = case("bound_objects")
    expect(c.bound == "objects" and c.objects <= 1000, (c.bound, c.objects))


def test_bound_depth():
    c, _ = case("bound_depth")
    expect(c.bound == "depth", c.bound)
    expect(not [b for b in c.blocks if b[3][0] == "__main__.chain"], c.blocks)


def test_tabs_and_newlines_become_spaces():
    c, _ = case("odd_names")
    finished(c)
    expect(c.main_holders() == [(("__main__.bad name",), 3 * F4, 1),
                                (("__main__.box",), 7 * F4, 1),
                                (("__main__.keys",), 5 * F4, 1)], c.main_holders())
    expect(c.holder(["__main__.box"])[2] == [(("__main__.box", ".x y"), 7 * F4)], c.blocks)
    # a key is shown by its repr, which escapes them
    expect(c.holder(["__main__.keys"])[2] == [(("__main__.keys", "['a\\tb\\nc']"), 5 * F4)],
           c.blocks)


def test_long_chain_keeps_first_and_last_steps():
    c, _ = case("long_chain")
    # the innermost dict keeps the tensor: a holder nested in the outermost,
    # its chain cut the same way, the field after it still there
    (top, inner, nbytes, count), = c.nested()
    finished(c, [(("__main__.deep",), inner, 9 * F4, 1)])
    expect(inner[1] == "..." and inner[-1].startswith("['149k") and
           inner[-1].endswith("...]"), inner[:3] + inner[-3:])
    line, = [l for l in c.lines if l.startswith("holder\t") and "\x1f".join(inner) in l]
    expect(7900 < len(line.encode()) <= 8000 and line.split("\t")[4] == str(c.holders.index(
        next(h for h in c.holders if h[2] == top))), f"{len(line)} bytes: cut to fit, no more")
    (ptr, nbytes, h, chain), = [b for b in c.blocks if b[3][0] == "__main__.deep"]
    expect(chain[1] == "..." and chain[-1] == "['t']" and chain[-2].startswith("['149k") and
           len(chain[-2]) == 62 and chain[-2].endswith("...]"), chain[:3] + chain[-3:])
    size = len("\t".join(("block", "%x" % ptr, str(nbytes), str(h), "\x1f".join(chain))))
    expect(7900 < size <= 8000, f"{size} bytes: the chain is cut to fit, no more")


def test_error_is_a_capture_line():
    c, _ = case("error")
    expect(c.bound.startswith("error: ValueError: ") and not c.holders, c.bound)


def test_capture_leaves_the_program_as_it_was():
    _, facts = case("unchanged")
    expect(facts["gc_kept_on"] and facts["gc_kept_off"] and facts["interval_kept"], facts)
    expect(abs(facts["objects_delta_gc_on"]) <= 20 and abs(facts["objects_delta_gc_off"]) <= 20,
           f"objects left by a capture: {facts}")
    expect(facts["output_freed"] and facts["saved_freed"],
           f"the walk kept tensors alive after it returned: {facts}")
