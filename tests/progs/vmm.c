/* vmm.c - the pool with GPUMEMTRACE_POOL_VMM=1, on the simulated runtime
 * and driver (run with SIM_CUDA_MEM=80M; tests/e2e/test_pool.py).
 *
 * The program loads the driver as the real runtime does (the simulated
 * runtime does not), then:
 *   1. ten 8 MiB blocks: two per 20 MiB segment, 40 pages of 2 MiB, the
 *      whole device;
 *   2. frees every other one and synchronizes: five 8 MiB holes;
 *   3. asks for 24 MiB, more than any hole: the pool moves 12 pages of
 *      the holes behind a new range (a plain pool would need 24 MiB more
 *      than the device has);
 *   4. cudaIpcGetMemHandle on it: refused (cudaErrorInvalidValue);
 *   5. asks for 96 MiB: out of memory, as the runtime says it (the
 *      simulated runtime's 80 MiB are apart from the driver's).
 * The simulated driver's pages hold no bytes, so nothing is written.
 * Prints "ok" last.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "fail.h"

#define MiB (1024ull * 1024ull)

int main(void)
{
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == NULL)
        FAIL("no driver: %s", dlerror());
    void *x[10];
    for (int i = 0; i < 10; i++)
        if (cudaMalloc(&x[i], 8 * MiB) != cudaSuccess)
            FAIL("cudaMalloc 8 MiB #%d", i);
    for (int i = 0; i < 10; i += 2)
        if (cudaFree(x[i]) != cudaSuccess)
            FAIL("cudaFree #%d", i);
    if (cudaDeviceSynchronize() != cudaSuccess)
        FAIL("cudaDeviceSynchronize");
    void *big = NULL;
    if (cudaMalloc(&big, 24 * MiB) != cudaSuccess)
        FAIL("cudaMalloc 24 MiB from the holes' pages");
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, big) != cudaErrorInvalidValue)
        FAIL("cudaIpcGetMemHandle on a mapped block was not refused");
    void *none = NULL;
    if (cudaMalloc(&none, 96 * MiB) != cudaErrorMemoryAllocation)
        FAIL("96 MiB on a full device did not fail as out of memory");
    if (cudaGetLastError() != cudaErrorMemoryAllocation)
        FAIL("the failure is the program's last error, as without the pool");
    if (cudaGetLastError() != cudaSuccess)
        FAIL("an error stayed behind");
    cudaFree(big);
    for (int i = 1; i < 10; i += 2)
        cudaFree(x[i]);
    printf("ok\n");
    return 0;
}
