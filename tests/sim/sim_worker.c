/*
 * sim_worker.c - stream operations of the simulated CUDA runtime
 * (tests/sim, see README.md): what runs them, in order, on each stream's
 * worker thread; the legacy stream's implicit synchronisation (an event
 * recorded on it, and blocking streams' work after its own); the
 * execution-time check of the memory an operation
 * touches; waiting for a stream or a device; and enqueueing.
 *
 * A worker runs the operations of its stream with the global lock held,
 * and drops it only while it sleeps (an operation's delay) or calls a
 * user's host function; every completed operation broadcasts
 * sim_g.progress, which is what every wait waits on (see sim_stream.c for
 * the model).
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ------------------------------------------------------------------ */
/* Operations and the worker threads                                   */
/* ------------------------------------------------------------------ */

/* The legacy stream's implicit synchronization, one way: an event recorded on the
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
    case SIM_OP_AFTER_LEGACY:
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
    case SIM_OP_AFTER_LEGACY:
        for (size_t i = 0; i < op->u.event.ndeps; i++)
            while (op->u.event.deps[i]->completed < op->u.event.seq[i])
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

/* Append op to s's queue (lock held). */
static void sim_push(struct CUstream_st *s, struct sim_op *op)
{
    op->seq = ++s->enqueued;
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
}

/* The other half of the legacy stream's implicit synchronization: work
 * queued on a blocking stream (a user stream without
 * cudaStreamNonBlocking, a per-thread default stream) runs after the
 * legacy stream's work queued before it, as in CUDA - an op of its own
 * ahead of it, waiting for the legacy stream. Without it an event
 * recorded on the legacy stream between two blocking streams' work (the
 * pool's ordered reuse) would order nothing here. Lock held; false: no
 * memory. */
static bool sim_after_legacy(struct CUstream_st *s)
{
    struct CUstream_st *legacy = sim_g.dev[s->device].legacy;
    if (s->kind == SIM_STREAM_LEGACY || legacy == NULL || legacy->completed >= legacy->enqueued ||
        (s->kind == SIM_STREAM_USER && (s->flags & cudaStreamNonBlocking)) ||
        s->capture != NULL) /* a captured node waits for nothing outside its graph */
        return true;
    struct sim_op *w = sim_op_new(SIM_OP_AFTER_LEGACY);
    if (w == NULL)
        return false;
    w->u.event.deps = malloc(sizeof *w->u.event.deps);
    w->u.event.seq = malloc(sizeof *w->u.event.seq);
    if (!w->u.event.deps || !w->u.event.seq) {
        free(w->u.event.deps);
        free(w->u.event.seq);
        free(w);
        return false;
    }
    legacy->refs++;
    w->u.event.deps[0] = legacy;
    w->u.event.seq[0] = legacy->enqueued;
    w->u.event.ndeps = 1;
    sim_push(s, w);
    return true;
}

cudaError_t sim_enqueue(struct CUstream_st *s, struct sim_op *op)
{
    if ((!s->has_worker && !sim_start_worker(s)) || !sim_after_legacy(s)) {
        sim_op_free(op);
        return cudaErrorMemoryAllocation;
    }
    sim_push(s, op);
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
cudaError_t sim_submit(cudaStream_t h, struct sim_op *op)
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
