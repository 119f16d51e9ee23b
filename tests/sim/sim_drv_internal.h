/*
 * sim_drv_internal.h - private interface of the simulated CUDA driver,
 * libcuda.so.1 (tests/sim, see README.md and sim_driver.c), shared by the
 * driver's files and nothing else: the runtime simulator never includes
 * it, and the driver is never linked with the runtime's sources.
 *
 *   sim_driver.c      the state, environment, devices, context,
 *                     cuGetProcAddress, exit statistics
 *   sim_drv_mem.c     the allocation registry and allocator, device /
 *                     managed / pinned host memory, pointer attributes
 *   sim_drv_vmm.c     virtual memory: physical handles, reservations, mappings
 *   sim_drv_async.c   streams, stream-ordered allocation, memory pools
 *   sim_drv_copy.c    copies and sets
 *
 * Prototypes are grouped under the file that defines them.  What one file
 * offers the others is hidden (the visibility pragma below): it binds
 * inside the library and never enters its dynamic symbol table.
 */
#ifndef SIM_DRV_INTERNAL_H
#define SIM_DRV_INTERNAL_H

#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cuda.h renames these to their newest ABI (cuMemAlloc -> cuMemAlloc_v2);
 * the driver exports both, so the old names must be plain names here. */
#undef cuDeviceTotalMem
#undef cuDeviceGetUuid
#undef cuMemGetInfo
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemAllocHost
#undef cuStreamDestroy
#undef cuGetProcAddress
#undef cuMemcpyHtoD
#undef cuMemcpyDtoH
#undef cuMemcpyDtoD
#undef cuMemcpyHtoDAsync
#undef cuMemcpyDtoHAsync
#undef cuMemcpyDtoDAsync
#undef cuMemsetD8
#undef cuMemsetD16
#undef cuMemsetD32
/* Only renamed in per-thread-stream builds; undone in case one sets it. */
#undef cuMemAllocAsync
#undef cuMemAllocFromPoolAsync
#undef cuMemFreeAsync
#undef cuStreamSynchronize
#undef cuMemcpy
#undef cuMemcpyAsync
#undef cuMemsetD8Async
#undef cuMemsetD16Async
#undef cuMemsetD32Async

#define DRV_MAX_DEVICES 8
#define DRV_DEV_ALIGN 512                 /* device / managed / pool memory, pitches */
#define DRV_HOST_ALIGN 4096               /* pinned host memory */
#define DRV_GRANULARITY ((size_t)2 << 20) /* VMM: 2 MiB, as on the H100 / H200 */
#define DRV_VERSION 13000
/* Magic numbers make a stale or foreign handle recognisable in a
 * debugger; validity itself is decided by list membership. */
#define DRV_MAGIC_STREAM 0x44535452U      /* "DSTR" */
#define DRV_MAGIC_POOL 0x44504f4cU        /* "DPOL" */
#define DRV_MAGIC_HANDLE 0x44484e44U      /* "DHND" */

/* The old ABI of the functions that have a _v2 (32-bit sizes and device
 * pointers), and the per-thread-default-stream variants: cuda.h declares
 * neither in an ordinary build. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes);
CUresult cuMemFree(unsigned int dptr);
CUresult cuMemAllocHost(void **pp, unsigned int bytesize);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuMemcpyHtoD(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult cuMemcpyDtoH(void *dstHost, unsigned int srcDevice, unsigned int ByteCount);
CUresult cuMemcpyDtoD(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount);
CUresult cuMemcpyHtoDAsync(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemcpyDtoHAsync(void *dstHost, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemcpyDtoDAsync(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount,
                           CUstream hStream);
CUresult cuMemsetD8(unsigned int dstDevice, unsigned char uc, unsigned int N);
CUresult cuMemsetD16(unsigned int dstDevice, unsigned short us, unsigned int N);
CUresult cuMemsetD32(unsigned int dstDevice, unsigned int ui, unsigned int N);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

/* Test-only: makes `ordinal` the calling thread's current device (what
 * cuCtxGetDevice reports and allocations are charged to). */
