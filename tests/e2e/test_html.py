"""gpumemreport html: the run as one self-contained page, opened in Debian's
headless Chromium (tests/browser/check-html.js, playwright-core over
/usr/bin/chromium) and checked for what a person sees there: one band per
site live at the peak, each band's tooltip naming its site and stack, the
peak figure, zoom and reset, the flame graph's click-to-zoom, the pool's
segments, several traces on one page, no console errors and no network.
Also the page's data against the other commands (exact figures), the
escaping of trace strings inside the page, and bad input.

The programs: tests/progs/report_known.c (peak 25 MiB in three sites:
weights 12 MiB, scratch 8 MiB, history 5 MiB) and tests/progs/frag.c
(a fragmented pool and one out-of-memory event); and a real trace,
tests/corpus/verdicts/oom-frag (PyTorch on an H200, out of memory by
fragmentation), for the page's out-of-memory section.
"""
import json
import lzma
import os
import re
import shutil
import subprocess
import sys

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER = os.path.join(HERE, "..", "browser")
CHECK = os.path.join(BROWSER, "check-html.js")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = os.path.join(BUILD, "test-artifacts")
PEAK = 25 << 20


def known():
    p = run([prog("report_known")], SIM_CUDA_MEM="64M")
    expect("peak 26214400" in p.stdout, p.stdout)
    return one_trace()


def html(*args, check_rc=0):
    p = subprocess.run([REPORT, "html", *args], capture_output=True, text=True, timeout=300)
    expect(p.returncode == check_rc, f"html {args} exited {p.returncode}: {p.stderr}")
    return p


def page_data(path):
    """The JSON the page carries, read back as the page's script reads it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'<script type="application/json" id="gmt-data">\n(.*?)\n</script>', text, re.S)
    expect(m, "no data element in the page")
    return json.loads(m.group(1)), text


def browse(page, screenshot=None, segshot=None, oomshot=None):
    """What headless Chromium shows of the page (check-html.js's JSON)."""
    expect(os.access(CHROMIUM, os.X_OK), f"no {CHROMIUM}: run scripts/install-deps.sh (package chromium)")
    expect(os.path.isdir(os.path.join(BROWSER, "node_modules", "playwright-core")),
           "no tests/browser/node_modules: run scripts/install-deps.sh (npm ci)")
    cmd = ["node", CHECK, page]
    if screenshot:
        cmd += ["--screenshot", screenshot]
    if segshot:
        cmd += ["--segments-shot", segshot]
    if oomshot:
        cmd += ["--oom-shot", oomshot]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, CHROMIUM=CHROMIUM))
    expect(p.returncode == 0, f"check-html.js exited {p.returncode}: {p.stderr[-3000:]}")
    got = json.loads(p.stdout)
    # nothing went wrong in the page, and it asked the network for nothing
    expect(got["console"] == [] and got["page_errors"] == [], (got["console"], got["page_errors"]))
    expect(got["requests"] == [] and got["requests_failed"] == [], (got["requests"], got["requests_failed"]))
    return got


def peak_json(t, *args):
    return json.loads(report("peak", "--json", "--top", "0", *args, t).stdout)["traces"][0]


