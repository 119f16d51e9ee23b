"""gpumemreport export: a trace in the format of another tool's
viewer, each read back here the way that viewer reads it.

memory-viz: the pickle is loaded with Python's pickle and walked as
torch.cuda._memory_viz and the viewer's MemoryViz.js do: segments ->
blocks (which must tile their segment: the viewer computes each block's
address from the sizes before it) -> frames; device_traces replayed
forwards from nothing must end in the segments, and backwards from the
segments (as the viewer's "Allocator State History" does) must find every
block it touches and end with nothing.
"""
import json
import os
import pickle
import subprocess
import sys

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so")
MiB = 1 << 20
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}
STATES = {"active_allocated", "active_pending_free", "inactive"}


def export(fmt, t, out, *args, check_rc=0):
    return report("export", "--format", fmt, "-o", out, *args, t, check_rc=check_rc)


def summary(t):
    return json.loads(report("summary", "--json", t).stdout)["traces"][0]


def known_trace():
    run([prog("report_known")])
    return one_trace()


def fw_traces():
    writer = os.path.join(BUILD, "tests", "unit", "test_fw")
    p = subprocess.run([writer, "--write", "."], capture_output=True, text=True, timeout=60)
    expect(p.returncode == 0, f"test_fw --write: exit {p.returncode}\n{p.stderr}")
    return "fw_basic.gmt", "fw_oom.gmt", "fw_expandable.gmt"


