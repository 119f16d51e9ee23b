#!/usr/bin/env python3
"""GPU checks of multi-rank jobs: torchrun under one launcher,
`gpumemreport ranks`. Run on the GPU machine from the repository root with
the bundle built by scripts/gpu-bundle.sh; prints one PASS/FAIL line per
check (INFO and SKIP lines besides), then "gpu-ranks: N passed, M failed",
and exits 1 if any failed.

usage: tests/gpu/gpu-ranks.py [--bundle DIR] [--out DIR] [--work DIR] [--steps N]
                              [--cases a,b,...] [--timeout S] [--keep-traces]

  --bundle  the bundle (default .gpubundle/)
  --out     where logs, reports and rank<r>.json files are saved (default $OUT
            if set, else ./gpu-ranks-out)
  --work    where traces are written (default a fresh temporary directory;
            --keep-traces copies them into --out)
  --steps   training steps per run (default 10)
  --cases   a subset of: gloo-plain, gloo-ddp, nccl-ddp, nccl-fsdp (default all)
  --timeout seconds for one torchrun (default 180; then SIGTERM, SIGKILL)

Cases, each run untraced and then as
  gpumemtrace -o W/gpumemtrace.%R%p.gmt -- torchrun --standalone
      --nproc_per_node 2 tests/gpu/dist_train.py ...
(two ranks; rank r trains on batches of 4 + 2r sequences):
  gloo-plain  gloo, no wrapper (gradients all_reduced by hand), GPT-2, both
              ranks on cuda:0 (the one-GPU case)
  gloo-ddp    gloo, DistributedDataParallel, GPT-2, both ranks on cuda:0
  nccl-ddp    nccl, DistributedDataParallel, GPT-2, rank r on cuda:r
  nccl-fsdp   nccl, FSDP2 (fully_shard), GPT-2, rank r on cuda:r
  (nccl-* need two GPUs: SKIP with fewer)

Checks per case:
  run      both runs exit 0 and every rank wrote its rank<r>.json
  names    exactly two traces, gpumemtrace.r0.<pid>.gmt and
           gpumemtrace.r1.<pid>.gmt, their pids those of the ranks
  job      `gpumemreport ranks --json W`: schema gpumemtrace.ranks/1, one job
           of 2 processes, world size 2, ranks 0 and 1, each rank's pid and
           host set and its trace closed
  peak/rN  rank N (matched by pid): framework.peak_allocated == PyTorch's
           max_memory_allocated(), framework.peak_reserved ==
           max_memory_reserved() (the row's own peaks are the process's)
  losses   gloo-plain: traced losses == untraced losses, every step, every
           rank, bit for bit; the other cases print the largest difference
           (INFO)
Printed (INFO), not checked: beyond_trace and its source, nccl_bytes_at_peak
(expected > 0 in the nccl cases when NCCL's buffers come from cudaMalloc),
peak_step against the step at which PyTorch's max_memory_allocated() last
rose, ooms, imbalance, first_oom.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(ROOT, "tests", "gpu", "dist_train.py")
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
CASES = {  # name: (dist_train.py arguments, needs two GPUs, losses must be equal)
    "gloo-plain": (["--backend", "gloo", "--mode", "plain", "--model", "gpt2",
                    "--shared-device"], False, True),
    "gloo-ddp": (["--backend", "gloo", "--mode", "ddp", "--model", "gpt2",
                  "--shared-device"], False, False),
    "nccl-ddp": (["--backend", "nccl", "--mode", "ddp", "--model", "gpt2",
                  "--device-per-rank"], True, False),
    "nccl-fsdp": (["--backend", "nccl", "--mode", "fsdp", "--model", "gpt2",
                   "--device-per-rank"], True, False),
}
NAME = re.compile(r"^gpumemtrace\.r(\d+)\.(\d+)\.gmt$")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


if "-h" in sys.argv or "--help" in sys.argv:
    print(__doc__)
    sys.exit(0)

BUNDLE = os.path.abspath(arg("--bundle", os.path.join(ROOT, ".gpubundle")))
OUT = os.path.abspath(arg("--out", os.environ.get("OUT") or
                          os.path.join(os.getcwd(), "gpu-ranks-out")))
WORK = arg("--work", None)
STEPS = arg("--steps", "10")
TIMEOUT = float(arg("--timeout", "180"))
KEEP = "--keep-traces" in sys.argv
SELECTED = arg("--cases", ",".join(CASES)).split(",")
REPORT = os.path.join(BUNDLE, "gpumemreport")
LAUNCHER = os.path.join(BUNDLE, "gpumemtrace")
passed, failed = [], []


def with_bundle_path(env):
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = BUNDLE + (":" + old if old else "")
    return env


REPORT_ENV = with_bundle_path(dict(os.environ))


def say(line):
    print(line, flush=True)
    with open(os.path.join(OUT, "summary.txt"), "a") as f:
        f.write(line + "\n")


def check(name, ok, detail):
    say(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    (passed if ok else failed).append(name)
    return ok


def info(name, detail):
    say(f"INFO {name}: {detail}")


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUMEMTRACE_") and k not in (
               "LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING", "NVTX_INJECTION64_PATH")}
    env.update(NO_MULTICAST)
    env.setdefault("OMP_NUM_THREADS", "4")
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def torchrun():
    exe = shutil.which("torchrun")
    if exe:
        return [exe]
    return [sys.executable, "-m", "torch.distributed.run"]


def run(cmd, env, log, timeout=TIMEOUT):
    """Run cmd in a process group of its own; returns (exit status, seconds).
    Past the timeout: SIGTERM to the launcher or torchrun (which pass it on
    to the workers), then SIGKILL to the group."""
    t0 = time.time()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=ROOT)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever is left of the group this run started
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            f.write(f"\ngpu-ranks: killed after {timeout:.0f} s\n")
            rc = 124
    return rc, time.time() - t0


def tail(path, n=2500):
    try:
        return open(path, errors="replace").read()[-n:]
    except OSError:
        return ""


def report(*args):
    p = subprocess.run([REPORT, *args], capture_output=True, text=True, env=REPORT_ENV)
    if p.returncode != 0:
        raise RuntimeError(f"gpumemreport {' '.join(args)}: exit {p.returncode}\n"
                           f"{p.stderr[-2000:]}")
    return p.stdout


def rank_files(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "rank*.json"))):
        with open(path) as f:
            j = json.load(f)
        out[j["rank"]] = j
    return out


def mib(n):
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return repr(n)
    return f"{n} ({n / 2**20:.2f} MiB)"


def one_case(name, extra, exact_losses, work):
    case_out = os.path.join(OUT, name)
    plain_dir = os.path.join(case_out, "untraced")
    traced_dir = os.path.join(case_out, "traced")
    traces = os.path.join(work, name)
    for d in (case_out, traces):  # nothing left from an earlier run
        shutil.rmtree(d, ignore_errors=True)
    for d in (plain_dir, traced_dir, traces):
        os.makedirs(d, exist_ok=True)
    job = [*torchrun(), "--standalone", "--nproc_per_node", "2", APP, *extra,
           "--steps", STEPS]

    # untraced, then traced through the launcher around torchrun
    rc_u, t_u = run([*job, "--out", plain_dir], base_env(), os.path.join(case_out, "untraced.log"))
    env = with_bundle_path(base_env())
    env["GPUMEMTRACE_CACHE"] = os.path.join(work, "bridge-cache")
    pattern = os.path.join(traces, "gpumemtrace.%R%p.gmt")
    rc_t, t_t = run([LAUNCHER, "-o", pattern, "--", *job, "--out", traced_dir], env,
                    os.path.join(case_out, "traced.log"))
    untraced, traced = rank_files(plain_dir), rank_files(traced_dir)
    ok = rc_u == 0 and rc_t == 0 and set(untraced) == {0, 1} and set(traced) == {0, 1}
    detail = (f"untraced exit {rc_u} in {t_u:.1f} s, ranks {sorted(untraced)}; traced exit "
              f"{rc_t} in {t_t:.1f} s, ranks {sorted(traced)}")
    if not ok:
        detail += ("\n--- untraced.log (end)\n" + tail(os.path.join(case_out, "untraced.log")) +
                   "\n--- traced.log (end)\n" + tail(os.path.join(case_out, "traced.log")))
    if not check(f"{name}/run", ok, detail):
        if not traced:
            return
    for r, j in sorted(traced.items()):
        info(f"{name}/r{r}", f"pid {j['pid']} {j['device']} {j['wrapper']} batch "
             f"{j['model_desc']['batch']} marks {j['marks']} attn "
             f"{j['model_desc'].get('attn')}: max allocated {mib(j['max_memory_allocated'])}, "
             f"max reserved {mib(j['max_memory_reserved'])}, blocks "
             f"{j['allocation.all.allocated']}/{j['allocation.all.freed']} allocated/freed, "
             f"loss {j['loss']!r} (untraced: max allocated "
             f"{untraced.get(r, {}).get('max_memory_allocated')}, loss "
             f"{untraced.get(r, {}).get('loss')!r})")

    # trace names: gpumemtrace.r<rank>.<pid>.gmt, one per worker, nothing else
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(traces, "*.gmt")))
    named = {}
    for fn in files:
        m = NAME.match(fn)
        if m:
            named.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    want = {r: [j["pid"]] for r, j in traced.items()}
    check(f"{name}/names", len(files) == 2 and named == want,
          f"traces {files}; ranks and pids from the names {named}, the workers' {want}")

    # gpumemreport ranks
    try:
        text = report("ranks", traces)
        with open(os.path.join(case_out, "ranks.txt"), "w") as f:
            f.write(text)
        raw = report("ranks", "--json", traces)
        with open(os.path.join(case_out, "ranks.json"), "w") as f:
            f.write(raw)
        doc = json.loads(raw)
    except Exception as e:  # noqa: BLE001 - the checks below need it
        check(f"{name}/job", False, f"{type(e).__name__}: {str(e)[-2000:]}")
        return
    for fn in files:  # each trace's header and summary, for the record
        for cmd in ("info", "summary"):
            try:
                with open(os.path.join(case_out, f"{fn[:-4]}.{cmd}.txt"), "w") as f:
                    f.write(report(cmd, os.path.join(traces, fn)))
            except Exception as e:  # noqa: BLE001 - informational only
                info(f"{name}/{cmd}", f"{fn}: {str(e)[-300:]}")
    jobs = doc.get("jobs") or []
    j0 = jobs[0] if jobs else {}
    ranks = j0.get("ranks") or []
    by_rank = {x.get("rank"): x for x in ranks}
    pids = {x.get("rank"): x.get("pid") for x in ranks}
    open_ = [x.get("rank") for x in ranks if x.get("closed") is not True]
    no_host = [x.get("rank") for x in ranks if not x.get("host")]
    ok = (doc.get("schema") == "gpumemtrace.ranks/1" and len(jobs) == 1 and
          j0.get("processes") == 2 and j0.get("world_size") == 2 and
          sorted(by_rank) == [0, 1] and len(ranks) == 2 and
          pids == {r: j["pid"] for r, j in traced.items()} and not open_ and not no_host)
    check(f"{name}/job", ok,
          f"schema {doc.get('schema')!r}, {len(jobs)} job(s), session {j0.get('session')}, "
          f"{j0.get('processes')} processes, world size {j0.get('world_size')}, ranks "
          f"{[x.get('rank') for x in ranks]} with pids {pids} (workers "
          f"{ {r: j['pid'] for r, j in traced.items()} }), local ranks "
          f"{[x.get('local_rank') for x in ranks]}, hosts {[x.get('host') for x in ranks]}, "
          f"not closed {open_}")

    # per rank, matched by pid: the trace's figures of PyTorch's allocator
    # are PyTorch's (the row's peaks are the whole process's)
    by_pid = {x.get("pid"): x for x in ranks}
    for r, j in sorted(traced.items()):
        x = by_pid.get(j["pid"])
        if x is None:
            check(f"{name}/peak/r{r}", False, f"pid {j['pid']} not in the report's ranks")
            continue
        fw = x.get("framework") or {}
        got = (x.get("rank"), fw.get("peak_allocated"), fw.get("peak_reserved"))
        want = (r, j["max_memory_allocated"], j["max_memory_reserved"])
        check(f"{name}/peak/r{r}", got == want,
              f"rank, peak allocated, peak reserved: report {got}, PyTorch {want}")
        info(f"{name}/r{r}/report",
             f"peak requested {mib(x.get('peak_requested'))}, beyond_trace "
             f"{mib(x.get('beyond_trace'))} (source {x.get('beyond_trace_source')}), "
             f"nccl_bytes_at_peak {mib(x.get('nccl_bytes_at_peak'))}, ooms {x.get('ooms')} "
             f"(PyTorch {j.get('num_ooms')}), peak at {x.get('peak_at_s')} s, peak_step "
             f"{x.get('peak_step')} (PyTorch's max_memory_allocated last rose in step "
             f"{j.get('peak_step')} counting from 0), trace {x.get('trace')}")
        if extra[1] == "nccl" and not x.get("nccl_bytes_at_peak"):
            info(f"{name}/r{r}/nccl", "nccl_bytes_at_peak is 0 or missing in an NCCL run "
                 "(NCCL's buffers not from cudaMalloc, or not live at the peak?)")
    info(f"{name}/imbalance", json.dumps(j0.get("imbalance")))
    info(f"{name}/first_oom", json.dumps(j0.get("first_oom")))
    info(f"{name}/sites", f"{len(j0.get('sites') or [])} sites")

    # determinism: the same losses traced and untraced
    diffs, equal = {}, True
    for r in sorted(set(traced) & set(untraced)):
        a, b = untraced[r]["losses"], traced[r]["losses"]
        equal = equal and a == b
        diffs[r] = (max((abs(x - y) for x, y in zip(a, b)), default=None)
                    if len(a) == len(b) else f"{len(a)} vs {len(b)} steps")
    detail = (f"largest |traced - untraced| per rank over {STEPS} steps: {diffs}; last "
              f"losses untraced {[untraced[r]['loss'] for r in sorted(untraced)]}, traced "
              f"{[traced[r]['loss'] for r in sorted(traced)]}")
    if exact_losses:
        check(f"{name}/losses", equal and set(untraced) == {0, 1}, detail)
    else:
        info(f"{name}/losses", ("identical; " if equal else "differ; ") + detail)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "summary.txt"), "w"):
        pass
    work = os.path.abspath(WORK) if WORK else tempfile.mkdtemp(prefix="gpu-ranks-")
    os.makedirs(work, exist_ok=True)
    unknown = [c for c in SELECTED if c not in CASES]
    if unknown:
        sys.exit(f"gpu-ranks: unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    for path in (REPORT, LAUNCHER, os.path.join(BUNDLE, "libgpumemtrace.so")):
        if not os.path.exists(path):
            sys.exit(f"gpu-ranks: {path} missing: build the bundle (scripts/gpu-bundle.sh)")
    p = subprocess.run([sys.executable, "-c", "import torch, json; print(json.dumps("
                        "[torch.__version__, torch.version.cuda, torch.cuda.device_count(), "
                        "torch.distributed.is_nccl_available()]))"],
                       capture_output=True, text=True, env=base_env())
    try:
        version, cuda, ngpu, has_nccl = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        sys.exit(f"gpu-ranks: cannot import torch: {p.stderr[-2000:]}")
    say(f"INFO env: torch {version}, CUDA {cuda}, {ngpu} GPU(s), NCCL available {has_nccl}, "
        f"torchrun {' '.join(torchrun())}, steps {STEPS}, traces in {work}, outputs in {OUT}")
    t0 = time.time()
    for name in SELECTED:
        extra, two, exact = CASES[name]
        if two and (ngpu < 2 or not has_nccl):
            say(f"SKIP {name}: needs 2 GPUs and NCCL ({ngpu} GPU(s), NCCL {has_nccl})")
            continue
        if ngpu < 1:
            say(f"SKIP {name}: no GPU")
            continue
        t = time.time()
        try:
            one_case(name, extra, exact, work)
        except Exception as e:  # one broken case must not hide the others
            check(f"{name}/error", False, f"{type(e).__name__}: {str(e)[-2000:]}")
        info(f"{name}/time", f"{time.time() - t:.1f} s")
        if KEEP:
            shutil.copytree(os.path.join(work, name), os.path.join(OUT, name, "traces"),
                            dirs_exist_ok=True)
    say(f"INFO total: {time.time() - t0:.1f} s")
    say(f"gpu-ranks: {len(passed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
