"""gpumemreport whatif on real simulated traces: tests/progs/report_known.c
(cudaMalloc per request, peak requested known) and the framework traces
of tests/unit/test_fw.c --write (PyTorch's blocks are the requests). The
models' rules are unit-tested on hand-written streams (test_whatif.c);
here: the stream is picked right, the text and JSON agree, bad usage and
bad traces are answered cleanly."""
import json
import os
import subprocess

from gmt import *

MiB = 1 << 20


def known():
    p = run([prog("report_known")])
    want = dict(zip(p.stdout.split()[0::2], map(int, p.stdout.split()[1::2])))
    return one_trace(), want


def whatif(*args):
    doc = json.loads(report("whatif", "--json", *args).stdout)
    expect(doc["schema"] == "gpumemtrace.whatif/1", doc["schema"])
    return doc["traces"]


def test_ideal_is_peak_requested():
    t, want = known()
    peak = json.loads(report("summary", "--json", t).stdout)["traces"][0]["peak_requested"]
    expect(peak == want["peak"], f"{peak} {want}")
    tr = whatif(t)[0]
    expect(tr["requests_from"] == "cuda_allocations" and tr["device_memory"] is None, tr)
    pol = {p["policy"]: p for p in tr["policies"]}
    expect(list(pol) == ["ideal", "pytorch", "pytorch:expandable_segments:True"], list(pol))
    expect(pol["ideal"]["peak_reserved"] == peak and pol["ideal"]["device_allocs"] is None, pol)
    for p in pol.values():
        expect(p["peak_requested"] == peak and p["oom"] is None, p)
        expect(p["peak_reserved"] >= peak, p)
    # PyTorch rounds segments to 2 MiB or 20 MiB: some rounding above the requests
    py = pol["pytorch"]
    expect(py["peak_reserved"] % (2 * MiB) == 0 and py["device_allocs"] >= 1, py)
    expect(0 <= py["fragmentation"] < 1 and py["largest_free"] <= py["peak_reserved"], py)
    text = report("whatif", "--bytes", t).stdout
    expect(f"peak requested {peak}" in text, text)
    row = [l for l in text.splitlines() if l.startswith("pytorch ")]
    expect(len(row) == 1 and str(py["peak_reserved"]) in row[0], text)


def test_device_memory_oom_site():
    t, want = known()
    tr = whatif("--device-memory", "24MiB", "--policy", "ideal", "--policy", "pytorch", t)[0]
    expect(tr["device_memory"] == 24 * MiB, tr)
    for p in tr["policies"]:
        o = p["oom"]
        expect(o is not None and o["seq"] > 0 and o["size"] > 0, p)
        expect("(report_known.c:" in o["site"], o)
        expect(p["peak_reserved"] <= 24 * MiB, p)
    # the peak of 25 MiB does not fit 24 MiB: ideal fails at the request
    # that would have made it; 26 MiB is enough for ideal
    ok = whatif("--device-memory", "26MiB", "--policy", "ideal", t)[0]["policies"][0]
    expect(ok["oom"] is None, ok)
    text = report("whatif", "--device-memory", "24MiB", t).stdout
    expect("ideal: out of memory on device 0 at " in text and "(report_known.c:" in text, text)


def test_driver_allocations_alone_are_the_requests():
    """A program on the driver API alone (tests/progs/driver/drv_linked.c:
    cuMemAlloc 4 MiB and 1 MiB, the first freed): its allocations are the
    requests - in a trace with runtime allocations they would be held
    outside the models, as libraries' own memory (the live corpus test)."""
    p = run([prog("drv_linked")])
    expect(p.stdout.strip() == "done", p.stdout + p.stderr)
    tr = whatif("--policy", "ideal", one_trace())[0]
    expect(tr["requests_from"] == "driver_allocations" and tr["requests"] == 2 and
           tr["allocations_outside"] == 0, tr)
    expect(tr["policies"][0]["peak_reserved"] == 5 * MiB, tr)
    text = report("whatif", one_trace()).stdout
    expect("2 requests (CUDA driver allocations)" in text and "held outside" not in text, text)


