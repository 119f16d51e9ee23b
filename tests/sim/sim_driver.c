/*
 * sim_driver.c - a simulated CUDA driver, libcuda.so.1 (tests/sim, see
 * README.md), backed by host memory, for the CPU test suite.
 *
 * It stands in for NVIDIA's driver in two roles: what a program that uses
 * the driver API links or dlopens, and what the simulated runtime reaches
 * underneath its allocations when SIM_CUDA_DRIVER=1 (sim_mem.c).  It is a
 * separate library with its own state: it shares no code with the runtime
 * simulator (whose sources it must not be linked with), only the
 * conventions: SIM_CUDA_DEVICES and SIM_CUDA_MEM, the device name and UUID,
 * 512-byte aligned device memory and 4096-byte aligned pinned host memory.
 *
 * Exported: the device queries, the allocation, virtual memory and
 * stream-ordered calls a memory profiler watches, the linear copies and
 * sets (done at once) with cuPointerGetAttribute, cuGetProcAddress (v1 and
 * _v2) with the real driver's version and per-thread-stream rules, and
 * simDrvSetDevice for tests.  Everything else is static; libcuda.map
 * exports only cu[A-Z]* and simDrv[A-Z]*.
 *
 * cuGetProcAddress must hand out exactly the addresses dlsym finds in this
 * library, even when a preloaded library (the profiler) exports the same
 * names: in a -fPIC library a plain &cuMemAlloc_v2 goes through the GOT
 * and would yield the interposer's function.  The lookup table therefore
 * uses hidden aliases (DRV_LOCAL), which bind locally; for the same reason
 * no exported function calls another exported one.
 *
 * One mutex protects all state; the current device is per thread.  The
 * model is deliberately simple: nothing runs on streams, so stream-ordered
 * frees, copies and sets take effect at once, and memory mapped through the
 * virtual memory calls is never readable (the physical handles are
 * bookkeeping only).
 */
#include <cuda.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* cuda.h renames these to their newest ABI (cuMemAlloc -> cuMemAlloc_v2);
 * the driver exports both, so the old names must be plain names here. */
#undef cuDeviceTotalMem
#undef cuDeviceGetUuid
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemAllocHost
#undef cuStreamDestroy
#undef cuGetProcAddress
#undef cuMemcpyHtoD
#undef cuMemcpyDtoH
#undef cuMemcpyDtoD
#undef cuMemcpyHtoDAsync
#undef cuMemcpyDtoHAsync
#undef cuMemcpyDtoDAsync
#undef cuMemsetD8
#undef cuMemsetD16
#undef cuMemsetD32
/* Only renamed in per-thread-stream builds; undone in case one sets it. */
#undef cuMemAllocAsync
#undef cuMemAllocFromPoolAsync
#undef cuMemFreeAsync
#undef cuStreamSynchronize
#undef cuMemcpy
#undef cuMemcpyAsync
#undef cuMemsetD8Async
#undef cuMemsetD16Async
#undef cuMemsetD32Async

#define DRV_MAX_DEVICES 8
#define DRV_DEV_ALIGN 512                 /* device / managed / pool memory, pitches */
#define DRV_HOST_ALIGN 4096               /* pinned host memory */
#define DRV_GRANULARITY ((size_t)2 << 20) /* VMM: 2 MiB, as on the H100 / H200 */
#define DRV_VERSION 13000
/* Magic numbers make a stale or foreign handle recognisable in a
 * debugger; validity itself is decided by list membership. */
#define DRV_MAGIC_STREAM 0x44535452U      /* "DSTR" */
#define DRV_MAGIC_POOL 0x44504f4cU        /* "DPOL" */
#define DRV_MAGIC_HANDLE 0x44484e44U      /* "DHND" */

