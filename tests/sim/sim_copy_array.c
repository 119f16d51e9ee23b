/*
 * sim_copy_array.c - the copies of the simulated CUDA runtime (tests/sim,
 * see README.md) whose one side is not a pointer to linear memory:
 * cudaMemcpyToSymbol / FromSymbol (and Async) and the CUDA array copies
 * (cudaMemcpyToArray, FromArray, ArrayToArray, the 2D ones), with their
 * _ptds / _ptsz variants.
 *
 * A __device__ symbol is simply the host address symbol + offset; a CUDA
 * array is its row-major block of memory (sim_array.c).  Both become the
 * same stream operations as every other copy (sim_copy.c).
 */
#include "sim_internal.h"
#include "simcudart.h"
#include "sim_copy.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Regions of arrays and symbols (lock held)                           */
/* ------------------------------------------------------------------ */

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
