/* fuzz_reader.c - libFuzzer entry point for the trace reader.
 *
 * Each input is written to a memory file and read the way gpumemreport
 * reads a trace: every record in order through the validating reader,
 * definitions parsed (gmt_defs_add), and every Python frame turned into a
 * line through its code object's line table; then the whole trace
 * replayed (live allocations, sites, peaks, growth series, marks, virtual
 * memory, pools, PyTorch's caching allocator's blocks and segments) and
 * fed to the pool view the frag command rebuilds. The
 * commands' printing is not in this target (the e2e byte-flip tests run
 * them over damaged traces). Any crash, sanitizer report, hang or
 * unbounded allocation is a bug.
 *
 * Build and run: scripts/fuzz.sh (libFuzzer, clang). The test suite runs
 * the same entry point over the corpus and a few thousand mutations
 * (tests/fuzz/smoke.c) without clang's fuzzer runtime.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "defs.h"
#include "poolview.h"
#include "reader.h"
#include "replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("trace", 0);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[512];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    struct gmt_reader *r = gmt_reader_open(path, err, sizeof err);
    if (r) {
        struct gmt_defs d = {0};
        struct gmt_rec rec;
        while (gmt_reader_next(r, &rec) == 1)
            if (rec.kind == GMT_K_EXT)
                gmt_defs_add(&d, &rec);
        /* Python frames: decode every line from the (hostile) line tables */
        volatile unsigned sink = 0;
        struct gmt_stack_def st;
        for (uint32_t k = 0; k < d.stacks.n; k++) {
            stacks_at(&d.stacks, k, &st);
            for (uint32_t i = 0; i < st.npy; i++) {
                const struct gmt_pycode_def *pc = gmt_defs_pycode(&d, st.py[i].code);
                if (pc)
                    sink += (unsigned)gmt_pycode_line(pc, st.py[i].offset);
            }
        }
        (void)sink;
        gmt_defs_free(&d);
        gmt_reader_close(r);
        /* the replay engine, as every table command runs it */
        struct replay rp;
        struct replay_opts opts = {.growth = true, .mark_sites = true};
        if (replay_trace(path, &rp, &opts, err, sizeof err) == 0) {
            volatile uint64_t s2 = rp.peak_requested + rp.peak_mapped;
            (void)s2;
        }
        replay_free(&rp);
        /* the pool view (frag) over the same records */
        if ((r = gmt_reader_open(path, err, sizeof err)) != NULL) {
            struct poolview v;
            pv_init(&v);
            while (gmt_reader_next(r, &rec) == 1) /* PyTorch's segments: EXT */
                pv_apply(&v, &rec);
            struct pv_state st;
            if (pv_state(&v, -1, &st))
                pv_state_free(&st);
            pv_free(&v);
            gmt_reader_close(r);
        }
    }
    close(fd);
    return 0;
}