def test_driver_allocations_beside_runtime_ones_are_held_outside():
    """tests/progs/mixed_alloc.c: cuMemAlloc 8 MiB before the first
    cudaMalloc, 16 MiB later, the runtime's requests peaking at 6 MiB.
    Both driver allocations are held outside the models - the first too,
    which comes before any runtime allocation tells what the trace is -
    and count against --device-memory: 8 + 4 + 2 MiB do not fit 13 MiB."""
    sim = os.path.join(BUILD, "sim")
    p = run([prog("mixed_alloc")], LD_LIBRARY_PATH=sim, SIM_CUDA_DRIVER="1")
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    tr = whatif("--policy", "ideal", one_trace())[0]
    expect(tr["requests_from"] == "cuda_allocations" and tr["requests"] == 3 and
           tr["allocations_outside"] == 2, tr)
    expect(tr["policies"][0]["peak_reserved"] == 6 * MiB, tr)
    oom = whatif("--policy", "ideal", "--device-memory", "13MiB", one_trace())[0]
    expect(oom["policies"][0]["oom"] is not None and
           oom["policies"][0]["oom"]["size"] == 2 * MiB, oom)
    text = report("whatif", one_trace()).stdout
    expect("3 requests (CUDA runtime allocations)" in text and
           "2 driver allocations held outside the models" in text, text)
    # --requests picks the stream: the driver's (the 8 and 16 MiB), or all
    drv = whatif("--policy", "ideal", "--requests", "driver", one_trace())[0]
    expect(drv["requests_from"] == "driver_allocations" and drv["requests"] == 2 and
           drv["allocations_outside"] == 3 and drv["policies"][0]["peak_reserved"] == 24 * MiB,
           drv)
    both = whatif("--policy", "ideal", "--requests", "all", one_trace())[0]
    expect(both["requests_from"] == "all_allocations" and both["requests"] == 5 and
           both["allocations_outside"] == 0 and both["policies"][0]["peak_reserved"] == 27 * MiB,
           both)
    text = report("whatif", "--requests", "driver", one_trace()).stdout
    expect("2 requests (CUDA driver allocations)" in text and
           "3 runtime allocations held outside the models" in text, text)


def test_framework_blocks_are_the_requests():
    writer = os.path.join(BUILD, "tests", "unit", "test_fw")
    p = subprocess.run([writer, "--write", "."], capture_output=True, text=True, timeout=60)
    expect(p.returncode == 0, p.stderr)
    s = json.loads(report("summary", "--json", "fw_basic.gmt").stdout)["traces"][0]
    tr = whatif("fw_basic.gmt")[0]
    expect(tr["requests_from"] == "framework_blocks" and tr["requests"] == 4, tr)
    pol = {p["policy"]: p for p in tr["policies"]}
    # the blocks' peak, not the program's own 1 MiB cudaMalloc beside them
    expect(pol["ideal"]["peak_reserved"] == s["framework"]["peak_requested"], (pol, s))
    # the recorded run held three segments, 42 MiB: the model agrees
    expect(pol["pytorch"]["peak_reserved"] == s["framework"]["peak_reserved"] == 42 * MiB, pol)


def test_bad_usage_one_line():
    t, _ = known()
    for args in (["--policy", "tcmalloc"], ["--policy", "pytorch:max_split_size_mb:5"],
                 ["--policy", "pytorch:expandable_segments:maybe"],
                 ["--device-memory", "lots"], ["--device-memory", "-1G"], ["--top", "3"]):
        p = report("whatif", *args, t, check_rc=2)
        expect(p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr))
    p = report("whatif", check_rc=2)
    expect(len(p.stderr.strip().splitlines()) == 1, p.stderr)
    expect("pytorch[:CONF]" in report("whatif", "--help").stdout, "help")


