/*
 * sim_capture.c - stream capture of the simulated CUDA runtime (tests/sim,
 * see README.md): capture sequences (which streams joined one, how it
 * ends, the calls a capture forbids) and the capture API,
 * cudaStreamBeginCapture / EndCapture / IsCapturing / GetCaptureInfo (with
 * their _ptsz twins) and cudaGraphDestroy.
 *
 * A capture tracks its state so that the calls CUDA forbids while a
 * stream captures fail as in CUDA; the graph it ends with has no nodes.
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* No prototypes in the headers without per-thread default streams: see
 * sim_stream.c. */
__typeof__(cudaStreamIsCapturing) cudaStreamIsCapturing_ptsz;
__typeof__(cudaStreamGetCaptureInfo) cudaStreamGetCaptureInfo_ptsz;

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
void sim_capture_end(struct sim_capture *c)
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
