#!/bin/sh
# tests/gpu/gpu-retention-train.sh [BUNDLE] [OUTDIR] - retention captures
# taken at a step and on growth, on real training loops
# (tests/gpu/retention_train.py: GPT-2 and timm's resnet18 in plain loops,
# GPT-2 under transformers' Trainer).
#
#   clean runs  --retention growth: no capture on growth may be taken (a
#               false one is a failure); the step time against the same
#               loop traced without retention, median of the steps after
#               the fifth, in the same run of this script (GPT-2 twice,
#               alternating); and what the hook adds to a step, one
#               torch.cuda.memory_allocated() call, timed
#   step:N      one capture after the N-th optimizer step: its walk's time,
#               the objects walked, and the host memory's high-water mark
#               before and after that step
#   leak runs   after each step the loop keeps an evaluation forward's
#               loss, with its graph, in `history`: the capture on growth is taken after the sixth
#               step (five rises in a row), and `growth` names `history`
#               as what holds the growing site's memory; the holder's
#               bytes equal what PyTorch's memory_allocated() saw freed
#               when the program let go of it
# RUNS="gpt2-step gpt2-leak" runs those alone (the names below); the
# checks of the others are skipped. Prints PASS/FAIL lines and figures;
# exits 1 on any failure.
set -u
cd "$(dirname "$0")/../.."
bundle=${1:-.gpubundle}
out=${2:-/tmp/gmt-retention-train}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0

# name, retention (- for none), model, mode, steps
run() {
    name=$1 ret=$2
    shift 2
    case " ${RUNS:-$name} " in *" $name "*) ;; *) return ;; esac
    rm -f "$out/$name.gmt"
    if [ "$ret" = - ]; then set -- -q -o "$out/$name.gmt" -- python3 tests/gpu/retention_train.py "$@"
    else set -- -q --retention "$ret" -o "$out/$name.gmt" -- python3 tests/gpu/retention_train.py "$@"
    fi
    if ! "$bundle/gpumemtrace" "$@" > "$out/$name.truth" 2> "$out/$name.err"; then
        echo "FAIL $name: the program failed"; tail -5 "$out/$name.err"; fail=1; return
    fi
    "$bundle/gpumemreport" retention --json --top 0 "$out/$name.gmt" > "$out/$name.ret.json" 2>> "$out/$name.err"
    "$bundle/gpumemreport" growth --json "$out/$name.gmt" > "$out/$name.growth.json" 2>> "$out/$name.err"
    "$bundle/gpumemreport" growth "$out/$name.gmt" > "$out/$name.growth.txt" 2>&1
    "$bundle/gpumemreport" retention "$out/$name.gmt" > "$out/$name.ret.txt" 2>&1
}

run gpt2-off - gpt2 clean 40
run gpt2-growth growth gpt2 clean 40
run gpt2-off2 - gpt2 clean 40
run gpt2-growth2 growth gpt2 clean 40
run gpt2-step step:20 gpt2 clean 40
run gpt2-leak growth gpt2 leak 12
run resnet-off - resnet clean 40
run resnet-growth growth resnet clean 40
run resnet-leak growth resnet leak 12
run trainer-step growth,step:5 trainer clean 30

RUNS=${RUNS:-} python3 - "$out" <<'EOF' || fail=1
import json, os, statistics, sys
out = sys.argv[1]
bad = False


def load(name):
    runs = os.environ.get("RUNS", "").split()
    if runs and name not in runs:
        print(f"skip {name}")
        return None
    try:
        truth = json.loads(open(os.path.join(out, name + ".truth")).read().strip().splitlines()[-1])
        ret = json.load(open(os.path.join(out, name + ".ret.json")))["traces"][0]
        growth = json.load(open(os.path.join(out, name + ".growth.json")))["traces"][0]
    except (OSError, ValueError, IndexError, KeyError) as e:
        global bad
        print(f"FAIL {name}: no results ({e})")
        bad = True
        return None
    return truth, ret, growth


