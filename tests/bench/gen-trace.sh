#!/bin/sh
# tests/bench/gen-trace.sh EVENTS OUT [THREADS [STACKS]] - write a large
# synthetic trace.
#
# tests/bench/gen_trace.c writes a valid trace directly (allocations from
# STACKS call stacks, default 200; frees, copies, sets, samples; 4 threads
# by default), fast
# enough for 100M events. For a trace recorded through the real library,
# run any test program under LD_PRELOAD instead (much slower to make).
set -eu
cd "$(dirname "$0")/../.."
make -s build/tests/gen_trace
exec build/tests/gen_trace "$@"
