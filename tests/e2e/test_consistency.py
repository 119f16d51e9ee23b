"""One meaning per figure, across the reports, on every real trace of
tests/corpus (*.gmt.xz) and tests/corpus/verdicts (*.gmt.xz): summary,
peak, timeline, ranks, leaks and the HTML page's data, each run once with
every trace (--json):

- requested <= allocated <= reserved in every row that has them (a row's
  figures count the same memory: the process's, or PyTorch's own);
- the same trace has the same peak requested, allocated and reserved in
  summary, peak, ranks, timeline and the page, and the same memory live
  at exit in summary and leaks;
- every key of their JSON (and of transfers') is documented in
  docs/report-json.md, in the command's section (or the part that all
  commands share).

The traces are decompressed once for the module, into a directory of
its own that goes when the process exits."""
import atexit
import glob
import json
import lzma
import os
import re
import shutil
import tempfile

from gmt import *

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")
DOC = os.path.join(HERE, "..", "..", "docs", "report-json.md")

_traces = None
_runs = {}


def traces():
    """The corpus traces, decompressed (once), in a stable order."""
    global _traces
    if _traces is None:
        tmp = tempfile.mkdtemp(prefix="gmt-consistency-")
        atexit.register(shutil.rmtree, tmp, True)
        srcs = sorted(glob.glob(os.path.join(CORPUS, "*.gmt.xz")) +
                      glob.glob(os.path.join(CORPUS, "verdicts", "*.gmt.xz")))
        expect(len(srcs) >= 40, srcs)
        out = []
        for i, src in enumerate(srcs):
            # verdicts/ and corpus/ may share a name: a prefix keeps them apart
            dst = os.path.join(tmp, f"{i:02d}-{os.path.basename(src)[:-3]}")
            with lzma.open(src) as f, open(dst, "wb") as o:
                shutil.copyfileobj(f, o)
            out.append(dst)
        _traces = out
    return _traces


def run_json(cmd):
    """`gpumemreport CMD --json` over every trace (one run, kept)."""
    if cmd not in _runs:
        p = report(cmd, "--json", "--no-symbols", *traces(), timeout=300)
        _runs[cmd] = json.loads(p.stdout)
    return _runs[cmd]


def page():
    """The HTML page's data for every trace (one run, kept)."""
    if "html" not in _runs:
        out = os.path.join(os.path.dirname(traces()[0]), "page.html")
        report("html", "--no-symbols", "-o", out, *traces(), timeout=300)
        with open(out, encoding="utf-8") as f:
            m = re.search(r'<script type="application/json" id="gmt-data">\n(.*?)\n</script>',
                          f.read(), re.S)
        expect(m, "no data element in the page")
        _runs["html"] = json.loads(m.group(1))
    return _runs["html"]


def by_trace(cmd):
    doc = run_json(cmd)
    if cmd == "ranks":
        rows = [r for job in doc["jobs"] for r in job["ranks"]]
    else:
        rows = doc["traces"]
    got = {r["trace"]: r for r in rows}
    expect(sorted(got) == sorted(traces()), (cmd, sorted(set(traces()) - set(got))))
    return got


def ordered(where, *figures):
    """requested <= allocated <= reserved (as many as given)."""
    expect(all(a <= b for a, b in zip(figures, figures[1:])), (where, figures))


