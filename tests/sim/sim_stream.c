/*
 * sim_stream.c - streams of the simulated CUDA runtime (tests/sim, see
 * README.md): stream objects and the stream API (create, destroy,
 * synchronize, query, flags / priority / device, host functions).  Their
 * operations and worker threads are in sim_worker.c, stream capture in
 * sim_capture.c, events in sim_event.c.
 *
 * Every stream (user streams, one legacy default stream per device, one
 * per-thread default stream per (thread, device)) owns a FIFO of
 * operations and a detached worker thread, started on the first enqueue,
 * that runs them in order.  So work really completes *after* the call that
 * enqueued it, and a test (or the profiler under test) that forgets to
 * synchronise sees it.  Streams are independent: the legacy stream does
 * NOT implicitly synchronise with other streams, which is strictly less
 * synchronisation than real CUDA and therefore exposes more unsafe reuse.
 * The exceptions, as in CUDA: an event recorded on the legacy stream waits
 * for the device's blocking streams (sim_legacy_deps), and work queued on a
 * blocking stream waits for the legacy stream's work queued before it
 * (sim_after_legacy).
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
void sim_stream_maybe_free(struct CUstream_st *s)
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
/* Stream API                                                          */
/* ------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    if (!pStream)
        return sim_ret(cudaErrorInvalidValue);
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return sim_ret(cudaErrorInvalidValue);
    sim_drv_stream_twin(flags); /* the driver underneath, if on */
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
    sim_drv_stream_twin(flags); /* the driver underneath, if on */
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