def train_trace():
    os.mkdir("cache", 0o700)
    p = run([sys.executable, os.path.join(HERE, "py", "train_app.py")], SIM_TORCH_LIB=STANDIN,
            GMT_BUILD=BUILD, GPUMEMTRACE_OUTPUT="train.gmt",
            GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    return "train.gmt"


# ---- memory-viz ------------------------------------------------------------------


def check_frames(frames):
    expect(isinstance(frames, list), frames)
    for f in frames:
        expect(set(f) == {"filename", "line", "name"} and isinstance(f["filename"], str) and
               isinstance(f["line"], int) and isinstance(f["name"], str), f)


def check_segments(snap):
    """As _memory_viz.segsum does: every segment's blocks add up to it."""
    for s in snap["segments"]:
        for k in ("device", "address", "total_size", "allocated_size", "active_size",
                  "stream", "segment_type", "blocks", "frames"):
            expect(k in s, f"segment without {k}: {s}")
        check_frames(s["frames"])
        addr = s["address"]
        for b in s["blocks"]:
            expect(b["state"] in STATES and b["address"] == addr and b["size"] > 0, (s, b))
            expect(b["requested_size"] <= b["size"], b)
            check_frames(b["frames"])
            addr += b["size"]
        expect(addr == s["address"] + s["total_size"], f"blocks do not tile {s}")
        active = [b for b in s["blocks"] if b["state"] == "active_allocated"]
        expect(s["allocated_size"] == sum(b["size"] for b in active), s)
        expect(s["active_size"] == sum(b["size"] for b in s["blocks"]
                                       if b["state"] != "inactive"), s)


def replay_forward(snap):
    """The device traces from nothing: blocks live in segments, and the end
    is the snapshot's segments and their active blocks."""
    for dev, events in enumerate(snap["device_traces"]):
        segs, blocks, pending, mapped = {}, {}, set(), set()
        for e in events:
            expect(e["action"] in ACTIONS, e)
            for k in ("addr", "size", "stream", "time_us", "frames"):
                expect(k in e, f"entry without {k}: {e}")
            check_frames(e["frames"])
            a = e["action"]
            if a in ("segment_alloc", "segment_map"):
                segs[e["addr"]] = e["size"]
                if a == "segment_map":
                    mapped.add(e["addr"])
            elif a in ("segment_free", "segment_unmap"):
                if a == "segment_free":
                    expect(segs.pop(e["addr"], None) == e["size"], e)
                else:
                    whole = next(x for x in segs if x <= e["addr"] < x + segs[x])
                    end = whole + segs.pop(whole)
                    if whole < e["addr"]:
                        segs[whole] = e["addr"] - whole
                    if e["addr"] + e["size"] < end:
                        segs[e["addr"] + e["size"]] = end - e["addr"] - e["size"]
                        mapped.add(e["addr"] + e["size"])
            elif a == "alloc":
                expect(e["addr"] not in blocks, e)
                expect(any(x <= e["addr"] < x + segs[x] for x in segs), f"block outside: {e}")
                blocks[e["addr"]] = e["size"]
            elif a == "free_requested":
                expect(blocks.get(e["addr"]) == e["size"] and e["addr"] not in pending, e)
                pending.add(e["addr"])
            elif a == "free_completed":
                expect(e["addr"] in pending, e)
                pending.discard(e["addr"])
                del blocks[e["addr"]]
            elif a == "oom":
                expect("device_free" in e, e)
            # expandable pieces merge as PyTorch shows them
            for x in sorted(segs):
                if x in segs and x in mapped and x + segs[x] in segs and x + segs[x] in mapped:
                    segs[x] += segs.pop(x + segs[x])
        mine = [s for s in snap["segments"] if s["device"] == dev]
        want_blocks = {b["address"]: b["requested_size"] for s in mine for b in s["blocks"]
                       if b["state"] != "inactive"}
        want_pending = {b["address"] for s in mine for b in s["blocks"]
                        if b["state"] == "active_pending_free"}
        expect(blocks == want_blocks, f"device {dev}: blocks {blocks} != {want_blocks}")
        expect(pending == want_pending, (pending, want_pending))
        expect(segs == {s["address"]: s["total_size"] for s in mine}, (segs, mine))


def viewer_backward(snap):
    """MemoryViz.js's simulate_memory to the first event: it starts from the
    snapshot's blocks and undoes each event; a free_requested of a block it
    does not hold would throw in the viewer."""
    for dev, events in enumerate(snap["device_traces"]):
        blocks = {b["address"] for s in snap["segments"] if s["device"] == dev
                  for b in s["blocks"] if b["state"] != "inactive"}
        merged = []  # annotate_snapshot: free_requested + free_completed -> free
        for e in events:
            if (e["action"] == "free_completed" and merged and
                    merged[-1]["action"] == "free_requested" and merged[-1]["addr"] == e["addr"]):
                merged[-1] = dict(merged[-1], action="free")
                continue
            merged.append(e)
        for e in reversed(merged):
            a = e["action"]
            if a in ("free", "free_completed"):
                blocks.add(e["addr"])
            elif a == "free_requested":
                expect(e["addr"] in blocks, f"the viewer would throw at {e}")
            elif a == "alloc":
                expect(e["addr"] in blocks, e)
                blocks.discard(e["addr"])
        expect(not blocks, f"device {dev}: blocks before the first event: {blocks}")


def memviz(t):
    export("memory-viz", t, "s.pickle")
    with open("s.pickle", "rb") as f:
        snap = pickle.load(f)
    expect(set(snap) >= {"segments", "device_traces"}, snap.keys())
    check_segments(snap)
    replay_forward(snap)
    viewer_backward(snap)
    return snap


def actions(snap, dev=0):
    out = {}
    for e in snap["device_traces"][dev]:
        out[e["action"]] = out.get(e["action"], 0) + 1
    return out


def test_memviz_pool_trace():
    t = known_trace()
    snap = memviz(t)
    inf, s = info(t), summary(t)
    n = actions(snap)
    # the pool's blocks: every device cudaMalloc, cudaFree and completion
    expect(n["alloc"] == inf["by_api"]["cudaMalloc"] and
           n["free_requested"] == inf["by_api"]["cudaFree"] and
           n["free_completed"] == inf["by_kind"]["free_completed"], (n, inf))
    expect(n["segment_alloc"] == inf["pool"]["segments_allocated"] and
           n["segment_free"] == inf["pool"]["segments_freed"], (n, inf["pool"]))
    # the blocks live at the end are the trace's live bytes
    active = [b for seg in snap["segments"] for b in seg["blocks"]
              if b["state"] == "active_allocated"]
    expect(sum(b["requested_size"] for b in active) == s["leaked"] == 5 * MiB and
           len(active) == s["leaked_allocations"] == 20, (len(active), s["leaked"]))
    # frames: the program's own lines, innermost first
    hist = [b for b in active if b["frames"] and b["frames"][0]["name"] == "history"]
    expect(len(hist) == 20 and hist[0]["frames"][0]["filename"].endswith("report_known.c") and
           hist[0]["frames"][1]["name"] == "main", hist[:1])
    expect(sum(seg["total_size"] for seg in snap["segments"]) ==
           sum(e["size"] for e in snap["device_traces"][0] if e["action"] == "segment_alloc") -
           sum(e["size"] for e in snap["device_traces"][0] if e["action"] == "segment_free"),
           "segments at the end")


def test_memviz_pytorch_blocks():
    basic, oom, expandable = fw_traces()
    snap = memviz(basic)
    fw = info(basic)["framework"]
    n = actions(snap)
    # PyTorch's blocks, plus the program's own 1 MiB cudaMalloc as a segment of
    # its own; the CUDA allocations under PyTorch's segments are no blocks
    expect(n["alloc"] == fw["blocks"] + 1 and n["free_requested"] == fw["frees"] + 1 and
           n["free_completed"] == fw["free_completed"] + 1, (n, fw))
    expect(n["segment_alloc"] == fw["segments"] + 1 and
           n["segment_free"] == fw["segment_frees"] + 1, (n, fw))
    segs = {s["address"]: s for s in snap["segments"]}
    S1 = 0x7f0000000000
    # the block whose real size came later (1000 bytes in 1024)
    expect([(b["state"], b["size"], b["requested_size"]) for b in segs[S1]["blocks"]] ==
           [("inactive", 512, 0), ("active_allocated", 1024, 1000),
            ("inactive", 2 * MiB - 1536, 0)], segs[S1]["blocks"])
    expect(summary(basic)["leaked"] == 1000, "live at the end")
    # an OOM: what PyTorch raised, with the device's free memory
    snap = memviz(oom)
    ooms = [e for d in snap["device_traces"] for e in d if e["action"] == "oom"]
    expect([e["size"] for e in ooms] == [40 << 30, 50 << 30], ooms)
    # expandable segments: pieces mapped and unmapped, one segment shown
    snap = memviz(expandable)
    expect([(s["address"], s["total_size"], s["is_expandable"]) for s in snap["segments"]] ==
           [(0x7f2000000000, 20 * MiB, True)], snap["segments"])
    expect([e["action"] for e in snap["device_traces"][0]] ==
           ["segment_map", "alloc", "segment_map", "alloc", "free_requested",
            "free_completed", "segment_unmap"], snap["device_traces"][0])


def test_memviz_python_frames():
    t = train_trace()
    snap = memviz(t)
    fw = info(t)["framework"]
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    # every block of PyTorch's allocator is an alloc; so is what cuBLAS
    # took with cudaMalloc itself (a segment of its own)
    own = [e for e in snap["device_traces"][0] if e["action"] == "segment_alloc"]
    expect(len(allocs) >= fw["blocks"] and len(own) >= fw["segments"], (len(allocs), fw))
    lines = {}
    with open(os.path.join(HERE, "py", "train_app.py")) as f:
        for no, text in enumerate(f, 1):
            if "# SITE input" in text:
                lines["input"] = no
    # the input's block: train_app.py's line among its frames, as PyTorch's
    # snapshot has the Python frame (filename, line, name)
    hits = [e for e in allocs if any(fr["filename"].endswith("train_app.py") and
                                     fr["line"] == lines["input"] and fr["name"] == "main"
                                     for fr in e["frames"])]
    expect(len(hits) == 1 and hits[0]["size"] == 512 * 1024, hits)
    # the stack's list is written once and shared
    expect(len({id(e["frames"]) for e in allocs}) < len(allocs), "frames memoized")


def test_export_errors():
    t = known_trace()
    p = report("export", "--format", "svg", "-o", "x", t, check_rc=2)
    expect(p.stderr.count("\n") == 1 and "no format 'svg'" in p.stderr, p.stderr)
    p = report("export", "--format", "pprof", "-o", "x", t, t, check_rc=2)
    expect("one trace" in p.stderr and not os.path.exists("x"), p.stderr)
    p = report("export", "-o", "x", t, check_rc=2)
    expect("--format is required" in p.stderr, p.stderr)
    p = report("export", "--format", "memory-viz", "-o", "x", "missing.gmt", check_rc=2)
    expect(p.stderr.count("\n") == 1 and not os.path.exists("x"), p.stderr)
    # stdout when it is not a terminal (here: a pipe)
    p = subprocess.run([REPORT, "export", "--format", "memory-viz", t], capture_output=True,
                       timeout=60)
    expect(p.returncode == 0 and pickle.loads(p.stdout)["segments"], p.stderr)
    # a terminal gets one line and no bytes
    try:
        import pty
        pid, fd = pty.fork()
    except OSError:
        return
    if pid == 0:
        os.execv(REPORT, [REPORT, "export", "--format", "memory-viz", t])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    expect(os.WEXITSTATUS(status) == 2 and b"not writing memory-viz to a terminal" in out and
           out.count(b"\n") == 1, out)


def test_export_hostile_traces():
    """Damaged traces: a clear line and exit 2, or an export of what was
    intact - never a crash (the sanitized build runs the same)."""
    import random
    t = known_trace()
    data = open(t, "rb").read()
    rnd = random.Random(19)
    san = os.path.join(BUILD, "tests", "gpumemreport-san")
    tools = [REPORT] + ([san] if os.path.exists(san) else [])
    for i in range(12):
        bad = bytearray(data)
        for _ in range(rnd.randint(1, 40)):
            bad[rnd.randrange(4096, len(bad))] = rnd.getrandbits(8)
        open("bad.gmt", "wb").write(bad)
        for fmt in FORMATS:
            for tool in tools:
                p = subprocess.run([tool, "export", "--format", fmt, "-o", "out", "bad.gmt"],
                                   capture_output=True, text=True, timeout=120)
                expect(p.returncode in (0, 2) and "Sanitizer" not in p.stderr and
                       "runtime error" not in p.stderr, f"{fmt} {tool}: {p.returncode} {p.stderr}")
                if p.returncode == 2:
                    expect(not os.path.exists("out"), "a failed export leaves no file")
    open("rand.gmt", "wb").write(bytes(rnd.getrandbits(8) for _ in range(9000)))
    for fmt in FORMATS:
        p = report("export", "--format", fmt, "-o", "out", "rand.gmt", check_rc=2)
        expect(p.stderr.count("\n") == 1, p.stderr)


def test_export_two_devices():
    """Each device its own list of events (memory-viz) and its own counters
    (perfetto), each reaching that device's peak."""
    run([prog("crossfree")], check=False, SIM_CUDA_DEVICES="2")
    t = one_trace()
    snap = memviz(t)
    devs = summary(t)["devices"]
    expect(len(snap["device_traces"]) == 2 and all(snap["device_traces"]), snap["device_traces"])
    ev = perfetto(t)
    for d in devs:
        req = series(ev, f"GPU {d['ordinal']} requested")
        expect(max(v for _, v in req) == d["peak_requested"] == MiB, (d, req))


# ---- perfetto ------------------------------------------------------------------------


def perfetto(t, *args):
    export("perfetto", t, "t.json", *args)
    with open("t.json") as f:
        doc = json.load(f)
    check_tef(doc)
    return doc["traceEvents"]


def check_tef(doc):
    """The Trace Event Format's rules for what we write: the fields each
    phase needs, numeric counter values, and every track in time order;
    B and E pair up per thread."""
    expect(isinstance(doc, dict) and isinstance(doc["traceEvents"], list), doc.keys())
    last, open_, names = {}, {}, {}
    for e in doc["traceEvents"]:
        ph = e["ph"]
        expect(ph in ("M", "C", "i", "B", "E") and isinstance(e["pid"], int), e)
        if ph == "M":
            expect(e["name"] in ("process_name", "thread_name") and
                   isinstance(e["args"]["name"], str) and isinstance(e["tid"], int), e)
            continue
        expect(isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e)
        expect(isinstance(e["tid"], int), e)
        expect(isinstance(e["name"], str) and e["name"], e)
        if ph == "C":
            expect(e["args"] and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                     for v in e["args"].values()), e)
        if ph == "i":
            expect(e["s"] in ("g", "p", "t"), e)
        track = (e["pid"], e["name"]) if ph == "C" else (e["pid"], e["tid"])
        expect(e["ts"] >= last.get(track, 0), f"track {track} goes back in time at {e}")
        last[track] = e["ts"]
        if ph == "B":
            open_[track] = open_.get(track, 0) + 1
            names.setdefault(track, []).append(e["name"])
        elif ph == "E":
            expect(open_.get(track, 0) > 0, f"E without B: {e}")
            open_[track] -= 1
            # the format does not need an E's name; viewers match on it
            expect(e["name"] == names[track].pop(), f"E {e['name']} closes another slice")
    expect(not any(open_.values()), f"slices left open: {open_}")


