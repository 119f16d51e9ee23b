#!/bin/bash
# tests/gpu/gpu-xfree.sh [BUILD_DIR] - the pool's two unsafe frees on a real
# GPU (a cross-device cudaFree, cudaFreeAsync of pool blocks).
#
# Run from anywhere on a machine with NVIDIA GPUs (two for the cross-device
# cases) and nvcc, after `make` (or with a bundle from scripts/gpu-bundle.sh).
#  1. builds tests/gpu/free_semantics.cu and tests/gpu/xfree_stress.cu with
#     `nvcc -O2 -arch=sm_90 -cudart shared` into BUILD_DIR (default
#     build/gpu);
#  2. runs free_semantics: which device a real cudaFree waits for;
#  3. runs xfree_stress in each mode (xdev-managed, xdev-async, xdev-malloc,
#     freeasync) without the library (the baseline: the real runtime) and
#     under LD_PRELOAD of the library, each trace written into a temp dir;
#  4. reads one trace back with `gpumemreport summary`.
# Prints a table and exits non-zero if a traced run corrupted memory,
# failed or wrote no trace, if an untraced run did (the baseline: then the
# test or the runtime is wrong, not the pool), if a program failed to
# build, or if the trace did not read. free_semantics only measures: a
# CUDA failure there is a WARN line.
#
# Environment:
#   GMT_BUNDLE=DIR   take the library and report tool from a bundle
#                    (scripts/gpu-bundle.sh; for hosts without libunwind);
#                    otherwise build/libgpumemtrace.so and build/gpumemreport
#   GMT_LIB, GPUMEMREPORT   the library / report tool, explicitly
#   XFREE_ITERS, XFREE_SPIN_US   xfree_stress's iterations (300) and each
#                    slow kernel's spin (5000 us)
#   OUT=DIR          logs and summary (default /tmp/gmt-xfree)
#   NVCC             the compiler (default nvcc)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BD=${1:-build/gpu}
OUT=${OUT:-/tmp/gmt-xfree}
NVCC=${NVCC:-nvcc}
if [ -n "${GMT_BUNDLE:-}" ]; then
    B=$(cd "$GMT_BUNDLE" && pwd) || exit 1
    LIB=${GMT_LIB:-$B/libgpumemtrace.so}
    REPORT=${GPUMEMREPORT:-$B/gpumemreport}
else
    LIB=${GMT_LIB:-$ROOT/build/libgpumemtrace.so}
    REPORT=${GPUMEMREPORT:-$ROOT/build/gpumemreport}
fi
# the report tool finds libdw and friends next to itself in a bundle
REPORT_LD=$(dirname "$REPORT")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ITERS=${XFREE_ITERS:-300}
SPIN=${XFREE_SPIN_US:-5000}
MODES="xdev-managed xdev-async xdev-malloc freeasync same-async"
mkdir -p "$BD" "$OUT" || exit 1
BD=$(cd "$BD" && pwd)
T=$(mktemp -d /tmp/gmt-xfree.XXXXXX) || exit 1
: >"$OUT/summary.txt"
: >"$OUT/checks.log"
fail=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
log() { # NAME FILE: append FILE to the checks log under NAME
    { echo "==== $1"; cat "$2"; } >>"$OUT/checks.log"
}

say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
        sed 's/^/gpu: /' | tee -a "$OUT/summary.txt"
fi
say "commit: ${GMT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
say "nvcc: $("$NVCC" --version 2>/dev/null | tail -n 1)"
say "library: $LIB"
say "traces: $T"

# ---- build -------------------------------------------------------------------
for p in free_semantics xfree_stress; do
    if ! "$NVCC" -O2 -arch=sm_90 -cudart shared -o "$BD/$p" "tests/gpu/$p.cu" >"$T/nvcc-$p.log" 2>&1; then
        say "FAIL build $p: $(tail -n 3 "$T/nvcc-$p.log" | tr '\n' ' ')"
        log "nvcc $p" "$T/nvcc-$p.log"
        fail=1
    fi
done
if [ ! -x "$BD/free_semantics" ] || [ ! -x "$BD/xfree_stress" ]; then
    say "result: FAIL (build)"
    exit 1
fi
# A library the loader cannot load is skipped with a warning and the
# program runs untraced: a false pass. Refuse it here (and check below
# that every traced run wrote its trace).
if [ ! -r "$LIB" ]; then
    say "FAIL library: $LIB not found (run make, or set GMT_BUNDLE)"
    say "result: FAIL"
    exit 1
