/* drv_calls.c - a program that reaches the CUDA driver the way a statically
 * linked runtime does: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"),
 * then every function through cuGetProcAddress. No libcudart at all.
 *
 *   drv_calls MODE     MODE: alloc | vmm | async | host | v1 | dlsym | threads
 *                            | copies | rthandle | nbstream | nbdestroy
 *
 * Each mode makes a known set of calls (the tests know the answers) and
 * prints what it checked about the lookups themselves.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024u * 1024u)

static void *g_cuda;
static CUresult (*g_gpa)(const char *, void **, int, cuuint64_t,
                         CUdriverProcAddressQueryResult *);

static void *fn(const char *name, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (g_gpa(name, &p, 13000, flags, &st) != CUDA_SUCCESS || p == NULL) {
        fprintf(stderr, "drv_calls: no %s\n", name);
        exit(3);
    }
    return p;
}
#define FN(type, name) ((type)fn(name, CU_GET_PROC_ADDRESS_DEFAULT))

static void ok(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "drv_calls: %s failed: %d\n", what, (int)r);
        exit(2);
    }
}

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);

/* 1 MiB freed, 2 MiB left allocated at exit, a managed 3 MiB freed, a
 * pitched 1000x10 freed: peak requested 6 MiB. */
static void mode_alloc(void)
{
    alloc_t alloc = FN(alloc_t, "cuMemAlloc");
    free_t mfree = FN(free_t, "cuMemFree");
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned) =
        FN(CUresult(*)(CUdeviceptr *, size_t, unsigned), "cuMemAllocManaged");
    CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        FN(CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned),
           "cuMemAllocPitch");
    CUdeviceptr a, b, m, p;
    size_t pt;
    ok(alloc(&a, 1 * MiB), "cuMemAlloc");
    ok(alloc(&b, 2 * MiB), "cuMemAlloc");
    ok(managed(&m, 3 * MiB, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    ok(pitch(&p, &pt, 1000, 10, 4), "cuMemAllocPitch");
    ok(mfree(a), "cuMemFree");
    ok(mfree(m), "cuMemFree");
    ok(mfree(p), "cuMemFree");
    /* a failed call is an event too */
    CUdeviceptr huge;
    if (alloc(&huge, (size_t)1 << 50) == CUDA_SUCCESS)
        exit(4);
}

/* 64 MiB of address space; two 2 MiB physical allocations on the device
 * mapped into it and one 2 MiB on the host; everything undone. */
static void mode_vmm(void)
{
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                        unsigned long long) =
        FN(CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                       unsigned long long), "cuMemAddressReserve");
    CUresult (*afree)(CUdeviceptr, size_t) =
        FN(CUresult(*)(CUdeviceptr, size_t), "cuMemAddressFree");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                       const CUmemAllocationProp *, unsigned long long) =
        FN(CUresult(*)(CUmemGenericAllocationHandle *, size_t,
                       const CUmemAllocationProp *, unsigned long long),
           "cuMemCreate");
    CUresult (*release)(CUmemGenericAllocationHandle) =
        FN(CUresult(*)(CUmemGenericAllocationHandle), "cuMemRelease");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                    unsigned long long) =
        FN(CUresult(*)(CUdeviceptr, size_t, size_t,
                       CUmemGenericAllocationHandle, unsigned long long),
           "cuMemMap");
    CUresult (*unmap)(CUdeviceptr, size_t) =
        FN(CUresult(*)(CUdeviceptr, size_t), "cuMemUnmap");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAllocationProp hprop = prop;
    hprop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h1, h2, hh;
    ok(reserve(&va, 64 * MiB, 0, 0, 0), "cuMemAddressReserve");
    ok(create(&h1, 2 * MiB, &prop, 0), "cuMemCreate");
    ok(create(&h2, 2 * MiB, &prop, 0), "cuMemCreate");
    ok(create(&hh, 2 * MiB, &hprop, 0), "cuMemCreate host");
    ok(map(va, 2 * MiB, 0, h1, 0), "cuMemMap");
    ok(map(va + 2 * MiB, 2 * MiB, 0, h2, 0), "cuMemMap");
    ok(unmap(va, 2 * MiB), "cuMemUnmap");
    ok(unmap(va + 2 * MiB, 2 * MiB), "cuMemUnmap");
    ok(release(h1), "cuMemRelease");
    ok(release(h2), "cuMemRelease");
    ok(release(hh), "cuMemRelease");
    ok(afree(va, 64 * MiB), "cuMemAddressFree");
}

