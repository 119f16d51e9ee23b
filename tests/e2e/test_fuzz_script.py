"""scripts/fuzz.sh builds its libFuzzer targets from the Makefile's source
lists, the ones the suite's smoke runs link: its own list for the commands
target lacked the pool's core that `whatif` links, and the target did not
link. Built only (SECONDS 0), in the suite's build directory; the commands
target links the most."""
import os
import subprocess

from gmt import *

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_fuzz_script_links_the_commands_target():
    if SANITIZED:
        # the suite's second pass preloads the library under ASan; this
        # builds a fuzz target and loads no library: the first pass ran it
        print("skipped in the sanitized pass: it preloads nothing")
        return
    target = os.path.join(BUILD, "fuzz", "fuzz_commands")
    if os.path.exists(target):
        os.unlink(target)
    env = dict(os.environ, O=os.path.relpath(os.path.abspath(BUILD), ROOT))
    p = subprocess.run(["sh", "scripts/fuzz.sh", "commands", "0"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    expect(p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    expect(os.access(target, os.X_OK), f"no {target}\n{p.stdout}")
