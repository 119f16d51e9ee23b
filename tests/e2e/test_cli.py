"""The command lines of the three programs: --version on each,
and bad usage - an unknown option, a missing value, no trace - answered
with one line that says what is wrong and where the help is, exit 2."""
import json
import os
import re
import subprocess

from gmt import *

LAUNCHER = os.path.join(BUILD, "gpumemtrace")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def version_file():
    with open(os.path.join(ROOT, "VERSION")) as f:
        return f.read().strip()


def commands():
    """The commands `gpumemreport help` lists."""
    out = report("help").stdout
    names = re.findall(r"^  (\w+) ", out, re.M)
    expect(len(names) >= 14 and "summary" in names and "check" in names, out)
    return names


def test_version_of_each_program():
    v = re.escape(version_file())
    for cmd, name in [([REPORT, "--version"], "gpumemreport"),
                      ([LAUNCHER, "--version"], "gpumemtrace"),
                      ([LIB, "--version"], "libgpumemtrace.so"),
                      ([LIB], "libgpumemtrace.so")]:
        p = run(cmd, traced=False)
        first = p.stdout.splitlines()[0]
        expect(re.fullmatch(rf"{name} {v} \(([0-9a-f]{{7,}}(-dirty)?|unknown)\)"
                            rf"( \(trace format \d+\.\d+\))?", first),
               f"{cmd}: {p.stdout!r}")
        expect(p.stderr == "", f"{cmd}: {p.stderr}")
    # the library still loads as a library: a traced program runs
    run([prog("report_known")])
    expect(len(traces()) == 1, "a trace from the preloaded library")


def test_unknown_option_is_one_line():
    for c in commands():
        p = report(c, "--no-such-option", "x.gmt", check_rc=2)
        want = (f"gpumemreport {c}: unknown option '--no-such-option'; "
                f"try 'gpumemreport {c} --help'")
        expect(p.stderr.splitlines() == [want] and p.stdout == "", f"{c}: {p.stderr!r}")
    p = report("peak", "-Z", "x.gmt", check_rc=2)
    expect(p.stderr.splitlines() == ["gpumemreport peak: unknown option '-Z'; "
                                     "try 'gpumemreport peak --help'"], p.stderr)


def test_missing_value_and_missing_trace_are_one_line():
    p = report("peak", "--top", check_rc=2)
    expect(p.stderr.splitlines() == ["gpumemreport peak: option '--top' needs a value; "
                                     "try 'gpumemreport peak --help'"], p.stderr)
    for c in commands():
        p = report(c, check_rc=2)
        lines = p.stderr.splitlines()
        expect(len(lines) == 1 and lines[0].startswith(f"gpumemreport {c}: ") and
               lines[0].endswith(f"; try 'gpumemreport {c} --help'") and p.stdout == "",
               f"{c}: {p.stderr!r}")
    p = report(check_rc=2)
    expect(p.stderr.splitlines() == ["gpumemreport: no command; try 'gpumemreport help'"],
           p.stderr)


def test_help_and_options_in_order():
    """Every command reads its options in order through one parser: --help,
    -h and `gpumemreport help CMD` print the same usage on stdout (exit 0),
    also with a bad option after them; a bad option before --help is the
    answer instead, one line, exit 2."""
    for c in commands():
        want = report(c, "--help").stdout
        expect(want.startswith(f"usage: gpumemreport {c}"), f"{c}: {want!r}")
        for args in (["-h"], ["--help", "--no-such-option"]):
            p = report(c, *args)
            expect(p.stdout == want and p.stderr == "", f"{c} {args}: {p.stderr!r}")
        expect(report("help", c).stdout == want, f"help {c}")
        p = report(c, "--no-such-option", "--help", check_rc=2)
        expect(p.stdout == "" and len(p.stderr.splitlines()) == 1, f"{c}: {p.stderr!r}")