/* The old ABI of the functions that have a _v2 (32-bit sizes and device
 * pointers), and the per-thread-default-stream variants: cuda.h declares
 * neither in an ordinary build. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes);
CUresult cuMemFree(unsigned int dptr);
CUresult cuMemAllocHost(void **pp, unsigned int bytesize);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuMemcpyHtoD(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult cuMemcpyDtoH(void *dstHost, unsigned int srcDevice, unsigned int ByteCount);
CUresult cuMemcpyDtoD(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount);
CUresult cuMemcpyHtoDAsync(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemcpyDtoHAsync(void *dstHost, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemcpyDtoDAsync(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemsetD8(unsigned int dstDevice, unsigned char uc, unsigned int N);
CUresult cuMemsetD16(unsigned int dstDevice, unsigned short us, unsigned int N);
CUresult cuMemsetD32(unsigned int dstDevice, unsigned int ui, unsigned int N);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

/* Test-only: makes `ordinal` the calling thread's current device (what
 * cuCtxGetDevice reports and allocations are charged to). */
CUresult simDrvSetDevice(int ordinal);

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */

enum drv_kind { DRV_DEVICE, DRV_MANAGED, DRV_HOST, DRV_POOL };
#define DRV_KIND(k) (1u << (k))
#define DRV_DEVICE_KINDS (DRV_KIND(DRV_DEVICE) | DRV_KIND(DRV_MANAGED) | DRV_KIND(DRV_POOL))

/* A live allocation; chained in a hash table keyed by its base address. */
struct drv_alloc {
    uintptr_t base;
    size_t size;                       /* as requested (pitch * height for pitched) */
    size_t charged;                    /* bytes taken from device->used (pools: 0) */
    int device;
    enum drv_kind kind;
    struct CUmemPoolHandle_st *pool;   /* DRV_POOL only */
    struct drv_alloc *next;
    struct drv_alloc *left, *right;    /* the address-ordered treap */
    uint64_t prio;
};

/* Physical memory of the virtual memory API: bookkeeping, no bytes. */
struct drv_handle {
    uint32_t magic;
    size_t size;
    int device;                        /* -1: host location */
    size_t charged;
    bool released;                     /* cuMemRelease called; lives while mapped */
    unsigned maps;
    struct drv_handle *next;
};

struct drv_mapping {
    uintptr_t base;
    size_t size;
    struct drv_handle *h;
    struct drv_mapping *next;
};

/* An address range reserved with mmap(PROT_NONE). */
struct drv_reservation {
    uintptr_t base;
    size_t size;                       /* a multiple of the page size */
    struct drv_mapping *maps;
    struct drv_reservation *next;
};

/* A memory pool keeps freed bytes reserved (charged to its device) until
 * trimmed or destroyed; allocations take cached bytes first. */
struct CUmemPoolHandle_st {
    uint32_t magic;
    int device;                        /* -1: host location, not charged */
    bool is_default;
    bool destroyed;                    /* unlinked; freed with its last allocation */
    size_t max_size;                   /* 0: no limit but the device's */
    size_t used, used_high, reserved, reserved_high;
    struct CUmemPoolHandle_st *next;
};

struct CUstream_st {
    uint32_t magic;
    int device;
    unsigned flags;
    struct CUstream_st *next;
};

struct drv_device {
    size_t used;                       /* charged bytes; never above capacity */
    struct CUmemPoolHandle_st *default_pool;
};

static struct {
    pthread_mutex_t lock;
    int ndev;
    size_t capacity;                   /* per device */
    struct drv_device dev[DRV_MAX_DEVICES];
    struct drv_alloc **tab;            /* 1 << tab_bits chains */
    unsigned tab_bits;
    size_t nallocs;
    struct drv_alloc *tree;            /* the same allocations, ordered by address */
    uint64_t prio_seed;
    struct drv_handle *handles;
    struct drv_reservation *reservations;
    struct CUmemPoolHandle_st *pools;  /* live (not destroyed) pools */
    struct CUstream_st *streams;
    unsigned long long n_alloc, n_free, n_lookup; /* SIM_CUDA_DRIVER_STATS */
} drv = { .lock = PTHREAD_MUTEX_INITIALIZER };

