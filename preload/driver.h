/* driver.h - what the two files of the driver-level observer share.
 *
 * driver.c finds libcuda's functions, interposes dlsym and hands out the
 * wrappers in place of the driver's functions; driver_calls.c holds the
 * wrappers of the memory calls and what they record. Nothing else in the
 * library includes this header: the rest of it asks the observer through
 * the gmt_drv_* functions of internal.h.
 *
 * The wrappers are exported under the driver's names; everything else
 * here is hidden, declared so explicitly (not only by -fvisibility) so
 * that the compiler reaches it directly, as when it was static.
 */
#ifndef GMT_DRIVER_H
#define GMT_DRIVER_H

#include <cuda.h>

#include "internal.h"

#define GMT_EXPORT __attribute__((visibility("default")))
#define GMT_DRV_HIDDEN __attribute__((visibility("hidden")))

/* The cuda.h macros rename some of these (cuGetProcAddress ->
 * cuGetProcAddress_v2); the table only ever stringizes or pastes the
 * names, which macros don't touch. */
#define GMT_DRV_WRAPPED(X)                                                    \
    X(cuGetProcAddress_v2) X(cuGetProcAddress) X(cuInit)                      \
    X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy_v2)      \
    X(cuCtxCreate)                                                            \
    X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuGreenCtxCreate) \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemFree_v2)                    \
    X(cuMemAllocManaged) X(cuMemAllocHost_v2) X(cuMemHostAlloc)               \
    X(cuMemFreeHost) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)               \
    X(cuMemUnmap) X(cuMemAddressReserve) X(cuMemAddressFree)                  \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)     \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)  \
    X(cuMemPoolDestroy)                                                       \
    X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz)       \
    X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2)             \
    X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds)        \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)                      \
    X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz)                      \
    X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz)                      \
    X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2)                  \
    X(cuMemsetD16_v2_ptds) X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds)           \
    X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async)            \
    X(cuMemsetD16Async_ptsz) X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz)
/* Called by the observer itself, never wrapped. */
#define GMT_DRV_SELF(X)                                                       \
    X(cuCtxGetDevice) X(cuDeviceGet) X(cuDeviceGetName)                       \
    X(cuDeviceTotalMem_v2) X(cuDeviceGetUuid_v2) X(cuDeviceGetAttribute)     \
    X(cuMemGetInfo_v2) X(cuDeviceGetMemPool) X(cuMemPoolGetAttribute)        \
    X(cuPointerGetAttribute) X(cuMemSetAccess)                                \
    X(cuMemGetAllocationGranularity) X(cuDeviceCanAccessPeer)                 \
    X(cuDeviceGetCount) X(cuCtxGetCurrent)

enum {
#define GMT_DRV_ENUM(n) D_##n,
    GMT_DRV_WRAPPED(GMT_DRV_ENUM) GMT_DRV_SELF(GMT_DRV_ENUM) D_COUNT
#undef GMT_DRV_ENUM
};
#define D_WRAPPED_COUNT D_cuCtxGetDevice /* the first of GMT_DRV_SELF */

/* ---- driver.c: libcuda's functions, the options ------------------------- */

GMT_DRV_HIDDEN extern void *gmt_drv_real[D_COUNT]; /* libcuda's own functions */
GMT_DRV_HIDDEN extern bool gmt_drv_table_ready; /* gmt_drv_real filled
                                                   (release/acquire) */
GMT_DRV_HIDDEN extern bool gmt_drv_observe;     /* GPUMEMTRACE_DRIVER,
                                                   _DISABLE */
/* Fill gmt_drv_real from the libcuda that `any` (one of its functions, or
 * NULL for "the libcuda.so.1 already loaded") lives in. */
GMT_DRV_HIDDEN bool gmt_drv_table_init(const void *any);

/* The real function of a wrapper; the first call of an exported wrapper
 * by a program linked with -lcuda may come before any lookup. */
