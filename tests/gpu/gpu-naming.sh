#!/bin/bash
# tests/gpu/gpu-naming.sh [BUNDLE] [OUTDIR] - naming on the GPU: how the
# report names the bytes at the peak of real PyTorch programs (ops,
# autograd nodes under the line that called backward, layers inside
# transformers and timm). Traces tests/gpu/torch_models.py's leaf, gpt2
# and timm workloads with the bundle's library (PyTorch's allocator on,
# the bridge attached) and prints `gpumemreport peak --layers` of each,
# the leaf's peak as JSON, and the threads each trace saw.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-naming-out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B"
for w in "leaf" "gpt2 --bf16 --steps 2" "timm --bf16 --steps 2"; do
    name=${w%% *}
    # shellcheck disable=SC2086
    env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/$name.gmt" \
        GPUMEMTRACE_CACHE="$O/cache" python3 tests/gpu/torch_models.py $w > "$O/$name.out" 2>&1 ||
        { echo "FAIL $name: $(tail -3 "$O/$name.out")"; continue; }
    echo "== $name"
    "$B/gpumemreport" peak --layers --top 12 "$O/$name.gmt"
    "$B/gpumemreport" dump --no-stacks "$O/$name.gmt" | grep " thread " | head -8
done
echo "== leaf --json"
"$B/gpumemreport" peak --json "$O/leaf.gmt"
echo
# growth per step, steps found without markers: the graph-keeping loop
# and its fix (tests/gpu/graph_keep.py)
for v in keep detach; do
    flag=; [ $v = detach ] && flag=--detach
    env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/graph-$v.gmt" \
        GPUMEMTRACE_CACHE="$O/cache" python3 tests/gpu/graph_keep.py $flag > "$O/graph-$v.out" 2>&1
    echo "== graph_keep $v: $(tail -1 "$O/graph-$v.out")"
    "$B/gpumemreport" growth "$O/graph-$v.gmt"
done
