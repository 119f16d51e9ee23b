"""gpumemreport's tables against a trace with known answers
(tests/progs/report_known.c): the peak and the sites at it, leaks,
growth, transfers, flamegraph, summary, several traces, and the options
shared by all table commands."""
import json
import os

from gmt import *

MiB = 1 << 20


def known():
    p = run([prog("report_known")])
    want = dict(zip(p.stdout.split()[0::2], map(int, p.stdout.split()[1::2])))
    return one_trace(), want


def js(*args):
    return json.loads(report(*args).stdout)


def test_summary_figures():
    t, want = known()
    s = js("summary", "--json", t)["traces"][0]
    expect(s["peak_requested"] == want["peak"], f"{s['peak_requested']} != {want['peak']}")
    expect(s["leaked"] == want["leaked"] and s["leaked_allocations"] == want["leaks"], f"{s}")
    expect(s["ooms"] == 0 and s["closed"] and s["pool"], f"{s}")
    # the pool rounds nothing here (all sizes are multiples of 512)
    expect(s["peak_allocated"] == want["peak"], f"{s['peak_allocated']}")
    expect(s["peak_reserved"] >= s["peak_requested"], f"{s}")
    top = s["top_sites"]
    expect(top[0]["site"].startswith("weights (report_known.c:") and top[0]["bytes"] == 12 * MiB,
           f"{top[:2]}")
    expect(top[1]["site"].startswith("scratch (report_known.c:") and top[1]["bytes"] == 8 * MiB,
           f"{top[:3]}")
    text = report("summary", t).stdout
    expect("peak requested:  25.00 MiB" in text and "weights (report_known.c:" in text, text)


def test_lines_without_debug_aranges():
    # clang emits no .debug_aranges by default; lines must still resolve
    import shutil
    import subprocess
    shutil.copy(prog("report_known"), "rk")
    subprocess.run(["objcopy", "--remove-section=.debug_aranges", "rk"], check=True)
    sections = subprocess.run(["readelf", "-S", "rk"], capture_output=True, text=True).stdout
    expect(".debug_aranges" not in sections and ".debug_line" in sections, sections)
    run(["./rk"], LD_LIBRARY_PATH=os.path.join(BUILD, "sim"))  # its rpath is $ORIGIN/../sim
    top = js("summary", "--json", one_trace())["traces"][0]["top_sites"]
    expect(top[0]["site"].startswith("weights (report_known.c:"), f"{top[:2]}")


def test_default_command_is_summary():
    t, _ = known()
    expect(report(t).stdout == report("summary", t).stdout, "no default command")


def test_peak_sites_and_grouping():
    t, want = known()
    p = js("peak", "--json", t)["traces"][0]
    sites = {s["site"].split(" ")[0]: s for s in p["sites"]}
    expect(sites["weights"]["bytes"] == 12 * MiB and sites["weights"]["allocations"] == 3, f"{sites}")
    expect(sites["history"]["bytes"] == 20 * 256 * 1024 and sites["history"]["allocations"] == 20,
           f"{sites}")
    expect(sum(s["bytes"] for s in p["sites"]) + p["other_bytes"] == want["peak"], f"{p}")
    # grouped by whole stack, two frames deep: the caller is named
    st = js("peak", "--json", "--group", "stack", "--depth", "2", t)["traces"][0]["sites"]
    expect(any(s["site"].startswith("weights (") and " <- main (report_known.c:" in s["site"]
               for s in st), f"{st}")
    # by function: no line numbers
    fn = js("peak", "--json", "--group", "function", t)["traces"][0]["sites"]
    expect({s["site"] for s in fn} >= {"weights", "scratch", "history"}, f"{fn}")
    # --top and --bytes
    two = report("peak", "--top", "2", "--bytes", t).stdout
    expect("12582912" in two and "(1 more sites)" in two, two)


def test_leaks_by_site():
    t, want = known()
    l = js("leaks", "--json", t)["traces"][0]
    expect(l["leaked"] == want["leaked"] and l["allocations"] == 20, f"{l}")
    expect(len(l["sites"]) == 1 and l["sites"][0]["site"].startswith("history ("), f"{l}")


def test_growth_finds_the_history():
    t, _ = known()
    g = js("growth", "--json", t)["traces"][0]
    names = [s["site"].split(" ")[0] for s in g["sites"]]
    expect(names == ["history"], f"growing: {names}")
    s = g["sites"][0]
    expect(s["bytes_per_s"] > 0 and s["rise"] >= 4 * MiB and s["r2"] >= 0.8, f"{s}")


def test_no_growth_without_a_leak():
    run([prog("stacks")])
    g = js("growth", "--json", one_trace())["traces"][0]
    expect(g["growing_sites"] == 0, f"{g}")


def test_transfers_by_direction_and_memory():
    t, _ = known()
    x = js("transfers", "--json", t)["traces"][0]
    d = {(e["direction"], e["host_memory"]): e for e in x["directions"]}
    expect(d[("H2D", "pageable")]["bytes"] == 4 * MiB and d[("H2D", "pageable")]["count"] == 4, f"{d}")
    expect(d[("D2H", "pinned")]["bytes"] == MiB and d[("D2H", "pinned")]["count"] == 2, f"{d}")
    expect(x["sets"] == {"bytes": 12 * MiB, "count": 3}, f"{x['sets']}")
    expect(x["sites"][0]["site"].startswith("copies ("), f"{x['sites'][0]}")


