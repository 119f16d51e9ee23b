/*
 * sim_mempool.c - stream-ordered allocation and memory pools of the
 * simulated CUDA runtime (tests/sim, see README.md): cudaMallocAsync,
 * cudaMallocFromPoolAsync, cudaFreeAsync (and their _ptsz twins), the
 * devices' default and current pools, cudaMemPoolCreate / Destroy /
 * TrimTo and pool attributes.
 *
 * An async allocation is made at once (capacity checked at the call, with
 * its driver twin as in sim_mem.c); only its free is stream ordered: the
 * memory goes back when the stream reaches the free.  A pool's memory is
 * charged to the pool as well as to the device; a pool destroyed while
 * allocations are live is freed with the last of them (sim_alloc_unlink).
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Stream-ordered allocation and pools                                 */
/* ------------------------------------------------------------------ */

static bool sim_pool_is_live(const struct CUmemPoolHandle_st *h)
{
    for (const struct CUmemPoolHandle_st *p = sim_g.pools; p; p = p->next)
        if (p == h)
            return true; /* destroyed pools are unlinked at once */
    return false;
}

/* Allocates immediately (capacity checked now); only the free is stream
 * ordered.  pool == NULL: the current pool of the stream's device. */
static cudaError_t sim_malloc_async(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t h)
{
    struct CUstream_st *s;
    struct sim_alloc *a = NULL;

    if (!ptr)
        return sim_ret(cudaErrorInvalidValue);
    *ptr = NULL;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    bool twin = sim_drv_ready();
    void *base = NULL;
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess && pool && !sim_pool_is_live(pool))
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess) {
        if (!pool)
            pool = sim_g.dev[s->device].current_pool;
        if (size > 0)
            err = sim_alloc_new(SIM_MEM_DEVICE, size, pool->device, 0, pool, &a);
        if (a) {
            base = (void *)a->base;
            a->freeing = twin; /* until it has its driver twin */
        }
    }
    sim_unlock();
    if (a && twin && (err = sim_drv_attach(a)) != cudaSuccess)
        base = NULL;
    *ptr = base;
    return sim_ret(err);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return sim_malloc_async(devPtr, size, NULL, hStream);
}

cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return sim_malloc_async(devPtr, size, NULL, SIM_PTSZ(hStream));
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    if (!memPool)
        return sim_ret(cudaErrorInvalidValue);
    return sim_malloc_async(ptr, size, memPool, stream);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    if (!memPool)
        return sim_ret(cudaErrorInvalidValue);
    return sim_malloc_async(ptr, size, memPool, SIM_PTSZ(stream));
}

