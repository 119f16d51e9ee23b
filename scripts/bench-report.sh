#!/bin/sh
# scripts/bench-report.sh [EVENTS] [THREADS] - how fast gpumemreport reads.
#
# Generates a trace of EVENTS events (default 20M) from THREADS recording
# threads (default 1; traces of training loops are dominated by one or two
# threads) with tests/bench/gen_trace.c, then times `info`, `summary`,
# `peak` and `frag` (symbolization off: the synthetic module does not
# exist), RUNS times each (default 3), and prints per command the median
# wall time, its events per second, the median CPU time (user + system:
# with decoding threads it exceeds the wall time) and the largest max RSS.
#
#   O=DIR          the build directory (default build)
#   BEFORE=BINARY  time this gpumemreport too, on the same trace (a build
#                  of an earlier commit), in turns with the new one
#   TRACE=FILE     read FILE, made if missing and then kept, instead of a
#                  temporary trace
#   PIN="taskset -c 0,1"  run each command under this (two cores of a
#                  larger machine)
#
# The temporary trace goes to TMPDIR (default /tmp) and is removed.
set -eu
cd "$(dirname "$0")/.."
events=${1:-20000000}
threads=${2:-1}
O=${O:-build}
make -s O="$O" all "$O/tests/gen_trace"
trace=${TRACE:-$(mktemp -u "${TMPDIR:-/tmp}/bench-report.XXXXXX.gmt")}
timing=$(mktemp "${TMPDIR:-/tmp}/bench-report.XXXXXX.time")
trap 'rm -f "$timing"; [ -n "${TRACE:-}" ] || rm -f "$trace"' EXIT
[ -e "$trace" ] || "$O/tests/gen_trace" "$events" "$trace" "$threads"
runs=${RUNS:-3}

median() {
    echo "$@" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

for cmd in "info" "summary --no-symbols" "peak --no-symbols" "frag --no-symbols"; do
    for bin in ${BEFORE:+"$BEFORE"} "$O/gpumemreport"; do
        walls="" cpus="" rss=0
        for run in $(seq "$runs"); do
            ${PIN:-} /usr/bin/time -f "%e %U %S %M" -o "$timing" \
                "$bin" $cmd "$trace" >/dev/null
            set -- $(cat "$timing")
            walls="$walls $1"
            cpus="$cpus $(awk -v u="$2" -v s="$3" 'BEGIN{print u + s}')"
            [ "$4" -gt "$rss" ] && rss=$4
        done
        # the median of the runs: a shared machine's timings spread widely
        wall=$(median $walls)
        echo "$cmd [$bin]: median $wall s of $runs (${walls# }), \
$(awk -v e="$events" -v s="$wall" 'BEGIN{printf "%.1f", e/s/1e6}') M events/s, \
CPU $(median $cpus) s, max RSS $((rss / 1024)) MiB"
    done
done
