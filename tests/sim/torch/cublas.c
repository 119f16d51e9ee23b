/* cublas.c - a stand-in for a CUDA math library's own device memory (for
 * memory by kind): cuBLAS, cuDNN and NCCL call cudaMalloc themselves
 * for their handles' workspaces and buffers, outside PyTorch's allocator.
 * Built as .../lib/libcublas.so.13, so the innermost frame of such an
 * allocation is in a module named as cuBLAS's is; the report counts it as
 * a library workspace. */
#include <stddef.h>

#include <cuda_runtime.h>

__attribute__((visibility("default"), noinline)) void *sim_cublas_create(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess)
        return NULL;
    __asm__ volatile("" ::: "memory"); /* a frame of its own: no tail call */
    return p;
}

__attribute__((visibility("default"))) int sim_cublas_destroy(void *p)
{
    return cudaFree(p) == cudaSuccess ? 0 : -1;
}
