/*
 * sim_drv_copy.c - the linear copies and sets of the simulated CUDA driver
 * (libcuda.so.1, see sim_driver.c): cuMemcpy, cuMemcpyAsync, the
 * HtoD / DtoH / DtoD copies, cuMemsetD8 / D16 / D32, each with its async
 * and per-thread-stream variants, and the 32-bit ABI stubs.  The rules
 * they follow are below.
 */
#include "sim_drv_internal.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* Copies and sets                                                     */
/* ------------------------------------------------------------------ */

/*
 * Copies and sets happen at once, under the lock (so that no allocation
 * they touch can be freed meanwhile), with memmove / stores on the bytes
 * this library handed out; nothing is queued, streams are only checked.
 * What the real driver (580, H200) does and this follows:
 *  - a zero-byte copy or set succeeds without looking at its pointers;
 *  - a device side must lie entirely in one live allocation, of any kind:
 *    pinned host memory is accepted there too (unified addressing), not
 *    pageable host memory;
 *  - cuMemcpy / cuMemcpyAsync take a pointer inside an allocation as that
 *    allocation's memory (and check the size), anything else as host
 *    memory;
 *  - D16 / D32 sets need a 2 / 4-byte aligned destination.
 * Host memory is not checked beyond this: not NULL, no wrap-around, and
 * not inside a virtual memory reservation, which is never readable here
 * (a copy there is CUDA_ERROR_INVALID_VALUE rather than a crash).
 */
enum drv_side {
    DRV_SIDE_DEV,     /* inside one live allocation */
    DRV_SIDE_HOST,    /* host memory */
    DRV_SIDE_ANY      /* unified addressing: an allocation if in one, host otherwise */
};

/* Whether [p, p + n), n > 0, is acceptable as a side of a copy or set
 * (lock held). */
static bool drv_range_ok(uintptr_t p, size_t n, enum drv_side side)
{
    if (side != DRV_SIDE_HOST) {
        const struct drv_alloc *a = drv_tree_find(p);
        if (a)
            return n <= a->size - (p - a->base);
        if (side == DRV_SIDE_DEV)
            return false;
    }
    if (p == 0 || n - 1 > UINTPTR_MAX - p)
        return false;
    for (const struct drv_reservation *x = drv.reservations; x; x = x->next)
        if (p < x->base + x->size && x->base <= p + (n - 1))
            return false;
    return true;
}

static CUresult drv_copy(uintptr_t dst, enum drv_side dst_side, uintptr_t src, enum drv_side src_side,
                         size_t n, CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    if (r == CUDA_SUCCESS && n > 0) {
        if (drv_range_ok(dst, n, dst_side) && drv_range_ok(src, n, src_side))
            memmove((void *)dst, (const void *)src, n); /* the ranges may overlap */
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

/* Sets count elements of elem (1, 2 or 4) bytes at dst to value. */
static CUresult drv_set(uintptr_t dst, uint32_t value, size_t elem, size_t count, CUstream h)
{
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    int dev;
    size_t bytes;
    pthread_mutex_lock(&drv.lock);
    r = drv_stream_device(h, &dev);
    if (r == CUDA_SUCCESS && count > 0) {
        if (dst % elem != 0 || __builtin_mul_overflow(count, elem, &bytes) ||
            !drv_range_ok(dst, bytes, DRV_SIDE_DEV)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (elem == 1) {
            memset((void *)dst, (int)(value & 0xff), bytes);
        } else if (elem == 2) {
            uint16_t *q = (uint16_t *)dst;
            for (size_t i = 0; i < count; i++)
                q[i] = (uint16_t)value;
        } else {
            uint32_t *q = (uint32_t *)dst;
            for (size_t i = 0; i < count; i++)
                q[i] = value;
        }
    }
    pthread_mutex_unlock(&drv.lock);
    return r;
}

#define DRV_D DRV_SIDE_DEV
#define DRV_H DRV_SIDE_HOST
#define DRV_A DRV_SIDE_ANY

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, NULL);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, NULL);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dst, DRV_A, (uintptr_t)src, DRV_A, ByteCount, hStream);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, NULL);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, NULL);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, NULL);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, hStream);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcHost, DRV_H, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstHost, DRV_H, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return drv_copy((uintptr_t)dstDevice, DRV_D, (uintptr_t)srcDevice, DRV_D, ByteCount, hStream);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, NULL);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, NULL);
}

CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, NULL);
}

CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, NULL);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, NULL);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, NULL);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, uc, 1, N, hStream);
}

CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, hStream);
}

CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, us, 2, N, hStream);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, hStream);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return drv_set((uintptr_t)dstDevice, ui, 4, N, hStream);
}

#undef DRV_D
#undef DRV_H
#undef DRV_A

/* The 32-bit device pointer ABI (before CUDA 3.2), like cuMemAlloc: only
 * there so that a lookup of an old version finds a real function. */
CUresult cuMemcpyHtoD(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount)
{
    (void)dstDevice;
    (void)srcHost;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoH(void *dstHost, unsigned int srcDevice, unsigned int ByteCount)
{
    (void)dstHost;
    (void)srcDevice;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoD(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount)
{
    (void)dstDevice;
    (void)srcDevice;
    (void)ByteCount;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyHtoDAsync(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstDevice;
    (void)srcHost;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoHAsync(void *dstHost, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstHost;
    (void)srcDevice;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemcpyDtoDAsync(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream)
{
    (void)dstDevice;
    (void)srcDevice;
    (void)ByteCount;
    (void)hStream;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD8(unsigned int dstDevice, unsigned char uc, unsigned int N)
{
    (void)dstDevice;
    (void)uc;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD16(unsigned int dstDevice, unsigned short us, unsigned int N)
{
    (void)dstDevice;
    (void)us;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemsetD32(unsigned int dstDevice, unsigned int ui, unsigned int N)
{
    (void)dstDevice;
    (void)ui;
    (void)N;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------ */
/* Hidden aliases (sim_drv_internal.h)                                 */
/* ------------------------------------------------------------------ */

DRV_COPY_FUNCS(DRV_LOCAL)
