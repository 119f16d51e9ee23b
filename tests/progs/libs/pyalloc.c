/* pyalloc.c - device allocations for the Python tests, called through
 * ctypes (which releases the GIL around the call, as PyTorch does around
 * its ops). */
#include <stdint.h>

#include <cuda_runtime_api.h>

__attribute__((noinline)) uint64_t pyalloc_alloc(uint64_t bytes)
{
    void *p = 0;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
        return 0;
    __asm__ volatile("" ::: "memory");
    return (uint64_t)(uintptr_t)p;
}

__attribute__((noinline)) int pyalloc_free(uint64_t p)
{
    int r = cudaFree((void *)(uintptr_t)p) != cudaSuccess;
    __asm__ volatile("" ::: "memory");
    return r;
}

/* The cheapest recorded call, for scripts/bench-python.py: one event. */
__attribute__((noinline)) int pyalloc_set_device(void)
{
    int r = cudaSetDevice(0);
    __asm__ volatile("" ::: "memory");
    return r;
}
