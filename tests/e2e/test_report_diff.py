"""gpumemreport diff: per-site and total changes between two runs, with
answers known from the programs themselves.

build/tests/example keeps one 256 KiB buffer per step (keep_for_logging)
alive to the end, so two runs with different step counts differ at that
site - and only there - by 256 KiB per step at the peak, in total and at
exit; its per-step activations (forward: 6 x 4 MiB) differ only in total.
Each figure is also checked against `summary --json` of the same traces."""
import json
import os

from gmt import *

KEEP = 256 * 1024
MiB = 1 << 20


def trace_of(name, *argv):
    """Run a test program with its trace written to NAME.gmt."""
    run([prog(argv[0]), *argv[1:]], GPUMEMTRACE_OUTPUT=f"{name}.gmt")
    expect(os.path.exists(f"{name}.gmt"), f"no trace {name}.gmt")
    return f"{name}.gmt"


def summary(path):
    got = json.loads(report("summary", "--json", "--top", "0", path).stdout)
    return got["traces"][0]


def diff_json(*args):
    return json.loads(report("diff", "--json", "--top", "0", *args).stdout)


def site(doc, prefix):
    rows = [s for s in doc["sites"] if s["site"].startswith(prefix)]
    expect(len(rows) == 1, f"one site {prefix}: {[s['site'] for s in doc['sites']]}")
    return rows[0]


def test_example_5_vs_20_steps():
    a, b = trace_of("a", "example", "5"), trace_of("b", "example", "20")
    sa, sb = summary(a), summary(b)
    d = diff_json(a, b)
    expect(d["schema"] == "gpumemtrace.diff/1" and d["group"] == "line", f"{d['schema']}")
    expect(d["a"]["traces"] == [a] and d["b"]["traces"] == [b] and d["a"]["processes"] == 1,
           f"{d['a']} {d['b']}")
    # the leaking site: 256 KiB per step at the peak, in total, 1 allocation per step
    k = site(d, "keep_for_logging")
    expect((k["peak_a"], k["peak_b"], k["peak_change"]) == (5 * KEEP, 20 * KEEP, 15 * KEEP), f"{k}")
    expect((k["total_a"], k["total_b"], k["total_change"]) == (5 * KEEP, 20 * KEEP, 15 * KEEP), f"{k}")
    expect((k["allocations_a"], k["allocations_b"], k["allocations_change"]) == (5, 20, 15), f"{k}")
    expect(k["in_a"] and k["in_b"] and abs(k["peak_change_pct"] - 300.0) < 1e-9, f"{k}")
    # the same figures as summary's top sites at the peak
    top_a = {s["site"]: s["bytes"] for s in sa["top_sites"]}
    top_b = {s["site"]: s["bytes"] for s in sb["top_sites"]}
    expect(top_a[k["site"]] == k["peak_a"] and top_b[k["site"]] == k["peak_b"], f"{top_a} {top_b}")
    for s in d["sites"]:
        expect(top_a.get(s["site"], 0) == s["peak_a"] and top_b.get(s["site"], 0) == s["peak_b"],
               f"{s} vs summary {top_a} {top_b}")
    # activations: the same at the peak, 6 x 4 MiB per step in total
    f = site(d, "forward")
    expect((f["peak_a"], f["peak_b"], f["peak_change"]) == (24 * MiB, 24 * MiB, 0), f"{f}")
    expect((f["total_a"], f["total_b"]) == (5 * 24 * MiB, 20 * 24 * MiB), f"{f}")
    expect((f["allocations_a"], f["allocations_b"]) == (30, 120), f"{f}")
    w = site(d, "alloc_weights")
    expect(w["peak_change"] == 0 and w["total_change"] == 0 and w["allocations_a"] == 3, f"{w}")
    # sorted by |change at the peak|, then label: the leak first, then the rest by name
    expect(d["sites"][0]["site"] == k["site"], f"{[s['site'] for s in d['sites']]}")
    rest = [s["site"] for s in d["sites"][1:]]
    expect(rest == sorted(rest) and d["site_count"] == 4, f"{rest}")
    # totals, against summary
    t = d["totals"]
    for key, want_a, want_b in [("peak_requested", sa["peak_requested"], sb["peak_requested"]),
                                ("peak_allocated", sa["peak_allocated"], sb["peak_allocated"]),
                                ("peak_reserved", sa["peak_reserved"], sb["peak_reserved"]),
                                ("leaked", sa["leaked"], sb["leaked"]),
                                ("allocations", sa["allocations"], sb["allocations"]),
                                ("ooms", 0, 0)]:
        expect(t[key]["a"] == want_a and t[key]["b"] == want_b and
               t[key]["change"] == want_b - want_a, f"{key}: {t[key]} want {want_a} {want_b}")
    expect(t["peak_requested"]["change"] == 15 * KEEP, f"{t['peak_requested']}")
    expect((t["leaked"]["a"], t["leaked"]["b"]) == (5 * KEEP, 20 * KEEP), f"{t['leaked']}")
    expect((t["allocations"]["a"], t["allocations"]["b"]) == (44, 164), f"{t['allocations']}")
    pct = 100.0 * (sb["peak_requested"] - sa["peak_requested"]) / sa["peak_requested"]
    expect(abs(t["peak_requested"]["change_pct"] - pct) < 0.001, f"{t['peak_requested']} {pct}")
    expect(t["ooms"]["change_pct"] == 0, f"{t['ooms']}")


