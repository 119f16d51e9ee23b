"""`gpumemreport ranks`: one view of a multi-rank job, from the traces of
tests/progs/ranks.c run as the ranks of two jobs (two sessions) on the
simulated runtime, and the wildcard patterns every command now expands.

Job A (session a1a1..., world size 4, two ranks per host), run one process
after the other in this order, so that times across processes are known:
  rank 3: activations 6 MiB, out of memory in step 2 (runs first)
  rank 0: the plain run
  rank 1: leaks 1 MiB per step
  rank 2: out of memory in step 3
Every rank holds 8 MiB of weights and a 2 MiB buffer from a function named
like NCCL's; steps are 5, marked "step"; activations 4 MiB unless said.
Job B (session 0b0b..., started after A): rank 1, a process with no rank,
rank 0."""
import json
import os
import socket
import subprocess

from gmt import *

MiB = 1 << 20
A = "a1a1a1a1a1a1a1a1"
B = "0b0b0b0b0b0b0b0b"
SAN = os.path.join(BUILD, "tests", "gpumemreport-san")


def rank_env(session, directory, rank=None, local=None, world=None, local_world=None):
    env = clean_env(GPUMEMTRACE_SESSION=session, GPUMEMTRACE_OUTPUT=f"{directory}/t.%r.%p.gmt")
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
              "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "GPUMEMTRACE_POOL"):
        env.pop(k, None)
    for k, v in (("RANK", rank), ("LOCAL_RANK", local), ("WORLD_SIZE", world),
                 ("LOCAL_WORLD_SIZE", local_world)):
        if v is not None:
            env[k] = str(v)
    return env


def make_jobs():
    os.makedirs("a", exist_ok=True)
    os.makedirs("b", exist_ok=True)
    for rank, args, rc in ((3, ["-a", "6144", "-o", "2"], 1), (0, [], 0),
                           (1, ["-l", "1024"], 0), (2, ["-o", "3"], 1)):
        p = run([prog("ranks"), *args], check=False,
                env=rank_env(A, "a", rank, rank % 2, 4, 2))
        expect(p.returncode == rc, f"rank {rank}: exit {p.returncode}\n{p.stderr}")
    for rank in (1, None, 0):
        run([prog("ranks"), "-s", "2"], env=rank_env(B, "b", rank, world=2 if rank is not None
                                                     else None))
    expect(len(traces("a")) == 4 and len(traces("b")) == 3, (traces("a"), traces("b")))


def ranks_json(*args, check_rc=0):
    return json.loads(report("ranks", "--json", "--bytes", *args, check_rc=check_rc).stdout)


