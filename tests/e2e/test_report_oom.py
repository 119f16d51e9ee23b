"""What the report says at an out-of-memory event: summary's explanation
of each event (text and JSON oom_events) and peak --at (oom, a mark, a
time), on a program that runs out of memory through the PyTorch stand-in
(tests/e2e/py/oom_app.py, whose docstring says what is live when), and
on a real trace of a real out-of-memory (tests/corpus/verdicts)."""
import json
import lzma
import os
import re
import sys
import tempfile

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APP = os.path.join(HERE, "py", "oom_app.py")
STANDIN = os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so")
VERDICTS = os.path.join(ROOT, "tests", "corpus", "verdicts")
MiB = 1 << 20

_made = {}




def trace():
    """oom_app.py's trace, made once for the tests of this file (the
    bridge it attaches is compiled on the first run)."""
    if "path" not in _made:
        d = tempfile.mkdtemp(prefix="gmt-oom-")
        out = os.path.join(d, "oom.gmt")
        cache = os.path.join(d, "bridge-cache")
        os.mkdir(cache, 0o700)
        p = run([sys.executable, APP], SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD,
                SIM_CUDA_MEM="128M", GPUMEMTRACE_OUTPUT=out, GPUMEMTRACE_CACHE=cache,
                timeout=300)
        res = json.loads(p.stdout.strip().splitlines()[-1])
        expect(res == {"oom_failed": True, "ooms": 1}, f"{res}\n{p.stderr}")
        _made["path"] = out
    return _made["path"]


def summary(path, *args):
    return json.loads(report("summary", "--json", *args, path).stdout)["traces"][0]


def peak(path, *args, rc=0):
    p = report("peak", *args, path, check_rc=rc)
    return json.loads(p.stdout)["traces"][0] if "--json" in args and rc == 0 else p


def test_summary_names_the_failed_request():
    t, lines = trace(), site_lines(APP)
    s = summary(t)
    expect(s["ooms"] == 1 and len(s["oom_events"]) == 1, s["oom_events"])
    e = s["oom_events"][0]
    expect(e["size"] == 200 * MiB and e["device"] == 0 and e["framework"] is True, e)
    expect(f"oom_app.py:{lines['oom']})" in e["site"], e["site"])
    expect(e["explained"] is True, e)
    # what was live: the two held blocks, not the peak's
    live = {x["site"]: x["bytes"] for x in e["live_by_site"]}
    held = [b for s_, b in live.items() if f"oom_app.py:{lines['held']})" in s_]
    expect(held == [20 * MiB], live)
    expect(not any(f"oom_app.py:{lines['peak']})" in s_ for s_ in live), live)
    # live by site adds up to what was live, and so do the kinds
    expect(sum(live.values()) + e["live_other_bytes"] == e["live_requested"] == 20 * MiB, e)
    expect(e["requested"] == e["live_requested"], e)  # one device
    if e["live_by_kind"] is not None:
        expect(sum(k["bytes"] for k in e["live_by_kind"]) == e["live_requested"],
               e["live_by_kind"])
    # the device: its size from the trace, PyTorch's reserved memory then
    expect(e["device_total"] == 128 * MiB, e)
    expect(e["reserved"] >= e["allocated"] >= 20 * MiB, e)
    beyond = e["beyond_trace"] or 0
    expect(e["free"] == max(0, e["device_total"] - e["reserved"] - beyond), e)
    expect(e["largest_free_block"] is not None and
           e["largest_free_block"] <= e["reserved"] - e["allocated"], e)
    # whatif's models over the same requests: none serves 200 MiB on a
    # 128 MiB card
    pol = {w["policy"]: w for w in e["whatif"]}
    for name in ("pytorch", "pytorch:expandable_segments:True", "ideal"):
        expect(name in pol and pol[name]["fits"] is False, e["whatif"])
    expect(pol["ideal"]["peak_reserved"] >= 80 * MiB, pol["ideal"])  # the run's peak before


def test_summary_text_block():
    t, lines = trace(), site_lines(APP)
    text = report("summary", t).stdout
    expect("out of memory:   1\n" in text, text)
    expect("200.00 MiB on device 0 (PyTorch's caching allocator) failed" in text, text)
    block = text[text.index("out of memory:"):]
    expect(f"oom_app.py:{lines['oom']})" in block, block)
    expect("live then by site, 20.00 MiB in all" in block, block)
    expect(re.search(r"20\.00 MiB  \S.*oom_app\.py:%d\)" % lines["held"], block), block)
    expect("whatif, the same requests with" in block and "ideal fails" in block, block)
    md = report("summary", "--markdown", t).stdout
    expect("200.00 MiB on device 0 (PyTorch's caching allocator) failed" in md, md)


def test_summary_oom_site_follows_group():
    t = trace()
    e = summary(t, "--group", "function")["oom_events"][0]
    expect(e["site"] == "oom", e["site"])  # the function alone
    e = summary(t, "--group", "stack", "--depth", "2")["oom_events"][0]
    expect(" > " in e["site"] and "oom_app.py" in e["site"], e["site"])