def series(events, name):
    return [(e["ts"], e["args"]["bytes"]) for e in events if e["ph"] == "C" and
            e["name"] == name]


def test_perfetto_counters_are_the_peaks():
    t = known_trace()
    ev = perfetto(t)
    s = summary(t)
    d = s["devices"][0]
    req, alloc, res = (series(ev, f"GPU 0 {k}") for k in ("requested", "allocated", "reserved"))
    expect(max(v for _, v in req) == d["peak_requested"] == s["peak_requested"] and
           max(v for _, v in alloc) == d["peak_allocated"] and
           max(v for _, v in res) == d["peak_reserved"], (d, max(req), max(alloc), max(res)))
    # at the end: what is live (the leaks) and what the pool still holds
    expect(req[-1][1] == s["leaked"] == 5 * MiB, req[-1])
    # microseconds since the start: the run lasted duration_ns
    ts_ = [e["ts"] for e in ev if e["ph"] != "M"]
    expect(0 <= min(ts_) and max(ts_) <= s["duration_ns"] / 1000 + 1, (max(ts_), s["duration_ns"]))
    expect(max(ts_) > s["duration_ns"] / 1000 / 2, "times in microseconds, not ns or s")
    names = [e for e in ev if e["ph"] == "M"]
    expect(names[0]["name"] == "process_name" and "report_known" in names[0]["args"]["name"],
           names)
    # PyTorch's allocator: torch.cuda.max_memory_reserved and the program's MiB
    basic, oom, _ = fw_traces()
    ev = perfetto(basic)
    d = summary(basic)["devices"][0]
    expect(max(v for _, v in series(ev, "GPU 0 reserved")) == d["peak_reserved"] == 43 * MiB and
           max(v for _, v in series(ev, "GPU 0 allocated")) == d["peak_allocated"], d)
    ev = perfetto(oom)
    ooms = [e for e in ev if e["ph"] == "i" and e.get("cat") == "oom"]
    expect(len(ooms) == summary(oom)["ooms"] == 2 and ooms[0]["args"]["size"] == 40 << 30 and
           ooms[0]["s"] == "p", ooms)


