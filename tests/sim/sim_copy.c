/*
 * sim_copy.c - cudaMemcpy* / cudaMemset* and the simulated kernels of the
 * simulated CUDA runtime (tests/sim, see README.md), including every
 * _ptds / _ptsz variant the real libcudart.so.13 exports.
 *
 * Every copy or set is turned into one stream operation over pitched 3D
 * byte regions (1D and 2D are the degenerate cases), validated at issue
 * time against the allocation registry:
 *   - a side the copy kind says is device memory must lie entirely inside
 *     one tracked allocation (else cudaErrorInvalidValue);
 *   - with cudaMemcpyDefault a tracked side is device-ish, an untracked one
 *     is pageable host memory;
 *   - CUDA arrays and __device__ symbols are their own kinds of region
 *     (a symbol is simply the host address symbol + offset).
 * Async calls enqueue and return.  Synchronous calls enqueue on the legacy
 * stream (the per-thread stream for _ptds) and wait for that operation.
 * As in the real runtime, an async copy whose host side is pageable
 * (untracked) memory does not return before the copy is done: the caller
 * may reuse or free() that buffer as soon as the call returns.
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <stdlib.h>
#include <string.h>

/* Stream used by the synchronous functions and their _ptds twins. */
#define SIM_SYNC_LEGACY ((cudaStream_t)NULL)
#define SIM_SYNC_PTDS cudaStreamPerThread

/* ------------------------------------------------------------------ */
/* Region validation (lock held)                                       */
/* ------------------------------------------------------------------ */

enum sim_need { SIM_NEED_ANY, SIM_NEED_HOST, SIM_NEED_DEVICE };

static cudaError_t sim_kind_needs(enum cudaMemcpyKind kind, enum sim_need *dst, enum sim_need *src)
{
    switch (kind) {
    case cudaMemcpyHostToHost: *dst = SIM_NEED_HOST; *src = SIM_NEED_HOST; return cudaSuccess;
    case cudaMemcpyHostToDevice: *dst = SIM_NEED_DEVICE; *src = SIM_NEED_HOST; return cudaSuccess;
    case cudaMemcpyDeviceToHost: *dst = SIM_NEED_HOST; *src = SIM_NEED_DEVICE; return cudaSuccess;
    case cudaMemcpyDeviceToDevice: *dst = SIM_NEED_DEVICE; *src = SIM_NEED_DEVICE; return cudaSuccess;
    case cudaMemcpyDefault: *dst = SIM_NEED_ANY; *src = SIM_NEED_ANY; return cudaSuccess;
    default: return cudaErrorInvalidMemcpyDirection;
    }
}

/* Bytes from the first to one past the last byte of a w x h x d box. */
static bool sim_box_span(size_t pitch, size_t slice, size_t w, size_t h, size_t d, size_t *span)
{
    size_t a, b, c;
    if (__builtin_mul_overflow(d - 1, slice, &a) || __builtin_mul_overflow(h - 1, pitch, &b) ||
        __builtin_add_overflow(a, b, &c) || __builtin_add_overflow(c, w, span))
        return false;
    return true;
}

/* A region of linear memory (w, h, d > 0). */
static cudaError_t sim_region_ptr(const void *ptr, size_t pitch, size_t slice, size_t w, size_t h,
                                  size_t d, enum sim_need need, struct sim_region *r)
{
    if (!ptr)
        return cudaErrorInvalidValue;
    memset(r, 0, sizeof *r);
    if (!sim_box_span(pitch, slice, w, h, d, &r->span))
        return cudaErrorInvalidValue;
    r->ptr = (char *)ptr;
    r->pitch = pitch;
    r->slice = slice;
    struct sim_alloc *a = sim_reg_find(ptr);
    if (a) {
        /* Memory with a free in flight (cudaFreeAsync) is accepted, as by the
         * real API: the operation then runs after the free and is reported
         * as a stale access instead. */
        if (a->type == SIM_MEM_ARRAY)
            return cudaErrorInvalidValue; /* not a pointer the user may hold */
        if (r->span > a->size - ((uintptr_t)ptr - a->base))
            return cudaErrorInvalidValue; /* runs past the end of the allocation */
        r->kind = SIM_REGION_DEVICE;
        r->alloc_id = a->id;
    } else {
        if (need == SIM_NEED_DEVICE)
            return cudaErrorInvalidValue; /* not device memory */
        r->kind = SIM_REGION_HOST;
    }
    return cudaSuccess;
}

