#!/bin/bash
# tests/gpu/gpu-kinds.sh [BUNDLE] [OUTDIR] - memory by kind on the GPU: the
# summary's memory by kind against PyTorch's own MemTracker on the same
# process. Runs tests/gpu/kinds_memtracker.py (a real model's training
# steps inside MemTracker, which marks the trace at its peak) under the
# bundle's library, then compares `gpumemreport summary --json`'s kinds
# with the program's and MemTracker's figures (tests/gpu/kinds_compare.py
# says how). Prints PASS/FAIL lines; exits 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-kinds-out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B"
fail=0
for w in "gpt2 --bf16" "gpt2" "timm --bf16" "timm"; do
    name=$(echo "$w" | tr -d ' -')
    # shellcheck disable=SC2086
    env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/$name.gmt" \
        GPUMEMTRACE_CACHE="$O/cache" python3 tests/gpu/kinds_memtracker.py $w \
        > "$O/$name.json" 2> "$O/$name.err" ||
        { echo "FAIL $name: $(tail -3 "$O/$name.err")"; fail=1; continue; }
    for at in peak end memtracker-peak; do
        flag=; [ $at = peak ] || flag="--kinds-at $at"
        # shellcheck disable=SC2086
        "$B/gpumemreport" summary --json $flag "$O/$name.gmt" > "$O/$name.$at.json" ||
            { echo "FAIL $name: summary $flag"; fail=1; continue 2; }
    done
    echo "== $name"
    "$B/gpumemreport" summary --kinds-at memtracker-peak "$O/$name.gmt" | sed -n 1,30p
    python3 tests/gpu/kinds_compare.py "$name" "$O/$name.json" "$O/$name" || fail=1
done
exit $fail
