/* driver_calls.c - the driver-level observer's wrappers of the memory calls.
 *
 * What a wrapper handed out by driver.c does: call libcuda's own function
 * and record the call like the runtime hooks record theirs - allocations
 * (device, managed, pitched, pinned host), virtual memory (physical
 * allocations, mappings, reservations), stream-ordered allocations and
 * the pools they come from, 1D copies and sets.
 *
 * Counted once: a driver call made while one of our runtime hooks is in
 * flight on the same thread (the runtime's cudaMalloc calling
 * cuMemAlloc_v2, the pool taking a segment) is not recorded again - the
 * thread's guard makes gmt_call_begin decline it.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "internal.h"

/* ---- recording ------------------------------------------------------------ */

static bool begin(struct gmt_call *c, bool stamp_before)
{
    return gmt_drv_observe && gmt_call_begin(c, stamp_before);
}

static int device_now(struct gmt_thread *t)
{
    CUdevice d;
    CUresult (*f)(CUdevice *) = (CUresult(*)(CUdevice *))real(D_cuCtxGetDevice);
    if (f && f(&d) == CUDA_SUCCESS && d >= 0 && d < GMT_MAX_DEVICES)
        return d;
    return t->last_device;
}

#define DEV_NOW (-1000) /* alloc_done: ask the driver, after errno is kept */

static void emit(struct gmt_call *c, unsigned kind, unsigned api, CUresult r,
                 int dev, uint64_t addr, uint64_t size, uint64_t extra,
                 uint64_t flags, uint64_t stream)
{
    struct gmt_event ev = {
        .kind = (uint8_t)kind,
        .api = (uint8_t)api,
        .result = (int32_t)r,
        .device = dev,
        .addr = r == CUDA_SUCCESS || kind != GMT_K_ALLOC ? addr : 0,
        .size = size,
        .size2 = extra,
        .flags = flags,
    };
    if (stream != GMT_NO_STREAM) {
        ev.has_stream = true;
        ev.stream = stream;
    }
    if (r == CUDA_SUCCESS)
        c->t->last_device = dev;
    gmt_call_emit(c, &ev);
}

static void alloc_done(struct gmt_call *c, unsigned api, CUresult r,
                       int dev, uint64_t addr, uint64_t size, uint64_t extra,
                       uint64_t flags, uint64_t stream)
{
    gmt_call_errno(c);
    if (dev == DEV_NOW)
        dev = r == CUDA_SUCCESS ? device_now(c->t) : c->t->last_device;
    emit(c, GMT_K_ALLOC, api, r, dev, addr, size, extra, flags, stream);
    gmt_mem_maybe_sample(c->t, dev);
    gmt_call_finish(c);
}

static void free_done(struct gmt_call *c, unsigned api, CUresult r,
                      uint64_t addr, uint64_t stream)
{
    gmt_call_errno(c);
    emit(c, GMT_K_FREE, api, r, c->t->last_device, addr, 0, 0, 0, stream);
    gmt_call_finish(c);
}

static void vmm_done(struct gmt_call *c, unsigned api, CUresult r, int dev,
                     uint64_t addr, uint64_t size, uint64_t offset,
                     uint64_t handle)
{
    gmt_call_errno(c);
    uint8_t buf[8 * GMT_VARINT_MAX], *p = buf;
    p = gmt_put_varint(p, api);
    p = gmt_put_varint(p, (uint64_t)r);
    p = gmt_put_varint(p, (uint64_t)(dev < 0 ? 0 : dev));
    p = gmt_put_varint(p, addr);
    p = gmt_put_varint(p, size);
    p = gmt_put_varint(p, offset);
    p = gmt_put_varint(p, handle);
    p = gmt_put_varint(p, c->stack);
    gmt_trace_emit_ext(c->t, GMT_X_VMM, buf, (size_t)(p - buf));
    gmt_call_finish(c);
}