def test_reversed_diff_is_negative_and_sorted_by_size_of_change():
    a, b = trace_of("a", "example", "5"), trace_of("b", "example", "20")
    d = diff_json(b, a)
    k = d["sites"][0]
    expect(k["site"].startswith("keep_for_logging") and k["peak_change"] == -15 * KEEP and
           k["allocations_change"] == -15, f"{k}")
    expect(d["totals"]["leaked"]["change"] == -15 * KEEP, f"{d['totals']['leaked']}")


def test_text_and_markdown():
    a, b = trace_of("a", "example", "5"), trace_of("b", "example", "20")
    text = report("diff", a, b).stdout
    lines = text.splitlines()
    expect(lines[0].startswith(f"A: {a} (pid ") and "example 5" in lines[0], lines[0])
    expect(lines[1].startswith(f"B: {b} (pid ") and "example 20" in lines[1], lines[1])
    row = next(l for l in lines if l.startswith("peak requested"))
    expect(row.split()[-2:] == ["+3.75", "MiB"] or "+3.75 MiB" in row, row)
    leak = next(l for l in lines if l.startswith("leaked at exit"))
    expect("1.25 MiB" in leak and "5.00 MiB" in leak and leak.rstrip().endswith("+300.0%"), leak)
    head = next(i for i, l in enumerate(lines) if l.lstrip().startswith("peak A"))
    first = lines[head + 1]
    expect(first.rstrip().endswith("keep_for_logging (example.c:46)") or
           "keep_for_logging" in first, first)
    expect(first.split()[:6] == ["1.25", "MiB", "5.00", "MiB", "+3.75", "MiB"], first)
    exact = report("diff", "--bytes", a, b).stdout
    expect(f"+{15 * KEEP}" in exact, exact)
    md = report("diff", "--markdown", a, b).stdout.splitlines()
    expect("| --- | ---: | ---: | ---: | ---: |" in md, "\n".join(md))
    sep = [l for l in md if l.startswith("| ---: |")]
    expect(len(sep) == 1 and sep[0].count("|") == 11, f"{sep}")
    expect(any(l.startswith("| 1.25 MiB | 5.00 MiB | +3.75 MiB |") for l in md), "\n".join(md))


def test_diff_with_itself_is_all_zeros():
    a = trace_of("a", "example", "7")
    d = diff_json(a, a)
    expect(d["site_count"] == 4 and len(d["sites"]) == 4, f"{d['sites']}")
    for s in d["sites"]:
        expect(s["peak_change"] == 0 and s["total_change"] == 0 and s["allocations_change"] == 0
               and s["peak_a"] == s["peak_b"] and s["in_a"] and s["in_b"], f"{s}")
    for key, t in d["totals"].items():
        expect(t["change"] == 0 and t["change_pct"] == 0 and t["a"] == t["b"], f"{key} {t}")
    expect(d["totals"]["leaked"]["a"] == 7 * KEEP, f"{d['totals']['leaked']}")
    # with all changes 0 the order is by label alone
    labels = [s["site"] for s in d["sites"]]
    expect(labels == sorted(labels), f"{labels}")
    text = report("diff", a, a).stdout
    body = text.split("totals:")[1].splitlines()
    totals = [l for l in body if l[:14] in ("peak requested", "leaked at exit", "allocations   ")]
    expect(len(totals) == 3 and all(l.rstrip().endswith(" 0.0%") for l in totals), text)
    expect(not any("+" in l for l in body if "+/-" not in l), f"a signed change in:\n{text}")


