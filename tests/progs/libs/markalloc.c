/* markalloc.c - device memory for the Python marker test, through ctypes
 * (tests/e2e/test_markers.py). */
#include <stdint.h>

#include <cuda_runtime_api.h>

uint64_t markalloc_alloc(uint64_t bytes)
{
    void *p = 0;
    return cudaMalloc(&p, bytes) == cudaSuccess ? (uint64_t)(uintptr_t)p : 0;
}

int markalloc_free(uint64_t p)
{
    return cudaFree((void *)(uintptr_t)p) != cudaSuccess;
}
