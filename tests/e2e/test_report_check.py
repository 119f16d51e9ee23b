"""gpumemreport check, the CI gate: every exit status with known values.

Each limit is set from the trace's own figures (read from `summary --json`
or from the check's JSON): at the value it passes (the limit is
inclusive), one byte (or one OOM) below it fails with exit 1. Errors -
bad sizes, unreadable traces or baselines, no check at all - exit 2 and
print nothing on stdout. Programs: build/tests/example (256 KiB kept per
step), check_mem grow (steady growth), check_mem oom (OOM failures)."""
import json
import os

from gmt import *

KEEP = 256 * 1024
MiB = 1 << 20


def trace_of(name, *argv):
    run([prog(argv[0]), *argv[1:]], GPUMEMTRACE_OUTPUT=f"{name}.gmt")
    expect(os.path.exists(f"{name}.gmt"), f"no trace {name}.gmt")
    return f"{name}.gmt"


def summary(path):
    return json.loads(report("summary", "--json", path).stdout)["traces"][0]


def check(*args, rc):
    return report("check", *args, check_rc=rc)


def check_json(*args, rc):
    p = check("--json", *args, rc=rc)
    doc = json.loads(p.stdout)
    expect(doc["schema"] == "gpumemtrace.check/1", f"{doc['schema']}")
    expect(doc["passed"] == (rc == 0), f"passed={doc['passed']} with exit {rc}")
    expect(doc["checks_failed"] == sum(not c["passed"] for c in doc["checks"]), f"{doc}")
    return doc


def verdicts(doc):
    return {(c["check"], c["source"]): c["passed"] for c in doc["checks"]}


def test_limits_met_exit_0():
    a = trace_of("a", "example", "5")
    s = summary(a)
    expect(s["peak_requested"] == 192 * MiB + MiB + 24 * MiB + 5 * KEEP, f"{s['peak_requested']}")
    # The growth rate is per second of wall time (a loaded machine changes
    # it, and whether 5 steps of 256 KiB pass the 1 MiB floor): the limit is
    # the rate `growth` itself finds, which the check must find too.
    g = json.loads(report("growth", "--json", a).stdout)["traces"][0]["total_bytes_per_s"]
    rate = int(g)
    doc = check_json("--max-peak", str(s["peak_requested"]), "--max-reserved",
                     str(s["peak_reserved"]), "--max-leaked", str(s["leaked"]),
                     "--max-ooms", "0", "--max-growth", f"{rate}/s", a, rc=0)
    got = {c["check"]: (c["limit"], c["value"]) for c in doc["checks"]}
    expect(got == {"peak_requested": (s["peak_requested"], s["peak_requested"]),
                   "peak_reserved": (s["peak_reserved"], s["peak_reserved"]),
                   "leaked": (5 * KEEP, 5 * KEEP), "growth": (rate, rate), "ooms": (0, 0)},
           f"{got}")
    t = doc["traces"][0]
    expect(t["trace"] == a and t["leaked"] == 5 * KEEP and t["closed"], f"{t}")
    p = check("--max-peak", "1GiB", a, rc=0)
    expect(p.stdout.startswith("gpumemtrace check: PASS\nall 2 checks passed"), p.stdout)


def test_each_size_limit_fails_just_above():
    a = trace_of("a", "example", "5")
    s = summary(a)
    for opt, key in [("--max-peak", "peak_requested"), ("--max-reserved", "peak_reserved"),
                     ("--max-leaked", "leaked")]:
        doc = check_json(opt, str(s[key] - 1), a, rc=1)
        expect(verdicts(doc) == {(key, "limit"): False, ("ooms", "default"): True},
               f"{opt}: {doc['checks']}")
        c = doc["checks"][0]
        expect(c["value"] == s[key] and c["limit"] == s[key] - 1, f"{c}")
        check(opt, str(s[key]), a, rc=0)


