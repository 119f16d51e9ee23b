"""The PyTorch bridge, against a stand-in for PyTorch: build/tests/torch
(tests/sim/torch) holds lib/libc10_cuda.so, a small caching allocator that
follows PyTorch's rules over the simulated runtime and calls trace
trackers as PyTorch does, and include/c10/cuda/CUDACachingAllocator.h,
the part of PyTorch's header the bridge needs. tests/e2e/py/torch_app.py
allocates through it from Python and prints the allocator's own figures,
which the trace must reproduce.

test_standin_*: the stand-in alone (its own tracker test, the app without
the library, the bridge's source compiled and driven without the library).

test_fw_*: the library with the bridge attached. NOTE: these need the
library side of the framework bridge (preload/fw.c, fw_build.c,
fw_torch.cpp) and the report's side (dump's rendering of its records,
summary --json's "framework" object); without them they fail. They read
`gpumemreport dump` loosely: the record name, bare words (the api) and
key=value tokens.
"""
import json
import os
import shutil
import re
import stat
import subprocess
import sys

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APP = os.path.join(HERE, "py", "torch_app.py")
TORCH = os.path.join(BUILD, "tests", "torch")
STANDIN = os.path.join(TORCH, "lib", "libc10_cuda.so")
CHECK = os.path.join(TORCH, "check_standin")
MiB = 1 << 20
WHOLE = 20 * MiB - MiB // 2 - 100  # torch_app.py's "whole" request
LOOP = 10                          # torch_app.py's default --loop


def site_lines():
    """name -> line number of torch_app.py's "# SITE name" comments."""
    lines = {}
    with open(APP) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"# SITE (\w+)", text)
            if m:
                lines[m.group(1)] = no
    return lines


def rounded(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


def cuda_include():
    return os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")


def run_app(*args, traced=False, out="t.gmt", cache="bridge-cache", check=True, timeout=120,
            **env):
    """torch_app.py under the library (traced) or alone; (process, the
    app's JSON). The bridge cache is a directory of the scratch dir."""
    extra = {"SIM_TORCH_LIB": STANDIN, "GMT_BUILD": BUILD}
    if traced:
        if cache and not os.path.isdir(cache):
            os.mkdir(cache, 0o700)
        extra.update(GPUMEMTRACE_OUTPUT=out, GPUMEMTRACE_CACHE=os.path.abspath(cache))
    extra.update(env)
    p = run([sys.executable, APP, *args], traced=traced, check=check, timeout=timeout, **extra)
    lines = p.stdout.strip().splitlines()
    res = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if check:
        expect(res is not None, f"no JSON from torch_app.py\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p, res


# ---- the stand-in alone -------------------------------------------------------

def test_standin_layout():
    # what the library looks for: a module named libc10_cuda.so*, whose
    # directory's ../include has PyTorch's header; no libc10.so (the
    # bridge's build links it only where it exists)
    expect(os.path.basename(STANDIN).startswith("libc10_cuda.so"), STANDIN)
    header = os.path.join(os.path.dirname(STANDIN), "..", "include", "c10", "cuda",
                          "CUDACachingAllocator.h")
    expect(os.path.isfile(header), f"{header} missing")
    expect(not os.path.exists(os.path.join(os.path.dirname(STANDIN), "libc10.so")),
           "the stand-in has a libc10.so")
    import ctypes
    lib = ctypes.CDLL(STANDIN)
    # c10::cuda::CUDACachingAllocator::allocator, exported as PyTorch's is
    ptr = ctypes.c_void_p.in_dll(lib, "_ZN3c104cuda20CUDACachingAllocator9allocatorE")
    expect(ptr.value, "the allocator pointer is not set when the library is loaded")


def test_standin_allocator():
    # its own tracker: event order and sizes, statistics as trackers see
    # them, the lock held, a second device, threads
    p = run([CHECK], traced=False, SIM_CUDA_DEVICES=2)
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)


def test_standin_bridge():
    # preload/fw_torch.cpp compiled against the stand-in as the library
    # compiles it, loaded and attached through its C ABI without the
    # library: it must see every event and correct exactly the block
    # handed out whole, and the peaks replayed from its events must be
    # the allocator's own
    lib = os.path.dirname(STANDIN)
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-O2", "-fPIC", "-shared",
           "-fvisibility=hidden", "-I" + os.path.join(TORCH, "include"), "-I" + cuda_include(),
           os.path.join(ROOT, "preload", "fw_torch.cpp"), "-o", "bridge.so",
           "-L" + lib, "-Wl,-rpath," + lib, "-lc10_cuda"]
    c = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    expect(c.returncode == 0, f"{' '.join(cmd)}\n{c.stdout}{c.stderr}")
    p = run([CHECK, "--bridge", os.path.abspath("bridge.so")], traced=False, SIM_CUDA_DEVICES=2)
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)