fi
if ldd "$LIB" 2>&1 | grep -q "not found"; then
    say "FAIL library: $(ldd "$LIB" 2>&1 | grep "not found" | tr '\n' ' ') (use GMT_BUNDLE from scripts/gpu-bundle.sh)"
    say "result: FAIL"
    exit 1
fi

# ---- 1. which device a real cudaFree waits for --------------------------------
if timeout 300 "$BD/free_semantics" >"$T/free_semantics.out" 2>&1; then
    say "PASS free_semantics:"
else
    # a measurement, not a check of the library: reported, not failed
    say "WARN free_semantics (exit $?: a CUDA call failed, see error= below):"
fi
sed 's/^/  /' "$T/free_semantics.out" | tee -a "$OUT/summary.txt"
log free_semantics "$T/free_semantics.out"

# ---- 2. the stress, untraced and traced ------------------------------------------
# field LINE KEY: the value of KEY=... in LINE ("-" if absent)
field() {
    local v
    v=$(printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1)
    echo "${v:--}"
}
rows=()
trace_ok=""
for mode in $MODES; do
    for how in untraced traced; do
        out=$T/$mode-$how.out
        gmt=$T/xfree-$mode.gmt
        if [ "$how" = traced ]; then
            LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=$gmt \
                timeout 300 "$BD/xfree_stress" "$mode" "$ITERS" "$SPIN" >"$out" 2>&1
        else
            timeout 300 "$BD/xfree_stress" "$mode" "$ITERS" "$SPIN" >"$out" 2>&1
        fi
        rc=$?
        log "xfree_stress $mode $how (exit $rc)" "$out"
        line=$(grep "^xfree_stress $mode " "$out" | tail -n 1)
        verdict=ok
        if printf '%s\n' "$line" | grep -q SKIP; then
            verdict=SKIP
        elif [ $rc -ne 0 ] || [ -z "$line" ]; then
            case $rc in
            1) verdict=CORRUPTED ;;
            124) verdict="TIMEOUT" ;;
            *) verdict="FAILED(exit $rc)" ;;
            esac
            fail=1
        elif [ "$(field "$line" corrupted)" != 0 ]; then
            verdict=CORRUPTED
            fail=1
        fi
        if [ "$how" = traced ] && [ "$verdict" != SKIP ]; then
            if [ ! -s "$gmt" ]; then
                verdict="$verdict,NO-TRACE"
                fail=1
            elif [ -z "$trace_ok" ] && [ "$verdict" = ok ]; then
                trace_ok=$gmt
            fi
        fi
        [ "$how" = untraced ] && [ "$verdict" != ok ] && [ "$verdict" != SKIP ] &&
            verdict="$verdict(baseline)"
        rows+=("$(printf '%-13s %-9s %6s %7s %9s %7s %6s  %s' "$mode" "$how" \
            "$(field "$line" iterations)" "$(field "$line" reused)" \
            "$(field "$line" corrupted)" "$(field "$line" window)" \
            "$(field "$line" exact)" "$verdict")")
        if [ "$verdict" != ok ] && [ "$verdict" != SKIP ]; then
            sed 's/^/    /' "$out" | tail -n 5 | tee -a "$OUT/summary.txt"
        fi
    done
done

# ---- 3. a trace reads back -----------------------------------------------------
if [ -n "$trace_ok" ]; then
    if LD_LIBRARY_PATH=$REPORT_LD "$REPORT" summary "$trace_ok" >"$T/summary.out" 2>&1; then
        say "PASS trace reads: gpumemreport summary $(basename "$trace_ok") (exit 0)"
    else
        say "FAIL trace reads: gpumemreport summary $(basename "$trace_ok"): $(tail -n 3 "$T/summary.out" | tr '\n' ' ')"
        fail=1
    fi
    log "gpumemreport summary $trace_ok" "$T/summary.out"
else
    say "FAIL trace reads: no traced run finished cleanly with a trace"
    fail=1
fi

say ""
say "xfree_stress: iterations=$ITERS spin_us=$SPIN (window: iterations with a slow kernel"
say "still running after the faulty free; exact: reused blocks at the very address)"
say "$(printf '%-13s %-9s %6s %7s %9s %7s %6s  %s' mode run iters reused corrupted window exact verdict)"
for r in "${rows[@]}"; do
    say "$r"
done
say "logs: $OUT/checks.log"
say "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
