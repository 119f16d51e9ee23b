// dlsym_free.cu - a free of pool memory that bypasses the interposed
// cudaFree (it used to reach the driver), on a real GPU: what
// ctypes.CDLL("libcudart.so.13").cudaFree(ptr) does. Blocks A (its
// segment's start under the pool), B and C come from the interposed
// cudaMalloc; C holds 0x5A. A and B are freed through dlsym(handle,
// "cudaFree"), then 2 MiB more are allocated and written 0x11. Prints
//   dlsym_free A=ERR B=ERR C_kept=0|1 same_segment=0|1
// and exits 1 if a free failed or C lost its bytes. Without the library
// every allocation is the runtime's own: both frees succeed, C is kept.
// Under the library (pool on) the same must hold: before the fix the
// free of A released the whole segment, B's returned
// cudaErrorInvalidValue.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

int main(void)
{
    const size_t n = 256 << 10;
    char *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess ||
        cudaMalloc(&c, n) != cudaSuccess || cudaMemset(c, 0x5A, n) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "dlsym_free: setup failed\n");
        return 2;
    }
    void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    cudaError_t (*real_free)(void *) =
        h ? (cudaError_t(*)(void *))dlsym(h, "cudaFree") : NULL;
    if (real_free == NULL) {
        fprintf(stderr, "dlsym_free: no libcudart.so.13 handle (%s)\n", dlerror());
        return 2;
    }
    cudaError_t ra = real_free(a), rb = real_free(b);
    cudaGetLastError();
    bool same = (size_t)(b > a ? b - a : a - b) < (64u << 20) &&
                (size_t)(c > a ? c - a : a - c) < (64u << 20);
    if (cudaMalloc(&d, 2u << 20) != cudaSuccess || cudaMemset(d, 0x11, 2u << 20) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "dlsym_free: allocating after the frees failed\n");
        return 2;
    }
    unsigned char *host = (unsigned char *)malloc(n);
    int kept = cudaMemcpy(host, c, n, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (size_t i = 0; kept && i < n; i++)
        kept = host[i] == 0x5A;
    printf("dlsym_free A=%s B=%s C_kept=%d same_segment=%d\n", cudaGetErrorName(ra),
           cudaGetErrorName(rb), kept, same);
    free(host);
    cudaFree(c);
    cudaFree(d);
    return !(ra == cudaSuccess && rb == cudaSuccess && kept);
}
