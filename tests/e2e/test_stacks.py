"""Native stacks: they resolve to the calling functions, carry no tracer
frames, are written once, and follow GPUMEMTRACE_STACK_DEPTH."""
import json
import os
import re
import subprocess

from gmt import *


def symbols(binary):
    """name -> (start, end) offsets of the binary's functions."""
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True,
                         text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            start, size = int(parts[0], 16), int(parts[1], 16)
            syms[parts[3]] = (start, start + size)
    return syms


def parse_dump(lines):
    """(events, stacks): events as (kind, fields), stacks as id -> frames
    [(module, offset)]."""
    events, stacks, cur = [], {}, None
    for line in lines[1:]:
        m = re.match(r"\s+#\d+\s+(\S+)\+0x([0-9a-f]+)$", line)
        if m and cur is not None:
            stacks[cur].append((m.group(1), int(m.group(2), 16)))
            continue
        cur = None
        parts = line.split()
        if len(parts) >= 5 and parts[4] == "stack":
            cur = int(parts[5].split("=")[1])
            stacks[cur] = []
        elif len(parts) >= 5:
            fields = dict(p.split("=", 1) for p in parts[5:] if "=" in p)
            events.append((parts[4], fields))
    return events, stacks


def test_frames_resolve_to_callers():
    run([prog("stacks")])
    events, stacks = parse_dump(dump(one_trace()))
    syms = symbols(prog("stacks"))
    allocs = [f for k, f in events if k == "alloc"]
    expect(len(allocs) == 20, f"{len(allocs)} allocs")
    by_size = {}
    for f in allocs:
        by_size.setdefault(f["size"], set()).add(int(f["stack"]))
    expect(len(by_size["4096"]) == 1 and len(by_size["8192"]) == 1,
           f"a repeated call site must reuse its stack: {by_size}")

    def in_func(frame, func):
        mod, off = frame
        lo, hi = syms[func]
        return mod == "stacks" and lo < off <= hi

    leaf = stacks[next(iter(by_size["4096"]))]
    expect(in_func(leaf[0], "leaf_alloc") and in_func(leaf[1], "middle")
           and in_func(leaf[2], "main"), f"leaf stack: {leaf[:4]}")
    other = stacks[next(iter(by_size["8192"]))]
    expect(in_func(other[0], "other_alloc") and in_func(other[1], "main"),
           f"other stack: {other[:3]}")
    expect(not any("gpumemtrace" in m for m, _ in leaf + other), "tracer frames in stack")
    # two alloc sites, two cudaFree sites in main: four stacks in all
    expect(len(stacks) == 4, f"stacks defined: {len(stacks)}")


def test_depth_zero_records_no_stacks():
    run([prog("stacks")], GPUMEMTRACE_STACK_DEPTH="0")
    got = info(one_trace())
    expect(got["stacks"] == 0 and not got["features"] & 1, f"{got['stacks']} stacks")
    events, _ = parse_dump(dump(one_trace()))
    expect(all("stack" not in f for _, f in events), "events carry stack ids")


def test_depth_limit():
    run([prog("stacks")], GPUMEMTRACE_STACK_DEPTH="2")
    _, stacks = parse_dump(dump(one_trace()))
    expect(stacks and all(1 <= len(f) <= 2 for f in stacks.values()),
           f"frames per stack: {[len(f) for f in stacks.values()]}")


def test_module_map_has_build_ids():
    run([prog("stacks")])
    mods = [l for l in dump(one_trace()) if " module " in l]
    main = [l for l in mods if l.split()[-2].endswith("/stacks")]
    expect(len(main) == 1, f"main executable missing from module map: {mods}")
    bid = main[0].split("build-id=")[1]
    expect(len(bid) == 40, f"build-id: {bid!r}")
    expect(any("libcudart.so.13" in l for l in mods), "runtime missing from module map")