def test_transfers_names_its_columns():
    # the count of copies is `copies` in the text's header and in the JSON
    # (docs/report-json.md), as the HTML page reads it
    t, _ = known()
    x = js("transfers", "--json", t)["traces"][0]
    for row in x["sites"]:
        expect(set(row) == {"site", "copy_bytes", "copies", "h2d_bytes", "d2h_bytes", "set_bytes",
                            "sets"}, f"{row}")
    expect(x["sites"][0]["copies"] == 4, f"{x['sites'][0]}")  # the 4 host-to-device copies
    text = report("transfers", t).stdout.splitlines()
    header = text[text.index("by site:") + 1].split()
    expect(header == ["copied", "copies", "H2D", "D2H", "set", "site"], header)


def test_flamegraph_folded_stacks():
    t, want = known()
    lines = report("flamegraph", t).stdout.splitlines()
    total = 0
    for line in lines:
        stack, n = line.rsplit(" ", 1)
        expect(";" in stack and "main" in stack.split(";"), line)
        total += int(n)
    expect(total == want["peak"], f"{total} != {want['peak']}")
    expect(lines == sorted(lines, key=lambda l: l.rsplit(" ", 1)[0]), "not in a stable order")
    tot = report("flamegraph", "--total", t).stdout
    expect(any(l.split(";")[-1].startswith("scratch ") and l.endswith(str(16 * MiB))
               for l in tot.splitlines()), tot)


def test_several_traces_and_directories():
    run([prog("report_known")])
    run([prog("stacks")])
    s = js("summary", "--json", ".")
    expect(len(s["traces"]) == 2 and s["combined"]["processes"] == 2, f"{s['combined']}")
    text = report("summary", ".").stdout
    expect("per process:" in text and "all" in text, text)


def test_symbols_off_and_missing_binaries():
    t, _ = known()
    raw = js("peak", "--json", "--no-symbols", t)["traces"][0]["sites"]
    expect(all(s["site"].startswith("report_known+0x") for s in raw), f"{raw}")


def test_usage_errors():
    t, _ = known()
    for args in (["peak", "--top", "x", t], ["peak", "--group", "file", t], ["peak"],
                 ["nosuchcommand", t], ["peak", "missing.gmt"]):
        p = report(*args, check_rc=None)
        expect(p.returncode == 2, f"{args}: exit {p.returncode}")
    h = report("help")
    for cmd in ("summary", "peak", "leaks", "growth", "transfers", "flamegraph", "info", "dump"):
        expect(cmd in h.stdout, f"help lacks {cmd}")
        expect(report(cmd, "--help").returncode == 0, cmd)


def test_markdown_tables():
    t, _ = known()
    md = report("peak", "--markdown", t).stdout.splitlines()
    expect(md[1].startswith("| bytes |") and md[2].startswith("| ---:"), "\n".join(md[:4]))
    # nothing rounded (sizes are multiples of 512): no allocated column
    expect(md[1] == "| bytes | share | allocations | site |", md[1])


def test_peak_without_rounding_keeps_its_columns():
    """report_known's blocks are as big as its requests: the tables of
    sites at the peak keep their four columns (an `allocated` column
    appears only where rounding made a site's blocks bigger), while the
    JSON has `allocated` always."""
    t, _ = known()
    text = report("peak", t).stdout.splitlines()
    expect(text[1].split() == ["bytes", "share", "allocations", "site"], text[:3])
    expect(text[2].split()[:3] == ["12.00", "MiB", "48.0%"], text[:3])
    s = report("summary", t).stdout
    tail = s[s.index("top sites at the peak:"):].splitlines()
    expect(tail[1].split() == ["bytes", "share", "allocations", "site"], tail[:3])
    p = js("peak", "--json", t)["traces"][0]
    expect(all(x["allocated"] == x["bytes"] for x in p["sites"]), p["sites"])
    expect(p["other_allocated"] == p["other_bytes"], p)
    top = js("summary", "--json", t)["traces"][0]["top_sites"]
    expect(all(x["allocated"] == x["bytes"] for x in top), top)


def test_module_path_naming_a_fifo_does_not_hang():
    # a trace is untrusted; one whose module path names
    # a FIFO made symbolization block in open() forever. Trace a copy of a
    # program, then put a FIFO where the copy was: every command must end.
    import shutil
    import subprocess
    # beside the original, so that it finds the simulated runtime
    known = prog(f"known_fifo_{os.getpid()}")
    shutil.copy(prog("report_known"), known)
    try:
        run([known], GPUMEMTRACE_OUTPUT="k.gmt")
        os.unlink(known)
        os.mkfifo(known)
        for cmd in ("summary", "peak", "leaks", "flamegraph"):
            try:
                p = subprocess.run([REPORT, cmd, "k.gmt"], capture_output=True, text=True,
                                   timeout=20)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"gpumemreport {cmd} hung on a module path that is a FIFO")
            expect(p.returncode == 0, (cmd, p.returncode, p.stderr))
        # the sites are still there, named by module and offset
        out = report("peak", "k.gmt").stdout
        expect(f"known_fifo_{os.getpid()}+0x" in out, out)
    finally:
        if os.path.lexists(known):
            os.unlink(known)
