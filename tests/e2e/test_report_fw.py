"""The commands over PyTorch's caching allocator's own records (format
1.1): summary's framework figures, dump's fixed tokens, frag's picture of
PyTorch's segments, leaks, info. The traces come from the unit test's
writer (tests/unit/test_fw.c --write DIR), whose comments say what each
holds; the figures below are worked out from them by hand."""
import json
import os
import random
import re
import subprocess

from gmt import *

MiB = 1 << 20
BIG = 19 * MiB + MiB // 2
S1, S2, S3, U = 0x7f0000000000, 0x7f0000200000, 0x7f0001600000, 0x7f1000000000


def traces():
    """Write fw_basic.gmt, fw_oom.gmt, fw_expandable.gmt here."""
    writer = os.path.join(BUILD, "tests", "unit", "test_fw")
    p = subprocess.run([writer, "--write", "."], capture_output=True, text=True, timeout=60)
    expect(p.returncode == 0, f"test_fw --write: exit {p.returncode}\n{p.stderr}")
    return "fw_basic.gmt", "fw_oom.gmt", "fw_expandable.gmt"


def summary(path):
    doc = json.loads(report("summary", "--json", path).stdout)
    expect(doc["schema"] == "gpumemtrace.summary/1", doc["schema"])
    return doc["traces"][0]


def test_summary_framework_figures():
    basic, _, _ = traces()
    s = summary(basic)
    fw = s["framework"]
    # torch.cuda.max_memory_allocated: 512 + 1024 + z at its real 20 MiB + w
    expect(fw["name"] == "pytorch" and fw["peak_allocated"] == 1536 + 20 * MiB + BIG, fw)
    expect(fw["peak_reserved"] == 42 * MiB, fw)  # three segments
    expect(fw["peak_requested"] == 4 + 1000 + (BIG - 100) + BIG, fw)
    expect(fw["peak_outside"] == MiB, fw)
    expect((fw["allocs"], fw["frees"], fw["free_completed"], fw["segments"],
            fw["segment_frees"], fw["block_sizes"], fw["backing_allocations"],
            fw["inconsistencies"]) == (4, 3, 3, 3, 1, 1, 3, 0), fw)
    d = fw["devices"][0]
    expect(d["ordinal"] == 0 and d["reserved"] == 22 * MiB and d["allocated"] == 1024, d)
    # the process: blocks plus the program's 1 MiB; segments reserved once
    expect(s["peak_reserved"] == 43 * MiB, s["peak_reserved"])
    expect(s["peak_requested"] == fw["peak_requested"] + MiB, s["peak_requested"])
    expect(s["peak_allocated"] == fw["peak_allocated"] + MiB, s["peak_allocated"])
    expect(s["leaked"] == 1000 and s["leaked_allocations"] == 1, s)
    expect(s["driver_allocations"] == 0 and s["ooms"] == 0, s)
    text = report("summary", "--bytes", basic).stdout
    expect(f"PyTorch's caching allocator: peak allocated {1536 + 20 * MiB + BIG} "
           "(torch.cuda.max_memory_allocated), peak reserved "
           f"{42 * MiB} (torch.cuda.max_memory_reserved), 4 blocks / 3 segments" in text, text)
    expect(f"outside PyTorch's allocator: peak {MiB} (cuBLAS/cuDNN/NCCL workspaces, "
           "user cudaMalloc)" in text, text)


def test_summary_without_framework_says_null():
    run([prog("calls")])
    expect(summary(one_trace())["framework"] is None, "framework should be null")


def test_out_of_memory():
    _, oom, _ = traces()
    s = summary(oom)
    # PyTorch's failed cudaMalloc is retried, no OOM; its raising is; the
    # program's own failed cudaMalloc on device 1 is
    expect(s["ooms"] == 2 and s["framework"]["ooms"] == 1, s)
    expect(s["framework"]["backing_failed"] == 1, s["framework"])
    text = report("summary", oom).stdout
    expect("40.00 GiB on device 0 (PyTorch's caching allocator)" in text, text)
    f = json.loads(report("frag", "--json", oom).stdout)["traces"][0]
    expect(f["framework"] == "pytorch" and f["ooms_total"] == 2, f)
    o = f["ooms"][0]
    expect(o["by"] == "pytorch" and o["device"] == 0 and o["size"] == 40 << 30, o)
    expect(o["recorded"]["reserved"] == 2 * MiB and o["recorded"]["allocated"] == 512, o)
    expect(o["reserved"] == 2 * MiB and o["allocated"] == 512, o)
    expect(f["ooms"][1]["by"] == "cuda", f["ooms"][1])