/* A driver allocation that ran out of memory is made once more if the
 * pool gave back memory it held idle (mem.c, gmt_mem_oom_release) - but
 * not one the library made (it handles its own failures) nor one the
 * runtime the pool allocates through made inside a call of its own: the
 * pool's frees would call back into that runtime (a hooked runtime call
 * retries for itself). rec: the wrapper's begin() succeeded; caller: its
 * return address; dev: the memory's device, or DEV_NOW for the
 * context's. Only failures come here. */
static bool oom_again(CUresult r, bool rec, const void *caller, uint64_t size,
                      int dev)
{
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        return false;
    struct gmt_thread *t = gmt_thread_peek();
    if (t == NULL || (!rec && t->guard) || gmt_mem_runtime_code(caller))
        return false;
    return gmt_mem_oom_release(dev == DEV_NOW ? device_now(t) : dev, size);
}

/* ---- the wrappers ----------------------------------------------------------
 * Declared in driver.h (WRAPPER): each has the exact type of the driver
 * function it stands for, and is exported under that function's name
 * (for programs linked with -lcuda).
 */

/* Device memory. */
CUresult gmtw_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAlloc_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    bool rec = begin(&c, false);
    CUresult r = REAL(cuMemAlloc_v2)(dptr, size);
    if (oom_again(r, rec, __builtin_return_address(0), size, DEV_NOW))
        r = REAL(cuMemAlloc_v2)(dptr, size);
    if (!rec)
        return r;
    alloc_done(&c, GMT_API_CU_MEM_ALLOC, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, size, 0, 0, GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch,
                                 size_t width, size_t height,
                                 unsigned int elem)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocPitch_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    bool rec = begin(&c, false);
    CUresult r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    uint64_t want = gmt_mul_sat(width, height);
    if (oom_again(r, rec, __builtin_return_address(0), want, DEV_NOW))
        r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    if (!rec)
        return r;
    uint64_t block = r == CUDA_SUCCESS ? (uint64_t)*pitch * height : want;
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_PITCH, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, want,
               block > want ? block - want : 0, 0, GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemAllocManaged(CUdeviceptr *dptr, size_t size,
                                unsigned int flags)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocManaged))
        return CUDA_ERROR_NOT_INITIALIZED;
    bool rec = begin(&c, false);
    CUresult r = REAL(cuMemAllocManaged)(dptr, size, flags);
    if (oom_again(r, rec, __builtin_return_address(0), size, DEV_NOW))
        r = REAL(cuMemAllocManaged)(dptr, size, flags);
    if (!rec)
        return r;
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_MANAGED, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, size, 0, flags, GMT_NO_STREAM);
    return r;
}

/* A free of our pool's memory that did not pass our cudaFree (a runtime
 * reached through dlsym(handle), a static one, the program's own driver
 * call) never reaches the driver: the pool takes it (mem.c,
 * gmt_mem_driver_free). true: taken or refused, *r the call's result -
 * CUDA_ERROR_INVALID_VALUE, as from the driver, for an address inside a
 * pool segment that starts no live block (a runtime's cudaFree then
 * returns cudaErrorInvalidValue); *dev the block's device. Recorded as
 * the driver call it was, at the block's address: the report pairs it
 * with the block's cudaMalloc. */
static bool pool_takes(CUdeviceptr dptr, CUresult *r, int *dev)
{
    int e = gmt_mem_driver_free(dptr, dev);
    if (e == 0)
        return false;
    *r = e > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return true;
}

static void pool_free_done(struct gmt_call *c, unsigned api, CUresult r,
                           int dev, uint64_t addr, uint64_t stream)
{
    gmt_call_errno(c);
    emit(c, GMT_K_FREE, api, r, dev >= 0 ? dev : c->t->last_device, addr, 0,
         0, 0, stream);
    gmt_call_finish(c);
}