def test_bad_values_are_one_line():
    """A command's own options and the common ones refuse a bad value with
    one line, exit 2, before any trace is read; a command that does not
    take a common option says it is unknown."""
    try_ = lambda c: f"; try 'gpumemreport {c} --help'"
    for args, want in (
            (["peak", "--top", "x"], "gpumemreport peak: --top needs a number, not 'x'" +
             try_("peak")),
            (["peak", "--group", "x"], "gpumemreport peak: --group is function, line or stack, "
                                       "not 'x'" + try_("peak")),
            (["dump", "--limit", "x"], "gpumemreport dump: --limit needs a number, not 'x'" +
             try_("dump")),
            (["timeline", "--width", "3"], "gpumemreport timeline: --width needs a number from "
                                           "16 to 400, not '3'" + try_("timeline")),
            (["whatif", "--policy", "x"], "gpumemreport whatif: --policy 'x': the policies are "
                                          "ideal, pytorch[:CONF], cuda-async and gmt-pool[:OPTIONS]" +
             try_("whatif")),
            (["whatif", "--policy", "gmt-pool:vmm,chunk=3"],
             "gpumemreport whatif: --policy gmt-pool:vmm,chunk=3: chunk=3: a mapping's most MiB, "
             "2-1024 and even" + try_("whatif")),
            (["whatif", "--requests", "some"],
             "gpumemreport whatif: --requests is auto, runtime, driver or all, not 'some'" +
             try_("whatif")),
            (["whatif", "--policy", "gmt-pool:whole,vmm"],
             "gpumemreport whatif: --policy gmt-pool:whole,vmm: whole and vmm exclude each other" +
             try_("whatif")),
            (["check", "--tolerance", "x"], "gpumemreport check: --tolerance needs a percentage "
                                            "from 0 to 10000 (e.g. 5 or 2.5), not 'x'" +
             try_("check")),
            (["html", "--markdown"], "gpumemreport html: the page is HTML: no --json or "
                                     "--markdown" + try_("html")),
            (["export", "--format", "x"], "gpumemreport export: no format 'x' (memory-viz, "
                                          "perfetto, speedscope, pprof)" + try_("export")),
            (["info", "--markdown"], "gpumemreport info: unknown option '--markdown'" +
             try_("info")),
            (["dump", "--top", "3"], "gpumemreport dump: unknown option '--top'" +
             try_("dump"))):
        p = report(*args, "missing.gmt", check_rc=2)
        expect(p.stderr.splitlines() == [want] and p.stdout == "", f"{args}: {p.stderr!r}")


def test_launcher_bad_usage_is_one_line():
    p = run([LAUNCHER, "--no-such-option", "true"], traced=False, check=False)
    expect(p.returncode == 2 and p.stderr.splitlines() ==
           ["gpumemtrace: unknown option '--no-such-option' (gpumemtrace --help for usage)"],
           f"{p.returncode}: {p.stderr!r}")


def test_flamegraph_json_is_json():
    """flamegraph --json: one object per trace, each stack's frames
    (outermost first) and bytes; the bytes add up to the peak, and the
    stacks are the folded output's."""
    run([prog("report_known")])
    t = one_trace()
    doc = json.loads(report("flamegraph", "--json", t).stdout)
    tr = doc["traces"][0]
    peak = json.loads(report("summary", "--json", t).stdout)["traces"][0]["peak_requested"]
    expect(doc["schema"] == "gpumemtrace.flamegraph/1" and tr["unit"] == "bytes" and
           tr["weight"] == "peak" and sum(s["bytes"] for s in tr["stacks"]) == peak,
           f"{doc}\npeak {peak}")
    folded = report("flamegraph", t).stdout.splitlines()
    expect([";".join(s["frames"]) + f" {s['bytes']}" for s in tr["stacks"]] == folded,
           f"{tr['stacks']}\n{folded}")
    tot = json.loads(report("flamegraph", "--json", "--total", t).stdout)["traces"][0]
    expect(tot["weight"] == "total" and
           sum(s["bytes"] for s in tot["stacks"]) > peak, f"{tot}")


