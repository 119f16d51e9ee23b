/* fence.c - fences: pending pool blocks made reusable by events, not by
 * device-wide synchronizations.
 *
 * The pool may hand a freed block out again only when every piece of GPU
 * work issued on its device before the free, on any of that device's
 * streams, has finished (pool.h). A device-wide synchronization proves
 * that, but it drains the GPU's queue:
 * the GPU then idles until the CPU launches again (38 times per step on a
 * transformer, 1.2% of its step time, measured on an H200). A fence proves
 * the same for the frees before it without stalling anyone: a snapshot of
 * the pool (it advances the device's epoch) followed by an event recorded
 * on the device's legacy stream. When the event has completed, the
 * snapshot's frees are reusable (pool_synced). The pool asks for that when
 * a request misses (gmt_fence_reclaim): completed fences cost an event
 * query each, and when it must wait, it waits for the oldest fence only -
 * the GPU keeps the work queued after it, so it never runs dry.
 *
 * Why an event on the legacy stream covers the device: an operation on the
 * legacy stream waits for all work queued before it on every blocking
 * stream of its context (CUDA's "legacy default stream" semantics; the
 * per-thread default streams are blocking streams too). Not for
 * non-blocking streams (measured on an H200: DESIGN.md), nor for streams
 * of other contexts. So a fence also records an event on each non-blocking
 * stream the program has (up to NSIDE of them) that is busy: a program
 * with a few streams of its own keeps its fences. A stream found idle
 * (after the snapshot) needs no event: what was queued on it before has
 * run. The fence is complete when all of its events are. (cuDNN makes 16
 * streams of its own for each handle with cuStreamCreate - any PyTorch
 * convolution, and GPT-2's attention: past NSIDE. They are left out, as
 * joined to their caller's stream: "libraries' own streams", below.
 * Counted, they cost resnet50 and GPT-2 60-120 device-wide
 * synchronizations per training step, measured on an H200.) Stream and context creations are
 * watched at the runtime hooks and, for runtimes linked statically (cuDNN,
 * NCCL, a JAX plugin...), by the driver-level observer (driver.c), which
 * is why fences need that observer on. A non-blocking stream is entered
 * after its creation returns, before the program has its handle, so no
 * work of it can precede its entry. Fences go off for good (gmt_fence_off;
 * the pool then uses device-wide synchronizations) at a context of the
 * program's own, at a non-blocking stream past NSIDE, and when one of them
 * is destroyed (before the real call: work queued on it still runs, and
 * no later event on it could cover that). Fences recorded earlier stay
 * valid: work on a stream that did not exist yet cannot touch a block
 * freed before, short of a use after free.
 *
 * What a fence does to the program's streams: an operation on the legacy
 * stream also makes later work of every blocking stream wait for it, so a
 * fence orders the blocking streams' work before it ahead of their work
 * after it. Fences are recorded only inside cudaFree, whose real version
 * waits for the whole device - a stronger barrier the program already had
 * at that point - and inside cudaMalloc where the pool would otherwise
 * synchronize the device. So they never order the program's streams more
 * than the program itself (with the real cudaFree) or the pool without
 * fences did. (PyTorch's training loop, on the legacy stream, also creates
 * a blocking stream through the driver: fences limited to programs with
 * no stream at all were off there, measured on an H200.)
 *
 * Ordering. A fence takes its snapshot (advancing the device's epoch),
 * then reads the "off" flag, then records its event; a creation sets the
 * flag before it creates. If a fence's snapshot covers a free made after
 * a non-blocking stream was created, that free read the epoch before the
 * snapshot advanced it (both sequentially consistent), and the flag store
 * came before that read, so the fence, reading the flag after its
 * snapshot, sees it and is not recorded.
 *
 * Ordered reuse (GPUMEMTRACE_POOL_ORDERED=1, off by default). While fences
 * are on, every stream of the process waits for operations on the legacy
 * stream issued before its own work, and the legacy stream for theirs: so
 * GPU work issued after a fence has been recorded runs after everything
 * issued before it. The frees its snapshot covers can then be handed out
 * again at once (pool_issued), without waiting for the GPU - the new
 * owner's work cannot start before the old owner's has finished, as with
 * PyTorch's caching allocator on one stream. The pool still unmaps or
 * gives back such memory only when it is idle (pool.h). This holds only
 * while fences are on and no stream capture runs (a capture's work is
 * not ordered by the legacy stream): the first non-blocking stream, own
 * context or capture ends it for good (gmt_fence_ordered_end, before the
 * creation or the capture), after one synchronization of each device
 * with a pool, so that what was handed out early is idle by the time any
 * work can escape the order. A fence's snapshot counts as issued only if
 * the mode was still on after its event was recorded (both sequentially
 * consistent, as for the "off" flag): otherwise that synchronization,
 * made after the flag, covers it.
 *
 * Never inside a stream capture: recording on the legacy stream would
 * break a capture in progress; every CUDA call here runs under the
 * capture lock (mem.c), which no capture begins without. A non-blocking
 * stream found capturing all the same (a capture begun where the hooks do
 * not see it) gets no event, and the fence is not made. Never when the
 * program has an error pending (our call could consume it).
 *
 * mem.c owns the capture lock and the pool, which the end of ordered reuse
 * settles (gmt_mem_settle): this file and mem.c call each other, and
 * mem.c's first comment says why.
 *
 * When fences are recorded: when the pool needs pending memory, if
 * anything was freed since the newest fence, so that a burst of frees gets
 * one at its end; and at a pooled free, at most every FENCE_EVERY_NS per
 * device (by whichever thread frees then, without waiting for the device's
 * lock), while the pool has needed pending memory within the last 20 ms
 * (FENCE_PRESSURE_NS) and its waits have taken 20 us or more on average
 * (FENCE_BEHIND_NS: the GPU runs behind the CPU), so that frees spread over
 * time get fences close to them and a wait need not go to the newest.
 * Where the GPU keeps up (a launch-bound small MLP, measured: 21 such
 * fences a step cost it about 3%), waits are short anyway and frees record
 * none. Cost per pooled free: a few loads, and a clock read when behind;
 * an event record at most every 50 us when behind, and per wait; at a miss, while fences are
 * outstanding, an event query at most every 20 us (POLL_EVERY_NS).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool.h"
#include "real.h"

#define NFENCE 1024                /* outstanding fences per device */
#define FENCE_EVERY_NS 50000ull    /* at most one new fence per 50 us */
#define FENCE_PRESSURE_NS 20000000ull /* ...and only within 20 ms of a wait */
#define POLL_EVERY_NS 20000ull     /* misses query fences at most every 20 us */
#define FENCE_BEHIND_NS 20000ull   /* waits averaging less: the GPU keeps up */