CUresult gmtw_cuMemFree_v2(CUdeviceptr dptr)
{
    struct gmt_call c;
    CUresult r;
    int dev;
    if (MISSING(cuMemFree_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    /* stamped before a pool block becomes reusable */
    bool rec = begin(&c, true);
    if (pool_takes(dptr, &r, &dev)) {
        if (rec)
            pool_free_done(&c, GMT_API_CU_MEM_FREE, r, dev, dptr,
                           GMT_NO_STREAM);
        return r;
    }
    if (!rec)
        return REAL(cuMemFree_v2)(dptr);
    r = REAL(cuMemFree_v2)(dptr);
    free_done(&c, GMT_API_CU_MEM_FREE, r, dptr, GMT_NO_STREAM);
    return r;
}

/* Pinned host memory. */
CUresult gmtw_cuMemAllocHost_v2(void **pp, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocHost_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAllocHost_v2)(pp, size);
    CUresult r = REAL(cuMemAllocHost_v2)(pp, size);
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_HOST, r, c.t->last_device,
               r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, size, 0, 0,
               GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
    struct gmt_call c;
    if (MISSING(cuMemHostAlloc))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemHostAlloc)(pp, size, flags);
    CUresult r = REAL(cuMemHostAlloc)(pp, size, flags);
    alloc_done(&c, GMT_API_CU_MEM_HOST_ALLOC, r, c.t->last_device,
               r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, size, 0, flags,
               GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemFreeHost(void *p)
{
    struct gmt_call c;
    if (MISSING(cuMemFreeHost))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemFreeHost)(p);
    CUresult r = REAL(cuMemFreeHost)(p);
    free_done(&c, GMT_API_CU_MEM_FREE_HOST, r, (uintptr_t)p, GMT_NO_STREAM);
    return r;
}

/* Virtual memory: physical allocations are the memory; mappings and
 * reservations are address space (GMT_X_VMM). */
CUresult gmtw_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    bool rec = begin(&c, false);
    /* PyTorch's expandable segments: memory its block events count */
    uint64_t fw = rec && gmt_fw_segment_call(__builtin_return_address(0), false)
                      ? GMT_ALLOC_FW_BACKING : 0;
    CUresult r = REAL(cuMemCreate)(handle, size, prop, flags);
    bool on_device = prop == NULL ||
                     prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    if (on_device && oom_again(r, rec, __builtin_return_address(0), size,
                               prop ? prop->location.id : DEV_NOW))
        r = REAL(cuMemCreate)(handle, size, prop, flags);
    if (!rec)
        return r;
    int dev = r == CUDA_SUCCESS && on_device && prop != NULL &&
                      prop->location.id >= 0 &&
                      prop->location.id < GMT_MAX_DEVICES
                  ? prop->location.id
                  : c.t->last_device;
    alloc_done(&c,
               on_device ? GMT_API_CU_MEM_CREATE : GMT_API_CU_MEM_CREATE_HOST,
               r, dev, r == CUDA_SUCCESS ? (uint64_t)*handle : 0, size, 0,
               flags | fw, GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct gmt_call c;
    if (MISSING(cuMemRelease))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemRelease)(handle);
    CUresult r = REAL(cuMemRelease)(handle);
    free_done(&c, GMT_API_CU_MEM_RELEASE, r, (uint64_t)handle, GMT_NO_STREAM);
    return r;
}

CUresult gmtw_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle,
                       unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemMap))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemMap)(ptr, size, offset, handle, flags);
    CUresult r = REAL(cuMemMap)(ptr, size, offset, handle, flags);
    vmm_done(&c, GMT_API_CU_MEM_MAP, r, c.t->last_device, ptr, size, offset,
             (uint64_t)handle);
    return r;
}

CUresult gmtw_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemUnmap))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemUnmap)(ptr, size);
    CUresult r = REAL(cuMemUnmap)(ptr, size);
    vmm_done(&c, GMT_API_CU_MEM_UNMAP, r, c.t->last_device, ptr, size, 0, 0);
    return r;
}

CUresult gmtw_cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                  size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemAddressReserve))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAddressReserve)(ptr, size, alignment, addr, flags);
    CUresult r = REAL(cuMemAddressReserve)(ptr, size, alignment, addr, flags);
    vmm_done(&c, GMT_API_CU_MEM_ADDRESS_RESERVE, r, c.t->last_device,
             r == CUDA_SUCCESS ? *ptr : 0, size, 0, 0);
    return r;
}