def test_perfetto_ranges_and_marks():
    run([prog("phases"), "basic"])
    t = one_trace()
    ev = perfetto(t)
    slices = [(e["ph"], e.get("name")) for e in ev if e["ph"] in ("B", "E")]
    step = [("B", "forward"), ("E", "forward"), ("B", "backward"), ("B", "allreduce"),
            ("E", "allreduce"), ("E", "backward")]
    expect(slices == [("B", "setup"), ("E", "setup")] + step * 3, slices)
    marks = [e["name"] for e in ev if e["ph"] == "i" and e["s"] == "t"]
    expect(marks == ["step"] * 3 + ["eval"], marks)
    # the peak, 21 MiB, inside the third step's allreduce
    req = series(ev, "GPU 0 requested")
    peak_ts = next(ts for ts, v in req if v == 21 * MiB)
    ar = [e["ts"] for e in ev if e.get("name") == "allreduce"][2]
    expect(max(v for _, v in req) == 21 * MiB and peak_ts >= ar, (peak_ts, ar))
    os.remove(t)
    # pops without a push are dropped; a range left open ends with the trace
    run([prog("phases"), "unbalanced"])
    ev = perfetto(one_trace())
    slices = [(e["ph"], e.get("name")) for e in ev if e["ph"] in ("B", "E")]
    expect(slices == [("B", "a"), ("E", "a"), ("B", "left-open"), ("E", "left-open")], slices)


