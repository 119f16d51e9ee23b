/* hooks_compat.c - entry points whose signature depends on the runtime.
 *
 * cudaMemcpyBatchAsync and cudaMemcpy3DBatchAsync appeared in CUDA 12.8
 * with a `size_t *failIdx` parameter before the stream; CUDA 13 removed
 * it. A program built against 12.8/12.9 (a PyTorch cu128 wheel, say) and
 * one built against 13 both find our symbol. So these wrappers take the
 * longer argument list, forward every argument (the x86-64 calling
 * convention lets a function ignore trailing arguments, and a caller with
 * the shorter list leaves the extra slot unused), and pick the stream for
 * the trace from the runtime's version.
 *
 * The CUDA headers declare the version-13 prototypes; they are renamed out
 * of the way before inclusion so the wrappers can be defined with the
 * longer parameter lists.
 */
#define cudaMemcpyBatchAsync gmt_hdr_cudaMemcpyBatchAsync
#define cudaMemcpyBatchAsync_ptsz gmt_hdr_cudaMemcpyBatchAsync_ptsz
#define cudaMemcpy3DBatchAsync gmt_hdr_cudaMemcpy3DBatchAsync
#define cudaMemcpy3DBatchAsync_ptsz gmt_hdr_cudaMemcpy3DBatchAsync_ptsz
#include "real.h"
#undef cudaMemcpyBatchAsync
#undef cudaMemcpyBatchAsync_ptsz
#undef cudaMemcpy3DBatchAsync
#undef cudaMemcpy3DBatchAsync_ptsz

#define GMT_EXPORT __attribute__((visibility("default")))

/* true for a 12.x runtime that has the failIdx parameter */
static bool has_fail_idx(void)
{
    static int cached = -1; /* -1 unknown, 0 no, 1 yes */
    int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (c < 0) {
        int v = 0;
        if (GMT_REAL(cudaPeekAtLastError)() != cudaSuccess)
            return false; /* ask next time */
        if (GMT_REAL(cudaRuntimeGetVersion)(&v) != cudaSuccess) {
            GMT_REAL(cudaGetLastError)();
            return false;
        }
        c = v >= 12080 && v < 13000;
        __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
    }
    return c == 1;
}

typedef cudaError_t (*batch_fn)(void *const *, const void *const *,
                                const size_t *, size_t,
                                struct cudaMemcpyAttributes *, size_t *,
                                size_t, uintptr_t, uintptr_t);
typedef cudaError_t (*batch3d_fn)(size_t, struct cudaMemcpy3DBatchOp *,
                                  uintptr_t, uintptr_t, uintptr_t);

static cudaError_t batch(unsigned idx, unsigned api, bool ptsz,
                         void *const *dsts, const void *const *srcs,
                         const size_t *sizes, size_t count,
                         struct cudaMemcpyAttributes *attrs, size_t *attr_idx,
                         size_t nattrs, uintptr_t a8, uintptr_t a9)
{
    batch_fn real = (batch_fn)gmt_real(idx);
    struct gmt_call c;
    if (!gmt_call_begin(&c, false))
        return real(dsts, srcs, sizes, count, attrs, attr_idx, nattrs, a8, a9);
    cudaError_t r = real(dsts, srcs, sizes, count, attrs, attr_idx, nattrs, a8, a9);
    gmt_call_errno(&c);
    uintptr_t stream = has_fail_idx() ? a9 : a8;
    gmt_ev_copy_batch(&c, r, api, dsts, srcs, sizes, count,
                      gmt_stream_of((const void *)stream, ptsz));
    gmt_call_finish(&c);
    return r;
}

static cudaError_t batch3d(unsigned idx, unsigned api, bool ptsz, size_t n,
                           struct cudaMemcpy3DBatchOp *ops, uintptr_t a3,
                           uintptr_t a4, uintptr_t a5)
{
    batch3d_fn real = (batch3d_fn)gmt_real(idx);
    struct gmt_call c;
    if (!gmt_call_begin(&c, false))
        return real(n, ops, a3, a4, a5);
    cudaError_t r = real(n, ops, a3, a4, a5);
    gmt_call_errno(&c);
    /* 13: (n, ops, flags, stream); 12.8: (n, ops, failIdx, flags, stream) */
    uintptr_t stream = has_fail_idx() ? a5 : a4;
    gmt_ev_copy3d_batch(&c, r, api, n, ops, gmt_stream_of((const void *)stream, ptsz));
    gmt_call_finish(&c);
    return r;
}

GMT_EXPORT cudaError_t cudaMemcpyBatchAsync(void *const *dsts,
                                            const void *const *srcs,
                                            const size_t *sizes, size_t count,
                                            struct cudaMemcpyAttributes *attrs,
                                            size_t *attr_idx, size_t nattrs,
                                            uintptr_t a8, uintptr_t a9)
{
    return batch(GMT_R_cudaMemcpyBatchAsync, GMT_API_MEMCPY_BATCH_ASYNC, false,
                 dsts, srcs, sizes, count, attrs, attr_idx, nattrs, a8, a9);
}

GMT_EXPORT cudaError_t cudaMemcpyBatchAsync_ptsz(
    void *const *dsts, const void *const *srcs, const size_t *sizes,
    size_t count, struct cudaMemcpyAttributes *attrs, size_t *attr_idx,
    size_t nattrs, uintptr_t a8, uintptr_t a9)
{
    return batch(GMT_R_cudaMemcpyBatchAsync_ptsz,
                 GMT_API_MEMCPY_BATCH_ASYNC | GMT_API_PTDS, true, dsts, srcs,
                 sizes, count, attrs, attr_idx, nattrs, a8, a9);
}

GMT_EXPORT cudaError_t cudaMemcpy3DBatchAsync(size_t n,
                                              struct cudaMemcpy3DBatchOp *ops,
                                              uintptr_t a3, uintptr_t a4,
                                              uintptr_t a5)
{
    return batch3d(GMT_R_cudaMemcpy3DBatchAsync, GMT_API_MEMCPY_3D_BATCH_ASYNC,
                   false, n, ops, a3, a4, a5);
}

GMT_EXPORT cudaError_t cudaMemcpy3DBatchAsync_ptsz(
    size_t n, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
    uintptr_t a5)
{
    return batch3d(GMT_R_cudaMemcpy3DBatchAsync_ptsz,
                   GMT_API_MEMCPY_3D_BATCH_ASYNC | GMT_API_PTDS, true, n, ops,
                   a3, a4, a5);
}
