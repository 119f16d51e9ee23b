"""Every report command under AddressSanitizer and UndefinedBehaviorSanitizer
(build/tests/gpumemreport-san) on ordinary traces of the test programs:
any sanitizer report fails the test (UBSan once flagged cmd_phases.c
on ordinary traces). Hostile traces are the fuzzers' part."""
import os
import subprocess
import sys

from gmt import *

SAN = os.path.join(BUILD, "tests", "gpumemreport-san")
COMMANDS = [["summary"], ["summary", "--json"], ["peak"], ["peak", "--group", "stack"],
            ["peak", "--markdown"], ["peak", "--layers"], ["peak", "--json"], ["leaks"],
            ["leaks", "--layers", "--json"], ["growth"], ["growth", "--json"], ["timeline"], ["timeline", "--csv"],
            ["transfers"], ["frag"], ["frag", "--json"], ["flamegraph"], ["phases"],
            ["phases", "--occurrences"], ["phases", "--json"], ["info"], ["info", "--json"],
            ["ranks"], ["ranks", "--json"], ["flamegraph", "--json"], ["html"]]
# the commands that read one trace, run on each
ONE = [["dump"], ["dump", "--json"]] + [["export", "--format", f] for f in
                                        ("memory-viz", "perfetto", "speedscope", "pprof")]


def traces_of_programs():
    out = []
    for name, args in (("phases", []), ("report_known", []), ("frag", []), ("calls", [])):
        t = f"{name}.gmt"
        run([prog(name), *args], check=False, GPUMEMTRACE_OUTPUT=t)
        if os.path.exists(t):
            out.append(t)
    # PyTorch's blocks through the bridge, with the stand-in
    here = os.path.dirname(os.path.abspath(__file__))
    os.mkdir("cache", 0o700)
    run([sys.executable, os.path.join(here, "py", "torch_app.py"), "--lib",
         os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so"), "--record-stream"],
        check=False, GPUMEMTRACE_OUTPUT="torch.gmt", GPUMEMTRACE_CACHE=os.path.abspath("cache"))
    if os.path.exists("torch.gmt"):
        out.append("torch.gmt")
    # the report's names, layers, kinds and steps: a training loop and the
    # ops and autograd engine over the stand-in
    for app in ("train_app.py", "ops_app.py", "model_leak_app.py"):
        t = app.replace(".py", ".gmt")
        run([sys.executable, os.path.join(here, "py", app)], check=False, GPUMEMTRACE_OUTPUT=t,
            GPUMEMTRACE_CACHE=os.path.abspath("cache"), GMT_BUILD=BUILD,
            SIM_TORCH_LIB=os.path.join(BUILD, "tests", "torch", "lib", "libc10_cuda.so"))
        if os.path.exists(t):
            out.append(t)
    return out


def test_every_command_clean_under_sanitizers():
    expect(os.access(SAN, os.X_OK), f"{SAN} not built")
    ts = traces_of_programs()
    expect(len(ts) >= 8, f"traces: {ts}")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    bad = []
    one = [["diff", ts[0], ts[1]]] + [c + [t] for c in ONE for t in ts]
    for cmd in COMMANDS + [["check", "--max-peak", "1G"]] + one:
        args = [SAN, *cmd] + ([] if cmd in one else ts)
        p = subprocess.run(args, capture_output=True, env=env, timeout=120)
        err = p.stderr.decode(errors="replace")
        if p.returncode not in (0, 1) or "runtime error" in err or "Sanitizer" in err:
            bad.append((cmd, p.returncode, err[-800:]))
    expect(not bad, bad)
