"""Every intercepted entry point is recorded, once per call, and tracing
changes nothing the program can observe."""
import os

from gmt import *


def test_every_call_counted():
    p = run([prog("calls")])
    assert p.stdout.strip().endswith("ok"), p.stdout + p.stderr
    want_api, want_kind = {}, {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "api":
            want_api[parts[1]] = int(parts[2])
        elif len(parts) == 3 and parts[0] == "kind":
            want_kind[parts[1]] = int(parts[2])
    got = info(one_trace())
    by_kind = program_kinds(got)
    expect(by_kind == want_kind, f"kinds: trace {by_kind}\n        program {want_kind}")
    expect(got["by_api"] == want_api, f"apis: trace {got['by_api']}\n       program {want_api}")
    expect(got["closed"], "trace not closed at exit")
    expect(len(got["devices"]) == 1 and got["devices"][0]["name"] == "gpumemtrace simulated device",
           f"devices: {got['devices']}")
    expect(len(want_api) >= 45, f"only {len(want_api)} entry points exercised")


def test_output_and_exit_status_unchanged():
    plain = run([prog("hello"), "a b", "c"], traced=False, check=False)
    traced = run([prog("hello"), "a b", "c"], check=False)
    expect(plain.returncode == 3 and traced.returncode == 3, "exit status changed")
    expect(plain.stdout == traced.stdout, f"stdout changed:\n{plain.stdout}\n{traced.stdout}")
    expect(plain.stderr == traced.stderr, f"stderr changed:\n{plain.stderr}\n{traced.stderr}")
    expect(len(traces()) == 1, "no trace written")


def test_process_without_cuda_costs_nothing():
    p = run(["sh", "-c", "echo hello; ls / >/dev/null; env | grep -c GPUMEMTRACE || true"])
    expect(p.stdout == "hello\n0\n", f"output changed: {p.stdout!r}")
    expect(p.stderr == "", f"stderr: {p.stderr!r}")
    expect(traces() == [], f"trace files from a process without CUDA: {traces()}")


def test_error_state_preserved():
    p = run([prog("errstate")])
    expect(p.stdout.strip() == "ok", p.stdout + p.stderr)
    got = info(one_trace())
    expect(got["failed_calls"] == 1, f"the failed cudaFree should be recorded: {got}")


def test_disable_option():
    p = run([prog("hello")], check=False, GPUMEMTRACE_DISABLE="1")
    expect(p.returncode == 3 and traces() == [], "GPUMEMTRACE_DISABLE=1 still traced")


def test_bad_option_warns_and_keeps_default():
    p = run([prog("stacks")], GPUMEMTRACE_STACK_DEPTH="lots", GPUMEMTRACE_HOSTMEM="maybe")
    expect("GPUMEMTRACE_STACK_DEPTH=lots" in p.stderr and "keeping 64" in p.stderr, p.stderr)
    expect("GPUMEMTRACE_HOSTMEM=maybe" in p.stderr, p.stderr)
    expect(p.stderr.count("\n") == 2, f"one line per bad option: {p.stderr!r}")
    expect(info(one_trace())["stacks"] > 0, "default stack depth not kept")


def test_output_pattern():
    run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="run-%h-%p-%%.gmt")
    t = traces()
    expect(len(t) == 1, f"{t}")
    host = os.uname().nodename
    name = os.path.basename(t[0])
    expect(name.startswith(f"run-{host}-") and name.endswith("-%.gmt"), name)
    pid = int(name[len(f"run-{host}-"):-len("-%.gmt")])
    expect(info(t[0])["pid"] == pid, "pid in name and header differ")


def test_calls_before_main_and_during_exit():
    p = run([prog("lifecycle")])
    expect(p.stdout == "ok\n" and p.stderr == "", p.stdout + p.stderr)
    got = info(one_trace())
    expect(got["by_api"] == {"cudaMalloc": 2, "cudaFree": 2}, f"{got['by_api']}")