CUresult gmtw_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAddressFree))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemAddressFree)(ptr, size);
    CUresult r = REAL(cuMemAddressFree)(ptr, size);
    vmm_done(&c, GMT_API_CU_MEM_ADDRESS_FREE, r, c.t->last_device, ptr, size,
             0, 0);
    return r;
}

/* ---- stream-ordered pools, as the driver reports them ---------------------
 * The pools that stream-ordered allocations came from (a device's current
 * pool, pools of the program's own) are sampled every GPUMEMTRACE_SAMPLE_MS
 * from the allocating thread: reserved and used bytes and their high
 * watermarks, so a peak between samples is not lost. Also under the
 * runtime's cudaMallocAsync, whose pool is the same. */
#define MAX_POOLS 32
static struct {
    uint64_t pool;
    int dev;
} g_pools[MAX_POOLS];
static int g_npools;
static bool g_pools_full;
static pthread_mutex_t g_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t g_dev_pool_noted[GMT_MAX_DEVICES];
static uint64_t g_pools_sampled[GMT_MAX_DEVICES];
static uint64_t g_pools_due; /* no device's pools are due before this */

static void pools_sample(struct gmt_thread *t, int dev, bool now_anyway);
static void pool_sample_one(struct gmt_thread *t,
                            CUresult (*get)(CUmemoryPool, CUmemPool_attribute,
                                            void *),
                            int i);
static void pools_at_exit(void);

static bool pool_followed(uint64_t pool)
{
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_pools[i].pool == pool && g_pools[i].dev >= 0)
            return true;
    return false;
}

static void pool_note(uint64_t pool, int dev)
{
    if (pool_followed(pool))
        return;
    if (__atomic_load_n(&g_pools_full, __ATOMIC_RELAXED))
        return; /* more live pools than we follow: the rest go unsampled */
    pthread_mutex_lock(&g_pools_lock);
    bool known = false;
    for (int i = 0; i < g_npools && !known; i++) {
        /* a destroyed pool's slot (or its handle, reused) is taken over */
        if (g_pools[i].pool == pool || g_pools[i].dev < 0) {
            g_pools[i].pool = pool;
            __atomic_store_n(&g_pools[i].dev, dev, __ATOMIC_RELEASE);
            known = true;
        }
    }
    if (!known && g_npools == MAX_POOLS)
        __atomic_store_n(&g_pools_full, true, __ATOMIC_RELAXED);
    if (!known && g_npools < MAX_POOLS) {
        g_pools[g_npools].pool = pool;
        g_pools[g_npools].dev = dev;
        __atomic_store_n(&g_npools, g_npools + 1, __ATOMIC_RELEASE);
        static bool exit_hook;
        if (!exit_hook)
            exit_hook = atexit(pools_at_exit) == 0;
    }
    pthread_mutex_unlock(&g_pools_lock);
}

/* The last samples, with the high watermarks since the one before. Runs
 * from atexit, registered once the driver was in use: before the driver's
 * own teardown, which runs in its destructors. */
static void pools_at_exit(void)
{
    struct gmt_thread *t = gmt_thread_get();
    if (t == NULL || !gmt_tracer_active() ||
        !gmt_code_loaded(real(D_cuMemPoolGetAttribute))) /* dlclosed */
        return;
    t->guard = 1;
    for (int dev = 0; dev < GMT_MAX_DEVICES; dev++)
        if (__atomic_load_n(&g_pools_sampled[dev], __ATOMIC_RELAXED))
            pools_sample(t, dev, true);
    t->guard = 0;
}