def test_peak_at_oom_is_not_the_peak():
    t, lines = trace(), site_lines(APP)
    p = peak(t, "--json")
    expect(any(f"oom_app.py:{lines['peak']})" in s["site"] for s in p["sites"]), p)
    for arg in ("oom", "oom:1"):
        a = peak(t, "--json", "--at", arg)
        expect(a["at"]["instant"] == "oom" and a["at"]["n"] == 1 and
               a["at"]["size"] == 200 * MiB and a["at"]["requested"] == 20 * MiB, a["at"])
        sites = {s["site"]: s["bytes"] for s in a["sites"]}
        expect(not any(f"oom_app.py:{lines['peak']})" in s for s in sites), sites)
        held = [b for s, b in sites.items() if f"oom_app.py:{lines['held']})" in s]
        expect(held == [20 * MiB], sites)
        expect(a["peak_requested"] == p["peak_requested"], a)
    text = peak(t, "--at", "oom").stdout
    expect("at out-of-memory #1 (200.00 MiB requested on device 0): 20.00 MiB requested "
           "live" in text, text)
    expect(f"oom_app.py:{lines['held']})" in text and f"oom_app.py:{lines['peak']})" not in text,
           text)
    md = peak(t, "--markdown", "--at", "oom").stdout
    expect("| 20.00 MiB |" in md, md)


def test_peak_at_mark_and_time():
    t, lines = trace(), site_lines(APP)
    a = peak(t, "--json", "--at", "before_oom")
    expect(a["at"]["instant"] == "mark" and a["at"]["mark"] == "before_oom" and
           a["at"]["requested"] == 20 * MiB, a["at"])
    expect(peak(t, "--json", "--at", "before_oom:1")["at"] == a["at"], a)
    # half way through the peak's hold: the peak's blocks, nothing else
    p = peak(t, "--json")
    at = (p["peak_at_ns"] + 250_000_000) / 1e9
    b = peak(t, "--json", "--at", f"{at:.3f}s")
    expect(b["at"]["instant"] == "time" and b["at"]["requested"] == 80 * MiB, b["at"])
    expect([s["bytes"] for s in b["sites"] if f"oom_app.py:{lines['peak']})" in s["site"]] ==
           [80 * MiB], b["sites"])
    ms = peak(t, "--json", "--at", f"{round(at * 1000)}ms")
    expect(ms["at"]["requested"] == 80 * MiB, ms["at"])
    # before anything was allocated
    z = peak(t, "--json", "--at", "0s")
    expect(z["at"]["requested"] == 0 and z["sites"] == [], z)


def test_peak_at_refuses():
    t = trace()
    for bad in ("oom:0", "oom:x", "oom:", "", "1.5.2s", "-1s", "x:0", "1.5", "-2"):
        p = report("peak", "--at", bad, t, check_rc=2)
        expect(p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (bad, p.stderr))
        expect(p.stderr.startswith("gpumemreport peak: --at: "), p.stderr)
    # instants the trace does not have
    for missing, why in (("oom:2", "1 out-of-memory event, not 2"),
                         ("no_such_mark", 'no mark named "no_such_mark"'),
                         ("before_oom:2", 'mark "before_oom" occurs 1 time, not 2'),
                         ("100000s", "the trace spans")):
        p = report("peak", "--at", missing, t, check_rc=2)
        expect(why in p.stderr and len(p.stderr.strip().splitlines()) == 1, (missing, p.stderr))
        j = report("peak", "--json", "--at", missing, t, check_rc=2)
        expect(json.loads(j.stdout)["traces"][0]["at"] is None, j.stdout)
    # a trace without any out-of-memory event
    run([prog("hello")], check=False)
    p = report("peak", "--at", "oom", one_trace(), check_rc=2)
    expect("no out-of-memory event" in p.stderr, p.stderr)
    s = summary(one_trace())
    expect(s["oom_events"] == [], s["oom_events"])


def test_help_says_at():
    h = report("peak", "--help").stdout
    expect("--at INSTANT" in h and "oom[:N]" in h and "MARK[:N]" in h and "1.5s" in h, h)
    h = report("summary", "--help").stdout
    expect("out-of-memory events is explained" in h and "whatif's models" in h, h)


def test_real_oom_resnet50():
    # timm resnet50 training at batch 2048 on an H200: PyTorch said "Tried
    # to allocate 1.53 GiB", the program's line on the traceback is
    # verdict_corpus.py's line in the truth file (the innermost frame, conv.py:548, is
    # torch.nn's: the site names the innermost frame of the program)
    with open(os.path.join(VERDICTS, "oom-resnet50.truth.json")) as f:
        truth = json.load(f)
    with lzma.open(os.path.join(VERDICTS, "oom-resnet50.gmt.xz")) as f, open("r.gmt", "wb") as o:
        o.write(f.read())
    for args in ((), ("--no-symbols",)):
        e = summary("r.gmt", *args)["oom_events"][0]
        want = truth["oom"]["requested_approx"]
        expect(abs(e["size"] - want) <= 0.01 * want, (e["size"], want))
        expect("verdict_corpus.py:%d)" % truth["oom"]["line"] in e["site"], e["site"])
        # PyTorch's own figures at the failure: its reserved memory, and
        # the device's free memory the message gave
        expect(e["reserved"] >= truth["oom"]["reserved"], (e["reserved"], truth["oom"]))
        expect(e["free_reported"] == 500301824, e)
        expect(sum(x["bytes"] for x in e["live_by_site"]) + e["live_other_bytes"] ==
               e["live_requested"], e)
        expect(e["requested"] <= e["allocated"] <= e["reserved"], e)
    text = report("summary", "r.gmt").stdout
    expect("1.53 GiB on device 0 (PyTorch's caching allocator) failed" in text and
           "verdict_corpus.py:%d)" % truth["oom"]["line"] in text, text)
