#!/bin/sh
# scripts/bench-report.sh [EVENTS] [THREADS] - how fast gpumemreport reads.
#
# Generates a trace of EVENTS events (default 100M) from THREADS recording
# threads (default 1; traces of training loops are dominated by one or two
# threads) with tests/bench/gen_trace.c, then times `summary` and `peak`
# (symbolization off: the synthetic module does not exist) and `info`, and
# reports events per second and peak memory (max RSS) of each. Needs
# `make tests`; writes the trace to a temporary file it removes.
set -eu
cd "$(dirname "$0")/.."
events=${1:-100000000}
threads=${2:-1}
make -s all build/tests/gen_trace
trace=$(mktemp -u "${TMPDIR:-/tmp}/bench-report.XXXXXX.gmt")
trap 'rm -f "$trace"' EXIT
build/tests/gen_trace "$events" "$trace" "$threads"
for cmd in "info" "summary --no-symbols" "peak --no-symbols"; do
    for run in 1 2 3; do
        /usr/bin/time -f "%e %M" -o /tmp/bench-report.time \
            build/gpumemreport $cmd "$trace" >/dev/null
        set -- $(cat /tmp/bench-report.time)
        echo "$cmd: $1 s, $(awk -v e="$events" -v s="$1" 'BEGIN{printf "%.1f", e/s/1e6}') M events/s, max RSS $(($2 / 1024)) MiB"
    done
done