/* Non-blocking streams a fence covers, at most (GMT_NB_MANY says 8).
 * Each costs a fence two runtime calls (is it capturing, is it busy),
 * about 1 us each: cuDNN's 16 per handle (GPT-2 training under PyTorch
 * made 32) made fences slower than the device-wide synchronizations they
 * replace (2.4x GPT-2's step time against 1.1-1.3x, 460 fences a step;
 * measured on an H200). */
#define NSIDE 8

struct fence {
    cudaEvent_t ev;                /* created on first use, kept */
    cudaEvent_t side[NSIDE];       /* one per non-blocking stream, the same */
    unsigned nside;                /* of side[], recorded with this fence */
    struct pool_snapshot snap;     /* the frees it covers */
};

struct fdev {
    pthread_mutex_t lock;
    uint64_t head, tail;           /* outstanding: ring[head..tail) */
    uint64_t last_ns;              /* when the newest was recorded */
    uint64_t need_ns;              /* when the pool last had to wait */
    uint64_t poll_ns;              /* when a miss last queried the fences */
    uint64_t wait_avg_ns;          /* how long waits took, moving average */
    uint64_t with_side;            /* outstanding fences with side events */
    struct fence ring[NFENCE];
};

/* The program's non-blocking streams, by device: a fence records an event
 * on each of them too. Changed and read under g_side_lock, which a fence
 * holds while it records (after f->lock), so that no stream is destroyed
 * under a record. */
struct side {
    void *stream; /* cudaStream_t, or a CUstream of the primary context */
    int dev;
};
static struct side g_side[NSIDE];
static unsigned g_nside;
static pthread_mutex_t g_side_lock = PTHREAD_MUTEX_INITIALIZER;

/* Libraries' own non-blocking streams, which fences leave out (below).
 * tls_rt_create: inside the runtime hook's creation of a non-blocking
 * stream, which decides for it: the driver's creation under it is the
 * same stream (and the hook's caller, not libcudart, made it). */