def say(ok, text):
    global bad
    print(("PASS " if ok else "FAIL ") + text)
    bad |= not ok


def median_after(ms, k=5):
    return statistics.median(ms[k:])


for model in ("gpt2", "resnet", "gpt22"):
    off = load(model.replace("gpt22", "gpt2") + "-off" + ("2" if model == "gpt22" else ""))
    on = load(model.replace("gpt22", "gpt2") + "-growth" + ("2" if model == "gpt22" else ""))
    if not off or not on:
        continue  # load() said why
    print(f"  {model}: one torch.cuda.memory_allocated() {on[0]['memory_allocated_us']:.2f} us")
    growth_caps = [c for c in on[1]["captures"] if c["reason"].startswith("growth")]
    say(not growth_caps, f"{model} clean, --retention growth: no capture on growth "
        f"({len(growth_caps)} taken; armed: {on[1].get('why', 'captures')})")
    a, b = median_after(off[0]["step_ms"]), median_after(on[0]["step_ms"])
    print(f"  {model}: step {a:.2f} ms traced, {b:.2f} ms traced with --retention growth "
          f"({b / a:.3f}x)")

step = load("gpt2-step")
if step:
    truth, ret, _ = step
    caps = ret["captures"]
    ok = [c["reason"] for c in caps] == ["step 20"]
    say(ok, f"gpt2 --retention step:20: captures {[c['reason'] for c in caps]}")
    if caps:
        c = caps[0]
        hwm = truth["hwm_kib"]
        ms = truth["step_ms"]
        print(f"  capture: {c['objects']} objects walked in {c['seconds']:.3f} s, "
              f"{c['storages']} storages, {len(c['holders'])} holders; step 20 took "
              f"{ms[19]:.0f} ms (median {median_after(ms):.1f}); host high-water "
              f"{hwm[18]} -> {hwm[19]} KiB (+{hwm[19] - hwm[18]} KiB)")
        top = [("".join(h["chain"]), h["retained"]) for h in c["holders"] if h["parent"] < 0][:4]
        print(f"  top holders: {top}")

tr = load("trainer-step")
if tr:
    caps = [c["reason"] for c in tr[1]["captures"]]
    say("step 5" in caps and not any(r.startswith("growth") for r in caps),
        f"Trainer --retention growth,step:5: captures {caps}")

for model in ("gpt2", "resnet"):
    got = load(model + "-leak")
    if not got:
        continue
    truth, ret, growth = got
    caps = ret["captures"]
    reasons = [c["reason"] for c in caps]
    grew = [r for r in reasons if r.startswith("growth")]
    say(len(grew) == 1 and "to step 6" in grew[0],
        f"{model} leak: the capture on growth after step 6: {reasons}")
    drop = [c for c in caps if c["reason"] == "before drop"]
    if not drop:
        say(False, f"{model} leak: no capture before the drop")
        continue
    holders = {"".join(h["chain"]): h for h in drop[0]["holders"]}
    h = holders.get("__main__.history")
    freed = truth["freed"]["history"]
    say(h is not None and h["allocated"] == freed and h["retained"] <= freed,
        f"{model} leak: __main__.history allocated {h and h['allocated']} B, retained "
        f"{h and h['retained']} B; PyTorch freed {freed} B when the program let go of it")
    sites = growth.get("sites", [])
    if not sites:
        say(False, f"{model} leak: growth found no growing site")
        continue
    top = max(sites, key=lambda s: s.get("per_step", s.get("bytes_per_s", 0)))
    held = top.get("held_by", [])
    say(bool(held) and held[0]["chain"] == ["__main__.history"],
        f"{model} leak: the growing site {top['site'][:90]} held by "
        f"{[''.join(x['chain']) + ' ' + str(x['bytes']) for x in held]}")
sys.exit(1 if bad else 0)
EOF
[ $fail = 0 ] && echo "PASS gpu-retention-train" || echo "FAIL gpu-retention-train"
exit $fail
