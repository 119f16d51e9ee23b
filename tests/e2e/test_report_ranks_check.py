"""gpumemreport check and diff on multi-rank jobs, with known values.

A "job" here is tests/progs/launched.c run once per rank under the
preloaded library, every run with the same GPUMEMTRACE_SESSION and with
RANK=r, WORLD_SIZE=n, as torchrun gives its workers: each trace's header
records its rank (format 1.2). Rank r allocates sizes[r] bytes and keeps
them, so its peak requested (and what it leaks) is exactly sizes[r].
Files are named so that their name order is the reverse of rank order:
rows sorted by rank must not be the directory's order.

Checked: rows named by rank and sorted; per-rank limits (RANK=SIZE)
passing one rank and failing another; a rank-by-rank baseline catching a
regression in one rank that the largest process would hide, and passing
within the tolerance; --save then --baseline with ranks; old baseline
files without ranks; malformed ranks in a baseline (exit 2, one line);
diff's per-rank table."""
import json
import os
import re

from gmt import *

MiB = 1 << 20
SESSION = "0123456789abcdef"
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
             "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "GROUP_RANK")


def job(directory, sizes, ranks=None, session=SESSION):
    """One traced process per rank in `directory`; rank ranks[i] allocates
    sizes[i]. Returns the trace paths by rank."""
    ranks = list(range(len(sizes))) if ranks is None else ranks
    os.makedirs(directory, exist_ok=True)
    out = {}
    for r, size in zip(ranks, sizes):
        env = clean_env()
        for k in DIST_VARS:
            env.pop(k, None)
        env.update(GPUMEMTRACE_SESSION=session, RANK=str(r), WORLD_SIZE=str(len(sizes)),
                   GPUMEMTRACE_OUTPUT=f"{directory}/t{99 - r:02d}.gmt")
        run([prog("launched"), "alloc", str(size)], env=env)
        out[r] = f"{directory}/t{99 - r:02d}.gmt"
        expect(os.path.exists(out[r]), f"no trace {out[r]}")
    return out


def plain(path, size):
    """One traced process without a rank."""
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    env = clean_env(GPUMEMTRACE_OUTPUT=path)
    for k in DIST_VARS:
        env.pop(k, None)
    run([prog("launched"), "alloc", str(size)], env=env)
    return path


def check(*args, rc):
    return report("check", *args, check_rc=rc)


def check_json(*args, rc):
    doc = json.loads(check("--json", *args, rc=rc).stdout)
    expect(doc["passed"] == (rc == 0), f"passed={doc['passed']} with exit {rc}")
    expect(doc["checks_failed"] == sum(not c["passed"] for c in doc["checks"]), f"{doc}")
    return doc


def rows(doc, check="peak_requested", source=None):
    return [(c["rank"], c["limit"], c["value"], c["passed"]) for c in doc["checks"]
            if c["check"] == check and (source is None or c["source"] == source)]


def error_line(p):
    lines = p.stderr.splitlines()
    expect(len(lines) == 1 and p.stdout == "", f"stdout {p.stdout!r}, stderr {lines}")
    return lines[0]


