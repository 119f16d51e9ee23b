#!/bin/sh
# scripts/fuzz.sh [reader|commands|baseline] [SECONDS] - fuzz the report
# tool with libFuzzer. (`scripts/fuzz.sh SECONDS` fuzzes the reader;
# SECONDS 0 builds the target and stops.)
#
#   reader    tests/fuzz/fuzz_reader.c: the trace reader, definitions,
#             replay engine and frag pool view; corpus tests/fuzz/corpus
#   commands  tests/fuzz/fuzz_commands.c: every command in-process on the
#             input as a trace (text and --json); seeds tests/fuzz/corpus
#   baseline  tests/fuzz/fuzz_baseline.c: `check --baseline FILE`'s reader
#             (the strict JSON parser and the baseline schema); corpus
#             tests/fuzz/corpus_baseline
#
# Builds the target with clang's fuzzer, address and undefined-behaviour
# sanitizers into $O/fuzz/fuzz_TARGET (O: the build directory, as for make;
# default build) and runs it for SECONDS (default 1800). New inputs that
# add coverage are kept in the target's corpus directory (the commands
# target keeps its own, $O/fuzz/corpus_commands, seeded from
# tests/fuzz/corpus, which the reader target owns); crashes land in
# $O/fuzz/ as crash-* ($O/fuzz/TARGET-crash-* for the new targets). The
# sources are the Makefile's lists, the ones its smoke runs link.
set -eu
cd "$(dirname "$0")/.."
target=reader
case "${1:-}" in
reader|commands|baseline) target=$1; shift ;;
esac
secs=${1:-1800}
O=${O:-build}
out=$O/fuzz
mkdir -p "$out" tests/fuzz/corpus
seed_progs="hello stacks errstate lifecycle"
make -s O="$O" "$O/report/html_page.c" # html's page, generated
# -fwrapv as the report tool is built (sums over hostile sizes wrap)
CC="clang -std=c11 -D_GNU_SOURCE -g -O1 -fwrapv -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=undefined $(make -s O="$O" command-includes)"
# the command layer: the report tool less its main() and the launcher, with
# the pool's core (whatif --policy gmt-pool) and html's page
report_src=$(make -s O="$O" command-sources)
case $target in
reader)
    # the trace-reading library (libgmttrace: the Makefile's list)
    # shellcheck disable=SC2046
    $CC -o "$out/fuzz_reader" tests/fuzz/fuzz_reader.c $(make -s O="$O" trace-sources) \
        -ldw -lelf -ldl -lm
    corpus=tests/fuzz/corpus prefix="$out/" extra= ;;
commands)
    # shellcheck disable=SC2086
    $CC -o "$out/fuzz_commands" tests/fuzz/fuzz_commands.c $report_src -ldw -lelf -ldl -lm
    corpus=$out/corpus_commands prefix="$out/commands-"
    # error lines of every rejected input: stderr closed (crash reports still show)
    extra=-close_fd_mask=2
    mkdir -p "$corpus"
    [ "$secs" = 0 ] || [ -n "$(ls "$corpus")" ] || cp tests/fuzz/corpus/* "$corpus/" 2>/dev/null || true ;;
baseline)
    # shellcheck disable=SC2086
    $CC -o "$out/fuzz_baseline" tests/fuzz/fuzz_baseline.c $report_src -ldw -lelf -ldl -lm
    corpus=tests/fuzz/corpus_baseline prefix="$out/baseline-" extra=-close_fd_mask=2
    mkdir -p "$corpus" ;;
esac
if [ "$secs" = 0 ]; then
    echo "$target: built $out/fuzz_$target"
    exit 0
fi
if [ -z "$(ls tests/fuzz/corpus)" ]; then
    # shellcheck disable=SC2046
    make -s O="$O" all $(for p in $seed_progs; do echo "$O/tests/$p"; done)
    seeds=$(mktemp -d)
    for p in $seed_progs; do
        (cd "$seeds" && GPUMEMTRACE_CHUNK_KB=4 GPUMEMTRACE_OUTPUT="$p.gmt" \
            LD_PRELOAD="$OLDPWD/$O/libgpumemtrace.so" "$OLDPWD/$O/tests/$p" >/dev/null 2>&1) || true
    done
    cp "$seeds"/*.gmt tests/fuzz/corpus/ 2>/dev/null || true
    rm -rf "$seeds"
fi
echo "$target: corpus $corpus: $(ls "$corpus" | wc -l) inputs; fuzzing for ${secs}s"
# shellcheck disable=SC2086
"$out/fuzz_$target" -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$prefix" $extra "$corpus"
echo "corpus after: $(ls "$corpus" | wc -l) inputs"