static GMT_TLS bool tls_rt_create;
static uint64_t g_joined;               /* streams left out */
static char g_joined_lib[64];           /* the first library's file name */
static bool g_joined_more;              /* ...and another's, too */
static pthread_mutex_t g_joined_lock = PTHREAD_MUTEX_INITIALIZER;
/* The address ranges of the modules found to be joined libraries, for
 * their frees (gmt_fence_joined_caller): entered under g_joined_lock,
 * read without it (the count is published after the entry). */
#define NJOINED_MODS 8
static struct { uintptr_t lo, hi; } g_joined_mod[NJOINED_MODS];
static unsigned g_njoined_mods;

static struct fdev *g_fdev[POOL_MAX_DEVICES];
static pthread_mutex_t g_fdev_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_off;                 /* set once, never cleared */
static const char *g_off_why;
static uint64_t g_waits, g_recorded, g_wait_ns, g_issued, g_record_ns, g_queries;
/* Ordered reuse: stopped (set once), and what it handed out made idle. */
static bool g_ordered_off, g_ordered_done;
static pthread_mutex_t g_ordered_lock = PTHREAD_MUTEX_INITIALIZER;

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool ordered_on(void)
{
    return gmt_opt.pool_ordered &&
           !__atomic_load_n(&g_ordered_off, __ATOMIC_SEQ_CST);
}

void gmt_fence_ordered_end(const char *why)
{
    gmt_options_load(); /* a stream may come before the first traced call */
    if (!gmt_opt.pool_ordered ||
        __atomic_load_n(&g_ordered_done, __ATOMIC_ACQUIRE))
        return;
    /* Everyone who ends it waits until it has ended: a capture must not
     * begin while the synchronizations are under way. */
    pthread_mutex_lock(&g_ordered_lock);
    if (!g_ordered_done) {
        __atomic_store_n(&g_ordered_off, true, __ATOMIC_SEQ_CST);
        gmt_mem_settle();
        __atomic_store_n(&g_ordered_done, true, __ATOMIC_RELEASE);
        if (gmt_opt.verbose)
            gmt_info("pool: ordered reuse off (%s); freed blocks now wait "
                     "for the GPU", why);
    }
    pthread_mutex_unlock(&g_ordered_lock);
}

void gmt_fence_off(const char *why)
{
    gmt_fence_ordered_end(why);
    if (__atomic_load_n(&g_off, __ATOMIC_SEQ_CST))
        return; /* the common case once off: no write */
    const char *none = NULL; /* the first reason, published before the flag */
    __atomic_compare_exchange_n(&g_off_why, &none, why, false,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&g_off, true, __ATOMIC_SEQ_CST) && gmt_opt.verbose)
        gmt_info("pool: fences off (%s); freed blocks now wait for "
                 "device-wide synchronizations", why);
}

void gmt_fence_stream_created(void *stream, int dev, const char *why)
{
    bool full = false;
    pthread_mutex_lock(&g_side_lock);
    bool known = false;
    for (unsigned i = 0; i < g_nside; i++)
        known |= g_side[i].stream == stream;
    if (!known && g_nside < NSIDE && dev >= 0 && dev < POOL_MAX_DEVICES)
        g_side[g_nside++] = (struct side){stream, dev};
    else if (!known)
        full = true;
    pthread_mutex_unlock(&g_side_lock);
    if (full)
        gmt_fence_off(why);
}

void gmt_fence_stream_destroyed(void *stream, const char *why)
{
    bool known = false;
    pthread_mutex_lock(&g_side_lock);
    for (unsigned i = 0; i < g_nside; i++)
        known |= g_side[i].stream == stream;
    pthread_mutex_unlock(&g_side_lock);
    if (!known)
        return;
    /* Off first: a fence recorded from now on would not cover the work
     * still queued on the stream. Then out of the list, under the lock no
     * record is made without. */
    gmt_fence_off(why);
    pthread_mutex_lock(&g_side_lock);
    for (unsigned i = 0; i < g_nside; i++)
        if (g_side[i].stream == stream) {
            g_side[i] = g_side[--g_nside];
            break;
        }
    pthread_mutex_unlock(&g_side_lock);
}

bool gmt_fence_usable(void)
{
    return gmt_opt.pool_fences && gmt_opt.driver &&
           !__atomic_load_n(&g_off, __ATOMIC_SEQ_CST);
}

const char *gmt_fence_off_reason(void)
{
    if (!gmt_opt.pool_fences)
        return "GPUMEMTRACE_POOL_FENCES=0";
    if (!gmt_opt.driver)
        return "the driver-level observer is off, so streams of statically "
               "linked runtimes would be unseen";
    return __atomic_load_n(&g_off, __ATOMIC_SEQ_CST)
               ? __atomic_load_n(&g_off_why, __ATOMIC_ACQUIRE)
               : NULL;
}

