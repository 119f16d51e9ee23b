#!/bin/sh
# scripts/bench-html.sh [EVENTS] [THREADS] - what `gpumemreport html` costs
# on a long run, and what it costs the browser that opens the page.
#
# Generates a trace of EVENTS events (default 10M) from THREADS recording
# threads (default 1) with tests/bench/gen_trace.c, then measures, RUNS
# times each (default 3, the median printed): the time and peak memory
# (max RSS) of `gpumemreport html --no-symbols` (the synthetic module does
# not exist), the page's size, and the time Debian's headless Chromium
# takes from navigation until the page has drawn everything
# (tests/browser/check-html.js --no-interact: load, JSON.parse, the
# timelines and flame graphs drawn). Prints figures; asserts nothing.
# Builds into BUILD (default build-bench-html); needs scripts/install-deps.sh
# for chromium and tests/browser/node_modules.
set -eu
cd "$(dirname "$0")/.."
events=${1:-10000000}
threads=${2:-1}
build=${BUILD:-build-bench-html}
runs=${RUNS:-3}
make -s O="$build" "$build/gpumemreport" "$build/tests/gen_trace"
dir=$(mktemp -d "${TMPDIR:-/tmp}/bench-html.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$build/tests/gen_trace" "$events" "$dir/t.gmt" "$threads"
echo "trace: $events events, $(du -m "$dir/t.gmt" | cut -f1) MiB"
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
times="" rss=0
for run in $(seq "$runs"); do
    /usr/bin/time -f "%e %M" -o "$dir/time" "$build/gpumemreport" html --no-symbols \
        -o "$dir/t.html" "$dir/t.gmt"
    set -- $(cat "$dir/time")
    times="$times $1"
    [ "$2" -gt "$rss" ] && rss=$2
done
echo "gpumemreport html: median $(echo $times | median) s of $runs (${times# }), max RSS $((rss / 1024)) MiB"
echo "page: $(wc -c < "$dir/t.html") bytes ($(du -k "$dir/t.html" | cut -f1) KiB)"
loads=""
for run in $(seq "$runs"); do
    ms=$(node tests/browser/check-html.js --no-interact "$dir/t.html" |
         python3 -c 'import json,sys; d=json.load(sys.stdin); assert not d["console"] and not d["page_errors"], d; print(d["load_ms"])')
    loads="$loads $ms"
done
echo "headless chromium, load to drawn: median $(echo $loads | median) ms of $runs (${loads# })"