static void pools_sample(struct gmt_thread *t, int dev, bool now_anyway)
{
    CUresult (*get)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))
            real(D_cuMemPoolGetAttribute);
    if (get == NULL || gmt_opt.sample_ms <= 0)
        return;
    uint64_t now = gmt_now_ns(), last = g_pools_sampled[dev];
    uint64_t every = (uint64_t)gmt_opt.sample_ms * 1000000u;
    if (!now_anyway &&
        (now - last < every ||
         !__atomic_compare_exchange_n(&g_pools_sampled[dev], &last, now, false,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)))
        return;
    __atomic_store_n(&g_pools_due, now + every, __ATOMIC_RELAXED);
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_pools[i].dev == dev)
            pool_sample_one(t, get, i);
}

static void pool_sample_one(struct gmt_thread *t,
                            CUresult (*get)(CUmemoryPool, CUmemPool_attribute,
                                            void *),
                            int i)
{
    static const CUmemPool_attribute attrs[4] = {
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH};
    int dev = g_pools[i].dev;
    if (dev >= 0) {
        uint8_t buf[6 * GMT_VARINT_MAX], *p = buf;
        p = gmt_put_varint(p, (uint64_t)dev);
        p = gmt_put_varint(p, g_pools[i].pool);
        bool ok = true;
        for (int a = 0; a < 4 && ok; a++) {
            cuuint64_t v = 0;
            ok = get((CUmemoryPool)(uintptr_t)g_pools[i].pool, attrs[a], &v) ==
                 CUDA_SUCCESS;
            p = gmt_put_varint(p, v);
        }
        if (ok)
            gmt_trace_emit_ext(t, GMT_X_MEMPOOL, buf, (size_t)(p - buf));
    }
}

/* After a stream-ordered allocation (note: the pool it came from; NULL
 * for the device's current pool) or free: sample the device's pools when
 * it is time. Runs whether or not the call itself is recorded. */
static void pools_after(bool note, CUmemoryPool pool)
{
    struct gmt_thread *t = gmt_thread_peek();
    if (t == NULL || !gmt_tracer_active())
        return;
    /* Every stream-ordered call passes here: between samples, and with
     * its pool already followed, it costs one clock read. (The device's
     * pool is checked by the thread's last device, a guess the next due
     * sample corrects.) */
    int guess = t->last_device;
    if (gmt_now_ns() < __atomic_load_n(&g_pools_due, __ATOMIC_RELAXED) &&
        (!note || (pool != NULL ? pool_followed((uintptr_t)pool)
                                : guess >= 0 && guess < GMT_MAX_DEVICES &&
                                      __atomic_load_n(&g_dev_pool_noted[guess],
                                                      __ATOMIC_RELAXED))))
        return;
    int dev = device_now(t);
    if (dev < 0 || dev >= GMT_MAX_DEVICES)
        return;
    if (note && pool != NULL) {
        pool_note((uintptr_t)pool, dev);
    } else if (note && !__atomic_load_n(&g_dev_pool_noted[dev], __ATOMIC_RELAXED)) {
        CUresult (*cur)(CUmemoryPool *, CUdevice) =
            (CUresult(*)(CUmemoryPool *, CUdevice))real(D_cuDeviceGetMemPool);
        CUmemoryPool p;
        if (cur && cur(&p, dev) == CUDA_SUCCESS) {
            pool_note((uintptr_t)p, dev);
            __atomic_store_n(&g_dev_pool_noted[dev], 1, __ATOMIC_RELAXED);
        }
    }
    pools_sample(t, dev, false);
}

/* The parent's pools mean nothing in a forked child, and the lock may
 * have been held by a thread that does not exist there. */
void gmt_drv_pools_reset_after_fork(void)
{
    pthread_mutex_init(&g_pools_lock, NULL);
    g_npools = 0;
    g_pools_full = false;
    memset(g_dev_pool_noted, 0, sizeof g_dev_pool_noted);
    memset(g_pools_sampled, 0, sizeof g_pools_sampled);
    g_pools_due = 0;
}