def test_size_suffixes():
    a = trace_of("a", "example", "5")
    peak = summary(a)["peak_requested"]          # 228851712 = 223488 KiB
    expect(peak == 223488 * 1024, f"{peak}")
    for limit, rc in [("223488KiB", 0), ("223488K", 0), ("223488kib", 0), ("223488KB", 1),
                      ("218.25MiB", 0), ("218.25 MiB", 0), ("218.249999M", 1),
                      ("228.851712MB", 0), ("228.851711MB", 1), ("228851712B", 0),
                      ("228851711", 1), ("0.213134765625GiB", 2), ("0.213135GiB", 0),
                      ("1G", 0), ("1T", 0), ("0.2GB", 1)]:
        doc = json.loads(check("--json", "--max-peak", limit, a, rc=rc).stdout) if rc < 2 \
            else None
        if rc < 2:
            expect(doc["checks"][0]["check"] == "peak_requested", f"{doc}")
    # exact limits: KB is 1000, KiB 1024, fractions round down to whole bytes
    for limit, want in [("1KB", 1000), ("1KiB", 1024), ("1.5K", 1536), ("2MB", 2000000),
                        ("1.1B", 1), ("3GiB", 3 << 30), ("1TB", 10 ** 12), ("1TiB", 1 << 40),
                        ("9223372036854775807", 2 ** 63 - 1)]:
        doc = json.loads(check("--json", "--max-leaked", limit, a,
                               rc=0 if want >= 5 * KEEP else 1).stdout)
        expect(doc["checks"][0]["limit"] == want, f"{limit}: {doc['checks'][0]}")


def test_growth_limit():
    g = trace_of("g", "check_mem", "grow", "30", "15")
    doc = check_json("--max-growth", "1TiB/s", g, rc=0)
    rate = doc["checks"][0]["value"]
    expect(doc["checks"][0]["check"] == "growth" and doc["traces"][0]["growth_bytes_per_s"] == rate,
           f"{doc}")
    # the same rate as the growth report (one growing site, the 2 MiB per step)
    gr = json.loads(report("growth", "--json", g).stdout)["traces"][0]
    expect(gr["growing_sites"] == 1 and gr["sites"][0]["site"].startswith("grow ") and
           abs(gr["total_bytes_per_s"] - rate) <= 1, f"{gr} vs {rate}")
    expect(gr["sites"][0]["rise"] >= 20 * MiB, f"{gr}")
    fail = check_json("--max-growth", str(rate - 1), g, rc=1)
    expect(verdicts(fail) == {("growth", "limit"): False, ("ooms", "default"): True}, f"{fail}")
    check("--max-growth", f"{rate}/s", g, rc=0)
    # a program without steady growth passes any rate limit
    a = trace_of("a", "stacks")
    expect(check_json("--max-growth", "0", a, rc=0)["checks"][0]["value"] == 0, "stacks grows?")


def test_ooms():
    o = trace_of("o", "check_mem", "oom", "2")
    expect(summary(o)["ooms"] == 2, f"{summary(o)}")
    doc = check_json("--max-ooms", "1", o, rc=1)
    expect([(c["check"], c["limit"], c["value"], c["source"]) for c in doc["checks"]] ==
           [("ooms", 1, 2, "limit")], f"{doc['checks']}")
    check("--max-ooms", "2", o, rc=0)
    # without --max-ooms any OOM fails (the default limit is 0)
    doc = check_json("--max-peak", "1GiB", o, rc=1)
    expect(verdicts(doc) == {("peak_requested", "limit"): True, ("ooms", "default"): False},
           f"{doc['checks']}")


