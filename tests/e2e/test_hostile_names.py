"""Names that come from outside - the host name, command lines, library
paths, site names - are data, never terminal control, Markdown or a path:

- every command's text output of a trace whose header names a host with
  escape sequences carries no control character (ranks printed it raw);
- a site named with '|' and '<script>' (here: the path of a dlopened
  library) stays one cell of a --markdown table and never becomes HTML;
- a host name of "../../x" expanded by %h in the output pattern stays one
  file name in the pattern's directory (it wrote two levels up)."""
import os
import socket
import subprocess

from gmt import *

HOST_OFFSET = 128  # struct gmt_file_header.host (preload/gmt_format.h)
HOSTILE_HOST = b"a\x1b[31mred\x1b]0;title\x07\x9bz"


def hostile_host_trace():
    # the command line carries an escape sequence too (phases ignores it)
    run([prog("phases"), "basic", "\x1b[32mgreen"], GPUMEMTRACE_OUTPUT="t.gmt")
    data = bytearray(open("t.gmt", "rb").read())
    have = bytes(data[HOST_OFFSET:HOST_OFFSET + 64]).split(b"\0")[0]
    expect(have == socket.gethostname().encode()[:63], f"header host field moved: {have!r}")
    data[HOST_OFFSET:HOST_OFFSET + 64] = HOSTILE_HOST.ljust(64, b"\0")
    open("t.gmt", "wb").write(data)
    return "t.gmt"


def no_control(what, text):
    bad = sorted({c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0})
    expect(not bad, f"{what}: control characters {bad!r} in\n{text[-3000:]}")


def test_host_name_escapes_never_reach_the_terminal():
    t = hostile_host_trace()
    commands = [["summary"], ["peak"], ["frag"], ["timeline"], ["leaks"], ["growth"],
                ["phases"], ["transfers"], ["flamegraph"], ["info"], ["dump", "--limit", "50"],
                ["diff", t], ["check", "--max-peak", "1G"], ["whatif"], ["ranks"],
                ["summary", "--kinds-at", "peak"]]
    for args in commands:
        for fmt in ([], ["--markdown"]):
            if fmt and args[0] in ("info", "dump", "flamegraph"):
                continue
            p = subprocess.run([REPORT, *args, *fmt, t], capture_output=True, timeout=120)
            expect(p.returncode in (0, 1), f"{args + fmt}: exit {p.returncode}\n{p.stderr!r}")
            out = p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
            no_control(" ".join(args + fmt), out)
    # the host is still shown, its control bytes made visible
    out = report("ranks", t).stdout
    expect("a?[31mred?]0;title??z" in out, out)


def test_markdown_cells_escape_pipes_and_html():
    lib = "lib|<script>x.so"
    with open(os.path.join(BUILD, "tests", "libdlalloc.so"), "rb") as f:
        open(lib, "wb").write(f.read())
    run([prog("dlopen"), "./" + lib, "keep"], GPUMEMTRACE_OUTPUT="t.gmt")
    for args in (["peak"], ["summary"], ["diff", "t.gmt"], ["peak", "--group", "stack"]):
        p = report(*args, "--markdown", "t.gmt")
        rows = [ln for ln in p.stdout.splitlines() if ln.startswith("|")]
        expect(rows, f"{args}: no table\n{p.stdout}")
        width = None
        for ln in p.stdout.splitlines():
            if not ln.startswith("|"):
                width = None  # the next table
                continue
            # a cell's '|' is escaped, so every row splits into the header's columns
            cells = ln.replace("\\|", "").split("|")
            width = width or len(cells)
            expect(len(cells) == width, f"{args}: row with {len(cells)} cells, not {width}: {ln}")
        site = [ln for ln in rows if "script" in ln]
        expect(site, f"{args}: the library's site missing\n{p.stdout}")
        table = "\n".join(rows)
        expect("<script>" not in table and "&lt;script&gt;" in table and "lib\\|" in table,
               f"{args}: site not escaped\n{p.stdout}")


def with_host(host, cmd, env):
    """Run cmd in a UTS namespace whose host name is host; None if this
    machine allows no such namespace (no root, no user namespaces)."""
    setter = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
              "e = dict(os.environ); e['LD_PRELOAD'] = e.pop('GMT_LD_PRELOAD'); "
              "os.execve(sys.argv[2], sys.argv[2:], e)")
    env = dict(env)
    env["GMT_LD_PRELOAD"] = LIB
    for unshare in (["unshare", "--uts"], ["unshare", "--user", "--map-root-user", "--uts"]):
        try:
            p = subprocess.run([*unshare, "python3", "-c", setter, host, *cmd], env=env,
                               capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            return None
        if "sethostname" not in p.stderr and "unshare:" not in p.stderr:
            return p
    return None


def test_host_name_in_output_pattern_stays_one_name():
    os.makedirs("w/d")
    p = with_host("../../x", [prog("hello")], clean_env(GPUMEMTRACE_OUTPUT="w/d/%h.gmt"))
    if p is None:
        print("skipped: no UTS namespace here (unshare --uts refused) to set a host name")
        return
    expect(p.returncode == 3, f"exit {p.returncode}\n{p.stderr}")  # hello's own status
    expect(not os.path.exists("x.gmt"), "the trace escaped the pattern's directory")
    expect(os.listdir("w/d") == [".._.._x.gmt"], (os.listdir("w/d"), os.listdir(".")))
    # a host name that is all dots is no directory step either
    p = with_host("..", [prog("hello")], clean_env(GPUMEMTRACE_OUTPUT="w/d/%h/t.gmt"))
    expect(p is not None and p.returncode == 3, p and p.stderr)
    expect(not os.path.exists("w/t.gmt"), "the trace went up a directory")