def test_perfetto_decimates_long_runs():
    gen = os.path.join(BUILD, "tests", "gen_trace")
    subprocess.run([gen, "400000", "big.gmt", "4"], check=True, capture_output=True, timeout=120)
    ev = perfetto("big.gmt")
    s = summary("big.gmt")
    req = series(ev, "GPU 0 requested")
    # at most two points per span of the run, and the peak exact
    expect(len(req) <= 2 * 20000 + 2 and len(req) < s["allocations"], len(req))
    expect(max(v for _, v in req) == s["peak_requested"], (max(v for _, v in req), s))
    expect(max([v for _, v in series(ev, "GPU 0 reserved")] or [0]) == s["peak_reserved"], s)


def viewer(*files):
    """Each file opened in the speedscope viewer (its npm package's page)
    in Debian's headless Chromium: tests/browser/check-speedscope.js."""
    browser = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "browser")
    expect(os.path.isdir(os.path.join(browser, "node_modules", "speedscope")),
           "no tests/browser/node_modules/speedscope: run scripts/install-deps.sh (npm ci)")
    p = subprocess.run(["node", os.path.join(browser, "check-speedscope.js"), *files],
                       capture_output=True, text=True, timeout=180)
    expect(p.returncode == 0, p.stderr)
    return [json.loads(l) for l in p.stdout.splitlines()]


