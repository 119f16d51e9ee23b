"""The PyTorch bridge's build and cache (preload/fw_build.c, fw_cache.c,
fw_spawn.c) against the PyTorch stand-in (see test_framework.py), with
fake compilers - shell scripts that hang, fail, count their runs or record
their environment, given as GPUMEMTRACE_CXX - and damaged cache files.

What must hold: a damaged cached bridge is built again, never loaded; a
build never holds up the program's signals and leaves nothing behind
when the program is signalled or killed; a failed build is remembered and
not repeated by every process; nothing in the program's environment but
what the cache key holds reaches the compiler; odd paths (commas, a
linked home) work.
"""
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

from gmt import *
from test_framework import APP, STANDIN, TORCH, run_app, records, torch_allocs, bridge_sos, notes

CXX = shutil.which(os.environ.get("CXX", "c++"))
SEAL = b"GMTSEAL1"  # fw_cache.c's seal: magic, size and FNV-1a hash of what precedes it


def script(name, body):
    path = os.path.abspath(name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


def lines(path):
    return open(path).read().split() if os.path.exists(path) else []


def wait_for(cond, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def alive(pid):
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False


def start(args, cache="bridge-cache", out="t.gmt", log="app.err", **env):
    """The app (args: the command line) traced, in the background; its
    output in files (a killed program's pipes must not hold the test)."""
    if not os.path.isdir(cache):
        os.mkdir(cache, 0o700)
    e = clean_env(SIM_TORCH_LIB=STANDIN, GMT_BUILD=BUILD, GPUMEMTRACE_OUTPUT=out,
                  GPUMEMTRACE_CACHE=os.path.abspath(cache), **env)
    e["LD_PRELOAD"] = SANITIZED or LIB
    if SANITIZED:  # as gmt.run does: the same environment, so the same bridge key
        e.setdefault("ASAN_OPTIONS", "detect_leaks=0:handle_segv=0:handle_sigbus=0:"
                     "allow_user_segv_handler=1")
        e.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        if "LD_LIBRARY_PATH" not in e:
            e["LD_LIBRARY_PATH"] = os.path.join(BUILD, "sim")
            e.setdefault("SIM_NVML", "off")
    with open(log, "w") as err:
        return subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL, stderr=err)


def build_dirs(cache):
    return [f for f in os.listdir(cache) if f.startswith("build-")]


def hang_compiler():
    """A compiler that writes its pid and hangs (exec: the pid is the sleep's)."""
    pids = os.path.abspath("compiler.pids")
    return script("hang-c++", f"echo $$ >> {pids}\nexec sleep 300\n"), pids


def kill_all(pids):
    for pid in lines(pids):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def seal(data):
    return data + struct.pack("<8sQQ", SEAL, len(data), fnv1a64(data))


def replace(path, data):
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o500)


# ---- the cache's files ---------------------------------------------------------