def test_expandable_segments():
    _, _, exp = traces()
    fw = summary(exp)["framework"]
    expect(fw["peak_reserved"] == 40 * MiB and fw["peak_allocated"] == 35 * MiB, fw)
    expect(fw["maps"] == 2 and fw["unmaps"] == 1 and fw["segments"] == 0, fw)
    peak = json.loads(report("frag", "--json", exp).stdout)["traces"][0]["peak"]
    # two mapped pieces are one segment; the block across them fits
    expect(peak["segments"] == 1 and peak["reserved"] == 40 * MiB, peak)
    expect(peak["free"] == 5 * MiB and peak["free_blocks"] == 1, peak)


def fields(line):
    return dict(t.split("=", 1) for t in line.split() if "=" in t)


def test_dump_tokens():
    basic, oom, exp = traces()
    lines = dump(basic)
    # columns: seq, time, thread, device, record name, then tokens
    blocks = [l.split(None, 4) for l in lines if " torch_block " in l]
    allocs = [b for b in blocks if b[4].startswith("alloc ")]
    expect(len(allocs) == 4 and len(blocks) == 7, blocks)
    first = allocs[0][4]
    expect(re.fullmatch(r"alloc +torch_block ptr=0x7f0000000000 size=4 block=512 pool=0 "
                        r"stream=legacy stack=1", first), first)
    graph = fields(allocs[3][4])
    expect(graph == {"ptr": hex(S3), "size": str(BIG), "block": str(BIG),
                     "pool": str(1 << 32), "stream": "0x55", "stack": "4"}, graph)
    frees = [b[4] for b in blocks if b[4].startswith("free_requested ")]
    expect(re.fullmatch(r"free_requested torch_block ptr=0x7f0000000000 stack=1", frees[0]),
           frees[0])
    segs = [l.split(None, 4) for l in lines if " fw_segment " in l]
    expect([fields(s[4])["action"] for s in segs] == ["alloc", "alloc", "alloc", "free"], segs)
    expect(segs[0][3] == "0", segs[0])  # the device column: the record's device
    expect(re.fullmatch(r"fw_segment +action=alloc ptr=0x7f0000000000 size=2097152 "
                        r"stream=legacy pool=0 stack=1", segs[0][4]), segs[0][4])
    sizes = [l.split(None, 4)[4] for l in lines if " fw_block_size " in l]
    expect(sizes == [f"fw_block_size  ptr={hex(S2)} size={20 * MiB}"], sizes)
    backing = [l for l in lines if l.rstrip().endswith("fw_backing stack=1")]
    expect(len(backing) == 1 and "cudaMalloc ptr=0x7f0000000000 size=2097152" in backing[0],
           backing)
    expect(len([l for l in lines if " fw_backing" in l]) == 3, lines)
    failed = [l for l in dump(oom) if l.split()[4:6] == ["oom", "torch_block"]]
    expect(len(failed) == 1 and failed[0].endswith("-> cudaErrorMemoryAllocation (2)"), failed)
    expect(fields(failed[0])["size"] == str(40 << 30), failed)
    maps = [fields(l)["action"] for l in dump(exp) if " fw_segment " in l]
    expect(maps == ["map", "map", "unmap"], maps)


