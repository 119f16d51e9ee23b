"""Per-process files: fork and exec; deaths of every kind keep every
completed event."""
import struct

from gmt import *


def test_fork_and_exec_get_linked_files():
    p = run([prog("forkexec")])
    words = p.stdout.split()
    parent, forked, execed = int(words[1]), int(words[3]), int(words[5])
    files = {info(t)["pid"]: info(t) for t in traces()}
    expect(sorted(files) == sorted([parent, forked, execed]), f"traces for pids {sorted(files)}")
    sessions = {f["session"] for f in files.values()}
    expect(len(sessions) == 1, f"one session expected: {sessions}")
    expect(files[forked]["ppid"] == parent and files[execed]["ppid"] == parent, "ppid links")
    for pid, pairs in ((parent, 3), (execed, 5)):
        got = files[pid]["by_api"]
        expect(got == {"cudaMalloc": pairs, "cudaFree": pairs}, f"pid {pid}: {got}")
    # the forked child's allocations fail (CUDA can't be used after fork)
    child = files[forked]
    expect(child["by_api"].get("cudaMalloc") == 4 and child["by_kind"]["alloc_failed"] == 4,
           f"forked child: {child['by_api']} {child['by_kind']}")
    expect(all(f["closed"] for f in files.values()), "a trace was not closed")


def per_thread_events(trace):
    """tid -> number of alloc/free events the trace holds for that thread."""
    tids, counts = {}, {}
    for line in dump(trace, "--no-stacks")[1:]:
        parts = line.split()
        if len(parts) < 5:
            continue
        thread = int(parts[2])
        if parts[4] == "thread":
            tids[thread] = int(parts[6].split("=")[1])
        elif parts[4] in ("alloc", "free_requested"):
            counts[thread] = counts.get(thread, 0) + 1
    return {tids[t]: n for t, n in counts.items()}


def check_death(mode, rc, closed):
    p = run([prog("die"), mode, "4", "20000", "counts"], check=False, timeout=120)
    expect(p.returncode == rc, f"{mode}: exit {p.returncode}, wanted {rc}: {p.stderr}")
    raw = open("counts", "rb").read()
    done = {}
    for i in range(4):
        tid, completed = struct.unpack_from("<qq", raw, 16 * i)
        done[tid] = completed
    t = one_trace()
    got = per_thread_events(t)
    expect(sum(done.values()) >= 20000, f"{done}")
    for tid, completed in done.items():
        n = got.get(tid, 0)
        # every call that returned is there; at most the one in flight more
        expect(completed <= n <= completed + 1,
               f"{mode}: thread {tid}: {n} events in the trace, {completed} calls returned")
    expect(info(t)["closed"] == closed, f"{mode}: closed={info(t)['closed']}")
    if not closed:
        r = report("info", t)
        expect("CUT SHORT" in r.stdout and "warning" in r.stderr, r.stdout + r.stderr)


def test_sigkill_keeps_completed_events():
    check_death("kill", -9, False)


def test_abort_keeps_completed_events():
    check_death("abort", -6, False)


def test_segfault_keeps_completed_events():
    check_death("segv", -11, False)


def test_os_exit_keeps_completed_events():
    check_death("_exit", 0, False)


def test_normal_exit_closes_trace():
    check_death("exit", 0, True)


def test_runtime_dlclosed_before_exit():
    # a program that dlopens the runtime and dlcloses it
    # before exit died with SIGSEGV in the pool's exit handler, which
    # called into the unloaded library. It must exit 0, say nothing, and
    # leave a closed trace of what it did.
    rt = os.path.join(BUILD, "sim", "libcudart.so.13")
    p = run([prog("rt_dlclose"), rt], check=False)
    expect(p.returncode == 0 and p.stdout == "ok\n" and p.stderr == "",
           (p.returncode, p.stdout, p.stderr))
    t = one_trace()
    expect(info(t)["closed"], info(t))
    lines = dump(t)
    expect(any(" alloc " in l and "cudaMalloc" in l for l in lines), lines[-10:])