def test_baseline_tolerance():
    a, b = trace_of("a", "example", "5"), trace_of("b", "example", "20")
    pa, pb = summary(a)["peak_requested"], summary(b)["peak_requested"]
    pct = 100.0 * (pb - pa) / pa                      # about 1.72%
    expect(pb - pa == 15 * KEEP and 1.5 < pct < 2, f"{pa} {pb}")
    # within the default 5%: passes; below the rise: fails; just above: passes
    doc = check_json("--baseline", a, "--metric", "peak", b, rc=0)
    c = doc["checks"][0]
    expect((c["check"], c["source"], c["baseline"], c["value"], c["tolerance_pct"]) ==
           ("peak_requested", "baseline", pa, pb, 5), f"{c}")
    expect(c["limit"] == int(pa * 1.05), f"{c}")
    check("--baseline", a, "--metric", "peak", "--tolerance", f"{pct - 0.001:.4f}", b, rc=1)
    check("--baseline", a, "--metric", "peak", "--tolerance", f"{pct + 0.001:.4f}", b, rc=0)
    check("--baseline", a, "--metric", "peak", "--tolerance", "0", a, rc=0)
    # leaked: 4x the baseline, far beyond 5%
    doc = check_json("--baseline", a, b, rc=1)
    expect(verdicts(doc) == {("peak_requested", "baseline"): True,
                             ("peak_reserved", "baseline"): True,
                             ("leaked", "baseline"): False, ("ooms", "default"): True},
           f"{doc['checks']}")
    expect(doc["baseline"]["leaked"] == 5 * KEEP and doc["baseline"]["kind"] == "traces", f"{doc}")
    # fewer steps than the baseline: everything passes
    check("--baseline", b, a, rc=0)


def test_save_then_baseline_round_trip():
    a, b = trace_of("a", "example", "5"), trace_of("b", "example", "20")
    s = summary(a)
    p = check("--save", "base.json", a, rc=0)
    expect("saved this run's figures as a baseline: base.json" in p.stdout, p.stdout)
    saved = json.load(open("base.json"))
    expect(saved["schema"] == "gpumemtrace.check-baseline/1" and saved["processes"] == 1, f"{saved}")
    for key in ("peak_requested", "peak_reserved", "leaked", "ooms"):
        expect(saved[key] == s[key] and saved["traces"][0][key] == s[key], f"{key}: {saved}")
    # the saved file gives the same verdicts and limits as the trace itself
    from_json = check_json("--baseline", "base.json", b, rc=1)
    from_trace = check_json("--baseline", a, b, rc=1)
    expect(from_json["checks"] == from_trace["checks"], f"{from_json['checks']}")
    expect(from_json["baseline"]["kind"] == "check baseline", f"{from_json['baseline']}")
    check("--baseline", "base.json", a, rc=0)
    check("--baseline", "base.json", "--metric", "peak,reserved", b, rc=0)
    # summary --json output works as a baseline too
    with open("summary.json", "w") as f:
        f.write(report("summary", "--json", a).stdout)
    from_summary = check_json("--baseline", "summary.json", b, rc=1)
    expect(from_summary["checks"] == from_trace["checks"] and
           from_summary["baseline"]["kind"] == "summary", f"{from_summary}")
    # --save with --json names the file
    doc = check_json("--save", "again.json", "--max-peak", "1G", b, rc=0)
    expect(doc["saved"] == "again.json" and json.load(open("again.json"))["leaked"] == 20 * KEEP,
           f"{doc}")


def test_several_traces_worst_decides():
    os.mkdir("run")
    run([prog("example"), "5"], GPUMEMTRACE_OUTPUT="run/p1.gmt")
    run([prog("example"), "20"], GPUMEMTRACE_OUTPUT="run/p2.gmt")
    p1, p2 = summary("run/p1.gmt"), summary("run/p2.gmt")
    doc = check_json("--max-peak", str(p1["peak_requested"]), "run", rc=1)
    rows = [(c["trace"], c["check"], c["passed"]) for c in doc["checks"]]
    expect(rows == [("run/p1.gmt", "peak_requested", True), ("run/p1.gmt", "ooms", True),
                    ("run/p2.gmt", "peak_requested", False), ("run/p2.gmt", "ooms", True)],
           f"{rows}")
    check("--max-peak", str(p2["peak_requested"]), "run", rc=0)
    # a baseline of several processes: its largest process's figures
    doc = check_json("--baseline", "run", "--metric", "leaked", "run/p2.gmt", rc=0)
    expect(doc["baseline"]["processes"] == 2 and doc["baseline"]["leaked"] == 20 * KEEP, f"{doc}")