/* A w_bytes x h x d box of a CUDA array at byte column x, row y, slice z. */
static cudaError_t sim_region_array(const struct cudaArray *arr, size_t x, size_t y, size_t z,
                                    size_t w, size_t h, size_t d, struct sim_region *r)
{
    if (!arr || !sim_array_is_live(arr))
        return cudaErrorInvalidValue;
    size_t row = arr->width * arr->elem;
    if (x > row || w > row - x || y > arr->height || h > arr->height - y || z > arr->depth ||
        d > arr->depth - z)
        return cudaErrorInvalidValue;
    memset(r, 0, sizeof *r);
    r->pitch = row;
    r->slice = row * arr->height;
    r->ptr = arr->data + z * r->slice + y * row + x;
    r->kind = SIM_REGION_DEVICE;
    r->alloc_id = arr->alloc->id;
    if (!sim_box_span(r->pitch, r->slice, w, h, d, &r->span))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* count bytes of a CUDA array, stored row after row, from row y column x. */
static cudaError_t sim_region_array_linear(const struct cudaArray *arr, size_t x, size_t y, size_t count,
                                           struct sim_region *r)
{
    if (!arr || !sim_array_is_live(arr))
        return cudaErrorInvalidValue;
    size_t row = arr->width * arr->elem, total = row * arr->height * arr->depth;
    if (x >= row || y >= arr->height * arr->depth)
        return cudaErrorInvalidValue;
    size_t off = y * row + x;
    if (count > total - off)
        return cudaErrorInvalidValue;
    memset(r, 0, sizeof *r);
    r->ptr = arr->data + off;
    r->pitch = r->slice = r->span = count;
    r->kind = SIM_REGION_DEVICE;
    r->alloc_id = arr->alloc->id;
    return cudaSuccess;
}

/* A __device__ symbol: in the simulator the symbol's host address is the
 * device memory (static storage, so no lifetime checks), unless the test
 * passed tracked memory, which is then checked like any device pointer. */
static cudaError_t sim_region_symbol(const void *symbol, size_t offset, size_t count, struct sim_region *r)
{
    if (!symbol)
        return cudaErrorInvalidSymbol;
    const char *p = (const char *)symbol + offset;
    if (sim_reg_find(p))
        return sim_region_ptr(p, count, count, count, 1, 1, SIM_NEED_DEVICE, r);
    memset(r, 0, sizeof *r);
    r->ptr = (char *)p;
    r->pitch = r->slice = r->span = count;
    r->kind = SIM_REGION_STATIC;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* Issuing operations                                                  */
/* ------------------------------------------------------------------ */

static struct sim_op *sim_copy_op(void)
{
    struct sim_op *op = sim_op_new(SIM_OP_COPY);
    if (op) {
        op->u.copy.n = 1;
        op->u.copy.v = &op->u.copy.one;
        op->u.copy.one.height = op->u.copy.one.depth = 1;
    }
    return op;
}

static bool sim_op_touches_pageable(const struct sim_op *op)
{
    if (op->kind != SIM_OP_COPY)
        return false;
    for (size_t i = 0; i < op->u.copy.n; i++)
        if (op->u.copy.v[i].dst.kind == SIM_REGION_HOST || op->u.copy.v[i].src.kind == SIM_REGION_HOST)
            return true;
    return false;
}

/*
 * Enqueues a validated op on stream h (lock held; consumes op).
 * sync_api: a synchronous API (capture rules apply, waits for the op).
 * force_wait: wait for completion without being a synchronising API.
 */
static cudaError_t sim_issue(cudaStream_t h, struct sim_op *op, bool sync_api, bool force_wait)
{
    struct CUstream_st *s;
    cudaError_t err = sim_stream_resolve(h, &s);
    if (err == cudaSuccess && sync_api)
        err = sim_capture_check_sync_stream(s);
    if (err != cudaSuccess) {
        sim_op_free(op);
        return err;
    }
    bool wait = sync_api || force_wait || sim_op_touches_pageable(op);
    err = sim_enqueue(s, op);
    if (err == cudaSuccess && wait)
        sim_wait_seq(s, s->enqueued);
    return err;
}

/* Common tail: issue if validation succeeded, else drop the op. */
static cudaError_t sim_finish(cudaError_t err, cudaStream_t h, struct sim_op *op, bool sync_api)
{
    if (err == cudaSuccess)
        err = sim_issue(h, op, sync_api, false);
    else
        sim_op_free(op);
    sim_unlock();
    return sim_ret(err);
}

/* ------------------------------------------------------------------ */
/* Linear copies                                                       */
/* ------------------------------------------------------------------ */

static cudaError_t sim_memcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                              cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    if (err == cudaSuccess)
        err = sim_enter();
    if (err != cudaSuccess || count == 0)
        return sim_ret(err);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = count;
    sim_lock();
    err = sim_region_ptr(dst, count, count, count, 1, 1, nd, &c->dst);
    if (err == cudaSuccess)
        err = sim_region_ptr(src, count, count, count, 1, 1, ns, &c->src);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return sim_memcpy(dst, src, count, kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return sim_memcpy(dst, src, count, kind, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return sim_memcpy(dst, src, count, kind, stream, false);
}

cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream)
{
    return sim_memcpy(dst, src, count, kind, SIM_PTSZ(stream), false);
}

static cudaError_t sim_memcpy_peer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                   cudaStream_t h, bool sync)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(dstDevice) || !sim_valid_device(srcDevice))
        return sim_ret(cudaErrorInvalidDevice);
    if (count == 0)
        return cudaSuccess;
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = count;
    sim_lock();
    err = sim_region_ptr(dst, count, count, count, 1, 1, SIM_NEED_DEVICE, &c->dst);
    if (err == cudaSuccess)
        err = sim_region_ptr(src, count, count, count, 1, 1, SIM_NEED_DEVICE, &c->src);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
    return sim_memcpy_peer(dst, dstDevice, src, srcDevice, count, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                cudaStream_t stream)
{
    return sim_memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, false);
}

