/* vmm.c - the driver's virtual memory, for the pool (GPUMEMTRACE_POOL_VMM).
 *
 * With the option on, the pool's large segments are address ranges with
 * physical memory mapped wherever a block needs it, in pages of 2 MiB
 * (GPUMEMTRACE_POOL_VMM_PAGE_MB) and mappings of at most 16 MiB
 * (GPUMEMTRACE_POOL_VMM_CHUNK_MB; pool.h, pool_upstream.page and chunk). This file is that upstream: the driver's
 * cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess /
 * cuMemUnmap / cuMemRelease / cuMemAddressFree, called through the table
 * of libcuda's own functions (driver.c), so the driver-level observer
 * never records them as the program's.
 *
 * Access: every page is made readable and writable by its device and by
 * every device that can access it as a peer (cuDeviceCanAccessPeer), as
 * if the program had enabled peer access: cudaMalloc memory needs
 * cudaDeviceEnablePeerAccess first, these pages do not.
 *
 * Contexts: the calls need none current as far as the documentation says;
 * if the driver answers CUDA_ERROR_INVALID_CONTEXT anyway, the runtime is
 * asked to make its primary context current (cudaFree(NULL)) and the call
 * is made once more.
 */
#include <pthread.h>
#include <string.h>

#include "driver.h"
#include "pool.h"
#include "real.h"

/* The page: GPUMEMTRACE_POOL_VMM_PAGE_MB, a power of two (else 2 MiB). */
size_t gmt_vmm_page(void)
{
    size_t mb = (size_t)gmt_opt.pool_vmm_page_mb;
    if (mb & (mb - 1)) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            gmt_warn("GPUMEMTRACE_POOL_VMM_PAGE_MB=%zu is not a power of two; "
                     "using 2", mb);
        mb = 2;
    }
    return mb << 20;
}

#define PG gmt_vmm_page()

struct vdev {
    int state; /* 0: not looked at; 1: usable; -1: not */
    int naccess;
    CUmemAccessDesc access[POOL_MAX_DEVICES];
};

static struct vdev g_dev[POOL_MAX_DEVICES];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

#define FN(n) ((__typeof__(&n))gmt_drv_real[D_##n])

/* CUDA's errors for what the driver said: out of memory stays itself
 * (cudaErrorMemoryAllocation, 2, as CUDA_ERROR_OUT_OF_MEMORY); anything
 * else is said once and becomes an allocation failure too, which is what
 * the program's cudaMalloc can return. */
static int cuda_error(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        gmt_error_once(GMT_ERR_VMM, "%s failed (CUresult %d); the pool "
                       "reports an allocation failure (GPUMEMTRACE_POOL_VMM=0 "
                       "avoids virtual memory)", what, (int)r);
    return 2;
}