static inline void *real(int i)
{
    if (GMT_UNLIKELY(
            !__atomic_load_n(&gmt_drv_table_ready, __ATOMIC_ACQUIRE)))
        gmt_drv_table_init(NULL);
    return gmt_drv_real[i];
}
#define REAL(n) ((__typeof__(&gmtw_##n))real(D_##n))
#define MISSING(n) (real(D_##n) == NULL)

/* ---- driver_calls.c: the pools it follows -------------------------------- */

/* Forget the parent's pools in a forked child. */
GMT_DRV_HIDDEN void gmt_drv_pools_reset_after_fork(void);

/* ---- the wrappers ----------------------------------------------------------
 * Each has the exact type of the driver function it stands for, and is
 * exported under that function's name (for programs linked with -lcuda).
 * The lookups (driver.c): */
#define WRAPPER(ret, n, params) GMT_EXPORT ret gmtw_##n params __asm__(#n)

WRAPPER(CUresult, cuGetProcAddress_v2,
        (const char *symbol, void **pfn, int version, cuuint64_t flags,
         CUdriverProcAddressQueryResult *status));
WRAPPER(CUresult, cuGetProcAddress,
        (const char *symbol, void **pfn, int version, cuuint64_t flags));
WRAPPER(CUresult, cuInit, (unsigned int flags));
/* Streams and contexts, for the pool's fences (driver.c). */
WRAPPER(CUresult, cuStreamCreate, (CUstream *ph, unsigned int flags));
WRAPPER(CUresult, cuStreamCreateWithPriority,
        (CUstream *ph, unsigned int flags, int priority));
WRAPPER(CUresult, cuStreamDestroy_v2, (CUstream h));
WRAPPER(CUresult, cuCtxCreate,
        (CUcontext *pctx, unsigned int flags, CUdevice dev));
WRAPPER(CUresult, cuCtxCreate_v2,
        (CUcontext *pctx, unsigned int flags, CUdevice dev));
WRAPPER(CUresult, cuCtxCreate_v3,
        (CUcontext *pctx, CUexecAffinityParam *params, int n,
         unsigned int flags, CUdevice dev));
WRAPPER(CUresult, cuCtxCreate_v4,
        (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
         CUdevice dev));
WRAPPER(CUresult, cuGreenCtxCreate,
        (CUgreenCtx *ph, CUdevResourceDesc desc, CUdevice dev,
         unsigned int flags));

/* The memory calls (driver_calls.c): allocation, pinned host memory. */
WRAPPER(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t size));
WRAPPER(CUresult, cuMemAllocPitch_v2,
        (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
         unsigned int elem));
WRAPPER(CUresult, cuMemAllocManaged,
        (CUdeviceptr *dptr, size_t size, unsigned int flags));
WRAPPER(CUresult, cuMemFree_v2, (CUdeviceptr dptr));
WRAPPER(CUresult, cuMemAllocHost_v2, (void **pp, size_t size));
WRAPPER(CUresult, cuMemHostAlloc, (void **pp, size_t size, unsigned int flags));
WRAPPER(CUresult, cuMemFreeHost, (void *p));
/* Virtual memory. */
WRAPPER(CUresult, cuMemCreate,
        (CUmemGenericAllocationHandle *handle, size_t size,
         const CUmemAllocationProp *prop, unsigned long long flags));
WRAPPER(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle));
WRAPPER(CUresult, cuMemMap,
        (CUdeviceptr ptr, size_t size, size_t offset,
         CUmemGenericAllocationHandle handle, unsigned long long flags));
WRAPPER(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size));
WRAPPER(CUresult, cuMemAddressReserve,
        (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
         unsigned long long flags));
WRAPPER(CUresult, cuMemAddressFree, (CUdeviceptr ptr, size_t size));
/* Stream-ordered allocation and its pools. */
WRAPPER(CUresult, cuMemPoolDestroy, (CUmemoryPool pool));
WRAPPER(CUresult, cuMemAllocAsync,
        (CUdeviceptr *dptr, size_t size, CUstream stream));