def test_hostile_traces():
    t, _ = known()
    data = open(t, "rb").read()
    open("cut.gmt", "wb").write(data[: len(data) // 2])
    open("junk.gmt", "wb").write(bytes(range(256)) * 64)
    flipped = bytearray(data)
    for i in range(4096, len(flipped), 997):
        flipped[i] ^= 0x5A
    open("flipped.gmt", "wb").write(bytes(flipped))
    for name in ("cut.gmt", "junk.gmt", "flipped.gmt"):
        for extra in ([], ["--json"], ["--device-memory", "1MiB"]):
            p = report("whatif", *extra, name, check_rc=None, timeout=60)
            expect(p.returncode in (0, 2), (name, p.returncode, p.stderr))
            if p.returncode == 2:
                expect(p.stderr.startswith("gpumemreport"), (name, p.stderr))
            if extra == ["--json"] and p.returncode == 0:
                json.loads(p.stdout)


def test_real_traces_predict_pytorchs_reserved_peak():
    """tests/corpus: eight runs recorded on an H200 (training: GPT-2 bf16
    at two batch sizes, resnet50 fp32 and bf16, a TransformerEncoder fp32,
    torchvision's ViT-B/16 bf16; inference: GPT-2, resnet50) under
    PyTorch's default allocator settings, and PyTorch's own
    torch.cuda.max_memory_reserved() of real runs under five settings
    (real.json, tests/gpu/gpu-whatif.sh). whatif, from each one trace, must
    predict every setting without max_split_size_mb to the byte, those
    with it within 1% (the goal is 2%; the model's known gap: the
    worst measured is -0.50%, ViT's max_split 64 + roundup 8), and rank the
    settings' best as reality did."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus")
    real = json.load(open(os.path.join(corpus, "real.json")))["real_max_memory_reserved"]
    exact = 0
    for model, by_conf in real.items():
        with lzma.open(os.path.join(corpus, f"{model}.gmt.xz")) as f, open(f"{model}.gmt", "wb") as o:
            o.write(f.read())
        confs = list(by_conf)
        args = [a for c in confs for a in ("--policy", "pytorch" + (":" + c if c else ""))]
        tr = whatif("--no-symbols", *args, f"{model}.gmt")[0]
        expect(tr["requests_from"] == "framework_blocks", tr["requests_from"])
        got = {p["policy"]: p["peak_reserved"] for p in tr["policies"] if p["device"] == 0}
        for c in confs:
            pred, want = got["pytorch" + (":" + c if c else "")], by_conf[c]
            if "max_split_size_mb" in c:
                expect(abs(pred - want) <= want / 100, f"{model} {c}: {pred} vs {want}")
            else:
                expect(pred == want, f"{model} {c or '(default)'}: {pred} vs {want}")
            exact += pred == want
        best = min(confs, key=lambda c: by_conf[c])
        expect(min(confs, key=lambda c: got["pytorch" + (":" + c if c else "")]) == best,
               f"{model}: best setting {best}")
    expect(len(real) >= 8 and exact >= len(real) * 3, f"{exact} of {len(real) * 5} exact")


def test_cuda_async_against_the_real_pool():
    """--policy cuda-async (the driver's stream-ordered pool, by the rules
    tests/gpu/mempool_probe.cu measured) on the corpus models that also ran
    under PyTorch's backend:cudaMallocAsync (real.json, the driver pool's
    reserved high). The model is a lower bound: the driver fragments more
    than its measured rules say, and the prediction was 6-18% under the
    real figure. It must stay a lower bound (whole 32 MiB pages, at least
    the peak requested, at most the real figure) and within 20% of it."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus")
    real = json.load(open(os.path.join(corpus, "real.json")))["real_cuda_async_reserved"]
    models = [m for m in real if m != "what"]
    expect(len(models) >= 4, models)
    for model in models:
        with lzma.open(os.path.join(corpus, f"{model}.gmt.xz")) as f, open(f"{model}.gmt", "wb") as o:
            o.write(f.read())
        tr = whatif("--no-symbols", "--policy", "ideal", "--policy", "cuda-async", f"{model}.gmt")[0]
        pol = {p["policy"]: p for p in tr["policies"] if p["device"] == 0}
        a, want = pol["cuda-async"], real[model]
        expect(a["peak_reserved"] % (32 << 20) == 0, (model, a))
        expect(pol["ideal"]["peak_reserved"] <= a["peak_reserved"] <= want, (model, a, want))
        expect(a["peak_reserved"] >= 0.8 * want, (model, a["peak_reserved"], want))
        expect(a["device_frees"] == 0 and a["oom"] is None, (model, a))


