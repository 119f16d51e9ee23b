/*
 * sim_event.c - events of the simulated CUDA runtime (tests/sim, see
 * README.md): cudaEvent* and cudaStreamWaitEvent.
 *
 * An event is recorded by enqueueing a marker operation; each record bumps
 * the event's generation and the marker, when its stream reaches it,
 * publishes that generation as done together with a host timestamp
 * (CLOCK_MONOTONIC, used by cudaEventElapsedTime).  Queries compare the
 * done generation with the latest recorded one, so re-recording an event
 * behaves as in CUDA: only the most recent record counts.  A stream waits
 * for an event by enqueueing a wait operation for the generation current
 * at the time of the call.  Pending operations hold references, so an
 * event destroyed with work in flight stays valid until that work is done.
 */
#include "sim_internal.h"

#include <stdlib.h>

__typeof__(cudaStreamWaitEvent) cudaStreamWaitEvent_ptsz;
__typeof__(cudaEventRecord) cudaEventRecord_ptsz;
__typeof__(cudaEventRecordWithFlags) cudaEventRecordWithFlags_ptsz;

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

static bool sim_event_is_live(const struct CUevent_st *h)
{
    for (const struct CUevent_st *ev = sim_g.events; ev; ev = ev->next)
        if (ev == h)
            return true; /* destroyed events are unlinked at once */
    return false;
}

void sim_event_unref(struct CUevent_st *ev)
{
    if (--ev->refs == 0) {
        ev->magic = 0;
        free(ev);
    }
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    const unsigned valid = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~valid))
        return sim_ret(cudaErrorInvalidValue);
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return sim_ret(cudaErrorMemoryAllocation);
    ev->magic = SIM_MAGIC_EVENT;
    ev->device = sim_current_device();
    ev->flags = flags;
    ev->refs = 1;
    sim_lock();
    ev->next = sim_g.events;
    sim_g.events = ev;
    sim_unlock();
    *event = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    if (!event)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev)
        return sim_ret(cudaErrorMemoryAllocation);
    ev->magic = SIM_MAGIC_EVENT;
    ev->device = sim_current_device();
    ev->refs = 1;
    sim_lock();
    ev->next = sim_g.events;
    sim_g.events = ev;
    sim_unlock();
    *event = ev;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    err = cudaErrorInvalidResourceHandle;
    sim_lock();
    for (struct CUevent_st **pp = &sim_g.events; *pp; pp = &(*pp)->next) {
        if (*pp == event) {
            *pp = event->next;
            event->destroyed = true;
            sim_event_unref(event); /* pending markers / waits keep it alive */
            err = cudaSuccess;
            break;
        }
    }
    sim_unlock();
    return sim_ret(err);
}

static cudaError_t sim_event_record(cudaEvent_t event, cudaStream_t h, unsigned flags)
{
    struct CUstream_st *s;
    if (flags & ~(unsigned)cudaEventRecordExternal)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_RECORD);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess && !sim_event_is_live(event))
        err = cudaErrorInvalidResourceHandle;
    if (err == cudaSuccess && event->device != s->device)
        err = cudaErrorInvalidResourceHandle; /* event and stream on different devices */
    if (err == cudaSuccess && s->kind == SIM_STREAM_LEGACY && !sim_legacy_deps(op, s))
        err = cudaErrorMemoryAllocation;
    if (err == cudaSuccess) {
        unsigned long long gen = event->record_gen + 1;
        event->refs++;
        op->u.event.ev = event;
        op->u.event.gen = gen;
        err = sim_enqueue(s, op); /* on failure it dropped the reference */
        if (err == cudaSuccess) { /* a record that never runs is no record */
            event->record_gen = gen;
            event->capture_id = s->capture ? s->capture->id : 0;
        }
    } else {
        free(op);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return sim_event_record(event, stream, 0);
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return sim_event_record(event, SIM_PTSZ(stream), 0);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    return sim_event_record(event, stream, flags);
}

cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    return sim_event_record(event, SIM_PTSZ(stream), flags);
}

/* Shared checks of cudaEventQuery / cudaEventSynchronize (lock held). */
static cudaError_t sim_event_check_sync(cudaEvent_t event)
{
    if (!sim_event_is_live(event))
        return cudaErrorInvalidResourceHandle;
    if (event->capture_id)
        return cudaErrorCapturedEvent; /* last recorded inside a capture */
    return sim_capture_check_unsafe();
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_event_check_sync(event);
    if (err == cudaSuccess && event->done_gen < event->record_gen)
        err = cudaErrorNotReady;
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_event_check_sync(event);
    if (err == cudaSuccess) {
        unsigned long long target = event->record_gen; /* never recorded: 0, done */
        event->refs++;
        while (event->done_gen < target)
            pthread_cond_wait(&sim_g.progress, &sim_g.lock);
        sim_event_unref(event);
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    if (!sim_event_is_live(start) || !sim_event_is_live(end))
        err = cudaErrorInvalidResourceHandle;
    else if (start->capture_id || end->capture_id)
        err = cudaErrorCapturedEvent;
    else if ((start->flags | end->flags) & cudaEventDisableTiming)
        err = cudaErrorInvalidResourceHandle;
    else if (start->record_gen == 0 || end->record_gen == 0)
        err = cudaErrorInvalidResourceHandle; /* never recorded */
    else if (start->done_gen < start->record_gen || end->done_gen < end->record_gen)
        err = cudaErrorNotReady;
    else
        *ms = (float)((double)(end->t_done.tv_sec - start->t_done.tv_sec) * 1e3 +
                      (double)(end->t_done.tv_nsec - start->t_done.tv_nsec) / 1e6);
    sim_unlock();
    return sim_ret(err);
}

static cudaError_t sim_stream_wait_event(cudaStream_t h, cudaEvent_t event, unsigned flags)
{
    struct CUstream_st *s;
    if (flags & ~(unsigned)cudaEventWaitExternal)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_WAIT);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess && !sim_event_is_live(event))
        err = cudaErrorInvalidResourceHandle;
    if (err == cudaSuccess && event->capture_id && !s->capture) {
        /* Waiting on an event recorded in an ongoing capture makes this
         * stream join that capture (the fork pattern of multi-stream
         * capture). */
        struct sim_capture *c = sim_capture_find(event->capture_id);
        if (c)
            s->capture = c;
    }
    if (err == cudaSuccess && event->record_gen > 0) {
        event->refs++;
        op->u.event.ev = event;
        op->u.event.gen = event->record_gen;
        err = sim_enqueue(s, op);
    } else {
        free(op); /* error, or never recorded: nothing to wait for */
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    return sim_stream_wait_event(stream, event, flags);
}

cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    return sim_stream_wait_event(SIM_PTSZ(stream), event, flags);
}
