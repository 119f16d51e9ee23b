/* mem.c - the caching pool inside a traced process.
 *
 * pool.c is the allocator core; this file connects it to the process:
 * its upstream is the real CUDA runtime, its observer writes the trace,
 * and the hooks for the calls the pool changes (cudaMalloc, cudaFree,
 * cudaDeviceSynchronize, cudaMemGetInfo, cudaIpcGetMemHandle,
 * cudaDeviceReset, stream capture) land here. So does the rest of the
 * process running out of memory (gmt_mem_oom_release): the hooks of other
 * allocations and the driver-level observer hand the pool's idle memory
 * to a call that failed for lack of it, and make the call once more.
 *
 * What the program sees stays what the runtime would give it: the same
 * return codes, no error left behind by a failure the pool recovered from
 * (cudaGetLastError() is success after a recovered out-of-memory), free
 * memory in cudaMemGetInfo that counts the pool's idle cache as free,
 * pointer attributes unchanged (pool blocks lie inside cudaMalloc'd
 * segments), and IPC handles that name the right memory or a loud error.
 * Differences a program could notice are documented in docs/limits.md: a
 * pooled cudaFree no longer waits for the device, and a free of an
 * address the pool never handed out inside a pool segment returns
 * cudaErrorInvalidValue without setting the runtime's last error.
 *
 * Stream capture: while any stream is capturing (as seen through the
 * hooked Begin/EndCapture), the pool neither synchronizes nor serves
 * cudaMalloc: such calls go to the runtime, which fails them exactly as it
 * would without us.
 *
 * This file and fence.c call each other, and no small move untangles
 * them. The pool's upstream here waits through fence.c (gmt_fence_reclaim)
 * and a pooled free may record a fence; fence.c in turn needs the capture
 * lock kept here (no fence inside a capture), gmt_on_device, and
 * gmt_mem_settle: ending ordered reuse must synchronize the pool, which
 * lives here, and is reached from stream and context creations (hooks,
 * driver.c) that know no pool.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool.h"
#include "real.h"

static struct pool *g_pool;
static bool g_atexit_done;
static uint64_t g_last_sample[POOL_MAX_DEVICES];
static uint64_t g_sample_cost[3]; /* verbose: samples, their ns, NVML's ns */

/* ---- stream capture ---------------------------------------------------- */

#define MAX_CAPTURES 256
static pthread_mutex_t g_capture_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_capturing[MAX_CAPTURES]; /* streams capturing now */
static int g_ncapturing;  /* entries in g_capturing */
static int g_overflow;    /* captures beyond the table: never forgotten */

bool gmt_capture_active(void)
{
    return __atomic_load_n(&g_ncapturing, __ATOMIC_ACQUIRE) +
               __atomic_load_n(&g_overflow, __ATOMIC_RELAXED) != 0;
}

/* Did the launcher turn this framework's own caching off? (GPUMEMTRACE_
 * FORCED_ALLOCATOR: a comma-separated list, read with the options.) */
static bool forced(const char *framework)
{
    size_t n = strlen(framework);
    for (const char *s = gmt_opt.forced_allocator; s && *s;) {
        size_t len = strcspn(s, ",");
        if (len == n && strncmp(s, framework, n) == 0)
            return true;
        s += len + (s[len] == ',');
    }
    return false;
}

/* PyTorch without its caching allocator calls cudaMalloc even while a CUDA
 * graph is being captured - deliberately, so that the combination fails
 * loudly (a global-mode capture refuses the call). The user asked the
 * launcher for it (--no-framework-cache), perhaps not knowing that: say
 * so once, where the capture begins. */