def live_corpus():
    """The eight traces of tests/corpus/live-*.gmt.xz (PyTorch's cache off,
    10 steps each), each decompressed to MODEL.gmt here while the caller
    looks at it: yields MODEL."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus")
    models = sorted(f[:-len(".gmt.xz")] for f in os.listdir(corpus)
                    if f.startswith("live-") and f.endswith(".gmt.xz"))
    expect(len(models) == 8, models)
    for model in models:
        with lzma.open(os.path.join(corpus, f"{model}.gmt.xz")) as f, open(f"{model}.gmt", "wb") as o:
            o.write(f.read())
        yield model
        os.unlink(f"{model}.gmt")


def test_gmt_pool_whole_segments_on_the_live_corpus():
    """--policy gmt-pool:ordered,whole (GPUMEMTRACE_POOL_VMM_WHOLE=1 with
    ordered reuse, the pool's real code) on the eight live traces: never
    above the pytorch model's peak reserved (the pool's goal; with
    gmt-pool:ordered Llama training is above it, 5.00 GiB against 4.83),
    and on Llama below the plain pool's, by giving segments back (device
    frees) rather than cutting its 500 MiB segment for 250 MiB requests."""
    for model in live_corpus():
        tr = whatif("--no-symbols", "--policy", "pytorch", "--policy", "gmt-pool:ordered",
                    "--policy", "gmt-pool:ordered,whole", f"{model}.gmt")[0]
        pol = {p["policy"]: p for p in tr["policies"] if p["device"] == 0}
        o, w, torch = pol["gmt-pool:ordered"], pol["gmt-pool:ordered,whole"], pol["pytorch"]
        expect(0 < w["peak_reserved"] <= torch["peak_reserved"], (model, w, torch))
        if model == "live-llama":
            expect(o["peak_reserved"] > torch["peak_reserved"], (model, o, torch))
            expect(w["peak_reserved"] < 0.96 * o["peak_reserved"] and
                   w["device_frees"] > o["device_frees"], (model, w, o))


def test_gmt_pool_pages_on_the_live_corpus():
    """--policy gmt-pool:ordered,vmm,chunk=4 (GPUMEMTRACE_POOL_VMM=1,
    GPUMEMTRACE_POOL_VMM_CHUNK_MB=4 with ordered reuse, the pool's real
    code) holds every live trace within 1.05x its peak requested and below
    the pytorch model (the goal for the pool), with mappings made
    and undone; with the default mappings of up to 16 MiB resnet50
    inference is at 1.09x: free pages stuck in mappings a live block
    shares."""
    for model in live_corpus():
        tr = whatif("--no-symbols", "--policy", "ideal", "--policy", "pytorch", "--policy",
                    "gmt-pool:ordered,vmm,chunk=4", "--policy", "gmt-pool:ordered,vmm",
                    f"{model}.gmt")[0]
        pol = {p["policy"]: p for p in tr["policies"] if p["device"] == 0}
        v4, v16 = pol["gmt-pool:ordered,vmm,chunk=4"], pol["gmt-pool:ordered,vmm"]
        ideal, torch = pol["ideal"]["peak_reserved"], pol["pytorch"]["peak_reserved"]
        expect(ideal <= v4["peak_reserved"] <= 1.05 * ideal and v4["peak_reserved"] < torch,
               (model, v4, ideal, torch))
        expect(v4["device_allocs"] > v16["device_allocs"] > 0 and v4["device_frees"] > 0 and
               v4["syncs"] == 0, (model, v4, v16))
        if model == "live-timm-infer":
            expect(v16["peak_reserved"] > 1.08 * ideal, (model, v16, ideal))


def test_gmt_pool_pages_trace_by_trace():
    """Traces given together are modelled each as if alone: a page-mode
    pool emptied and used for the next trace once kept the last one's peak
    and grew up to it (GPT-2 inference after GPT-2 training: 4.26 GiB
    against 1.86 alone)."""
    models = []
    for model in live_corpus():
        if model in ("live-gpt2", "live-gpt2-infer"):
            os.link(f"{model}.gmt", f"keep-{model}.gmt")
            models.append(f"keep-{model}.gmt")
    args = ["--no-symbols", "--policy", "gmt-pool:ordered,vmm", "--policy", "gmt-pool:vmm"]
    together = whatif(*args, *models)
    expect(len(together) == 2, together)
    for i, t in enumerate(models):
        alone = whatif(*args, t)[0]
        for a, b in zip(together[i]["policies"], alone["policies"]):
            expect(a == b, (t, a, b))
        os.unlink(t)


def test_gmt_pool_on_the_corpus():
    """--policy gmt-pool and gmt-pool:ordered (the library's own pool,
    preload/pool*.c, linked in) on each corpus trace: they run and reserve
    at least what ideal does (the peak requested). On the 3-step traces
    recorded with PyTorch's cache on, at most 2% more than PyTorch's
    allocator (before the pool's loose-fit rule it held 1.17x
    PyTorch's peak on GPT-2 and 1.72x on GPT-2 inference). On the live
    traces (10 steps, cache off: the stream the pool serves), against the
    reserved peak of real runs with PyTorch's allocator (real.json): at
    most 1.2x (the worst, resnet50 inference, is 1.19x; the pool's goal of
    never above PyTorch is not met there), and with ordered reuse GPT-2
    training within 1.05x its peak requested (1.04x; 1.19x before the
    arenas were shared, live on an H100). The text table agrees with
    --json."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus")
    live = json.load(open(os.path.join(corpus, "real.json")))["live"]["pytorch"]
    models = sorted(f[:-len(".gmt.xz")] for f in os.listdir(corpus) if f.endswith(".gmt.xz"))
    expect(len(models) >= 16 and len([m for m in models if m.startswith("live-")]) == len(live),
           models)
    for model in models:
        with lzma.open(os.path.join(corpus, f"{model}.gmt.xz")) as f, open(f"{model}.gmt", "wb") as o:
            o.write(f.read())
        args = ["--no-symbols", "--policy", "ideal", "--policy", "pytorch", "--policy", "gmt-pool",
                "--policy", "gmt-pool:ordered", f"{model}.gmt"]
        tr = whatif(*args)[0]
        pol = {p["policy"]: p for p in tr["policies"] if p["device"] == 0}
        g, o, ideal, torch = pol["gmt-pool"], pol["gmt-pool:ordered"], pol["ideal"], pol["pytorch"]
        expect(g["peak_reserved"] >= ideal["peak_reserved"] > 0, (model, g, ideal))
        expect(o["peak_reserved"] >= ideal["peak_reserved"] and o["syncs"] == 0, (model, o))
        if model.startswith("live-"):
            real = live[model[len("live-"):]]["max_memory_reserved"]
            expect(g["peak_reserved"] <= 1.2 * real and o["peak_reserved"] <= 1.2 * real,
                   (model, g, o, real))
            # the pytorch model on the cache-off stream predicts the real
            # cache-on run to the byte: a cudaMalloc has no stream (the
            # trace's register held a cuMemset's, and the model put
            # resnet50's requests on two streams: 1.26x), and the driver's
            # allocations - libraries' workspaces, which PyTorch's allocator
            # never serves - are held outside (as requests they put resnet50
            # inference at 1.30x: a cuDNN workspace among them)
            expect(torch["peak_reserved"] == real, (model, torch, real))
            expect(tr["requests_from"] == "cuda_allocations" and
                   tr["allocations_outside"] > 0, (model, tr["requests_from"]))
            if model == "live-gpt2":
                expect(o["peak_reserved"] <= 1.05 * ideal["peak_reserved"], (model, o, ideal))
        else:
            expect(g["peak_reserved"] <= 1.02 * torch["peak_reserved"] and
                   o["peak_reserved"] <= 1.02 * torch["peak_reserved"], (model, g, o, torch))
        expect(g["peak_reserved"] % 512 == 0 and g["device_allocs"] >= 1, (model, g))
        expect(g["oom"] is None and 0 <= g["fragmentation"] <= 1, (model, g))
        expect(g["largest_free"] <= g["peak_reserved"], (model, g))
        text = report("whatif", "--bytes", *args).stdout
        row = [l.split() for l in text.splitlines() if l.startswith("gmt-pool ")]
        expect(len(row) == 1, (model, text))
        r = row[0]
        # policy, peak reserved, peak requested, frag, largest free, allocs / frees, syncs
        expect(int(r[1]) == g["peak_reserved"] and int(r[2]) == g["peak_requested"], (model, r, g))
        # JSON rounds to 4 places, the text to 0.1%, each from the exact figure
        expect(abs(float(r[3].rstrip("%")) - 100 * g["fragmentation"]) <= 0.06 and
               int(r[4]) == g["largest_free"],
               (model, r, g))
        expect(int(r[5]) == g["device_allocs"] and r[6] == "/" and int(r[7]) == g["device_frees"],
               (model, r, g))
        expect(int(r[8]) == g["syncs"], (model, r, g))
    p = report("whatif", "--help")
    expect("gmt-pool" in p.stdout and "gmt-pool:ordered" in p.stdout and
           "GPUMEMTRACE_POOL_VMM" in p.stdout, "help")


