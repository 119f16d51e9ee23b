/*
 * sim_stream.c - streams, their worker threads, stream capture and
 * synchronisation of the simulated CUDA runtime (tests/sim, see README.md;
 * events are in sim_event.c).
 *
 * Every stream (user streams, one legacy default stream per device, one
 * per-thread default stream per (thread, device)) owns a FIFO of
 * operations and a detached worker thread, started on the first enqueue,
 * that runs them in order.  So work really completes *after* the call that
 * enqueued it, and a test (or the profiler under test) that forgets to
 * synchronise sees it.  Streams are independent: the legacy stream does
 * NOT implicitly synchronise with other streams, which is strictly less
 * synchronisation than real CUDA and therefore exposes more unsafe reuse.
 * The one exception: an event recorded on the legacy stream waits for the
 * device's blocking streams, as in CUDA (sim_legacy_deps).
 *
 * Operations that touch tracked memory re-validate it when they run
 * (sim_region_ok): if the allocation they were issued against is gone the
 * access is counted as stale and only performed when the bytes belong to a
 * newer allocation (the realistic "kernel scribbles over reused memory"
 * case); bytes already returned to libc are never touched.
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The exports below have no prototype in the headers unless the program is
 * built with per-thread default streams; declare them from the base API so
 * the compiler still checks the signatures (those of the entry points the
 * profiler hooks: sim_internal.h). */
__typeof__(cudaStreamQuery) cudaStreamQuery_ptsz;
__typeof__(cudaStreamGetFlags) cudaStreamGetFlags_ptsz;
__typeof__(cudaStreamGetPriority) cudaStreamGetPriority_ptsz;
__typeof__(cudaStreamGetDevice) cudaStreamGetDevice_ptsz;
__typeof__(cudaStreamIsCapturing) cudaStreamIsCapturing_ptsz;
__typeof__(cudaStreamGetCaptureInfo) cudaStreamGetCaptureInfo_ptsz;
__typeof__(cudaStreamAddCallback) cudaStreamAddCallback_ptsz;
__typeof__(cudaLaunchHostFunc) cudaLaunchHostFunc_ptsz;

/* ------------------------------------------------------------------ */
/* Stream objects                                                      */
/* ------------------------------------------------------------------ */

