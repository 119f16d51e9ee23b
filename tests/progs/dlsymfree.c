/* dlsymfree.c - frees of pool blocks that bypass the interposed cudaFree
 * (they used to reach the driver and free pool memory there), and the
 * runtime's cudaFree looked up through a handle (which used to bypass
 * the hooks).
 *
 * dlsym(handle, "cudaFree") on the runtime dlopened by its soname - what
 * ctypes.CDLL("libcudart.so.13").cudaFree does - must hand out the
 * library's cudaFree, not the runtime's own (whose free is the driver's
 * cuMemFree of the pointer, the simulated runtime's too with
 * SIM_CUDA_DRIVER=1). Frees that do bypass it - a static runtime's, the
 * program's own driver calls - reach the driver: cuMemFree and
 * cuMemFreeAsync looked up with dlsym on libcuda.so.1.
 *
 * Four 256 KiB blocks from the interposed cudaMalloc, one pool segment:
 * A at its start, B (a slow kernel still writing it), C (live, holding
 * 0x5A), G. Through the driver's cuMemFree: an interior address of C
 * (refused), A and B (taken), A again (refused); G with the driver's
 * cuMemFreeAsync. Then D and E are allocated and filled, the device
 * synchronized, and 512 KiB allocated: A and B, merged, are the first
 * fit. Prints what each call returned, whether C, D and E kept their
 * bytes, where the 512 KiB went, and the stale writes; exits 0 when
 * every call did what it should and nothing was overwritten. */
#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "simcudart.h"

#define N (256u << 10)

static unsigned char host[N];

/* Does [p, p + N) hold `value` everywhere? (Read back through the
 * runtime: memory it no longer knows fails the copy.) */
static int kept(void *p, unsigned char value)
{
    if (cudaMemcpy(host, p, N, cudaMemcpyDeviceToHost) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    for (unsigned i = 0; i < N; i++)
        if (host[i] != value)
            return 0;
    return 1;
}

int main(void)
{
    void *a, *b, *c, *g, *d = NULL, *e = NULL, *f = NULL;
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (rt == NULL || drv == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    cudaError_t (*rt_free)(void *) = (cudaError_t(*)(void *))dlsym(rt, "cudaFree");
    CUresult (*drv_free)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))dlsym(drv, "cuMemFree_v2");
    CUresult (*free_async)(CUdeviceptr, CUstream) =
        (CUresult(*)(CUdeviceptr, CUstream))dlsym(drv, "cuMemFreeAsync");
    if (rt_free == NULL || drv_free == NULL || free_async == NULL)
        return 2;
    /* cudaFree here is the library's: the program's own reference
     * resolves to the preloaded export */
    printf("dlsym cudaFree is the library's: %s\n", rt_free == cudaFree ? "yes" : "no");
    if (cudaMalloc(&a, N) != cudaSuccess || cudaMalloc(&b, N) != cudaSuccess ||
        cudaMalloc(&c, N) != cudaSuccess || cudaMalloc(&g, N) != cudaSuccess ||
        cudaMemset(c, 0x5A, N) != cudaSuccess ||
        simLaunchFill(b, 0x11, N, 300000, 0) != cudaSuccess)
        return 2;
    int interior = drv_free((CUdeviceptr)c + 512);
    int ra = drv_free((CUdeviceptr)a), rb = drv_free((CUdeviceptr)b);
    int again = drv_free((CUdeviceptr)a);
    int rg = free_async((CUdeviceptr)g, 0);
    if (cudaMalloc(&d, N) == cudaSuccess)
        cudaMemset(d, 0x22, N);
    if (cudaMalloc(&e, N) == cudaSuccess)
        cudaMemset(e, 0x33, N);
    cudaGetLastError();
    cudaDeviceSynchronize();
    int kc = kept(c, 0x5A), kd = d && kept(d, 0x22), ke = e && kept(e, 0x33);
    cudaMalloc(&f, 2 * N);
    printf("driver cuMemFree: interior %d, A %d, B %d, A again %d\n", interior, ra, rb, again);
    printf("driver cuMemFreeAsync: G %d\n", rg);
    printf("C kept: %d, D kept: %d, E kept: %d\n", kc, kd, ke);
    printf("512 KiB at A: %s\n", f == a ? "yes" : "no");
    printf("stale writes: %llu\n", simStaleWrites());
    return !(rt_free == cudaFree && interior == CUDA_ERROR_INVALID_VALUE && ra == CUDA_SUCCESS &&
             rb == CUDA_SUCCESS && again == CUDA_ERROR_INVALID_VALUE && rg == CUDA_SUCCESS && kc && kd && ke && f == a &&
             simStaleWrites() == 0);
}