static cudaError_t sim_free_async(void *ptr, cudaStream_t h)
{
    struct CUstream_st *s;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess || !ptr)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_FREE);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    struct sim_alloc *a = err == cudaSuccess ? sim_reg_find(ptr) : NULL;
    if (err == cudaSuccess &&
        (!a || a->base != (uintptr_t)ptr || a->freeing || a->type != SIM_MEM_DEVICE))
        err = cudaErrorInvalidValue;
    uintptr_t twin = 0;
    if (err == cudaSuccess) {
        /* Released when the stream reaches this point; until then the
         * memory stays allocated and charged, as with a real pool. */
        a->freeing = true;
        op->u.free.a = a;
        /* Its driver twin goes now, inside this call (see "The driver
         * underneath"). */
        twin = a->drv_ptr;
        a->drv_ptr = 0;
        err = sim_enqueue(s, op);
        if (err != cudaSuccess) {
            a->drv_ptr = twin; /* the allocation stays */
            twin = 0;
        }
    } else {
        free(op);
    }
    sim_unlock();
    if (twin)
        sim_drv_release(SIM_MEM_DEVICE, twin);
    return sim_ret(err);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return sim_free_async(devPtr, hStream);
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return sim_free_async(devPtr, SIM_PTSZ(hStream));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    if (!memPool)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);
    *memPool = sim_g.dev[device].default_pool;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    if (!memPool)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);
    sim_lock();
    *memPool = sim_g.dev[device].current_pool;
    sim_unlock();
    return cudaSuccess;
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);
    sim_lock();
    if (!sim_pool_is_live(memPool) || memPool->device != device)
        err = cudaErrorInvalidValue;
    else
        sim_g.dev[device].current_pool = memPool;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    if (!memPool || !poolProps)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (poolProps->allocType != cudaMemAllocationTypePinned ||
        poolProps->location.type != cudaMemLocationTypeDevice)
        return sim_ret(cudaErrorInvalidValue);
    if (!sim_valid_device(poolProps->location.id))
        return sim_ret(cudaErrorInvalidDevice);
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return sim_ret(cudaErrorMemoryAllocation);
    p->magic = SIM_MAGIC_POOL;
    p->device = poolProps->location.id;
    p->max_size = poolProps->maxSize;
    p->reuse_follow_event = p->reuse_opportunistic = p->reuse_internal = 1;
    sim_lock();
    p->next = sim_g.pools;
    sim_g.pools = p;
    sim_unlock();
    *memPool = p;
    return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = cudaErrorInvalidValue;
    for (struct CUmemPoolHandle_st **pp = &sim_g.pools; *pp; pp = &(*pp)->next) {
        struct CUmemPoolHandle_st *p = *pp;
        if (p != memPool)
            continue;
        if (p->is_default)
            break; /* a device's default pool cannot be destroyed */
        *pp = p->next;
        if (sim_g.dev[p->device].current_pool == p)
            sim_g.dev[p->device].current_pool = sim_g.dev[p->device].default_pool;
        /* Like the real runtime, outstanding allocations keep the pool
         * alive; the last free releases it (sim_alloc_unlink). */
        p->destroyed = true;
        if (p->used == 0) {
            p->magic = 0;
            free(p);
        }
        err = cudaSuccess;
        break;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    (void)minBytesToKeep; /* the simulated pool caches nothing */
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    if (!sim_pool_is_live(memPool))
        err = cudaErrorInvalidValue;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    if (!sim_pool_is_live(memPool)) {
        err = cudaErrorInvalidValue;
    } else {
        struct CUmemPoolHandle_st *p = memPool;
        /* Nothing is cached, so reserved == used. */
        switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies: *(int *)value = p->reuse_follow_event; break;
        case cudaMemPoolReuseAllowOpportunistic: *(int *)value = p->reuse_opportunistic; break;
        case cudaMemPoolReuseAllowInternalDependencies: *(int *)value = p->reuse_internal; break;
        case cudaMemPoolAttrReleaseThreshold: *(unsigned long long *)value = p->release_threshold; break;
        case cudaMemPoolAttrReservedMemCurrent:
        case cudaMemPoolAttrUsedMemCurrent: *(unsigned long long *)value = p->used; break;
        case cudaMemPoolAttrReservedMemHigh:
        case cudaMemPoolAttrUsedMemHigh: *(unsigned long long *)value = p->used_high; break;
        default: err = cudaErrorInvalidValue; break;
        }
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    if (!sim_pool_is_live(memPool)) {
        err = cudaErrorInvalidValue;
    } else {
        struct CUmemPoolHandle_st *p = memPool;
        switch (attr) {
        case cudaMemPoolReuseFollowEventDependencies: p->reuse_follow_event = *(int *)value != 0; break;
        case cudaMemPoolReuseAllowOpportunistic: p->reuse_opportunistic = *(int *)value != 0; break;
        case cudaMemPoolReuseAllowInternalDependencies: p->reuse_internal = *(int *)value != 0; break;
        case cudaMemPoolAttrReleaseThreshold: p->release_threshold = *(unsigned long long *)value; break;
        case cudaMemPoolAttrReservedMemHigh:
        case cudaMemPoolAttrUsedMemHigh:
            /* Only resetting the high watermark (to the current value) is allowed. */
            if (*(unsigned long long *)value != 0)
                err = cudaErrorInvalidValue;
            else
                p->used_high = p->used;
            break;
        default: err = cudaErrorInvalidValue; break; /* current values are read-only */
        }
    }
    sim_unlock();
    return sim_ret(err);
}