def test_fragmentation_is_a_share_on_the_corpus():
    """Every trace of tests/corpus through every kind of policy: the
    fragmentation at the reserved peak is 1 - largest free / free, a share
    (0..1) - the largest free block is part of the free memory, the
    reserved memory not handed out - and the reserved peak holds the peak
    of what is live. cuda-async once counted a free range of address space
    over pages no block was on as a free block, up to -204% on GPT-2."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus")
    models = sorted(f[:-len(".gmt.xz")] for f in os.listdir(corpus) if f.endswith(".gmt.xz"))
    expect(len(models) >= 16, models)
    policies = ["ideal", "pytorch", "pytorch:expandable_segments:True", "cuda-async", "gmt-pool",
                "gmt-pool:ordered,vmm"]
    for model in models:
        with lzma.open(os.path.join(corpus, f"{model}.gmt.xz")) as f, open("x.gmt", "wb") as o:
            o.write(f.read())
        args = ["--no-symbols"]
        for p in policies:
            args += ["--policy", p]
        tr = whatif(*args, "x.gmt")[0]
        got = {p["policy"] for p in tr["policies"]}
        expect(got == set(policies), (model, got))
        for p in tr["policies"]:
            expect(0 <= p["fragmentation"] <= 1, (model, p))
            expect(p["largest_free"] <= p["peak_reserved"], (model, p))
            expect(p["oom"] is None and p["peak_reserved"] >= p["peak_requested"], (model, p))
