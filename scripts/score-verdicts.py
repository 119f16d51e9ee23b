#!/usr/bin/env python3
"""Score gpumemreport's verdicts against the labelled corpus
(tests/corpus/verdicts/: real models' traces recorded on a GPU by
tests/gpu/gpu-verdict-corpus.sh, each with a truth file that the program
itself wrote: its loop's step count, the fault it injected - line, bytes
kept per step by PyTorch's own memory_allocated(), first step - and, for
an out-of-memory, the failing request and line).

usage: scripts/score-verdicts.py [--report PATH] [--corpus DIR ...] [--json]
                                 [--floor FILE] [--trace NAME ...]

Verdicts scored, per trace and in all:
  steps   the step count `growth` found equals the program's loop count
          (iterations begun; a loop of fewer than 4 has none that can be
          seen: the first period holds the first step's set-up)
  growth  a fault trace: a growing site at the fault's line (or a line
          whose allocations it keeps), its bytes per step within 5% of the
          truth (what the fault keeps by construction; for a kept graph,
          PyTorch's memory_allocated()), from the fault's first step (a
          hit); any other
          growing site, and any growing site of a clean run, is a false
          positive
  oom     an out-of-memory trace: `summary` reports the out-of-memory,
          its request within 1% of the size PyTorch names, at the line of
          the program on the error's traceback, and whatif's word on each
          setting the program was run again under (fits or not) is what
          that run did
  leaks   a run that finished: `leaks` leads with what was kept step
          after step - a fault's bytes alive at exit (PyTorch's count:
          the truth's alive_at_end, or for kept graphs what a step kept
          times the steps, which bounds it: the interpreter's teardown frees
          part of such graphs) at its lines within 5%, nothing else; a clean
          run's program holds no device memory at exit of its own. A
          crashed run's rows kept step after step are false positives
  kinds   a run that marks its steps: memory by kind at the last mark
          (`summary --kinds-at step`) equals the model's state PyTorch
          counts there - parameters and buffers, gradients, optimizer
          state - within 1%
The scorecard: per verdict the hits, misses and false positives, recall
and precision, and the clean runs with any verdict. --floor FILE: exit 1
when a score is below the floor's (a JSON scorecard of an earlier run);
exit 2 on an error (a trace the report cannot read, a missing truth).
"""
import argparse
import json
import lzma
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def report(tool, *args):
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=300)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"gpumemreport {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)["traces"][0]


def expected_steps(t):
    """The iterations of the program's loop that began; none below 4, the
    least whose period can be seen (the first period holds the first
    step's set-up: optimizer state, workspaces)."""
    begun = t.get("crashed_in_step") or t.get("steps_done", 0)
    if "oom" in t:
        begun = t["steps_done"] + 1
    return begun if begun >= 4 else 0


def site_lines(label, file):
    """Lines of `file` named in a site label: 'f (file.py:12) > ...'."""
    return {int(m) for m in re.findall(r"\b%s:(\d+)\)" % re.escape(file), label)}


def fault_rate(t):
    """Bytes a faulty step keeps, from the fault's first step to the last:
    by construction (what the fault kept after its first step, over the
    steps after it) where the fault knows it, else by PyTorch's own
    memory_allocated() at the end of those steps (the graph a kept output
    holds, which only PyTorch can count)."""
    f, n = t["from_step"], t["steps_done"]
    kept = t.get("kept_by_construction") or []
    if n <= f:
        return 0
    if any(kept):
        return sum(kept[f:n]) / (n - f)
    a = t["allocated_after_step"]
    return (a[n - 1] - a[f - 1]) / (n - f)


def score_growth(t, g, rows):
    """rows: list of (kind, detail) appended for the scorecard."""
    file = t.get("file", "")
    fault = t.get("fault")
    lines = set()
    if fault:
        lines = {t["fault_line"], *t.get("kept_lines", [])}
    hit_rows, fp = [], []
    for s in g["sites"]:
        if lines and site_lines(s["site"], file) & lines:
            hit_rows.append(s)
        else:
            fp.append(s)
    out = {"false_positives": [f"{s['site']} {s.get('per_step', 0)} B/step" for s in fp]}
    if fault and t.get("kept_per_step_torch"):
        want = fault_rate(t)
        got = sum(s.get("per_step") or 0 for s in hit_rows)
        first = min((s.get("first_step") or 0 for s in hit_rows), default=None)
        ok = bool(hit_rows) and abs(got - want) <= 0.05 * want and first == t["from_step"]
        out.update(hit=ok, want_per_step=want, got_per_step=got, first_step=first,
                   want_first_step=t["from_step"])
    return out


def kept_at_exit(t):
    """The device bytes a fault keeps alive at exit: PyTorch's count of
    the fault's tensors at the loop's end, or for the outputs kept with
    their graphs (CPU tensors holding CUDA ones) what a step kept, times
    the faulty steps. The graph fault's list dies with main()."""
    fault = t.get("fault")
    if not fault or "alive_at_end" not in t:
        return 0
    if fault == "retain":
        return (t.get("kept_per_step_torch") or 0) * (t["steps_done"] - t["from_step"] + 1)
    return t["alive_at_end"].get("fault", 0)