def test_ranks_job():
    make_jobs()
    d = ranks_json("b", "a")
    expect(d["schema"] == "gpumemtrace.ranks/1" and len(d["jobs"]) == 2, d)
    job = d["jobs"][0]  # A started first, though its session sorts after B's
    expect(job["session"] == A and job["processes"] == 4 and job["world_size"] == 4, job)
    ranks = job["ranks"]
    expect([r["rank"] for r in ranks] == [0, 1, 2, 3], ranks)
    expect([r["local_rank"] for r in ranks] == [0, 1, 0, 1], ranks)
    host = socket.gethostname()[:63]
    expect(all(r["host"] == host and r["closed"] for r in ranks), ranks)
    expect([os.path.basename(r["trace"]) for r in ranks] ==
           [f"t.{r['rank']}.{r['pid']}.gmt" for r in ranks], ranks)
    # peaks: weights 8 + buffer 2 + activations (+ 5 steps x 1 MiB leaked)
    peaks = [14 * MiB, 19 * MiB, 14 * MiB, 16 * MiB]
    expect([r["peak_requested"] for r in ranks] == peaks, ranks)
    expect([r["peak_allocated"] for r in ranks] == peaks, ranks)
    expect(all(r["peak_reserved"] >= r["peak_allocated"] for r in ranks), ranks)
    expect([r["ooms"] for r in ranks] == [0, 0, 1, 1], ranks)
    expect([r["peak_step"] for r in ranks] == [1, 5, 1, 1], ranks)
    expect([r["nccl_bytes_at_peak"] for r in ranks] == [2 * MiB] * 4, ranks)
    for r in ranks:
        src = r["beyond_trace_source"]
        expect(src in ("process", "device", None) and
               (r["beyond_trace"] is None) == (src is None), r)
    # run one after the other: 3, 0, 1, 2; aligned on the job's first start
    at = {r["rank"]: r["peak_at_s"] for r in ranks}
    expect(0 <= at[3] < at[0] < at[1] < at[2], at)
    imb = job["imbalance"]
    expect(imb["peak_requested"] == {"max": 19 * MiB, "max_rank": 1, "min": 14 * MiB,
                                     "min_rank": 0, "ratio": round(19 / 14, 6)}, imb)
    expect(imb["peak_allocated"]["max_rank"] == 1 and imb["peak_allocated"]["min_rank"] == 0, imb)
    expect(set(imb["peak_reserved"]) == {"max", "max_rank", "min", "min_rank", "ratio"}, imb)
    # rank 3 ran out of memory first (in step 2), though rank 2's row is first
    oom = job["first_oom"]
    expect(oom["rank"] == 3 and oom["step"] == 2 and oom["size"] == 64 << 30 and
           oom["pid"] == ranks[3]["pid"] and "huge_buffer" in oom["site"], oom)
    expect(at[3] <= oom["at_s"] < at[0], (oom, at))
    sites = job["sites"]
    expect(len(sites) == 2, sites)
    expect("leak_buffer" in sites[0]["site"] and sites[0]["max"] == 5 * MiB and
           sites[0]["max_rank"] == 1 and sites[0]["min"] == 0 and sites[0]["min_rank"] == 0 and
           sites[0]["per_rank"] == [0, 5 * MiB, 0, 0], sites)
    expect("activations" in sites[1]["site"] and sites[1]["per_rank"] ==
           [4 * MiB, 4 * MiB, 4 * MiB, 6 * MiB] and sites[1]["max_rank"] == 3, sites)
    # job B: ranked processes first, the one without a rank last
    jb = d["jobs"][1]
    expect(jb["session"] == B and jb["processes"] == 3 and jb["world_size"] == 2, jb)
    expect([r["rank"] for r in jb["ranks"]] == [0, 1, None], jb)
    expect(jb["first_oom"] is None and jb["sites"] == [], jb)
    expect(all(r["peak_requested"] == 14 * MiB and r["peak_step"] == 1 for r in jb["ranks"]), jb)
    expect(jb["imbalance"]["peak_requested"]["ratio"] == 1.0, jb)
    # --top limits the sites
    expect(len(ranks_json("--top", "1", "a")["jobs"][0]["sites"]) == 1, "--top 1")

    text = report("ranks", "a", "b").stdout
    lines = [" ".join(l.split()) for l in text.splitlines()]
    expect(lines[0] == f"job {A}: 4 processes, world size 4", text)
    rows = [l.split() for l in lines if l.split()[:1] and l.split()[0] in "0123-"
            and len(l.split()) > 8]
    expect([r[0] for r in rows] == ["0", "1", "2", "3", "0", "1", "-"], text)
    expect(f"job {B}: 3 processes, world size 2" in lines, text)
    expect(text.index(f"job {A}") < text.index(f"job {B}"), text)
    expect("peak requested 19.00 MiB rank 1 14.00 MiB rank 0 1.36x" in lines, text)
    expect(any(l.startswith("first out-of-memory: rank 3 (pid ") and ", step 2: 64.00 GiB at "
               "huge_buffer" in l for l in lines), text)
    expect(any(l.startswith("5.00 MiB 5.00 MiB rank 1 0 B rank 0 leak_buffer") for l in lines),
           text)
    expect("no out-of-memory" in lines, text)
    expect(("* device-wide" in text) ==
           any(r["beyond_trace_source"] == "device" for j in d["jobs"] for r in j["ranks"]), text)
    expect("NCCL" in lines[2].split(), lines[2])

    md = report("ranks", "--markdown", "a").stdout
    expect("| rank | host | pid | peak requested | peak allocated | peak reserved | "
           "beyond trace | ooms | peak at | step | NCCL |" in md, md)
    expect("| ---: | --- | ---: |" in md, md)