def test_standin_app_figures():
    _, r = run_app()
    expect(r["backend"] == "native", r)
    # small 512 + whole (a 20 MiB block) + kept 3 x 5 MiB + scratch 12 MiB
    expect(r["peak_allocated"] == 512 + 20 * MiB + 15 * MiB + 12 * MiB, r)
    expect(r["peak_requested"] == 4 + WHOLE + 15 * MiB + 12 * MiB, r)
    # segments: 2 MiB small, 20 MiB (mid, then whole), 20 MiB (loop, kept), 12 MiB
    expect(r["peak_reserved"] == 54 * MiB, r)
    expect(r["blocks"] == {"small": 512, "mid": 3 * MiB, "whole": 20 * MiB, "scratch": 12 * MiB}, r)
    n = 7 + LOOP
    expect((r["allocs"], r["frees"], r["frees_completed"]) == (n, n, n), r)
    expect((r["segments"], r["segment_frees"], r["ooms"]) == (4, 4, 0), r)
    expect(r["allocated"] == 0 and r["reserved"] == 0, r)


def test_standin_app_oom_and_options():
    _, r = run_app("--oom", "2048", "--record-stream", "--pool", "--threads", "3")
    expect(r["oom_failed"] is True and r["ooms"] == 1, r)
    expect(r["allocs"] == r["frees"] == r["frees_completed"], r)
    expect(r["segments"] == r["segment_frees"] and r["reserved"] == 0, r)
    # small device: the OOM comes from the device's size, not the request's
    _, r = run_app("--oom", "200", SIM_CUDA_MEM="128M")
    expect(r["oom_failed"] is True and r["ooms"] == 1, r)
    _, r = run_app("--oom", "20", SIM_CUDA_MEM="128M")
    expect(r["oom_failed"] is False and r["ooms"] == 0, r)