CUresult simDrvSetDevice(int ordinal);

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */

enum drv_kind { DRV_DEVICE, DRV_MANAGED, DRV_HOST, DRV_POOL };
#define DRV_KIND(k) (1u << (k))
#define DRV_DEVICE_KINDS (DRV_KIND(DRV_DEVICE) | DRV_KIND(DRV_MANAGED) | DRV_KIND(DRV_POOL))

/* A live allocation; chained in a hash table keyed by its base address. */
struct drv_alloc {
    uintptr_t base;
    size_t size;                       /* as requested (pitch * height for pitched) */
    size_t charged;                    /* bytes taken from device->used (pools: 0) */
    int device;
    enum drv_kind kind;
    struct CUmemPoolHandle_st *pool;   /* DRV_POOL only */
    bool lent;                         /* memory of the caller's (simDrvLendMemory):
                                          never poisoned or freed here */
    struct drv_alloc *next;
    struct drv_alloc *left, *right;    /* the address-ordered treap */
    uint64_t prio;
};

/* Physical memory of the virtual memory API: bookkeeping, no bytes. */
struct drv_handle {
    uint32_t magic;
    size_t size;
    int device;                        /* -1: host location */
    size_t charged;
    bool released;                     /* cuMemRelease called; lives while mapped */
    unsigned maps;
    struct drv_handle *next;
};

struct drv_mapping {
    uintptr_t base;
    size_t size;
    struct drv_handle *h;
    struct drv_mapping *next;
};

/* An address range reserved with mmap(PROT_NONE). */
struct drv_reservation {
    uintptr_t base;
    size_t size;                       /* a multiple of the page size */
    struct drv_mapping *maps;
    struct drv_reservation *next;
};

/* A memory pool keeps freed bytes reserved (charged to its device) until
 * trimmed or destroyed; allocations take cached bytes first. */
struct CUmemPoolHandle_st {
    uint32_t magic;
    int device;                        /* -1: host location, not charged */
    bool is_default;
    bool destroyed;                    /* unlinked; freed with its last allocation */
    size_t max_size;                   /* 0: no limit but the device's */
    size_t used, used_high, reserved, reserved_high;
    struct CUmemPoolHandle_st *next;
};

struct CUstream_st {
    uint32_t magic;
    int device;
    unsigned flags;
    struct CUstream_st *next;
};

struct drv_device {
    size_t used;                       /* charged bytes; never above capacity */
    struct CUmemPoolHandle_st *default_pool;
};

/* Everything but the current device, in one instance: drv (sim_driver.c).
 * drv.lock guards the rest. */
struct drv_state {
    pthread_mutex_t lock;
    int ndev;
    size_t capacity;                   /* per device */
    struct drv_device dev[DRV_MAX_DEVICES];
    struct drv_alloc **tab;            /* 1 << tab_bits chains */
    unsigned tab_bits;
    size_t nallocs;
    struct drv_alloc *tree;            /* the same allocations, ordered by address */
    uint64_t prio_seed;
    struct drv_handle *handles;
    struct drv_reservation *reservations;
    struct CUmemPoolHandle_st *pools;  /* live (not destroyed) pools */
    struct CUstream_st *streams;
    unsigned long long n_alloc, n_free, n_lookup; /* SIM_CUDA_DRIVER_STATS */
};

#pragma GCC visibility push(hidden)

/* sim_driver.c */
extern struct drv_state drv;
extern _Thread_local int drv_tls_device;  /* current device, default 0 */
CUresult drv_enter(void);
bool drv_valid_device(CUdevice dev);
/* drv_enter, then CUDA_ERROR_INVALID_DEVICE unless dev is a device. */
CUresult drv_enter_device(CUdevice dev);

/* sim_drv_mem.c */
struct drv_alloc *drv_tree_find(uintptr_t p); /* lock held */
CUresult drv_alloc(enum drv_kind kind, size_t size, int dev, struct CUmemPoolHandle_st *pool,
                   uintptr_t *out);