static _Thread_local int drv_tls_device;  /* current device, default 0 */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static size_t drv_round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */
/* ------------------------------------------------------------------ */

/* "123", "64K", "512M", "1G", "2T", optional B: the parser of the runtime
 * simulator (sim_core.c), so that both read SIM_CUDA_MEM alike. */
static bool drv_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    unsigned long long v, mult = 1;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    switch (*end) {
    case 'k': case 'K': mult = 1ULL << 10; end++; break;
    case 'm': case 'M': mult = 1ULL << 20; end++; break;
    case 'g': case 'G': mult = 1ULL << 30; end++; break;
    case 't': case 'T': mult = 1ULL << 40; end++; break;
    default: break;
    }
    if (mult > 1 && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0' || v == 0 || v > ~0ULL / mult)
        return false;
    *out = v * mult;
    return true;
}

static struct CUmemPoolHandle_st *drv_pool_new(int dev, bool is_default, size_t max_size)
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

static void drv_init_once(void)
{
    const char *env;
    unsigned long long ndev = 1, cap = 1ULL << 30;

    env = getenv("SIM_CUDA_DEVICES");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (errno || end == env || *end != '\0' || env[0] == '-') {
            fprintf(stderr, "simcuda: invalid SIM_CUDA_DEVICES=\"%s\", using 1 device\n", env);
        } else if (v > DRV_MAX_DEVICES) {
            fprintf(stderr, "simcuda: SIM_CUDA_DEVICES=%s exceeds the maximum, using 8 devices\n", env);
            ndev = DRV_MAX_DEVICES;
        } else {
            ndev = v; /* 0: no device */
        }
    }
    env = getenv("SIM_CUDA_MEM");
    if (env && *env && !drv_parse_size(env, &cap)) {
        fprintf(stderr, "simcuda: invalid SIM_CUDA_MEM=\"%s\", using 1G per device\n", env);
        cap = 1ULL << 30;
    }
    if (cap > (unsigned long long)SIZE_MAX)
        cap = SIZE_MAX;

    pthread_mutex_lock(&drv.lock);
    drv.ndev = (int)ndev;
    drv.capacity = (size_t)cap;
    drv.tab_bits = 10;
    drv.tab = calloc((size_t)1 << drv.tab_bits, sizeof *drv.tab);
    for (int d = 0; d < drv.ndev; d++)
        drv.dev[d].default_pool = drv_pool_new(d, true, 0);
    pthread_mutex_unlock(&drv.lock);
}

/* Every entry point starts here.  Returns CUDA_ERROR_NO_DEVICE when
 * SIM_CUDA_DEVICES=0, or when init could not get its memory. */
