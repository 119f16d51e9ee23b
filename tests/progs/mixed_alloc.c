/* mixed_alloc.c - a program whose libraries take device memory from the
 * driver beside its own cudaMallocs (cuBLAS and cuDNN do), one of them
 * before the program's first cudaMalloc: gpumemreport whatif must hold
 * the driver's allocations outside its models, the first one too.
 *
 * cuMemAlloc 8 MiB (looked up on libcuda.so.1, as a library would),
 * cudaMalloc 4 MiB and 2 MiB, the 4 MiB freed, cuMemAlloc 16 MiB,
 * cudaMalloc 1 MiB. The runtime's requests peak at 6 MiB. Prints "ok".
 * Run with SIM_CUDA_DRIVER=1 and the simulated driver on the library
 * path (tests/e2e/test_whatif.py). */
#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "fail.h"

#define MiB (1024u * 1024u)

int main(void)
{
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv == NULL)
        FAIL("no driver: %s", dlerror());
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(drv, "cuInit");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) =
        (CUresult(*)(CUdeviceptr *, size_t))dlsym(drv, "cuMemAlloc_v2");
    if (init == NULL || mem_alloc == NULL || init(0) != CUDA_SUCCESS)
        FAIL("cuInit");
    CUdeviceptr w1, w2;
    void *a, *b, *c;
    if (mem_alloc(&w1, 8 * MiB) != CUDA_SUCCESS)
        FAIL("cuMemAlloc 8 MiB");
    if (cudaMalloc(&a, 4 * MiB) != cudaSuccess || cudaMalloc(&b, 2 * MiB) != cudaSuccess)
        FAIL("cudaMalloc");
    if (cudaFree(a) != cudaSuccess)
        FAIL("cudaFree");
    if (mem_alloc(&w2, 16 * MiB) != CUDA_SUCCESS)
        FAIL("cuMemAlloc 16 MiB");
    if (cudaMalloc(&c, 1 * MiB) != cudaSuccess)
        FAIL("cudaMalloc 1 MiB");
    printf("ok\n");
    return 0;
}