def test_exports_open_in_a_viewer():
    """A real viewer reads both JSON exports: speedscope shows the
    speedscope file's first profile (bytes live at the peak) and, from the
    perfetto file (Trace Event Format, which speedscope imports too), the
    thread's slices - with no console error."""
    run([prog("phases"), "basic"])
    t = one_trace()
    export("speedscope", t, "t.speedscope.json")
    export("perfetto", t, "t.perfetto.json")
    ss, te = viewer("t.speedscope.json", "t.perfetto.json")
    cmd = summary(t)["command"]
    expect(ss["title"].endswith(" - speedscope") and cmd in ss["title"] and
           "GPU memory live at the peak (bytes requested)" in ss["text"] and not ss["errors"],
           ss)
    expect(te["title"] == "t.perfetto.json - speedscope" and
           "phases basic" in te["text"] and not te["errors"], te)


# ---- speedscope ----------------------------------------------------------------------


def check_speedscope(doc):
    """speedscope's file-format-schema.json, what we use of it."""
    expect(doc["$schema"] == "https://www.speedscope.app/file-format-schema.json", doc.keys())
    frames = doc["shared"]["frames"]
    for f in frames:
        expect(isinstance(f["name"], str) and set(f) <= {"name", "file", "line", "col"}, f)
        expect("line" not in f or (isinstance(f["line"], int) and "file" in f), f)
    expect(len({(f["name"], f.get("file"), f.get("line")) for f in frames}) == len(frames),
           "each frame once")
    for p in doc["profiles"]:
        expect(p["type"] == "sampled" and p["unit"] == "bytes" and isinstance(p["name"], str), p)
        expect(len(p["samples"]) == len(p["weights"]) and p["startValue"] == 0 and
               p["endValue"] == sum(p["weights"]), p)
        for smp in p["samples"]:
            expect(smp and all(isinstance(i, int) and 0 <= i < len(frames) for i in smp), smp)
    expect(0 <= doc.get("activeProfileIndex", 0) < len(doc["profiles"]), doc)
    return frames