/* A pool about to go: its last sample first. */
CUresult gmtw_cuMemPoolDestroy(CUmemoryPool pool)
{
    if (MISSING(cuMemPoolDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    struct gmt_thread *t = gmt_thread_peek();
    CUresult (*get)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))
            real(D_cuMemPoolGetAttribute);
    int saved = errno;
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && gmt_drv_observe && t && !t->guard && get &&
                    gmt_tracer_active(); i++) {
        if (g_pools[i].pool == (uintptr_t)pool && g_pools[i].dev >= 0) {
            t->guard = 1;
            pool_sample_one(t, get, i);
            t->guard = 0;
            __atomic_store_n(&g_pools[i].dev, -1, __ATOMIC_RELAXED);
            __atomic_store_n(&g_pools_full, false, __ATOMIC_RELAXED);
        }
    }
    errno = saved;
    return REAL(cuMemPoolDestroy)(pool);
}

/* Stream-ordered allocation; the _ptsz variants take stream 0 as the
 * per-thread stream. */
static CUresult alloc_async(int fn, bool ptsz, CUdeviceptr *dptr, size_t size,
                            CUmemoryPool pool, CUstream stream,
                            const void *caller)
{
    typedef CUresult (*plain_t)(CUdeviceptr *, size_t, CUstream);
    typedef CUresult (*pool_t)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    void *f = real(fn);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool from_pool = fn == D_cuMemAllocFromPoolAsync ||
                     fn == D_cuMemAllocFromPoolAsync_ptsz;
    struct gmt_call c;
    bool rec = begin(&c, false);
    CUresult r = from_pool ? ((pool_t)f)(dptr, size, pool, stream)
                           : ((plain_t)f)(dptr, size, stream);
    if (oom_again(r, rec, caller, size, DEV_NOW))
        r = from_pool ? ((pool_t)f)(dptr, size, pool, stream)
                      : ((plain_t)f)(dptr, size, stream);
    int saved = errno;
    if (gmt_drv_observe && r == CUDA_SUCCESS)
        pools_after(true, from_pool ? pool : NULL);
    errno = saved;
    if (!rec)
        return r;
    unsigned api = (from_pool ? GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC
                              : GMT_API_CU_MEM_ALLOC_ASYNC) |
                   (ptsz ? GMT_API_PTDS : 0);
    alloc_done(&c, api, r, DEV_NOW, r == CUDA_SUCCESS ? *dptr : 0,
               size, 0, (uintptr_t)pool, gmt_stream_of(stream, ptsz));
    return r;
}

static CUresult free_async(int fn, bool ptsz, CUdeviceptr dptr,
                           CUstream stream)
{
    CUresult (*f)(CUdeviceptr, CUstream) =
        (CUresult(*)(CUdeviceptr, CUstream))real(fn);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct gmt_call c;
    bool rec = begin(&c, true);
    unsigned api = GMT_API_CU_MEM_FREE_ASYNC | (ptsz ? GMT_API_PTDS : 0);
    CUresult r;
    int dev;
    /* As our cudaFreeAsync: the pool's rule covers the stream's work;
     * inside a capture the free is the graph's business. */
    if (!gmt_capture_active() && pool_takes(dptr, &r, &dev)) {
        if (rec)
            pool_free_done(&c, api, r, dev, dptr,
                           gmt_stream_of(stream, ptsz));
        return r;
    }
    r = f(dptr, stream);
    int saved = errno;
    if (gmt_drv_observe && r == CUDA_SUCCESS)
        pools_after(false, NULL);
    errno = saved;
    if (!rec)
        return r;
    free_done(&c, api, r, dptr, gmt_stream_of(stream, ptsz));
    return r;
}

CUresult gmtw_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(D_cuMemAllocAsync, false, dptr, size, NULL, stream,
                       __builtin_return_address(0));
}

CUresult gmtw_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                   CUstream stream)
{
    return alloc_async(D_cuMemAllocAsync_ptsz, true, dptr, size, NULL, stream,
                       __builtin_return_address(0));
}

CUresult gmtw_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size,
                                      CUmemoryPool pool, CUstream stream)
{
    return alloc_async(D_cuMemAllocFromPoolAsync, false, dptr, size, pool,
                       stream, __builtin_return_address(0));
}