static void capture_hint(void)
{
    static int said;
    if (forced("pytorch") && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        gmt_warn("CUDA graph capture with PyTorch's caching allocator turned "
                 "off by the launcher (--no-framework-cache); if capture "
                 "fails, rerun without it");
}

/* Count a capture before it starts, so that no synchronization of ours
 * can run inside it (the pool's synchronizations hold the same lock).
 * key: the stream as the trace names it (gmt_stream_of). */
void gmt_capture_begin(uint64_t key)
{
    capture_hint();
    gmt_fence_ordered_end("a stream capture began");
    pthread_mutex_lock(&g_capture_lock);
    if (g_ncapturing < MAX_CAPTURES)
        g_capturing[g_ncapturing] = key;
    else
        g_overflow++; /* stays "capturing" for good: safe, only slower */
    if (g_ncapturing < MAX_CAPTURES)
        __atomic_store_n(&g_ncapturing, g_ncapturing + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_capture_lock);
}

/* After a Begin that failed or an End: forget the stream unless the
 * runtime says it is still capturing. */
void gmt_capture_end(uint64_t key, cudaStream_t handle)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (GMT_REAL(cudaStreamIsCapturing)(handle, &st) != cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        st = cudaStreamCaptureStatusNone;
    }
    if (st == cudaStreamCaptureStatusActive)
        return;
    pthread_mutex_lock(&g_capture_lock);
    for (int i = 0; i < g_ncapturing; i++) {
        if (g_capturing[i] == key) {
            g_capturing[i] = g_capturing[g_ncapturing - 1];
            __atomic_store_n(&g_ncapturing, g_ncapturing - 1, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&g_capture_lock);
}

/* ---- the pool's upstream: the real runtime ----------------------------- */

static void release_at_exit(void);

/* The exit handler goes in after the runtime's first allocation: the
 * runtime registers its own teardown as it initializes, and exit
 * handlers run in reverse, so ours runs first, while cudaFree still
 * works. (Registered at tracer start, before the program's first call
 * reached the runtime, it ran after the teardown: on an H200 every
 * segment's release at exit failed.) */
static void release_after_runtime(void)
{
    if (!__atomic_load_n(&g_atexit_done, __ATOMIC_ACQUIRE) &&
        !__atomic_exchange_n(&g_atexit_done, true, __ATOMIC_ACQ_REL))
        atexit(release_at_exit);
}

static int up_alloc(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)ctx;
    (void)dev; /* the calling thread's current device is dev */
    void *p = NULL;
    cudaError_t r = GMT_REAL(cudaMalloc)(&p, size);
    if (r != cudaSuccess) {
        struct gmt_thread *t = gmt_thread_peek();
        if (t)
            t->upstream_failed = true;
        return r;
    }
    *out = (uintptr_t)p;
    release_after_runtime();
    return 0;
}

int gmt_on_device(int dev, int (*f)(void *), void *arg)
{
    int cur = -1;
    if (GMT_REAL(cudaGetDevice)(&cur) != cudaSuccess)
        return GMT_REAL(cudaGetLastError)();
    if (cur != dev && GMT_REAL(cudaSetDevice)(dev) != cudaSuccess)
        return GMT_REAL(cudaGetLastError)();
    int r = f(arg);
    if (cur != dev && GMT_REAL(cudaSetDevice)(cur) != cudaSuccess)
        GMT_REAL(cudaGetLastError)(); /* ours: leave nothing behind */
    return r;
}

static int do_free(void *p)
{
    return GMT_REAL(cudaFree)(p);
}

static int do_sync(void *p)
{
    (void)p;
    return GMT_REAL(cudaDeviceSynchronize)();
}

static int up_release(void *ctx, int dev, uintptr_t ptr, size_t size)
{
    (void)ctx;
    (void)size;
    /* The real cudaFree waits for the whole device: every free before
     * now becomes safe. */
    struct pool_snapshot snap;
    pool_sync_snapshot(g_pool, dev, &snap);
    int r = gmt_on_device(dev, do_free, (void *)ptr);
    if (r == cudaSuccess)
        pool_synced(g_pool, dev, &snap);
    return r;
}

bool gmt_capture_hold(bool wait)
{
    if (!wait && pthread_mutex_trylock(&g_capture_lock) != 0)
        return false;
    if (wait)
        pthread_mutex_lock(&g_capture_lock);
    if (g_ncapturing || g_overflow) {
        pthread_mutex_unlock(&g_capture_lock);
        return false;
    }
    return true;
}

void gmt_capture_release(void)
{
    pthread_mutex_unlock(&g_capture_lock);
}

static int up_reclaim(void *ctx, int dev, int wait)
{
    (void)ctx;
    return gmt_fence_reclaim(g_pool, dev, wait);
}

static int up_sync(void *ctx, int dev)
{
    (void)ctx;
    pthread_mutex_lock(&g_capture_lock);
    int r = g_ncapturing || g_overflow ? cudaErrorStreamCaptureUnsupported
                         : gmt_on_device(dev, do_sync, NULL);
    pthread_mutex_unlock(&g_capture_lock);
    return r;
}

/* ---- the pool's observer: the trace ---------------------------------------- */

static void obs_segment_alloc(void *ctx, int dev, uintptr_t a, size_t s)
{
    (void)ctx;
    struct gmt_thread *t = gmt_thread_get();
    if (t)
        gmt_ev_pool(t, GMT_K_SEGMENT_ALLOC, dev, a, s, t->call_stack);
}

static void obs_segment_free(void *ctx, int dev, uintptr_t a, size_t s)
{
    (void)ctx;
    struct gmt_thread *t = gmt_thread_get();
    if (t)
        gmt_ev_pool(t, GMT_K_SEGMENT_FREE, dev, a, s, 0);
}

static void obs_free_completed(void *ctx, int dev, uintptr_t a, size_t s)
{
    (void)ctx;
    struct gmt_thread *t = gmt_thread_get();
    if (t)
        gmt_ev_pool(t, GMT_K_FREE_COMPLETED, dev, a, s, 0);
}

static void obs_synced(void *ctx, int dev, int r)
{
    (void)ctx;
    struct gmt_thread *t = gmt_thread_get();
    if (t)
        gmt_ev_pool_sync(t, dev, GMT_API_POOL_SYNCHRONIZE, r);
}

static int up_reserve(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)ctx;
    int r = gmt_vmm_reserve(dev, size, out);
    if (r == 0)
        release_after_runtime();
    return r;
}

static int up_unreserve(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    return gmt_vmm_unreserve(dev, va, size);
}