static struct CUstream_st *sim_stream_new(enum sim_stream_kind kind, int dev,
                                          unsigned flags, int priority)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (pthread_cond_init(&s->work, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->magic = SIM_MAGIC_STREAM;
    s->kind = kind;
    s->device = dev;
    s->flags = flags;
    s->priority = priority;
    s->id = ++sim_g.next_stream_id;
    s->next = sim_g.streams;
    sim_g.streams = s;
    return s;
}

/* A destroyed stream stays in sim_g.streams (device synchronisation must
 * still wait for its queued work) until it is drained, its worker has
 * exited and nobody is waiting on it. */
static void sim_stream_maybe_free(struct CUstream_st *s)
{
    if (!s->destroyed || s->refs > 0 || s->head)
        return;
    if (s->has_worker && !s->worker_exited)
        return;
    for (struct CUstream_st **pp = &sim_g.streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_cond_destroy(&s->work);
    s->magic = 0;
    free(s);
}

static bool sim_stream_is_live(const struct CUstream_st *h)
{
    for (const struct CUstream_st *s = sim_g.streams; s; s = s->next)
        if (s == h)
            return !s->destroyed;
    return false;
}

cudaError_t sim_stream_resolve(cudaStream_t h, struct CUstream_st **out)
{
    int dev = sim_current_device();

    if (h == NULL || h == cudaStreamLegacy) {
        struct sim_device *d = &sim_g.dev[dev];
        if (!d->legacy && !(d->legacy = sim_stream_new(SIM_STREAM_LEGACY, dev, 0, 0)))
            return cudaErrorMemoryAllocation;
        *out = d->legacy;
        return cudaSuccess;
    }
    if (h == cudaStreamPerThread) {
        struct CUstream_st **slot = sim_thread_ptds(dev);
        if (!slot)
            return cudaErrorMemoryAllocation;
        if (!*slot && !(*slot = sim_stream_new(SIM_STREAM_PER_THREAD, dev, 0, 0)))
            return cudaErrorMemoryAllocation;
        *out = *slot;
        return cudaSuccess;
    }
    if (!sim_stream_is_live(h))
        return cudaErrorInvalidResourceHandle;
    *out = h;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* Capture sequences                                                   */
/* ------------------------------------------------------------------ */

struct CUgraph_st *sim_graph_new(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = SIM_MAGIC_GRAPH;
    g->next = sim_g.graphs;
    sim_g.graphs = g;
    return g;
}

void sim_graph_free(struct CUgraph_st *g)
{
    for (struct CUgraph_st **pp = &sim_g.graphs; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            g->magic = 0;
            free(g);
            return;
        }
    }
}

struct sim_capture *sim_capture_find(unsigned long long id)
{
    for (struct sim_capture *c = sim_g.captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

/* Ends a capture sequence: every stream that joined it stops capturing.
 * The graph is left to the caller. */
static void sim_capture_end(struct sim_capture *c)
{
    for (struct CUstream_st *s = sim_g.streams; s; s = s->next)
        if (s->capture == c)
            s->capture = NULL;
    for (struct sim_capture **pp = &sim_g.captures; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    free(c);
}

/*
 * The real runtime's rule for "potentially unsafe" calls (cudaMalloc,
 * cudaFree, synchronisation, synchronous copies, ...) during stream
 * capture, as documented for cudaThreadExchangeStreamCaptureMode:
 *   - a thread in Relaxed mode is never prohibited;
 *   - otherwise a capture begun by this thread in Global or ThreadLocal
 *     mode prohibits the call;
 *   - a thread in Global mode is also prohibited by a Global-mode capture
 *     of any other thread.
 * A prohibited call fails with cudaErrorStreamCaptureUnsupported and
 * invalidates the capture(s) that prohibited it.
 */
cudaError_t sim_capture_check_unsafe(void)
{
    enum cudaStreamCaptureMode tmode = sim_thread_capture_mode();
    pthread_t self = pthread_self();
    bool hit = false;

    if (tmode == cudaStreamCaptureModeRelaxed)
        return cudaSuccess;
    for (struct sim_capture *c = sim_g.captures; c; c = c->next) {
        bool own = pthread_equal(c->thread, self) != 0;
        bool offending = own ? c->mode != cudaStreamCaptureModeRelaxed
                             : (c->mode == cudaStreamCaptureModeGlobal &&
                                tmode == cudaStreamCaptureModeGlobal);
        if (offending) {
            c->invalidated = true;
            hit = true;
        }
    }
    return hit ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Synchronising with / querying a stream that is itself capturing is never
 * legal, whatever the modes; otherwise the general rule applies. */
cudaError_t sim_capture_check_sync_stream(struct CUstream_st *s)
{
    if (s->capture) {
        s->capture->invalidated = true;
        return cudaErrorStreamCaptureUnsupported;
    }
    return sim_capture_check_unsafe();
}

void sim_stream_mark_destroyed(struct CUstream_st *s)
{
    if (s->destroyed)
        return;
    s->destroyed = true;
    if (s->capture) {
        /* Destroying a capturing stream breaks its capture sequence. */
        struct sim_capture *c = s->capture;
        c->invalidated = true;
        if (c->origin == s) {
            sim_graph_free(c->graph);
            sim_capture_end(c);
        } else {
            s->capture = NULL;
        }
    }
    if (s->has_worker)
        pthread_cond_signal(&s->work);
    sim_stream_maybe_free(s);
}

/* ------------------------------------------------------------------ */
/* Operations and the worker threads                                   */
/* ------------------------------------------------------------------ */

/* The one implicit synchronization simulated: an event recorded on the
 * legacy stream completes only after the work queued before it on the
 * device's blocking streams (user streams without cudaStreamNonBlocking,
 * per-thread default streams). Lock held. */
bool sim_legacy_deps(struct sim_op *op, struct CUstream_st *legacy)
{
    size_t n = 0;
    for (struct CUstream_st *s = sim_g.streams; s; s = s->next)
        if (s != legacy && s->device == legacy->device &&
            !(s->kind == SIM_STREAM_USER && (s->flags & cudaStreamNonBlocking)) &&
            s->completed < s->enqueued)
            n++;
    if (n == 0)
        return true;
    op->u.event.deps = malloc(n * sizeof *op->u.event.deps);
    op->u.event.seq = malloc(n * sizeof *op->u.event.seq);
    if (!op->u.event.deps || !op->u.event.seq) {
        free(op->u.event.deps);
        free(op->u.event.seq);
        op->u.event.deps = NULL;
        op->u.event.seq = NULL;
        return false;
    }
    for (struct CUstream_st *s = sim_g.streams; s; s = s->next) {
        if (s != legacy && s->device == legacy->device &&
            !(s->kind == SIM_STREAM_USER && (s->flags & cudaStreamNonBlocking)) &&
            s->completed < s->enqueued) {
            s->refs++;
            op->u.event.deps[op->u.event.ndeps] = s;
            op->u.event.seq[op->u.event.ndeps++] = s->enqueued;
        }
    }
    return true;
}

/* Drop the references a legacy record holds (lock held). */
static void sim_release_deps(struct sim_op *op)
{
    for (size_t i = 0; i < op->u.event.ndeps; i++) {
        op->u.event.deps[i]->refs--;
        sim_stream_maybe_free(op->u.event.deps[i]);
    }
    free(op->u.event.deps);
    free(op->u.event.seq);
    op->u.event.deps = NULL;
    op->u.event.seq = NULL;
    op->u.event.ndeps = 0;
}

struct sim_op *sim_op_new(enum sim_op_kind kind)
{
    struct sim_op *op = calloc(1, sizeof *op);
    if (op)
        op->kind = kind;
    return op;
}

void sim_op_free(struct sim_op *op)
{
    if (!op)
        return;
    switch (op->kind) {
    case SIM_OP_COPY:
        if (op->u.copy.v != &op->u.copy.one)
            free(op->u.copy.v);
        break;
    case SIM_OP_RECORD:
    case SIM_OP_WAIT:
        sim_event_unref(op->u.event.ev);
        sim_release_deps(op);
        break;
    case SIM_OP_FREE:
        /* Only reached when the enqueue failed: the allocation stays. */
        if (op->u.free.a)
            op->u.free.a->freeing = false;
        break;
    default:
        break;
    }
    free(op);
}

static void sim_sleep_us(unsigned us)
{
    struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Execution-time check of a region (lock held).  Returns whether the bytes
 * may be accessed; counts accesses to memory whose allocation is gone. */
static bool sim_region_ok(const struct sim_region *r, bool write)
{
    if (r->kind != SIM_REGION_DEVICE)
        return true;
    struct sim_alloc *a = sim_reg_find_range(r->ptr, r->span);
    if (a && a->id == r->alloc_id)
        return true;
    if (write)
        sim_g.stale_writes++;
    else
        sim_g.stale_reads++;
    /* Reused by a newer allocation: a real GPU would scribble over (or read)
     * it, so do the same.  Returned to libc: never touch it. */
    return a != NULL;
}

static void sim_exec_copy(const struct sim_copy *c)
{
    bool dst_ok = sim_region_ok(&c->dst, true);
    bool src_ok = sim_region_ok(&c->src, false);
    if (!dst_ok)
        return;
    for (size_t z = 0; z < c->depth; z++) {
        for (size_t y = 0; y < c->height; y++) {
            char *d = c->dst.ptr + z * c->dst.slice + y * c->dst.pitch;
            const char *s = c->src.ptr + z * c->src.slice + y * c->src.pitch;
            if (src_ok)
                memmove(d, s, c->width);
            else
                memset(d, SIM_FREED_FILL, c->width); /* what freed memory holds */
        }
    }
}

static void sim_exec_set(struct sim_op *op)
{
    const struct sim_region *r = &op->u.set.dst;
    if (!sim_region_ok(r, true))
        return;
    for (size_t z = 0; z < op->u.set.depth; z++)
        for (size_t y = 0; y < op->u.set.height; y++)
            memset(r->ptr + z * r->slice + y * r->pitch, op->u.set.value, op->u.set.width);
}

/* Runs one operation; lock held on entry and on return. */
static void sim_exec(struct sim_op *op)
{
    struct CUevent_st *ev;

    switch (op->kind) {
    case SIM_OP_COPY:
        for (size_t i = 0; i < op->u.copy.n; i++)
            sim_exec_copy(&op->u.copy.v[i]);
        break;
    case SIM_OP_SET:
        if (op->delay_us) {
            sim_unlock();
            sim_sleep_us(op->delay_us);
            sim_lock();
        }
        sim_exec_set(op);
        break;
    case SIM_OP_SLEEP:
        sim_unlock();
        sim_sleep_us(op->delay_us);
        sim_lock();
        break;
    case SIM_OP_RECORD:
        for (size_t i = 0; i < op->u.event.ndeps; i++)
            while (op->u.event.deps[i]->completed < op->u.event.seq[i])
                pthread_cond_wait(&sim_g.progress, &sim_g.lock);
        ev = op->u.event.ev;
        /* A later record may already have completed on a faster stream;
         * never move the event backwards. */
        if (op->u.event.gen > ev->done_gen) {
            ev->done_gen = op->u.event.gen;
            clock_gettime(CLOCK_MONOTONIC, &ev->t_done);
        }
        break;
    case SIM_OP_WAIT:
        ev = op->u.event.ev;
        while (ev->done_gen < op->u.event.gen)
            pthread_cond_wait(&sim_g.progress, &sim_g.lock);
        break;
    case SIM_OP_FREE: {
        struct sim_alloc *a = op->u.free.a;
        op->u.free.a = NULL;
        sim_alloc_unlink(a);
        sim_unlock();
        sim_alloc_destroy(a);
        sim_lock();
        break;
    }
    case SIM_OP_HOSTFN:
        /* User code runs without the lock so that it cannot deadlock the
         * simulator (calling CUDA from it is still illegal, as in CUDA). */
        sim_unlock();
        if (op->u.host.fn)
            op->u.host.fn(op->u.host.arg);
        else
            op->u.host.cb(op->u.host.handle, cudaSuccess, op->u.host.arg);
        sim_lock();
        break;
    }
}

static void *sim_worker_main(void *arg)
{
    struct CUstream_st *s = arg;

    sim_lock();
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->work, &sim_g.lock);
        if (!s->head)
            break; /* destroyed and drained */
        struct sim_op *op = s->head; /* stays queued while it runs */
        sim_exec(op);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = op->seq;
        sim_op_free(op);
        pthread_cond_broadcast(&sim_g.progress);
    }
    s->worker_exited = true;
    sim_stream_maybe_free(s);
    sim_unlock();
    return NULL;
}

static bool sim_start_worker(struct CUstream_st *s)
{
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    int rc;

    if (pthread_attr_init(&attr) != 0)
        return false;
    /* Detached: nobody ever joins a worker, so they can never hold up
     * process exit (exit() simply ends them). */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Workers block all signals so that the test program's handlers run on
     * its own threads, as they would with the real runtime's threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&t, &attr, sim_worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return false;
    /* The worker cannot have exited yet: it is waiting for our lock. */
    char name[16];
    snprintf(name, sizeof name, "simcuda-s%llu", s->id % 100000u);
    (void)pthread_setname_np(t, name);
    s->has_worker = true;
    return true;
}

cudaError_t sim_enqueue(struct CUstream_st *s, struct sim_op *op)
{
    if (!s->has_worker && !sim_start_worker(s)) {
        sim_op_free(op);
        return cudaErrorMemoryAllocation;
    }
    op->seq = ++s->enqueued;
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work);
    return cudaSuccess;
}

void sim_wait_seq(struct CUstream_st *s, unsigned long long seq)
{
    s->refs++;
    while (s->completed < seq)
        pthread_cond_wait(&sim_g.progress, &sim_g.lock);
    s->refs--;
    sim_stream_maybe_free(s);
}

/* Waits for everything enqueued so far on the streams of `dev` (all
 * devices if dev < 0).  Work enqueued while waiting is not waited for. */
void sim_drain_device(int dev)
{
    struct pending {
        struct CUstream_st *s;
        unsigned long long seq;
    } *v;
    size_t n = 0, i = 0;

    for (struct CUstream_st *s = sim_g.streams; s; s = s->next)
        if ((dev < 0 || s->device == dev) && s->completed < s->enqueued)
            n++;
    if (n == 0)
        return;
    v = malloc(n * sizeof *v);
    if (!v) {
        /* Out of memory: fall back to waiting until the device is idle. */
        for (;;) {
            struct CUstream_st *busy = NULL;
            for (struct CUstream_st *s = sim_g.streams; s && !busy; s = s->next)
                if ((dev < 0 || s->device == dev) && s->completed < s->enqueued)
                    busy = s;
            if (!busy)
                return;
            sim_wait_seq(busy, busy->enqueued);
        }
    }
    for (struct CUstream_st *s = sim_g.streams; s; s = s->next) {
        if ((dev < 0 || s->device == dev) && s->completed < s->enqueued) {
            s->refs++; /* keep it alive until we have waited on it */
            v[i].s = s;
            v[i].seq = s->enqueued;
            i++;
        }
    }
    for (i = 0; i < n; i++) {
        v[i].s->refs--;
        sim_wait_seq(v[i].s, v[i].seq);
    }
    free(v);
}

/* Called by cudaDeviceReset after draining: user streams and events of the
 * device become invalid, and its capture sequences end. */
void sim_device_reset_streams(int dev)
{
    struct CUstream_st *s, *next;
    for (s = sim_g.streams; s; s = next) {
        next = s->next;
        if (s->device == dev && s->kind == SIM_STREAM_USER)
            sim_stream_mark_destroyed(s);
    }
    for (struct sim_capture *c = sim_g.captures, *cn; c; c = cn) {
        cn = c->next;
        if (c->origin->device == dev) {
            sim_graph_free(c->graph);
            sim_capture_end(c);
        }
    }
    for (struct CUevent_st **pp = &sim_g.events; *pp;) {
        struct CUevent_st *ev = *pp;
        if (ev->device == dev) {
            *pp = ev->next;
            ev->destroyed = true;
            sim_event_unref(ev);
        } else {
            pp = &ev->next;
        }
    }
}

/* Enqueues op on stream h (validated), optionally waiting for it. */
static cudaError_t sim_submit(cudaStream_t h, struct sim_op *op)
{
    struct CUstream_st *s;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess) {
        free(op);
        return err;
    }
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess)
        err = sim_enqueue(s, op);
    else
        sim_op_free(op);
    sim_unlock();
    return err;
}

/* ------------------------------------------------------------------ */
/* Stream API                                                          */
/* ------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    if (!pStream)
        return sim_ret(cudaErrorInvalidValue);
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    /* Clamp like the real runtime: 0 is the lowest, -5 the highest. */
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    sim_lock();
    struct CUstream_st *s = sim_stream_new(SIM_STREAM_USER, sim_current_device(), flags, priority);
    sim_unlock();
    if (!s)
        return sim_ret(cudaErrorMemoryAllocation);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!pStream)
        return sim_ret(cudaErrorInvalidValue);
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct CUstream_st *s = sim_stream_new(SIM_STREAM_USER, sim_current_device(), flags, 0);
    sim_unlock();
    if (!s)
        return sim_ret(cudaErrorMemoryAllocation);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    if (!pStream)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct CUstream_st *s = sim_stream_new(SIM_STREAM_USER, sim_current_device(), cudaStreamDefault, 0);
    sim_unlock();
    if (!s)
        return sim_ret(cudaErrorMemoryAllocation);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return sim_ret(cudaErrorInvalidResourceHandle);
    sim_lock();
    if (sim_stream_is_live(stream))
        sim_stream_mark_destroyed(stream); /* queued work still completes */
    else
        err = cudaErrorInvalidResourceHandle;
    sim_unlock();
    return sim_ret(err);
}

