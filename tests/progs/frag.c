/* frag.c - a known fragmentation pattern for `gpumemreport frag` and
 * `gpumemreport timeline`, on the simulated runtime under the pool.
 *
 * usage: frag [pattern|tail|endsplit]. Prints the figures the report must find,
 * as "expect NAME VALUE" lines, and "ok" last.
 *
 *   pattern  (the default; run with SIM_CUDA_MEM=32M)
 *     1. 16 blocks of 128 KiB - 100 bytes (128 KiB each once rounded) fill
 *        one 2 MiB small segment, S1.
 *     2. Every other one is freed and cudaDeviceSynchronize makes them
 *        reusable: S1 has 8 free gaps of 128 KiB, none adjacent.
 *     3. 4 blocks of 256 KiB - 200 bytes fit no gap: a second segment S2.
 *     4. Block 0 of S1 is freed without a synchronization: pending.
 *     5. 2 more of 256 KiB go into S2: the peak of requested memory.
 *        Pool at the peak: reserved 4 MiB; allocated 7 x 128 KiB + 6 x
 *        256 KiB; pending 128 KiB; free 8 x 128 KiB in S1 + 512 KiB at
 *        the end of S2, in 9 blocks, the largest 512 KiB.
 *        A pitched allocation (4 rows of 1000 bytes, pitch 1024) made
 *        first lives outside the pool: 96 bytes of rounding waste.
 *     6. A 64 MiB request cannot be served (device of 32 MiB): the pool
 *        synchronizes (block 0 becomes free and merges with its free
 *        neighbour: 256 KiB), finds nothing, and fails - out of memory.
 *   tail
 *     One request of 13.75 MiB - 1000 bytes: a 14 MiB segment of its own;
 *     the 0.25 MiB left after the rounded request stays with the block
 *     (the pool splits a large block's rest at its segment's end only
 *     from 384 KiB, elsewhere from 1 MiB), so nothing is free and the
 *     rounding waste is 14 MiB - the request.
 *   endsplit
 *     One request of 13.5 MiB - 1000 bytes: the 0.5 MiB left at the
 *     segment's end is split off, free.
 *
 * Sleeps between the phases spread them in time for the samples
 * (GPUMEMTRACE_SAMPLE_MS=1) and the timeline. Without the pool
 * (GPUMEMTRACE_POOL=0) the same calls run; only "layout" differs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "fail.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static void *must_malloc(size_t size)
{
    void *p = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess)
        FAIL("cudaMalloc(%zu)", size);
    return p;
}

static void expect(const char *name, unsigned long long v)
{
    printf("expect %s %llu\n", name, v);
}

static void pause_ms(unsigned ms)
{
    usleep(ms * 1000u);
}

enum { N = 16, NB = 6 };
static const size_t A = 128 * KiB - 100, AR = 128 * KiB; /* requested, rounded */
static const size_t B = 256 * KiB - 200, BR = 256 * KiB;
static const size_t PW = 1000, PH = 4, PP = 1024; /* pitched: width, rows, pitch */

/* Did the pool lay S1 out as one run of blocks? */
static int contiguous(char *const *p, int n, size_t step)
{
    for (int i = 1; i < n; i++)
        if (p[i] != p[0] + (size_t)i * step)
            return 0;
    return 1;
}

static void expect_peak(void)
{
    uint64_t s2_free = 2 * MiB - NB * BR;
    expect("peak.requested", 7 * A + NB * B + PW * PH);
    expect("peak.allocations", 7 + NB + 1);
    expect("peak.unpooled_allocated", PP * PH);
    expect("peak.reserved", 4 * MiB);
    expect("peak.allocated", 7 * AR + NB * BR);
    expect("peak.pending", AR);
    expect("peak.free", 8 * AR + s2_free);
    expect("peak.largest_free", s2_free);
    expect("peak.free_blocks", 9);
    expect("peak.live_blocks", 7 + NB);
    expect("peak.rounding_waste", 7 * (AR - A) + NB * (BR - B) + (PP - PW) * PH);
    expect("nopool.rounding_waste", (PP - PW) * PH); /* cudaMalloc: none */
    /* fragmentation in millionths: 1 - largest / free */
    expect("peak.fragmentation_ppm", 1000000 - 1000000 * s2_free / (8 * AR + s2_free));
}

static void expect_oom(void)
{
    uint64_t s2_free = 2 * MiB - NB * BR;
    expect("oom.size", 64 * MiB);
    expect("oom.pending", 0);
    expect("oom.free", 9 * AR + s2_free);
    expect("oom.largest_free", s2_free);
    expect("oom.free_blocks", 9); /* blocks 0 and 1 merged */
}

static void pattern(void)
{
    char *p[N], *q[NB];
    void *pitched = NULL;
    size_t pitch = 0;
    if (cudaMallocPitch(&pitched, &pitch, PW, PH) != cudaSuccess || pitch != PP)
        FAIL("cudaMallocPitch: pitch %zu", pitch);
    for (int i = 0; i < N; i++)
        p[i] = must_malloc(A);
    printf("layout %s\n", contiguous(p, N, AR) ? "pool" : "other");
    pause_ms(5);
    for (int i = 1; i < N; i += 2)
        cudaFree(p[i]);
    cudaDeviceSynchronize(); /* the 8 gaps become reusable */
    pause_ms(5);
    for (int i = 0; i < 4; i++)
        q[i] = must_malloc(B);
    pause_ms(5);
    cudaFree(p[0]); /* pending: no synchronization follows */
    for (int i = 4; i < NB; i++)
        q[i] = must_malloc(B);
    pause_ms(5);
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, 64 * MiB);
    printf("64 MiB: %s\n", cudaGetErrorName(e));
    if (e != cudaErrorMemoryAllocation)
        FAIL("expected to run out of memory");
    cudaGetLastError();
    pause_ms(5);
    for (int i = 2; i < N; i += 2)
        cudaFree(p[i]);
    for (int i = 0; i < NB; i++)
        cudaFree(q[i]);
    cudaFree(pitched);
    cudaDeviceSynchronize();
    expect_peak();
    expect_oom();
}

/* One request of req bytes, alone in a 14 MiB segment, then freed. */
static void one_block(size_t req)
{
    void *p = must_malloc(req);
    pause_ms(2);
    cudaFree(p);
    cudaDeviceSynchronize();
    expect("peak.requested", req);
    expect("peak.reserved", 14 * MiB);
}

static void tail(void)
{
    size_t req = 13 * MiB + 768 * KiB - 1000;
    one_block(req);
    expect("peak.allocated", 14 * MiB);
    expect("peak.free", 0);
    expect("peak.free_blocks", 0);
    expect("peak.rounding_waste", 14 * MiB - req);
}

static void endsplit(void)
{
    size_t req = 13 * MiB + 512 * KiB - 1000, block = (req + 511) / 512 * 512;
    one_block(req);
    expect("peak.allocated", block);
    expect("peak.free", 14 * MiB - block);
    expect("peak.free_blocks", 1);
    expect("peak.rounding_waste", block - req);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "pattern";
    if (!strcmp(what, "pattern"))
        pattern();
    else if (!strcmp(what, "tail"))
        tail();
    else if (!strcmp(what, "endsplit"))
        endsplit();
    else
        FAIL("unknown scenario %s", what);
    printf("ok\n");
    return 0;
}