static int up_create(void *ctx, int dev, size_t size, uint64_t *h)
{
    (void)ctx;
    return gmt_vmm_create(dev, size, h);
}

static int up_destroy(void *ctx, int dev, uint64_t h)
{
    (void)ctx;
    return gmt_vmm_destroy(dev, h);
}

static int up_map(void *ctx, int dev, uintptr_t va, size_t size, uint64_t h)
{
    (void)ctx;
    return gmt_vmm_map(dev, va, size, h);
}

static int up_unmap(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    return gmt_vmm_unmap(dev, va, size);
}

static const struct pool_upstream g_upstream = {up_alloc, up_release, up_sync,
                                                up_reclaim, NULL};
/* GPUMEMTRACE_POOL_VMM=1: large segments mapped where blocks need
 * memory (vmm.c); page and chunk sizes are filled in at start. */
static struct pool_upstream g_upstream_vmm = {
    .alloc = up_alloc,     .release = up_release,     .sync = up_sync,
    .reclaim = up_reclaim, .reserve = up_reserve,     .unreserve = up_unreserve,
    .create = up_create,   .destroy = up_destroy,     .map = up_map,
    .unmap = up_unmap};
static const struct pool_observer g_observer = {
    obs_segment_alloc, obs_segment_free, obs_free_completed, obs_synced, NULL};

/* ---- life cycle ------------------------------------------------------------ */

/* A program that dlopened the runtime may have dlclosed it: then its
 * memory went with it, and calling into it would crash the exit. */
static void release_at_exit(void)
{
    struct pool *p = __atomic_load_n(&g_pool, __ATOMIC_ACQUIRE);
    struct gmt_thread *t;
    if (!gmt_real_present(GMT_R_cudaFree) ||
        !gmt_real_present(GMT_R_cudaGetDevice) ||
        !gmt_code_loaded(gmt_real(GMT_R_cudaFree)) ||
        !gmt_code_loaded(gmt_real(GMT_R_cudaGetDevice)))
        return;
    if (p && gmt_tracer_active() && (t = gmt_thread_get()) != NULL) {
        t->guard = 1; /* the driver observer must not see these frees */
        pool_release_all(p);
        t->guard = 0;
    }
}

void gmt_mem_init(void)
{
    if (!gmt_opt.pool || g_pool)
        return;
    g_upstream_vmm.page = gmt_vmm_page();
    g_upstream_vmm.chunk = (size_t)gmt_opt.pool_vmm_chunk_mb << 20;
    g_upstream_vmm.alias = gmt_opt.pool_vmm_defer;
    if (gmt_opt.pool_vmm && gmt_opt.pool_vmm_whole)
        gmt_warn("GPUMEMTRACE_POOL_VMM_WHOLE=1 is ignored with "
                 "GPUMEMTRACE_POOL_VMM=1 (its pages move between blocks)");
    if (!gmt_opt.pool_vmm && gmt_opt.pool_vmm_whole) {
        /* whole segments: the same functions, no pages */
        g_upstream_vmm.page = g_upstream_vmm.chunk = 0;
        g_upstream_vmm.alias = false;
        g_upstream_vmm.whole = true;
    }
    struct pool *p = pool_create(gmt_opt.pool_vmm || gmt_opt.pool_vmm_whole
                                     ? &g_upstream_vmm
                                     : &g_upstream,
                                 &g_observer);
    if (p == NULL) {
        gmt_error_once(GMT_ERR_RECORD, "no memory for the caching pool; "
                       "cudaMalloc passes through");
        return;
    }
    __atomic_store_n(&g_pool, p, __ATOMIC_RELEASE);
}

void gmt_mem_settle(void)
{
    struct pool *p = __atomic_load_n(&g_pool, __ATOMIC_ACQUIRE);
    if (p && !pool_settle(p))
        gmt_error_once(GMT_ERR_RECORD, "ordered reuse ended but a device "
                       "could not be synchronized; blocks handed out just "
                       "before may still be in use by the GPU");
}

