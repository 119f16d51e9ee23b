"""Helpers for the end-to-end tests: run test programs under the real
LD_PRELOAD path against the simulated CUDA runtime, and read the traces
back with gpumemreport."""
import glob
import json
import os
import subprocess

BUILD = os.environ.get("GMT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LIB = os.path.join(BUILD, "libgpumemtrace.so")
# `make asan`: the library built with ASan and UBSan, preloaded after the
# sanitizer runtime (which must come first), in the tests that preload the
# library through run(); a sanitizer report fails the test (exit status,
# stderr)
SANITIZED = os.environ.get("GMT_SANITIZED_PRELOAD")
REPORT = os.path.join(BUILD, "gpumemreport")


def prog(name):
    return os.path.join(BUILD, "tests", name)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")}
    env.pop("LD_PRELOAD", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, traced=True, env=None, timeout=300, check=True, **extra_env):
    e = clean_env(**extra_env) if env is None else env
    if traced:
        e["LD_PRELOAD"] = SANITIZED or LIB
        if SANITIZED:
            # the programs' own signals stay theirs (tests kill with SIGSEGV,
            # the library handles SIGBUS on its mappings)
            e.setdefault("ASAN_OPTIONS", "detect_leaks=0:handle_segv=0:handle_sigbus=0:"
                         "allow_user_segv_handler=1")
            e.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
            if "LD_LIBRARY_PATH" not in e:
                # ASan's dlopen is the caller glibc sees: the program's
                # RUNPATH no longer finds the simulated driver
                e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "sim")
                e.setdefault("SIM_NVML", "off")  # found there too
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def traces(directory="."):
    return sorted(glob.glob(os.path.join(directory, "*.gmt*")))


def one_trace(directory="."):
    t = traces(directory)
    assert len(t) == 1, f"expected one trace, found {t}"
    return t[0]


def report(*args, check_rc=0, timeout=120):
    p = subprocess.run([REPORT, *args], capture_output=True, text=True, timeout=timeout)
    if check_rc is not None and p.returncode != check_rc:
        raise AssertionError(f"gpumemreport {args} exited {p.returncode}, wanted {check_rc}\n"
                             f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr}")
    return p


def info(path):
    return json.loads(report("info", "--json", path).stdout)[0]


def dump(path, *args):
    return report("dump", *args, path).stdout.splitlines()


def site_lines(path):
    """name -> line number of a test program's "# SITE name" comments."""
    import re
    lines = {}
    with open(path) as f:
        for no, text in enumerate(f, 1):
            m = re.search(r"# SITE (\w+)", text)
            if m:
                lines[m.group(1)] = no
    return lines


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


POOL_KINDS = {"segment_alloc", "segment_free", "free_completed", "sample", "oom_state"}


def program_kinds(got):
    """by_kind of an info --json object without what the pool adds."""
    return {k: v for k, v in got["by_kind"].items() if v and k not in POOL_KINDS}