CUresult gmtw_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                           CUmemoryPool pool, CUstream stream)
{
    return alloc_async(D_cuMemAllocFromPoolAsync_ptsz, true, dptr, size, pool,
                       stream, __builtin_return_address(0));
}

CUresult gmtw_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    return free_async(D_cuMemFreeAsync, false, dptr, stream);
}

CUresult gmtw_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return free_async(D_cuMemFreeAsync_ptsz, true, dptr, stream);
}

/* ---- copies and sets -------------------------------------------------------
 * What a statically linked runtime's cudaMemcpy/cudaMemset become, and
 * what JAX calls directly: recorded like the runtime's (GMT_K_MEMCPY with
 * the direction and, for the host side, pinned or pageable). */

/* The kind of memory at p: GMT_PTR_*. The driver answers "invalid value"
 * for memory it does not know: pageable host memory. */
static int ptr_class(uint64_t p)
{
    CUresult (*f)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))
            real(D_cuPointerGetAttribute);
    unsigned type = 0;
    if (f == NULL)
        return GMT_PTR_UNKNOWN;
    CUresult r = f(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return GMT_PTR_PAGEABLE;
    if (r != CUDA_SUCCESS)
        return GMT_PTR_UNKNOWN;
    return type == CU_MEMORYTYPE_HOST ? GMT_PTR_PINNED : GMT_PTR_DEVICE;
}

/* The device a real cudaFree(p) waits for, measured on an H100 (driver
 * 580, docs/validation.md): plain device or managed memory's own device,
 * whichever is current; memory of a stream-ordered pool (cudaMallocAsync)
 * none at all. -1 for pool memory, host memory, and whenever the driver
 * cannot say: a caller may then assume no device was drained. */
int gmt_drv_free_drains(const void *p)
{
    CUresult (*f)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))
            real(D_cuPointerGetAttribute);
    CUmemorytype type = 0;
    int ord = -1;
    void *pool = (void *)1;
    if (f == NULL || !gmt_code_loaded((const void *)f) ||
        f(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE ||
        f(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p) != CUDA_SUCCESS ||
        f(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)p) != CUDA_SUCCESS ||
        pool != NULL)
        return -1;
    return ord;
}

static unsigned hostmem_of(int cls)
{
    return cls == GMT_PTR_PINNED     ? GMT_HOSTMEM_PINNED
           : cls == GMT_PTR_PAGEABLE ? GMT_HOSTMEM_PAGEABLE
                                     : GMT_HOSTMEM_UNKNOWN;
}

/* dir: GMT_DIR_H2D/D2H/D2D, or GMT_DIR_UNKNOWN for a unified-address copy
 * (cuMemcpy), resolved from the pointers. */
static uint8_t copy_dir(CUresult r, unsigned dir, uint64_t dst, uint64_t src)
{
    if (r != CUDA_SUCCESS) /* pointers may be garbage */
        return (uint8_t)dir;
    if (dir == GMT_DIR_UNKNOWN) {
        int cd = ptr_class(dst), cs = ptr_class(src);
        if (cd == GMT_PTR_UNKNOWN || cs == GMT_PTR_UNKNOWN)
            return GMT_DIR_UNKNOWN;
        bool dd = cd == GMT_PTR_DEVICE, sd = cs == GMT_PTR_DEVICE;
        dir = sd ? (dd ? GMT_DIR_D2D : GMT_DIR_D2H)
                 : (dd ? GMT_DIR_H2D : GMT_DIR_H2H);
        if (dir == GMT_DIR_H2D)
            return (uint8_t)(dir | hostmem_of(cs) << GMT_HOSTMEM_SHIFT);
        if (dir == GMT_DIR_D2H)
            return (uint8_t)(dir | hostmem_of(cd) << GMT_HOSTMEM_SHIFT);
        return (uint8_t)dir;
    }
    if ((dir != GMT_DIR_H2D && dir != GMT_DIR_D2H) || !gmt_opt.hostmem)
        return (uint8_t)dir;
    uint64_t host = dir == GMT_DIR_H2D ? src : dst;
    return (uint8_t)(dir | hostmem_of(ptr_class(host)) << GMT_HOSTMEM_SHIFT);
}