void gmt_mem_verbose_summary(void)
{
    struct pool *p = g_pool;
    if (p == NULL)
        return;
    if (g_sample_cost[0])
        gmt_info("samples: %llu taken in %.1f ms (%.1f ms of it asking NVML "
                 "for the process's memory)", (unsigned long long)g_sample_cost[0],
                 g_sample_cost[1] / 1e6, g_sample_cost[2] / 1e6);
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++) {
        struct pool_stats st;
        pool_stats(p, dev, &st);
        if (st.spread || st.adopted || st.lent)
            gmt_info("pool, device %d: %llu thread slots moved off the shared "
                     "arena (threads contended for it), %llu free segments moved between "
                     "arenas, %llu blocks lent", dev, (unsigned long long)st.spread,
                     (unsigned long long)st.adopted, (unsigned long long)st.lent);
        if (!gmt_opt.pool_vmm && !gmt_opt.pool_vmm_whole)
            continue;
        if (!gmt_opt.pool_vmm && (st.map_calls || st.unmap_calls))
            gmt_info("pool, device %d: %llu segments mapped whole, %llu "
                     "unmapped and given back",
                     dev, (unsigned long long)st.map_calls,
                     (unsigned long long)st.unmap_calls);
        else if (st.page_maps || st.page_unmaps)
            gmt_info("pool, device %d: %llu MiB created, %llu MiB mapped in "
                     "%llu mappings, %llu MiB unmapped in %llu, %.1f ms in "
                     "the driver for them",
                     dev, (unsigned long long)(st.pages_created * st.page >> 20),
                     (unsigned long long)(st.page_maps * st.page >> 20),
                     (unsigned long long)st.map_calls,
                     (unsigned long long)(st.page_unmaps * st.page >> 20),
                     (unsigned long long)st.unmap_calls, st.page_ns / 1e6);
        if (st.page_ns)
            gmt_info("pool, device %d: driver ms creating %.1f, mapping %.1f, "
                     "unmapping %.1f at once and %.1f before waits (%llu "
                     "calls), giving back %.1f (%llu calls); %llu waits for "
                     "memory to become idle",
                     dev, st.create_ns / 1e6, st.map_ns / 1e6,
                     st.unmap_ns / 1e6, st.deferred_ns / 1e6,
                     (unsigned long long)st.deferred_calls,
                     st.destroy_ns / 1e6, (unsigned long long)st.destroys,
                     (unsigned long long)st.idle_waits);
    }
}

void gmt_mem_reset_after_fork(void)
{
    /* The parent's segments mean nothing in the child (CUDA cannot be used
     * after fork anyway); drop the pool without touching it. */
    g_pool = NULL;
    pthread_mutex_init(&g_capture_lock, NULL);
    g_ncapturing = g_overflow = 0;
    memset(g_last_sample, 0, sizeof g_last_sample);
    gmt_fence_reset_after_fork();
    gmt_vmm_reset_after_fork();
}

static uint64_t host_rss(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long long size = 0, rss = 0;
    if (sscanf(buf, "%llu %llu", &size, &rss) != 2)
        return 0;
    return rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The driver's view of dev (the thread's current device): used bytes. */
static bool driver_info(size_t *free_b, size_t *total_b)
{
    if (gmt_drv_mem_info(free_b, total_b))
        return true;
    if (!gmt_real_present(GMT_R_cudaMemGetInfo) ||
        GMT_REAL(cudaPeekAtLastError)() != cudaSuccess)
        return false;
    if (GMT_REAL(cudaMemGetInfo)(free_b, total_b) != cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        return false;
    }
    return true;
}