static CUresult drv_enter(void)
{
    (void)pthread_once(&drv_once, drv_init_once);
    if (drv.ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (!drv.tab || !drv.dev[drv.ndev - 1].default_pool)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

static bool drv_valid_device(CUdevice dev)
{
    return dev >= 0 && dev < drv.ndev;
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
static struct drv_alloc *drv_tree_find(uintptr_t p)
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
/* Pools (lock held)                                                   */
/* ------------------------------------------------------------------ */

static bool drv_pool_is_live(const struct CUmemPoolHandle_st *h)
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
static void drv_pool_release(struct CUmemPoolHandle_st *p, size_t size)
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
/* Allocations                                                         */
/* ------------------------------------------------------------------ */

/*
 * Allocates `size` bytes of `kind` for device `dev` (-1: no device, for
 * host memory and host pools).  Device and managed memory is charged
 * against the device's capacity; pool memory is charged when the pool has
 * to grow; pinned host memory is not charged.  Capacity is checked and
 * taken under the lock, so concurrent calls never overshoot it.
 */
static CUresult drv_alloc(enum drv_kind kind, size_t size, int dev, struct CUmemPoolHandle_st *pool,
                          uintptr_t *out)
{
    size_t align = kind == DRV_HOST ? DRV_HOST_ALIGN : DRV_DEV_ALIGN;
    size_t rounded = drv_round_up(size, align), charge = 0, grow = 0;
    void *mem = NULL;

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
    if (r == CUDA_SUCCESS && posix_memalign(&mem, align, rounded) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        a->base = (uintptr_t)mem;
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
static CUresult drv_free(uintptr_t p, unsigned kinds)
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
    free((void *)a->base);
    free(a);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialisation, versions, devices, context                          */
/* ------------------------------------------------------------------ */

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_enter();
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = DRV_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    (void)drv_enter();
    *count = drv.ndev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", "gpumemtrace simulated device");
    return CUDA_SUCCESS;
}

static CUresult drv_total_mem(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = drv.capacity;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    return drv_total_mem(bytes, dev);
}

/* The 32-bit ABI saturates rather than wrapping. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_total_mem(&b, dev);
    if (r == CUDA_SUCCESS)
        *bytes = b > UINT_MAX ? UINT_MAX : (unsigned int)b;
    return r;
}

/* The runtime simulator's UUID: "gmtsim-gpu-0", three zeros, the ordinal. */
static CUresult drv_uuid(CUuuid *uuid, CUdevice dev)
{
    static const char prefix[12] = { 'g', 'm', 't', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '0' };
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, prefix, sizeof prefix);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return drv_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return drv_uuid(uuid, dev);
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r == CUDA_SUCCESS)
        *device = drv_tls_device;
    return r;
}

CUresult simDrvSetDevice(int ordinal)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    drv_tls_device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult drv_mem_info(size_t *free_b, size_t *total_b)
{
    if (!free_b || !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    *free_b = drv.capacity - drv.dev[drv_tls_device].used;
    *total_b = drv.capacity;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    return drv_mem_info(free_b, total_b);
}

CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b)
{
    size_t f = 0, t = 0;
    if (!free_b || !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_mem_info(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free_b = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        *total_b = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return r;
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
/* Streams                                                             */
/* ------------------------------------------------------------------ */

/* The device of a stream handle (lock held): NULL, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD are the current device's. */
static CUresult drv_stream_device(CUstream h, int *dev)
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

/* Nothing is ever queued: synchronising only checks the handle. */
static CUresult drv_stream_sync(CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    pthread_mutex_unlock(&drv.lock);
    return r;
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

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = drv.dev[dev].default_pool;
    return CUDA_SUCCESS;
}

/* There is no cuDeviceSetMemPool: the current pool is the default one. */
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!drv_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = drv.dev[dev].default_pool;
    return CUDA_SUCCESS;
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
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    pthread_mutex_unlock(&drv.lock);
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
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    pthread_mutex_unlock(&drv.lock);
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
/* Copies, sets, pointer attributes                                    */
/* ------------------------------------------------------------------ */

/*
 * Copies and sets happen at once, under the lock (so that no allocation
 * they touch can be freed meanwhile), with memmove / stores on the bytes
 * this library handed out; nothing is queued, streams are only checked.
 * What the real driver (580, H200) does and this follows:
 *  - a zero-byte copy or set succeeds without looking at its pointers;
 *  - a device side must lie entirely in one live allocation, of any kind:
 *    pinned host memory is accepted there too (unified addressing), not
 *    pageable host memory;
 *  - cuMemcpy / cuMemcpyAsync take a pointer inside an allocation as that
 *    allocation's memory (and check the size), anything else as host
 *    memory;
 *  - D16 / D32 sets need a 2 / 4-byte aligned destination.
 * Host memory is not checked beyond this: not NULL, no wrap-around, and
 * not inside a virtual memory reservation, which is never readable here
 * (a copy there is CUDA_ERROR_INVALID_VALUE rather than a crash).
 */
enum drv_side {
    DRV_SIDE_DEV,     /* inside one live allocation */
    DRV_SIDE_HOST,    /* host memory */
    DRV_SIDE_ANY      /* unified addressing: an allocation if in one, host otherwise */
};

/* Whether [p, p + n), n > 0, is acceptable as a side of a copy or set
 * (lock held). */
static bool drv_range_ok(uintptr_t p, size_t n, enum drv_side side)
{
    if (side != DRV_SIDE_HOST) {
        const struct drv_alloc *a = drv_tree_find(p);
        if (a)
            return n <= a->size - (p - a->base);
        if (side == DRV_SIDE_DEV)
            return false;
    }
    if (p == 0 || n - 1 > UINTPTR_MAX - p)
        return false;
    for (const struct drv_reservation *x = drv.reservations; x; x = x->next)
        if (p < x->base + x->size && x->base <= p + (n - 1))
            return false;
    return true;
}

static CUresult drv_copy(uintptr_t dst, enum drv_side dst_side, uintptr_t src, enum drv_side src_side,
                         size_t n, CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    if (r == CUDA_SUCCESS && n > 0) {
        if (drv_range_ok(dst, n, dst_side) && drv_range_ok(src, n, src_side))
            memmove((void *)dst, (const void *)src, n); /* the ranges may overlap */
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* Sets count elements of elem (1, 2 or 4) bytes at dst to value. */
static CUresult drv_set(uintptr_t dst, uint32_t value, size_t elem, size_t count, CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    size_t bytes;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    if (r == CUDA_SUCCESS && count > 0) {
        if (dst % elem != 0 || __builtin_mul_overflow(count, elem, &bytes) ||
            !drv_range_ok(dst, bytes, DRV_SIDE_DEV)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (elem == 1) {
            memset((void *)dst, (int)(value & 0xff), bytes);
        } else if (elem == 2) {
            uint16_t *q = (uint16_t *)dst;
            for (size_t i = 0; i < count; i++)
                q[i] = (uint16_t)value;
        } else {
            uint32_t *q = (uint32_t *)dst;
            for (size_t i = 0; i < count; i++)
                q[i] = value;
        }
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

#define DRV_D DRV_SIDE_DEV
#define DRV_H DRV_SIDE_HOST
#define DRV_A DRV_SIDE_ANY

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, NULL);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, NULL);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, hStream);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, NULL);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, NULL);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, hStream);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, NULL);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, NULL);
}

CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, NULL);
}

CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, NULL);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, NULL);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, NULL);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, hStream);
}

CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, hStream);
}

CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, hStream);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, hStream);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, hStream);
}

#undef DRV_D
#undef DRV_H
#undef DRV_A

/* The 32-bit device pointer ABI (before CUDA 3.2), like cuMemAlloc: only
 * there so that a lookup of an old version finds a real function. */
CUresult cuMemcpyHtoD(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount)
{
    (void)dstDevice;
    (void)srcHost;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoH(void *dstHost, unsigned int srcDevice, unsigned int ByteCount)
{
    (void)dstHost;
    (void)srcDevice;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoD(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount)
{
    (void)dstDevice;
    (void)srcDevice;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyHtoDAsync(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstDevice;
    (void)srcHost;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoHAsync(void *dstHost, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstHost;
    (void)srcDevice;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoDAsync(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstDevice;
    (void)srcDevice;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD8(unsigned int dstDevice, unsigned char uc, unsigned int N)
{
    (void)dstDevice;
    (void)uc;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD16(unsigned int dstDevice, unsigned short us, unsigned int N)
{
    (void)dstDevice;
    (void)us;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD32(unsigned int dstDevice, unsigned int ui, unsigned int N)
{
    (void)dstDevice;
    (void)ui;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

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
/* cuGetProcAddress                                                    */
/* ------------------------------------------------------------------ */

/* Hidden aliases of the exported functions: taking their address cannot
 * be diverted to an interposer (see the comment at the top). */
#define DRV_LOCAL(n) extern __typeof__(n) drv_local_##n __attribute__((alias(#n), visibility("hidden")));
#define DRV_LOCALS(X)                                                                         \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)     \
    X(cuDeviceTotalMem) X(cuDeviceTotalMem_v2) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)       \
    X(cuDeviceGetAttribute) X(cuCtxGetDevice) X(cuMemGetInfo) X(cuMemGetInfo_v2)              \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemFree) X(cuMemFree_v2) X(cuMemAllocPitch)            \
    X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemAllocHost) X(cuMemAllocHost_v2)         \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemGetAllocationGranularity) X(cuMemCreate)        \
    X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)      \
    X(cuMemSetAccess) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)   \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)                  \
    X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) \
    X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuStreamCreate) X(cuStreamDestroy)          \
    X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz)                  \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync)    \
    X(cuMemcpyAsync_ptsz) X(cuMemcpyHtoD) X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds)          \
    X(cuMemcpyDtoH) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD)                \
    X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyHtoDAsync) X(cuMemcpyHtoDAsync_v2)   \
    X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoHAsync_v2)                 \
    X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync) X(cuMemcpyDtoDAsync_v2)                 \
    X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemsetD8) X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds)         \
    X(cuMemsetD16) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) X(cuMemsetD32) X(cuMemsetD32_v2)  \
    X(cuMemsetD32_v2_ptds) X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async)     \
    X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz)                     \
    X(cuPointerGetAttribute)