def finished(t):
    return "oom" not in t and not t.get("crashed_in_step") and not t.get("crash_step")


def score_leaks(t, lk):
    file = t.get("file", "")
    lines = {t["fault_line"], *t.get("kept_lines", [])} if t.get("fault") else set()
    grew = (lk.get("grew") or {}).get("sites", [])
    hit_rows = [s for s in grew if site_lines(s["site"], file) & lines]
    fp = [f"{s['site']} {s['bytes']} B" for s in grew if s not in hit_rows]
    own = sum(s["bytes"] for s in (lk.get("own") or {}).get("sites", []))
    want = kept_at_exit(t)
    out = {"want": want, "got": sum(s["bytes"] for s in hit_rows), "own": own}
    if want and t["fault"] == "retain":
        # CPU tensors whose graphs hold CUDA ones: part of those graphs is
        # freed by the interpreter's teardown before the trace closes, so
        # PyTorch's count at the loop's end bounds what is alive at exit
        out["hit"] = bool(hit_rows) and 0 < out["got"] <= 1.05 * want
    elif want:
        out["hit"] = bool(hit_rows) and abs(out["got"] - want) <= 0.05 * want
    elif hit_rows:
        fp += [f"{s['site']} {s['bytes']} B" for s in hit_rows]
    if finished(t) and own:
        fp.append(f"the program's own: {own} B")
    out["false_positives"] = fp
    return out


def score_kinds(tool, path, t):
    s = report(tool, "summary", "--json", "--kinds-at", "step", path)
    got = {k["kind"]: k["bytes"] for k in s.get("kinds") or []}
    want = t["state_at_last_mark"]
    pairs = {"parameters": want["parameters"] + want.get("buffers", 0),
             "gradients": want["gradients"], "optimizer_state": want["optimizer_state"]}
    wrong = {k: (got.get(k), w) for k, w in pairs.items()
             if abs((got.get(k) or 0) - w) > 0.01 * max(w, 1)}
    return {"hit": not wrong, "wrong": wrong}


def score_trace(tool, path, t):
    g = report(tool, "growth", "--json", "--no-symbols", path)
    res = {"steps": {"want": expected_steps(t), "got": g.get("steps") or 0}}
    res["steps"]["hit"] = res["steps"]["want"] == res["steps"]["got"]
    res["growth"] = score_growth(t, g, [])
    # the labelled runs, which carry their function names: the older real
    # runs of tests/corpus carry none, and without them PyTorch's cuBLAS
    # workspace reads as the program's own
    if "allocated_after_step" in t or "rank" in t:
        res["leaks"] = score_leaks(t, report(tool, "leaks", "--json", path))
    if t.get("state_at_last_mark"):
        res["kinds"] = score_kinds(tool, path, t)
    if "oom" in t:
        s = report(tool, "summary", "--json", "--no-symbols", path)
        ev = s.get("oom_events") or []
        want = t["oom"].get("requested_approx", 0)
        got = ev[0].get("size", 0) if ev else 0
        line = t["oom"].get("line")
        at = site_lines(ev[0].get("site", ""), t.get("file", "")) if ev else set()
        # what whatif says each setting would have done with the same
        # requests, against the program run again under that setting
        said = {w["policy"]: w["fits"] for w in (ev[0].get("whatif") or [])} if ev else {}
        reruns = t.get("oom_reruns", {}).get("fits", {})
        wrong = [k for k, fits in reruns.items()
                 if said.get("pytorch" + (":" + k if k else "")) != fits]
        res["oom"] = {"hit": bool(ev) and abs(got - want) <= 0.01 * want and line in at and
                      not wrong, "want": want, "got": got, "want_line": line,
                      "site": ev[0].get("site") if ev else None,
                      "whatif_wrong": wrong, "whatif_checked": len(reruns)}
    return res


