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
    run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="link.gmt")
    expect(open("target").read() == "precious", "wrote through a symlink")
    expect(os.path.islink("link.gmt"), "symlink replaced")
    expect(os.path.exists("link.gmt.1"), f"{os.listdir('.')}")


def test_unwritable_directory_reports_once_and_runs():
    os.mkdir("ro", 0o500)
    plain = run([prog("hello")], traced=False, check=False)
    p = run([prog("hello")], check=False, GPUMEMTRACE_OUTPUT="ro/sub/t.gmt")
    expect(p.returncode == 3 and p.stdout == plain.stdout, "program changed by the failure")
    errs = [l for l in p.stderr.splitlines() if l.startswith("gpumemtrace: error:")]
    expect(len(errs) == 1 and "cannot create trace file" in errs[0], p.stderr)
    expect(p.stderr.replace(errs[0] + "\n", "") == plain.stderr, "other stderr changed")
