/*
 * sim_drv_mem.c - memory of the simulated CUDA driver (libcuda.so.1, see
 * sim_driver.c): the registry of live allocations, the allocator that
 * every allocating call ends in (drv_alloc / drv_free, also behind the
 * stream-ordered calls of sim_drv_async.c), device, managed and pinned
 * host memory with their 32-bit ABI stubs, and cuPointerGetAttribute.
 *
 * The memory is ordinary host memory from posix_memalign, handed out as
 * it is and never poisoned: device, managed and pool memory 512-byte
 * aligned, pinned host memory 4096-byte aligned.
 */
#include "sim_drv_internal.h"

#include <stdlib.h>

static size_t drv_round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* ------------------------------------------------------------------ */
/* Allocation registry (lock held)                                     */
/* ------------------------------------------------------------------ */

static size_t drv_slot(uintptr_t p, unsigned bits)
{
    return (size_t)(((uint64_t)p * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
}

/* Doubles the table when it averages more than one entry per chain; a
 * failed resize just leaves longer chains. */
static void drv_tab_grow(void)
{
    unsigned bits = drv.tab_bits + 1;
    struct drv_alloc **t = calloc((size_t)1 << bits, sizeof *t);
    if (!t)
        return;
    for (size_t i = 0; i < (size_t)1 << drv.tab_bits; i++) {
        for (struct drv_alloc *a = drv.tab[i], *next; a; a = next) {
            next = a->next;
            size_t s = drv_slot(a->base, bits);
            a->next = t[s];
            t[s] = a;
        }
    }
    free(drv.tab);
    drv.tab = t;
    drv.tab_bits = bits;
}

/*
 * The live allocations are also kept in a treap ordered by base address,
 * so that the allocation containing any pointer (copies, sets, pointer
 * attributes: device pointers may be interior, and unified copies and
 * attribute queries also look up host pointers) is found in O(log n).  Allocations
 * never overlap, so "p lies past a" means every candidate is on a's right.
 */
static uint64_t drv_prio_next(void)
{
    uint64_t z = (drv.prio_seed += 0x9E3779B97F4A7C15ULL); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Splits t into the nodes below key and those at or above it. */
static void drv_tree_split(struct drv_alloc *t, uintptr_t key, struct drv_alloc **lo,
                           struct drv_alloc **hi)
{
    if (!t) {
        *lo = *hi = NULL;
    } else if (t->base < key) {
        drv_tree_split(t->right, key, &t->right, hi);
        *lo = t;
    } else {
        drv_tree_split(t->left, key, lo, &t->left);
        *hi = t;
    }
}

/* Joins two treaps, every base in lo below every base in hi. */
static struct drv_alloc *drv_tree_merge(struct drv_alloc *lo, struct drv_alloc *hi)
{
    if (!lo)
        return hi;
    if (!hi)
        return lo;
    if (lo->prio > hi->prio) {
        lo->right = drv_tree_merge(lo->right, hi);
        return lo;
    }
    hi->left = drv_tree_merge(lo, hi->left);
    return hi;
}

static void drv_tree_insert(struct drv_alloc *a)
{
    struct drv_alloc **t = &drv.tree;
    a->prio = drv_prio_next();
    while (*t && (*t)->prio >= a->prio)
        t = a->base < (*t)->base ? &(*t)->left : &(*t)->right;
    drv_tree_split(*t, a->base, &a->left, &a->right);
    *t = a;
}

/* a must be in the tree. */
static void drv_tree_remove(struct drv_alloc *a)
{
    struct drv_alloc **t = &drv.tree;
    while (*t != a)
        t = a->base < (*t)->base ? &(*t)->left : &(*t)->right;
    *t = drv_tree_merge(a->left, a->right);
    a->left = a->right = NULL;
}

/* The live allocation that contains p, or NULL. */
struct drv_alloc *drv_tree_find(uintptr_t p)
{
    struct drv_alloc *t = drv.tree;
    while (t) {
        if (p < t->base)
            t = t->left;
        else if (p - t->base < t->size)
            return t;
        else
            t = t->right;
    }
    return NULL;
}

static void drv_tab_insert(struct drv_alloc *a)
{
    if (drv.nallocs >= (size_t)1 << drv.tab_bits && drv.tab_bits < 30)
        drv_tab_grow();
    size_t s = drv_slot(a->base, drv.tab_bits);
    a->next = drv.tab[s];
    drv.tab[s] = a;
    drv.nallocs++;
    drv_tree_insert(a);
}

/* Removes and returns the allocation that starts at p, if its kind is one
 * of `kinds`; NULL (and the registry unchanged) otherwise. */
static struct drv_alloc *drv_tab_take(uintptr_t p, unsigned kinds)
{
    for (struct drv_alloc **pp = &drv.tab[drv_slot(p, drv.tab_bits)]; *pp; pp = &(*pp)->next) {
        struct drv_alloc *a = *pp;
        if (a->base != p)
            continue;
        if (!(kinds & DRV_KIND(a->kind)))
            return NULL;
        *pp = a->next;
        drv.nallocs--;
        drv_tree_remove(a);
        return a;
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Allocations                                                         */
/* ------------------------------------------------------------------ */

/*
 * Allocates `size` bytes of `kind` for device `dev` (-1: no device, for
 * host memory and host pools).  Device and managed memory is charged
 * against the device's capacity; pool memory is charged when the pool has
 * to grow; pinned host memory is not charged.  Capacity is checked and
 * taken under the lock, so concurrent calls never overshoot it.
 */
CUresult drv_alloc(enum drv_kind kind, size_t size, int dev, struct CUmemPoolHandle_st *pool,
                   uintptr_t *out)
{
    size_t align = kind == DRV_HOST ? DRV_HOST_ALIGN : DRV_DEV_ALIGN;
    size_t rounded = drv_round_up(size, align), charge = 0, grow = 0;
    void *mem = NULL;
    void *lent = (kind == DRV_DEVICE || kind == DRV_MANAGED) && !pool ? drv_tls_lent : NULL;

    drv_tls_lent = NULL; /* one allocation, whatever becomes of it */

    *out = 0;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (rounded < size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct drv_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;

    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&drv.lock);
    if (pool && !drv_pool_is_live(pool)) {
        r = CUDA_ERROR_INVALID_VALUE; /* destroyed meanwhile, or never a pool */
    } else if (pool) {
        size_t cached = pool->reserved - pool->used;
        grow = size > cached ? size - cached : 0;
        if (pool->max_size && grow > pool->max_size - pool->reserved)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        dev = pool->device;
        charge = dev >= 0 ? grow : 0;
    } else if (kind == DRV_DEVICE || kind == DRV_MANAGED) {
        charge = size;
    }
    if (r == CUDA_SUCCESS && dev >= 0 && charge > drv.capacity - drv.dev[dev].used)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && lent)
        mem = lent;
    else if (r == CUDA_SUCCESS && posix_memalign(&mem, align, rounded) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        a->base = (uintptr_t)mem;
        a->lent = lent != NULL;
        a->size = size;
        a->device = dev;
        a->kind = kind;
        a->pool = pool;
        if (dev >= 0)
            drv.dev[dev].used += charge;
        if (pool) {
            pool->reserved += grow;
            pool->used += size;
            if (pool->reserved > pool->reserved_high)
                pool->reserved_high = pool->reserved;
            if (pool->used > pool->used_high)
                pool->used_high = pool->used;
        } else {
            a->charged = charge;
        }
        drv_tab_insert(a);
        drv.n_alloc++;
        *out = a->base;
        a = NULL;
    }
    pthread_mutex_unlock(&drv.lock);
    free(a);
    return r;
}

/* Frees the allocation that starts at p if its kind is one of `kinds`;
 * anything else (unknown, interior, wrong kind, freed) is
 * CUDA_ERROR_INVALID_VALUE. */
CUresult drv_free(uintptr_t p, unsigned kinds)
{
    pthread_mutex_lock(&drv.lock);
    struct drv_alloc *a = p ? drv_tab_take(p, kinds) : NULL;
    if (a) {
        if (a->charged)
            drv.dev[a->device].used -= a->charged;
        if (a->pool)
            drv_pool_release(a->pool, a->size);
        drv.n_free++;
    }
    pthread_mutex_unlock(&drv.lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a->lent)
        free((void *)a->base);
    free(a);
    return CUDA_SUCCESS;
}

/* Test-only (declared by its callers, like simDrvSetDevice): the calling
 * thread's next device or managed allocation (not a pool's) is made at
 * mem, memory the caller owns and keeps owning: the driver records and
 * charges it like its own, and its free only forgets it. The simulated
 * runtime lends its memory so that the runtime's pointers are the
 * driver's, as with the real runtime (sim_mem.c). */
_Thread_local void *drv_tls_lent;

CUresult simDrvLendMemory(void *mem)
{
    drv_tls_lent = mem;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Device, managed and pinned host memory                              */
/* ------------------------------------------------------------------ */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    uintptr_t p;
    r = drv_alloc(DRV_DEVICE, bytesize, drv_tls_device, NULL, &p);
    *dptr = (CUdeviceptr)p;
    return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    if (WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    size_t pitch = drv_round_up(WidthInBytes, DRV_DEV_ALIGN), bytes;
    if (pitch < WidthInBytes || __builtin_mul_overflow(pitch, Height, &bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t p;
    r = drv_alloc(DRV_DEVICE, bytes, drv_tls_device, NULL, &p);
    *dptr = (CUdeviceptr)p;
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    uintptr_t p;
    r = drv_alloc(DRV_MANAGED, bytesize, drv_tls_device, NULL, &p);
    *dptr = (CUdeviceptr)p;
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    return drv_free((uintptr_t)dptr, DRV_DEVICE_KINDS);
}

/* The 32-bit device pointer ABI cannot hold a host address: the functions
 * exist so that a lookup of an old version finds them, nothing more. */
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes)
{
    (void)dptr;
    (void)pPitch;
    (void)WidthInBytes;
    (void)Height;
    (void)ElementSizeBytes;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFree(unsigned int dptr)
{
    (void)dptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult drv_host_alloc(void **pp, size_t bytesize, unsigned int flags)
{
    const unsigned valid = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                           CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    *pp = NULL;
    if (flags & ~valid)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    uintptr_t p;
    r = drv_alloc(DRV_HOST, bytesize, -1, NULL, &p);
    *pp = (void *)p;
    return r;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return drv_host_alloc(pp, bytesize, 0);
}

/* Host pointers are 64-bit in both ABIs: the old one works. */
CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return drv_host_alloc(pp, bytesize, 0);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return drv_host_alloc(pp, bytesize, Flags);
}

CUresult cuMemFreeHost(void *p)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    return drv_free((uintptr_t)p, DRV_KIND(DRV_HOST));
}

/* ------------------------------------------------------------------ */
/* Pointer attributes                                                  */
/* ------------------------------------------------------------------ */

/*
 * Two attributes, answered as the real driver does: MEMORY_TYPE is
 * CU_MEMORYTYPE_DEVICE for device, managed and pool memory,
 * CU_MEMORYTYPE_HOST for pinned host memory (cuMemAllocHost,
 * cuMemHostAlloc, and pools located on the host); DEVICE_ORDINAL is the
 * allocation's device (host memory: the calling thread's current
 * device).  Interior pointers count.  Any other pointer - pageable host
 * memory, 0, virtual memory mappings - and any other attribute give
 * CUDA_ERROR_INVALID_VALUE.
 */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!data || (attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
                  attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    const struct drv_alloc *a = drv_tree_find((uintptr_t)ptr);
    if (!a) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (attribute == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
        bool host = a->kind == DRV_HOST || (a->kind == DRV_POOL && a->device < 0);
        *(CUmemorytype *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    } else {
        *(int *)data = a->device >= 0 ? a->device : drv_tls_device;
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* ------------------------------------------------------------------ */
/* Hidden aliases (sim_drv_internal.h)                                 */
/* ------------------------------------------------------------------ */

DRV_MEM_FUNCS(DRV_LOCAL)
