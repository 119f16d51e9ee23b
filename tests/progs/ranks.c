/* ranks.c - one rank of a training job with known answers
 * (tests/e2e/test_report_ranks.py, `gpumemreport ranks`).
 *
 * usage: ranks [-s STEPS] [-a ACT_KIB] [-l LEAK_KIB] [-o OOM_STEP] [-w MS]
 *              [-c COLLECTIVES]
 *
 * At start: 8 MiB of weights (weights()) and a 2 MiB communication buffer
 * (nccl_comm_buffer(): a function named like NCCL's, so its bytes count as
 * NCCL's), both kept. Then STEPS (default 5) steps, each: mark "step"; LEAK
 * KiB kept (leak_buffer(), default 0); at step OOM_STEP, a 64 GiB request
 * (huge_buffer()) that fails for lack of memory, and the program exits 1
 * as a training script dies of it; ACT KiB of activations (activations(),
 * default 4096) allocated and freed; a pause of MS milliseconds (default
 * 2); COLLECTIVES marks "ncclAllReduce" (default 0: a library's NVTX ranges,
 * many per step). The peak is 10 MiB + ACT + STEPS * LEAK, first reached in step 1
 * without a leak and in the last step with one.
 *
 * Marks go through the public API (preload/gpumemtrace.h) by weak
 * references, so it also runs, untraced, without the library.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define GPUMEMTRACE_WEAK
#include "gpumemtrace.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Each site is its own function calling cudaMalloc, so each has its own
 * label in the reports. */
__attribute__((noinline)) static void *weights(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        exit(3);
    return p;
}

__attribute__((noinline)) static void *nccl_comm_buffer(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        exit(3);
    return p;
}

__attribute__((noinline)) static void *leak_buffer(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        exit(3);
    return p;
}

__attribute__((noinline)) static void *activations(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        exit(3);
    return p;
}

/* false: out of memory, as the test wants */
__attribute__((noinline)) static bool huge_buffer(void)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)64 << 30);
    if (e == cudaSuccess)
        cudaFree(p);
    return e != cudaErrorMemoryAllocation;
}

int main(int argc, char **argv)
{
    long steps = 5, act = 4096, leak = 0, oom = 0, ms = 2, coll = 0;
    int o;
    while ((o = getopt(argc, argv, "s:a:l:o:w:c:")) != -1) {
        switch (o) {
        case 's': steps = atol(optarg); break;
        case 'a': act = atol(optarg); break;
        case 'l': leak = atol(optarg); break;
        case 'o': oom = atol(optarg); break;
        case 'w': ms = atol(optarg); break;
        case 'c': coll = atol(optarg); break;
        default: return 2;
        }
    }
    if (steps < 1 || act < 1 || leak < 0 || oom < 0 || ms < 0 || coll < 0)
        return 2;
    void *w = weights(8 * MiB);
    void *comm = nccl_comm_buffer(2 * MiB);
    for (long i = 1; i <= steps; i++) {
        GPUMEMTRACE_MARK("step");
        if (leak)
            leak_buffer((size_t)leak * KiB);
        if (i == oom && !huge_buffer()) {
            fprintf(stderr, "ranks: out of memory in step %ld\n", i);
            return 1;
        }
        for (long c = 0; c < coll; c++)
            GPUMEMTRACE_MARK("ncclAllReduce");
        cudaFree(activations((size_t)act * KiB));
        usleep((useconds_t)ms * 1000);
    }
    cudaFree(comm);
    cudaFree(w);
    return 0;
}
