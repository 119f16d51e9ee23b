/*
 * sim_drv_vmm.c - the virtual memory management calls of the simulated
 * CUDA driver (libcuda.so.1, see sim_driver.c): the allocation
 * granularity (2 MiB), physical memory (cuMemCreate / cuMemRelease),
 * address reservations (cuMemAddressReserve / cuMemAddressFree, with
 * mmap(PROT_NONE)), cuMemMap / cuMemUnmap and cuMemSetAccess.
 *
 * Physical memory is bookkeeping only: a handle has a size and a location
 * to charge, no bytes, so mapped memory is never readable (sim_drv_copy.c
 * refuses copies that touch a reservation).  A handle's bytes are
 * uncharged once it is released and its last mapping is gone.
 */
#include "sim_drv_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Virtual memory management                                           */
/* ------------------------------------------------------------------ */

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r == CUDA_SUCCESS)
        *granularity = DRV_GRANULARITY;
    return r;
}

/* lock held */
static struct drv_handle *drv_handle_find(CUmemGenericAllocationHandle handle)
{
    for (struct drv_handle *h = drv.handles; h; h = h->next)
        if ((CUmemGenericAllocationHandle)(uintptr_t)h == handle)
            return h;
    return NULL;
}

/* Physical memory goes when its handle is released and its last mapping
 * is gone (lock held). */