static void copy_done(struct gmt_call *c, CUresult r, unsigned kind,
                      unsigned dir, uint64_t dst, uint64_t src, uint64_t bytes,
                      uint64_t value, bool ptds, bool async, CUstream stream)
{
    gmt_call_errno(c);
    struct gmt_event ev = {
        .kind = (uint8_t)kind,
        .api = (uint8_t)((kind == GMT_K_MEMCPY ? GMT_API_CU_MEMCPY
                                               : GMT_API_CU_MEMSET) |
                         (ptds ? GMT_API_PTDS : 0)),
        .result = (int32_t)r,
        .device = r == CUDA_SUCCESS ? device_now(c->t) : c->t->last_device,
        .addr = dst,
        .addr2 = src,
        .size = bytes,
        .value = value,
    };
    if (kind == GMT_K_MEMCPY)
        ev.dir = copy_dir(r, dir, dst, src);
    if (async) {
        ev.has_stream = true;
        ev.stream = gmt_stream_of(stream, ptds);
    }
    gmt_call_emit(c, &ev);
    gmt_call_finish(c);
}

/* One wrapper per exported variant, each with its function's own types;
 * the variants are listed once, in driver.h (GMT_DRV_COPIES). */
#define COPY(name, DT, ST, DIR, PT)                                           \
    CUresult gmtw_##name(DT dst, ST src, size_t n)                            \
    {                                                                         \
        CUresult (*f)(DT, ST, size_t) =                                       \
            (CUresult(*)(DT, ST, size_t))real(D_##name);                      \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, src, n);                                            \
        CUresult r = f(dst, src, n);                                          \
        copy_done(&c, r, GMT_K_MEMCPY, DIR, (uintptr_t)dst, (uintptr_t)src,   \
                  n, 0, PT, false, NULL);                                     \
        return r;                                                             \
    }
#define COPY_ASYNC(name, DT, ST, DIR, PT)                                     \
    CUresult gmtw_##name(DT dst, ST src, size_t n, CUstream s)                \
    {                                                                         \
        CUresult (*f)(DT, ST, size_t, CUstream) =                             \
            (CUresult(*)(DT, ST, size_t, CUstream))real(D_##name);            \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, src, n, s);                                         \
        CUresult r = f(dst, src, n, s);                                       \
        copy_done(&c, r, GMT_K_MEMCPY, DIR, (uintptr_t)dst, (uintptr_t)src,   \
                  n, 0, PT, true, s);                                         \
        return r;                                                             \
    }
#define SET(name, VT, SIZE, PT)                                               \
    CUresult gmtw_##name(CUdeviceptr dst, VT v, size_t n)                     \
    {                                                                         \
        CUresult (*f)(CUdeviceptr, VT, size_t) =                              \
            (CUresult(*)(CUdeviceptr, VT, size_t))real(D_##name);             \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, v, n);                                              \
        CUresult r = f(dst, v, n);                                            \
        copy_done(&c, r, GMT_K_MEMSET, 0, dst, 0, (uint64_t)n * (SIZE),       \
                  (uint64_t)v, PT, false, NULL);                              \
        return r;                                                             \
    }
#define SET_ASYNC(name, VT, SIZE, PT)                                         \
    CUresult gmtw_##name(CUdeviceptr dst, VT v, size_t n, CUstream s)         \
    {                                                                         \
        CUresult (*f)(CUdeviceptr, VT, size_t, CUstream) =                    \
            (CUresult(*)(CUdeviceptr, VT, size_t, CUstream))real(D_##name);   \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, v, n, s);                                           \
        CUresult r = f(dst, v, n, s);                                         \
        copy_done(&c, r, GMT_K_MEMSET, 0, dst, 0, (uint64_t)n * (SIZE),       \
                  (uint64_t)v, PT, true, s);                                  \
        return r;                                                             \
    }

GMT_DRV_COPIES(COPY, COPY_ASYNC, SET, SET_ASYNC)
