"""The gpumemtrace launcher: the environment it gives the command
(LD_PRELOAD, options, session, framework allocators, NVTX), the command's
arguments and exit status passed through unchanged, signals forwarded, the
traces of every process of the run listed at exit, rank-aware names, and
its usage errors. The command is tests/progs/launched.c unless said."""
import os
import pty
import re
import select
import shutil
import signal
import subprocess

from gmt import *

LAUNCHER = os.path.join(BUILD, "gpumemtrace")
LIB_ABS = os.path.realpath(LIB)
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
             "LOCAL_RANK")
FRAMEWORK_VARS = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "XLA_PYTHON_CLIENT_ALLOCATOR",
                  "NVTX_INJECTION64_PATH")


def lenv(**extra):
    """The test's environment without anything the launcher would react to."""
    e = clean_env()
    for k in RANK_VARS + FRAMEWORK_VARS:
        e.pop(k, None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def launch(*args, env=None, rc=0, timeout=120):
    p = subprocess.run([LAUNCHER, *args], capture_output=True, text=True,
                       timeout=timeout, env=lenv() if env is None else env)
    if rc is not None and p.returncode != rc:
        raise AssertionError(f"gpumemtrace {args} exited {p.returncode}, wanted {rc}\n"
                             f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def child_env(p):
    """The "env NAME" lines the command printed, as a dict (None: unset)."""
    out = {}
    for line in p.stdout.splitlines():
        m = re.match(r"env (\w+)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
        m = re.match(r"env (\w+) unset$", line)
        if m:
            out[m.group(1)] = None
    return out


def show_env(*names):
    args = []
    for n in names:
        args += ["env", n]
    return args


def trace_lines(stderr):
    return [l for l in stderr.splitlines() if re.match(r"gpumemtrace: \S+\.gmt\S*  pid ", l)]


# ---- exit status and arguments ------------------------------------------------

def test_exit_codes_pass_through():
    p = launch(prog("hello"), rc=3)  # exits 3 after its CUDA calls
    expect(p.stdout.startswith("hello from ") and "to stderr" in p.stderr, p)
    launch(prog("launched"), "exit", "0", rc=0)
    launch(prog("launched"), "alloc", "4096", "exit", "42", rc=42)


def test_command_not_found_127_not_executable_126():
    p = launch("gmt-no-such-command", rc=127)
    lines = p.stderr.splitlines()
    expect(lines == ["gpumemtrace: gmt-no-such-command: command not found"], lines)
    with open("script.sh", "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod("script.sh", 0o644)  # not executable
    p = launch("./script.sh", rc=126)
    expect(len(p.stderr.splitlines()) == 1 and "Permission denied" in p.stderr, p.stderr)
    expect(traces() == [], traces())


def test_killed_by_signal_same_status():
    p = launch(prog("launched"), "alloc", "1048576", "kill", str(int(signal.SIGTERM)),
               rc=-signal.SIGTERM)
    # the summary is printed before the launcher re-raises the signal
    lines = trace_lines(p.stderr)
    expect(len(lines) == 1 and "peak 1.00 MiB requested" in lines[0] and "cut short" in lines[0],
           p.stderr)


def test_signal_sent_to_launcher_is_forwarded():
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        proc = subprocess.Popen([LAUNCHER, prog("launched"), "wait"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=lenv())
        try:
            ready = proc.stdout.readline()
            expect(ready == "ready\n", ready)
            proc.send_signal(sig)  # to the launcher only, not its group
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                kill_launcher(proc.pid)
                proc.wait()
        expect(out == f"got {int(sig)}\n", (out, err))
        expect(proc.returncode == 40 + sig, (proc.returncode, err))


def kill_launcher(pid):
    """After a failure: end the launcher and its command, so that the
    suite goes on (the command may have left the launcher's group)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    for k in kids + [pid]:
        try:
            os.kill(k, signal.SIGKILL)
        except OSError:
            pass


def on_terminal(actions, before_ctrl_c=None, after_ctrl_c=None):
    """Run the launcher as the leader of a session on a new terminal, press
    Ctrl-C once the command is ready: before_ctrl_c(launcher pid) just
    before, after_ctrl_c(launcher pid) once the command said "got 2".
    Returns the launcher's wait status and what the terminal showed."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            # as a shell starts a foreground command: a runner started with
            # Ctrl-C ignored (a background job of a script) would hand that
            # on, and the launcher rightly leaves an ignored signal alone
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGQUIT, signal.SIG_DFL)
            os.execve(LAUNCHER, [LAUNCHER, prog("launched"), "alloc", "512", *actions],
                      lenv())
        finally:
            os._exit(99)
    out, pressed, called = b"", False, False
    try:
        while True:
            if b"ready" in out and not pressed:
                if before_ctrl_c:
                    before_ctrl_c(pid)
                os.write(fd, b"\x03")  # the terminal's interrupt character
                pressed = True
            if b"got 2" in out and after_ctrl_c and not called:
                after_ctrl_c(pid)
                called = True
            r, _, _ = select.select([fd], [], [], 60)
            expect(r, f"no output for 60 s: {out}")
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: every process has left the terminal
                break
            if not chunk:
                break
            out += chunk
    except BaseException:
        kill_launcher(pid)
        raise
    finally:
        _, st = os.waitpid(pid, 0)
        os.close(fd)
    return st, out.decode(errors="replace")


def stop(pid):
    """SIGSTOP pid and wait until it is stopped."""
    os.kill(pid, signal.SIGSTOP)
    for _ in range(60000):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        select.select([], [], [], 0.001)
    raise AssertionError(f"{pid} did not stop")


def test_ctrl_c_reaches_the_command_once():
    # The terminal signals the whole foreground group, the launcher and the
    # command alike: the launcher must not send the command a second one.
    # The launcher is stopped while Ctrl-C is pressed, so its SIGINT waits
    # until the command has handled its own (no merging of the two); then
    # it continues, and a SIGUSR1 sent to it is forwarded after any SIGINT
    # it would forward (lower signal numbers are delivered first).
    def resume(pid):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGUSR1)

    st, text = on_terminal(["count"], stop, resume)
    expect("ints 1" in text and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 41, (st, text))
    # a command that dies of the Ctrl-C: so does the launcher, after its summary
    st, text = on_terminal(["pause"])
    expect(os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGINT, (st, text))
    expect(re.search(r"gpumemtrace: ./gpumemtrace\.\d+\.gmt  pid \d+ ", text), text)


def test_ctrl_c_forwarded_to_a_command_in_its_own_group():
    # out of the terminal's reach, the command gets Ctrl-C from the launcher
    st, text = on_terminal(["setsid", "count"], None,
                           lambda pid: os.kill(pid, signal.SIGUSR1))
    expect("ints 1" in text and os.WIFEXITED(st) and os.WEXITSTATUS(st) == 41, (st, text))


def test_arguments_arrive_intact():
    args = ["a b", "", "'single'", '"double"', "$HOME", "*", "-o", "--", "tab\tnew\nline",
            "back\\slash", "é"]
    p = launch("--", prog("launched"), "argv", *args)
    got = [bytes.fromhex(l.split(" ")[2]).decode() if len(l.split(" ")) > 2 else ""
           for l in p.stdout.splitlines()]
    expect(got == args, f"{got} != {args}")
    # options after the command belong to the command
    p = launch(prog("launched"), "argv", "--report", "-q")
    expect(p.stdout.splitlines() == ["argv 0 " + b"--report".hex(), "argv 1 " + b"-q".hex()],
           p.stdout)


# ---- the environment ------------------------------------------------------------

def test_ld_preload_prepended_not_duplicated():
    p = launch(prog("launched"), *show_env("LD_PRELOAD"), env=lenv(LD_PRELOAD="libm.so.6"))
    expect(child_env(p)["LD_PRELOAD"] == LIB_ABS + ":libm.so.6", p.stdout)
    p = launch(prog("launched"), *show_env("LD_PRELOAD"),
               env=lenv(LD_PRELOAD=f"libm.so.6 {LIB_ABS}"))
    expect(child_env(p)["LD_PRELOAD"] == LIB_ABS + ":libm.so.6", p.stdout)
    p = launch(prog("launched"), *show_env("LD_PRELOAD"))
    expect(child_env(p)["LD_PRELOAD"] == LIB_ABS, p.stdout)


def test_framework_allocators_left_alone_by_default():
    names = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "XLA_PYTHON_CLIENT_ALLOCATOR",
             "GPUMEMTRACE_FORCED_ALLOCATOR", "GPUMEMTRACE_POOL")
    for flags in ([], ["--keep-framework-allocator"]):
        got = child_env(launch(*flags, prog("launched"), *show_env(*names)))
        expect(got == {"PYTORCH_NO_CUDA_MEMORY_CACHING": None,
                       "XLA_PYTHON_CLIENT_ALLOCATOR": None,
                       "GPUMEMTRACE_FORCED_ALLOCATOR": None,
                       "GPUMEMTRACE_POOL": None}, (flags, got))


def test_framework_caches_turned_off_on_request():
    names = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "XLA_PYTHON_CLIENT_ALLOCATOR",
             "GPUMEMTRACE_FORCED_ALLOCATOR", "GPUMEMTRACE_POOL")
    got = child_env(launch("--no-framework-cache", prog("launched"), *show_env(*names)))
    expect(got == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                   "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
                   "GPUMEMTRACE_FORCED_ALLOCATOR": "pytorch,jax",
                   "GPUMEMTRACE_POOL": None}, got)
    # a value the user set is kept, said once, and not listed as forced
    p = launch("--no-framework-cache", prog("launched"), *show_env(*names),
               env=lenv(PYTORCH_NO_CUDA_MEMORY_CACHING="0"))
    got = child_env(p)
    expect(got["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "0" and
           got["GPUMEMTRACE_FORCED_ALLOCATOR"] == "jax", got)
    expect(p.stderr.count("kept PYTORCH_NO_CUDA_MEMORY_CACHING=0") == 1, p.stderr)
    # the later flag wins
    got = child_env(launch("--no-framework-cache", "--keep-framework-allocator",
                           prog("launched"), *show_env(*names)))
    expect(got["PYTORCH_NO_CUDA_MEMORY_CACHING"] is None, got)


def test_capture_hint_only_when_pytorch_was_forced():
    hint = "CUDA graph capture with PyTorch's caching allocator turned off by the launcher"
    p = launch("--no-framework-cache", prog("launched"), "alloc", "512", "capture")  # two
    expect(p.stderr.count(hint) == 1 and "--no-framework-cache" in p.stderr, p.stderr)
    p = launch(prog("launched"), "alloc", "512", "capture")
    expect(hint not in p.stderr, p.stderr)


def test_options_session_and_nvtx():
    names = ("GPUMEMTRACE_STACK_DEPTH", "GPUMEMTRACE_PYTHON", "GPUMEMTRACE_SAMPLE_MS",
             "GPUMEMTRACE_EMBED_SYMBOLS", "GPUMEMTRACE_CHUNK_KB", "GPUMEMTRACE_SESSION",
             "NVTX_INJECTION64_PATH")
    names += ("GPUMEMTRACE_DRIVER",)
    p = launch("--stack-depth", "7", "--no-python", "--sample-ms", "0", "--embed-symbols",
               "--no-driver", "--set", "chunk-kb=8", prog("launched"), "alloc", "512",
               *show_env(*names))
    got = child_env(p)
    expect(got["GPUMEMTRACE_DRIVER"] == "0", got)
    expect(got["GPUMEMTRACE_STACK_DEPTH"] == "7" and got["GPUMEMTRACE_PYTHON"] == "0" and
           got["GPUMEMTRACE_SAMPLE_MS"] == "0" and got["GPUMEMTRACE_EMBED_SYMBOLS"] == "1" and
           got["GPUMEMTRACE_CHUNK_KB"] == "8", got)
    expect(got["NVTX_INJECTION64_PATH"] == LIB_ABS, got)
    session = got["GPUMEMTRACE_SESSION"]
    expect(re.fullmatch(r"[0-9a-f]{16}", session or ""), session)
    expect(info(one_trace())["session"] == session, "trace has another session")
    again = child_env(launch(prog("launched"), *show_env("GPUMEMTRACE_SESSION")))
    expect(again["GPUMEMTRACE_SESSION"] != session, "the session id is not fresh")
    # NVTX: off on request; someone else's injection is kept
    got = child_env(launch("--no-nvtx", prog("launched"), *show_env("NVTX_INJECTION64_PATH")))
    expect(got["NVTX_INJECTION64_PATH"] is None, got)
    p = launch(prog("launched"), *show_env("NVTX_INJECTION64_PATH"),
               env=lenv(NVTX_INJECTION64_PATH="/opt/other/libinject.so"))
    expect(child_env(p)["NVTX_INJECTION64_PATH"] == "/opt/other/libinject.so", p.stdout)
    expect("kept NVTX_INJECTION64_PATH=/opt/other/libinject.so" in p.stderr, p.stderr)


def test_library_found_beside_itself_or_in_lib():
    os.makedirs("prefix/bin")
    os.makedirs("prefix/lib")
    shutil.copy(LAUNCHER, "prefix/bin/gpumemtrace")
    # installed layout: bin/gpumemtrace finds ../lib/libgpumemtrace.so
    p = subprocess.run(["prefix/bin/gpumemtrace", "--", prog("launched"), "env", "LD_PRELOAD"],
                       capture_output=True, text=True, env=lenv(), timeout=60)
    expect(p.returncode == 2 and "cannot find libgpumemtrace.so" in p.stderr, p)
    shutil.copy(LIB, "prefix/lib/libgpumemtrace.so")
    p = subprocess.run(["prefix/bin/gpumemtrace", "--", prog("launched"), "env", "LD_PRELOAD"],
                       capture_output=True, text=True, env=lenv(), timeout=60)
    want = os.path.realpath("prefix/lib/libgpumemtrace.so")
    expect(p.returncode == 0 and child_env(p)["LD_PRELOAD"] == want, p)
    # GPUMEMTRACE_LIB first, made absolute
    shutil.copy(LIB, "mylib.so")
    p = launch(prog("launched"), "env", "LD_PRELOAD", env=lenv(GPUMEMTRACE_LIB="mylib.so"))
    expect(child_env(p)["LD_PRELOAD"] == os.path.realpath("mylib.so"), p.stdout)


# ---- traces -----------------------------------------------------------------------

def test_traces_of_child_processes_listed():
    # another run's trace in the same directory must not be listed
    run([prog("launched"), "alloc", "1024"])
    other = one_trace()
    p = launch(prog("forkexec"))
    pids = re.match(r"parent (\d+) fork-child (\d+) exec-child (\d+)", p.stdout).groups()
    lines = trace_lines(p.stderr)
    listed = [re.search(r" pid (\d+) ", l).group(1) for l in lines]
    expect(sorted(listed) == sorted(pids), f"{listed} != {pids}\n{p.stderr}")
    expect(lines[0].startswith(f"gpumemtrace: ./gpumemtrace.{pids[0]}.gmt  pid {pids[0]} "),
           lines)
    expect(not any(os.path.basename(other) in l for l in p.stderr.splitlines()), p.stderr)
    expect(re.search(r"gpumemtrace: session [0-9a-f]{16}: 3 traces in ", p.stderr), p.stderr)


def test_summary_line_figures():
    p = launch(prog("report_known"))
    want = dict(zip(p.stdout.split()[0::2], map(int, p.stdout.split()[1::2])))
    lines = trace_lines(p.stderr)
    expect(len(lines) == 1, p.stderr)
    # report_known: peak 25 MiB, 20 leaks of 256 KiB, no OOM
    expect(want["peak"] == 25 << 20 and "peak 25.00 MiB requested" in lines[0] and
           "leaked 5.00 MiB" in lines[0] and lines[0].endswith("OOM 0"), lines[0])


def test_report_prints_the_full_summary():
    p = launch("--report", prog("report_known"))
    expect(p.stdout.split()[0] == "peak", "the report went to stdout: " + p.stdout[:200])
    expect("peak requested:  25.00 MiB" in p.stderr and "top sites at the peak:" in p.stderr and
           "weights (report_known.c:" in p.stderr, p.stderr)
    expect(len(trace_lines(p.stderr)) == 1, p.stderr)


def test_quiet_prints_nothing():
    p = launch("-q", prog("launched"), "alloc", "4096", rc=0)
    expect(p.stderr == "", p.stderr)
    expect(len(traces()) == 1, traces())


def test_no_trace_said_in_one_line():
    p = launch("true")
    lines = p.stderr.splitlines()
    expect(len(lines) == 1 and lines[0].startswith("gpumemtrace: no trace written"), lines)


def test_output_pattern_relative_to_launch_dir():
    os.mkdir("sub")
    os.mkdir("elsewhere")
    p = launch("-o", "sub/run.%p.gmt", prog("launched"), "alloc", "512")
    t = traces("sub")
    expect(len(t) == 1 and re.fullmatch(r"run\.\d+\.gmt", os.path.basename(t[0])), t)
    expect(f"gpumemtrace: ./{t[0]}  pid " in p.stderr, p.stderr)
    # a missing directory is created
    p = launch("-o", "new/deeper/run.%p.gmt", prog("launched"), "alloc", "512")
    expect(len(traces("new/deeper")) == 1 and "./new/deeper/run." in p.stderr, p.stderr)
    # a command that changes directory still writes where the launcher looks
    p = launch("--", "sh", "-c", f"cd elsewhere && exec {prog('launched')} alloc 512")
    expect(traces("elsewhere") == [] and len(traces()) == 1, (traces("elsewhere"), traces()))
    expect(len(trace_lines(p.stderr)) == 1, p.stderr)


def test_rank_in_file_names():
    def names(env, *flags):
        for f in traces():
            os.unlink(f)
        launch(*flags, prog("launched"), "alloc", "512", env=env)
        return [os.path.basename(f) for f in traces()]

    n = names(lenv(RANK="3"))
    expect(len(n) == 1 and re.fullmatch(r"gpumemtrace\.r3\.\d+\.gmt", n[0]), n)
    n = names(lenv(SLURM_PROCID="5"))
    expect(len(n) == 1 and re.fullmatch(r"gpumemtrace\.r5\.\d+\.gmt", n[0]), n)
    n = names(lenv(RANK="2", SLURM_PROCID="5", LOCAL_RANK="1"))  # RANK first
    expect(len(n) == 1 and n[0].startswith("gpumemtrace.r2."), n)
    n = names(lenv(RANK="1/../x", PMI_RANK="4"))  # not a number: skipped
    expect(len(n) == 1 and n[0].startswith("gpumemtrace.r4."), n)
    n = names(lenv())  # no rank: the plain default
    expect(len(n) == 1 and re.fullmatch(r"gpumemtrace\.\d+\.gmt", n[0]), n)
    n = names(lenv(), "-o", "t.%r.%p.gmt")  # %r without a rank: 0
    expect(len(n) == 1 and re.fullmatch(r"t\.0\.\d+\.gmt", n[0]), n)
    # ranks set below the launcher (torchrun's workers) are named and listed
    for f in traces():
        os.unlink(f)
    p = launch("-o", "w.r%r.%p.gmt", "--", "sh", "-c",
               f"RANK=4 {prog('launched')} alloc 512; RANK=5 {prog('launched')} alloc 512")
    n = [os.path.basename(f) for f in traces()]
    expect(len(n) == 2 and n[0].startswith("w.r4.") and n[1].startswith("w.r5."), n)
    expect(all(f"./{f}  pid " in p.stderr for f in n), p.stderr)
    # the default name too: torchrun's workers get RANK, the launcher not
    for f in traces():
        os.unlink(f)
    p = launch("--", "sh", "-c",
               f"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 {prog('launched')} alloc 512;"
               f" {prog('launched')} alloc 512")
    n = [os.path.basename(f) for f in traces()]
    expect(len(n) == 2 and re.fullmatch(r"gpumemtrace\.\d+\.gmt", n[0]) and
           re.fullmatch(r"gpumemtrace\.r1\.\d+\.gmt", n[1]), n)
    expect(all(f"./{f}  pid " in p.stderr for f in n), p.stderr)
    i = info(n[1])
    expect((i.get("rank"), i.get("world_size"), i.get("local_rank"), i.get("local_world_size"))
           == (1, 2, 1, 2), i)
    expect("rank" not in info(n[0]), info(n[0]))
    # a rank the program sets while it runs lands in the header at exit
    for f in traces():
        os.unlink(f)
    launch(prog("launched"), "alloc", "512", "setenv", "RANK=3", "alloc", "512")
    i = info(traces()[0])
    expect(i.get("rank") == 3 and "world_size" not in i, i)
    expect("(set by the program while it ran)" in report("info", traces()[0]).stdout, "")
    # the library expands %r itself, without the launcher
    for f in traces():
        os.unlink(f)
    run([prog("launched"), "alloc", "512"], GPUMEMTRACE_OUTPUT="lib.%r.gmt",
        OMPI_COMM_WORLD_RANK="6")
    expect([os.path.basename(f) for f in traces()] == ["lib.6.gmt"], traces())


# ---- usage ------------------------------------------------------------------------

def test_bad_usage_exits_2():
    cmd = [prog("launched"), "alloc", "512"]  # leaves a trace if it runs
    for args in ([], ["--bogus", *cmd], ["-x", *cmd], ["--set", "NO_SUCH=1", *cmd],
                 ["--set", "novalue", *cmd], ["--stack-depth", "9999", *cmd],
                 ["--sample-ms", "x", *cmd], ["--set", "FORCED_ALLOCATOR=pytorch", *cmd],
                 ["-o"], ["-q"]):
        lines = launch(*args, rc=2).stderr.splitlines()
        expect(len(lines) == 1 and lines[0].startswith("gpumemtrace: "), (args, lines))
    expect(traces() == [], f"a command ran: {traces()}")


def test_help_lists_every_library_option():
    p = launch("--help")
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "preload", "gmt_options.h")) as f:
        table = re.findall(r"^\s+X\((\w+),", f.read(), re.M)
    expect(len(table) >= 10, table)
    missing = [n for n in table if f"GPUMEMTRACE_{n}\n" not in p.stdout]
    expect(not missing, f"not in --help: {missing}")
    for flag in ("--output", "--stack-depth", "--no-pool", "--no-python", "--no-driver",
                 "--sample-ms",
                 "--embed-symbols", "--verbose", "--set", "--keep-framework-allocator",
                 "--no-framework-cache",
                 "--no-nvtx", "--report", "--quiet"):
        expect(flag in p.stdout, flag)


def test_unwritable_output_runs_the_command_and_says_why():
    # the launcher refused to run the command when -o
    # named a directory it could not create, where LD_PRELOAD alone runs it
    # untraced; and with an output directory it could not write it said
    # the command "made no CUDA memory call", which was false.
    with open("afile", "w") as f:
        f.write("x")
    p = launch("-o", "afile/sub/t.gmt", prog("launched"), "alloc", "4096", rc=0)
    expect("cannot create the output directory" in p.stderr and "runs untraced" in p.stderr,
           p.stderr)
    expect("made no CUDA memory call" not in p.stderr, p.stderr)
    if os.geteuid() != 0:  # root writes anywhere
        os.mkdir("ro", 0o500)
        p = launch("-o", "ro/t.gmt", prog("launched"), "alloc", "4096", rc=0)
        expect("cannot write in" in p.stderr and "made no CUDA memory call" not in p.stderr,
               p.stderr)