static cudaError_t sim_stream_synchronize(cudaStream_t h)
{
    struct CUstream_st *s;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess)
        err = sim_capture_check_sync_stream(s);
    if (err == cudaSuccess) {
        sim_g.stream_syncs++;
        sim_wait_seq(s, s->enqueued);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return sim_stream_synchronize(stream);
}

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return sim_stream_synchronize(SIM_PTSZ(stream));
}

static cudaError_t sim_stream_query(cudaStream_t h)
{
    struct CUstream_st *s;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess)
        err = sim_capture_check_sync_stream(s);
    if (err == cudaSuccess && s->completed < s->enqueued)
        err = cudaErrorNotReady;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return sim_stream_query(stream);
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    return sim_stream_query(SIM_PTSZ(stream));
}

/* GetFlags / GetPriority / GetDevice share one lookup. */
static cudaError_t sim_stream_info(cudaStream_t h, unsigned *flags, int *priority, int *device)
{
    struct CUstream_st *s;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess) {
        if (flags)
            *flags = s->flags;
        if (priority)
            *priority = s->priority;
        if (device)
            *device = s->device;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
    if (!flags)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(hStream, flags, NULL, NULL);
}

cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags)
{
    if (!flags)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(SIM_PTSZ(hStream), flags, NULL, NULL);
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    if (!priority)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(hStream, NULL, priority, NULL);
}

cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority)
{
    if (!priority)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(SIM_PTSZ(hStream), NULL, priority, NULL);
}

cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
    if (!device)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(hStream, NULL, NULL, device);
}

cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device)
{
    if (!device)
        return sim_ret(cudaErrorInvalidValue);
    return sim_stream_info(SIM_PTSZ(hStream), NULL, NULL, device);
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_capture_check_unsafe();
    if (err == cudaSuccess) {
        sim_g.device_syncs++;
        sim_drain_device(sim_current_device());
    }
    sim_unlock();
    return sim_ret(err);
}

static cudaError_t sim_host_op(cudaStream_t h, cudaHostFn_t fn, cudaStreamCallback_t cb, void *arg)
{
    struct sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    op->u.host.fn = fn;
    op->u.host.cb = cb;
    op->u.host.handle = h;
    op->u.host.arg = arg;
    return sim_ret(sim_submit(h, op));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    if (!fn)
        return sim_ret(cudaErrorInvalidValue);
    return sim_host_op(stream, fn, NULL, userData);
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    if (!fn)
        return sim_ret(cudaErrorInvalidValue);
    return sim_host_op(SIM_PTSZ(stream), fn, NULL, userData);
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void *userData, unsigned int flags)
{
    if (!callback || flags != 0)
        return sim_ret(cudaErrorInvalidValue);
    return sim_host_op(stream, NULL, callback, userData);
}

cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                       void *userData, unsigned int flags)
{
    if (!callback || flags != 0)
        return sim_ret(cudaErrorInvalidValue);
    return sim_host_op(SIM_PTSZ(stream), NULL, callback, userData);
}

cudaError_t simLaunchSleep(unsigned delay_us, cudaStream_t stream)
{
    struct sim_op *op = sim_op_new(SIM_OP_SLEEP);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    op->delay_us = delay_us;
    return sim_ret(sim_submit(stream, op));
}

/* ------------------------------------------------------------------ */
/* Capture API                                                         */
/* ------------------------------------------------------------------ */

static cudaError_t sim_begin_capture(cudaStream_t h, enum cudaStreamCaptureMode mode)
{
    struct CUstream_st *s;
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess && s->kind == SIM_STREAM_LEGACY)
        err = cudaErrorStreamCaptureUnsupported; /* the legacy stream cannot be captured */
    else if (err == cudaSuccess && s->capture)
        err = cudaErrorIllegalState;
    if (err == cudaSuccess) {
        struct sim_capture *c = calloc(1, sizeof *c);
        struct CUgraph_st *g = c ? sim_graph_new() : NULL;
        if (!g) {
            free(c);
            err = cudaErrorMemoryAllocation;
        } else {
            c->id = ++sim_g.next_capture_id;
            c->mode = mode;
            c->thread = pthread_self();
            c->origin = s;
            c->graph = g;
            c->next = sim_g.captures;
            sim_g.captures = c;
            s->capture = c;
        }
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return sim_begin_capture(stream, mode);
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    return sim_begin_capture(SIM_PTSZ(stream), mode);
}