def test_markdown_and_text():
    a = trace_of("a", "example", "5")
    s = summary(a)
    md = check("--markdown", "--max-peak", str(s["peak_requested"] - 1), a, rc=1).stdout
    lines = md.splitlines()
    expect(lines[0] == "## gpumemtrace check: FAIL", lines[0])
    expect("| check | trace | pid | limit or baseline | value | verdict |" in lines, md)
    expect("| --- | --- | ---: | --- | ---: | --- |" in lines, md)
    row = next(l for l in lines if l.startswith("| peak requested |"))
    expect(row.endswith("| **FAIL** |") and "218.25 MiB" in row, row)
    expect(any(l.startswith("- **peak requested** in `a.gmt`") and "1 B" in l for l in lines), md)
    expect(any(l.startswith("A check fails when") for l in lines), md)
    ok = check("--markdown", "--max-peak", str(s["peak_requested"]), a, rc=0).stdout
    expect(ok.startswith("## gpumemtrace check: PASS\n") and "**FAIL**" not in ok, ok)
    text = check("--max-leaked", "1MiB", a, rc=1).stdout.splitlines()
    expect(text[0] == "gpumemtrace check: FAIL" and text[1].startswith("1 of 2 checks failed"),
           f"{text}")
    row = next(l for l in text if l.startswith("leaked at exit"))
    expect(row.split()[-3:] == ["1.25", "MiB", "FAIL"] and "max 1.00 MiB" in row, row)
    expect(any(l.startswith("FAIL leaked at exit in a.gmt") and "256.00 KiB (25.0%) above" in l
               for l in text), f"{text}")


def test_errors_exit_2():
    a = trace_of("a", "example", "2")
    with open("trunc.json", "w") as f:
        f.write('{"schema":"gpumemtrace.check-baseline/1","processes":1,"peak_requ')
    with open("neg.json", "w") as f:
        f.write('{"schema":"gpumemtrace.check-baseline/1","processes":1,"peak_requested":-1,'
                '"peak_reserved":0,"leaked":0,"ooms":0}')
    with open("other.json", "w") as f:
        f.write('{"schema":"gpumemtrace.peak/1","traces":[]}')
    with open("deep.json", "w") as f:
        f.write("[" * 5000 + "]" * 5000)
    cases = [
        (["--max-peak", "10XB", a], "--max-peak: '10XB' is not a size: unknown unit"),
        (["--max-peak", "-5", a], "cannot be negative"),
        (["--max-peak", "1.5.5M", a], "is not a size"),
        (["--max-peak", "10MiB/s", a], "a rate (/s) is for --max-growth"),
        (["--max-peak", "", a], "is not a size"),
        (["--max-peak", "99999999999T", a], "too large"),
        (["--max-growth", "fast", a], "--max-growth: 'fast' is not a rate"),
        (["--max-ooms", "-1", a], "--max-ooms needs a count"),
        (["--max-peak", "1G", "missing.gmt"], "missing.gmt: cannot open"),
        (["--max-peak", "1G"], "check needs a trace"),
        ([a], "nothing to check"),
        (["--baseline", "trunc.json", a], "trunc.json: not a valid JSON baseline"),
        (["--baseline", "neg.json", a], "\"peak_requested\" is not a whole number"),
        (["--baseline", "other.json", a], "schema \"gpumemtrace.peak/1\" is not a baseline"),
        (["--baseline", "deep.json", a], "nested too deeply"),
        (["--baseline", "nothere.json", a], "nothere.json: cannot read the baseline"),
        (["--tolerance", "5", "--max-peak", "1G", a], "apply to a baseline"),
        (["--baseline", a, "--tolerance", "five", a], "--tolerance needs a percentage"),
        (["--baseline", a, "--metric", "speed", a], "--metric is peak, reserved, leaked or all"),
        (["--save", "no/such/dir/base.json", a], "cannot write the baseline"),
    ]
    for args, msg in cases:
        p = check(*args, rc=2)
        expect(p.stdout == "", f"{args}: output on error: {p.stdout[:300]}")
        first = p.stderr.splitlines()[0]
        expect(first.startswith(("gpumemreport: ", "gpumemreport check: ")) and msg in first,
               f"{args}: {p.stderr}")