uint64_t gmt_fence_queries(void)
{
    return LOAD(g_queries);
}

void gmt_fence_counts(uint64_t *recorded, uint64_t *waits, uint64_t *wait_ns,
                      uint64_t *issued, uint64_t *record_ns)
{
    *record_ns = LOAD(g_record_ns);
    *issued = LOAD(g_issued);
    *recorded = LOAD(g_recorded);
    *waits = LOAD(g_waits);
    *wait_ns = LOAD(g_wait_ns);
}

static struct fdev *fdev_get(int dev, bool create)
{
    if (dev < 0 || dev >= POOL_MAX_DEVICES)
        return NULL;
    struct fdev *f = __atomic_load_n(&g_fdev[dev], __ATOMIC_ACQUIRE);
    if (f || !create)
        return f;
    pthread_mutex_lock(&g_fdev_lock);
    f = g_fdev[dev];
    if (f == NULL && (f = calloc(1, sizeof *f)) != NULL) {
        pthread_mutex_init(&f->lock, NULL);
        __atomic_store_n(&g_fdev[dev], f, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_fdev_lock);
    return f;
}

/* Our CUDA calls: only with no capture under way and no error pending.
 * Only waits for the GPU may wait for the lock: a free or a poll that
 * finds it held (a wait in progress) does without. */
static bool cuda_quiet_begin(bool wait)
{
    if (!gmt_capture_hold(wait))
        return false;
    if (GMT_REAL(cudaPeekAtLastError)() != cudaSuccess) {
        gmt_capture_release();
        return false;
    }
    return true;
}

/* After a call that failed: the error is ours (none was pending). */
static void cuda_quiet_end(cudaError_t r)
{
    if (r != cudaSuccess && r != cudaErrorNotReady)
        GMT_REAL(cudaGetLastError)();
    gmt_capture_release();
}

struct record_args {
    struct fence *fe;
    int dev;
};

static cudaError_t event_of(cudaEvent_t *ev)
{
    if (*ev != NULL)
        return cudaSuccess;
    cudaError_t r = GMT_REAL(cudaEventCreateWithFlags)(ev, cudaEventDisableTiming);
    if (r != cudaSuccess)
        *ev = NULL;
    return r;
}

/* Record the fence's events: one on each busy non-blocking stream of the
 * device, then one on the legacy stream. A stream found idle needs none:
 * everything queued on it before the snapshot has run. g_side_lock held.
 * A stream in a capture gets none - the record would join the capture -
 * and then the fence is not made (cudaErrorStreamCaptureUnsupported). */
static int do_record(void *arg)
{
    struct record_args *a = arg;
    struct fence *fe = a->fe;
    cudaError_t r;
    fe->nside = 0;
    for (unsigned i = 0; i < g_nside; i++) {
        if (g_side[i].dev != a->dev)
            continue;
        cudaStream_t st = (cudaStream_t)g_side[i].stream;
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if ((r = GMT_REAL(cudaStreamIsCapturing)(st, &cs)) != cudaSuccess)
            return r;
        if (cs != cudaStreamCaptureStatusNone)
            return cudaErrorStreamCaptureUnsupported;
        if ((r = GMT_REAL(cudaStreamQuery)(st)) == cudaSuccess)
            continue; /* idle */
        if (r != cudaErrorNotReady)
            return r;
        if ((r = event_of(&fe->side[fe->nside])) != cudaSuccess ||
            (r = GMT_REAL(cudaEventRecord)(fe->side[fe->nside], st)) !=
                cudaSuccess)
            return r;
        fe->nside++;
    }
    if ((r = event_of(&fe->ev)) != cudaSuccess)
        return r;
    return GMT_REAL(cudaEventRecord)(fe->ev, cudaStreamLegacy);
}

/* Has every event of the fence completed? cudaSuccess, cudaErrorNotReady,
 * or the error of one. */
static cudaError_t fence_query(const struct fence *fe)
{
    if (gmt_opt.verbose) /* a shared counter: only when it is said */
        __atomic_add_fetch(&g_queries, 1 + fe->nside, __ATOMIC_RELAXED); /* at most */
    cudaError_t r = GMT_REAL(cudaEventQuery)(fe->ev);
    for (unsigned i = 0; r == cudaSuccess && i < fe->nside; i++)
        r = GMT_REAL(cudaEventQuery)(fe->side[i]);
    return r;
}

/* Promote what completed fences cover, oldest first; how many completed.
 * While no outstanding fence has side events, every one is an event on the
 * legacy stream, and they complete in its order: the newest is asked
 * first, and if it is done so are all the others - one query where the
 * GPU keeps up, rather than one per fence (resnet50 training, ordered
 * reuse: 245 fences a step, their queries about 0.5 ms of a 24 ms step
 * on an H200). Not after a wait for the oldest (`wait`), when the newest
 * is rarely done. f locked; `wait`: for the capture lock (see
 * cuda_quiet_begin). */
static int poll_locked(struct pool *p, struct fdev *f, int dev, bool wait)
{
    int n = 0;
    if (f->head == f->tail || !cuda_quiet_begin(wait))
        return 0;
    cudaError_t r = cudaSuccess;
    if (!wait && f->with_side == 0 && f->tail - f->head > 1) {
        struct fence *last = &f->ring[(f->tail - 1) % NFENCE];
        if (gmt_opt.verbose)
            __atomic_add_fetch(&g_queries, 1, __ATOMIC_RELAXED);
        r = GMT_REAL(cudaEventQuery)(last->ev);
        if (r == cudaSuccess) {
            pool_synced(p, dev, &last->snap);
            n = (int)(f->tail - f->head);
            __atomic_store_n(&f->head, f->tail, __ATOMIC_RELAXED);
            gmt_capture_release();
            return n;
        }
        if (r != cudaErrorNotReady)
            GMT_REAL(cudaGetLastError)(); /* ours; the oldest-first walk below says */
    }
    while (f->head != f->tail) {
        struct fence *fe = &f->ring[f->head % NFENCE];
        r = fence_query(fe);
        if (r == cudaErrorNotReady)
            break;
        if (r == cudaSuccess) {
            pool_synced(p, dev, &fe->snap);
            n++;
        } else { /* dropped; its blocks wait for a synchronization */
            GMT_REAL(cudaGetLastError)();
        }
        if (fe->nside)
            f->with_side--;
        __atomic_store_n(&f->head, f->head + 1, __ATOMIC_RELAXED);
    }
    gmt_capture_release();
    return n;
}

/* Record a fence covering every free so far, unless nothing was freed
 * since the newest snapshot. f locked. true: recorded, and with ordered
 * reuse its frees are reusable now. */
static bool record_locked(struct pool *p, struct fdev *f, int dev)
{
    if (f->tail - f->head == NFENCE)
        poll_locked(p, f, dev, false);
    if (f->tail - f->head == NFENCE)
        return false;
    if (!pool_freed_since_snapshot(p, dev) || !cuda_quiet_begin(false))
        return false; /* nothing new to cover, or no CUDA call of ours now */
    struct fence *fe = &f->ring[f->tail % NFENCE];
    pool_sync_snapshot(p, dev, &fe->snap);
    /* after the snapshot: see the ordering note at the top */
    cudaError_t r = cudaErrorNotPermitted;
    uint64_t t0 = gmt_opt.verbose ? gmt_now_ns() : 0;
    pthread_mutex_lock(&g_side_lock);
    if (!__atomic_load_n(&g_off, __ATOMIC_SEQ_CST)) {
        struct record_args a = {fe, dev};
        r = (cudaError_t)gmt_on_device(dev, do_record, &a);
    }
    pthread_mutex_unlock(&g_side_lock);
    if (t0)
        __atomic_add_fetch(&g_record_ns, gmt_now_ns() - t0, __ATOMIC_RELAXED);
    cuda_quiet_end(r == cudaErrorNotPermitted ? cudaSuccess : r);
    if (r == cudaSuccess) {
        if (fe->nside)
            f->with_side++;
        __atomic_store_n(&f->tail, f->tail + 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&g_recorded, 1, __ATOMIC_RELAXED);
        if (ordered_on()) { /* after the record: see the top */
            pool_issued(p, dev, &fe->snap);
            __atomic_add_fetch(&g_issued, 1, __ATOMIC_RELAXED);
            return true;
        }
    } else {
        pool_snapshot_abandoned(p, dev); /* its frees still need cover */
    }
    return false;
}

void gmt_fence_after_free(struct pool *p, int dev)
{
    if (!gmt_fence_usable())
        return;
    struct fdev *f = fdev_get(dev, true);
    if (f == NULL)
        return;
    if (LOAD(f->wait_avg_ns) < FENCE_BEHIND_NS)
        return; /* the GPU keeps up: no clock read either */
    uint64_t now = now_ns();
    if (now - LOAD(f->last_ns) < FENCE_EVERY_NS ||
        now - LOAD(f->need_ns) > FENCE_PRESSURE_NS)
        return;
    if (pthread_mutex_trylock(&f->lock) != 0)
        return; /* another thread is at it: never wait for a free */
    record_locked(p, f, dev);
    __atomic_store_n(&f->last_ns, now, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&f->lock);
}

int gmt_fence_reclaim(struct pool *p, int dev, int wait)
{
    /* A barrier before a large request, only with ordered reuse: every
     * large cudaMalloc of the default rule asks, so it answers first. */
    if (wait == POOL_ISSUE && !ordered_on())
        return 0;
    struct fdev *f = fdev_get(dev, false);
    if (f == NULL)
        return 0;
    if (wait == POOL_ISSUE) {
        /* record_locked finds whether anything was freed since the last */
        if (!gmt_fence_usable() || pthread_mutex_trylock(&f->lock) != 0)
            return 0; /* another thread is at it: never wait for a hint */
        bool issued = record_locked(p, f, dev);
        __atomic_store_n(&f->last_ns, now_ns(), __ATOMIC_RELAXED);
        pthread_mutex_unlock(&f->lock);
        return issued;
    }
    if (!wait && LOAD(f->head) == LOAD(f->tail))
        return 0; /* nothing to query: no clock read */
    uint64_t now = now_ns();
    if (!wait && now - LOAD(f->poll_ns) < POLL_EVERY_NS)
        return 0; /* queried just now */
    if (!wait && pthread_mutex_trylock(&f->lock) != 0)
        return 0; /* another thread is polling: no queue behind it */
    if (wait)
        pthread_mutex_lock(&f->lock);
    __atomic_store_n(&f->poll_ns, now, __ATOMIC_RELAXED);
    int n = poll_locked(p, f, dev, false);
    if (n > 0 || !wait) {
        pthread_mutex_unlock(&f->lock);
        return n > 0;
    }
    /* The pool needs pending memory: frees get fences again for a while,
     * and the frees since the newest fence (a burst, as when a layer's
     * temporaries go) get one now. It completes when the GPU gets here,
     * as one recorded after the last of them would. */
    __atomic_store_n(&f->need_ns, now, __ATOMIC_RELAXED);
    if (gmt_fence_usable()) {
        bool issued = record_locked(p, f, dev);
        __atomic_store_n(&f->last_ns, now, __ATOMIC_RELAXED);
        if (issued && wait == POOL_REUSE) {
            pthread_mutex_unlock(&f->lock);
            return 1; /* ordered reuse: no wait */
        }
    }
    if (f->head == f->tail) {
        pthread_mutex_unlock(&f->lock);
        return n > 0;
    }
    /* Wait for the oldest only, without the lock: frees go on recording.
     * Its slot can be recorded again only after NFENCE newer fences; then
     * the wait is merely longer. Its events are kept for ever (a slot
     * reuses them), so waiting on a copy of their handles is safe. */
    struct fence *old = &f->ring[f->head % NFENCE];
    cudaEvent_t evs[1 + NSIDE];
    unsigned nev = 0;
    evs[nev++] = old->ev;
    for (unsigned i = 0; i < old->nside; i++)
        evs[nev++] = old->side[i];
    pthread_mutex_unlock(&f->lock);
    if (!cuda_quiet_begin(true))
        return 0;
    cudaError_t r = cudaSuccess;
    for (unsigned i = 0; r == cudaSuccess && i < nev; i++)
        r = GMT_REAL(cudaEventSynchronize)(evs[i]);
    cuda_quiet_end(r);
    uint64_t took = now_ns() - now; /* racing waiters may lose an update:
                                       a statistic */
    __atomic_store_n(&f->wait_avg_ns, (LOAD(f->wait_avg_ns) * 7 + took) / 8,
                     __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_waits, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_wait_ns, took, __ATOMIC_RELAXED);
    struct gmt_thread *t = gmt_thread_get();
    if (t)
        gmt_ev_pool_sync(t, dev, GMT_API_POOL_FENCE_WAIT, r);
    if (r != cudaSuccess)
        return 0;
    pthread_mutex_lock(&f->lock);
    n = poll_locked(p, f, dev, true);
    pthread_mutex_unlock(&f->lock);
    return n > 0;
}

void gmt_fence_forget_device(int dev)
{
    struct fdev *f = fdev_get(dev, false);
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->lock);
    /* The reset destroyed the events with the context: new ones are made
     * on first use. What the fences covered, the reset freed. */
    for (int i = 0; i < NFENCE; i++) {
        f->ring[i].ev = NULL;
        memset(f->ring[i].side, 0, sizeof f->ring[i].side);
    }
    __atomic_store_n(&f->head, f->tail, __ATOMIC_RELAXED);
    f->with_side = 0;
    pthread_mutex_unlock(&f->lock);
    /* and the device's streams with them */
    pthread_mutex_lock(&g_side_lock);
    for (unsigned i = 0; i < g_nside;)
        if (g_side[i].dev == dev)
            g_side[i] = g_side[--g_nside];
        else
            i++;
    pthread_mutex_unlock(&g_side_lock);
}

