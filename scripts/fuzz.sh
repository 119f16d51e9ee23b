#!/bin/sh
# scripts/fuzz.sh [SECONDS] - fuzz the trace reader with libFuzzer.
#
# Builds tests/fuzz/fuzz_reader.c with clang's fuzzer, address and
# undefined-behaviour sanitizers into build/fuzz/, seeds the corpus
# (tests/fuzz/corpus) with small traces made by the test programs, and
# runs for SECONDS (default 1800). New inputs that add coverage are kept
# in the corpus; crashes land in build/fuzz/ as crash-*.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-1800}
out=build/fuzz
mkdir -p "$out" tests/fuzz/corpus
make -s tests
# -fwrapv as the report tool is built (sums over hostile sizes wrap)
clang -std=c11 -D_GNU_SOURCE -g -O1 -fwrapv -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -Ipreload -Ireport -o "$out/fuzz_reader" \
    tests/fuzz/fuzz_reader.c report/reader.c report/defs.c report/output.c \
    report/replay.c report/poolview.c
if [ -z "$(ls tests/fuzz/corpus)" ]; then
    seeds=$(mktemp -d)
    for p in hello stacks errstate lifecycle; do
        (cd "$seeds" && GPUMEMTRACE_CHUNK_KB=4 GPUMEMTRACE_OUTPUT="$p.gmt" \
            LD_PRELOAD="$OLDPWD/build/libgpumemtrace.so" "$OLDPWD/build/tests/$p" >/dev/null 2>&1) || true
    done
    cp "$seeds"/*.gmt tests/fuzz/corpus/ 2>/dev/null || true
    rm -rf "$seeds"
fi
echo "corpus: $(ls tests/fuzz/corpus | wc -l) inputs; fuzzing for ${secs}s"
"$out/fuzz_reader" -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$out/" tests/fuzz/corpus
echo "corpus after: $(ls tests/fuzz/corpus | wc -l) inputs"
