#!/bin/sh
# scripts/bench-commands.sh BEFORE AFTER [EVENTS [THREADS]] - every
# gpumemreport command, two builds side by side, on one synthetic trace.
#
# BEFORE and AFTER are directories holding a gpumemreport (build
# directories, or copies). tests/bench/gen_trace writes a trace of EVENTS
# events (default 20M) from THREADS recording threads (default 1); each
# command then runs RUNS times (default 3) with each build, alternating,
# and the median wall time, its events per second and the larger max RSS
# are printed as a Markdown table (docs/benchmarks.md). Symbolization is
# off (--no-symbols): the synthetic trace's module does not exist. Output
# goes to /dev/null; html and export write to a temporary directory.
# Run under `taskset -c 0,1` to measure on two cores of a larger machine.
# ONLY="summary peak": those commands alone (names as in the table).
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [EVENTS [THREADS]]" >&2; exit 2; }
before=$1
after=$2
events=${3:-20000000}
threads=${4:-1}
runs=${RUNS:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
gen=${GEN_TRACE:-$root/build/tests/gen_trace}
[ -x "$gen" ] || make -s -C "$root" build/tests/gen_trace
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-commands.XXXXXX")
trap 'rm -rf "$work"' EXIT
trace=$work/t.gmt
"$gen" "$events" "$trace" "$threads" >/dev/null

# name|arguments (TRACE and OUT replaced)
cmds='summary|summary --no-symbols TRACE
peak|peak --no-symbols TRACE
frag|frag --no-symbols TRACE
timeline|timeline TRACE
leaks|leaks --no-symbols TRACE
growth|growth --no-symbols TRACE
phases|phases --no-symbols TRACE
transfers|transfers --no-symbols TRACE
flamegraph|flamegraph --no-symbols TRACE
info|info TRACE
dump|dump TRACE
diff|diff --no-symbols TRACE TRACE
check|check --max-peak 1TiB --no-symbols TRACE
ranks|ranks --no-symbols TRACE
whatif|whatif --no-symbols TRACE
html|html --no-symbols -o OUT/p.html TRACE
export memory-viz|export --format memory-viz --no-symbols -o OUT/x TRACE
export perfetto|export --format perfetto --no-symbols -o OUT/x TRACE
export speedscope|export --format speedscope --no-symbols -o OUT/x TRACE
export pprof|export --format pprof --no-symbols -o OUT/x TRACE'

# one timed run: "seconds maxrss_kib"
timed() {
    exe=$1
    shift
    args=$(echo "$*" | sed "s|TRACE|$trace|g; s|OUT|$work|g")
    # shellcheck disable=SC2086
    /usr/bin/time -f "%e %M" -o "$work/time" "$exe" $args >/dev/null 2>&1 </dev/null || true
    cat "$work/time" | tail -1
}

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| command | before: s, M ev/s, MiB | after: s, M ev/s, MiB | speed-up |"
echo "|---|---|---|---|"
echo "$cmds" | while IFS='|' read -r name args; do
    if [ -n "${ONLY:-}" ] && ! echo " $ONLY " | grep -q " $name "; then continue; fi
    tb="" ta="" rb=0 ra=0
    for i in $(seq "$runs"); do
        set -- $(timed "$before/gpumemreport" "$args")
        tb="$tb $1"
        if [ "$2" -gt "$rb" ]; then rb=$2; fi
        set -- $(timed "$after/gpumemreport" "$args")
        ta="$ta $1"
        if [ "$2" -gt "$ra" ]; then ra=$2; fi
    done
    mb=$(echo "$tb" | median)
    ma=$(echo "$ta" | median)
    awk -v n="$name" -v e="$events" -v b="$mb" -v a="$ma" -v rb="$rb" -v ra="$ra" 'BEGIN {
        eb = b > 0 ? e / b / 1e6 : 0; ea = a > 0 ? e / a / 1e6 : 0;
        printf "| `%s` | %.2f, %.1f, %d | %.2f, %.1f, %d | %.2fx |\n", n, b, eb, rb / 1024, a, ea, ra / 1024, (a > 0 ? b / a : 0) }'
done
