#!/bin/bash
# tests/gpu/gpu-corpus-live.sh [BUNDLE] [OUTDIR] - record the what-if live
# corpus on a GPU: the allocation streams of real models with PyTorch's
# cache off (PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is a
# cudaMalloc, which the pool serves), as the pool sees them in a run of
# STEPS steps (default 10: its placement drifts over steps, which the
# 3-step traces of tests/gpu/gpu-whatif.sh do not show).
#
# For each model (tests/gpu/torch_models.py; LIVE_MODELS overrides, "name
# args;..."): one traced run under the pool, and one untraced run with
# PyTorch's caching allocator (its max_memory_reserved: the reference).
# Writes OUTDIR/live-NAME.gmt.xz (tests/corpus/ takes them as they are),
# OUTDIR/NAME-torch.json and a whatif table (ideal, pytorch, gmt-pool) of
# each trace in OUTDIR/whatif.txt. Exit 1 if a run failed.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-corpus-out}
STEPS=${STEPS:-10}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B"
IFS=';' read -r -a MODELS <<< "${LIVE_MODELS:-gpt2 --bf16;timm;gpt2-infer;timm-infer;tv-vit --bf16;bert --bf16;llama --bf16;effnet --bf16}"
fail=0
for m in "${MODELS[@]}"; do
    name=${m%% *}
    t=$O/live-$name.gmt
    rm -f "$t" "$t.xz"
    env PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD="$B/libgpumemtrace.so" \
        GPUMEMTRACE_OUTPUT="$t" python3 tests/gpu/torch_models.py $m --steps "$STEPS" \
        > "$O/$name-traced.json" 2> "$O/$name-traced.err" || { echo "FAIL traced $name"; fail=1; }
    python3 tests/gpu/torch_models.py $m --steps "$STEPS" > "$O/$name-torch.json" \
        2> "$O/$name-torch.err" || { echo "FAIL untraced $name"; fail=1; }
    [ -s "$t" ] || continue
    { echo "== $name ($m, $STEPS steps)"
      "$B/gpumemreport" whatif --no-symbols --policy ideal --policy pytorch --policy gmt-pool "$t"
      echo "PyTorch's own max_memory_reserved: $(python3 -c 'import json,sys
print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["max_memory_reserved"])' "$O/$name-torch.json" 2>&1)"
    } >> "$O/whatif.txt" 2>&1
    xz -9 "$t"
done
exit $fail
