"""gpumemreport timeline: the replay's time buckets as CSV, JSON and a
terminal chart, on the known pattern of tests/progs/frag.c: peak requested
2492468 bytes; reserved at most 4 MiB of pool segments plus a pitched
allocation of 4096 bytes outside the pool."""
import json
import math
import os
import re

from gmt import *

HEADER = "time_s,requested,reserved,device_used,host"
PEAK_REQUESTED = 2492468
PEAK_RESERVED = (4 << 20) + 4096


def traced(**env):
    env.setdefault("SIM_CUDA_MEM", "32M")
    env.setdefault("GPUMEMTRACE_SAMPLE_MS", "1")
    p = run([prog("frag")], **env)
    expect(p.stdout.rstrip().endswith("ok"), p.stdout)
    return one_trace()


def summary(t):
    return json.loads(report("summary", "--json", t).stdout)["traces"][0]


def csv_rows(t):
    lines = report("timeline", "--csv", t).stdout.splitlines()
    expect(lines[0] == HEADER, lines[0])
    rows = []
    for l in lines[1:]:
        f = l.split(",")
        expect(len(f) == 5, l)
        rows.append((float(f[0]), int(f[1]), int(f[2]), int(f[3]) if f[3] else None, int(f[4])))
    return rows


def test_csv_shape_and_values():
    t = traced()
    rows = csv_rows(t)
    s = summary(t)
    tl = json.loads(report("timeline", "--json", t).stdout)["traces"][0]
    step = tl["bucket_ns"] / 1e9
    expect(2 <= len(rows) <= 256 and len(rows) == len(tl["buckets"]), len(rows))
    expect(all(abs(r[0] - i * step) < 1e-6 for i, r in enumerate(rows)), "times are not bucket starts")
    expect(max(r[1] for r in rows) == s["peak_requested"] == PEAK_REQUESTED, s["peak_requested"])
    expect(max(r[2] for r in rows) == s["peak_reserved"] == PEAK_RESERVED, s["peak_reserved"])
    expect(rows[0][1] == 0 and all(r[1] <= r[2] for r in rows), rows[:5])
    expect(all(r[4] == 0 for r in rows), "no pinned host memory in this program")
    used = [r[3] for r in rows if r[3] is not None]
    # the simulated driver counts what the process holds as used
    expect(used and max(used) == PEAK_RESERVED, max(used, default=None))
    first = next(i for i, r in enumerate(rows) if r[3] is not None)
    expect(all(r[3] is not None for r in rows[first:]), "device_used is carried forward")


def test_json_matches_csv():
    t = traced()
    doc = json.loads(report("timeline", "--json", t).stdout)
    expect(doc["schema"] == "gpumemtrace.timeline/1", doc["schema"])
    tl = doc["traces"][0]
    expect((tl["peak_requested"], tl["peak_reserved"]) == (PEAK_REQUESTED, PEAK_RESERVED),
           (tl["peak_requested"], tl["peak_reserved"]))
    rows = csv_rows(t)
    got = [(b["requested"], b["reserved"], b["device_used"], b["host"]) for b in tl["buckets"]]
    expect(got == [r[1:] for r in rows], "JSON and CSV series differ")
    expect([b["at_ns"] for b in tl["buckets"]] == [i * tl["bucket_ns"] for i in range(len(rows))],
           "at_ns")


def chart_cols(out):
    """The plot rows of a chart (top first), as the text right of '|'."""
    return [l.split("|", 1)[1] for l in out.splitlines() if re.match(r"^ {0,10}[^|+]* \|", l)]


def test_chart():
    t = traced()
    out = report("timeline", "--bytes", t).stdout
    plot = chart_cols(out)
    expect(len(plot) == 16 and all(len(r) == 64 for r in plot), out)
    # axis: 4.0039 MiB rounds up to 5 MiB on top, quarter marks, 0 at
    # the x axis
    labels = [l.split("|")[0].strip() for l in out.splitlines() if " |" in l]
    expect(labels[0] == "5 MiB" and labels[4] == "3.75 MiB" and labels[8] == "2.5 MiB"
           and labels[12] == "1.25 MiB" and labels.count("") == 12, labels)
    expect(re.search(r"^ +0 MiB \+-{64}$", out, re.M), out)
    # requested (#) reaches ceil(2492468 / 5 MiB * 16) = 8 rows, reserved
    # (:) ceil(4198400 / 5 MiB * 16) = 13: the highest points are the peaks
    def height(ch):
        return max((16 - i for i, r in enumerate(plot) if ch in r), default=0)
    expect(height("#") == 8 and height(":") == 13, "\n".join(plot))
    expect(f"# requested (peak {PEAK_REQUESTED})  : reserved (peak {PEAK_RESERVED})  "
           "- device used (driver)" in out, out)
    expect(re.search(r"^ +0\.000 s +\d+\.\d{3} s +\d+\.\d{3} s$", out, re.M), out)