CUresult drv_free(uintptr_t p, unsigned kinds);
extern _Thread_local void *drv_tls_lent; /* simDrvLendMemory */

/* sim_drv_async.c (lock held) */
struct CUmemPoolHandle_st *drv_pool_new(int dev, bool is_default, size_t max_size);
bool drv_pool_is_live(const struct CUmemPoolHandle_st *h);
void drv_pool_release(struct CUmemPoolHandle_st *p, size_t size);
CUresult drv_stream_device(CUstream h, int *dev);

#pragma GCC visibility pop

/* ------------------------------------------------------------------ */
/* Hidden aliases, for cuGetProcAddress                                */
/* ------------------------------------------------------------------ */

/*
 * cuGetProcAddress (sim_driver.c) hands out drv_local_<name>, a hidden
 * alias of the exported function <name>: taking its address cannot be
 * diverted to an interposer (see the comment at the top of sim_driver.c).
 * An alias must be defined in the file that defines its function, so the
 * names are listed by file, and each file ends with its own list applied
 * to DRV_LOCAL; every file sees all the declarations.
 */
#define DRV_CORE_FUNCS(X) /* sim_driver.c */                                                  \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)     \
    X(cuDeviceCanAccessPeer)                                                                  \
    X(cuDeviceTotalMem) X(cuDeviceTotalMem_v2) X(cuDeviceGetUuid) X(cuDeviceGetUuid_v2)       \
    X(cuDeviceGetAttribute) X(cuCtxGetDevice) X(cuMemGetInfo) X(cuMemGetInfo_v2)              \
    X(cuGetProcAddress) X(cuGetProcAddress_v2)
#define DRV_MEM_FUNCS(X) /* sim_drv_mem.c */                                                  \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemFree) X(cuMemFree_v2) X(cuMemAllocPitch)            \
    X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemAllocHost) X(cuMemAllocHost_v2)         \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuPointerGetAttribute)
#define DRV_VMM_FUNCS(X) /* sim_drv_vmm.c */                                                  \
    X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve)    \
    X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)
#define DRV_ASYNC_FUNCS(X) /* sim_drv_async.c */                                              \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamDestroy_v2) X(cuStreamSynchronize)         \
    X(cuStreamSynchronize_ptsz) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)                    \
    X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync)              \
    X(cuMemFreeAsync_ptsz) X(cuMemPoolCreate) X(cuMemPoolDestroy)                             \
    X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) X(cuMemPoolGetAttribute)               \
    X(cuMemPoolTrimTo)
#define DRV_COPY_FUNCS(X) /* sim_drv_copy.c */                                                \
    X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyHtoD)       \
    X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH) X(cuMemcpyDtoH_v2)             \
    X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds)        \
    X(cuMemcpyHtoDAsync) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)                 \
    X(cuMemcpyDtoHAsync) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz)                 \
    X(cuMemcpyDtoDAsync) X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemsetD8)   \
    X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16) X(cuMemsetD16_v2)                   \
    X(cuMemsetD16_v2_ptds) X(cuMemsetD32) X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds)            \
    X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz)   \
    X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz)

#define DRV_LOCAL_DECL(n) extern __typeof__(n) drv_local_##n __attribute__((visibility("hidden")));
DRV_CORE_FUNCS(DRV_LOCAL_DECL)
DRV_MEM_FUNCS(DRV_LOCAL_DECL)
DRV_VMM_FUNCS(DRV_LOCAL_DECL)
DRV_ASYNC_FUNCS(DRV_LOCAL_DECL)
DRV_COPY_FUNCS(DRV_LOCAL_DECL)
#undef DRV_LOCAL_DECL

/* Defines drv_local_<n>; only in the file that defines n. */
#define DRV_LOCAL(n) extern __typeof__(n) drv_local_##n __attribute__((alias(#n), visibility("hidden")));

#endif /* SIM_DRV_INTERNAL_H */
