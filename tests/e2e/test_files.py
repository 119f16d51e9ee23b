"""Trace files are private, never clobber anything, never follow symlinks,
and a tracer that cannot write says so once and leaves the program be."""
import os
import stat

from gmt import *


def test_mode_0600():
    run([prog("hello")], check=False)
    mode = stat.S_IMODE(os.stat(one_trace()).st_mode)
    expect(mode == 0o600, f"mode {oct(mode)}")


def test_existing_file_not_clobbered():
    with open("out.gmt", "w") as f:
        f.write("precious")
    run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="out.gmt")
    expect(open("out.gmt").read() == "precious", "existing file overwritten")
    expect(os.path.exists("out.gmt.1"), f"no suffixed trace: {os.listdir('.')}")
    expect(info("out.gmt.1")["by_api"]["cudaMalloc"] == 1, "suffixed trace unreadable")


def test_symlink_not_followed():
    with open("target", "w") as f:
        f.write("precious")
    os.symlink("target", "link.gmt")
    p = run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="link.gmt")
    expect(open("target").read() == "precious", "wrote through a symlink")
    expect(os.path.islink("link.gmt"), "symlink replaced")
    # a link is not a trace to number the next one after: refused
    expect(not os.path.exists("link.gmt.1") and "symbolic link" in p.stderr,
           (os.listdir('.'), p.stderr))


def test_unwritable_directory_reports_once_and_runs():
    os.mkdir("ro", 0o500)
    plain = run([prog("hello")], traced=False, check=False)
    p = run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="ro/sub/t.gmt")
    expect(p.returncode == 3 and p.stdout == plain.stdout, "program changed by the failure")
    errs = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace: error:")]
    expect(len(errs) == 1 and "cannot create trace file" in errs[0], p.stderr)
    expect(p.stderr.replace(errs[0] + "\n", "") == plain.stderr, "other stderr changed")


def test_output_that_is_not_a_file_is_refused():
    # an output path naming a directory, a FIFO, a
    # device or a link was written beside as <name>.1 (/dev/null.1 as
    # root). Refused with one line; the program runs on untouched.
    os.mkdir("adir")
    os.mkfifo("afifo")
    os.symlink("elsewhere", "alink")
    for path, kind in (("adir", "a directory"), ("afifo", "a FIFO"),
                       ("alink", "a symbolic link"), ("/dev/null", "a device")):
        p = run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT=path)
        expect(p.returncode == 3, p.returncode)  # hello's own status
        said = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace:")]
        expect(len(said) == 1 and kind in said[0] and "tracing off" in said[0], (path, p.stderr))
        expect("malloc: 0" in p.stdout, p.stdout)
        expect(not os.path.lexists(path + ".1"), f"{path}.1 was written")
    expect(sorted(os.listdir(".")) == ["adir", "afifo", "alink"], os.listdir("."))


def test_full_disk_stops_recording_once():
    # once the trace's file system was full, every later
    # event retried a failing fallocate under the file lock (the program
    # slowed ~10000x). Now the first failure stops recording, said once;
    # the program goes on and the trace reads up to there, closed.
    env = {k: v for k, v in clean_env().items()}
    env.update(LD_PRELOAD=f"{LIB} {os.path.join(BUILD, 'tests', 'libnospace.so')}",
               SIM_NOSPACE_AFTER="2", GPUMEMTRACE_CHUNK_KB="4",
               GPUMEMTRACE_OUTPUT="full.gmt")
    p = run([prog("bench"), "allocfree", "1", "100000", "4"], traced=False, env=env)
    said = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace:")]
    expect(len(said) == 1 and "No space left" in said[0], p.stderr)
    expect("nospace: 1 refused" in p.stderr, p.stderr)
    i = info("full.gmt")
    expect(i["closed"], i)
    # closed, but not complete: the header counts what was not recorded
    lost = i["lost"]
    expect(lost and lost["events"] > 0 and lost["why"] == ["file_full"] and
           lost["error"] == "No space left on device", lost)


def test_finished_windows_are_unmapped():
    # the trace's mapped windows stayed mapped until
    # exit, so the process's memory grew with the trace. A window whose
    # chunks every thread has left is unmapped; what was written stays in
    # the file (every event is read back).
    import re
    p = run([prog("bench"), "allocfree", "4", "30000", "4"], GPUMEMTRACE_CHUNK_KB="4",
            GPUMEMTRACE_VERBOSE="1", GPUMEMTRACE_OUTPUT="w.gmt")
    m = re.search(r"(\d+) of (\d+) file windows still mapped", p.stderr)
    expect(m, p.stderr)
    mapped, windows = int(m.group(1)), int(m.group(2))
    expect(windows >= 6 and mapped <= 5, (mapped, windows))  # 4 threads + the newest
    allocs = [l for l in dump("w.gmt", "--no-stacks") if " alloc " in l and "cudaMalloc" in l]
    expect(len(allocs) == 4 * 30000, len(allocs))


def test_trace_cut_under_the_program():
    # truncating the trace from outside killed the
    # program with SIGBUS (a store into a mapped page past the new end)
    p = run([prog("truncate"), "cut", "t.gmt"], check=False,
            GPUMEMTRACE_OUTPUT="t.gmt", GPUMEMTRACE_CHUNK_KB="4")
    expect(p.returncode == 0 and p.stdout == "alive\n", (p.returncode, p.stdout, p.stderr))
    lines = [l for l in p.stderr.splitlines() if "truncated by another process" in l]
    expect(len(lines) == 1 and "t.gmt" in lines[0], p.stderr)
    expect(os.path.getsize("t.gmt") == 0, os.path.getsize("t.gmt"))  # left as cut
    # a SIGBUS that is not the trace's: the program's handler, or death
    p = run([prog("truncate"), "own"], check=False, GPUMEMTRACE_OUTPUT="o.gmt")
    expect(p.returncode == 0 and p.stdout == "handled 7\nalive\n", (p.returncode, p.stdout))
    p = run([prog("truncate"), "dfl"], check=False, GPUMEMTRACE_OUTPUT="d.gmt")
    expect(p.returncode == -7 and p.stdout == "", (p.returncode, p.stdout, p.stderr))