def stacks_of(doc, p):
    frames = doc["shared"]["frames"]
    out = {}
    for smp, w in zip(doc["profiles"][p]["samples"], doc["profiles"][p]["weights"]):
        key = ";".join(frames[i]["name"] for i in smp)
        out[key] = out.get(key, 0) + w
    return out


def folded(t, *args):
    out = {}
    for line in report("flamegraph", *args, t).stdout.splitlines():
        stack, n = line.rsplit(" ", 1)
        out[";".join(fr.split(" (")[0] for fr in stack.split(";"))] = int(n)
    return out


def test_speedscope_bytes():
    t = known_trace()
    export("speedscope", t, "s.json")
    with open("s.json") as f:
        doc = json.load(f)
    check_speedscope(doc)
    s = summary(t)
    peak, total = doc["profiles"]
    expect(sum(peak["weights"]) == s["peak_requested"] == 25 * MiB, sum(peak["weights"]))
    expect("peak" in peak["name"] and "over the run" in total["name"],
           (peak["name"], total["name"]))
    # the flamegraph's stacks and bytes, frames outermost first
    expect(stacks_of(doc, 0) == folded(t), (stacks_of(doc, 0), folded(t)))
    expect(stacks_of(doc, 1) == folded(t, "--total"), "in total")
    # frames keep their file and line
    hist = [f for f in doc["shared"]["frames"] if f["name"] == "history"]
    expect(len(hist) == 1 and hist[0]["file"].endswith("report_known.c") and hist[0]["line"] > 0,
           hist)
    # Python frames from the stand-in's training loop; the weights add up
    # to the peak, 48.5 MiB
    t = train_trace()
    export("speedscope", t, "p.json")
    with open("p.json") as f:
        doc = json.load(f)
    check_speedscope(doc)
    expect(sum(doc["profiles"][0]["weights"]) == summary(t)["peak_requested"] ==
           48 * MiB + 512 * 1024 + 4, sum(doc["profiles"][0]["weights"]))
    expect(any(f.get("file", "").endswith("train_app.py") and f["name"] == "main"
               for f in doc["shared"]["frames"]), doc["shared"]["frames"][:20])
    # flamegraph --help says where the unit is
    expect("export --format speedscope" in report("flamegraph", "--help").stdout, "help")


# ---- pprof -------------------------------------------------------------------------------


def pprof(*args):
    """go tool pprof, Debian's golang-go (scripts/install-deps.sh): it needs
    no network, but a home, a cache and no module lookups."""
    home = os.path.abspath("gohome")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, GOCACHE=os.path.join(home, "cache"),
               GOPATH=os.path.join(home, "go"), GOFLAGS="-mod=mod", GOPROXY="off",
               GOTOOLCHAIN="local", PPROF_TMPDIR=home)
    p = subprocess.run(["go", "tool", "pprof", *args], capture_output=True, text=True,
                       timeout=300, env=env)
    expect(p.returncode == 0, f"go tool pprof {args}: {p.returncode}\n{p.stderr}")
    return p.stdout


def raw_samples(path):
    """`pprof -raw`: the sample types, then one line per sample: values, then
    location ids."""
    out = pprof("-raw", path)
    lines = out.splitlines()
    i = lines.index("Samples:")
    types = lines[i + 1].replace("[dflt]", "").split()
    rows = []
    for line in lines[i + 2:]:
        if ":" not in line or not line.strip()[0].isdigit():
            break
        vals, locs = line.split(":", 1)
        rows.append(([int(v) for v in vals.split()], locs.split()))
    return types, rows, out