void gmt_fence_reset_after_fork(void)
{
    /* The parent's events mean nothing here (nor does CUDA after fork). */
    for (int i = 0; i < POOL_MAX_DEVICES; i++)
        g_fdev[i] = NULL;
    pthread_mutex_init(&g_fdev_lock, NULL);
    pthread_mutex_init(&g_ordered_lock, NULL);
    pthread_mutex_init(&g_side_lock, NULL);
    pthread_mutex_init(&g_joined_lock, NULL);
    g_nside = 0;
    g_joined = 0; /* the child's own count (the modules stay mapped) */
    g_joined_lib[0] = '\0';
    g_joined_more = false;
}

/* ---- libraries' own streams ---------------------------------------------
 * cuDNN makes 16 non-blocking streams of its own for each handle (with
 * cuStreamCreate, from libcudnn_graph), which put every PyTorch model
 * with a convolution or cuDNN's attention past NSIDE. Such a library runs
 * a call's work on its streams forked from the stream the caller gave it
 * (they wait for an event recorded there) and joined back to it (the
 * caller's stream waits for an event on each) before the call returns:
 * otherwise it would break the caller's stream order, and PyTorch's
 * caching allocator - which hands a freed block to the next allocation on
 * the same stream at once - would corrupt memory under every model that
 * uses it. So the work on those streams is covered by whatever covers the
 * caller's stream: a fence's event on the legacy stream, or on the
 * caller's non-blocking stream. Fences leave out the non-blocking streams
 * made by the libraries GPUMEMTRACE_POOL_JOINED_STREAMS names (file name
 * prefixes of the module the creating call returns to; "libcudnn" by
 * default, "none" for no library): they neither count towards NSIDE nor
 * end ordered reuse, and destroying one turns nothing off. A library that
 * left work running on its own streams after returning would need the
 * option without its name: then its streams count as the program's. */