def test_chart_size_options():
    t = traced()
    out = report("timeline", "--width", "30", "--height", "6", t).stdout
    plot = chart_cols(out)
    expect(len(plot) == 6 and all(len(r) == 30 for r in plot), out)
    md = report("timeline", "--markdown", t).stdout.splitlines()
    expect(md[1] == "```" and md[-1] == "```", md)


def test_without_the_pool():
    t = traced(GPUMEMTRACE_POOL="0")
    rows = csv_rows(t)
    s = summary(t)
    # reserved is the allocations themselves: the pitched one is 96 bytes
    # bigger than requested
    expect(max(r[1] for r in rows) == s["peak_requested"] == PEAK_REQUESTED, s["peak_requested"])
    expect(max(r[2] for r in rows) == s["peak_reserved"] == PEAK_REQUESTED + 96, s["peak_reserved"])
    expect(all(r[3] is None for r in rows), "no driver samples without the pool")
    out = report("timeline", t).stdout
    expect("device used" not in out and len(chart_cols(out)) == 16, out)


def test_help_and_bad_usage():
    p = report("timeline", "--help")
    expect(p.stdout.startswith("usage: gpumemreport timeline") and "--csv" in p.stdout, p.stdout)
    t = traced()
    for args, msg in ((["--csv", "--json", t], "--csv and --json exclude each other"),
                      (["--width", "3", t], "--width needs a number from 16 to 400, not '3'"),
                      (["--height", "x", t], "--height needs a number from 4 to 100, not 'x'")):
        p = report("timeline", *args, check_rc=2)
        expect(p.stdout == "" and len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr,
               f"{args}: {p.stdout} {p.stderr}")
    report("timeline", check_rc=2)


def test_corrupt_trace():
    t = traced()
    data = bytearray(open(t, "rb").read())
    data[4096 + 232:4096 + 292] = bytes(60)
    open("bad.gmt", "wb").write(data)
    for args in ([], ["--csv"], ["--json"]):  # read where intact, said
        p = report("timeline", *args, "bad.gmt", check_rc=0)
        lines = p.stderr.strip().splitlines()
        expect(len(lines) == 1 and lines[0].startswith(
            "gpumemreport: warning: bad.gmt: damaged trace, read where intact"), p.stderr)


def test_level_after_everything_is_freed():
    # tests/progs/idle_after.c: 16 MiB requested, all of it freed, then an
    # idle stretch: a bucket after the frees shows what was live then
    # (nothing), not the maximum of the bucket that held the frees
    for pool in ("1", "0"):
        for f in traces():
            os.unlink(f)
        p = run([prog("idle_after"), "400"], GPUMEMTRACE_POOL=pool)
        expect(p.stdout.strip() == "peak 16777216", p.stdout)
        t = one_trace()
        tl = json.loads(report("timeline", "--json", t).stdout)["traces"][0]
        b = tl["buckets"]
        expect(tl["peak_requested"] == 16 << 20 and max(x["requested"] for x in b) == 16 << 20,
               (pool, tl["peak_requested"]))
        # the frees end before the idle stretch, most of the run: every
        # bucket after the last that held memory shows none
        last = max(i for i, x in enumerate(b) if x["requested"])
        expect(last < len(b) // 2, (pool, last, len(b)))
        expect(all(x["requested"] == 0 for x in b[last + 1:]) and len(b) - last > len(b) // 3,
               (pool, [x["requested"] for x in b]))
        if pool == "0":  # without the pool nothing stays reserved either
            expect(all(x["reserved"] == 0 for x in b[last + 1:]), (pool, [x["reserved"] for x in b]))
        rows = csv_rows(t)
        expect([r[1:3] for r in rows] == [(x["requested"], x["reserved"]) for x in b], "CSV != JSON")
        # the chart: the columns after the frees draw nothing requested
        plot = chart_cols(report("timeline", "--width", "64", t).stdout)
        col = max(i for row in plot for i, ch in enumerate(row) if ch == "#")
        expect(col < 48, (pool, col, plot))