void gmt_mem_maybe_sample(struct gmt_thread *t, int dev)
{
    struct pool *p = g_pool;
    if (gmt_opt.sample_ms <= 0 || dev < 0 || dev >= POOL_MAX_DEVICES)
        return;
    uint64_t now = t->r_time, last = g_last_sample[dev]; /* last record's time */
    if (now - last < (uint64_t)gmt_opt.sample_ms * 1000000u ||
        !__atomic_compare_exchange_n(&g_last_sample[dev], &last, now, false,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    uint64_t t0 = gmt_opt.verbose ? gmt_now_ns() : 0;
    struct pool_stats st = {0};
    if (p)
        pool_stats(p, dev, &st);
    size_t free_b = 0, total_b = 0;
    bool drv = driver_info(&free_b, &total_b);
    uint64_t v[6] = {st.reserved, st.allocated, st.largest_free,
                     st.free_blocks, drv ? total_b - free_b : 0, host_rss()};
    gmt_ev_sample(t, dev, v);
    uint64_t own, t1 = t0 ? gmt_now_ns() : 0;
    if (gmt_nvml_used(dev, &own)) {
        uint8_t buf[2 * GMT_VARINT_MAX], *b = gmt_put_varint(buf, (uint64_t)dev);
        b = gmt_put_varint(b, own);
        gmt_trace_emit_ext(t, GMT_X_PROC_MEM, buf, (size_t)(b - buf));
    }
    if (t0) { /* GPUMEMTRACE_VERBOSE: what sampling costs the call that samples */
        uint64_t t2 = gmt_now_ns();
        __atomic_add_fetch(&g_sample_cost[0], 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&g_sample_cost[1], t2 - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&g_sample_cost[2], t2 - t1, __ATOMIC_RELAXED);
    }
}

/* ---- the hooks the pool changes ------------------------------------------ */

static int current_device(struct gmt_thread *t)
{
    int dev;
    if (GMT_REAL(cudaGetDevice)(&dev) != cudaSuccess)
        return -1; /* the runtime could not start: let it fail the call */
    t->last_device = dev;
    t->call_device = dev; /* the event needs no second query */
    return dev;
}

/* The total memory of dev, the thread's current device, asked once (0
 * until the runtime or the driver could say). */
static uint64_t g_total[POOL_MAX_DEVICES];

static uint64_t device_total(int dev)
{
    uint64_t total = __atomic_load_n(&g_total[dev], __ATOMIC_RELAXED);
    size_t free_b = 0, total_b = 0;
    if (total == 0 && driver_info(&free_b, &total_b) && total_b) {
        total = total_b;
        __atomic_store_n(&g_total[dev], total, __ATOMIC_RELAXED);
    }
    return total ? total : UINT64_MAX;
}

/* A request no memory of the device can serve: the pool gives nothing
 * back for it. */
static bool beyond_device(int dev, uint64_t size)
{
    return size > POOL_MAX_REQUEST || size > device_total(dev);
}

bool gmt_mem_oom_release(int dev, uint64_t size)
{
    struct pool *p = __atomic_load_n(&g_pool, __ATOMIC_ACQUIRE);
    struct gmt_thread *t = gmt_thread_get();
    if (p == NULL || t == NULL || dev < 0 || dev >= POOL_MAX_DEVICES ||
        !gmt_tracer_active() || gmt_capture_active())
        return false; /* no freeing inside a capture: it would break it */
    uint64_t idle = pool_idle(p, dev);
    if (idle == 0 || beyond_device(dev, size))
        return false;
    int guard = t->guard;
    t->guard = 1; /* the pool's frees are no driver calls of the program */
    pool_trim(p, dev);
    t->guard = guard;
    return pool_idle(p, dev) < idle;
}

bool gmt_mem_oom_retry(uint64_t size, bool began)
{
    struct gmt_thread *t = gmt_thread_peek();
    int dev = -1;
    if ((!began && (t == NULL || t->guard)) ||
        GMT_REAL(cudaGetDevice)(&dev) != cudaSuccess)
        return false; /* inside our own calls, or no device to free on */
    return gmt_mem_oom_release(dev, size);
}

bool gmt_mem_runtime_code(const void *addr)
{
    Dl_info at, rt;
    if (!gmt_real_present(GMT_R_cudaFree))
        return false;
    return dladdr(addr, &at) && dladdr(gmt_real(GMT_R_cudaFree), &rt) &&
           at.dli_fbase == rt.dli_fbase;
}

/* The runtime's cudaMalloc of the program's request, made once more if
 * it ran out while the pool held memory idle. */
static cudaError_t real_malloc(void **devPtr, size_t size)
{
    cudaError_t r = GMT_REAL(cudaMalloc)(devPtr, size);
    if (r == cudaErrorMemoryAllocation && gmt_mem_oom_retry(size, true) &&
        (r = GMT_REAL(cudaMalloc)(devPtr, size)) == cudaSuccess)
        GMT_REAL(cudaGetLastError)(); /* the first try's, recovered */
    return r;
}

/* A real cudaFree of a valid pointer waits for the pointer's device,
 * whichever is current - and for nothing when the memory is a
 * stream-ordered pool's (measured on an H100, docs/validation.md). So a
 * free counts as a synchronization of the current device only when the
 * driver says the pointer is that device's plain memory: trusting the
 * current device (or the runtime's view, which calls cudaMallocAsync
 * memory plain device memory) made pending blocks reusable while
 * kernels still queued on it wrote them. When the driver
 * cannot say, nothing is credited: the pool synchronizes itself later. */
static cudaError_t real_free(struct gmt_thread *t, void *ptr)
{
    int dev = ptr && g_pool ? current_device(t) : -1;
    if (dev >= 0 && gmt_drv_free_drains(ptr) != dev)
        dev = -1;
    struct pool_snapshot snap;
    if (dev >= 0)
        pool_sync_snapshot(g_pool, dev, &snap);
    cudaError_t r = GMT_REAL(cudaFree)(ptr);
    if (r == cudaSuccess && dev >= 0)
        pool_synced(g_pool, dev, &snap);
    return r;
}

/* The pool failed: the runtime gets the program's own request, as the
 * last word. Where the pool failed for its own reasons (the driver's
 * virtual memory, host memory for its books) or because a segment of
 * its rounding did not fit though the request does (a 7 MiB request
 * takes a 14 MiB segment), the runtime may serve it; where it fails, it
 * leaves *devPtr and its error state as its failure would without us.
 * A success is a plain allocation, which cudaFree passes through. */
static cudaError_t fallback_malloc(struct gmt_call *c, void **devPtr,
                                   size_t size)
{
    cudaError_t r = GMT_REAL(cudaMalloc)(devPtr, size);
    gmt_call_errno(c);
    return r;
}

/* caller: the hook's return address. PyTorch's caching allocator taking
 * a segment while its block events are recorded (fw.c) goes straight to
 * the runtime: a second cache under its own would keep memory it gave
 * back. */
static cudaError_t mem_malloc(void **devPtr, size_t size, const void *caller)
{
    struct gmt_call c;
    if (!gmt_call_begin(&c, false))
        return GMT_REAL(cudaMalloc)(devPtr, size);
    struct gmt_thread *t = c.t;
    struct pool *p = g_pool;
    cudaError_t r;
    uint64_t block = size, flags = 0;
    int dev = -1;
    if (gmt_fw_segment_call(caller, false)) {
        flags = GMT_ALLOC_FW_BACKING;
        p = NULL;
    }
    if (p && devPtr && size > 0 && !gmt_capture_active() &&
        (dev = current_device(t)) >= 0) {
        uintptr_t a = 0;
        t->call_stack = c.stack;
        t->upstream_failed = false;
        r = (cudaError_t)pool_alloc(p, dev, t->index, size, &a);
        t->call_stack = 0;
        if (r == cudaSuccess) {
            *devPtr = (void *)a;
            block = (size + POOL_ROUND - 1) & ~(uint64_t)(POOL_ROUND - 1);
            /* an upstream failure the pool recovered from must not linger */
            if (t->upstream_failed)
                GMT_REAL(cudaGetLastError)();
        } else if ((r = fallback_malloc(&c, devPtr, size)) == cudaSuccess) {
            block = size;
            if (t->upstream_failed) /* the pool's segment's, not the program's */
                GMT_REAL(cudaGetLastError)();
        } else {
            struct pool_stats st;
            size_t free_b = 0, total_b = 0;
            pool_stats(p, dev, &st);
            driver_info(&free_b, &total_b);
            uint64_t v[5] = {free_b, total_b, st.reserved, st.allocated,
                             st.largest_free};
            gmt_ev_oom(&c, dev, size, v);
        }
    } else {
        r = real_malloc(devPtr, size);
        gmt_call_errno(&c);
    }
    gmt_ev_alloc(&c, r, GMT_API_MALLOC, devPtr && r == cudaSuccess ? *devPtr : NULL,
                 size, block, flags, GMT_NO_STREAM);
    if (p && dev >= 0)
        gmt_mem_maybe_sample(t, dev);
    gmt_call_finish(&c);
    return r;
}

/* The pool's part of a free: POOL_NOT_MINE (the runtime's to free), or
 * the call's result with *dev the block's device (-1: a double or
 * interior free, refused). */
static int pool_take_free(struct gmt_call *c, void *ptr, cudaError_t *r,
                          int *dev)
{
    struct pool *p = g_pool;
    *dev = -1;
    int e = p && ptr ? pool_free(p, (uintptr_t)ptr, dev) : POOL_NOT_MINE;
    if (e == 0) {
        *r = cudaSuccess;
        c->t->call_device = *dev; /* the block's device */
        gmt_fence_after_free(p, *dev);
    } else if (e == POOL_INVALID) {
        *r = cudaErrorInvalidValue; /* freed twice, or not a block start */
        *dev = -1;
    } else {
        *dev = -1;
    }
    return e == POOL_NOT_MINE ? POOL_NOT_MINE : 0;
}

/* A pooled free made by a library whose own streams fences leave out
 * (fence.c, "libraries' own streams"): its work on them is joined to the
 * caller's stream only when the call returns, so memory it frees inside
 * the call may still be written on them, where no fence looks. The real
 * cudaFree would wait for the device here; so does the pool, and the
 * synchronization makes the block reusable (the program's own would). */
static void joined_free_sync(struct gmt_call *c, int dev, cudaError_t r,
                             const void *caller)
{
    struct pool *p = g_pool;
    if (r != cudaSuccess || dev < 0 || p == NULL || !gmt_fence_joined_caller(caller))
        return;
    struct pool_snapshot snap;
    pool_sync_snapshot(p, dev, &snap);
    int s = up_sync(NULL, dev); /* none inside a capture: then it stays pending */
    if (s == cudaSuccess)
        pool_synced(p, dev, &snap);
    else if (s != cudaErrorStreamCaptureUnsupported)
        GMT_REAL(cudaGetLastError)(); /* ours: the free itself succeeded */
    gmt_ev_pool_sync(c->t, dev, GMT_API_POOL_SYNCHRONIZE, s);
}

static cudaError_t mem_free(void *ptr, const void *caller)
{
    struct gmt_call c;
    if (!gmt_call_begin(&c, true)) /* stamped before the memory is reusable */
        return GMT_REAL(cudaFree)(ptr);
    cudaError_t r;
    int dev;
    if (pool_take_free(&c, ptr, &r, &dev) == POOL_NOT_MINE) {
        r = real_free(c.t, ptr);
        gmt_call_errno(&c);
    } else {
        joined_free_sync(&c, dev, r, caller);
    }
    gmt_ev_free(&c, r, GMT_API_FREE, ptr, GMT_NO_STREAM);
    if (dev >= 0 && dev == c.t->last_device)
        gmt_mem_maybe_sample(c.t, dev);
    gmt_call_finish(&c);
    return r;
}

/* With GPUMEMTRACE_VERBOSE=1, the time spent in cudaMalloc and cudaFree,
 * said at exit (lifecycle.c): what the library adds to each call, pool
 * and recording included, against the step time it costs. */
uint64_t gmt_hook_ns[2], gmt_hook_calls[2];

static void hook_timed(int k, uint64_t t0)
{
    __atomic_add_fetch(&gmt_hook_ns[k], gmt_now_ns() - t0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&gmt_hook_calls[k], 1, __ATOMIC_RELAXED);
}

/* The same between "step" marks, warm-up left out: the counters as the
 * STEADY_FROM + 1'th mark found them and as the latest did. Marks come
 * from one thread at a time in practice; a torn snapshot would only blur
 * a verbose figure. */
#define STEADY_FROM 3 /* steps left out as warm-up */
enum { ST_MALLOC_NS, ST_FREE_NS, ST_MALLOCS, ST_FREES, ST_FENCES, ST_RECORD_NS, ST_QUERIES, ST_N };
static uint64_t g_marks, g_steady_first[ST_N], g_steady_last[ST_N];

static void steady_now(uint64_t v[ST_N])
{
    uint64_t waits, wait_ns, issued;
    v[ST_MALLOC_NS] = __atomic_load_n(&gmt_hook_ns[0], __ATOMIC_RELAXED);
    v[ST_FREE_NS] = __atomic_load_n(&gmt_hook_ns[1], __ATOMIC_RELAXED);
    v[ST_MALLOCS] = __atomic_load_n(&gmt_hook_calls[0], __ATOMIC_RELAXED);
    v[ST_FREES] = __atomic_load_n(&gmt_hook_calls[1], __ATOMIC_RELAXED);
    gmt_fence_counts(&v[ST_FENCES], &waits, &wait_ns, &issued, &v[ST_RECORD_NS]);
    v[ST_QUERIES] = gmt_fence_queries();
}

void gmt_mem_step_mark(void)
{
    uint64_t n = __atomic_add_fetch(&g_marks, 1, __ATOMIC_RELAXED);
    if (n == STEADY_FROM + 1)
        steady_now(g_steady_first);
    else if (n > STEADY_FROM + 1)
        steady_now(g_steady_last);
}

void gmt_mem_steady_summary(void)
{
    uint64_t n = __atomic_load_n(&g_marks, __ATOMIC_RELAXED);
    if (n < STEADY_FROM + 2)
        return;
    double k = (double)(n - STEADY_FROM - 1);
    double d[ST_N];
    for (int i = 0; i < ST_N; i++)
        d[i] = (double)(g_steady_last[i] - g_steady_first[i]) / k;
    gmt_info("hooks, per step after %d warm-up steps (%.0f steps between "
             "\"step\" marks): %.0f cudaMalloc calls took %.3f ms, %.0f "
             "cudaFree calls %.3f ms; %.0f fences recorded in %.3f ms, %.0f "
             "event queries", STEADY_FROM, k, d[ST_MALLOCS], d[ST_MALLOC_NS] / 1e6,
             d[ST_FREES], d[ST_FREE_NS] / 1e6, d[ST_FENCES], d[ST_RECORD_NS] / 1e6,
             d[ST_QUERIES]);
}

cudaError_t gmt_mem_malloc(void **devPtr, size_t size, const void *caller)
{
    if (GMT_LIKELY(!gmt_opt.verbose))
        return mem_malloc(devPtr, size, caller);
    uint64_t t0 = gmt_now_ns();
    cudaError_t r = mem_malloc(devPtr, size, caller);
    hook_timed(0, t0);
    return r;
}

cudaError_t gmt_mem_free(void *ptr, const void *caller)
{
    if (GMT_LIKELY(!gmt_opt.verbose))
        return mem_free(ptr, caller);
    uint64_t t0 = gmt_now_ns();
    cudaError_t r = mem_free(ptr, caller);
    hook_timed(1, t0);
    return r;
}

/* cudaFreeAsync of memory the pool served - legal on cudaMalloc memory,
 * freed by the runtime when the stream gets there. The runtime must never
 * see such an address: an interior block is not its allocation (it would
 * fail the call) and one that starts a segment would free the whole
 * segment while the pool hands its memory out. The pool's rule for any
 * free (reused only once all work issued before it is done, on every
 * stream) covers the stream's work. Inside a capture the runtime gets it,
 * as before: a graph's free node is the runtime's business. */
cudaError_t gmt_mem_free_async(void *ptr, cudaStream_t stream, bool ptsz,
                               const void *caller)
{
    cudaError_t (*real)(void *, cudaStream_t) =
        ptsz ? GMT_REAL(cudaFreeAsync_ptsz) : GMT_REAL(cudaFreeAsync);
    struct gmt_call c;
    if (!gmt_call_begin(&c, true))
        return real(ptr, stream);
    cudaError_t r;
    int dev;
    if (gmt_capture_active() ||
        pool_take_free(&c, ptr, &r, &dev) == POOL_NOT_MINE) {
        r = real(ptr, stream);
        gmt_call_errno(&c);
    } else {
        joined_free_sync(&c, dev, r, caller);
    }
    gmt_ev_free(&c, r, GMT_API_FREE_ASYNC | (ptsz ? GMT_API_PTDS : 0u), ptr,
                gmt_stream_of(stream, ptsz));
    gmt_call_finish(&c);
    return r;
}

/* A free that reached the driver (cuMemFree, cuMemFreeAsync) without our
 * cudaFree: the runtime's cudaFree found through dlsym(handle,
 * "cudaFree") on a dlopened runtime (what ctypes does), a static runtime,
 * or the program's own driver call. The driver must never see
 * a pool address: an interior block is no allocation of its (it would
 * fail the call), and a segment's start would free the whole segment
 * while the pool hands its memory out. So the pool takes the free as our
 * cudaFree would: the block becomes pending, reusable once the pool's
 * rule holds. The pool's own segment releases never come here with an
 * address it holds: a segment leaves the index before it is given back.
 *
 * No fence is recorded and no sample taken: this runs inside the
 * runtime's (or driver's) call, and calling the runtime from there is
 * not safe; a later free, synchronization or fence covers the block.
 * Lock-free when the address is not the pool's (the segment index). */
int gmt_mem_driver_free(uint64_t ptr, int *dev)
{
    struct pool *p = __atomic_load_n(&g_pool, __ATOMIC_ACQUIRE);
    *dev = -1;
    if (p == NULL || ptr == 0)
        return 0;
    int e = pool_free(p, (uintptr_t)ptr, dev);
    if (e == POOL_NOT_MINE)
        return 0;
    if (e != 0)
        *dev = -1;
    return e == 0 ? 1 : -1;
}

cudaError_t gmt_mem_device_synchronize(void)
{
    struct gmt_call c;
    if (!gmt_call_begin(&c, false))
        return GMT_REAL(cudaDeviceSynchronize)();
    struct pool *p = g_pool;
    int dev = p ? current_device(c.t) : -1;
    struct pool_snapshot snap;
    if (dev >= 0)
        pool_sync_snapshot(p, dev, &snap);
    cudaError_t r = GMT_REAL(cudaDeviceSynchronize)();
    gmt_call_errno(&c);
    if (r == cudaSuccess && dev >= 0)
        pool_synced(p, dev, &snap); /* the program's sync frees pending blocks */
    gmt_ev_sync(&c, r, GMT_API_DEVICE_SYNCHRONIZE, GMT_NO_STREAM);
    gmt_call_finish(&c);
    return r;
}

cudaError_t gmt_mem_get_info(size_t *free_b, size_t *total_b)
{
    struct gmt_call c;
    if (!gmt_call_begin(&c, false))
        return GMT_REAL(cudaMemGetInfo)(free_b, total_b);
    cudaError_t r = GMT_REAL(cudaMemGetInfo)(free_b, total_b);
    gmt_call_errno(&c);
    struct pool *p = g_pool;
    if (r == cudaSuccess && p && free_b) {
        /* what the pool holds idle is free to this program */
        int dev = current_device(c.t);
        uint64_t idle = dev >= 0 ? pool_idle(p, dev) : 0;
        uint64_t f = (uint64_t)*free_b + idle;
        if (total_b && f > *total_b)
            f = *total_b;
        *free_b = (size_t)f;
    }
    gmt_ev_mem_get_info(&c, r, free_b && r == cudaSuccess ? *free_b : 0,
                        total_b && r == cudaSuccess ? *total_b : 0);
    gmt_call_finish(&c);
    return r;
}

cudaError_t gmt_mem_ipc_get_handle(cudaIpcMemHandle_t *handle, void *ptr)
{
    struct pool *p = g_pool;
    struct pool_block_info bi;
    if (p == NULL || !pool_lookup(p, (uintptr_t)ptr, &bi))
        return GMT_REAL(cudaIpcGetMemHandle)(handle, ptr);
    if (bi.mapped) {
        /* Pages of the driver's virtual memory: no legacy IPC handle can
         * name them (the runtime would refuse too, less clearly). */
        gmt_error_once(GMT_ERR_IPC, "cudaIpcGetMemHandle on %p, a pool block "
                       "in the driver's virtual memory (GPUMEMTRACE_POOL_VMM=1 "
                       "or GPUMEMTRACE_POOL_VMM_WHOLE=1): refused with "
                       "cudaErrorInvalidValue; run without them to share it",
                       ptr);
        return cudaErrorInvalidValue;
    }
    if (!(bi.addr == (uintptr_t)ptr && bi.addr == bi.seg_base)) {
        /* The handle would name the whole segment: another process would
         * map its start, not this block. */
        gmt_error_once(GMT_ERR_IPC, "cudaIpcGetMemHandle on %p, a pool block "
                       "that does not start its segment (the handle would "
                       "give the other process the wrong memory): refused "
                       "with cudaErrorInvalidValue; run with "
                       "GPUMEMTRACE_POOL=0 to share such memory", ptr);
        return cudaErrorInvalidValue;
    }
    return GMT_REAL(cudaIpcGetMemHandle)(handle, ptr);
}

cudaError_t gmt_mem_device_reset(void)
{
    struct pool *p = g_pool;
    int dev = -1;
    struct pool_leftover left = {0};
    if (p && GMT_REAL(cudaGetDevice)(&dev) == cudaSuccess)
        pool_forget_device(p, dev, &left); /* the reset frees it */
    cudaError_t r = GMT_REAL(cudaDeviceReset)();
    if (p && dev >= 0) {
        gmt_fence_forget_device(dev); /* their events died with it */
        /* but not virtual memory: that goes back by hand */
        pool_leftover_release(p, dev, &left);
    }
    return r;
}