def test_requested_allocated_reserved_in_every_row():
    for t, s in by_trace("summary").items():
        ordered((t, "summary"), s["peak_requested"], s["peak_allocated"], s["peak_reserved"])
        for d in s["devices"]:
            ordered((t, "summary device", d["ordinal"]), d["peak_requested"], d["peak_allocated"],
                    d["peak_reserved"])
        fw = s["framework"]
        if fw:
            ordered((t, "summary framework"), fw["peak_requested"], fw["peak_allocated"],
                    fw["peak_reserved"])
            for d in fw["devices"]:
                ordered((t, "summary framework device", d["ordinal"]), d["peak_requested"],
                        d["peak_allocated"], d["peak_reserved"])
                ordered((t, "framework at the end", d["ordinal"]), d["allocated"], d["reserved"])
        for x in s["top_sites"]:
            ordered((t, "summary top site", x["site"]), x["bytes"], x["allocated"])
        for e in s.get("oom_events") or []:
            ordered((t, "summary out-of-memory event"), e["requested"], e["allocated"], e["reserved"])
            for x in e.get("live_by_site") or []:
                ordered((t, "summary out-of-memory site", x["site"]), x["bytes"], x["allocated"])
    for t, p in by_trace("peak").items():
        for x in p["sites"]:
            ordered((t, "peak site", x["site"]), x["bytes"], x["allocated"])
        ordered((t, "peak, other sites"), p["other_bytes"], p["other_allocated"])
    for t, r in by_trace("ranks").items():
        ordered((t, "ranks"), r["peak_requested"], r["peak_allocated"], r["peak_reserved"])
        if r["framework"]:
            f = r["framework"]
            ordered((t, "ranks framework"), f["peak_requested"], f["peak_allocated"],
                    f["peak_reserved"])
    for t, tl in by_trace("timeline").items():
        for b in tl["buckets"]:
            ordered((t, "timeline bucket", b["at_ns"]), b["requested"], b["reserved"])
    for d in page()["traces"]:
        s, tl = d["summary"], d["timeline"]
        ordered((d["path"], "page summary"), s["peak_requested"], s["peak_allocated"],
                s["peak_reserved"])
        for i, (a, b, c) in enumerate(zip(tl["requested"], tl["allocated"], tl["reserved"])):
            ordered((d["path"], "page timeline bucket", i), a, b, c)


def test_same_peaks_everywhere():
    summary, peak, ranks, timeline, leaks = (by_trace(c) for c in
                                             ("summary", "peak", "ranks", "timeline", "leaks"))
    pages = {d["path"]: d for d in page()["traces"]}
    for t, s in summary.items():
        want = (s["peak_requested"], s["peak_allocated"], s["peak_reserved"])
        r, tl, pg = ranks[t], timeline[t], pages[t]["summary"]
        got = {
            "peak": (peak[t]["peak_requested"], None, None),
            "ranks": (r["peak_requested"], r["peak_allocated"], r["peak_reserved"]),
            "timeline": (tl["peak_requested"], None, tl["peak_reserved"]),
            "timeline buckets": (max(b["requested"] for b in tl["buckets"]), None,
                                 max(b["reserved"] for b in tl["buckets"])),
            "page": (pg["peak_requested"], pg["peak_allocated"], pg["peak_reserved"]),
            "page timeline": (max(pages[t]["timeline"]["requested"]), None,
                              max(pages[t]["timeline"]["reserved"])),
        }
        for cmd, g in got.items():
            expect(all(x is None or x == w for x, w in zip(g, want)), (t, cmd, g, "summary", want))
        lk = leaks[t]
        expect((lk["leaked"], lk["allocations"], lk["host"]) ==
               (s["leaked"], s["leaked_allocations"], s["leaked_host"]), (t, "leaks", lk, "summary", s))
        if s["framework"] and r["framework"]:
            fw, rf = s["framework"], r["framework"]
            expect((rf["peak_requested"], rf["peak_allocated"], rf["peak_reserved"]) ==
                   (fw["peak_requested"], fw["peak_allocated"], fw["peak_reserved"]), (t, rf, fw))


def documented():
    """Per section of report-json.md (its heading's first word), the names
    in its backquoted spans, with those of the part before the first
    section (what every command shares)."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    parts = re.split(r"^## ", text, flags=re.M)
    common = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(re.findall(r"`([^`]*)`", parts[0]))))
    out = {}
    for part in parts[1:]:
        name = part.split()[0]
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", " ".join(re.findall(r"`([^`]*)`", part)))
        out[name] = common | set(words)
    return out


def keys_of(obj, depth):
    """The keys of obj and, down to depth levels, of the objects in it
    (directly, or in lists)."""
    keys = set()
    todo = [(obj, 0)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, list):
            todo.extend((x, d) for x in o)
        elif isinstance(o, dict):
            keys |= set(o)
            if d < depth:
                todo.extend((v, d + 1) for v in o.values())
    return keys


def test_every_key_is_documented():
    doc = documented()
    for cmd in ("summary", "peak", "timeline", "leaks", "ranks", "transfers"):
        expect(cmd in doc, (cmd, sorted(doc)))
        out = run_json(cmd)
        expect(out["schema"] == f"gpumemtrace.{cmd}/1", out["schema"])
        # the envelope, each trace's (each job's) keys, and those of the
        # objects and rows in it, one level down
        missing = sorted(keys_of(out, 3) - doc[cmd] - {"schema"})
        expect(not missing, (cmd, "keys not in docs/report-json.md", missing))