WRAPPER(CUresult, cuMemAllocAsync_ptsz,
        (CUdeviceptr *dptr, size_t size, CUstream stream));
WRAPPER(CUresult, cuMemAllocFromPoolAsync,
        (CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream));
WRAPPER(CUresult, cuMemAllocFromPoolAsync_ptsz,
        (CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream));
WRAPPER(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream));
WRAPPER(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream stream));

/* Copies and sets: one wrapper per exported variant, each with its
 * function's own types. COPY/COPY_ASYNC(name, destination type, source
 * type, direction, per-thread variant); SET/SET_ASYNC(name, value type,
 * value size, per-thread variant). Declared here, defined from the same
 * list in driver_calls.c. */
#define GMT_DRV_COPIES(COPY, COPY_ASYNC, SET, SET_ASYNC)                      \
    COPY(cuMemcpy, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, false)          \
    COPY(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, true)      \
    COPY_ASYNC(cuMemcpyAsync, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN,      \
               false)                                                         \
    COPY_ASYNC(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, \
               true)                                                          \
    COPY(cuMemcpyHtoD_v2, CUdeviceptr, const void *, GMT_DIR_H2D, false)      \
    COPY(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *, GMT_DIR_H2D, true)  \
    COPY(cuMemcpyDtoH_v2, void *, CUdeviceptr, GMT_DIR_D2H, false)            \
    COPY(cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr, GMT_DIR_D2H, true)        \
    COPY(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, false)       \
    COPY(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, true)   \
    COPY_ASYNC(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, GMT_DIR_H2D,  \
               false)                                                         \
    COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *,          \
               GMT_DIR_H2D, true)                                             \
    COPY_ASYNC(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, GMT_DIR_D2H, false) \
    COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr, GMT_DIR_D2H,   \
               true)                                                          \
    COPY_ASYNC(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D,   \
               false)                                                         \
    COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr,           \
               GMT_DIR_D2D, true)                                             \
    SET(cuMemsetD8_v2, unsigned char, 1, false)                               \
    SET(cuMemsetD8_v2_ptds, unsigned char, 1, true)                           \
    SET(cuMemsetD16_v2, unsigned short, 2, false)                             \
    SET(cuMemsetD16_v2_ptds, unsigned short, 2, true)                         \
    SET(cuMemsetD32_v2, unsigned int, 4, false)                               \
    SET(cuMemsetD32_v2_ptds, unsigned int, 4, true)                           \
    SET_ASYNC(cuMemsetD8Async, unsigned char, 1, false)                       \
    SET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, true)                   \
    SET_ASYNC(cuMemsetD16Async, unsigned short, 2, false)                     \
    SET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, true)                 \
    SET_ASYNC(cuMemsetD32Async, unsigned int, 4, false)                       \
    SET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, true)

#define GMT_DRV_COPY_DECL(name, DT, ST, DIR, PT)                              \
    WRAPPER(CUresult, name, (DT dst, ST src, size_t n));
#define GMT_DRV_COPY_ASYNC_DECL(name, DT, ST, DIR, PT)                        \
    WRAPPER(CUresult, name, (DT dst, ST src, size_t n, CUstream s));
#define GMT_DRV_SET_DECL(name, VT, SIZE, PT)                                  \
    WRAPPER(CUresult, name, (CUdeviceptr dst, VT v, size_t n));
#define GMT_DRV_SET_ASYNC_DECL(name, VT, SIZE, PT)                            \
    WRAPPER(CUresult, name, (CUdeviceptr dst, VT v, size_t n, CUstream s));
GMT_DRV_COPIES(GMT_DRV_COPY_DECL, GMT_DRV_COPY_ASYNC_DECL, GMT_DRV_SET_DECL,
               GMT_DRV_SET_ASYNC_DECL)
#undef GMT_DRV_COPY_DECL
#undef GMT_DRV_COPY_ASYNC_DECL
#undef GMT_DRV_SET_DECL
#undef GMT_DRV_SET_ASYNC_DECL

#endif /* GMT_DRIVER_H */
