#!/bin/sh
# scripts/gen-trace.sh EVENTS OUT [THREADS] - write a large synthetic trace.
#
# tests/bench/gen_trace.c writes a valid trace directly (allocations from
# 200 sites, frees, copies, sets, samples; 4 threads by default), fast
# enough for 100M events. For a trace recorded through the real library,
# run any test program under LD_PRELOAD instead (much slower to make).
set -eu
cd "$(dirname "$0")/.."
make -s build/tests/gen_trace
exec build/tests/gen_trace "$@"
