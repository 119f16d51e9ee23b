#!/bin/sh
# scripts/bench-report.sh [EVENTS] [THREADS] - how fast gpumemreport reads.
#
# Generates a trace of EVENTS events (default 100M) from THREADS recording
# threads (default 1; traces of training loops are dominated by one or two
# threads) with tests/bench/gen_trace.c, then times `summary` and `peak`
# (symbolization off: the synthetic module does not exist) and `info`,
# RUNS times each (default 7), and reports the median's events per second
# and peak memory (max RSS). Writes the trace to a temporary file it
# removes.
set -eu
cd "$(dirname "$0")/.."
events=${1:-100000000}
threads=${2:-1}
make -s all build/tests/gen_trace
trace=$(mktemp -u "${TMPDIR:-/tmp}/bench-report.XXXXXX.gmt")
trap 'rm -f "$trace"' EXIT
build/tests/gen_trace "$events" "$trace" "$threads"
runs=${RUNS:-7}
for cmd in "info" "summary --no-symbols" "peak --no-symbols"; do
    times=""
    rss=0
    for run in $(seq "$runs"); do
        /usr/bin/time -f "%e %M" -o /tmp/bench-report.time \
            build/gpumemreport $cmd "$trace" >/dev/null
        set -- $(cat /tmp/bench-report.time)
        times="$times $1"
        [ "$2" -gt "$rss" ] && rss=$2
    done
    # the median of the runs: this VM's timings spread by +-15%
    med=$(echo $times | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$cmd: median $med s of $runs (${times# }), $(awk -v e="$events" -v s="$med" 'BEGIN{printf "%.1f", e/s/1e6}') M events/s, max RSS $((rss / 1024)) MiB"
done
