/*
 * sim_drv_async.c - streams, stream-ordered allocation and memory pools of
 * the simulated CUDA driver (libcuda.so.1, see sim_driver.c).
 *
 * Nothing runs on streams: a stream is a handle that is kept and checked,
 * so synchronising only checks it, and cuMemAllocAsync / cuMemFreeAsync
 * take effect at once (through drv_alloc / drv_free, sim_drv_mem.c).  A
 * pool only does the accounting: it keeps freed bytes reserved (a device
 * pool's still charged to the device) until trimmed or destroyed, and
 * serves new allocations from them first; the bytes themselves come from
 * and go back to libc at each call.  Each device's default pool is made
 * at init (sim_driver.c).
 */
#include "sim_drv_internal.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ */
/* Pools (lock held)                                                   */
/* ------------------------------------------------------------------ */

/* A new live pool, first in drv.pools; NULL when out of memory. */
struct CUmemPoolHandle_st *drv_pool_new(int dev, bool is_default, size_t max_size)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->magic = DRV_MAGIC_POOL;
    p->device = dev;
    p->is_default = is_default;
    p->max_size = max_size;
    p->next = drv.pools;
    drv.pools = p;
    return p;
}

bool drv_pool_is_live(const struct CUmemPoolHandle_st *h)
{
    for (const struct CUmemPoolHandle_st *p = drv.pools; p; p = p->next)
        if (p == h)
            return true;
    return false;
}

static void drv_pool_uncharge(struct CUmemPoolHandle_st *p, size_t bytes)
{
    p->reserved -= bytes;
    if (p->device >= 0)
        drv.dev[p->device].used -= bytes;
}

/* An allocation of the pool went away.  A destroyed pool gives its bytes
 * back at once and disappears with its last allocation. */
void drv_pool_release(struct CUmemPoolHandle_st *p, size_t size)
{
    p->used -= size;
    if (!p->destroyed)
        return; /* the bytes stay reserved (cached) until trimmed */
    drv_pool_uncharge(p, size);
    if (p->used == 0) {
        p->magic = 0;
        free(p);
    }
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

/* The device of a stream handle (lock held): NULL, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD are the current device's. */
CUresult drv_stream_device(CUstream h, int *dev)
{
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        *dev = drv_tls_device;
        return CUDA_SUCCESS;
    }
    for (struct CUstream_st *s = drv.streams; s; s = s->next) {
        if (s == h) {
            *dev = s->device;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    if (!phStream || (Flags != CU_STREAM_DEFAULT && Flags != CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = DRV_MAGIC_STREAM;
    s->device = drv_tls_device;
    s->flags = Flags;
    pthread_mutex_lock(&drv.lock);
    s->next = drv.streams;
    drv.streams = s;
    pthread_mutex_unlock(&drv.lock);
    *phStream = s;
    return CUDA_SUCCESS;
}

static CUresult drv_stream_destroy(CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUstream_st *dead = NULL;
    pthread_mutex_lock(&drv.lock);
    for (struct CUstream_st **pp = &drv.streams; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            dead = h;
            *pp = dead->next;
            break;
        }
    }
    pthread_mutex_unlock(&drv.lock);
    if (!dead)
        return CUDA_ERROR_INVALID_HANDLE;
    dead->magic = 0;
    free(dead);
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
    return drv_stream_destroy(hStream);
}

CUresult cuStreamDestroy(CUstream hStream)
{
    return drv_stream_destroy(hStream);
}

/* The driver is up and h is a live stream (of device *dev). */
static CUresult drv_enter_stream(CUstream h, int *dev)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, dev);
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* Nothing is ever queued: synchronising only checks the handle. */
static CUresult drv_stream_sync(CUstream h)
{
    int dev;
    return drv_enter_stream(h, &dev);
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    return drv_stream_sync(hStream);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return drv_stream_sync(hStream);
}

/* ------------------------------------------------------------------ */
/* Stream-ordered allocation and memory pools                          */
/* ------------------------------------------------------------------ */

/* Both lookups below: a direct call, never through the PLT, where a
 * preloaded library could interpose. */
static CUresult drv_default_pool(CUmemoryPool *pool_out, CUdevice dev)
{
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    *pool_out = drv.dev[dev].default_pool;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return drv_default_pool(pool_out, dev);
}

/* There is no cuDeviceSetMemPool: the current pool is the default one. */
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return drv_default_pool(pool, dev);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    switch (poolProps->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!drv_valid_device(poolProps->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        dev = poolProps->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        dev = -1;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&drv.lock);
    struct CUmemPoolHandle_st *p = drv_pool_new(dev, false, poolProps->maxSize);
    pthread_mutex_unlock(&drv.lock);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = p;
    return CUDA_SUCCESS;
}

/* Like the real driver, a pool destroyed with allocations outstanding
 * lives on until the last of them is freed; its cached bytes go now. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    if (!drv_pool_is_live(pool) || pool->is_default) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (struct CUmemPoolHandle_st **pp = &drv.pools; *pp; pp = &(*pp)->next) {
            if (*pp == pool) {
                *pp = pool->next;
                break;
            }
        }
        drv_pool_uncharge(pool, pool->reserved - pool->used);
        pool->destroyed = true;
        if (pool->used == 0) {
            pool->magic = 0;
            free(pool);
        }
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    if (!drv_pool_is_live(pool)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Memory in use is never released. */
        size_t keep = minBytesToKeep < pool->reserved ? minBytesToKeep : pool->reserved;
        if (keep < pool->used)
            keep = pool->used;
        drv_pool_uncharge(pool, pool->reserved - keep);
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    if (!drv_pool_is_live(pool)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (attr) {
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* Served at once from host memory; only the stream handle is checked.
 * pool == NULL: the default pool of the stream's device. */
static CUresult drv_alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    int dev;
    CUresult r = drv_enter_stream(h, &dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        pool = drv.dev[dev].default_pool; /* never destroyed */
    uintptr_t p;
    r = drv_alloc(DRV_POOL, size, -1, pool, &p); /* checks that the pool is live */
    *dptr = (CUdeviceptr)p;
    return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return drv_alloc_async(dptr, bytesize, NULL, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return drv_alloc_async(dptr, bytesize, NULL, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_alloc_async(dptr, bytesize, pool, hStream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_alloc_async(dptr, bytesize, pool, hStream);
}

/* The free takes effect at once (nothing is queued on streams). */
static CUresult drv_free_async(CUdeviceptr dptr, CUstream h)
{
    int dev;
    CUresult r = drv_enter_stream(h, &dev);
    if (r != CUDA_SUCCESS)
        return r;
    return drv_free((uintptr_t)dptr, DRV_DEVICE_KINDS);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return drv_free_async(dptr, hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return drv_free_async(dptr, hStream);
}

/* ------------------------------------------------------------------ */
/* Hidden aliases (sim_drv_internal.h)                                 */
/* ------------------------------------------------------------------ */

DRV_ASYNC_FUNCS(DRV_LOCAL)