DRV_LOCALS(DRV_LOCAL)

#define F(n) ((void *)drv_local_##n)

/*
 * What cuGetProcAddress knows, by base name.  `since`: the first CUDA
 * version that has the function (an older request gets SUCCESS, a NULL
 * pointer and VERSION_NOT_SUFFICIENT, as the real driver answers);
 * `v2_since`: from that version on the _v2 ABI is returned, before it the
 * base one; `ptsz`: the per-thread-default-stream variant, returned for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM from `ptsz_since` on
 * (before it that flag gets SUCCESS, NULL and VERSION_NOT_SUFFICIENT, even
 * where the default one is found).  Versions as measured on driver 580
 * (H200).
 */
static const struct drv_sym {
    const char *name;
    int since;
    void *base;
    int v2_since;
    void *v2;
    void *ptsz;
    int ptsz_since;
} drv_syms[] = {
    { "cuInit", 2000, F(cuInit), 0, NULL, NULL, 0 },
    { "cuDriverGetVersion", 2020, F(cuDriverGetVersion), 0, NULL, NULL, 0 },
    { "cuDeviceGet", 2000, F(cuDeviceGet), 0, NULL, NULL, 0 },
    { "cuDeviceGetCount", 2000, F(cuDeviceGetCount), 0, NULL, NULL, 0 },
    { "cuDeviceGetName", 2000, F(cuDeviceGetName), 0, NULL, NULL, 0 },
    { "cuDeviceTotalMem", 2000, F(cuDeviceTotalMem), 3020, F(cuDeviceTotalMem_v2), NULL, 0 },
    { "cuDeviceGetUuid", 9020, F(cuDeviceGetUuid), 11040, F(cuDeviceGetUuid_v2), NULL, 0 },
    { "cuDeviceGetAttribute", 2000, F(cuDeviceGetAttribute), 0, NULL, NULL, 0 },
    { "cuCtxGetDevice", 2000, F(cuCtxGetDevice), 0, NULL, NULL, 0 },
    { "cuMemGetInfo", 2000, F(cuMemGetInfo), 3020, F(cuMemGetInfo_v2), NULL, 0 },
    { "cuMemAlloc", 2000, F(cuMemAlloc), 3020, F(cuMemAlloc_v2), NULL, 0 },
    { "cuMemFree", 2000, F(cuMemFree), 3020, F(cuMemFree_v2), NULL, 0 },
    { "cuMemAllocPitch", 2000, F(cuMemAllocPitch), 3020, F(cuMemAllocPitch_v2), NULL, 0 },
    { "cuMemAllocManaged", 6000, F(cuMemAllocManaged), 0, NULL, NULL, 0 },
    { "cuMemAllocHost", 2000, F(cuMemAllocHost), 3020, F(cuMemAllocHost_v2), NULL, 0 },
    { "cuMemHostAlloc", 2020, F(cuMemHostAlloc), 0, NULL, NULL, 0 },
    { "cuMemFreeHost", 2000, F(cuMemFreeHost), 0, NULL, NULL, 0 },
    { "cuMemGetAllocationGranularity", 10020, F(cuMemGetAllocationGranularity), 0, NULL, NULL, 0 },
    { "cuMemCreate", 10020, F(cuMemCreate), 0, NULL, NULL, 0 },
    { "cuMemRelease", 10020, F(cuMemRelease), 0, NULL, NULL, 0 },
    { "cuMemAddressReserve", 10020, F(cuMemAddressReserve), 0, NULL, NULL, 0 },
    { "cuMemAddressFree", 10020, F(cuMemAddressFree), 0, NULL, NULL, 0 },
    { "cuMemMap", 10020, F(cuMemMap), 0, NULL, NULL, 0 },
    { "cuMemUnmap", 10020, F(cuMemUnmap), 0, NULL, NULL, 0 },
    { "cuMemSetAccess", 10020, F(cuMemSetAccess), 0, NULL, NULL, 0 },
    { "cuMemAllocAsync", 11020, F(cuMemAllocAsync), 0, NULL, F(cuMemAllocAsync_ptsz), 11020 },
    { "cuMemAllocFromPoolAsync", 11020, F(cuMemAllocFromPoolAsync), 0, NULL,
      F(cuMemAllocFromPoolAsync_ptsz), 11020 },
    { "cuMemFreeAsync", 11020, F(cuMemFreeAsync), 0, NULL, F(cuMemFreeAsync_ptsz), 11020 },
    { "cuMemPoolCreate", 11020, F(cuMemPoolCreate), 0, NULL, NULL, 0 },
    { "cuMemPoolDestroy", 11020, F(cuMemPoolDestroy), 0, NULL, NULL, 0 },
    { "cuDeviceGetDefaultMemPool", 11020, F(cuDeviceGetDefaultMemPool), 0, NULL, NULL, 0 },
    { "cuDeviceGetMemPool", 11020, F(cuDeviceGetMemPool), 0, NULL, NULL, 0 },
    { "cuMemPoolGetAttribute", 11020, F(cuMemPoolGetAttribute), 0, NULL, NULL, 0 },
    { "cuMemPoolTrimTo", 11020, F(cuMemPoolTrimTo), 0, NULL, NULL, 0 },
    { "cuStreamCreate", 2000, F(cuStreamCreate), 0, NULL, NULL, 0 },
    { "cuStreamDestroy", 2000, F(cuStreamDestroy), 4000, F(cuStreamDestroy_v2), NULL, 0 },
    { "cuStreamSynchronize", 2000, F(cuStreamSynchronize), 0, NULL, F(cuStreamSynchronize_ptsz), 7000 },
    { "cuGetProcAddress", 11030, F(cuGetProcAddress), 12050, F(cuGetProcAddress_v2), NULL, 0 },
    { "cuMemcpy", 4000, F(cuMemcpy), 0, NULL, F(cuMemcpy_ptds), 7000 },
    { "cuMemcpyAsync", 4000, F(cuMemcpyAsync), 0, NULL, F(cuMemcpyAsync_ptsz), 7000 },
    { "cuMemcpyHtoD", 2000, F(cuMemcpyHtoD), 3020, F(cuMemcpyHtoD_v2), F(cuMemcpyHtoD_v2_ptds), 7000 },
    { "cuMemcpyDtoH", 2000, F(cuMemcpyDtoH), 3020, F(cuMemcpyDtoH_v2), F(cuMemcpyDtoH_v2_ptds), 7000 },
    { "cuMemcpyDtoD", 2000, F(cuMemcpyDtoD), 3020, F(cuMemcpyDtoD_v2), F(cuMemcpyDtoD_v2_ptds), 7000 },
    { "cuMemcpyHtoDAsync", 2000, F(cuMemcpyHtoDAsync), 3020, F(cuMemcpyHtoDAsync_v2),
      F(cuMemcpyHtoDAsync_v2_ptsz), 7000 },
    { "cuMemcpyDtoHAsync", 2000, F(cuMemcpyDtoHAsync), 3020, F(cuMemcpyDtoHAsync_v2),
      F(cuMemcpyDtoHAsync_v2_ptsz), 7000 },
    { "cuMemcpyDtoDAsync", 3000, F(cuMemcpyDtoDAsync), 3020, F(cuMemcpyDtoDAsync_v2),
      F(cuMemcpyDtoDAsync_v2_ptsz), 7000 },
    { "cuMemsetD8", 2000, F(cuMemsetD8), 3020, F(cuMemsetD8_v2), F(cuMemsetD8_v2_ptds), 7000 },
    { "cuMemsetD16", 2000, F(cuMemsetD16), 3020, F(cuMemsetD16_v2), F(cuMemsetD16_v2_ptds), 7000 },
    { "cuMemsetD32", 2000, F(cuMemsetD32), 3020, F(cuMemsetD32_v2), F(cuMemsetD32_v2_ptds), 7000 },
    { "cuMemsetD8Async", 3020, F(cuMemsetD8Async), 0, NULL, F(cuMemsetD8Async_ptsz), 7000 },
    { "cuMemsetD16Async", 3020, F(cuMemsetD16Async), 0, NULL, F(cuMemsetD16Async_ptsz), 7000 },
    { "cuMemsetD32Async", 3020, F(cuMemsetD32Async), 0, NULL, F(cuMemsetD32Async_ptsz), 7000 },
    { "cuPointerGetAttribute", 4000, F(cuPointerGetAttribute), 0, NULL, NULL, 0 },
};

