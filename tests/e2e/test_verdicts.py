"""The report's verdicts against the truth of real runs: the labelled
corpus of tests/corpus/verdicts/ (real models recorded on an H200 by
tests/gpu/gpu-verdict-corpus.sh, clean and with faults injected at a known
line, size and step; each truth file written by the program itself) and
the clean real runs of tests/corpus/, scored by scripts/score-verdicts.py.
The floor (tests/corpus/verdicts/floor.json) holds the scores: a change
that finds a step less, misses a fault or flags a clean run fails here."""
import json
import lzma
import os
import subprocess
import sys

from gmt import REPORT, expect, report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCORER = os.path.join(ROOT, "scripts", "score-verdicts.py")
CORPUS = os.path.join(ROOT, "tests", "corpus", "verdicts")


def score(*args):
    p = subprocess.run([sys.executable, SCORER, "--report", REPORT, "--json", *args],
                       capture_output=True, text=True, timeout=600)
    return p, (json.loads(p.stdout) if p.stdout.strip() else None)


def corpus_trace(name, folder=CORPUS):
    with lzma.open(os.path.join(folder, name + ".gmt.xz")) as f, open(name + ".gmt", "wb") as o:
        o.write(f.read())
    return name + ".gmt"


def test_verdicts_hold_their_floor():
    """Every score at least the floor's: no clean run with a growing site,
    every injected fault found at its line within 5% of its bytes per step
    from its first step, every loop's step count exact, the OOM's request
    and line named; at exit, every fault's bytes kept step after step and
    no clean run's memory called its own; memory by kind at a step's mark
    PyTorch's own count of parameters, gradients and optimizer state."""
    with open(os.path.join(CORPUS, "floor.json")) as f:
        floor = json.load(f)
    p, doc = score("--floor", os.path.join(CORPUS, "floor.json"))
    expect(p.returncode == 0 and doc, f"rc {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr}")
    card = doc["scorecard"]
    expect(card["clean_runs_with_false_growth"] == 0 and card["growth_false_positives"] == 0,
           f"false growth: {card}")
    expect(card["growth_hits"] == card["growth_faults"] == floor["growth_faults"], f"{card}")
    expect(card["steps_exact"] == card["steps_total"] == floor["steps_total"], f"{card}")
    expect(card["oom_hits"] == card["oom_total"] >= 1, f"{card}")
    expect(card["leaks_hits"] == card["leaks_faults"] == floor["leaks_faults"] and
           card["leaks_false_positives"] == 0 and card["clean_runs_with_a_leak"] == 0,
           f"leaks: {card}")
    expect(card["kinds_hits"] == card["kinds_total"] == floor["kinds_total"] >= 6,
           f"kinds: {card}")


def test_scorer_fails_below_the_floor():
    """The gate can fail: a floor above today's scores exits 1 naming the
    score."""
    with open(os.path.join(CORPUS, "floor.json")) as f:
        floor = json.load(f)
    floor["steps_exact"] += 1
    with open("floor.json", "w") as f:
        json.dump(floor, f)
    p, _ = score("--floor", "floor.json", "--trace", "list-gpt2")
    expect(p.returncode == 1 and "steps_exact" in p.stderr, f"rc {p.returncode}: {p.stderr}")


def test_layers_of_one_forward_are_not_steps():
    """One inference of a 12-block ViT, a T5 that crashed in its decoder
    after its 6 encoder layers, GPT-2 inference of 3 steps (6 blocks
    each): the blocks recur regularly, but inside one forward pass - no
    steps, and no growth said of what one pass builds."""
    for name, folder in [("single-vit-infer", CORPUS), ("crash-t5-layers", CORPUS),
                         ("gpt2-infer", os.path.join(ROOT, "tests", "corpus"))]:
        t = corpus_trace(name, folder)
        g = json.loads(report("growth", "--json", "--no-symbols", t).stdout)["traces"][0]
        expect(not g.get("steps") and g["sites"] == [] and g["unjudged"], f"{name}: {g}")
        text = report("growth", "--no-symbols", t).stdout
        expect("growth not judged: no steps" in text, text)
        os.unlink(t)


def test_kept_graph_found_whole():
    """backward(retain_graph=True) with each step's output kept: the input
    (4 KiB at the step's randn line) and the four activations the graph
    saves (16 KiB at the forward line), from step 3 on, 40 steps - both
    lines, their bytes per step to the byte, from step 3."""
    t = corpus_trace("retain-mlp")
    with open(os.path.join(CORPUS, "retain-mlp.truth.json")) as f:
        truth = json.load(f)
    g = json.loads(report("growth", "--json", "--no-symbols", t).stdout)["traces"][0]
    x, fwd = truth["kept_lines"][:2]
    got = sorted((s["site"].split(" > ")[0], s["per_step"], s["first_step"]) for s in g["sites"])
    want = sorted([(f"mlp.<locals>.step (verdict_corpus.py:{x})", 4096, 3),
                   (f"mlp.<locals>.step (verdict_corpus.py:{fwd})", 16384, 3)])
    expect(g["steps"] == 40 and got == want, f"{got}\nwant {want}")


