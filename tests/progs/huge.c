/* huge.c - allocation sizes no device has, from every allocation entry
 * point: (size_t)-1 (the classic n - 1 with n == 0), sizes within a
 * rounding of 2^64, counts whose product wraps, and a size just above
 * the device's memory. Each call prints its result, what it left in the
 * pointer (NULL, the value it had, or an address) and the runtime's last
 * error: traced, every line must read as untraced. A plain allocation
 * before them leaves the pool memory to give back, and one after them
 * must still work. Driver calls go through cuGetProcAddress,
 * as a static runtime's do.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fail.h"

#define MiB ((size_t)1 << 20)
#define SENTINEL ((void *)0x1234)

static const char *left(const void *p)
{
    return p == NULL ? "NULL" : p == SENTINEL ? "untouched" : "an address";
}

static void said(const char *what, size_t size, int r, const void *p)
{
    int last = cudaGetLastError();
    printf("%s %zu: %d, pointer %s, last error %d\n", what, size, r,
           r == 0 ? "an address" : left(p), last);
}

static void *drv(const char *name)
{
    static CUresult (*gpa)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
    if (gpa == NULL) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (h == NULL || (*(void **)&gpa = dlsym(h, "cuGetProcAddress_v2")) == NULL)
            FAIL("no driver");
        CUresult (*init)(unsigned) = dlsym(h, "cuInit");
        if (init == NULL || init(0) != CUDA_SUCCESS)
            FAIL("cuInit");
    }
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &p, 13000, 0, &st) != CUDA_SUCCESS || p == NULL)
        FAIL("no %s", name);
    return p;
}

static void runtime_calls(size_t total)
{
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 511, SIZE_MAX - 512,
                            SIZE_MAX - 2 * MiB + 1, SIZE_MAX - 2 * MiB,
                            SIZE_MAX - 20 * MiB, (size_t)1 << 63, total + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        void *p = SENTINEL;
        int r = cudaMalloc(&p, sizes[i]);
        said("cudaMalloc", sizes[i], r, p);
        if (r == 0)
            cudaFree(p);
        p = SENTINEL;
        r = cudaMallocManaged(&p, sizes[i], cudaMemAttachGlobal);
        said("cudaMallocManaged", sizes[i], r, p);
        p = SENTINEL;
        r = cudaMallocAsync(&p, sizes[i], 0);
        said("cudaMallocAsync", sizes[i], r, p);
    }
    size_t pitch = 0;
    void *p = SENTINEL;
    int r = cudaMallocPitch(&p, &pitch, (size_t)1 << 33, (size_t)1 << 31);
    said("cudaMallocPitch 2^33 x 2^31", 0, r, p);
    p = SENTINEL;
    r = cudaMallocPitch(&p, &pitch, SIZE_MAX, 2);
    said("cudaMallocPitch max x 2", 0, r, p);
    struct cudaPitchedPtr pp = {SENTINEL, 0, 0, 0};
    struct cudaExtent e = {(size_t)1 << 22, (size_t)1 << 21, (size_t)1 << 21};
    r = cudaMalloc3D(&pp, e);
    said("cudaMalloc3D 2^22 x 2^21 x 2^21", 0, r, pp.ptr);
}

static void driver_calls(void)
{
    CUresult (*alloc)(CUdeviceptr *, size_t) = drv("cuMemAlloc");
    CUresult (*pitched)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        drv("cuMemAllocPitch");
    CUdeviceptr d = 0x1234;
    int r = alloc(&d, SIZE_MAX);
    printf("cuMemAlloc max: %d, pointer %s\n", r, left((void *)d));
    size_t pitch = 0;
    d = 0x1234;
    r = pitched(&d, &pitch, (size_t)1 << 33, (size_t)1 << 31, 4);
    printf("cuMemAllocPitch 2^33 x 2^31: %d, pointer %s\n", r, left((void *)d));
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line out before a crash */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        FAIL("cudaMemGetInfo");
    void *p = NULL; /* the pool holds memory idle meanwhile */
    if (cudaMalloc(&p, MiB) != cudaSuccess || cudaFree(p) != cudaSuccess)
        FAIL("cudaMalloc of 1 MiB before them");
    runtime_calls(total_b);
    driver_calls();
    if (cudaMalloc(&p, MiB) != cudaSuccess)
        FAIL("cudaMalloc of 1 MiB after them");
    if (cudaMemset(p, 1, MiB) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        FAIL("cudaMemset");
    if (cudaFree(p) != cudaSuccess || cudaGetLastError() != cudaSuccess)
        FAIL("cudaFree");
    printf("ok\n");
    return 0;
}
