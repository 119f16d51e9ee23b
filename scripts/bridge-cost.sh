#!/bin/sh
# scripts/bridge-cost.sh [ROUNDS] - what one PyTorch block costs under the
# bridge, on a GPU machine (docs/benchmarks.md): builds
# tests/gpu/bridge_cost.cpp against the installed torch, then runs
# tests/gpu/bridge_cost.py (a loop of torch.empty on the GPU) untraced,
# with a no-op trace tracker, and traced in several configurations,
# interleaved ROUNDS times (default 3). Needs .gpubundle/ (gpu-bundle.sh).
set -eu
rounds=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$root/.gpubundle/libgpumemtrace.so
torch=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -std=c++17 -O2 -fPIC -shared -w -I"$torch/include" -I"${CUDA_HOME:-/usr/local/cuda}/include" \
    "$root/tests/gpu/bridge_cost.cpp" -o "$tmp/bc.so" -L"$torch/lib" -Wl,-rpath,"$torch/lib" \
    -lc10_cuda -lc10
app="$root/tests/gpu/bridge_cost.py"
i=0
while [ "$i" -lt "$rounds" ]; do
    echo "untraced $(python3 "$app" "$tmp/bc.so" --n 100000)"
    echo "noop-tracker $(python3 "$app" "$tmp/bc.so" --noop --n 100000)"
    for c in GPUMEMTRACE_FRAMEWORK=0 "GPUMEMTRACE_PYTHON=0 GPUMEMTRACE_STACK_DEPTH=0" \
             GPUMEMTRACE_PYTHON=0 GPUMEMTRACE_STACK_DEPTH=0 GPUMEMTRACE_VERBOSE=0; do
        # shellcheck disable=SC2086
        echo "traced[$c] $(env GPUMEMTRACE_OUTPUT="$tmp/t.%p.gmt" GPUMEMTRACE_CACHE="$tmp/cache" \
            $c LD_PRELOAD="$lib" python3 "$app" "$tmp/bc.so" --n 100000 2>/dev/null | tail -1)"
        rm -f "$tmp"/t.*.gmt
    done
    i=$((i + 1))
done
