"""html and frag follow the replay that loads a trace: the timeline by
site, the pool's pictures at the peak and at each out-of-memory event and
frag's samples are taken as the trace is read, not in a second pass
(report/trace/pvfollow.h, report/html/html_pass.c). Where following cannot
give the whole answer they read the trace again, the moments known.
GPUMEMREPORT_FOLLOW=0 makes them always read it again: the page and the
tables must be the same, byte for byte, either way."""
import glob
import json
import lzma
import os
import subprocess

from gmt import *

HERE = os.path.dirname(__file__)


def out(args, follow):
    env = dict(os.environ)
    env.pop("GPUMEMREPORT_FOLLOW", None)
    if not follow:
        env["GPUMEMREPORT_FOLLOW"] = "0"
    p = subprocess.run([REPORT, *args], capture_output=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def same_both_ways(path):
    for args in (["frag", path], ["frag", "--json", "--top", "3", path],
                 ["html", "-o", "page.html", path], ["html", "--group", "stack", "-o",
                                                     "page.html", path]):
        got = []
        for follow in (True, False):
            rc, o, e = out(args, follow)
            page = open("page.html", "rb").read() if args[0] == "html" else b""
            got.append((rc, o, e, page))
        expect(got[0][0] == 0, f"{args}: exit {got[0][0]}: {got[0][2][-500:]}")
        expect(got[0] == got[1], f"{args}: output differs when read twice")


def corpus():
    """The real traces of tests/corpus (PyTorch on an H100/H200), unpacked."""
    paths = []
    for src in sorted(glob.glob(os.path.join(HERE, "..", "corpus", "**", "*.gmt.xz"),
                                recursive=True)):
        dst = os.path.basename(src)[:-3]
        if os.path.exists(dst):
            dst = "v-" + dst
        with lzma.open(src) as f, open(dst, "wb") as g:
            g.write(f.read())
        paths.append(dst)
    return paths


def test_real_traces_the_same_read_once_or_twice():
    paths = corpus()
    expect(len(paths) >= 40, f"the corpus: {len(paths)} traces")
    ooms = 0
    for p in paths:
        same_both_ways(p)
        doc = json.loads(out(["frag", "--json", p], True)[1])["traces"][0]
        ooms += len(doc["ooms"])
    # pictures at out-of-memory events were among those compared
    expect(ooms > 0, "no out-of-memory picture in the corpus")


def test_pool_out_of_memory_the_same_read_once_or_twice():
    run([prog("frag"), "pattern"], SIM_CUDA_MEM="32M", GPUMEMTRACE_SAMPLE_MS="1")
    t = one_trace()
    doc = json.loads(out(["frag", "--json", t], True)[1])["traces"][0]
    expect(len(doc["ooms"]) == 1 and doc["samples"] > 0, doc)
    same_both_ways(t)


def test_peak_rising_at_every_allocation():
    """20000 allocations, each a new peak with one more live block: the
    picture at each costs more than following allows, so the report reads
    the trace again for the peak - and the picture is the peak's."""
    run([prog("rising"), "20000"])
    t = one_trace()
    same_both_ways(t)
    peak = json.loads(out(["frag", "--json", t], True)[1])["traces"][0]["peak"]
    expect(peak["requested"] == 20000 * 256 and peak["allocations"] == 20000, peak)
