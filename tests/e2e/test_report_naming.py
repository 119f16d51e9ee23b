"""Naming the bytes at the peak by something a user can act on:
the op that allocated, the autograd node that made a gradient and the
line that called backward, the layer inside a library. Runs
tests/e2e/py/ops_app.py over the PyTorch stand-in's op and engine layers
(tests/sim/torch/ops.cpp) with the bridge attached, and reads the peak.
"""
import json
import os
import re
import shutil
import sys

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "py", "ops_app.py")
MODELS = os.path.join(HERE, "py", "site-packages", "simmodels", "__init__.py")
STANDIN = os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so")
MiB = 1 << 20


def lines(path):
    out = {}
    with open(path) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"# SITE (\w+)", text)
            if m:
                out[m.group(1)] = no
    return out


def traced_app(*args):
    os.mkdir("cache", 0o700)
    p = run([sys.executable, APP, *args], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="t.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    return "t.gmt"


def peak_sites(t, *args):
    doc = json.loads(report("peak", "--json", *args, t).stdout)
    return {s["site"]: s for s in doc["traces"][0]["sites"]}


def test_sites_name_ops_nodes_and_the_backward_line():
    t = traced_app()
    L = lines(APP)
    sites = peak_sites(t)
    bw = f"leaf (ops_app.py:{L['leaf_backward']})"
    want = {
        f"leaf (ops_app.py:{L['leaf_x']}) > sim_torch_malloc": (64 * MiB, 1),
        f"leaf (ops_app.py:{L['leaf_y']}) > aten::mul": (64 * MiB, 1),
        f"{bw} > MeanBackward0": (64 * MiB, 1),
        f"{bw} > MulBackward0": (64 * MiB, 1),
        f"model (ops_app.py:{L['model_call']}) > aten::mm": (6 * MiB, 4),
    }
    got = {k: (v["bytes"], v["allocations"]) for k, v in sites.items()}
    expect(got == want, f"sites at the peak:\n{json.dumps(got, indent=1)}\nwant\n"
                        f"{json.dumps(want, indent=1)}")
    # what each name is made of, in JSON
    mul = sites[f"{bw} > MulBackward0"]
    expect(mul.get("node") == "MulBackward0" and mul.get("op") == "aten::mul" and
           mul.get("backward_of") == bw, f"MulBackward0's site: {mul}")
    # the forward line of a node: the one line that made its op (y = mul(x));
    # MeanBackward0's op was never made in forward here: none
    expect(mul.get("forward_line") == f"leaf (ops_app.py:{L['leaf_y']})", f"{mul}")
    expect("forward_line" not in sites[f"{bw} > MeanBackward0"], f"{sites}")
    fwd = sites[f"leaf (ops_app.py:{L['leaf_y']}) > aten::mul"]
    expect(fwd.get("op") == "aten::mul" and "node" not in fwd, f"forward mul: {fwd}")
    # the machinery never names a site
    text = report("peak", t).stdout
    for bad in ("std::function", "CUDACachingAllocator", "TypeError_to_NotImplemented_",
                "wrap_kernel_functor", "empty_cuda"):
        expect(bad not in text, f"{bad} in the peak table:\n{text}")


def test_layers_inside_a_library_under_the_users_line():
    """The layer is the model library's own module (MLP.forward), not the
    torch.nn module it calls (Linear.forward, a file under
    site-packages/torch/) - also when the whole install lives under a
    directory named torch (a virtual environment called torch): the app
    runs from a copy under ./torch/ here."""
    global APP
    shutil.copytree(os.path.dirname(APP), os.path.join("torch", "py"))
    APP = os.path.abspath(os.path.join("torch", "py", "ops_app.py"))
    try:
        t = traced_app()
    finally:
        APP = os.path.join(HERE, "py", "ops_app.py")
    L, M = lines(APP), lines(MODELS)
    site = f"model (ops_app.py:{L['model_call']}) > aten::mm"
    layers = {l["layer"]: (l["bytes"], l["allocations"])
              for l in peak_sites(t)[site].get("layers", [])}
    want = {f"MLP.forward (__init__.py:{M['mlp_mm']})": (4 * MiB, 2),
            f"Attention.forward (__init__.py:{M['attention_mm']})": (2 * MiB, 2)}
    expect(layers == want, f"layers of {site}: {layers}, want {want}")
    # the text table shows them indented under the site with --layers
    text = report("peak", "--layers", t).stdout.splitlines()
    at = [i for i, l in enumerate(text) if l.endswith(site)]
    expect(len(at) == 1, f"{site} not once in:\n" + "\n".join(text))
    under = text[at[0] + 1:at[0] + 3]
    expect(re.search(r"4\.00 MiB\s+2\s+MLP\.forward \(__init__\.py:%d\)$" % M["mlp_mm"],
                     under[0]) and
           re.search(r"2\.00 MiB\s+2\s+Attention\.forward \(__init__\.py:%d\)$" %
                     M["attention_mm"], under[1]), "\n".join(text))


def test_layers_of_leaks():
    """leaks --layers and leaks --json's layers: the model's blocks, kept."""
    t = traced_app("--keep-model")
    L, M = lines(APP), lines(MODELS)
    site = f"model (ops_app.py:{L['model_call']}) > aten::mm"
    doc = json.loads(report("leaks", "--json", t).stdout)["traces"][0]
    sites = {s["site"]: s for s in doc["sites"]}
    expect(list(sites) == [site] and sites[site]["bytes"] == 6 * MiB, f"{doc}")
    layers = {l["layer"]: (l["bytes"], l["allocations"]) for l in sites[site]["layers"]}
    want = {f"MLP.forward (__init__.py:{M['mlp_mm']})": (4 * MiB, 2),
            f"Attention.forward (__init__.py:{M['attention_mm']})": (2 * MiB, 2)}
    expect(layers == want and sites[site]["op"] == "aten::mm", f"{sites[site]}")
    text = report("leaks", "--layers", t).stdout
    expect(re.search(r"4\.00 MiB\s+2\s+MLP\.forward \(__init__\.py:%d\)" % M["mlp_mm"],
                     text), text)


# ---- growth per step ---------------------------------------------------------

STEP_APP = os.path.join(HERE, "py", "step_app.py")
KiB = 1 << 10


def steps_trace(steps, leak, *extra):
    name = f"s{steps}-{leak}{'-m' if extra else ''}.gmt"
    p = run([sys.executable, STEP_APP, str(steps), str(leak), *extra],
            PYALLOC_LIB=prog("libpyalloc.so"), GPUMEMTRACE_OUTPUT=name)
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    return json.loads(report("growth", "--json", name).stdout)["traces"][0], name


def test_steps_counted_per_thread():
    """A 12-step loop with a 1 MiB leak on the main thread while another
    thread allocates at an irregular pace: the step's period is counted
    in the main thread's own allocations, so the steps and the leak are
    found however the threads interleave (counted over the process's
    allocations, the period varied with the other thread's)."""
    app = os.path.join(HERE, "py", "thread_app.py")
    L = lines(app)
    for i in range(3):
        t = f"t{i}.gmt"
        p = run([sys.executable, app], PYALLOC_LIB=prog("libpyalloc.so"), GPUMEMTRACE_OUTPUT=t)
        expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
        g = json.loads(report("growth", "--json", t).stdout)["traces"][0]
        got = [(s["site"], s["per_step"], s["first_step"]) for s in g["sites"]]
        expect(g["steps"] == 12 and
               got == [(f"<module> (thread_app.py:{L['leak']}) > pyalloc_alloc", MiB, 1)],
               f"run {i}: {g}")


def test_growth_per_step_found_without_marks():
    """A leak of 1 MiB a step over 10 steps is found per step, marked or
    not, and over 50 steps the same; 8 KiB a step too; a flat loop is
    not flagged. The steps come from the allocations: the 1 MiB
    temporary, made once a step; marked, from the program's own mark."""
    L = lines(STEP_APP)
    leak_site = f"<module> (step_app.py:{L['leak']}) > pyalloc_alloc"
    tmp_site = f"<module> (step_app.py:{L['tmp']}) > pyalloc_alloc"
    for steps, leak, extra in [(10, MiB, ()), (10, MiB, ("--mark",)), (50, MiB, ()),
                               (20, 8 * KiB, ())]:
        g, t = steps_trace(steps, leak, *extra)
        got = [(s["site"], s["per_step"], s["first_step"]) for s in g["sites"]]
        step_site = 'mark "step"' if extra else tmp_site
        expect(g["steps"] == steps and g["step_site"] == step_site and
               got == [(leak_site, leak, 1)],
               f"{steps} steps, {leak} bytes a step {extra}: {g}")
        text = report("growth", t).stdout
        expect(f"over {steps} steps" in text and leak_site in text, text)
    g, t = steps_trace(10, 0)
    expect(g["steps"] == 10 and g["growing_sites"] == 0 and g["sites"] == [], f"flat: {g}")
    expect("no site grows step after step (10 steps" in report("growth", t).stdout,
           report("growth", t).stdout)


def test_steps_are_not_a_layer_repeated_within_the_step():
    """Two layers alike one op apart make one stack recur regularly twice a
    step (tests/gpu/graph_keep.py on a GPU found 40 "steps" in 20); the
    step is the count most regular sites share."""
    L = lines(STEP_APP)
    g, _ = steps_trace(20, 8 * KiB, "--twin")
    got = [(s["site"], s["per_step"]) for s in g["sites"]]
    mid = f"<module> (step_app.py:{L['mid']}) > pyalloc_alloc"
    expect(g["steps"] == 20 and got == [(mid, 8 * KiB)], f"{g}")
    g, _ = steps_trace(20, 0, "--twin")
    expect(g["steps"] == 20 and g["growing_sites"] == 0, f"flat: {g}")


# ---- memory by kind ----------------------------------------------------------

def test_sites_under_a_python_dispatch_mode():
    """Under a Python dispatch mode (as under PyTorch's MemTracker) an op
    comes back to the framework's Python and its kernel is called boxed:
    the site still names the op (from the kernel's registered wrapper),
    and on the engine's thread, which then runs the framework's Python,
    the block is still named under the line that called backward."""
    t = traced_app("--dispatch-mode")
    L = lines(APP)
    sites = peak_sites(t)
    bw = f"leaf (ops_app.py:{L['leaf_backward']})"
    want = {
        f"leaf (ops_app.py:{L['leaf_x']}) > sim_torch_malloc": (64 * MiB, 1),
        f"leaf (ops_app.py:{L['leaf_y']}) > aten::mul": (64 * MiB, 1),
        f"{bw} > MeanBackward0": (64 * MiB, 1),
        f"{bw} > aten::mul": (64 * MiB, 1),
        f"model (ops_app.py:{L['model_call']}) > aten::mm": (6 * MiB, 4),
    }
    got = {k: (v["bytes"], v["allocations"]) for k, v in sites.items()}
    expect(got == want, f"sites at the peak:\n{json.dumps(got, indent=1)}\nwant\n"
                        f"{json.dumps(want, indent=1)}")
    mul = sites[f"{bw} > aten::mul"]
    expect(mul["op"] == "aten::mul" and mul["backward_of"] == bw, f"{mul}")


def test_memory_by_kind_at_the_peak():
    """tests/e2e/py/train_app.py's two training steps over the stand-in:
    at the peak (the second backward, when the gradient is made) each
    block is named by its kind, from its stack, thread and lifetime."""
    os.mkdir("cache", 0o700)
    app = os.path.join(HERE, "py", "train_app.py")
    p = run([sys.executable, app], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="k.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    s = json.loads(report("summary", "--json", "k.gmt").stdout)["traces"][0]
    got = {k["kind"]: (k["bytes"], k["blocks"]) for k in s["kinds"] if k["bytes"]}
    want = {"parameters": (16 * MiB, 2), "optimizer_state": (16 * MiB, 2),
            "gradients": (8 * MiB, 1), "activations": (4 * MiB, 1),
            # the intermediate gradient, and the 4-byte seed of backward
            "temporaries": (2 * MiB + 4, 2),
            # PyTorch's cuBLAS workspace, and cuBLAS's own cudaMalloc
            "workspaces": (2 * MiB, 2),
            # the input, made before the loop and given back after it
            "held": (512 * 1024, 1)}
    expect(got == want and s["peak_requested"] == sum(b for b, _ in want.values()),
           f"kinds at the peak: {got}\nwant {want}\npeak {s['peak_requested']}")
    expect(all(k["basis"] for k in s["kinds"]), s["kinds"])
    # by module: the activation was made by the model library's layer
    M = lines(MODELS)
    acts = next(k for k in s["kinds"] if k["kind"] == "activations")
    expect(acts["layers"] == [{"layer": f"Attention.forward (__init__.py:{M['attention_mm']})",
                               "bytes": 4 * MiB, "blocks": 1}], f"{acts}")
    text = report("summary", "k.gmt").stdout
    lines_ = text.splitlines()
    i = next(i for i, l in enumerate(lines_) if l.startswith("at the peak, by kind"))
    expect(i < next(i for i, l in enumerate(lines_) if l.startswith("peak requested")),
           "the summary opens with the kinds:\n" + text)
    expect(re.search(r"16\.00 MiB\s+33\.0%\s+2\s+parameters and buffers\s+stack", text) and
           re.search(r"4\.00 MiB\s+8\.2%\s+1\s+activations saved for backward\s+lifetime",
                     text) and
           re.search(r"512\.00 KiB\s+1\.0%\s+1\s+other, held across steps\s+lifetime", text),
           text)


def test_memory_by_kind_at_a_mark():
    """summary --kinds-at: the kinds at the last mark of that name - after
    train_app.py's loop, the program's own state - and a clear error for a
    mark the trace does not have."""
    os.mkdir("cache", 0o700)
    app = os.path.join(HERE, "py", "train_app.py")
    p = run([sys.executable, app], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="k.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    s = json.loads(report("summary", "--json", "--kinds-at", "end", "k.gmt").stdout)
    s = s["traces"][0]
    got = {k["kind"]: (k["bytes"], k["blocks"]) for k in s["kinds"] if k["bytes"]}
    want = {"parameters": (16 * MiB, 2), "optimizer_state": (16 * MiB, 2),
            "gradients": (8 * MiB, 1), "workspaces": (2 * MiB, 2), "held": (512 * 1024, 1)}
    at = s["kinds_at"]
    expect(got == want and at["mark"] == "end" and at["count"] == 1 and
           at["requested"] == sum(b for b, _ in want.values()), f"{got}\n{at}\nwant {want}")
    expect(json.loads(report("summary", "--json", "k.gmt").stdout)["traces"][0]["kinds_at"]
           == "peak", "kinds_at of the default")
    text = report("summary", "--kinds-at", "end", "k.gmt").stdout
    expect(re.search(r'^at mark "end" \(the last of 1, at [0-9.]+ s\), by kind', text, re.M) and
           re.search(r"8\.00 MiB\s+18\.8%\s+1\s+gradients", text), text)
    bad = report("summary", "--kinds-at", "nope", "k.gmt", check_rc=None)
    expect(bad.returncode == 2 and
           bad.stderr.strip().splitlines() == ['gpumemreport: summary: k.gmt: no mark named "nope"'],
           f"rc {bad.returncode}: {bad.stderr}")


def test_no_kinds_without_python_stacks():
    run([prog("report_known")])
    s = json.loads(report("summary", "--json", one_trace()).stdout)["traces"][0]
    expect(s["kinds"] is None, f"{s.get('kinds')}")
    expect("by kind" not in report("summary", one_trace()).stdout, "table without Python")


def test_growth_names_the_layer_that_keeps_memory():
    """growth --json gives each growing site's layers, by what they hold at
    the end: the model's Attention, whose output is kept every step."""
    os.mkdir("cache", 0o700)
    app = os.path.join(HERE, "py", "model_leak_app.py")
    p = run([sys.executable, app], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="g.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    L, M = lines(app), lines(MODELS)
    g = json.loads(report("growth", "--json", "g.gmt").stdout)["traces"][0]
    got = [(s["site"], s["per_step"], s["layers"]) for s in g["sites"]]
    want = [(f"<module> (model_leak_app.py:{L['call']}) > aten::mm", 64 * 1024,
             [{"layer": f"Attention.forward (__init__.py:{M['attention_mm']})",
               "bytes_at_end": 12 * 64 * 1024, "allocations": 12}])]
    expect(g["steps"] == 12 and got == want, f"{g}")


def test_leaks_split_by_kind():
    """train_app.py --leave gives nothing back: at exit the model's state
    (parameters 16 MiB, the gradient 8 MiB, Adam's state 16 MiB) and the
    workspaces (PyTorch's cuBLAS workspace, cuBLAS's own handle: 2 MiB)
    are one line each, and the table is the program's own: the tensor it
    kept (3 MiB) first, then its input (512 KiB)."""
    os.mkdir("cache", 0o700)
    app = os.path.join(HERE, "py", "train_app.py")
    p = run([sys.executable, app, "--leave"], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="k.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    L = lines(app)
    d = json.loads(report("leaks", "--json", "k.gmt").stdout)["traces"][0]
    ms, ws = d["model_state"], d["workspaces"]
    expect((ms["parameters"], ms["gradients"], ms["optimizer_state"], ms["bytes"]) ==
           (16 * MiB, 8 * MiB, 16 * MiB, 40 * MiB) and ws["bytes"] == 2 * MiB, f"{d}")
    got = [(s["site"].split(" > ")[0], s["bytes"]) for s in d["sites"]]
    want = [(f"main (train_app.py:{L['leak']})", 3 * MiB),
            (f"main (train_app.py:{L['input']})", 512 * 1024)]
    expect(got == want and d["program"]["bytes"] == 3 * MiB + 512 * 1024 and
           d["leaked"] == 40 * MiB + 2 * MiB + 3 * MiB + 512 * 1024, f"{got}\n{d}")
    text = report("leaks", "k.gmt").stdout
    expect(re.search(r"model state, alive by design \(not leaks\): 40\.00 MiB", text) and
           re.search(r"library workspaces and caches: 2\.00 MiB", text) and
           re.search(r"the program's own, never given back( \([^)]*\))?: 3\.50 MiB", text) and
           "Module" not in text.split("never given back")[1], text)