def scorecard(results, truths):
    card = {"traces": len(results)}
    steps = [r["steps"]["hit"] for r in results.values()]
    card["steps_exact"] = sum(steps)
    card["steps_total"] = len(steps)
    clean = [n for n in results if not truths[n].get("fault")]
    card["clean_runs"] = len(clean)
    card["clean_runs_with_false_growth"] = sum(
        1 for n in clean if results[n]["growth"]["false_positives"])
    faults = [n for n in results if truths[n].get("fault")]
    hits = sum(1 for n in faults if results[n]["growth"].get("hit"))
    fp = sum(len(results[n]["growth"]["false_positives"]) for n in results)
    card["growth_faults"] = len(faults)
    card["growth_hits"] = hits
    card["growth_false_positives"] = fp
    card["growth_recall"] = round(hits / len(faults), 3) if faults else None
    card["growth_precision"] = round(hits / (hits + fp), 3) if hits + fp else None
    by_kind = {}
    for n in faults:
        k = truths[n]["fault"]
        h, c = by_kind.get(k, (0, 0))
        by_kind[k] = (h + bool(results[n]["growth"].get("hit")), c + 1)
    card["growth_recall_by_kind"] = {k: f"{h}/{c}" for k, (h, c) in sorted(by_kind.items())}
    leaks = [n for n in results if "leaks" in results[n]]
    lf = [n for n in leaks if "hit" in results[n]["leaks"]]
    card["leaks_faults"] = len(lf)
    card["leaks_hits"] = sum(1 for n in lf if results[n]["leaks"]["hit"])
    card["leaks_false_positives"] = sum(len(results[n]["leaks"]["false_positives"])
                                        for n in leaks)
    card["clean_runs_with_a_leak"] = sum(1 for n in leaks if not truths[n].get("fault") and
                                         results[n]["leaks"]["false_positives"])
    kinds = [r["kinds"]["hit"] for r in results.values() if "kinds" in r]
    card["kinds_hits"] = sum(kinds)
    card["kinds_total"] = len(kinds)
    ooms = [r["oom"]["hit"] for r in results.values() if "oom" in r]
    card["oom_hits"] = sum(ooms)
    card["oom_total"] = len(ooms)
    card["oom_whatif_checked"] = sum(r["oom"]["whatif_checked"] for r in results.values()
                                     if "oom" in r)
    return card


# scores where higher is better; a floor holds each
HIGHER = ["steps_exact", "growth_hits", "oom_hits", "oom_whatif_checked", "leaks_hits",
          "kinds_hits"]
LOWER = ["clean_runs_with_false_growth", "growth_false_positives", "leaks_false_positives",
         "clean_runs_with_a_leak"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", default=os.path.join(ROOT, "build", "gpumemreport"))
    ap.add_argument("--corpus", action="append",
                    help="a folder of NAME.gmt.xz and NAME.truth.json (default: tests/corpus/verdicts"
                         " and tests/corpus)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--floor")
    ap.add_argument("--trace", action="append", default=[])
    a = ap.parse_args()
    dirs = a.corpus or [os.path.join(ROOT, "tests", "corpus", "verdicts"),
                        os.path.join(ROOT, "tests", "corpus")]
    where = {}
    for d in dirs:
        for f in sorted(os.listdir(d)):
            if f.endswith(".gmt.xz"):
                where.setdefault(f[:-len(".gmt.xz")], d)
    names = sorted(n for n in where if not a.trace or n in a.trace)
    results, truths = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            try:
                with open(os.path.join(where[n], n + ".truth.json")) as f:
                    truths[n] = json.load(f)
                path = os.path.join(tmp, n + ".gmt")
                with lzma.open(os.path.join(where[n], n + ".gmt.xz")) as f, open(path, "wb") as o:
                    o.write(f.read())
                results[n] = score_trace(a.report, path, truths[n])
                os.unlink(path)
            except (OSError, ValueError, RuntimeError) as e:
                print(f"score-verdicts: {n}: {e}", file=sys.stderr)
                return 2
    card = scorecard(results, truths)
    if a.json:
        print(json.dumps({"scorecard": card, "traces": results}, indent=1, sort_keys=True))
    else:
        for n, r in results.items():
            g = r["growth"]
            line = f"{n:22} steps {r['steps']['got']:>3}/{r['steps']['want']:<3}" + \
                   ("" if r["steps"]["hit"] else " MISS")
            if "hit" in g:
                line += "  growth %s %.0f/%.0f B/step from %s/%s" % (
                    "hit " if g["hit"] else "MISS", g["got_per_step"], g["want_per_step"],
                    g["first_step"], g["want_first_step"])
            if g["false_positives"]:
                line += "  FALSE: " + "; ".join(g["false_positives"])
            lk = r.get("leaks")
            if lk and "hit" in lk:
                line += "  leaks %s %d/%d B" % ("hit " if lk["hit"] else "MISS", lk["got"],
                                                lk["want"])
            if lk and lk["false_positives"]:
                line += "  LEAK FALSE: " + "; ".join(lk["false_positives"])
            if "kinds" in r:
                line += "  kinds " + ("hit" if r["kinds"]["hit"] else
                                      "MISS %s" % r["kinds"]["wrong"])
            if "oom" in r:
                line += "  oom %s %d/%d" % ("hit" if r["oom"]["hit"] else "MISS",
                                            r["oom"]["got"], r["oom"]["want"])
            print(line)
        print(json.dumps(card, indent=1, sort_keys=True))
    if a.floor:
        with open(a.floor) as f:
            floor = json.load(f)
        worse = [k for k in HIGHER if card.get(k, 0) < floor.get(k, 0)]
        worse += [k for k in LOWER if card.get(k, 0) > floor.get(k, 0)]
        if worse:
            print("score-verdicts: below the floor: " + ", ".join(
                f"{k} {card.get(k)} (floor {floor.get(k)})" for k in worse), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