def test_dump_json():
    """dump --json: every record the text dump prints, with its fields and
    its line as "text"."""
    run([prog("report_known")])
    t = one_trace()
    doc = json.loads(report("dump", "--json", t).stdout)
    text = [l for l in report("dump", t).stdout.splitlines() if re.match(r"^\d", l)]
    recs = doc["records"]
    expect(doc["schema"] == "gpumemtrace.dump/1" and len(recs) == len(text) > 10,
           f"{len(recs)} records, {len(text)} lines")
    for r, line in zip(recs, text):
        expect(line.split()[0] == str(r["seq"]) and r["text"].split("\n")[0] in line,
               f"{r}\n{line}")
    allocs = [r for r in recs if r.get("class") == "alloc"]
    n = info(t)["by_kind"]["alloc"]
    expect(len(allocs) == n and all(r["size"] > 0 and r["addr"] for r in allocs),
           f"{len(allocs)} allocs, info says {n}")
    lim = json.loads(report("dump", "--json", "--limit", "3", t).stdout)["records"]
    expect([r["seq"] for r in lim] == [r["seq"] for r in recs[:3]], f"{lim}")


def test_progress_on_a_terminal_only():
    """A long report says how far it is on stderr when that is a terminal
    (GPUMEMREPORT_PROGRESS=1: from the start, not after 2 s), rewritten in
    place and cleared; not when stderr is a file or a pipe, and not with
    GPUMEMREPORT_PROGRESS=0."""
    run([prog("gen_trace"), "300000", "big.gmt", "1"], traced=False)
    quiet = report("peak", "--no-symbols", "big.gmt")
    expect(quiet.stderr == "", f"progress without a terminal: {quiet.stderr!r}")
    env = clean_env(GPUMEMREPORT_PROGRESS="1")
    cmd = ["script", "-qec", f"{REPORT} peak --no-symbols big.gmt", "/dev/null"]

    def on_terminal():
        # bytes: the '\r's must survive
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=120)
        expect(p.returncode == 0, f"{p}")
        return p.stdout.decode()

    out = on_terminal()
    shown = re.findall(r"\rgpumemreport: reading big\.gmt: (\d+)%", out)
    expect(len(shown) >= 2 and [int(x) for x in shown] == sorted(int(x) for x in shown) and
           "\r\x1b[K" in out and "big.gmt: peak" in out.split("\r\x1b[K")[-1],
           f"{out[:500]!r}")
    env["GPUMEMREPORT_PROGRESS"] = "0"
    out = on_terminal()
    expect("reading" not in out and "big.gmt: peak" in out, f"{out[:300]!r}")


def test_output_files_are_replaced_whole_and_devices_kept():
    """html and export -o: a regular file is written beside itself and
    renamed into place (nothing half-written, no temporary left); a FIFO
    or a device (/dev/null) is written as it is and never replaced or
    removed."""
    import stat
    import threading
    run([prog("report_known")])
    t = one_trace()
    with open("page.html", "w") as f:
        f.write("old")
    report("html", "-o", "page.html", t)
    with open("page.html") as f:
        expect(f.read(200).lower().startswith("<!doctype html"), "page replaced")
    os.mkfifo("fifo")
    jobs = [["html", "-o", "fifo", t]] + [["export", "--format", f, "-o", "fifo", t]
                                          for f in ("memory-viz", "perfetto", "speedscope",
                                                    "pprof")]
    for args in jobs:
        got = []
        reader = threading.Thread(target=lambda: got.append(open("fifo", "rb").read()))
        reader.start()
        report(*args)
        reader.join(30)
        expect(got and len(got[0]) > 100 and stat.S_ISFIFO(os.stat("fifo").st_mode),
               f"{args}: {len(got[0]) if got else None} bytes through the FIFO")
    # a trace that cannot be read: an error, and the FIFO is still there
    with open("junk.gmt", "wb") as f:
        f.write(b"\0" * 4096)
    report("export", "--format", "pprof", "-o", "fifo", "junk.gmt", check_rc=2)
    expect(stat.S_ISFIFO(os.stat("fifo").st_mode), "FIFO kept")
    leftovers = [n for n in os.listdir(".") if n.startswith(("page.html.", "fifo."))]
    expect(leftovers == [], f"temporary files left: {leftovers}")
