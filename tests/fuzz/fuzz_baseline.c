/* fuzz_baseline.c - libFuzzer entry point for check's baseline reader.
 *
 * Each input is a baseline file: it is written to a memory file (named
 * baseline.json; load_baseline goes by the first character, not the
 * name) and read by load_baseline, the function `gpumemreport check
 * --baseline FILE` calls: a JSON document ('{' or '[' first, after an
 * optional BOM and white space) through the strict JSON parser (jparse:
 * RFC 8259 grammar, depth, size and value-count limits, UTF-8, escapes,
 * duplicate keys) and the baseline schema (base_json: --save files and
 * `summary --json` output, rank by rank); anything else as a trace
 * (load_figures). A baseline read is then queried rank by rank as
 * cmd_check does. Symbolization is off (--no-symbols): a fuzzed trace
 * must not make the fuzzer open the binaries it names.
 *
 * Any crash, sanitizer report, hang or unbounded allocation is a bug.
 * Build and run: scripts/fuzz.sh baseline (libFuzzer, clang); seeds in
 * tests/fuzz/corpus_baseline/. The test suite runs the same entry point
 * over that corpus and mutations (tests/fuzz/smoke.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check/check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("baseline.json", 0);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct gmt_common c;
    gmt_common_init(&c);
    c.no_symbols = true;
    struct baseline b;
    if (load_baseline(path, &c, &b) == 0) {
        volatile int64_t sink = (int64_t)b.processes;
        for (int m = 0; m < NMETRICS; m++)
            if (b.have[m])
                sink += b.v[m];
        for (int64_t r = -1; r < 4; r++) {
            const struct base_rank *br = baseline_rank(&b, r);
            if (br)
                sink += br->v[M_PEAK] + br->rank;
        }
        if (b.ranked && b.nranks)
            sink += baseline_rank(&b, b.ranks[b.nranks - 1].rank) != NULL;
        (void)sink;
    }
    baseline_free(&b);
    close(fd);
    return 0;
}
