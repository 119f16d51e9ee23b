/* joinlib.c - a library that runs each call's work on non-blocking streams
 * of its own, forked from the caller's stream and joined back to it before
 * the call returns, as cuDNN does (tests/e2e/test_pool.py: the pool's
 * fences leave such a library's streams out). */
#include <stddef.h>
#include <string.h>

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

/* Scratch memory inside one call, as a library might use it: `rounds`
 * times, a block of `bytes` is allocated, written on one of the library's
 * streams after `delay_us`, and freed at once (the write is still queued,
 * and the streams are joined only at the end); then another block is
 * allocated and written by the host (its new owner) and kept. At the end,
 * after the join, the kept blocks must still hold the host's bytes.
 * Returns how many did not (late writes landed in them), and in *reused
 * how many kept blocks had an address freed before in the call; -1 on a
 * failed call. */
int joinlib_scratch(size_t bytes, unsigned delay_us, cudaStream_t caller, int rounds,
                    unsigned long *reused)
{
    enum { MAXR = 64 };
    void *old[MAXR], *kept[MAXR];
    if (rounds > MAXR || setup() != 0 || cudaEventRecord(g_fork, caller) != cudaSuccess)
        return -1;
    *reused = 0;
    for (int r = 0; r < rounds; r++) {
        cudaStream_t s = g_stream[r % STREAMS];
        if (cudaMalloc(&old[r], bytes) != cudaSuccess ||
            cudaStreamWaitEvent(s, g_fork, 0) != cudaSuccess ||
            simLaunchFill(old[r], 0xAA, bytes, delay_us, s) != cudaSuccess ||
            cudaFree(old[r]) != cudaSuccess || cudaMalloc(&kept[r], bytes) != cudaSuccess)
            return -1;
        memset(kept[r], 0x11, bytes);
        for (int j = 0; j <= r; j++)
            *reused += kept[r] == old[j];
    }
    for (int i = 0; i < STREAMS; i++)
        if (cudaEventRecord(g_done[i], g_stream[i]) != cudaSuccess ||
            cudaStreamWaitEvent(caller, g_done[i], 0) != cudaSuccess)
            return -1;
    if (cudaStreamSynchronize(caller) != cudaSuccess)
        return -1;
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        const unsigned char *p = kept[r];
        for (size_t i = 0; i < bytes; i++)
            if (p[i] != 0x11) {
                bad++;
                break;
            }
        cudaFree(kept[r]);
    }
    return bad;
}
