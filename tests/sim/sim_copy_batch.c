/*
 * sim_copy_batch.c - batched copies of the simulated CUDA runtime
 * (tests/sim, see README.md): cudaMemcpyBatchAsync and
 * cudaMemcpy3DBatchAsync (CUDA 12.8+), with their _ptsz variants.
 *
 * A batch is one stream operation holding every copy of it, validated at
 * issue time as a single copy is (sim_copy.c); the source access orders
 * are checked, and decide whether the call waits for the copies.
 */
#include "sim_internal.h"
#include "simcudart.h"
#include "sim_copy.h"

#include <stdlib.h>
#include <string.h>

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
