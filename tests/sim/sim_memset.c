/*
 * sim_memset.c - cudaMemset* (with every _ptds / _ptsz variant) and the
 * simulated kernels (simLaunchFill) of the simulated CUDA runtime
 * (tests/sim, see README.md).
 *
 * A set is one stream operation over a pitched 3D byte region, validated
 * at issue time as copies are (sim_copy.c); a simulated kernel is a set
 * that may be delayed (delay_us), checked against the allocation its
 * bytes lie in.
 */
#include "sim_internal.h"
#include "simcudart.h"
#include "sim_copy.h"

#include <stdlib.h>
#include <string.h>

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
