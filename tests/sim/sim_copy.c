/*
 * sim_copy.c - the copies of the simulated CUDA runtime (tests/sim, see
 * README.md) between pointers: cudaMemcpy, Peer, 2D and 3D (and Async),
 * including every _ptds / _ptsz variant the real libcudart.so.13 exports,
 * and the region validation and issuing that every copy and set shares
 * (sim_copy.h).  Batched copies are in sim_copy_batch.c, symbol and CUDA
 * array copies in sim_copy_array.c, cudaMemset* and the simulated kernels
 * in sim_memset.c.
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
#include "sim_copy.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Region validation (lock held)                                       */
/* ------------------------------------------------------------------ */

cudaError_t sim_kind_needs(enum cudaMemcpyKind kind, enum sim_need *dst, enum sim_need *src)
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
cudaError_t sim_region_ptr(const void *ptr, size_t pitch, size_t slice, size_t w, size_t h,
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
cudaError_t sim_region_array(const struct cudaArray *arr, size_t x, size_t y, size_t z,
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

/* ------------------------------------------------------------------ */
/* Issuing operations                                                  */
/* ------------------------------------------------------------------ */

struct sim_op *sim_copy_op(void)
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
cudaError_t sim_issue(cudaStream_t h, struct sim_op *op, bool sync_api, bool force_wait)
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
cudaError_t sim_finish(cudaError_t err, cudaStream_t h, struct sim_op *op, bool sync_api)
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
cudaError_t sim_build_3d(const struct sim_side3d *dst, const struct sim_side3d *src,
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