def test_a_forward_that_ran_out_is_not_held_across_steps():
    """resnet50 ran out of memory in its first forward pass: what was live
    then (its activations, 137.8 GiB) was never given back and no backward
    call came after it - nothing shows what it was, and it was held across
    no step. Its kind is "other", not "held"; the parameters stay theirs."""
    t = corpus_trace("oom-resnet50")
    s = json.loads(report("summary", "--json", "--no-symbols", t).stdout)["traces"][0]
    kinds = {k["kind"]: k["bytes"] for k in s["oom_events"][0]["live_by_kind"]}
    expect(kinds["held"] == 0 and kinds["other"] > 137 * (1 << 30) and
           kinds["parameters"] == 102441032, f"{kinds}")


def leaks_of(name):
    t = corpus_trace(name)
    doc = json.loads(report("leaks", "--json", t).stdout)["traces"][0]
    text = report("leaks", t).stdout
    os.unlink(t)
    return doc, text


def test_what_a_crashed_step_held_is_not_a_leak():
    """GPT-2 raised an exception in step 7's forward: the 23.5 MiB its
    traceback held at exit were made in the last step - in use when the
    run ended, one line, not the program's own table; what the program
    made before its loop and never gave back (the 4 KiB input) is."""
    doc, text = leaks_of("crash-gpt2-mid")
    own = sum(s["bytes"] for s in doc["own"]["sites"])
    expect(doc["in_use_at_end"]["bytes"] > 23 << 20 and own == 4096 and
           doc["grew"]["sites"] == [], f"{doc['in_use_at_end']['bytes']} {own} {doc['grew']}")
    expect("in use when the run ended (not leaks: made in its last step" in text, text)


def test_a_tensor_grown_by_concatenation_leads_the_leaks():
    """A global grown by torch.cat every step is one block at exit, made
    in the last step - yet it is what grew: the table leads with it (the
    growth verdict's site), 10 MiB, the truth's bytes."""
    doc, text = leaks_of("global-bert")
    with open(os.path.join(CORPUS, "global-bert.truth.json")) as f:
        truth = json.load(f)
    rows = [(s["site"].split(" > ")[0], s["bytes"]) for s in doc["grew"]["sites"]]
    want = [(f"inject (verdict_corpus.py:{truth['fault_line']})", truth["alive_at_end"]["fault"])]
    expect(rows == want, f"{rows}\nwant {want}")
    first = text.splitlines()[1]
    expect(first.startswith("  kept step after step"), text)


def test_a_clean_runs_state_and_workspaces_are_no_leak():
    """transformers' Trainer, run clean: at exit its model's parameters
    and AdamW's state are alive (the Trainer holds them) and cuBLAS's
    workspaces are - PyTorch's own count of the first two, to the byte,
    one line each; the program's own table is empty."""
    doc, _ = leaks_of("clean-trainer")
    with open(os.path.join(CORPUS, "clean-trainer.truth.json")) as f:
        end = json.load(f)["alive_at_end"]
    st = doc["model_state"]
    expect(st["parameters"] == end["parameters"] + end["buffers"] and
           st["optimizer_state"] == end["optimizer_state"] and
           sum(s["bytes"] for s in doc["own"]["sites"]) == 0 and doc["grew"]["sites"] == [] and
           doc["workspaces"]["bytes"] > 0, f"{st} {doc['own']} {doc['workspaces']['bytes']}")


def test_check_says_why_a_run_has_no_steps():
    """A growth-per-step gate on one ViT inference cannot judge it, and
    says why as growth does: what recurs is the model's blocks inside one
    forward pass - in the failing line and in --json."""
    t = corpus_trace("single-vit-infer")
    p = report("check", "--max-growth", "1MiB/step", t, check_rc=1)
    why = "what recurs is layers inside one forward pass, not a loop"
    expect(f"no steps found: growth per step cannot be judged ({why})" in p.stdout, p.stdout)
    doc = json.loads(report("check", "--json", "--max-growth", "1MiB/step", t,
                            check_rc=1).stdout)
    rows = [r for r in doc["checks"] if r.get("metric") == "growth_per_step"] or doc["checks"]
    expect(any(r.get("no_steps_why") == why for r in rows), doc)
    os.unlink(t)