/* Enter the address range of the module `caller` lies in (g_joined_lock
 * held); past NJOINED_MODS, its frees are not recognized (see mem.c's
 * joined_free_sync: then they are ordinary frees). */
static void enter_module(const void *caller)
{
    uintptr_t lo, hi;
    if (gmt_fence_joined_caller(caller) || g_njoined_mods == NJOINED_MODS ||
        !gmt_module_span(caller, &lo, &hi))
        return;
    g_joined_mod[g_njoined_mods].lo = lo;
    g_joined_mod[g_njoined_mods].hi = hi;
    __atomic_store_n(&g_njoined_mods, g_njoined_mods + 1, __ATOMIC_RELEASE);
}

bool gmt_fence_joined_caller(const void *caller)
{
    unsigned n = __atomic_load_n(&g_njoined_mods, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if ((uintptr_t)caller >= g_joined_mod[i].lo &&
            (uintptr_t)caller < g_joined_mod[i].hi)
            return true;
    return false;
}

/* Does the module that `caller` (a return address) lies in match one of
 * the prefixes GPUMEMTRACE_POOL_JOINED_STREAMS lists (spaces around an
 * item ignored)? */
static bool joined_library(const void *caller)
{
    const char *list = gmt_opt.pool_joined_streams;
    Dl_info di;
    if (caller == NULL || list == NULL || strcmp(list, "none") == 0 ||
        !dladdr(caller, &di) || di.dli_fname == NULL)
        return false;
    const char *base = strrchr(di.dli_fname, '/');
    base = base ? base + 1 : di.dli_fname;
    for (const char *s = list; *s != '\0';) {
        s += strspn(s, " ");
        size_t n = strcspn(s, ",");
        size_t k = n;
        while (k > 0 && s[k - 1] == ' ')
            k--;
        if (k > 0 && strncmp(base, s, k) == 0) {
            pthread_mutex_lock(&g_joined_lock);
            enter_module(caller);
            if (g_joined_lib[0] == '\0')
                snprintf(g_joined_lib, sizeof g_joined_lib, "%s", base);
            else if (strncmp(g_joined_lib, base, sizeof g_joined_lib - 1))
                g_joined_more = true;
            pthread_mutex_unlock(&g_joined_lock);
            return true;
        }
        s += n + (s[n] == ',');
    }
    return false;
}

enum gmt_nb_kind gmt_fence_nb_kind(const void *caller)
{
    if (tls_rt_create)
        return GMT_NB_INNER;
    int saved = errno; /* the program's, before our hook's call saves it */
    gmt_options_load(); /* a stream may come before the first traced call */
    enum gmt_nb_kind k = joined_library(caller) ? GMT_NB_JOINED : GMT_NB_COVERED;
    errno = saved;
    return k;
}

void gmt_fence_nb_joined(void)
{
    __atomic_add_fetch(&g_joined, 1, __ATOMIC_RELAXED);
}

uint64_t gmt_fence_joined(const char **lib, bool *more)
{
    uint64_t n = LOAD(g_joined);
    pthread_mutex_lock(&g_joined_lock);
    *lib = n ? g_joined_lib : NULL;
    *more = g_joined_more;
    pthread_mutex_unlock(&g_joined_lock);
    return n;
}

/* ---- the runtime's stream calls (hooks.c) ----------------------------------
 * Ordered reuse ends before a non-blocking stream is created (its work is
 * not ordered by the legacy stream); fences take the stream in once it
 * exists, and go off before it is destroyed. */

cudaError_t gmt_stream_create(cudaStream_t *ps, unsigned flags, int priority,
                              bool with_priority, const void *caller)
{
    enum gmt_nb_kind kind = flags & cudaStreamNonBlocking
                                ? gmt_fence_nb_kind(caller)
                                : GMT_NB_INNER;
    bool nb = kind == GMT_NB_COVERED;
    if (nb)
        gmt_fence_ordered_end(
            with_priority ? GMT_NB_MADE("cudaStreamCreateWithPriority")
                          : GMT_NB_MADE("cudaStreamCreateWithFlags"));
    unsigned api = with_priority ? GMT_API_STREAM_CREATE_WITH_PRIORITY
                                 : GMT_API_STREAM_CREATE_WITH_FLAGS;
    struct gmt_call c;
    bool on = gmt_call_begin(&c, false);
    bool mark = kind != GMT_NB_INNER; /* INNER: not ours to decide */
    if (mark)
        tls_rt_create = true;
    cudaError_t r =
        with_priority
            ? GMT_REAL(cudaStreamCreateWithPriority)(ps, flags, priority)
            : GMT_REAL(cudaStreamCreateWithFlags)(ps, flags);
    if (mark)
        tls_rt_create = false;
    if (kind == GMT_NB_JOINED && r == cudaSuccess)
        gmt_fence_nb_joined();
    if (on)
        gmt_call_errno(&c);
    if (nb && r == cudaSuccess) {
        int dev = -1;
        if (GMT_REAL(cudaGetDevice)(&dev) != cudaSuccess)
            dev = -1; /* not entered: fences go off */
        gmt_fence_stream_created(
            (void *)*ps, dev,
            with_priority ? GMT_NB_MANY("cudaStreamCreateWithPriority")
                          : GMT_NB_MANY("cudaStreamCreateWithFlags"));
    }
    if (on) {
        gmt_ev_stream_create(&c, r, api, ps ? (const void *)*ps : NULL, flags,
                             with_priority ? priority : 0);
        gmt_call_finish(&c);
    }
    return r;
}

cudaError_t gmt_stream_destroy(cudaStream_t stream)
{
    gmt_fence_stream_destroyed((void *)stream,
                               "the program destroyed a non-blocking stream "
                               "(cudaStreamDestroy)");
    struct gmt_call c;
    if (!gmt_call_begin(&c, true))
        return GMT_REAL(cudaStreamDestroy)(stream);
    cudaError_t r = GMT_REAL(cudaStreamDestroy)(stream);
    gmt_call_errno(&c);
    gmt_ev_stream_destroy(&c, r, stream);
    gmt_call_finish(&c);
    return r;
}