/* Is dev usable, with our pages? Fills its access list once. */
static bool usable(int dev)
{
    if (dev < 0 || dev >= POOL_MAX_DEVICES)
        return false;
    struct vdev *v = &g_dev[dev];
    int st = __atomic_load_n(&v->state, __ATOMIC_ACQUIRE);
    if (st)
        return st > 0;
    pthread_mutex_lock(&g_lock);
    if ((st = v->state) != 0)
        goto out;
    st = -1;
    if (!gmt_drv_table_init(NULL) || !FN(cuMemCreate) || !FN(cuMemMap) ||
        !FN(cuMemUnmap) || !FN(cuMemRelease) || !FN(cuMemAddressReserve) ||
        !FN(cuMemAddressFree) || !FN(cuMemSetAccess) ||
        !FN(cuMemGetAllocationGranularity) || !FN(cuDeviceGetAttribute))
        goto out;
    int supported = 0;
    if (FN(cuDeviceGetAttribute)(
            &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            dev) != CUDA_SUCCESS ||
        !supported)
        goto out;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    size_t gran = 0;
    if (FN(cuMemGetAllocationGranularity)(&gran, &prop,
                                          CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        gran == 0 || PG % gran != 0)
        goto out; /* pages the device cannot map one by one */
    v->naccess = 0;
    v->access[v->naccess++] = (CUmemAccessDesc){
        {CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int n = 0;
    if (FN(cuDeviceGetCount) && FN(cuDeviceCanAccessPeer) &&
        FN(cuDeviceGetCount)(&n) == CUDA_SUCCESS) {
        for (int peer = 0; peer < n && peer < POOL_MAX_DEVICES; peer++) {
            int can = 0;
            if (peer != dev &&
                FN(cuDeviceCanAccessPeer)(&can, peer, dev) == CUDA_SUCCESS &&
                can)
                v->access[v->naccess++] = (CUmemAccessDesc){
                    {CU_MEM_LOCATION_TYPE_DEVICE, peer},
                    CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        }
    }
    st = 1;
out:
    if (st < 0)
        gmt_info("virtual memory (pages of %zu MiB) is not available on "
                 "device %d: the pool uses plain segments there", PG >> 20,
                 dev);
    __atomic_store_n(&v->state, st, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
    return st > 0;
}

/* The driver wants a context after all: bind the runtime's. */
static bool bind_context(CUresult r)
{
    if (r != CUDA_ERROR_INVALID_CONTEXT)
        return false;
    if (GMT_REAL(cudaFree)(NULL) != cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        return false;
    }
    return true;
}

#define CALL(r, expr)                                                         \
    do {                                                                      \
        r = (expr);                                                           \
        if (bind_context(r))                                                  \
            r = (expr);                                                       \
    } while (0)

int gmt_vmm_reserve(int dev, size_t size, uintptr_t *out)
{
    if (!usable(dev))
        return cudaErrorNotSupported; /* pool.h: POOL_NO_VMM */
    CUdeviceptr p = 0;
    CUresult r;
    CALL(r, FN(cuMemAddressReserve)(&p, size, PG, 0, 0));
    if (r == CUDA_SUCCESS)
        *out = (uintptr_t)p;
    return cuda_error(r, "cuMemAddressReserve");
}

int gmt_vmm_unreserve(int dev, uintptr_t va, size_t size)
{
    (void)dev;
    CUresult r;
    CALL(r, FN(cuMemAddressFree)((CUdeviceptr)va, size));
    return cuda_error(r, "cuMemAddressFree");
}

int gmt_vmm_create(int dev, size_t size, uint64_t *handle)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    CUmemGenericAllocationHandle h = 0;
    CUresult r;
    CALL(r, FN(cuMemCreate)(&h, size, &prop, 0));
    if (r == CUDA_SUCCESS)
        *handle = (uint64_t)h;
    return cuda_error(r, "cuMemCreate");
}

int gmt_vmm_destroy(int dev, uint64_t handle)
{
    (void)dev;
    CUresult r;
    CALL(r, FN(cuMemRelease)((CUmemGenericAllocationHandle)handle));
    return cuda_error(r, "cuMemRelease");
}

int gmt_vmm_unmap(int dev, uintptr_t va, size_t size)
{
    (void)dev;
    CUresult r;
    CALL(r, FN(cuMemUnmap)((CUdeviceptr)va, size));
    return cuda_error(r, "cuMemUnmap");
}

/* The handle, then access to its range (the expensive call: 17-33 us on
 * an H200 per mapping, whatever its size, docs/benchmarks.md); all or
 * nothing. */
int gmt_vmm_map(int dev, uintptr_t va, size_t size, uint64_t handle)
{
    struct vdev *v = &g_dev[dev];
    CUresult r;
    CALL(r, FN(cuMemMap)((CUdeviceptr)va, size, 0,
                         (CUmemGenericAllocationHandle)handle, 0));
    if (r != CUDA_SUCCESS)
        return cuda_error(r, "cuMemMap");
    CALL(r, FN(cuMemSetAccess)((CUdeviceptr)va, size, v->access,
                               (size_t)v->naccess));
    if (r == CUDA_SUCCESS)
        return 0;
    FN(cuMemUnmap)((CUdeviceptr)va, size);
    return cuda_error(r, "cuMemSetAccess");
}

void gmt_vmm_reset_after_fork(void)
{
    memset(g_dev, 0, sizeof g_dev);
    pthread_mutex_init(&g_lock, NULL);
}