def test_rows_named_by_rank_and_sorted():
    t = job("run", [4 * MiB, 1 * MiB, 3 * MiB, 2 * MiB])
    doc = check_json("--max-peak", "4MiB", "run", rc=0)
    expect([(x["rank"], x["trace"], x["peak_requested"]) for x in doc["traces"]] ==
           [(0, t[0], 4 * MiB), (1, t[1], MiB), (2, t[2], 3 * MiB), (3, t[3], 2 * MiB)],
           f"{doc['traces']}")
    expect(rows(doc) == [(0, 4 * MiB, 4 * MiB, True), (1, 4 * MiB, MiB, True),
                         (2, 4 * MiB, 3 * MiB, True), (3, 4 * MiB, 2 * MiB, True)],
           f"{doc['checks']}")
    expect(all(c["rank_limit"] is False for c in doc["checks"]), f"{doc['checks']}")
    pids = {x["rank"]: x["pid"] for x in doc["traces"]}
    text = check("--max-peak", "4MiB", "run", rc=0).stdout.splitlines()
    expect(text[3].split() == ["check", "trace", "process", "limit", "or", "baseline",
                               "value", "verdict"], f"{text}")
    peak = [l for l in text if l.startswith("peak requested")]
    expect([l.split()[2:7] for l in peak] ==
           [[t[r], "rank", str(r), "(pid", f"{pids[r]})"] for r in range(4)], f"{peak}")
    md = check("--markdown", "--max-peak", "2MiB", "run", rc=1).stdout.splitlines()
    expect("| check | trace | process | limit or baseline | value | verdict |" in md, f"{md}")
    expect(f"| peak requested | {t[2]} | rank 2 (pid {pids[2]}) | max 2.00 MiB | 3.00 MiB "
           f"| **FAIL** |" in md, f"{md}")
    expect(f"- **peak requested** in `{t[0]}` (rank 0, pid {pids[0]}): 4.00 MiB is "
           f"2.00 MiB (100.0%) above max 2.00 MiB" in md, f"{md}")
    # a process without a rank among them: argument order, "pid N", rank null
    u = plain("u.gmt", MiB)
    doc = check_json("--max-peak", "4MiB", t[3], u, t[1], rc=0)
    expect([(x["trace"], x["rank"]) for x in doc["traces"]] ==
           [(t[3], 3), ("u.gmt", None), (t[1], 1)], f"{doc['traces']}")
    upid = doc["traces"][1]["pid"]
    text = check("--max-peak", "4MiB", t[3], u, t[1], rc=0).stdout
    expect(re.search(rf"\bu\.gmt +pid {upid} +max 4\.00 MiB", text), text)
    # no rank anywhere: the pid column as before
    text = check("--max-peak", "4MiB", u, rc=0).stdout.splitlines()
    expect(text[3].split()[:3] == ["check", "trace", "pid"], f"{text}")


def test_per_rank_limits():
    job("run", [4 * MiB, 1 * MiB, 3 * MiB, 2 * MiB])
    # rank 0 may use 4 MiB, every other rank 3 MiB: all pass
    doc = check_json("--max-peak", "3MiB", "--max-peak", "0=4MiB", "run", rc=0)
    expect(rows(doc) == [(0, 4 * MiB, 4 * MiB, True), (1, 3 * MiB, MiB, True),
                         (2, 3 * MiB, 3 * MiB, True), (3, 3 * MiB, 2 * MiB, True)],
           f"{doc['checks']}")
    expect([c["rank_limit"] for c in doc["checks"] if c["check"] == "peak_requested"] ==
           [True, False, False, False], f"{doc['checks']}")
    # the same override, a lower default: rank 0 passes, rank 2 fails
    doc = check_json("--max-peak", "2MiB", "--max-peak", "0=4MiB", "run", rc=1)
    expect(rows(doc) == [(0, 4 * MiB, 4 * MiB, True), (1, 2 * MiB, MiB, True),
                         (2, 2 * MiB, 3 * MiB, False), (3, 2 * MiB, 2 * MiB, True)],
           f"{doc['checks']}")
    text = check("--max-peak", "2MiB", "--max-peak", "0=4MiB", "run", rc=1).stdout
    expect("max 4.00 MiB (rank 0)" in text and "1 of 8 checks failed" in text, text)
    # without the override rank 0 fails too
    doc = check_json("--max-peak", "3MiB", "run", rc=1)
    expect([r[3] for r in rows(doc)] == [False, True, True, True], f"{doc['checks']}")
    # a rank's own limit one byte under its value fails; only that rank is checked
    doc = check_json("--max-peak", f"0={4 * MiB - 1}", "run", rc=1)
    expect(rows(doc) == [(0, 4 * MiB - 1, 4 * MiB, False)], f"{doc['checks']}")
    # several ranks, the last of a repeated rank wins, other figures too
    doc = check_json("--max-peak", "1MiB", "--max-peak", "0=1", "--max-peak", "0=4MiB",
                     "--max-peak", "2=3MiB", "--max-peak", "3=2MiB",
                     "--max-leaked", "2=3MiB", "--max-ooms", "1=2", "run", rc=0)
    expect(rows(doc) == [(0, 4 * MiB, 4 * MiB, True), (1, MiB, MiB, True),
                         (2, 3 * MiB, 3 * MiB, True), (3, 2 * MiB, 2 * MiB, True)],
           f"{doc['checks']}")
    expect(rows(doc, "leaked") == [(2, 3 * MiB, 3 * MiB, True)], f"{doc['checks']}")
    expect([(c["rank"], c["source"], c["limit"]) for c in doc["checks"]
            if c["check"] == "ooms"] ==
           [(0, "default", 0), (1, "limit", 2), (2, "default", 0), (3, "default", 0)],
           f"{doc['checks']}")
    # a rank no trace has: one warning line, the limit applies to nothing
    p = check("--max-peak", "9=1", "--max-reserved", "7=1", "--max-peak", "1=1GiB",
              "run", rc=0)
    expect(p.stderr.splitlines() == [
        "gpumemreport: warning: no trace has rank 9 (--max-peak), rank 7 (--max-reserved): "
        "those limits apply to nothing"], p.stderr)
    p = check("--max-peak", "4=1", "run", rc=0)
    expect(p.stderr == "gpumemreport: warning: no trace has rank 4 (--max-peak): that "
           "limit applies to nothing\n", p.stderr)
    expect(check("--max-peak", "3MiB", "--max-peak", "0=4MiB", "run", rc=0).stderr == "", "")
    # bad ranks and values: one line, exit 2
    for arg, want in [("x=1GiB", "the rank before '=' is not a whole number"),
                      ("-1=1GiB", "the rank before '=' is not a whole number"),
                      ("4294967296=1", "the rank before '=' is not a whole number"),
                      ("99999999999999999999999=1", "the rank before '=' is not"),
                      ("=1", "the rank before '=' is not"),
                      ("0=", "'' is not a size"),
                      ("0=10XB", "'10XB' is not a size: unknown unit"),
                      ("0=1=2", "'1=2' is not a size")]:
        line = error_line(check("--max-peak", arg, "run", rc=2))
        expect(line.startswith("gpumemreport check: ") and want in line and
               line.endswith("; try 'gpumemreport check --help'"), f"{arg}: {line}")
    line = error_line(check("--max-ooms", "1=x", "run", rc=2))
    expect("--max-ooms needs a count" in line, line)
    check("--max-peak", "4294967295=1", "run", rc=0)  # the largest rank is a rank