def test_standin_app_backends():
    _, r = run_app(SIM_TORCH_BACKEND="cudaMallocAsync")
    expect(r["backend"] == "cudaMallocAsync" and r["segments"] == 0 and r["allocs"] == 7 + LOOP, r)
    expect(r["blocks"]["whole"] == WHOLE, r)
    # PyTorch's uncached path: each tensor its own cudaMalloc, no statistics
    _, r = run_app(PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    expect(r["backend"] == "native" and r["allocs"] == 0 and r["peak_reserved"] == 0, r)


# ---- the library with the bridge (needs preload/fw.c's side) -------------------------

class Rec:
    """One `gpumemreport dump` line: seq, record name, bare words (the api
    first), key=value tokens."""

    def __init__(self, line):
        f = line.split()
        self.line = line
        self.name = f[4] if len(f) > 4 else ""
        self.words = [t for t in f[5:] if "=" not in t]
        self.kv = dict(t.split("=", 1) for t in f[5:] if "=" in t)

    def int(self, key):
        v = self.kv.get(key)
        return None if v is None else int(v, 0)

    def failed(self):
        return self.name in ("oom", "alloc_failed") or "->" in self.words or \
            any(w.startswith("cudaError") for w in self.words) or \
            "error" in self.kv or ("result" in self.kv and self.kv["result"] not in ("0", "cudaSuccess"))

    def __repr__(self):
        return self.line


def records(trace):
    return [Rec(l) for l in dump(trace) if l[:1].isdigit()]


def torch_allocs(recs):
    return [r for r in recs if "torch_block" in r.words and
            r.name in ("alloc", "oom", "alloc_failed")]


def torch_frees(recs):
    return [r for r in recs if r.name in ("free", "free_requested") and
            any(w.startswith("torch") for w in r.words)]


def cuda_mallocs(recs):
    """Successful cudaMalloc records: (fw_backing ones, others)."""
    ok = [r for r in recs if r.name == "alloc" and "cudaMalloc" in r.words and not r.failed()]
    backing = [r for r in ok if "fw_backing" in r.words or "fw_backing" in r.kv]
    return backing, [r for r in ok if r not in backing]


def fw_segments(recs, action):
    return [r for r in recs if r.name == "fw_segment" and r.kv.get("action") == action]


def notes(trace):
    return info(trace)["notes"]


def attached_note(trace):
    n = [x for x in notes(trace) if "PyTorch" in x]
    return n


def bridge_sos(cache):
    return sorted(f for f in os.listdir(cache) if f.endswith(".so"))


def test_fw_blocks_match_the_allocator():
    p, r = run_app("--oom", "2048", "--record-stream", "--pool", traced=True)
    recs = records("t.gmt")
    n = [x for x in attached_note("t.gmt") if "no block events" not in x]
    expect(n, f"no note says the PyTorch bridge attached: {notes('t.gmt')}\nstderr: {p.stderr}")
    allocs = torch_allocs(recs)
    ok = [a for a in allocs if not a.failed()]
    failed = [a for a in allocs if a.failed()]
    expect(len(ok) == r["allocs"], f"{len(ok)} torch_block allocs, the allocator made {r['allocs']}")
    expect(len(failed) == r["ooms"] == 1, f"failed torch_block allocs: {failed}, ooms {r['ooms']}")
    frees = torch_frees(recs)
    expect(len(frees) == r["frees"], f"{len(frees)} torch_block frees, the allocator {r['frees']}")
    completed = [x for x in recs if x.name == "free_completed"]
    expect(len(completed) == r["frees_completed"],
           f"{len(completed)} free_completed, the allocator {r['frees_completed']}")
    expect(len(fw_segments(recs, "alloc")) == r["segments"] and
           len(fw_segments(recs, "free")) == r["segment_frees"],
           f"fw_segment alloc/free {len(fw_segments(recs, 'alloc'))}/"
           f"{len(fw_segments(recs, 'free'))}, the allocator {r['segments']}/{r['segment_frees']}")
    # every segment's cudaMalloc, the first one too (the bridge attaches
    # inside it), is marked as the framework's backing, and nothing else
    # called cudaMalloc
    backing, plain = cuda_mallocs(recs)
    expect(len(backing) == r["segments"] and not plain,
           f"{len(backing)} fw_backing cudaMallocs, {len(plain)} others; {r['segments']} segments")
    # sizes: the requested size on the alloc, the block's real size
    # corrected exactly once: the "whole" block (20 MiB for 19.5 MiB)
    whole = [a for a in ok if a.int("size") == WHOLE]
    expect(len(whole) == 1, f"torch_block alloc of {WHOLE} bytes: {whole}")
    fixes = [x for x in recs if x.name == "fw_block_size"]
    expect(len(fixes) == 1 and fixes[0].kv.get("ptr") == whole[0].kv.get("ptr") and
           fixes[0].int("size") == r["blocks"]["whole"] == 20 * MiB,
           f"fw_block_size records: {fixes}; whole: {whole}")
    # the OOM: PyTorch's state first, then the failed block
    oom_i = [i for i, x in enumerate(recs) if x.name == "oom_state"]
    fail_i = [i for i, x in enumerate(recs) if x in failed]
    expect(oom_i and fail_i and oom_i[-1] < fail_i[0], f"oom_state at {oom_i}, failed block at {fail_i}")
    expect(failed[0].int("size") in (None, 2048 * MiB), f"{failed[0]}")
    # the private pool {0, 7}: its three blocks carry the pool's id
    pooled = [a for a in ok if a.kv.get("pool", "0") not in ("0", "0x0", "0/0", "0:0", "default")]
    expect(len(pooled) == 3, f"blocks of a private pool: {pooled}")


def framework_summary(trace):
    doc = json.loads(report("summary", "--json", trace).stdout)
    fw = doc["traces"][0].get("framework") or doc.get("framework")
    expect(isinstance(fw, dict), f"summary --json has no 'framework' object: {doc['traces'][0]}")
    return doc["traces"][0], fw


def test_retention_takes_a_blocks_size_said_after_the_capture():
    """The "whole" request takes a 20 MiB segment whole; the bridge says
    that block's size at the allocator's next event, after the capture
    torch_app.py writes right after it. `retention` counts the block as the
    allocator made it, not as the request rounded."""
    p, r = run_app("--retention-line", traced=True)
    cap = json.loads(report("retention", "--json", "t.gmt").stdout)["traces"][0]["captures"]
    expect(len(cap) == 1, cap)
    h = cap[0]["holders"][0]
    whole = r["blocks"]["whole"]
    expect(whole == 20 * MiB and h["chain"] == ["__main__.w"] and h["retained"] == WHOLE and
           h["allocated"] == whole, (h, whole))
    b = cap[0]["blocks"][0]
    expect(b["allocated"] == whole and b["site"].startswith("whole (torch_app.py:"), b)


def test_fw_peaks_match_the_allocator():
    # threads, and blocks completed later: the sums over the records must
    # still give the allocator's own peaks
    p, r = run_app("--threads", "4", "--record-stream", "--loop", "30", traced=True)
    s, fw = framework_summary("t.gmt")
    expect(fw.get("peak_allocated") == r["peak_allocated"],
           f"framework.peak_allocated {fw.get('peak_allocated')}, the allocator {r['peak_allocated']}")
    expect(fw.get("peak_reserved") == r["peak_reserved"],
           f"framework.peak_reserved {fw.get('peak_reserved')}, the allocator {r['peak_reserved']}")
    # requested: the tensors' sizes, not PyTorch's segments (fw_backing is
    # not counted a second time)
    expect(s["peak_requested"] == r["peak_requested"],
           f"peak_requested {s['peak_requested']}, the allocator's requested peak {r['peak_requested']}")
    recs = records("t.gmt")
    expect(len([a for a in torch_allocs(recs) if not a.failed()]) == r["allocs"] and
           len(torch_frees(recs)) == r["frees"], f"counts under threads: {r}")


def test_fw_summary_counts():
    # summary --json's framework object counts what the allocator did
    p, r = run_app("--oom", "2048", "--record-stream", "--pool", traced=True)
    s, fw = framework_summary("t.gmt")
    want = {"allocs": r["allocs"], "frees": r["frees"], "ooms": r["ooms"],
            "segments": r["segments"], "segment_frees": r["segment_frees"],
            "block_sizes": 1, "backing_allocations": r["segments"]}
    got = {k: fw.get(k) for k in want}
    expect(got == want, f"framework counts {got}, the allocator's {want}")
    # with gpumemtrace's pool on (the default) too: PyTorch's segments
    # bypass the pool, so these records are all PyTorch's
    expect(fw.get("free_completed") == r["frees_completed"],
           f"framework.free_completed {fw.get('free_completed')}, the allocator completed "
           f"{r['frees_completed']} frees ({len([x for x in records('t.gmt') if x.name == 'free_completed'])} "
           f"free_completed records in the trace)")


def test_fw_python_sites():
    p, r = run_app(traced=True)
    L = site_lines()
    doc = json.loads(report("peak", "--json", "--top", "0", "t.gmt").stdout)
    sites = {x["site"]: (x["bytes"], x["allocations"]) for x in doc["traces"][0]["sites"]}

    def at(name, func):
        got = [v for k, v in sites.items() if k.startswith(f"{func} (torch_app.py:{L[name]})")]
        expect(len(got) == 1, f"site {func} (torch_app.py:{L[name]}) at the peak: {sites}")
        return got[0]

    expect(at("kept", "keep") == (15 * MiB, 3), f"kept: {sites}")
    expect(at("scratch", "scratch") == (12 * MiB, 1), f"scratch: {sites}")
    b, n = at("whole", "whole")
    expect(n == 1 and b in (WHOLE, rounded(WHOLE), 20 * MiB), f"whole: {sites}")
    # the loop's blocks were all freed before the peak
    expect(not any(f"(torch_app.py:{L['loop']})" in k for k in sites), f"loop at the peak: {sites}")
    # stacks begin in the allocator (the caller of the trace tracker): the
    # bridge's own frames are cut as the library's are
    frames = [l for l in report("dump", "t.gmt").stdout.splitlines() if l.strip().startswith("#")]
    expect(frames and not any("torch-bridge" in l for l in frames),
           [l for l in frames if "torch-bridge" in l][:5])
    expect(any("libc10_cuda.so" in l for l in frames), frames[:20])


def test_fw_other_backend_falls_back():
    p, r = run_app(traced=True, SIM_TORCH_BACKEND="cudaMallocAsync")
    said = [l for l in p.stderr.splitlines() if "cudaMallocAsync" in l]
    expect(len(said) == 1, f"stderr lines naming the backend: {said}\nstderr: {p.stderr}")
    # nothing to attach to: no bridge is built to learn that
    expect("building" not in p.stderr and not bridge_sos("bridge-cache"), p.stderr)
    expect(any("cudaMallocAsync" in x for x in notes("t.gmt")), f"notes: {notes('t.gmt')}")
    recs = records("t.gmt")
    expect(not torch_allocs(recs) and not torch_frees(recs), "torch_block records without the bridge")
    # the hooks still see every block: one cudaMallocAsync each
    asyncs = [x for x in recs if x.name == "alloc" and "cudaMallocAsync" in x.words and not x.failed()]
    expect(len(asyncs) == r["allocs"] == 7 + LOOP, f"{len(asyncs)} cudaMallocAsync, {r['allocs']} blocks")


def test_fw_no_caching_no_attach():
    # every tensor is its own cudaMalloc: nothing to attach to, nothing built
    p, r = run_app(traced=True, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    recs = records("t.gmt")
    expect(not torch_allocs(recs) and not fw_segments(recs, "alloc"), "framework records")
    backing, plain = cuda_mallocs(recs)
    expect(not backing and len(plain) == 7 + LOOP, f"{len(backing)} fw_backing, {len(plain)} cudaMalloc")
    expect(not bridge_sos("bridge-cache"), f"a bridge was built: {os.listdir('bridge-cache')}")
    expect("warning" not in p.stderr, p.stderr)


def test_fw_off():
    p, r = run_app(traced=True, GPUMEMTRACE_FRAMEWORK="0")
    recs = records("t.gmt")
    expect(not torch_allocs(recs) and not fw_segments(recs, "alloc"), "framework records")
    backing, plain = cuda_mallocs(recs)
    # PyTorch's segments, seen at their cudaMalloc as before the bridge
    expect(not backing and len(plain) == r["segments"], f"{len(plain)} cudaMalloc, {r['segments']} segments")
    expect(not bridge_sos("bridge-cache"), f"a bridge was built: {os.listdir('bridge-cache')}")
    expect(not any("block events recorded" in x for x in notes("t.gmt")), notes("t.gmt"))


def test_fw_no_compiler():
    p, r = run_app(traced=True, GPUMEMTRACE_CXX="/nonexistent/c++")
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    warn = [l for l in lines if "warning" in l]
    expect(len(warn) == 1, f"wanted one warning line:\n{p.stderr}")
    expect(r["allocs"] == 7 + LOOP, r)  # the program ran on, unharmed
    recs = records("t.gmt")
    expect(not torch_allocs(recs), "torch_block records without a bridge")
    backing, plain = cuda_mallocs(recs)
    expect(not backing and len(plain) == r["segments"], f"{len(plain)} cudaMalloc, {r['segments']} segments")
    expect(any("no block events" in x or "compiler" in x for x in notes("t.gmt")), notes("t.gmt"))
    expect(not bridge_sos("bridge-cache"), os.listdir("bridge-cache"))


NOTE = "PyTorch's bridge did not attach ("
# the text reports that say so under their first line (summary, peak,
# leaks, growth and check print it too once they call gmt_fw_note)
NOTED = (["summary"], ["peak"], ["leaks"], ["growth"], ["timeline"], ["transfers"], ["frag"], ["phases"], ["whatif"], ["ranks"],
         ["diff", "t.gmt"])


def test_fw_not_attached_is_said_in_every_header():
    # a PyTorch process whose bridge could not be built: its trace holds
    # PyTorch's segments (as the cudaMalloc calls it made), not its tensors;
    # every report says so, with why, rather than calling the segments
    # what the program asked for
    for env, why in (({"GPUMEMTRACE_CXX": "/nonexistent/c++"}, "no C++ compiler"),
                     ({"GPUMEMTRACE_FRAMEWORK": "0"}, "GPUMEMTRACE_FRAMEWORK=0")):
        if os.path.exists("t.gmt"):
            os.unlink("t.gmt")
        run_app(traced=True, **env)
        for cmd in NOTED:
            out = report(*cmd, "t.gmt").stdout
            said = [l for l in out.splitlines() if NOTE in l]
            # diff: one for each side (here both the same trace)
            expect(len(said) == (2 if cmd[0] == "diff" else 1) and all(why in l for l in said),
                   (cmd, env, out))
        report("html", "-o", "p.html", "t.gmt")
        page = open("p.html", encoding="utf-8").read()
        m = re.search(r'"fw_missing":"([^"]*)"', page)
        expect(m and why in m.group(1), (env, m and m.group(1)))
    # attached: nothing to say
    os.unlink("t.gmt")
    run_app(traced=True)
    for cmd in NOTED:
        out = report(*cmd, "t.gmt").stdout
        expect(NOTE not in out, (cmd, out))
    report("html", "-o", "p.html", "t.gmt")
    expect('"fw_missing":""' in open("p.html", encoding="utf-8").read(), "fw_missing on an attached trace")


def test_fw_bridge_cached():
    p1, r1 = run_app(traced=True, out="a.gmt")
    expect("building" in p1.stderr, f"the first run does not say it builds the bridge:\n{p1.stderr}")
    sos = bridge_sos("bridge-cache")
    expect(len(sos) == 1, f"cache: {os.listdir('bridge-cache')}")
    mode = os.stat("bridge-cache").st_mode
    expect(not mode & (stat.S_IWGRP | stat.S_IWOTH), oct(mode))
    before = os.stat(os.path.join("bridge-cache", sos[0])).st_mtime_ns
    p2, r2 = run_app(traced=True, out="b.gmt")
    expect("building" not in p2.stderr, f"the second run built again:\n{p2.stderr}")
    expect(bridge_sos("bridge-cache") == sos and
           os.stat(os.path.join("bridge-cache", sos[0])).st_mtime_ns == before,
           f"cache: {os.listdir('bridge-cache')}")
    for t, r in (("a.gmt", r1), ("b.gmt", r2)):
        n = len([a for a in torch_allocs(records(t)) if not a.failed()])
        expect(n == r["allocs"], f"{t}: {n} torch_block allocs, the allocator {r['allocs']}")


def test_fw_two_devices_first_allocations_at_once():
    # Device 1's first allocation comes while device 0's first is still in
    # the library's attach. The first run builds the bridge (about a
    # second): the attach must not deadlock with device 1's allocator lock,
    # which device 1's thread holds while it waits for its cudaMalloc - so
    # device 1's first segment and block, made before the tracker could
    # reach its allocator, are lost (docs/usage.md says so), and the report
    # says its records do not add up rather than inventing them. The
    # second run loads the cached bridge in milliseconds: nothing is lost.
    p, r = run_app("--two-devices", traced=True, out="first.gmt", SIM_CUDA_DEVICES=2)
    expect("building" in p.stderr and r["two_devices"] and r["dev1"]["allocs"] == 1, (r, p.stderr))
    s, fw = framework_summary("first.gmt")
    d0 = [d for d in fw.get("devices", []) if d.get("ordinal") == 0]
    expect(d0 and d0[0].get("peak_allocated") == r["peak_allocated"] and
           d0[0].get("peak_reserved") == r["peak_reserved"],
           f"device 0 in summary: {d0}, the allocator: {r}")
    expect(fw.get("inconsistencies", 0) >= 1, f"the lost block went unnoticed: {fw}")
    p, r = run_app("--two-devices", traced=True, out="second.gmt", SIM_CUDA_DEVICES=2)
    expect("building" not in p.stderr, p.stderr)
    recs = records("second.gmt")
    dev1 = [a for a in torch_allocs(recs) if a.line.split()[3] == "1"]
    seg1 = [x for x in fw_segments(recs, "alloc") if x.line.split()[3] == "1"]
    expect(len(dev1) == r["dev1"]["allocs"] and len(seg1) == r["dev1"]["segments"],
           f"device 1: {len(dev1)} torch_block allocs and {len(seg1)} fw_segment allocs in the "
           f"trace, the allocator made {r['dev1']['allocs']} and {r['dev1']['segments']}")
    s, fw = framework_summary("second.gmt")
    d1 = [d for d in fw.get("devices", []) if d.get("ordinal") == 1]
    expect(d1 and d1[0].get("peak_allocated") == r["dev1"]["peak_allocated"] and
           d1[0].get("peak_reserved") == r["dev1"]["peak_reserved"],
           f"device 1 in summary: {d1}, the allocator: {r['dev1']}")
    expect(fw.get("inconsistencies", 0) == 0, f"framework: {fw}")


def test_fw_build_sends_the_program_no_sigchld():
    # The compiler runs as a child the program cannot see: a program that
    # reaps any child on SIGCHLD (os.wait in a handler) must neither get
    # the signal nor lose a wait() to it while the bridge is built.
    wrapper = os.path.abspath("sigchld_app.py")
    with open(wrapper, "w") as f:
        f.write("import os, runpy, signal, sys\n"
                "got = []\n"
                "signal.signal(signal.SIGCHLD, lambda *a: got.append(os.wait()))\n"
                "sys.argv = sys.argv[1:]\n"
                "try:\n"
                "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
                "finally:\n"
                "    print('SIGCHLD', len(got), file=sys.stderr)\n")
    os.mkdir("bridge-cache", 0o700)
    p = run([sys.executable, wrapper, APP], traced=True, SIM_TORCH_LIB=STANDIN,
            GMT_BUILD=BUILD, GPUMEMTRACE_OUTPUT="t.gmt",
            GPUMEMTRACE_CACHE=os.path.abspath("bridge-cache"))
    expect("building" in p.stderr and "SIGCHLD 0" in p.stderr, p.stderr)
    expect(torch_allocs(records("t.gmt")), "the bridge did not attach")
    # a program that ignores SIGCHLD (its children reaped by the kernel):
    # the compiler's end is still read
    with open(wrapper) as f:
        text = f.read()
    with open(wrapper, "w") as f:
        f.write(text.replace("lambda *a: got.append(os.wait())", "signal.SIG_IGN"))
    shutil.rmtree("bridge-cache")
    os.mkdir("bridge-cache", 0o700)
    p = run([sys.executable, wrapper, APP], traced=True, SIM_TORCH_LIB=STANDIN,
            GMT_BUILD=BUILD, GPUMEMTRACE_OUTPUT="u.gmt",
            GPUMEMTRACE_CACHE=os.path.abspath("bridge-cache"))
    expect("building" in p.stderr and "warning" not in p.stderr, p.stderr)
    expect(torch_allocs(records("u.gmt")), "the bridge did not attach")


def test_fw_cache_must_be_the_users_own():
    # Code is loaded from the cache: a directory others can write, or a
    # symbolic link, is refused with one warning, and nothing is built.
    os.mkdir("open-cache", 0o700)
    os.chmod("open-cache", 0o777)
    os.mkdir("real-cache", 0o700)
    os.symlink(os.path.abspath("real-cache"), "link-cache")
    for cache in ("open-cache", "link-cache"):
        p, r = run_app(traced=True, cache=cache, out=f"{cache}.gmt")
        warn = [l for l in p.stderr.splitlines() if "warning" in l]
        expect(len(warn) == 1 and "cache directory" in warn[0], (cache, p.stderr))
        expect(not torch_allocs(records(f"{cache}.gmt")), f"{cache}: attached")
        expect(not bridge_sos(cache), (cache, os.listdir(cache)))
    # the user's own, 0700: built, and the bridge file is no one else's
    p, r = run_app(traced=True, cache="real-cache", out="ok.gmt")
    sos = bridge_sos("real-cache")
    expect(len(sos) == 1 and not os.stat(os.path.join("real-cache", sos[0])).st_mode & 0o022,
           os.listdir("real-cache"))