def test_frag_pytorch_segments():
    basic, _, _ = traces()
    f = json.loads(report("frag", "--json", basic).stdout)["traces"][0]
    expect(f["pool"] is False and f["framework"] == "pytorch" and f["inconsistencies"] == 0, f)
    peak = f["peak"]
    segs = peak["segment_table"]
    expect([s["owner"] for s in segs] == ["pytorch"] * 3, segs)
    expect([int(s["address"], 16) for s in segs] == [S1, S3, S2], segs)
    # z as big as PyTorch said (20 MiB); w as its record said - the pool's
    # rule would have taken the 0.5 MiB after it
    by = {int(s["address"], 16): s for s in segs}
    expect(by[S2]["allocated"] == 20 * MiB and by[S2]["free"] == 0, by[S2])
    expect(by[S3]["allocated"] == BIG and by[S3]["free"] == MiB // 2, by[S3])
    expect(peak["rounding_waste"] == 508 + 24 + 20 * MiB - (BIG - 100), peak)
    expect(peak["unpooled_allocations"] == 1 and peak["unpooled_allocated"] == MiB, peak)
    text = report("frag", basic).stdout
    expect("PyTorch's caching allocator" in text and "PyTorch's segment" in text, text)
    expect("in 3 segments (PyTorch's)" in text and "outside PyTorch" in text, text)


def test_leaks_peak_and_others():
    basic, _, _ = traces()
    leaks = json.loads(report("leaks", "--json", basic).stdout)["traces"][0]
    # y is live at exit; the cached segments and their cudaMalloc are not leaks
    expect(leaks["leaked"] == 1000 and leaks["allocations"] == 1, leaks)
    peak = json.loads(report("peak", "--json", "--group", "stack", basic).stdout)["traces"][0]
    expect(sorted(s["bytes"] for s in peak["sites"]) == sorted([4, 1000, BIG - 100, BIG, MiB]),
           peak["sites"])
    for cmd in ("timeline", "growth", "phases", "transfers", "flamegraph"):
        report(cmd, basic)
    report("check", "--max-peak", str(50 * MiB), basic)
    report("check", "--max-reserved", str(42 * MiB), basic, check_rc=1)
    report("diff", basic, basic)


def test_peak_allocated_per_site():
    """Per site at the peak, the blocks' bytes beside the requested ones: x's
    4 bytes are a 512-byte block, y's 1000 a 1 KiB one, z's block is its
    whole 20 MiB segment (BLOCK_SIZE, after the ALLOC that set z's peak)."""
    basic, _, _ = traces()
    want = {4: 512, 1000: 1024, BIG - 100: 20 * MiB, BIG: BIG, MiB: MiB}
    p = json.loads(report("peak", "--json", "--group", "stack", basic).stdout)["traces"][0]
    got = {s["bytes"]: s["allocated"] for s in p["sites"]}
    expect(got == want, p["sites"])
    expect(p["other_bytes"] == 0 and p["other_allocated"] == 0, p)
    two = json.loads(report("peak", "--json", "--top", "2", basic).stdout)["traces"][0]
    expect(two["other_bytes"] == MiB + 1004 and two["other_allocated"] == MiB + 1536, two)
    top = summary(basic)["top_sites"]
    expect({s["bytes"]: s["allocated"] for s in top} == want, top)
    # the text: an allocated column after the requested bytes
    text = report("peak", basic).stdout.splitlines()
    expect(text[1].split() == ["bytes", "allocated", "share", "allocations", "site"], text)
    x = [l.split() for l in text if l.split()[:4] == ["4", "B", "512", "B"]]
    expect(len(x) == 1 and x[0][4:6] == ["0.0%", "1"], text)
    z = [l.split() for l in text if l.split()[:4] == ["19.50", "MiB", "20.00", "MiB"]]
    expect(len(z) == 1, text)
    md = report("peak", "--markdown", "--bytes", basic).stdout.splitlines()
    expect(md[1] == "| bytes | allocated | share | allocations | site |", md)
    expect(any(l.startswith("| 4 | 512 | 0.0% | 1 | ") for l in md), md)
    rest = report("peak", "--top", "2", "--bytes", basic).stdout.splitlines()
    expect(rest[-1].split()[:4] == [str(MiB + 1004), str(MiB + 1536), "2.5%", "3"], rest)
    s = report("summary", basic).stdout
    tail = s[s.index("top sites at the peak:"):].splitlines()
    expect(tail[1].split() == ["bytes", "allocated", "share", "allocations", "site"], tail)
    expect(any(l.split()[:4] == ["4", "B", "512", "B"] for l in tail), tail)


def test_info_framework():
    basic, _, _ = traces()
    i = info(basic)
    # the block events are format 1.1's; later minors keep them
    version = tuple(int(x) for x in i["format"].split("."))
    expect(version >= (1, 1) and i["features"] & 8, (i["format"], i["features"]))
    fw = i["framework"]
    expect((fw["blocks"], fw["frees"], fw["free_completed"], fw["segments"],
            fw["segment_frees"], fw["block_sizes"], fw["backing_allocations"]) ==
           (4, 3, 3, 3, 1, 1, 3), fw)
    expect("torch_block" not in i["by_api"], i["by_api"])  # no CUDA calls
    expect(i["by_api"] == {"cudaMalloc": 4, "cudaFree": 2}, i["by_api"])
    text = report("info", basic).stdout
    expect("torch-blocks" in text and "PyTorch's caching allocator: block events" in text, text)


def test_flipped_framework_records_never_crash():
    """Damaged framework records: exit 0 or 2 with one line, never a signal."""
    traces()
    rnd = random.Random(11)
    for name in ("fw_basic.gmt", "fw_expandable.gmt"):
        data = open(name, "rb").read()
        for i in range(40):
            bad = bytearray(data)
            for _ in range(rnd.randint(1, 6)):
                bad[rnd.randrange(4096 + 32, 4096 + 1200)] = rnd.getrandbits(8)
            open("flip.gmt", "wb").write(bad)
            for cmd in ("summary", "frag", "dump"):
                p = report(cmd, "flip.gmt", check_rc=None, timeout=30)
                expect(p.returncode in (0, 2), f"{cmd}: exit {p.returncode}\n{p.stderr}")
                if p.returncode == 2:
                    expect(len(p.stderr.strip().splitlines()) == 1, p.stderr)
