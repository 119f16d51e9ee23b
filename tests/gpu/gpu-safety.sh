#!/bin/bash
# tests/gpu/gpu-safety.sh [BUNDLE] [OUTDIR] - the host-safety checks on a
# real GPU (PyTorch, nvcc; CuPy where present), untraced beside traced:
#  1. huge:    tests/progs/huge.c (nvcc -cudart shared): sizes no device has
#              (size_t)-1, within a rounding of 2^64, wrapping products,
#              just above the card) from every entry point - every line
#              traced equal to untraced;
#  2. idle:    tests/gpu/idle_give_torch.py, PyTorch's cache on and off:
#              the card filled and freed, torch.cuda.empty_cache(), then
#              the driver and CuPy each ask for half the card - served
#              traced as untraced;
#  3. bridge:  tests/gpu/bridge_model.py under the launcher with a fresh
#              bridge cache, the cached bridge then cut to half its size,
#              run again: rebuilt (the log says so), losses equal to the
#              untraced run's.
# Logs under OUTDIR (default gpu-safety-out); exit 1 if a check failed.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-safety-out}
mkdir -p "$O"
O=$(cd "$O" && pwd)
export LD_LIBRARY_PATH="$B"
fail=0
check() { # name, verdict
    if [ "$2" = ok ]; then echo "ok   $1"; else echo "FAIL $1: $2"; fail=1; fi
}
nvcc -O2 -cudart shared -Itests/progs -o "$O/huge" tests/progs/huge.c -lcuda -ldl \
    > "$O/nvcc.log" 2>&1 || { cat "$O/nvcc.log"; check huge "did not build"; }
if [ -x "$O/huge" ]; then
    "$O/huge" > "$O/huge.plain" 2>&1
    LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/huge.gmt" "$O/huge" \
        > "$O/huge.traced" 2>&1
    if cmp -s "$O/huge.plain" "$O/huge.traced" && grep -qx ok "$O/huge.traced"; then check huge ok
    else check huge "traced differs: $(diff "$O/huge.plain" "$O/huge.traced" | head -4)"; fi
fi
for mode in on off; do
    env=()
    [ $mode = off ] && env=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    env "${env[@]}" python3 tests/gpu/idle_give_torch.py > "$O/idle-$mode.plain" 2>&1
    env "${env[@]}" "$B/gpumemtrace" -o "$O/idle-$mode.gmt" -- python3 \
        tests/gpu/idle_give_torch.py > "$O/idle-$mode.traced" 2>"$O/idle-$mode.err"
    if cmp -s "$O/idle-$mode.plain" "$O/idle-$mode.traced" &&
        grep -qx ok "$O/idle-$mode.traced"; then check "idle, PyTorch's cache $mode" ok
    else check "idle, PyTorch's cache $mode" "$(paste -sd' ' "$O/idle-$mode.traced" | cut -c1-300)"; fi
done
C=$O/cache
rm -rf "$C" && mkdir -m 700 "$C"
python3 tests/gpu/bridge_model.py > "$O/bridge.plain" 2>&1
GPUMEMTRACE_CACHE=$C "$B/gpumemtrace" -o "$O/bridge1.gmt" -- python3 tests/gpu/bridge_model.py \
    > "$O/bridge1.out" 2> "$O/bridge1.err"
so=$(ls "$C"/torch-bridge-*.so 2>/dev/null | head -1)
if [ -z "$so" ]; then
    check bridge "no cached bridge after the first run: $(tail -2 "$O/bridge1.err")"
else
    truncate -s $(( $(stat -c %s "$so") / 2 )) "$so"
    GPUMEMTRACE_CACHE=$C "$B/gpumemtrace" -o "$O/bridge2.gmt" -- python3 \
        tests/gpu/bridge_model.py > "$O/bridge2.out" 2> "$O/bridge2.err"
    rc=$?
    if [ $rc = 0 ] && cmp -s "$O/bridge.plain" "$O/bridge2.out" &&
        cmp -s "$O/bridge.plain" "$O/bridge1.out"; then check "bridge cut short, rebuilt" ok
    else check "bridge cut short, rebuilt" "rc $rc; $(tail -3 "$O/bridge2.err")"; fi
    "$B/gpumemreport" info "$O/bridge2.gmt" > "$O/bridge2.info" 2>&1
    grep -i "bridge\|note" "$O/bridge2.err" "$O/bridge2.info" | head -8
fi
exit $fail