#undef F

static CUresult drv_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof drv_syms / sizeof drv_syms[0]; i++) {
        const struct drv_sym *e = &drv_syms[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        if (cudaVersion < e->since) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_SUCCESS;
        }
        bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->ptsz;
        if (ptsz && cudaVersion < e->ptsz_since) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_SUCCESS;
        }
        if (ptsz)
            *pfn = e->ptsz;
        else if (e->v2 && cudaVersion >= e->v2_since)
            *pfn = e->v2;
        else
            *pfn = e->base;
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        pthread_mutex_lock(&drv.lock);
        drv.n_lookup++;
        pthread_mutex_unlock(&drv.lock);
        return CUDA_SUCCESS;
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return drv_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return drv_proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

/* SIM_CUDA_DRIVER_STATS=1: one line on stderr at exit, so that a test can
 * tell the driver was really called (e.g. by the runtime simulator under
 * SIM_CUDA_DRIVER=1).  Allocations count every successful allocating
 * call including cuMemCreate; frees include cuMemRelease. */
__attribute__((destructor)) static void drv_print_stats(void)
{
    const char *env = getenv("SIM_CUDA_DRIVER_STATS");
    if (!env || strcmp(env, "1") != 0)
        return;
    pthread_mutex_lock(&drv.lock);
    unsigned long long na = drv.n_alloc, nf = drv.n_free, nl = drv.n_lookup;
    pthread_mutex_unlock(&drv.lock);
    fprintf(stderr, "sim driver: %llu allocations, %llu frees, %llu lookups\n", na, nf, nl);
}