def top(path, index):
    out = pprof("-top", f"-sample_index={index}", "-unit=B", path)
    rows = [l.split() for l in out.splitlines() if l.strip().endswith(tuple("abcdefghijklmnopqrstuvwxyz_)>]"))
            and l.strip()[0].isdigit()]
    return out, rows


def test_pprof_read_by_pprof():
    t = known_trace()
    export("pprof", t, "p.pb.gz")
    with open("p.pb.gz", "rb") as f:
        expect(f.read(2) == b"\x1f\x8b", "gzip")
    types, rows, raw = raw_samples("p.pb.gz")
    expect(types == ["inuse_objects/count", "inuse_space/bytes", "alloc_objects/count",
                     "alloc_space/bytes"], types)
    col = {k.split("/")[0]: i for i, k in enumerate(types)}
    s, inf = summary(t), info(t)
    expect(sum(r[0][col["inuse_space"]] for r in rows) == s["peak_requested"] == 25 * MiB, raw)
    expect(sum(r[0][col["alloc_space"]] for r in rows) == inf["bytes_by_api"]["cudaMalloc"] and
           sum(r[0][col["alloc_objects"]] for r in rows) == inf["by_api"]["cudaMalloc"], raw)
    # the mapping of the program with its build id, functions and lines kept
    prog_map = [l for l in raw.splitlines() if "/report_known " in l]
    expect(prog_map and "[FN][FL][LN]" in prog_map[0] and
           len(prog_map[0].split()[3]) == 40, raw)
    expect(" M=1 history tests/progs/report_known.c:42 " in raw, raw)
    # -top: the function with most bytes at the peak is peak's first site
    out, rows_ = top("p.pb.gz", "inuse_space")
    peak = json.loads(report("peak", "--json", "--group", "function", t).stdout)["traces"][0]
    first = peak["sites"][0]
    expect(f"Total samples = {s['peak_requested']}B" in out, out)
    expect(rows_[0][-1] == first["site"] == "weights" and
           rows_[0][0] == f"{first['bytes']}B", (rows_[:2], first))
    # Python frames: the training loop's peak, its biggest line
    t = train_trace()
    export("pprof", t, "py.pb.gz")
    types, rows, raw = raw_samples("py.pb.gz")
    expect(sum(r[0][1] for r in rows) == summary(t)["peak_requested"], raw)
    expect("train_app.py" in raw, raw)
    out = pprof("-top", "-sample_index=inuse_space", "-unit=B", "-cum", "py.pb.gz")
    expect(f"Total samples = {summary(t)['peak_requested']}B" in out, out)


FORMATS = ["memory-viz", "perfetto", "speedscope", "pprof"]


def test_memviz_streams_of_plain_allocations():
    """A cudaMalloc has no stream: the exported block is on the legacy stream
    (0), not on the stream a cuMemset or copy before it left in the trace's
    stream register. The live corpus's resnet50 inference (tests/corpus,
    cache off) has 33 cudaMallocs after a cuMemset on a stream of cuDNN's."""
    import lzma
    src = os.path.join(os.path.dirname(__file__), "..", "corpus", "live-timm-infer.gmt.xz")
    with lzma.open(src) as f, open("t.gmt", "wb") as o:
        o.write(f.read())
    snap = memviz("t.gmt")
    allocs = [e for d in snap["device_traces"] for e in d if e["action"] == "alloc"]
    expect(len(allocs) > 1000 and all(e["stream"] == 0 for e in allocs),
           {e["stream"] for e in allocs})
    # the pool's segments have none either
    segs = [e for d in snap["device_traces"] for e in d if e["action"].startswith("segment_")]
    expect(len(segs) > 10 and all(e["stream"] == 0 for e in segs) and
           all(s["stream"] == 0 for s in snap["segments"]), {e["stream"] for e in segs})
