#!/bin/bash
# tests/gpu/gpu-whatif.sh [BUNDLE] [OUTDIR] - what-if on the GPU: does
# `gpumemreport whatif` predict PyTorch's reserved peak under other
# PYTORCH_CUDA_ALLOC_CONF settings from one trace?
#
# For each model (tests/gpu/torch_models.py: GPT-2 bf16, resnet50 fp32,
# the TransformerEncoder fp32, 3 training steps each; or WHATIF_MODELS): one traced run with
# the default allocator settings (the bridge records PyTorch's blocks),
# then one untraced run per setting, which reports PyTorch's own
# torch.cuda.max_memory_reserved(); whatif replays the trace's requests
# under each setting. Prints predicted against real, the error, and
# whether the best setting predicted is the best real one; writes
# OUTDIR/whatif.json. Exit 1 if a run failed (not if a prediction is off:
# the figures are the result).
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-whatif-out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B"
CONFS=("" "expandable_segments:True" "max_split_size_mb:128" "roundup_power2_divisions:4"
       "max_split_size_mb:64,roundup_power2_divisions:8")
# WHATIF_MODELS: "name args;name args;..." (tests/gpu/torch_models.py's
# workloads), default the three training runs
IFS=';' read -r -a MODELS <<< "${WHATIF_MODELS:-gpt2 --bf16;timm;transformer}"
fail=0
for m in "${MODELS[@]}"; do
    name=${m%% *}
    env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/$name.gmt" \
        GPUMEMTRACE_CACHE="$O/cache" python3 tests/gpu/torch_models.py $m --steps 3 \
        > "$O/$name-traced.json" 2> "$O/$name-traced.err" || { echo "FAIL traced $name"; fail=1; }
    for i in "${!CONFS[@]}"; do
        env PYTORCH_CUDA_ALLOC_CONF="${CONFS[$i]}" python3 tests/gpu/torch_models.py $m --steps 3 \
            > "$O/$name-conf$i.json" 2> "$O/$name-conf$i.err" || { echo "FAIL $name conf $i"; fail=1; }
    done
    args=()
    for c in "${CONFS[@]}"; do args+=(--policy "pytorch${c:+:$c}"); done
    "$B/gpumemreport" whatif --json --no-symbols "${args[@]}" "$O/$name.gmt" > "$O/$name-whatif.json" \
        2> "$O/$name-whatif.err" || { echo "FAIL whatif $name: $(head -c 300 "$O/$name-whatif.err")"; fail=1; }
done
python3 - "$O" "${#CONFS[@]}" "${CONFS[@]}" "${MODELS[@]%% *}" <<'PY'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
confs = sys.argv[3:3 + n]
models = sys.argv[3 + n:]
rows = []
def last_json(path):
    with open(path) as f:
        return json.loads([l for l in f.read().splitlines() if l.startswith("{")][-1])
for name in models:
    try:
        w = json.load(open(os.path.join(out, f"{name}-whatif.json")))
        traced = last_json(os.path.join(out, f"{name}-traced.json"))
    except Exception as e:
        print(f"{name}: no figures ({e})")
        continue
    t = w["traces"][0] if "traces" in w else w
    by = {p["policy"]: p for p in t["policies"] if p["device"] == 0}
    pols = [by["pytorch" + (":" + c if c else "")] for c in confs]
    real = []
    for i, c in enumerate(confs):
        r = last_json(os.path.join(out, f"{name}-conf{i}.json"))
        p = pols[i]
        real.append(r["max_memory_reserved"])
        err = (p["peak_reserved"] - r["max_memory_reserved"]) / r["max_memory_reserved"]
        rows.append({"model": name, "conf": c or "(default)", "predicted": p["peak_reserved"],
                     "real": r["max_memory_reserved"], "error": err,
                     "traced_default_real": traced["max_memory_reserved"]})
        print(f"{name:12s} {c or '(default)':48s} predicted {p['peak_reserved']:>14,} "
              f"real {r['max_memory_reserved']:>14,}  {100 * err:+6.2f}%")
    pred_best = min(range(n), key=lambda i: pols[i]["peak_reserved"])
    real_best = min(range(n), key=lambda i: real[i])
    print(f"{name}: best predicted {confs[pred_best] or '(default)'}, best real "
          f"{confs[real_best] or '(default)'}: {'AGREE' if pred_best == real_best else 'DIFFER'}; "
          f"the traced default run reserved {traced['max_memory_reserved']:,}")
json.dump(rows, open(os.path.join(out, "whatif.json"), "w"), indent=1)
PY
exit $fail