/* Stream-ordered: 1 MiB from the device's pool on a stream, 2 MiB through
 * the per-thread-stream variant on stream 0, 4 MiB from a pool of our own;
 * all freed. */
static void mode_async(void)
{
    typedef CUresult (*aalloc_t)(CUdeviceptr *, size_t, CUstream);
    typedef CUresult (*afree_t)(CUdeviceptr, CUstream);
    aalloc_t aalloc = FN(aalloc_t, "cuMemAllocAsync");
    afree_t afree = FN(afree_t, "cuMemFreeAsync");
    aalloc_t aalloc_pt = (aalloc_t)fn("cuMemAllocAsync",
                                      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    afree_t afree_pt = (afree_t)fn("cuMemFreeAsync",
                                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CUresult (*pool_alloc)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        FN(CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream),
           "cuMemAllocFromPoolAsync");
    CUresult (*pool_create)(CUmemoryPool *, const CUmemPoolProps *) =
        FN(CUresult(*)(CUmemoryPool *, const CUmemPoolProps *), "cuMemPoolCreate");
    CUresult (*pool_destroy)(CUmemoryPool) =
        FN(CUresult(*)(CUmemoryPool), "cuMemPoolDestroy");
    CUresult (*stream_create)(CUstream *, unsigned) =
        FN(CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
    CUresult (*stream_sync)(CUstream) = FN(CUresult(*)(CUstream), "cuStreamSynchronize");
    printf("per-thread variant differs: %s\n",
           (void *)aalloc_pt != (void *)aalloc ? "yes" : "no");
    CUstream s;
    ok(stream_create(&s, 0), "cuStreamCreate");
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemoryPool pool;
    ok(pool_create(&pool, &props), "cuMemPoolCreate");
    CUdeviceptr a, b, c;
    ok(aalloc(&a, 1 * MiB, s), "cuMemAllocAsync");
    ok(aalloc_pt(&b, 2 * MiB, 0), "cuMemAllocAsync_ptsz");
    ok(pool_alloc(&c, 4 * MiB, pool, s), "cuMemAllocFromPoolAsync");
    ok(afree(a, s), "cuMemFreeAsync");
    ok(afree_pt(b, 0), "cuMemFreeAsync_ptsz");
    ok(afree(c, s), "cuMemFreeAsync");
    ok(stream_sync(s), "cuStreamSynchronize");
    ok(pool_destroy(pool), "cuMemPoolDestroy");
}

/* A non-blocking stream (the pool's fences take it in), then 1 MiB
 * allocated and freed so that the process records something; with
 * `destroy`, the stream destroyed through the driver in between (fences
 * go off). */
static void nb_stream(bool destroy)
{
    CUresult (*stream_create)(CUstream *, unsigned) =
        FN(CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
    CUresult (*stream_destroy)(CUstream) =
        FN(CUresult(*)(CUstream), "cuStreamDestroy");
    alloc_t alloc = FN(alloc_t, "cuMemAlloc");
    free_t release = FN(free_t, "cuMemFree");
    CUstream s;
    ok(stream_create(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUdeviceptr p;
    ok(alloc(&p, 1 * MiB), "cuMemAlloc");
    if (destroy)
        ok(stream_destroy(s), "cuStreamDestroy");
    ok(release(p), "cuMemFree");
}

/* Pinned host memory: 64 KiB and 128 KiB, both freed. */
static void mode_host(void)
{
    CUresult (*ahost)(void **, size_t) = FN(CUresult(*)(void **, size_t),
                                            "cuMemAllocHost");
    CUresult (*hostalloc)(void **, size_t, unsigned) =
        FN(CUresult(*)(void **, size_t, unsigned), "cuMemHostAlloc");
    CUresult (*fhost)(void *) = FN(CUresult(*)(void *), "cuMemFreeHost");
    void *a, *b;
    ok(ahost(&a, 64 * 1024), "cuMemAllocHost");
    ok(hostalloc(&b, 128 * 1024, 0), "cuMemHostAlloc");
    ok(fhost(a), "cuMemFreeHost");
    ok(fhost(b), "cuMemFreeHost");
}

/* Asking for an old ABI version gets the old function, untouched. */
static void mode_v1(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    ok(g_gpa("cuMemAlloc", &p, 3000, 0, &st), "cuGetProcAddress v1");
    printf("v1 passed through: %s\n", p == dlsym(g_cuda, "cuMemAlloc") ? "yes" : "no");
    void *v2 = fn("cuMemAlloc", 0);
    printf("v2 differs from v1: %s\n", v2 != p ? "yes" : "no");
}

/* The way JAX's XLA plugin does it: dlsym each function. 8 MiB, freed. */
static void mode_dlsym(void)
{
    alloc_t alloc = (alloc_t)dlsym(g_cuda, "cuMemAlloc_v2");
    free_t mfree = (free_t)dlsym(g_cuda, "cuMemFree_v2");
    CUdeviceptr a;
    ok(alloc(&a, 8 * MiB), "cuMemAlloc_v2");
    ok(mfree(a), "cuMemFree_v2");
}

/* Copies and sets, as a static runtime's cudaMemcpy/cudaMemset make them:
 * H2D 4096 pageable + 8192 pinned + 100 pageable (per-thread variant) +
 * 8192 pinned async; D2H 4096 pageable + 4096 pinned async; D2D 16384 +
 * 1000 (cuMemcpy, unified addressing); sets of 256 bytes three times. */
static void mode_copies(void)
{
    typedef CUresult (*htod_t)(CUdeviceptr, const void *, size_t);
    typedef CUresult (*dtoh_t)(void *, CUdeviceptr, size_t);
    typedef CUresult (*dtod_t)(CUdeviceptr, CUdeviceptr, size_t);
    alloc_t alloc = FN(alloc_t, "cuMemAlloc");
    CUresult (*ahost)(void **, size_t) = FN(CUresult(*)(void **, size_t),
                                            "cuMemAllocHost");
    htod_t htod = FN(htod_t, "cuMemcpyHtoD");
    htod_t htod_pt = (htod_t)fn("cuMemcpyHtoD",
                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    dtoh_t dtoh = FN(dtoh_t, "cuMemcpyDtoH");
    dtod_t dtod = FN(dtod_t, "cuMemcpyDtoD");
    dtod_t unified = FN(dtod_t, "cuMemcpy");
    CUresult (*htod_a)(CUdeviceptr, const void *, size_t, CUstream) =
        FN(CUresult(*)(CUdeviceptr, const void *, size_t, CUstream),
           "cuMemcpyHtoDAsync");
    CUresult (*dtoh_a)(void *, CUdeviceptr, size_t, CUstream) =
        FN(CUresult(*)(void *, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync");
    CUresult (*set8)(CUdeviceptr, unsigned char, size_t) =
        FN(CUresult(*)(CUdeviceptr, unsigned char, size_t), "cuMemsetD8");
    CUresult (*set16)(CUdeviceptr, unsigned short, size_t) =
        FN(CUresult(*)(CUdeviceptr, unsigned short, size_t), "cuMemsetD16");
    CUresult (*set32a)(CUdeviceptr, unsigned int, size_t, CUstream) =
        FN(CUresult(*)(CUdeviceptr, unsigned int, size_t, CUstream),
           "cuMemsetD32Async");
    CUresult (*stream_create)(CUstream *, unsigned) =
        FN(CUresult(*)(CUstream *, unsigned), "cuStreamCreate");
    CUresult (*stream_sync)(CUstream) = FN(CUresult(*)(CUstream), "cuStreamSynchronize");
    static char pageable[16384];
    void *pinned;
    CUdeviceptr d;
    CUstream s;
    ok(stream_create(&s, 0), "cuStreamCreate");
    ok(alloc(&d, 1 << 20), "cuMemAlloc");
    ok(ahost(&pinned, 65536), "cuMemAllocHost");
    memset(pageable, 7, sizeof pageable);
    memset(pinned, 7, 65536);
    ok(htod(d, pageable, 4096), "cuMemcpyHtoD");
    ok(htod(d, pinned, 8192), "cuMemcpyHtoD");
    ok(htod_pt(d, pageable, 100), "cuMemcpyHtoD_v2_ptds");
    ok(htod_a(d, pinned, 8192, s), "cuMemcpyHtoDAsync");
    ok(dtoh(pageable, d, 4096), "cuMemcpyDtoH");
    ok(dtoh_a(pinned, d, 4096, s), "cuMemcpyDtoHAsync");
    ok(dtod(d + 65536, d, 16384), "cuMemcpyDtoD");
    ok(unified(d + 131072, d, 1000), "cuMemcpy");
    ok(set8(d, 1, 256), "cuMemsetD8");
    ok(set16(d, 2, 128), "cuMemsetD16");
    ok(set32a(d, 3, 64, s), "cuMemsetD32Async");
    ok(stream_sync(s), "cuStreamSynchronize");
    printf("copied back: %d\n", pageable[0]);
}

/* The runtime called through a handle (dlopen + dlsym): the runtime hooks
 * never see it, the driver level does. 1 MiB freed, 2 MiB left. */
static void mode_rthandle(void)
{
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (rt == NULL) {
        fprintf(stderr, "drv_calls: %s\n", dlerror());
        exit(3);
    }
    int (*m)(void **, size_t) = (int (*)(void **, size_t))dlsym(rt, "cudaMalloc");
    int (*f)(void *) = (int (*)(void *))dlsym(rt, "cudaFree");
    void *a, *b;
    if (m == NULL || f == NULL || m(&a, 1 << 20) || m(&b, 2 << 20) || f(a)) {
        fprintf(stderr, "drv_calls: runtime calls failed\n");
        exit(2);
    }
}

/* 8 threads, each looking the functions up itself (the table of driver
 * functions is filled by whichever lookup comes first) and making 1000
 * allocations of 4 KiB, each freed: 8000 of each. */
static void *thread_main(void *arg)
{
    (void)arg;
    alloc_t alloc = (alloc_t)dlsym(g_cuda, "cuMemAlloc_v2");
    free_t mfree = FN(free_t, "cuMemFree");
    for (int i = 0; i < 1000; i++) {
        CUdeviceptr a;
        ok(alloc(&a, 4096), "cuMemAlloc_v2");
        ok(mfree(a), "cuMemFree_v2");
    }
    return NULL;
}

static void mode_threads(void)
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, thread_main, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: drv_calls alloc|vmm|async|host|v1|dlsym|threads|copies|rthandle|nbstream\n");
        return 2;
    }
    g_cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (g_cuda == NULL) {
        fprintf(stderr, "drv_calls: %s\n", dlerror());
        return 3;
    }
    g_gpa = (CUresult(*)(const char *, void **, int, cuuint64_t,
                         CUdriverProcAddressQueryResult *))
        dlsym(g_cuda, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(g_cuda, "cuInit");
    ok(init(0), "cuInit");
    const char *m = argv[1];
    if (strcmp(m, "alloc") == 0)
        mode_alloc();
    else if (strcmp(m, "vmm") == 0)
        mode_vmm();
    else if (strcmp(m, "async") == 0)
        mode_async();
    else if (strcmp(m, "host") == 0)
        mode_host();
    else if (strcmp(m, "v1") == 0)
        mode_v1();
    else if (strcmp(m, "dlsym") == 0)
        mode_dlsym();
    else if (strcmp(m, "threads") == 0)
        mode_threads();
    else if (strcmp(m, "nbstream") == 0)
        nb_stream(false);
    else if (strcmp(m, "nbdestroy") == 0)
        nb_stream(true);
    else if (strcmp(m, "copies") == 0)
        mode_copies();
    else if (strcmp(m, "rthandle") == 0)
        mode_rthandle();
    else
        return 2;
    printf("done\n");
    return 0;
}
