/* dlalloc.c - a library the dlopen test loads at run time; it allocates
 * through its own link to the CUDA runtime. */
#include <cuda_runtime_api.h>

__attribute__((noinline)) int dlalloc_pair(void)
{
    void *p;
    if (cudaMalloc(&p, 3333) != cudaSuccess)
        return 1;
    __asm__ volatile("" ::: "memory");
    return cudaFree(p) != cudaSuccess;
}