def test_page_in_chromium():
    t = known()
    html("-o", "report.html", t)
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "html-report.png")
    if os.path.exists(shot):
        os.unlink(shot)
    segshot = os.path.join(ARTIFACTS, "html-segments.png")
    if os.path.exists(segshot):
        os.unlink(segshot)
    got = browse("report.html", shot, segshot)
    expect(len(got["traces"]) == 1, len(got["traces"]))
    tr = got["traces"][0]
    # the peak figure, exact, as the peak command has it
    peak = peak_json(t)
    expect(peak["peak_requested"] == PEAK, peak["peak_requested"])
    expect(tr["peak_card"]["bytes"] == str(PEAK), tr["peak_card"])
    expect("25.00 MiB" in tr["peak_card"]["text"] and "26214400 bytes" in tr["peak_card"]["text"],
           tr["peak_card"]["text"])
    expect("26214400 bytes" in got["text"], "exact peak not in the page text")
    # every figure the page shows has a value behind it (a key the page's
    # script reads and the data lacks shows as "undefined")
    expect("undefined" not in got["text"] and "NaN" not in got["text"],
           [l for l in got["text"].splitlines() if "undefined" in l or "NaN" in l])
    # one band per site live at the peak
    sites = [s["site"] for s in peak["sites"]]
    expect(sites == ["weights (report_known.c:29)", "scratch (report_known.c:35)",
                     "history (report_known.c:42)"], sites)
    expect(tr["bands"] == len(sites) == 3, tr["bands"])
    # resting on a band at the peak shows its site, its bytes and its stack
    stacks = {s["site"].split(" <- ")[0]: s["site"].split(" <- ")
              for s in peak_json(t, "--group", "stack")["sites"]}
    expect(len(tr["hover"]) == 3, tr["hover"])
    for h, site, want in zip(tr["hover"], sites, peak["sites"]):
        tip = h["tip"]
        expect(tip is not None, f"no tooltip over band {h['band']}")
        lines = tip.splitlines()
        expect(lines[0] == site, (lines[0], site))
        expect(f"({want['bytes']} bytes) live" in lines[1], lines[1])
        frames = stacks[site]
        expect(len(frames) >= 3 and frames[1].startswith("main (report_known.c:"), frames)
        expect(all(f in lines for f in frames), (frames, lines))
    # the lines the trace has: allocated, reserved (pool on), the driver's
    expect(tr["lines"] == ["line allocated", "line reserved", "line device_used"], tr["lines"])
    # drag zooms in (the time axis changes), reset zooms back out
    expect(tr["ticks_zoomed"] != tr["ticks_before"], tr["ticks_zoomed"])
    expect(tr["ticks_reset"] == tr["ticks_before"], (tr["ticks_reset"], tr["ticks_before"]))
    # a click on a frame of the flame graph widens it to the whole width
    fl = tr["flame"]
    expect(fl["frames"] >= 8 and fl["width_before"] < fl["svg_width"] * 0.9, fl)
    expect(abs(fl["width_after"] - fl["svg_width"]) <= 1, fl)
    # the pool's segments at the peak are drawn (the pool was on), each
    # block and free run a piece of its box; resting on a block names its
    # site and shows its stack
    doc, _ = page_data("report.html")
    at_peak = doc["traces"][0]["pools"][0]
    expect(tr["segments"] == len(at_peak["segments"]) >= 1, tr["segments"])
    expect(tr["pieces"] == sum(len(g[10]) // 4 for g in at_peak["segments"]) > tr["segments"], tr["pieces"])
    tip = tr["block_tip"]
    expect(tip is not None and tip.startswith("allocated block\n"), tip)
    site = next(l for l in tip.splitlines() if l.startswith("site "))[5:]
    expect(site in sites, (site, sites))
    expect(all(f in tip.splitlines() for f in stacks[site]), (stacks[site], tip))
    for f in (shot, segshot):
        with open(f, "rb") as fh:
            expect(fh.read(8) == b"\x89PNG\r\n\x1a\n", f"{f} is no PNG")


def test_page_data_is_exact():
    t = known()
    html("-o", "r.html", t)
    doc, text = page_data("r.html")
    expect(doc["schema"] == "gpumemtrace.html/1" and len(doc["traces"]) == 1, doc.get("schema"))
    d = doc["traces"][0]
    s = json.loads(report("summary", "--json", t).stdout)["traces"][0]
    tl = d["timeline"]
    n = tl["buckets"]
    expect(10 <= n <= 2000 and all(len(tl[k]) == n for k in ("requested", "reserved", "allocated")), n)
    # decimation keeps the peak: the largest bucket is the peak, exactly,
    # and its bands add up to it, with the peak's sites in them
    expect(max(tl["requested"]) == d["summary"]["peak_requested"] == s["peak_requested"] == PEAK,
           (max(tl["requested"]), s["peak_requested"]))
    expect(max(tl["reserved"]) == s["peak_reserved"], (max(tl["reserved"]), s["peak_reserved"]))
    k = tl["requested"].index(PEAK)
    expect(sum(b[k] for b in tl["bands"]) == PEAK, [b[k] for b in tl["bands"]])
    expect([b[k] for b in tl["bands"]] == [12 << 20, 8 << 20, 5 << 20, 0], [b[k] for b in tl["bands"]])
    for i in range(n):
        expect(sum(b[i] for b in tl["bands"]) == tl["requested"][i], f"bucket {i}")
    # the pool's maps: the pieces of a segment tile it, and add up to its
    # allocated and pending bytes; at the peak every live block is a piece
    # of its own (few blocks: nothing merged), named by its site
    for pic in d["pools"]:
        for g in pic["segments"]:
            m = g[10]
            pieces = [m[i:i + 4] for i in range(0, len(m), 4)]
            expect(sum(q[0] for q in pieces) == g[2], (g[:10], pieces))
            expect(sum(q[1] for q in pieces) == g[3] and sum(q[2] for q in pieces) == g[4], g[:10])
            expect(all(0 <= q[1] + q[2] <= q[0] for q in pieces), pieces)
    at_peak = d["pools"][0]
    blocks = [q for g in at_peak["segments"] for q in
              (g[10][i:i + 4] for i in range(0, len(g[10]), 4)) if q[1]]
    expect(len(blocks) == at_peak["live_blocks"] and all(q[1] == q[0] for q in blocks),
           (len(blocks), at_peak["live_blocks"]))
    named = {d["block_sites"][q[3]]["site"] for q in blocks if q[3] >= 0}
    expect(named == {"weights (report_known.c:29)", "scratch (report_known.c:35)",
                     "history (report_known.c:42)"}, named)
    expect(sum(q[1] for q in blocks) == at_peak["allocated"], at_peak["allocated"])
    # the tables are the commands' figures
    peak = peak_json(t)
    expect([(r["site"], r["bytes"], r["allocations"]) for r in d["tables"]["peak"]] ==
           [(r["site"], r["bytes"], r["allocations"]) for r in peak["sites"]], d["tables"]["peak"])
    leaks = json.loads(report("leaks", "--json", t).stdout)["traces"][0]
    expect([(r["site"], r["bytes"]) for r in d["tables"]["leaks"]] ==
           [(r["site"], r["bytes"]) for r in leaks["sites"]], d["tables"]["leaks"])
    tr = json.loads(report("transfers", "--json", t).stdout)["traces"][0]
    expect([(r["site"], r["copy_bytes"], r["copies"], r["sets"]) for r in d["tables"]["transfers"]["sites"]] ==
           [(r["site"], r["copy_bytes"], r["copies"], r["sets"]) for r in tr["sites"]],
           d["tables"]["transfers"]["sites"])
    # the flame graph's folded stacks are flamegraph's
    folded = {}
    for line in report("flamegraph", t).stdout.splitlines():
        stack, b = line.rsplit(" ", 1)
        folded[stack] = int(b)
    expect({f[0]: f[1] for f in d["flame"]["peak"]} == folded, d["flame"]["peak"])
    expect(text.startswith("<!DOCTYPE html>") and not re.search(r"^\s*GMT_(CSS|DATA|JS)\s*$", text, re.M),
           "template markers left in the page")
    # no network: no URL the page could load from
    expect(not re.search(r"(src|href)=\"(https?:)?//", text), "a network reference in the page")


def test_several_traces_and_oom():
    run([prog("report_known")], SIM_CUDA_MEM="64M")
    p = run([prog("frag"), "pattern"], SIM_CUDA_MEM="32M", GPUMEMTRACE_SAMPLE_MS="1")
    expect(p.stdout.rstrip().endswith("ok"), p.stdout)
    ts = traces()
    expect(len(ts) == 2, ts)
    html("-o", "both.html", ".")
    doc, _ = page_data("both.html")
    expect([d["path"] for d in doc["traces"]] == ts, [d["path"] for d in doc["traces"]])
    got = browse("both.html")
    expect(len(got["traces"]) == 2, len(got["traces"]))
    ooms = [d["summary"]["ooms"] for d in doc["traces"]]
    expect(sorted(ooms) == [0, 1], ooms)
    for d, tr in zip(doc["traces"], got["traces"]):
        sites = peak_json(d["path"])["sites"]
        expect(tr["bands"] == min(len(sites), 10), (d["path"], tr["bands"], len(sites)))
        expect(tr["ooms"] == d["summary"]["ooms"], (tr["ooms"], d["summary"]["ooms"]))
        # an out-of-memory section where the trace has an event, none where not
        expect((tr["oom"] is not None) == bool(d["summary"]["ooms"]), (d["path"], tr["oom"]))
        # the pool at the peak, and at the out-of-memory event
        expect([p["what"] for p in d["pools"]] == ["peak"] + ["oom"] * d["summary"]["ooms"], d["pools"])
    # the out-of-memory picture is frag's
    fr = next(d for d in doc["traces"] if d["summary"]["ooms"])
    want = json.loads(report("frag", "--json", fr["path"]).stdout)["traces"][0]["ooms"][0]
    got_oom = fr["pools"][1]
    expect((got_oom["reserved"], got_oom["free"], got_oom["largest_free"], got_oom["free_blocks"]) ==
           (want["reserved"], want["free"], want["largest_free"], want["free_blocks"]), (got_oom, want))
    expect("one time axis for all traces" in got["text"], "no shared-axis switch")


def test_strings_cannot_end_the_script():
    # a trace whose path holds "</script>" and "<!--": the page's data
    # element must survive it, and the page must show the path as text
    os.makedirs("x<!--</script>", exist_ok=True)
    known()
    t = one_trace()
    path = os.path.join("x<!--</script>", "t.gmt")
    shutil.move(t, path)
    html("-o", "evil.html", path)
    doc, text = page_data("evil.html")
    expect(doc["traces"][0]["path"] == path, doc["traces"][0]["path"])
    expect(text.count("</script>") == 2, text.count("</script>"))
    got = browse("evil.html")
    expect(path in got["text"], "the path is not shown as text")


def test_stdout_and_bad_input():
    t = known()
    # stdout when it is no terminal: the same page
    p = html(t)
    expect(p.stdout.startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>"), p.stdout[:100])
    # a file that is no trace: one line, exit 2, no page left behind
    with open("junk.gmt", "wb") as f:
        f.write(b"GMTRACE\0" + os.urandom(300))
    p = html("-o", "junk.html", "junk.gmt", check_rc=2)
    expect(len(p.stderr.strip().splitlines()) == 1, p.stderr)
    expect(not os.path.exists("junk.html") and not [f for f in os.listdir(".") if f.startswith("junk.html")],
           os.listdir("."))
    # one bad trace among good ones fails the whole page
    p = html("-o", "mixed.html", t, "junk.gmt", check_rc=2)
    expect(not os.path.exists("mixed.html"), "a page for a failed run")
    # a place that cannot be written
    p = html("-o", "no/such/dir/r.html", t, check_rc=2)
    expect(len(p.stderr.strip().splitlines()) == 1 and "no/such/dir/r.html" in p.stderr, p.stderr)
    # a truncated trace is read as far as it is intact
    with open(t, "rb") as f:
        data = f.read()
    with open("cut.gmt", "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    p = subprocess.run([REPORT, "html", "-o", "cut.html", "cut.gmt"], capture_output=True, text=True)
    expect(p.returncode in (0, 2), p.returncode)
    if p.returncode == 0:
        page_data("cut.html")
    # no trace at all, or --json: usage, exit 2
    html(check_rc=2)
    html("--json", t, check_rc=2)


def test_memory_by_kind():
    """The page's bytes by kind at the peak are summary's, drawn
    as one bar of shares and a table: tests/e2e/py/train_app.py's training
    steps over the stand-in PyTorch (test_report_naming.py has the rules)."""
    os.mkdir("cache", 0o700)
    app = os.path.join(HERE, "py", "train_app.py")
    standin = os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so")
    p = run([sys.executable, app], SIM_TORCH_LIB=standin, GMT_BUILD=BUILD,
            GPUMEMTRACE_OUTPUT="k.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    html("-o", "k.html", "k.gmt")
    doc, _ = page_data("k.html")
    s = json.loads(report("summary", "--json", "k.gmt").stdout)["traces"][0]
    expect(doc["traces"][0]["kinds"] == s["kinds"], (doc["traces"][0]["kinds"], s["kinds"]))
    live = [k for k in s["kinds"] if k["bytes"]]
    expect(len(live) == 7, live)
    got = browse("k.html")
    k = got["traces"][0]["kinds"]
    expect(k is not None, "no kinds on the page")
    # one bar piece per kind live at the peak, as wide as its share
    expect([b["kind"] for b in k["bar"]] == [x["kind"] for x in live], k["bar"])
    peak = s["peak_requested"]
    for b, x in zip(k["bar"], live):
        expect(abs(b["width"] - k["bar_width"] * x["bytes"] / peak) <= 2, (b, x, k["bar_width"]))
    # the table: each kind's bytes and blocks, then its layers
    kinds_rows = [r for r in k["rows"] if not r[3].startswith("\u2003")]
    expect([r[3] for r in kinds_rows] == [x["name"] for x in live], kinds_rows)
    expect([r[2] for r in kinds_rows] == [str(x["blocks"]) for x in live], kinds_rows)
    expect(kinds_rows[0][:2] == ["16.00 MiB", "33.0%"], kinds_rows[0])
    layers = [r[3].strip("\u2003") for r in k["rows"] if r[3].startswith("\u2003")]
    expect(any(l.startswith("Attention.forward (__init__.py:") for l in layers), layers)
    # a trace without Python stacks has no kinds: no section
    os.unlink("k.gmt")
    t = known()
    html("-o", "plain.html", t)
    doc, _ = page_data("plain.html")
    expect(doc["traces"][0]["kinds"] is None, doc["traces"][0]["kinds"])


def test_out_of_memory_tab():
    """The page says what summary says of an out-of-memory event: a real one,
    PyTorch on an H200 out of memory by fragmentation (the failed 16 MiB
    request at verdict_corpus.py:356 fits nowhere in the reserved memory;
    with expandable segments it would have), beside a trace without one."""
    t = known()
    src = os.path.join(HERE, "..", "corpus", "verdicts", "oom-frag.gmt.xz")
    with lzma.open(src) as f, open("of.gmt", "wb") as o:
        shutil.copyfileobj(f, o)
    html("--no-symbols", "-o", "oom.html", "of.gmt", t)
    doc, _ = page_data("oom.html")
    d, plain = doc["traces"]
    # the data: summary's events, the same fields and figures (the live
    # sites cut at the page's --top, 10)
    s = json.loads(report("summary", "--json", "--no-symbols", "--top", "10",
                          "of.gmt").stdout)["traces"][0]
    expect(d["oom_events"] == s["oom_events"], (d["oom_events"], s["oom_events"]))
    e = s["oom_events"][0]
    expect(len(s["oom_events"]) == 1 and e["explained"] and e["size"] == 16 << 20, e)
    expect(plain["oom_events"] == [], plain["oom_events"])
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "html-oom.png")
    if os.path.exists(shot):
        os.unlink(shot)
    got = browse("oom.html", oomshot=shot)
    oom = got["traces"][0]["oom"]
    expect(oom is not None, "no out-of-memory section")
    expect(oom["heading"] == "Out of memory: 1 failed allocation", oom["heading"])
    expect(oom["tabs"] == ["#1: 16.00 MiB at 118.4 ms"] and oom["hint"] == [], oom)
    ev = oom["events"][0]
    # the failed request and its site, with its stack
    expect(ev["request"] == "16.00 MiB (16777216 bytes) on device 0 (PyTorch's caching "
           "allocator) failed at 118.4 ms, requested at", ev["request"])
    expect(ev["site"] == e["site"] and ev["site"].startswith(
        "fragoom.<locals>.step (verdict_corpus.py:356)"), ev["site"])
    expect(ev["stack"].splitlines()[0] == "fragoom.<locals>.step (verdict_corpus.py:356)",
           ev["stack"])
    # the device then: the largest free block (12 MiB) and the free memory
    # are smaller than the request, and say so
    cards = {c["k"]: c for c in ev["cards"]}
    expect(list(cards) == ["allocated", "reserved", "largest free block", "free",
                           "beyond the trace"], list(cards))
    expect(cards["largest free block"]["v"] == "12.00 MiB" and cards["largest free block"]["bad"],
           cards["largest free block"])
    expect(cards["reserved"]["v"] == "139.28 GiB" and not cards["reserved"]["bad"], cards["reserved"])
    expect(cards["free"]["v"] == "11.94 MiB" and cards["free"]["bad"] and
           "of 139.80 GiB" in cards["free"]["x"], cards["free"])
    expect(ev["kinds"] == "live then by kind: 138.68 GiB temporaries", ev["kinds"])
    # what was live, by site: summary's sites, in its order
    expect(ev["sites_heading"] == "Live then by site, 138.68 GiB in all", ev["sites_heading"])
    expect([r[-1] for r in ev["sites"]] == [x["site"] for x in e["live_by_site"]], ev["sites"])
    expect(ev["sites"][0][:4] == ["138.29 GiB", "138.29 GiB", "99.7%", "1"], ev["sites"][0])
    # whatif: PyTorch as it ran fails, with expandable segments it fits
    verdicts = {r[0]: r[1] for r in ev["whatif"]}
    expect(verdicts["pytorch"] == "fails", verdicts)
    expect(verdicts["pytorch:expandable_segments:True"] == "fits", verdicts)
    expect([r[0] for r in ev["whatif"]] == [w["policy"] for w in e["whatif"]], ev["whatif"])
    expect(ev["whatif"][0][2] == "139.28 GiB", ev["whatif"][0])
    expect(ev["whatif_heading"].startswith("whatif: the same requests with 139.29 GiB"),
           ev["whatif_heading"])
    expect(ev["verdict_colors"][0] != ev["verdict_colors"][1], ev["verdict_colors"])
    # every figure shown has a value behind it
    shown = json.dumps(ev)
    expect(not any(w in shown for w in ("undefined", "NaN", "null")), ev)
    # the trace without an out-of-memory event: no section
    expect(got["traces"][1]["oom"] is None, got["traces"][1]["oom"])
    expect(got["text"].count("Out of memory:") == 1, "an out-of-memory section for the other trace")
    with open(shot, "rb") as fh:
        expect(fh.read(8) == b"\x89PNG\r\n\x1a\n", f"{shot} is no PNG")
