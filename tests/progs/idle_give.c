/* idle_give.c - memory the caching pool holds idle goes to the program's
 * other allocators when they run out, as it would be theirs without us.
 *
 *   idle_give MODE    on a device of 8 MiB (SIM_CUDA_MEM=8M, and
 *                     SIM_CUDA_DRIVER=1 for the driver's modes)
 *
 * 48 blocks of 128 KiB are allocated with cudaMalloc and freed: the pool
 * keeps their 6 MiB, and cudaMemGetInfo says the device is free. Then MODE
 * asks for 4 MiB another way: async | frompool | managed | pitch | 3d |
 * array | 3darray (the runtime) or cumem | cumempitch | cumemmanaged |
 * cumemasync | cumemcreate (the driver, reached as a static runtime
 * reaches it: dlopen and cuGetProcAddress). Untraced every mode succeeds.
 * MODE exact asks cudaMalloc for 7 MiB of a fresh device instead: the
 * pool's segment for it would not fit, the request does.
 * Prints the result and "ok" when the memory was served and used.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "fail.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define WANT (4 * MiB)

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

/* 6 MiB the pool keeps, idle, once freed. */
static void fill_and_free(void)
{
    void *b[48];
    for (int i = 0; i < 48; i++) {
        if (cudaMalloc(&b[i], 128 * KiB) != cudaSuccess)
            FAIL("cudaMalloc %d", i);
        memset(b[i], i, 128 * KiB);
    }
    for (int i = 0; i < 48; i++)
        if (cudaFree(b[i]) != cudaSuccess)
            FAIL("cudaFree %d", i);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        FAIL("cudaMemGetInfo");
    printf("free %zu of %zu\n", free_b, total_b);
}

static int runtime_mode(const char *m, void **p)
{
    static struct cudaChannelFormatDesc d = {8, 0, 0, 0, cudaChannelFormatKindUnsigned};
    struct cudaPitchedPtr pp;
    size_t pitch;
    cudaArray_t arr;
    cudaMemPool_t pool;
    int r = -1;
    if (!strcmp(m, "async") && (r = cudaMallocAsync(p, WANT, 0)) == 0)
        r = cudaStreamSynchronize(0);
    if (!strcmp(m, "frompool") && cudaDeviceGetDefaultMemPool(&pool, 0) == 0)
        r = cudaMallocFromPoolAsync(p, WANT, pool, 0);
    if (!strcmp(m, "managed"))
        r = cudaMallocManaged(p, WANT, cudaMemAttachGlobal);
    if (!strcmp(m, "pitch"))
        r = cudaMallocPitch(p, &pitch, 1024, WANT / 1024);
    if (!strcmp(m, "3d") &&
        (r = cudaMalloc3D(&pp, (struct cudaExtent){1024, 64, WANT / 1024 / 64})) == 0)
        *p = pp.ptr;
    if (!strcmp(m, "exact"))
        r = cudaMalloc(p, 7 * MiB);
    if (!strcmp(m, "array") && (r = cudaMallocArray(&arr, &d, 2048, WANT / 2048, 0)) == 0)
        return cudaFreeArray(arr) == 0 ? 0 : 99;
    if (!strcmp(m, "3darray") &&
        (r = cudaMalloc3DArray(&arr, &d, (struct cudaExtent){1024, 64, WANT / 1024 / 64}, 0)) == 0)
        return cudaFreeArray(arr) == 0 ? 0 : 99;
    if (r == 0)
        memset(*p, 0x5a, !strcmp(m, "exact") ? 7 * MiB : WANT);
    return r;
}

static int driver_mode(const char *m)
{
    CUdeviceptr d = 0;
    size_t pitch;
    int r = -1;
    if (!strcmp(m, "cumem"))
        r = ((CUresult(*)(CUdeviceptr *, size_t))drv("cuMemAlloc"))(&d, WANT);
    if (!strcmp(m, "cumempitch"))
        r = ((CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned))
                 drv("cuMemAllocPitch"))(&d, &pitch, 1024, WANT / 1024, 4);
    if (!strcmp(m, "cumemmanaged"))
        r = ((CUresult(*)(CUdeviceptr *, size_t, unsigned))drv("cuMemAllocManaged"))(
            &d, WANT, CU_MEM_ATTACH_GLOBAL);
    if (!strcmp(m, "cumemasync"))
        r = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))drv("cuMemAllocAsync"))(
            &d, WANT, NULL);
    if (!strcmp(m, "cumemcreate")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CUmemGenericAllocationHandle h;
        r = ((CUresult(*)(CUmemGenericAllocationHandle *, size_t,
                          const CUmemAllocationProp *, unsigned long long))
                 drv("cuMemCreate"))(&h, WANT, &prop, 0);
        if (r == 0)
            r = ((CUresult(*)(CUmemGenericAllocationHandle))drv("cuMemRelease"))(h);
        return r;
    }
    if (r == 0 && strcmp(m, "cumemasync"))
        r = ((CUresult(*)(CUdeviceptr))drv("cuMemFree"))(d);
    if (r == 0 && !strcmp(m, "cumemasync"))
        r = ((CUresult(*)(CUdeviceptr, CUstream))drv("cuMemFreeAsync"))(d, NULL);
    return r;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        FAIL("usage: idle_give MODE");
    const char *m = argv[1];
    void *p = NULL;
    int r;
    if (!strncmp(m, "cu", 2)) {
        fill_and_free();
        r = driver_mode(m);
    } else {
        if (strcmp(m, "exact"))
            fill_and_free();
        r = runtime_mode(m, &p);
        if (r == 0 && p && strcmp(m, "async") && strcmp(m, "frompool"))
            r = cudaFree(p);
        if (r == 0 && p && (!strcmp(m, "async") || !strcmp(m, "frompool")))
            r = cudaFreeAsync(p, 0);
    }
    int last = cudaGetLastError();
    printf("%s: %d, last error %d\n", m, r, last);
    if (r != 0 || last != 0)
        FAIL("%s", m);
    printf("ok\n");
    return 0;
}