static cudaError_t sim_memcpy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                 size_t height, enum cudaMemcpyKind kind, cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    if (err == cudaSuccess)
        err = sim_enter();
    if (err != cudaSuccess || width == 0 || height == 0)
        return sim_ret(err);
    if (width > dpitch || width > spitch)
        return sim_ret(cudaErrorInvalidPitchValue);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = width;
    c->height = height;
    sim_lock();
    err = sim_region_ptr(dst, dpitch, 0, width, height, 1, nd, &c->dst);
    if (err == cudaSuccess)
        err = sim_region_ptr(src, spitch, 0, width, height, 1, ns, &c->src);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind)
{
    return sim_memcpy_2d(dst, dpitch, src, spitch, width, height, kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind)
{
    return sim_memcpy_2d(dst, dpitch, src, spitch, width, height, kind, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false);
}

cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_2d(dst, dpitch, src, spitch, width, height, kind, SIM_PTSZ(stream), false);
}

/* ------------------------------------------------------------------ */
/* 3D copies                                                           */
/* ------------------------------------------------------------------ */

/* One side of a 3D copy: a CUDA array or a pitched pointer. */
struct sim_side3d {
    const struct cudaArray *arr;
    struct cudaPos pos;          /* elements for arrays, bytes for pointers */
    struct cudaPitchedPtr pp;
};

static cudaError_t sim_side3d_region(const struct sim_side3d *s, size_t elem, size_t wbytes,
                                     const struct cudaExtent *e, enum sim_need need, struct sim_region *r)
{
    if (s->arr) {
        size_t x;
        if (__builtin_mul_overflow(s->pos.x, elem, &x))
            return cudaErrorInvalidValue;
        return sim_region_array(s->arr, x, s->pos.y, s->pos.z, wbytes, e->height, e->depth, r);
    }
    size_t pitch = s->pp.pitch, slice, off, t;
    if (pitch == 0 && e->height == 1 && e->depth == 1)
        pitch = wbytes; /* a single row needs no pitch */
    if (wbytes > pitch)
        return cudaErrorInvalidPitchValue;
    if (e->depth > 1 && s->pp.ysize == 0)
        return cudaErrorInvalidValue; /* slices need the height of the allocation */
    if (__builtin_mul_overflow(pitch, s->pp.ysize, &slice) ||
        __builtin_mul_overflow(s->pos.z, slice, &off) || __builtin_mul_overflow(s->pos.y, pitch, &t) ||
        __builtin_add_overflow(off, t, &off) || __builtin_add_overflow(off, s->pos.x, &off))
        return cudaErrorInvalidValue;
    if (!s->pp.ptr)
        return cudaErrorInvalidValue;
    return sim_region_ptr((const char *)s->pp.ptr + off, pitch, slice, wbytes, e->height, e->depth, need, r);
}

/* Builds c from two sides (lock held).  *empty: nothing to copy. */
static cudaError_t sim_build_3d(const struct sim_side3d *dst, const struct sim_side3d *src,
                                struct cudaExtent e, enum sim_need nd, enum sim_need ns,
                                struct sim_copy *c, bool *empty)
{
    size_t elem = 1, wbytes;

