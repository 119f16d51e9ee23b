/* joinlib.c - a library that runs each call's work on non-blocking streams
 * of its own, forked from the caller's stream and joined back to it before
 * the call returns, as cuDNN does (tests/e2e/test_pool.py: the pool's
 * fences leave such a library's streams out). */
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "simcudart.h"

enum { STREAMS = 16 };
static cudaStream_t g_stream[STREAMS];
static cudaEvent_t g_fork, g_done[STREAMS];

static int setup(void)
{
    if (g_stream[0] != NULL)
        return 0;
    if (cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming) != cudaSuccess)
        return -1;
    for (int i = 0; i < STREAMS; i++)
        if (cudaStreamCreateWithFlags(&g_stream[i], cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&g_done[i], cudaEventDisableTiming) != cudaSuccess)
            return -1;
    return 0;
}

/* Fill `bytes` at p with `value`, a slice on each of the library's
 * streams, each after `delay_us`; after the caller's stream's earlier
 * work. join: the caller's stream's later work waits for all of it (what
 * a library must do); 0: it does not (the hazard, on purpose). */
int joinlib_fill(void *p, int value, size_t bytes, unsigned delay_us,
                 cudaStream_t caller, int join)
{
    if (setup() != 0 || cudaEventRecord(g_fork, caller) != cudaSuccess)
        return -1;
    size_t part = bytes / STREAMS;
    for (int i = 0; i < STREAMS; i++) {
        size_t n = i == STREAMS - 1 ? bytes - part * i : part;
        if (cudaStreamWaitEvent(g_stream[i], g_fork, 0) != cudaSuccess ||
            simLaunchFill((char *)p + part * i, value, n, delay_us, g_stream[i]) != cudaSuccess)
            return -1;
        if (join && (cudaEventRecord(g_done[i], g_stream[i]) != cudaSuccess ||
                     cudaStreamWaitEvent(caller, g_done[i], 0) != cudaSuccess))
            return -1;
    }
    return 0;
}

/* Wait for everything the library's streams were given. */
int joinlib_sync(void)
{
    for (int i = 0; i < STREAMS && g_stream[i] != NULL; i++)
        if (cudaStreamSynchronize(g_stream[i]) != cudaSuccess)
            return -1;
    return 0;
}