def test_module_map_follows_dlopen():
    lib = prog("libdlalloc.so")
    run([prog("dlopen"), lib])
    events, stacks = parse_dump(dump(one_trace()))
    alloc = [f for k, f in events if k == "alloc" and f["size"] == "3333"]
    expect(len(alloc) == 1, f"{events}")
    frames = stacks[int(alloc[0]["stack"])]
    lo, hi = symbols(lib)["dlalloc_pair"]
    expect(frames[0][0] == "libdlalloc.so" and lo < frames[0][1] <= hi,
           f"innermost frame {frames[0]} not in dlalloc_pair {lo:#x}-{hi:#x}")
    expect(frames[1][0] == "dlopen", f"caller frame {frames[1]}")


def test_embedded_symbols_name_frames_without_the_binary():
    import shutil
    shutil.copy(prog("libdlalloc.so"), "libmine.so")
    run([prog("dlopen"), os.path.abspath("libmine.so"), "keep"], GPUMEMTRACE_EMBED_SYMBOLS="1")
    t = one_trace()
    os.unlink("libmine.so")  # the trace is read where the binary is not
    sites = json.loads(report("peak", "--json", "--group", "stack", "--depth", "2", t).stdout)
    labels = [s["site"] for s in sites["traces"][0]["sites"]]
    expect(any(l.startswith("dlalloc_pair <- main (dlopen.c:") for l in labels), f"{labels}")
    # without embedding, the same frame stays module+offset
    os.unlink(t)
    shutil.copy(prog("libdlalloc.so"), "libmine.so")
    run([prog("dlopen"), os.path.abspath("libmine.so"), "keep"])
    os.unlink("libmine.so")
    sites = json.loads(report("peak", "--json", "--group", "stack", "--depth", "2", one_trace()).stdout)
    labels = [s["site"] for s in sites["traces"][0]["sites"]]
    expect(any(l.startswith("libmine.so+0x") for l in labels), f"{labels}")


def test_deep_stacks_keep_depth_frames():
    """A program 60 frames deep, five entry points, 8 frames kept: the
    unwind stops a few frames past the tracer's own (stack.c, self_at),
    and every stack still has 8 of the program's frames, none of ours, the
    innermost in the function that made the call; a recurring call site
    keeps its stack id."""
    run([prog("bench"), "mix", "1", "30", "60"], GPUMEMTRACE_STACK_DEPTH="8")
    events, stacks = parse_dump(dump(one_trace()))
    syms = symbols(prog("bench"))
    # the worker's calls (main's cudaSetDevice is 4 frames deep)
    calls = [(k, f) for k, f in events if "stack" in f and k != "set_device"]
    expect(len(calls) >= 30 * 5, f"{len(calls)} events with stacks")
    for sid in {int(f["stack"]) for _, f in calls}:
        frames = stacks[sid]
        expect(len(frames) == 8 and all(m == "bench" for m, _ in frames),
               f"stack {sid}: {frames}")
    lo, hi = syms["recurse"]
    sites = {}
    for k, f in calls:
        frames = stacks[int(f["stack"])]
        # the call site, then frames of recursion (the outer 52 are cut)
        expect(all(lo < off <= hi for _, off in frames[2:]), f"{k}: {frames}")
        sites.setdefault((k, frames[0]), set()).add(int(f["stack"]))
    expect(all(len(ids) == 1 for ids in sites.values()), f"{sites}")


def test_unwind_cache_tells_chains_apart():
    """Two chains reach one allocation at the same stack pointer (samesp.c):
    the unwind cache must give each allocation its own chain, checked
    return address by return address, and serve the repeats itself; the
    stacks are those of a full unwind."""
    p = run([prog("samesp")], GPUMEMTRACE_VERBOSE="1", GPUMEMTRACE_UNWIND_CACHE="1")
    expect("same frame: yes" in p.stdout, f"the chains must meet: {p.stdout}")
    m = re.search(r"native: (\d+) from the unwind cache \(\d+ ns each\), (\d+) unwound",
                  p.stderr)
    expect(m and int(m.group(1)) >= 120, f"cache not used: {p.stderr}")
    events, stacks = parse_dump(dump(one_trace()))
    syms = symbols(prog("samesp"))

    def frames_of(size):
        ids = {int(f["stack"]) for k, f in events if k == "alloc" and f["size"] == size}
        expect(len(ids) == 1, f"size {size}: stacks {ids}")
        return stacks[ids.pop()]

    for size, via in (("1000", "via_a"), ("2000", "via_b")):
        frames = frames_of(size)
        lo, hi = syms[via]
        expect(frames[2][0] == "samesp" and lo < frames[2][1] <= hi,
               f"allocation of {size} bytes: frame 2 {frames[2]} not in {via}")
    cached = sorted(map(tuple, stacks.values()))
    os.unlink(one_trace())
    run([prog("samesp")], GPUMEMTRACE_UNWIND_CACHE="0")
    _, full = parse_dump(dump(one_trace()))
    expect(sorted(map(tuple, full.values())) == cached,
           "stacks differ from a full unwind's")