def test_bridge_damaged_cache_is_rebuilt():
    # A cached bridge cut short (a synced or copied home, a crash before it
    # reached the disk) or with zeros where its bytes were: dlopen would
    # map it past its end (SIGBUS) or run garbage. Each is refused, said,
    # built again whole, and the program runs traced as with a good one.
    run_app(traced=True, out="first.gmt")
    so = os.path.join("bridge-cache", bridge_sos("bridge-cache")[0])
    good = open(so, "rb").read()
    n = len(good)
    cuts = [n // 2, n // 4, 3 * n // 4, n // 8, n - 4096, n - 1, 64, 0]
    damages = [(f"cut at {c} of {n}", good[:c]) for c in cuts]
    damages.append(("second half zeroed", good[:n // 2] + bytes(n - n // 2)))
    for i, (what, data) in enumerate(damages):
        replace(so, data)
        p, r = run_app(traced=True, out=f"d{i}.gmt", check=False)
        expect(p.returncode == 0, f"{what}: exit {p.returncode}\n{p.stderr}")
        expect(torch_allocs(records(f"d{i}.gmt")), f"{what}: not attached\n{p.stderr}")
        said = [l for l in p.stderr.splitlines() if "refused" in l]
        expect(len(said) == 1 and "building it again" in said[0], f"{what}:\n{p.stderr}")
        expect(any("refused" in x and "built again" in x for x in notes(f"d{i}.gmt")),
               f"{what}: {notes(f'd{i}.gmt')}")
        now = open(so, "rb").read()
        expect(now[-24:-16] == SEAL and len(now) > n // 2, f"{what}: {len(now)} bytes")


def test_bridge_stale_entry_point_rebuilt():
    # A sealed cached file that loads but has no entry point (stale), and
    # cannot be unloaded (-z nodelete, as C++ objects often are): the
    # rebuilt bridge must be the one used, not the old handle by its name.
    run_app(traced=True, out="first.gmt")
    so = os.path.join("bridge-cache", bridge_sos("bridge-cache")[0])
    with open("stub.cpp", "w") as f:
        f.write('extern "C" int gmt_stale_bridge = 1;\n')
    c = subprocess.run([CXX, "-shared", "-fPIC", "-Wl,-z,nodelete", "stub.cpp", "-o", "stub.so"],
                       capture_output=True, text=True, timeout=120)
    expect(c.returncode == 0, c.stderr)
    replace(so, seal(open("stub.so", "rb").read()))
    p, r = run_app(traced=True, out="stale.gmt")
    expect("gmt_fw_torch_attach" in p.stderr and "building it again" in p.stderr, p.stderr)
    n = len([a for a in torch_allocs(records("stale.gmt")) if not a.failed()])
    expect(n == r["allocs"], f"{n} torch_block allocs, the allocator {r['allocs']}\n{p.stderr}")


def test_bridge_cache_under_a_linked_home():
    # /home -> /gpfs/home, as on many clusters: the directories above the
    # cache are resolved before they are checked, not refused as links
    for d in ("gpfs-home", "gpfs-home/user", "gpfs-home/user/.cache"):
        os.mkdir(d, 0o700)
    os.symlink(os.path.abspath("gpfs-home"), "home")
    cache = os.path.join(os.path.abspath("home"), "user", ".cache", "gpumemtrace")
    p, r = run_app(traced=True, cache=cache, out="a.gmt")
    expect(torch_allocs(records("a.gmt")), p.stderr)
    expect(len(bridge_sos("gpfs-home/user/.cache/gpumemtrace")) == 1,
           os.listdir("gpfs-home/user/.cache/gpumemtrace"))
    p, r = run_app(traced=True, cache=cache, out="b.gmt")
    expect("building" not in p.stderr and torch_allocs(records("b.gmt")), p.stderr)


def test_bridge_paths_with_commas():
    # PyTorch under a directory whose name has commas: the rpath reaches
    # the linker whole (-Wl, would split it into flags: here -z execstack
    # and an input file), so the bridge builds, runs PyTorch's path and has
    # no executable stack
    root = os.path.abspath("t,-z,execstack,x")
    shutil.copytree(TORCH, root, symlinks=True)
    lib = os.path.join(root, "lib")
    p, r = run_app(traced=True, SIM_TORCH_LIB=os.path.join(lib, "libc10_cuda.so"),
                   LD_LIBRARY_PATH=os.path.join(BUILD, "sim"), SIM_NVML="off")
    expect(torch_allocs(records("t.gmt")), p.stderr)
    so = os.path.join("bridge-cache", bridge_sos("bridge-cache")[0])
    dyn = subprocess.run(["readelf", "-dW", so], capture_output=True, text=True).stdout
    expect(f"[{lib}]" in dyn, dyn)
    phdrs = subprocess.run(["readelf", "-lW", so], capture_output=True, text=True).stdout
    stack = [l for l in phdrs.splitlines() if "GNU_STACK" in l]
    expect(stack and "RWE" not in stack[0], stack)


# ---- what reaches the compiler ---------------------------------------------------

EVIL = r"""#pragma once
#include_next <cstdio>
#include <cstdlib>
__attribute__((constructor)) static void gmt_test_injected() {
    std::FILE *f = std::fopen("%s", "a");
    if (f) { const char *t = std::getenv("EVIL_TAG"); std::fprintf(f, "%%s\n", t ? t : "?"); std::fclose(f); }
}
"""


def test_bridge_compiler_environment_is_clean():
    # A header put in through CPLUS_INCLUDE_PATH or CPATH in one run must
    # never run in the program, and above all not in later clean runs
    # loading the cached bridge: the compiler does not get these variables.
    mark = os.path.abspath("injected.mark")
    os.mkdir("evil")
    with open("evil/cstdio", "w") as f:
        f.write(EVIL % mark)
    for var in ("CPLUS_INCLUDE_PATH", "CPATH"):
        cache = f"cache-{var}"
        run_app(traced=True, cache=cache, out=f"{var}-1.gmt", EVIL_TAG="poisoned",
                **{var: os.path.abspath("evil")})
        p, r = run_app(traced=True, cache=cache, out=f"{var}-2.gmt", EVIL_TAG="clean")
        expect(torch_allocs(records(f"{var}-2.gmt")), p.stderr)
        expect(not lines(mark), f"{var}: the injected constructor ran in {lines(mark)}")
    # what the compiler sees of the rest
    seen = os.path.abspath("compiler.env")
    wrapper = script("env-c++", f'env > {seen}\nexec {CXX} "$@"\n')
    evil = os.path.abspath("evil")
    poison = dict(CPLUS_INCLUDE_PATH=evil, CPATH=evil, C_INCLUDE_PATH=evil, LIBRARY_PATH=evil,
                  GCC_EXEC_PREFIX=evil + "/", COMPILER_PATH=evil, LD_RUN_PATH=evil)
    p, r = run_app(traced=True, cache="cache-env", out="env.gmt", GPUMEMTRACE_CXX=wrapper, **poison)
    expect(torch_allocs(records("env.gmt")), p.stderr)
    names = {l.split("=", 1)[0] for l in open(seen).read().splitlines() if "=" in l}
    expect(not names & set(poison), f"the compiler got {sorted(names & set(poison))}")


def test_bridge_key_holds_the_resolved_compiler():
    # c++ on PATH is a link that now names another compiler (update-
    # alternatives, a module switch): a new key, a new build by the new one
    used = os.path.abspath("used")
    for name in ("a", "b"):
        script(f"cxx-{name}", f'echo {name} >> {used}\nexec {CXX} "$@"\n')
    os.mkdir("bin")
    os.symlink(os.path.abspath("cxx-a"), "bin/c++")
    path = os.path.abspath("bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    run_app(traced=True, out="a.gmt", PATH=path)
    os.unlink("bin/c++")
    os.symlink(os.path.abspath("cxx-b"), "bin/c++")
    p, r = run_app(traced=True, out="b.gmt", PATH=path)
    expect(lines(used) == ["a", "b"], f"builds by {lines(used)}\n{p.stderr}")
    expect(torch_allocs(records("b.gmt")) and len(bridge_sos("bridge-cache")) == 2,
           os.listdir("bridge-cache"))


# ---- failures, signals, deaths ------------------------------------------------------

def test_bridge_failed_build_is_remembered():
    # A compiler that fails after a second: four processes at once build
    # once (the others wait for it and take its failure), a later process
    # does not build at all, and the failure is kept with its log. Removing
    # the marker lets the next process try again.
    counter = os.path.abspath("builds")
    cxx = script("failing-c++", f'echo run >> {counter}\nsleep 1\n'
                 'echo "fake compiler: no luck" >&2\nexit 1\n')
    procs = [start([sys.executable, APP], out=f"r{i}.gmt", log=f"r{i}.err", GPUMEMTRACE_CXX=cxx)
             for i in range(4)]
    for p in procs:
        p.wait(timeout=120)
    expect(all(p.returncode == 0 for p in procs), [p.returncode for p in procs])
    expect(len(lines(counter)) == 1, f"{len(lines(counter))} builds for 4 processes")
    markers = [f for f in os.listdir("bridge-cache") if f.endswith(".failed")]
    logs = [f for f in os.listdir("bridge-cache") if f.endswith(".log")]
    expect(len(markers) == 1 and len(logs) == 1, os.listdir("bridge-cache"))
    expect("no luck" in open(os.path.join("bridge-cache", logs[0])).read(), logs)
    for i in range(4):
        err = open(f"r{i}.err").read()
        warn = [l for l in err.splitlines() if "warning" in l]
        expect(len(warn) == 1 and logs[0] in warn[0], err)
    p, r = run_app(traced=True, out="later.gmt", GPUMEMTRACE_CXX=cxx)
    expect(len(lines(counter)) == 1 and "building" not in p.stderr, p.stderr)
    expect(markers[0] in p.stderr and logs[0] in p.stderr, p.stderr)
    os.unlink(os.path.join("bridge-cache", markers[0]))
    run_app(traced=True, out="retry.gmt", GPUMEMTRACE_CXX=cxx)
    expect(len(lines(counter)) == 2, lines(counter))


SIGNALLED = """import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def test_bridge_build_abandoned_when_signalled():
    # A compiler that hangs, and the program gets SIGTERM (default: it
    # dies of it) or SIGINT (Python's KeyboardInterrupt): it acts on it at
    # once, as untraced, and the compiler is gone, its build directory too,
    # and no failure is remembered (the build did not fail).
    cxx, pids = hang_compiler()
    with open("signalled.py", "w") as f:
        f.write(SIGNALLED)
    try:
        for k, sig in enumerate((signal.SIGTERM, signal.SIGINT)):
            p = start([sys.executable, "signalled.py", APP], out=f"s{k}.gmt", log=f"s{k}.err",
                      GPUMEMTRACE_CXX=cxx)
            expect(wait_for(lambda: len(lines(pids)) == k + 1, 60), open(f"s{k}.err").read())
            compiler = int(lines(pids)[k])
            p.send_signal(sig)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise AssertionError(f"{sig.name}: the program still ran 10 s later")
            err = open(f"s{k}.err").read()
            if sig == signal.SIGTERM:
                expect(p.returncode == -signal.SIGTERM, f"exit {p.returncode}\n{err}")
            else:
                expect(p.returncode != 0 and "KeyboardInterrupt" in err, f"exit {p.returncode}\n{err}")
            expect(wait_for(lambda: not alive(compiler), 5), f"{sig.name}: the compiler runs on")
            expect(not build_dirs("bridge-cache"), os.listdir("bridge-cache"))
            expect(not [f for f in os.listdir("bridge-cache") if f.endswith(".failed")],
                   os.listdir("bridge-cache"))
    finally:
        kill_all(pids)


def test_bridge_killed_build_leaves_nothing():
    # The program killed (SIGKILL) during its first build: its compiler
    # does not run on, and no build directory stays in the cache.
    cxx, pids = hang_compiler()
    try:
        p = start([sys.executable, APP], GPUMEMTRACE_CXX=cxx)
        expect(wait_for(lambda: lines(pids), 60), open("app.err").read())
        compiler = int(lines(pids)[0])
        p.kill()
        p.wait(timeout=10)
        expect(wait_for(lambda: not alive(compiler), 10), "the compiler runs on")
        expect(wait_for(lambda: not build_dirs("bridge-cache"), 10), os.listdir("bridge-cache"))
    finally:
        kill_all(pids)
