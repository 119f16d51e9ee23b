"""Names that come from outside are data, never a path: a host name of
"../../x" expanded by %h in the output pattern stays one file name in the
pattern's directory (it wrote two levels up)."""
import os
import subprocess

from gmt import *


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
