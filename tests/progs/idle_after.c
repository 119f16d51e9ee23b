/* idle_after.c - allocate, free everything, then idle: the memory held
 * after the frees is none, however high the peak before them was.
 *
 *   idle_after [IDLE_MS]
 *
 * Four 4 MiB allocations (peak 16 MiB requested), each freed, then the
 * program sleeps IDLE_MS (default 400) with nothing allocated and exits.
 * Prints "peak 16777216".
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fail.h"

int main(int argc, char **argv)
{
    long idle_ms = argc > 1 ? strtol(argv[1], NULL, 10) : 400;
    void *p[4];
    for (int i = 0; i < 4; i++)
        if (cudaMalloc(&p[i], 4 << 20) != cudaSuccess)
            FAIL("cudaMalloc %d", i);
    for (int i = 0; i < 4; i++)
        if (cudaFree(p[i]) != cudaSuccess)
            FAIL("cudaFree %d", i);
    struct timespec ts = {idle_ms / 1000, idle_ms % 1000 * 1000000L};
    nanosleep(&ts, NULL);
    printf("peak %d\n", 16 << 20);
    return 0;
}