def test_baseline_rank_by_rank():
    job("base", [4 * MiB, MiB, MiB, MiB])
    job("new", [4 * MiB, MiB, 2 * MiB, MiB])  # rank 2 doubled, still under rank 0
    doc = check_json("--baseline", "base", "--metric", "peak", "new", rc=1)
    expect(doc["baseline"]["by_rank"] is True and doc["baseline"]["processes"] == 4,
           f"{doc['baseline']}")
    got = [(c["rank"], c["baseline_rank"], c["baseline"], c["limit"], c["value"], c["passed"])
           for c in doc["checks"] if c["source"] == "baseline"]
    allowed1 = MiB * 105 // 100
    expect(got == [(0, 0, 4 * MiB, 4 * MiB * 105 // 100, 4 * MiB, True),
                   (1, 1, MiB, allowed1, MiB, True),
                   (2, 2, MiB, allowed1, 2 * MiB, False),
                   (3, 3, MiB, allowed1, MiB, True)], f"{got}")
    text = check("--baseline", "base", "--metric", "peak", "new", rc=1).stdout
    expect("baseline base (traces, 4 processes, rank by rank)" in text, text)
    expect("rank 2's baseline 1.00 MiB +5% = 1.05 MiB" in text, text)
    expect(any(l.startswith("FAIL peak requested in new/t97.gmt (rank 2, pid ") and
               l.endswith("2.00 MiB is 972.80 KiB (90.5%) above rank 2's baseline 1.00 MiB "
                          "+5% = 1.05 MiB") for l in text.splitlines()), text)
    # the largest process's figure would have let it through
    u = plain("u.gmt", 4 * MiB)
    doc = check_json("--baseline", u, "--metric", "peak", "new", rc=0)
    expect(doc["baseline"]["by_rank"] is False and
           {c["baseline"] for c in doc["checks"] if c["source"] == "baseline"} == {4 * MiB},
           f"{doc['checks']}")
    # within the tolerance: 1 MiB + 50000 B is 4.77% above 1 MiB
    job("near", [4 * MiB, MiB, MiB + 50000, MiB])
    doc = check_json("--baseline", "base", "--metric", "peak", "near", rc=0)
    expect(rows(doc, source="baseline")[2] == (2, allowed1, MiB + 50000, True), f"{doc}")
    doc = check_json("--baseline", "base", "--metric", "peak", "--tolerance", "4", "near",
                     rc=1)
    expect(rows(doc, source="baseline") == [(0, 4 * MiB * 104 // 100, 4 * MiB, True),
                                            (1, MiB * 104 // 100, MiB, True),
                                            (2, MiB * 104 // 100, MiB + 50000, False),
                                            (3, MiB * 104 // 100, MiB, True)], f"{doc}")
    # a rank the baseline lacks is compared with its largest process, and says so
    job("grown", [4 * MiB, MiB, MiB, MiB, 3 * MiB])
    doc = check_json("--baseline", "base", "--metric", "peak", "grown", rc=0)
    last = [c for c in doc["checks"] if c["source"] == "baseline"][-1]
    expect((last["rank"], last["baseline_rank"], last["baseline"], last["value"]) ==
           (4, None, 4 * MiB, 3 * MiB), f"{last}")
    text = check("--baseline", "base", "--metric", "peak", "grown", rc=0).stdout
    row = [l for l in text.splitlines() if " rank 4 (pid " in l and "peak requested" in l]
    expect(len(row) == 1 and "baseline 4.00 MiB +5% = 4.20 MiB (largest process: no such "
           "rank in the baseline)" in row[0], f"{row}")
    # a run without ranks against a ranked baseline: the largest process
    doc = check_json("--baseline", "base", "--metric", "peak", u, rc=0)
    got = [(c["rank"], c["baseline_rank"], c["baseline"]) for c in doc["checks"]
           if c["source"] == "baseline"]
    expect(doc["baseline"]["by_rank"] is False and got == [(None, None, 4 * MiB)], f"{doc}")


def test_save_then_baseline_with_ranks():
    t = job("base", [4 * MiB, MiB, MiB, MiB])
    job("new", [4 * MiB, MiB, 2 * MiB, MiB])
    p = check("--save", "b.json", "base", rc=0)
    expect("saved this run's figures as a baseline: b.json" in p.stdout, p.stdout)
    with open("b.json") as f:
        saved = json.load(f)
    expect(saved["schema"] == "gpumemtrace.check-baseline/1" and saved["processes"] == 4 and
           saved["peak_requested"] == 4 * MiB, f"{saved}")
    expect([(e["trace"], e["rank"], e["peak_requested"]) for e in saved["traces"]] ==
           [(t[0], 0, 4 * MiB), (t[1], 1, MiB), (t[2], 2, MiB), (t[3], 3, MiB)],
           f"{saved['traces']}")
    doc = check_json("--baseline", "b.json", "base", rc=0)
    expect(doc["baseline"]["kind"] == "check baseline" and doc["baseline"]["by_rank"],
           f"{doc['baseline']}")
    expect([(c["rank"], c["baseline_rank"]) for c in doc["checks"]
            if c["source"] == "baseline"] == [(r, r) for r in range(4) for _ in range(3)],
           f"{doc['checks']}")
    doc = check_json("--baseline", "b.json", "--metric", "peak", "new", rc=1)
    expect([c["passed"] for c in doc["checks"] if c["source"] == "baseline"] ==
           [True, True, False, True], f"{doc['checks']}")
    # a process without a rank is saved with rank null: no rank-by-rank then
    plain("base/u.gmt", MiB)
    check("--save", "c.json", "base", rc=0)
    with open("c.json") as f:
        c = json.load(f)
    expect([e["rank"] for e in c["traces"]] == [3, 2, 1, 0, None], f"{c['traces']}")
    doc = check_json("--baseline", "c.json", "--metric", "peak", "new", rc=0)
    expect(doc["baseline"]["by_rank"] is False, f"{doc['baseline']}")


def write(name, doc):
    with open(name, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return name


def old_baseline(peak):
    """A check-baseline/1 file as written before ranks existed."""
    return {"schema": "gpumemtrace.check-baseline/1", "processes": 2,
            "peak_requested": peak, "peak_reserved": 1 << 40, "leaked": 1 << 40, "ooms": 0,
            "traces": [{"trace": "a.gmt", "pid": 1, "command": "x", "closed": True,
                        "peak_requested": peak, "peak_reserved": 1 << 40,
                        "leaked": 1 << 40, "ooms": 0},
                       {"trace": "b.gmt", "pid": 2, "command": "x", "closed": True,
                        "peak_requested": 1, "peak_reserved": 1, "leaked": 1, "ooms": 0}]}


def test_old_baseline_without_ranks():
    job("new", [4 * MiB, MiB, 2 * MiB, MiB])
    doc = check_json("--baseline", write("old.json", old_baseline(4 * MiB)), "--metric", "peak",
                     "new", rc=0)
    expect(doc["baseline"]["by_rank"] is False and doc["baseline"]["processes"] == 2 and
           [c["baseline"] for c in doc["checks"] if c["source"] == "baseline"] == [4 * MiB] * 4,
           f"{doc}")
    doc = check_json("--baseline", write("old2.json", old_baseline(2 * MiB - 1)),
                     "--metric", "peak", "new", rc=1)
    expect([c["passed"] for c in doc["checks"] if c["source"] == "baseline"] ==
           [False, True, True, True], f"{doc['checks']}")
    # no "traces" at all, as a hand-written file may be
    b = old_baseline(4 * MiB)
    del b["traces"]
    check_json("--baseline", write("old3.json", b), "new", rc=0)
    # a summary --json document with ranks is a rank-by-rank baseline too
    s = {"schema": "gpumemtrace.summary/1",
         "traces": [{"rank": r, "peak_requested": v, "peak_reserved": 1 << 40,
                     "leaked": 1 << 40, "ooms": 0}
                    for r, v in [(0, 4 * MiB), (1, MiB), (2, MiB), (3, MiB)]]}
    doc = check_json("--baseline", write("s.json", s), "--metric", "peak", "new", rc=1)
    expect(doc["baseline"]["by_rank"] and [c["passed"] for c in doc["checks"]
                                           if c["source"] == "baseline"] ==
           [True, True, False, True], f"{doc['checks']}")


def test_malformed_rank_in_baseline_exit_2():
    job("new", [MiB, MiB])
    bad = {"-1": -1, "string": "2", "huge": 4294967296, "huger": 10 ** 30, "fraction": 1.5,
           "exponent": 1e3, "true": True, "list": [1], "object": {"r": 1}}
    for name, rank in bad.items():
        b = old_baseline(MiB)
        b["traces"][1]["rank"] = rank
        for schema in ("gpumemtrace.check-baseline/1", "gpumemtrace.summary/1"):
            b["schema"] = schema
            path = write(f"{name}.json", b)
            line = error_line(check("--baseline", path, "new", rc=2))
            expect(line == f"gpumemreport: {path}: not a usable baseline: process 2: \"rank\" "
                   "is not a whole number from 0 to 4294967295 (or null)", f"{name}: {line}")
    # given twice
    b = json.dumps(old_baseline(MiB)).replace('"pid": 2,', '"pid": 2, "rank": 1, "rank": 1,')
    line = error_line(check("--baseline", write("dup.json", b), "new", rc=2))
    expect(line.endswith('process 2: "rank" is given twice'), line)
    # every entry ranked: the entries' figures must then be whole
    b = old_baseline(MiB)
    b["traces"][0]["rank"], b["traces"][1]["rank"] = 0, 1
    del b["traces"][1]["leaked"]
    line = error_line(check("--baseline", write("nofig.json", b), "new", rc=2))
    expect(line.endswith('not a usable baseline: "leaked" is missing'), line)
    b = old_baseline(MiB)
    b["traces"] = {"0": 1}
    line = error_line(check("--baseline", write("notlist.json", b), "new", rc=2))
    expect(line.endswith('not a usable baseline: "traces" is not a list'), line)
    b = old_baseline(MiB)
    b["traces"][0] = 7
    line = error_line(check("--baseline", write("notobj.json", b), "new", rc=2))
    expect(line.endswith("a process entry is not an object"), line)
    # the bounds that are ranks, and null (no rank)
    b = old_baseline(MiB)
    b["traces"][0]["rank"], b["traces"][1]["rank"] = 0, 4294967295
    doc = check_json("--baseline", write("max.json", b), "--metric", "peak", "new", rc=0)
    expect(doc["baseline"]["by_rank"] and [c["baseline_rank"] for c in doc["checks"]
                                           if c["source"] == "baseline"] == [0, None],
           f"{doc['checks']}")
    b["traces"][1]["rank"] = None
    doc = check_json("--baseline", write("null.json", b), "new", rc=0)
    expect(doc["baseline"]["by_rank"] is False, f"{doc['baseline']}")


def test_diff_per_rank_table():
    job("a", [MiB, 2 * MiB, 3 * MiB, 4 * MiB])
    job("b", [MiB, 2 * MiB + MiB // 2, 3 * MiB, 5 * MiB], ranks=[0, 1, 2, 4])
    res = {}
    for side in ("a", "b"):
        s = json.loads(report("summary", "--json", side).stdout)["traces"]
        for x in s:
            res[(side, x["peak_requested"])] = x["peak_reserved"]
    doc = json.loads(report("diff", "--json", "a", "b").stdout)

    def fig(side, v):
        return {"processes": 1, "peak_requested": v, "peak_reserved": res[(side, v)], "ooms": 0}
    want = [{"rank": 0, "before": fig("a", MiB), "after": fig("b", MiB)},
            {"rank": 1, "before": fig("a", 2 * MiB), "after": fig("b", 2 * MiB + MiB // 2)},
            {"rank": 2, "before": fig("a", 3 * MiB), "after": fig("b", 3 * MiB)},
            {"rank": 3, "before": fig("a", 4 * MiB), "after": None},
            {"rank": 4, "before": None, "after": fig("b", 5 * MiB)}]
    expect(doc["ranks"] == want, f"{doc['ranks']}")
    text = report("diff", "--bytes", "a", "b").stdout.splitlines()
    i = text.index("per rank (peak requested, peak reserved, out of memory):")
    expect(text[i + 1].split() == ["rank", "peak", "A", "peak", "B", "peak", "+/-", "peak",
                                   "%", "reserved", "A", "reserved", "B", "reserved", "+/-",
                                   "OOMs", "A", "OOMs", "B"], text[i + 1])
    r1 = res[("a", 2 * MiB)], res[("b", 2 * MiB + MiB // 2)]
    expect(text[i + 3].split() == ["1", str(2 * MiB), str(2 * MiB + MiB // 2),
                                   f"+{MiB // 2}", "+25.0%", str(r1[0]), str(r1[1]),
                                   ("+" if r1[1] > r1[0] else "") + str(r1[1] - r1[0]),
                                   "0", "0"], text[i + 3])
    expect(text[i + 5].split() == ["3", "(A", "only)", str(4 * MiB), "-", "-", "-",
                                   str(res[("a", 4 * MiB)]), "-", "-", "0", "-"], text[i + 5])
    expect(text[i + 6].split() == ["4", "(B", "only)", "-", str(5 * MiB), "-", "-", "-",
                                   str(res[("b", 5 * MiB)]), "-", "-", "0"], text[i + 6])
    expect(text[i + 7] == "" and text[i + 8].startswith("sites (by line)"), text[i + 7:])
    expect(text.index("totals:") < i, "the rank table comes after the totals")
    # a side without ranks, or two single traces: no table, "ranks" null
    plain("u/u.gmt", MiB)
    plain("u/v.gmt", MiB)
    for x, y in [("a", "u"), ("u", "b"), ("a/t99.gmt", "b/t98.gmt")]:
        doc = json.loads(report("diff", "--json", x, y).stdout)
        expect(doc["ranks"] is None, f"{x} {y}: {doc['ranks']}")
        expect("per rank" not in report("diff", x, y).stdout, f"{x} {y}")
    # a directory against one ranked trace: the other ranks are A's only
    doc = json.loads(report("diff", "--json", "a", "b/t99.gmt").stdout)
    expect([(r["rank"], r["before"] is not None, r["after"] is not None)
            for r in doc["ranks"]] ==
           [(0, True, True), (1, True, False), (2, True, False), (3, True, False)],
           f"{doc['ranks']}")