def test_unwind_cache_refuses_frames_that_move():
    """A frame that realigns its stack (realign.c): G's and H's chains meet
    below it at the same stack pointer while its return address moves, and
    the old one stays in the alignment gap. With the cache on, every
    allocation keeps its own caller, at each stack shift (address
    randomization off: one of them lines the frames up). The realigning
    frame keeps a frame pointer, so the cache checks where it was saved,
    and serves the repeats (frame-pointer code is cached)."""
    syms = symbols(prog("realign"))
    for shift in ("0", "16", "32", "48"):
        p = run(["setarch", "x86_64", "-R", prog("realign"), shift],
                GPUMEMTRACE_UNWIND_CACHE="1", GPUMEMTRACE_VERBOSE="1")
        m = re.search(r"native: (\d+) from the unwind cache", p.stderr)
        expect(m and int(m.group(1)) >= 300, f"shift {shift}: cache not used: {p.stderr}")
        events, stacks = parse_dump(dump(one_trace()))
        for size, caller in (("1000", "G"), ("2000", "H")):
            lo, hi = syms[caller]
            for k, f in events:
                if k == "alloc" and f["size"] == size:
                    frames = stacks[int(f["stack"])]
                    expect(frames[2][0] == "realign" and lo < frames[2][1] <= hi,
                           f"shift {shift}: a {size}-byte allocation with frame 2 "
                           f"{frames[2]}, not in {caller}")
        os.unlink(one_trace())


def test_stack_table_is_capped():
    # distinct stacks had no bound (a
    # million cost 236 MB). 300 allocations from 300 distinct generated
    # functions with GPUMEMTRACE_MAX_STACKS=100: at most 100 stack
    # records, one warning, one note, and every allocation still recorded.
    app = os.path.abspath("many_stacks.py")
    with open(app, "w") as f:
        f.write("import ctypes, os\n"
                "lib = ctypes.CDLL(os.environ['PYALLOC_LIB'])\n"
                "lib.pyalloc_alloc.restype = ctypes.c_uint64\n"
                "lib.pyalloc_alloc.argtypes = [ctypes.c_uint64]\n"
                "lib.pyalloc_free.argtypes = [ctypes.c_uint64]\n"
                "for i in range(300):\n"
                "    ns = {'lib': lib}\n"
                "    exec(compile('\\n' * i + 'def f():\\n    return lib.pyalloc_alloc(4096)\\n',"
                " f'gen{i}.py', 'exec'), ns)\n"
                "    lib.pyalloc_free(ns['f']())\n")
    import shutil
    import sys
    p = run([sys.executable, app], PYALLOC_LIB=prog("libpyalloc.so"),
            GPUMEMTRACE_OUTPUT="s.gmt", GPUMEMTRACE_MAX_STACKS="100")
    warn = [l for l in p.stderr.splitlines() if "GPUMEMTRACE_MAX_STACKS" in l]
    expect(len(warn) == 1, p.stderr)
    lines = dump("s.gmt", "--no-stacks")
    stacks = [l for l in lines if l.split()[4:5] == ["stack"]]
    allocs = [l for l in lines if " alloc " in l and "cudaMalloc" in l]
    expect(len(stacks) <= 100, f"{len(stacks)} stack records")
    expect(len(allocs) == 300, f"{len(allocs)} allocations")
    expect(any("GPUMEMTRACE_MAX_STACKS" in l for l in lines if l.split()[4:5] == ["note"]),
           [l for l in lines if "note" in l])