def test_site_on_one_side_only():
    a = trace_of("a", "example", "2")
    b = trace_of("b", "check_mem", "grow", "3", "0")
    d = diff_json(a, b)
    g = site(d, "grow")
    expect(not g["in_a"] and g["in_b"] and g["peak_a"] == 0 and g["peak_b"] == 6 * MiB and
           g["allocations_a"] == 0 and g["allocations_b"] == 3 and g["peak_change_pct"] is None,
           f"{g}")
    w = site(d, "alloc_weights")
    expect(w["in_a"] and not w["in_b"] and w["peak_b"] == 0 and w["peak_change"] == -192 * MiB, f"{w}")
    # sorted by the absolute change: -192 MiB before +6 MiB
    expect(d["sites"][0]["site"] == w["site"], f"{[s['site'] for s in d['sites']]}")
    text = report("diff", a, b).stdout
    grow = next(l for l in text.splitlines() if l.rstrip().endswith(g["site"]))
    expect(grow.split()[:2] == ["0", "B"], grow)


def test_directories_are_summed_per_site():
    os.mkdir("run1")
    os.mkdir("run2")
    run([prog("example"), "3"], GPUMEMTRACE_OUTPUT="run1/p1.gmt")
    run([prog("example"), "4"], GPUMEMTRACE_OUTPUT="run1/p2.gmt")
    run([prog("example"), "10"], GPUMEMTRACE_OUTPUT="run2/p1.gmt")
    d = diff_json("run1", "run2")
    expect(d["a"]["processes"] == 2 and d["b"]["processes"] == 1 and
           d["a"]["traces"] == ["run1/p1.gmt", "run1/p2.gmt"], f"{d['a']}")
    k = site(d, "keep_for_logging")
    expect((k["peak_a"], k["peak_b"], k["allocations_a"]) == (7 * KEEP, 10 * KEEP, 7), f"{k}")
    w = site(d, "alloc_weights")
    expect((w["peak_a"], w["peak_b"]) == (2 * 192 * MiB, 192 * MiB), f"{w}")
    s1, s2 = summary("run1/p1.gmt"), summary("run1/p2.gmt")
    t = d["totals"]["peak_requested"]
    expect(t["a"] == s1["peak_requested"] + s2["peak_requested"], f"{t}")
    expect(d["totals"]["leaked"]["a"] == 7 * KEEP, f"{d['totals']['leaked']}")
    text = report("diff", "run1", "run2").stdout
    expect("A: run1 (2 processes, summed)" in text and "upper bound" in text, text)


def test_errors_exit_2_and_print_nothing():
    a = trace_of("a", "example", "1")
    with open("junk.gmt", "w") as f:
        f.write("not a trace at all, but long enough to have a header maybe" * 10)
    for args in [(a,), (a, a, a), (a, "missing.gmt"), ("missing.gmt", a), (a, "junk.gmt"),
                 ("--top", "x", a, a), ("--group", "file", a, a)]:
        p = report("diff", *args, check_rc=2)
        expect(p.stdout == "", f"{args}: output on error: {p.stdout[:200]}")
        # one line: what is wrong (and, for bad usage, where the help is)
        expect(p.stderr.startswith(("gpumemreport: ", "gpumemreport diff: ")) and
               len(p.stderr.strip().splitlines()) == 1, f"{args}: {p.stderr}")
    p = report("diff", a, "missing.gmt", check_rc=2)
    expect(p.stderr.strip().splitlines() == ["gpumemreport: missing.gmt: cannot open: "
                                             "No such file or directory"], p.stderr)
    expect(report("diff", "--help", check_rc=0).stdout.startswith("usage: gpumemreport diff"),
           "help")