static void drv_handle_maybe_free(struct drv_handle *h)
{
    if (!h->released || h->maps > 0)
        return;
    for (struct drv_handle **pp = &drv.handles; *pp; pp = &(*pp)->next) {
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    }
    if (h->device >= 0)
        drv.dev[h->device].used -= h->charged;
    h->magic = 0;
    free(h);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    if (!handle || !prop || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *handle = 0;
    if (size == 0 || size % DRV_GRANULARITY != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!drv_valid_device(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        dev = prop->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        dev = -1;
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (prop->location.id < 0)
            return CUDA_ERROR_INVALID_VALUE;
        dev = -1;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct drv_handle *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&drv.lock);
    if (dev >= 0 && size > drv.capacity - drv.dev[dev].used) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        h->magic = DRV_MAGIC_HANDLE;
        h->size = size;
        h->device = dev;
        h->charged = dev >= 0 ? size : 0;
        if (dev >= 0)
            drv.dev[dev].used += size;
        h->next = drv.handles;
        drv.handles = h;
        drv.n_alloc++;
        /* Opaque to the caller, like the real driver's handles. */
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
        h = NULL;
    }
    pthread_mutex_unlock(&drv.lock);
    free(h);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    struct drv_handle *h = drv_handle_find(handle);
    if (!h || h->released) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        h->released = true;
        drv.n_free++;
        drv_handle_maybe_free(h);
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* Reserves len bytes of PROT_NONE address space at a multiple of align
 * (a power of two), near hint if possible.  Returns NULL on failure. */
static void *drv_map_aligned(size_t len, size_t align, void *hint)
{
    const int prot = PROT_NONE, fl = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p;

    if (hint) {
        p = mmap(hint, len, prot, fl, -1, 0);
        if (p != MAP_FAILED && (uintptr_t)p % align == 0)
            return p;
        if (p != MAP_FAILED)
            munmap(p, len);
    }
    size_t over;
    if (__builtin_add_overflow(len, align, &over))
        return NULL;
    p = mmap(NULL, over, prot, fl, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* Trim the slack on both sides to leave an aligned range. */
    uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    size_t head = start - (uintptr_t)p, tail = over - head - len;
    if (head)
        munmap(p, head);
    if (tail)
        munmap((void *)(start + len), tail);
    return (void *)start;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    *ptr = 0;
    /* As documented: size and addr multiples of the page size, alignment
     * a power of two or 0 (the allocation granularity). */
    if (size == 0 || size % page != 0 || addr % page != 0 || flags != 0 ||
        (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (alignment < DRV_GRANULARITY)
        alignment = DRV_GRANULARITY;
    struct drv_reservation *res = calloc(1, sizeof *res);
    if (!res)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = drv_map_aligned(size, alignment, (void *)(uintptr_t)addr);
    if (!p) {
        free(res);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    res->base = (uintptr_t)p;
    res->size = size;
    pthread_mutex_lock(&drv.lock);
    res->next = drv.reservations;
    drv.reservations = res;
    pthread_mutex_unlock(&drv.lock);
    *ptr = (CUdeviceptr)res->base;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct drv_reservation *res = NULL;
    pthread_mutex_lock(&drv.lock);
    r = CUDA_ERROR_INVALID_VALUE;
    for (struct drv_reservation **pp = &drv.reservations; *pp; pp = &(*pp)->next) {
        struct drv_reservation *x = *pp;
        if (x->base != (uintptr_t)ptr)
            continue;
        /* The whole reservation, with nothing mapped in it any more. */
        if (x->size == size && !x->maps) {
            *pp = x->next;
            res = x;
            r = CUDA_SUCCESS;
        }
        break;
    }
    pthread_mutex_unlock(&drv.lock);
    if (res) {
        munmap((void *)res->base, res->size);
        free(res);
    }
    return r;
}

/* The reservation that contains [p, p+n) (lock held). */
static struct drv_reservation *drv_reservation_find(uintptr_t p, size_t n)
{
    for (struct drv_reservation *x = drv.reservations; x; x = x->next)
        if (p >= x->base && n <= x->size && p - x->base <= x->size - n)
            return x;
    return NULL;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    /* ptr, size and offset must be multiples of the granularity. */
    if (size == 0 || flags != 0 || ptr % DRV_GRANULARITY != 0 || size % DRV_GRANULARITY != 0 ||
        offset % DRV_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct drv_mapping *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t p = (uintptr_t)ptr;
    pthread_mutex_lock(&drv.lock);
    struct drv_handle *h = drv_handle_find(handle);
    struct drv_reservation *res = drv_reservation_find(p, size);
    if (!h || h->released || offset > h->size || size > h->size - offset || !res) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (struct drv_mapping *o = res->maps; o; o = o->next)
            if (p < o->base + o->size && o->base < p + size)
                r = CUDA_ERROR_INVALID_VALUE; /* already mapped */
    }
    if (r == CUDA_SUCCESS) {
        m->base = p;
        m->size = size;
        m->h = h;
        m->next = res->maps;
        res->maps = m;
        h->maps++;
        m = NULL;
    }
    pthread_mutex_unlock(&drv.lock);
    free(m);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    uintptr_t p = (uintptr_t)ptr;
    struct drv_mapping *dead = NULL;
    pthread_mutex_lock(&drv.lock);
    struct drv_reservation *res = drv_reservation_find(p, size);
    size_t covered = 0;
    if (!res) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Every mapping the range touches must lie entirely inside it:
         * mappings are not split.  At least one must be there. */
        for (struct drv_mapping *o = res->maps; o; o = o->next) {
            if (!(p < o->base + o->size && o->base < p + size))
                continue;
            if (o->base < p || o->base + o->size > p + size)
                r = CUDA_ERROR_INVALID_VALUE;
            covered++;
        }
        if (covered == 0)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    if (r == CUDA_SUCCESS) {
        for (struct drv_mapping **pp = &res->maps; *pp;) {
            struct drv_mapping *o = *pp;
            if (o->base >= p && o->base + o->size <= p + size) {
                *pp = o->next;
                o->next = dead;
                dead = o;
                o->h->maps--;
                drv_handle_maybe_free(o->h);
            } else {
                pp = &o->next;
            }
        }
    }
    pthread_mutex_unlock(&drv.lock);
    while (dead) {
        struct drv_mapping *next = dead->next;
        free(dead);
        dead = next;
    }
    return r;
}

/* Accepted and forgotten: nothing makes mapped memory accessible here. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    (void)ptr;
    if (size == 0 || !desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_enter();
}

/* ------------------------------------------------------------------ */
/* Hidden aliases (sim_drv_internal.h)                                 */
/* ------------------------------------------------------------------ */

DRV_VMM_FUNCS(DRV_LOCAL)
