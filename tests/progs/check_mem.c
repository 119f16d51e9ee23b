/* check_mem.c - deterministic memory behaviours for the `check` and
 * `diff` tests of gpumemreport.
 *
 *   check_mem grow STEPS MS   keep 2 MiB per step alive, sleeping MS ms
 *                             between steps: steady growth that the growth
 *                             analysis finds (the example program's loop is
 *                             too short next to its start-up to count)
 *   check_mem oom N           N allocations larger than the device: N
 *                             out-of-memory failures, nothing else live
 *
 * Exits 0 when the runtime behaved as expected, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define MiB (1u << 20)

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int grow(int steps, long ms)
{
    void *keep[256];
    if (steps < 0 || steps > 256)
        return 1;
    for (int i = 0; i < steps; i++) {
        if (cudaMalloc(&keep[i], 2 * MiB) != cudaSuccess)
            return 1;
        sleep_ms(ms);
    }
    printf("grew %d steps\n", steps);
    return 0; /* the blocks stay allocated: they are the growth */
}

static int oom(int n)
{
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        return 1;
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, total * 2);
        if (e != cudaErrorMemoryAllocation)
            return 1;
        cudaGetLastError(); /* clear it */
    }
    printf("%d out-of-memory failures\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "grow"))
        return grow(atoi(argv[2]), atol(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "oom"))
        return oom(atoi(argv[2]));
    fprintf(stderr, "usage: check_mem grow STEPS MS | oom N\n");
    return 2;
}