    *empty = false;
    if ((dst->arr && dst->pp.ptr) || (src->arr && src->pp.ptr) ||
        (!dst->arr && !dst->pp.ptr) || (!src->arr && !src->pp.ptr))
        return cudaErrorInvalidValue; /* exactly one of array / pointer per side */
    if ((dst->arr && !sim_array_is_live(dst->arr)) || (src->arr && !sim_array_is_live(src->arr)))
        return cudaErrorInvalidValue;
    /* With an array involved the extent counts array elements. */
    if (dst->arr)
        elem = dst->arr->elem;
    if (src->arr) {
        if (dst->arr && src->arr->elem != elem)
            return cudaErrorInvalidValue;
        elem = src->arr->elem;
    }
    if (e.width == 0 || e.height == 0 || e.depth == 0) {
        *empty = true;
        return cudaSuccess;
    }
    if (__builtin_mul_overflow(e.width, elem, &wbytes))
        return cudaErrorInvalidValue;
    cudaError_t err = sim_side3d_region(dst, elem, wbytes, &e, nd, &c->dst);
    if (err == cudaSuccess)
        err = sim_side3d_region(src, elem, wbytes, &e, ns, &c->src);
    c->width = wbytes;
    c->height = e.height;
    c->depth = e.depth;
    return err;
}

static cudaError_t sim_memcpy_3d_common(const struct sim_side3d *dst, const struct sim_side3d *src,
                                        struct cudaExtent extent, enum sim_need nd, enum sim_need ns,
                                        cudaStream_t h, bool sync)
{
    bool empty;
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    cudaError_t err = sim_build_3d(dst, src, extent, nd, ns, &op->u.copy.one, &empty);
    if (err == cudaSuccess && empty) {
        sim_op_free(op);
        sim_unlock();
        return cudaSuccess;
    }
    return sim_finish(err, h, op, sync);
}

static cudaError_t sim_memcpy_3d(const struct cudaMemcpy3DParms *p, cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    if (!p)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_kind_needs(p->kind, &nd, &ns);
    if (err == cudaSuccess)
        err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_side3d dst = { p->dstArray, p->dstPos, p->dstPtr };
    struct sim_side3d src = { p->srcArray, p->srcPos, p->srcPtr };
    return sim_memcpy_3d_common(&dst, &src, p->extent, nd, ns, h, sync);
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
    return sim_memcpy_3d(p, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p)
{
    return sim_memcpy_3d(p, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return sim_memcpy_3d(p, stream, false);
}

cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return sim_memcpy_3d(p, SIM_PTSZ(stream), false);
}

static cudaError_t sim_memcpy_3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t h, bool sync)
{
    if (!p)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(p->dstDevice) || !sim_valid_device(p->srcDevice))
        return sim_ret(cudaErrorInvalidDevice);
    struct sim_side3d dst = { p->dstArray, p->dstPos, p->dstPtr };
    struct sim_side3d src = { p->srcArray, p->srcPos, p->srcPtr };
    return sim_memcpy_3d_common(&dst, &src, p->extent, SIM_NEED_DEVICE, SIM_NEED_DEVICE, h, sync);
}

cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p)
{
    return sim_memcpy_3d_peer(p, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p)
{
    return sim_memcpy_3d_peer(p, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream)
{
    return sim_memcpy_3d_peer(p, stream, false);
}

cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream)
{
    return sim_memcpy_3d_peer(p, SIM_PTSZ(stream), false);
}

/* ------------------------------------------------------------------ */
/* Batched copies (CUDA 12.8+)                                         */
/* ------------------------------------------------------------------ */

static cudaError_t sim_check_access_order(enum cudaMemcpySrcAccessOrder order, bool *force_wait)
{
    switch (order) {
    case cudaMemcpySrcAccessOrderStream:
    case cudaMemcpySrcAccessOrderAny:
        return cudaSuccess;
    case cudaMemcpySrcAccessOrderDuringApiCall:
        /* The caller may reuse the sources once the call returns. */
        *force_wait = true;
        return cudaSuccess;
    default:
        return cudaErrorInvalidValue;
    }
}

static cudaError_t sim_memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                    size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                    size_t numAttrs, cudaStream_t h)
{
    bool force_wait = false;
    size_t n = 0;

    if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attrsIdxs || numAttrs == 0 ||
        numAttrs > count || attrsIdxs[0] != 0)
        return sim_ret(cudaErrorInvalidValue);
    if (h == NULL || h == cudaStreamLegacy)
        return sim_ret(cudaErrorInvalidValue); /* not allowed on the legacy stream */
    for (size_t i = 0; i < numAttrs; i++) {
        if (sim_check_access_order(attrs[i].srcAccessOrder, &force_wait) != cudaSuccess)
            return sim_ret(cudaErrorInvalidValue);
        if (i > 0 && attrsIdxs[i] <= attrsIdxs[i - 1])
            return sim_ret(cudaErrorInvalidValue);
    }
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_COPY);
    struct sim_copy *v = calloc(count, sizeof *v);
    if (!op || !v) {
        free(op);
        free(v);
        return sim_ret(cudaErrorMemoryAllocation);
    }
    op->u.copy.v = v;
    sim_lock();
    for (size_t i = 0; i < count && err == cudaSuccess; i++) {
        if (sizes[i] == 0)
            continue;
        struct sim_copy *c = &v[n++];
        c->width = sizes[i];
        c->height = c->depth = 1;
        /* Directions are always inferred for batches. */
        err = sim_region_ptr(dsts[i], sizes[i], sizes[i], sizes[i], 1, 1, SIM_NEED_ANY, &c->dst);
        if (err == cudaSuccess)
            err = sim_region_ptr(srcs[i], sizes[i], sizes[i], sizes[i], 1, 1, SIM_NEED_ANY, &c->src);
    }
    op->u.copy.n = n;
    if (err == cudaSuccess)
        err = sim_issue(h, op, false, force_wait);
    else
        sim_op_free(op);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                                 struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream)
{
    return sim_memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream);
}

cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                      size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream)
{
    return sim_memcpy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, SIM_PTSZ(stream));
}

/* One operand of a 3D batch op as a sim_side3d (lock held).  Pointer
 * operands give row length / layer height in elements (0: the extent). */
static cudaError_t sim_operand_side(const struct cudaMemcpy3DOperand *o, size_t elem, const struct cudaExtent *e,
                                    struct sim_side3d *s)
{
    memset(s, 0, sizeof *s);
    switch (o->type) {
    case cudaMemcpyOperandTypePointer: {
        size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width;
        size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
        if (!o->op.ptr.ptr || row < e->width || layer < e->height ||
            __builtin_mul_overflow(row, elem, &s->pp.pitch))
            return cudaErrorInvalidValue;
        s->pp.ptr = o->op.ptr.ptr;
        s->pp.xsize = row;
        s->pp.ysize = layer;
        return cudaSuccess;
    }
    case cudaMemcpyOperandTypeArray:
        if (!o->op.array.array)
            return cudaErrorInvalidValue;
        s->arr = o->op.array.array;
        s->pos.x = o->op.array.offset.x;
        s->pos.y = o->op.array.offset.y;
        s->pos.z = o->op.array.offset.z;
        return cudaSuccess;
    default:
        return cudaErrorInvalidValue;
    }
}

static size_t sim_operand_elem(const struct cudaMemcpy3DOperand *o)
{
    if (o->type == cudaMemcpyOperandTypeArray && sim_array_is_live(o->op.array.array))
        return o->op.array.array->elem;
    return 0;
}

static cudaError_t sim_memcpy_3d_batch(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                       unsigned long long flags, cudaStream_t h)
{
    bool force_wait = false, empty;

    if (numOps == 0 || !opList || flags != 0)
        return sim_ret(cudaErrorInvalidValue);
    if (h == NULL || h == cudaStreamLegacy)
        return sim_ret(cudaErrorInvalidValue); /* not allowed on the legacy stream */
    for (size_t i = 0; i < numOps; i++) {
        const struct cudaExtent *e = &opList[i].extent;
        if (e->width == 0 || e->height == 0 || e->depth == 0 ||
            sim_check_access_order(opList[i].srcAccessOrder, &force_wait) != cudaSuccess)
            return sim_ret(cudaErrorInvalidValue);
    }
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_COPY);
    struct sim_copy *v = calloc(numOps, sizeof *v);
    if (!op || !v) {
        free(op);
        free(v);
        return sim_ret(cudaErrorMemoryAllocation);
    }
    op->u.copy.v = v;
    op->u.copy.n = numOps;
    sim_lock();
    for (size_t i = 0; i < numOps && err == cudaSuccess; i++) {
        struct sim_side3d dst, src;
        size_t elem = sim_operand_elem(&opList[i].dst);
        if (!elem)
            elem = sim_operand_elem(&opList[i].src);
        if (!elem)
            elem = 1;
        err = sim_operand_side(&opList[i].dst, elem, &opList[i].extent, &dst);
        if (err == cudaSuccess)
            err = sim_operand_side(&opList[i].src, elem, &opList[i].extent, &src);
        if (err == cudaSuccess)
            err = sim_build_3d(&dst, &src, opList[i].extent, SIM_NEED_ANY, SIM_NEED_ANY, &v[i], &empty);
    }
    if (err == cudaSuccess)
        err = sim_issue(h, op, false, force_wait);
    else
        sim_op_free(op);
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp *opList, unsigned long long flags,
                                   cudaStream_t stream)
{
    return sim_memcpy_3d_batch(numOps, opList, flags, stream);
}

cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                        unsigned long long flags, cudaStream_t stream)
{
    return sim_memcpy_3d_batch(numOps, opList, flags, SIM_PTSZ(stream));
}

/* ------------------------------------------------------------------ */
/* Symbols                                                             */
/* ------------------------------------------------------------------ */

static cudaError_t sim_memcpy_to_symbol(const void *symbol, const void *src, size_t count, size_t offset,
                                        enum cudaMemcpyKind kind, cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    if (err == cudaSuccess && nd == SIM_NEED_HOST)
        err = cudaErrorInvalidMemcpyDirection; /* the symbol is device memory */
    if (err == cudaSuccess)
        err = sim_enter();
    if (err == cudaSuccess && !symbol)
        err = cudaErrorInvalidSymbol;
    if (err != cudaSuccess || count == 0)
        return sim_ret(err);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = count;
    sim_lock();
    err = sim_region_symbol(symbol, offset, count, &c->dst);
    if (err == cudaSuccess)
        err = sim_region_ptr(src, count, count, count, 1, 1, ns, &c->src);
    return sim_finish(err, h, op, sync);
}

static cudaError_t sim_memcpy_from_symbol(void *dst, const void *symbol, size_t count, size_t offset,
                                          enum cudaMemcpyKind kind, cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    if (err == cudaSuccess && ns == SIM_NEED_HOST)
        err = cudaErrorInvalidMemcpyDirection;
    if (err == cudaSuccess)
        err = sim_enter();
    if (err == cudaSuccess && !symbol)
        err = cudaErrorInvalidSymbol;
    if (err != cudaSuccess || count == 0)
        return sim_ret(err);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = count;
    sim_lock();
    err = sim_region_symbol(symbol, offset, count, &c->src);
    if (err == cudaSuccess)
        err = sim_region_ptr(dst, count, count, count, 1, 1, nd, &c->dst);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind)
{
    return sim_memcpy_to_symbol(symbol, src, count, offset, kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind)
{
    return sim_memcpy_to_symbol(symbol, src, count, offset, kind, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_to_symbol(symbol, src, count, offset, kind, stream, false);
}

cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count, size_t offset,
                                         enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_to_symbol(symbol, src, count, offset, kind, SIM_PTSZ(stream), false);
}

cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind)
{
    return sim_memcpy_from_symbol(dst, symbol, count, offset, kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind)
{
    return sim_memcpy_from_symbol(dst, symbol, count, offset, kind, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_from_symbol(dst, symbol, count, offset, kind, stream, false);
}

cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return sim_memcpy_from_symbol(dst, symbol, count, offset, kind, SIM_PTSZ(stream), false);
}

/* ------------------------------------------------------------------ */
/* CUDA array copies (offsets and widths in bytes)                     */
/* ------------------------------------------------------------------ */

/* Linear (1D) copies into / out of / between arrays; NULL array = pointer. */
static cudaError_t sim_memcpy_array_linear(cudaArray_const_t dst_arr, size_t dx, size_t dy, void *dst,
                                           cudaArray_const_t src_arr, size_t sx, size_t sy, const void *src,
                                           size_t count, enum cudaMemcpyKind kind, cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    /* An array is device memory: the kind must agree. */
    if (err == cudaSuccess && ((dst_arr && nd == SIM_NEED_HOST) || (src_arr && ns == SIM_NEED_HOST)))
        err = cudaErrorInvalidMemcpyDirection;
    if (err == cudaSuccess)
        err = sim_enter();
    if (err != cudaSuccess || count == 0)
        return sim_ret(err);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = count;
    sim_lock();
    err = dst_arr ? sim_region_array_linear(dst_arr, dx, dy, count, &c->dst)
                  : sim_region_ptr(dst, count, count, count, 1, 1, nd, &c->dst);
    if (err == cudaSuccess)
        err = src_arr ? sim_region_array_linear(src_arr, sx, sy, count, &c->src)
                      : sim_region_ptr(src, count, count, count, 1, 1, ns, &c->src);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count,
                              enum cudaMemcpyKind kind)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffset, hOffset, NULL, NULL, 0, 0, src, count, kind,
                                   SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                   size_t count, enum cudaMemcpyKind kind)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffset, hOffset, NULL, NULL, 0, 0, src, count, kind,
                                   SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                   size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffset, hOffset, NULL, NULL, 0, 0, src, count, kind, stream, false);
}

cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                        size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffset, hOffset, NULL, NULL, 0, 0, src, count, kind,
                                   SIM_PTSZ(stream), false);
}

cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                enum cudaMemcpyKind kind)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(NULL, 0, 0, dst, src, wOffset, hOffset, NULL, count, kind,
                                   SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyFromArray_ptds(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                     size_t count, enum cudaMemcpyKind kind)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(NULL, 0, 0, dst, src, wOffset, hOffset, NULL, count, kind,
                                   SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                     size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(NULL, 0, 0, dst, src, wOffset, hOffset, NULL, count, kind, stream, false);
}

cudaError_t cudaMemcpyFromArrayAsync_ptsz(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                          size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(NULL, 0, 0, dst, src, wOffset, hOffset, NULL, count, kind,
                                   SIM_PTSZ(stream), false);
}

cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                   size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind)
{
    if (!dst || !src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffsetDst, hOffsetDst, NULL, src, wOffsetSrc, hOffsetSrc, NULL, count,
                                   kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                        cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                        size_t count, enum cudaMemcpyKind kind)
{
    if (!dst || !src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_linear(dst, wOffsetDst, hOffsetDst, NULL, src, wOffsetSrc, hOffsetSrc, NULL, count,
                                   kind, SIM_SYNC_PTDS, true);
}

/* 2D copies into / out of / between arrays; NULL array = pitched pointer. */
static cudaError_t sim_memcpy_array_2d(cudaArray_const_t dst_arr, size_t dx, size_t dy, void *dst, size_t dpitch,
                                       cudaArray_const_t src_arr, size_t sx, size_t sy, const void *src,
                                       size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
                                       cudaStream_t h, bool sync)
{
    enum sim_need nd, ns;
    cudaError_t err = sim_kind_needs(kind, &nd, &ns);
    if (err == cudaSuccess && ((dst_arr && nd == SIM_NEED_HOST) || (src_arr && ns == SIM_NEED_HOST)))
        err = cudaErrorInvalidMemcpyDirection;
    if (err == cudaSuccess)
        err = sim_enter();
    if (err != cudaSuccess || width == 0 || height == 0)
        return sim_ret(err);
    if ((!dst_arr && width > dpitch) || (!src_arr && width > spitch))
        return sim_ret(cudaErrorInvalidPitchValue);
    struct sim_op *op = sim_copy_op();
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    struct sim_copy *c = &op->u.copy.one;
    c->width = width;
    c->height = height;
    sim_lock();
    err = dst_arr ? sim_region_array(dst_arr, dx, dy, 0, width, height, 1, &c->dst)
                  : sim_region_ptr(dst, dpitch, 0, width, height, 1, nd, &c->dst);
    if (err == cudaSuccess)
        err = src_arr ? sim_region_array(src_arr, sx, sy, 0, width, height, 1, &c->src)
                      : sim_region_ptr(src, spitch, 0, width, height, 1, ns, &c->src);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch,
                                size_t width, size_t height, enum cudaMemcpyKind kind)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffset, hOffset, NULL, 0, NULL, 0, 0, src, spitch, width, height, kind,
                               SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                     size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffset, hOffset, NULL, 0, NULL, 0, 0, src, spitch, width, height, kind,
                               SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                     size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
                                     cudaStream_t stream)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffset, hOffset, NULL, 0, NULL, 0, 0, src, spitch, width, height, kind,
                               stream, false);
}

cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src,
                                          size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    if (!dst)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffset, hOffset, NULL, 0, NULL, 0, 0, src, spitch, width, height, kind,
                               SIM_PTSZ(stream), false);
}

cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                  size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(NULL, 0, 0, dst, dpitch, src, wOffset, hOffset, NULL, 0, width, height, kind,
                               SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                       size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(NULL, 0, 0, dst, dpitch, src, wOffset, hOffset, NULL, 0, width, height, kind,
                               SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                       size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind,
                                       cudaStream_t stream)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(NULL, 0, 0, dst, dpitch, src, wOffset, hOffset, NULL, 0, width, height, kind,
                               stream, false);
}

cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                            size_t hOffset, size_t width, size_t height,
                                            enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(NULL, 0, 0, dst, dpitch, src, wOffset, hOffset, NULL, 0, width, height, kind,
                               SIM_PTSZ(stream), false);
}

cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                     size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height,
                                     enum cudaMemcpyKind kind)
{
    if (!dst || !src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffsetDst, hOffsetDst, NULL, 0, src, wOffsetSrc, hOffsetSrc, NULL, 0, width,
                               height, kind, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                          cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                          size_t width, size_t height, enum cudaMemcpyKind kind)
{
    if (!dst || !src)
        return sim_ret(cudaErrorInvalidValue);
    return sim_memcpy_array_2d(dst, wOffsetDst, hOffsetDst, NULL, 0, src, wOffsetSrc, hOffsetSrc, NULL, 0, width,
                               height, kind, SIM_SYNC_PTDS, true);
}

/* ------------------------------------------------------------------ */
/* Memset                                                              */
/* ------------------------------------------------------------------ */

static cudaError_t sim_memset_3d(void *ptr, size_t pitch, size_t slice, int value, size_t width, size_t height,
                                 size_t depth, cudaStream_t h, bool sync)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess || width == 0 || height == 0 || depth == 0)
        return sim_ret(err);
    if (width > pitch)
        return sim_ret(cudaErrorInvalidPitchValue);
    struct sim_op *op = sim_op_new(SIM_OP_SET);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    op->u.set.value = (unsigned char)value;
    op->u.set.width = width;
    op->u.set.height = height;
    op->u.set.depth = depth;
    sim_lock();
    err = sim_region_ptr(ptr, pitch, slice, width, height, depth, SIM_NEED_DEVICE, &op->u.set.dst);
    return sim_finish(err, h, op, sync);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return sim_memset_3d(devPtr, count, count, value, count, 1, 1, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return sim_memset_3d(devPtr, count, count, value, count, 1, 1, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return sim_memset_3d(devPtr, count, count, value, count, 1, 1, stream, false);
}

cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return sim_memset_3d(devPtr, count, count, value, count, 1, 1, SIM_PTSZ(stream), false);
}

cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height)
{
    return sim_memset_3d(devPtr, pitch, 0, value, width, height, 1, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width, size_t height)
{
    return sim_memset_3d(devPtr, pitch, 0, value, width, height, 1, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream)
{
    return sim_memset_3d(devPtr, pitch, 0, value, width, height, 1, stream, false);
}

cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                                   cudaStream_t stream)
{
    return sim_memset_3d(devPtr, pitch, 0, value, width, height, 1, SIM_PTSZ(stream), false);
}

static cudaError_t sim_memset_pitched(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t h,
                                      bool sync)
{
    size_t slice;
    if (e.depth > 1 && p.ysize == 0)
        return sim_ret(cudaErrorInvalidValue);
    if (__builtin_mul_overflow(p.pitch, p.ysize, &slice))
        return sim_ret(cudaErrorInvalidValue);
    return sim_memset_3d(p.ptr, p.pitch, slice, value, e.width, e.height, e.depth, h, sync);
}

cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent)
{
    return sim_memset_pitched(pitchedDevPtr, value, extent, SIM_SYNC_LEGACY, true);
}

cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent)
{
    return sim_memset_pitched(pitchedDevPtr, value, extent, SIM_SYNC_PTDS, true);
}

cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                              cudaStream_t stream)
{
    return sim_memset_pitched(pitchedDevPtr, value, extent, stream, false);
}

cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                                   cudaStream_t stream)
{
    return sim_memset_pitched(pitchedDevPtr, value, extent, SIM_PTSZ(stream), false);
}

/* ------------------------------------------------------------------ */
/* Simulated kernels                                                   */
/* ------------------------------------------------------------------ */

cudaError_t simLaunchFill(void *dst, int value, size_t bytes, unsigned delay_us, cudaStream_t stream)
{
    if (!dst && bytes)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_op *op = sim_op_new(SIM_OP_SET);
    if (!op)
        return sim_ret(cudaErrorMemoryAllocation);
    op->delay_us = delay_us;
    op->u.set.value = (unsigned char)value;
    op->u.set.width = bytes;
    op->u.set.height = op->u.set.depth = 1;
    struct sim_region *r = &op->u.set.dst;
    r->ptr = dst;
    r->pitch = r->slice = r->span = bytes;
    r->kind = bytes ? SIM_REGION_DEVICE : SIM_REGION_STATIC; /* 0 bytes: touch nothing */
    sim_lock();
    if (bytes) {
        struct sim_alloc *a = sim_reg_find(dst);
        if (a && bytes > a->size - ((uintptr_t)dst - a->base))
            err = cudaErrorInvalidValue; /* out of bounds of a live allocation */
        else
            r->alloc_id = a ? a->id : 0; /* 0: already freed at launch, stale when run */
    }
    return sim_finish(err, stream, op, false);
}