static cudaError_t sim_end_capture(cudaStream_t h, cudaGraph_t *pGraph)
{
    struct CUstream_st *s;
    if (!pGraph)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess) {
        struct sim_capture *c = s->capture;
        if (!c) {
            err = cudaErrorIllegalState;
        } else if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self())) {
            err = cudaErrorStreamCaptureWrongThread;
        } else if (c->origin != s) {
            c->invalidated = true; /* ending from a joined stream breaks it */
            err = cudaErrorStreamCaptureUnmatched;
        } else {
            bool invalid = c->invalidated;
            struct CUgraph_st *g = c->graph;
            sim_capture_end(c);
            if (invalid) {
                sim_graph_free(g);
                *pGraph = NULL;
                err = cudaErrorStreamCaptureInvalidated;
            } else {
                *pGraph = g;
            }
        }
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return sim_end_capture(stream, pGraph);
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return sim_end_capture(SIM_PTSZ(stream), pGraph);
}

static cudaError_t sim_capture_info(cudaStream_t h, enum cudaStreamCaptureStatus *status,
                                    unsigned long long *id, cudaGraph_t *graph,
                                    const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                    size_t *ndeps)
{
    struct CUstream_st *s;
    if (!status)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess) {
        struct sim_capture *c = s->capture;
        *status = !c ? cudaStreamCaptureStatusNone
                     : c->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
        /* The dummy graph has no nodes, hence no dependencies. */
        if (id)
            *id = c ? c->id : 0;
        if (graph)
            *graph = c ? c->graph : NULL;
        if (deps)
            *deps = NULL;
        if (edges)
            *edges = NULL;
        if (ndeps)
            *ndeps = 0;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return sim_capture_info(stream, pCaptureStatus, NULL, NULL, NULL, NULL, NULL);
}

cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return sim_capture_info(SIM_PTSZ(stream), pCaptureStatus, NULL, NULL, NULL, NULL, NULL);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return sim_capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                            edgeData_out, numDependencies_out);
}

cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                          unsigned long long *id_out, cudaGraph_t *graph_out,
                                          const cudaGraphNode_t **dependencies_out,
                                          const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return sim_capture_info(SIM_PTSZ(stream), captureStatus_out, id_out, graph_out, dependencies_out,
                            edgeData_out, numDependencies_out);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    cudaError_t err = cudaErrorInvalidValue;
    if (!graph)
        return sim_ret(err);
    sim_lock();
    for (struct CUgraph_st *g = sim_g.graphs; g; g = g->next) {
        if (g == graph) {
            bool in_capture = false;
            for (struct sim_capture *c = sim_g.captures; c; c = c->next)
                in_capture |= c->graph == g;
            if (!in_capture) { /* still owned by an ongoing capture otherwise */
                sim_graph_free(g);
                err = cudaSuccess;
            }
            break;
        }
    }
    sim_unlock();
    return sim_ret(err);
}