def test_ranks_arguments():
    make_jobs()
    whole = ranks_json("a", "b")
    # a quoted pattern is expanded by the report, as the shell would
    expect(ranks_json("a/*.gmt", "b") == whole, "pattern a/*.gmt")
    expect(ranks_json("[ab]") == whole, "pattern [ab] (directories)")
    one = ranks_json("a/t.1.*.gmt")
    expect(len(one["jobs"]) == 1 and [r["rank"] for r in one["jobs"][0]["ranks"]] == [1], one)
    # every command gets it
    s = json.loads(report("summary", "--json", "a/t.?.*.gmt").stdout)
    expect(len(s["traces"]) == 4, s)
    # a pattern that matches nothing: one line, exit 2
    p = report("ranks", "a/none*.gmt", check_rc=2)
    expect(p.stderr.strip().count("\n") == 0 and "no file matches" in p.stderr, p.stderr)
    p = report("peak", "c/*.gmt", check_rc=2)
    expect(p.stderr.strip().count("\n") == 0 and p.stdout == "", p.stderr)
    # a file that is not a trace: one error line, exit 2
    with open("notes.gmt", "w") as f:
        f.write("not a trace\n" * 100)
    p = report("ranks", "notes.gmt", check_rc=2)
    expect(p.stderr.strip().count("\n") == 0 and "notes.gmt" in p.stderr, p.stderr)
    p = report("ranks", "--json", "notes.gmt", check_rc=2)
    expect(json.loads(p.stdout) == {"schema": "gpumemtrace.ranks/1", "jobs": []}, p.stdout)
    # beside good traces: they are reported, the exit says something failed
    p = report("ranks", "--json", "notes.gmt", "a", check_rc=2)
    expect(len(json.loads(p.stdout)["jobs"]) == 1 and p.stderr.strip().count("\n") == 0,
           p.stderr)
    # a file that does not exist, without wildcards: no pattern, one line
    p = report("ranks", "missing.gmt", check_rc=2)
    expect(p.stderr.strip().count("\n") == 0 and "missing.gmt" in p.stderr, p.stderr)
    # a name with a wildcard that exists is a file, not a pattern
    os.rename(traces("b")[0], "b/star*.gmt")
    got = ranks_json("b/star*.gmt")
    expect(got["jobs"][0]["processes"] == 1, got)
    report("ranks", check_rc=2)  # no traces: usage
    expect("ranks" in report("help").stdout, "help lists ranks")
    # under the sanitizers, every path of the command
    if os.access(SAN, os.X_OK):
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0")
        for args in (["a", "b"], ["--json", "a", "b"], ["--markdown", "--group", "stack", "a"],
                     ["--no-symbols", "a"]):
            p = subprocess.run([SAN, "ranks", *args], capture_output=True, text=True, env=env,
                               timeout=120)
            expect(p.returncode == 0 and "Sanitizer" not in p.stderr and
                   "runtime error" not in p.stderr, (args, p.returncode, p.stderr[-1500:]))


def test_step_mark_is_the_step_not_the_most_frequent():
    # NCCL opens NVTX ranges several times a step: "ncclAllReduce" comes 3
    # times a step, "step" once; the peak (a leak) is in the last step, 4
    run([prog("ranks"), "-s", "4", "-l", "1024", "-c", "3"],
        env=rank_env(A, ".", 0, 0, 1, 1))
    r = ranks_json(".")["jobs"][0]["ranks"][0]
    expect(r["peak_step"] == 4, r)
    g = json.loads(report("growth", "--json", one_trace()).stdout)["traces"][0]
    expect(g["interval_mark"] == "step" and g["interval_marks"] == 4, g)


def test_peaks_of_one_scope_on_real_ranks():
    """tests/corpus/verdicts/ranks-r0 and -r1: two ranks of a real job with
    PyTorch's allocator's events and cuBLAS's workspaces outside it. A
    row's three peaks count the same memory (the process's, as summary's),
    so requested <= allocated <= reserved; PyTorch's own are apart."""
    import lzma
    corpus = os.path.join(os.path.dirname(__file__), "..", "corpus", "verdicts")
    paths = []
    for r in ("r0", "r1"):
        with lzma.open(os.path.join(corpus, f"ranks-{r}.gmt.xz")) as f, open(f"ranks-{r}.gmt", "wb") as o:
            o.write(f.read())
        paths.append(f"ranks-{r}.gmt")
    job = json.loads(report("ranks", "--json", *paths).stdout)["jobs"][0]
    expect([r["rank"] for r in job["ranks"]] == [0, 1], job["ranks"])
    for row, path in zip(job["ranks"], paths):
        s = json.loads(report("summary", "--json", path).stdout)["traces"][0]
        got = (row["peak_requested"], row["peak_allocated"], row["peak_reserved"])
        expect(got == (s["peak_requested"], s["peak_allocated"], s["peak_reserved"]), (got, s))
        expect(got[0] <= got[1] <= got[2], got)
        fw = row["framework"]
        want = s["framework"]
        expect(fw["peak_allocated"] == want["peak_allocated"] and
               fw["peak_reserved"] == want["peak_reserved"] and
               fw["peak_requested"] <= fw["peak_allocated"] <= fw["peak_reserved"], (fw, want))
    imb = job["imbalance"]
    expect(imb["peak_allocated"]["max"] == max(r["peak_allocated"] for r in job["ranks"]), imb)
    text = report("ranks", *paths).stdout
    expect("peaks are the process's" in text, text)
