/*
 * sim_driver.c - a simulated CUDA driver, libcuda.so.1 (tests/sim, see
 * README.md), backed by host memory, for the CPU test suite.  This file is
 * its core: the state, the environment, devices and context,
 * cuGetProcAddress and the exit statistics.  The rest is in sim_drv_*.c,
 * listed in sim_drv_internal.h (the driver's private header).
 *
 * It stands in for NVIDIA's driver in two roles: what a program that uses
 * the driver API links or dlopens, and what the simulated runtime reaches
 * underneath its allocations when SIM_CUDA_DRIVER=1 (sim_mem.c).  It is a
 * separate library with its own state: it shares no code with the runtime
 * simulator (whose sources it must not be linked with), only the
 * conventions: SIM_CUDA_DEVICES and SIM_CUDA_MEM, the device name and UUID,
 * 512-byte aligned device memory and 4096-byte aligned pinned host memory.
 *
 * Exported: the device queries, the allocation, virtual memory and
 * stream-ordered calls a memory profiler watches, the linear copies and
 * sets (done at once) with cuPointerGetAttribute, cuGetProcAddress (v1 and
 * _v2) with the real driver's version and per-thread-stream rules, and
 * simDrvSetDevice for tests.  Everything else is static, or hidden where
 * the driver's files share it; libcuda.map exports only cu[A-Z]* and
 * simDrv[A-Z]*.
 *
 * cuGetProcAddress must hand out exactly the addresses dlsym finds in this
 * library, even when a preloaded library (the profiler) exports the same
 * names: in a -fPIC library a plain &cuMemAlloc_v2 goes through the GOT
 * and would yield the interposer's function.  The lookup table therefore
 * uses hidden aliases (DRV_LOCAL, sim_drv_internal.h), which bind locally;
 * for the same reason no exported function calls another exported one.
 *
 * One mutex protects all state; the current device is per thread.  The
 * model is deliberately simple: nothing runs on streams, so stream-ordered
 * frees, copies and sets take effect at once, and memory mapped through the
 * virtual memory calls is never readable (the physical handles are
 * bookkeeping only).
 */
#include "sim_drv_internal.h"
#include "sim_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* State                                                               */
/* ------------------------------------------------------------------ */

/* The types are in sim_drv_internal.h; the lock guards all of drv. */
struct drv_state drv = { .lock = PTHREAD_MUTEX_INITIALIZER };

_Thread_local int drv_tls_device;  /* current device, default 0 */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */
/* ------------------------------------------------------------------ */

static void drv_init_once(void)
{
    const char *env;
    unsigned long long ndev = 1, cap = 1ULL << 30;

    env = getenv("SIM_CUDA_DEVICES");
    if (env && *env) {
        int bad = sim_parse_devices(env, DRV_MAX_DEVICES, &ndev); /* 0: none */
        if (bad == 1)
            fprintf(stderr, "simcuda: invalid SIM_CUDA_DEVICES=\"%s\", using 1 device\n", env);
        else if (bad == 2)
            fprintf(stderr, "simcuda: SIM_CUDA_DEVICES=%s exceeds the maximum, using 8 devices\n", env);
    }
    env = getenv("SIM_CUDA_MEM");
    if (env && *env && !sim_parse_size(env, &cap)) {
        fprintf(stderr, "simcuda: invalid SIM_CUDA_MEM=\"%s\", using 1G per device\n", env);
        cap = 1ULL << 30;
    }
    if (cap > (unsigned long long)SIZE_MAX)
        cap = SIZE_MAX;

    pthread_mutex_lock(&drv.lock);
    drv.ndev = (int)ndev;
    drv.capacity = (size_t)cap;
    drv.tab_bits = 10;
    drv.tab = calloc((size_t)1 << drv.tab_bits, sizeof *drv.tab);
    for (int d = 0; d < drv.ndev; d++)
        drv.dev[d].default_pool = drv_pool_new(d, true, 0);
    pthread_mutex_unlock(&drv.lock);
}

/* Every entry point starts here.  Returns CUDA_ERROR_NO_DEVICE when
 * SIM_CUDA_DEVICES=0, or when init could not get its memory. */
CUresult drv_enter(void)
{
    (void)pthread_once(&drv_once, drv_init_once);
    if (drv.ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (!drv.tab || !drv.dev[drv.ndev - 1].default_pool)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

bool drv_valid_device(CUdevice dev)
{
    return dev >= 0 && dev < drv.ndev;
}

CUresult drv_enter_device(CUdevice dev)
{
    CUresult r = drv_enter();
    if (r == CUDA_SUCCESS && !drv_valid_device(dev))
        r = CUDA_ERROR_INVALID_DEVICE;
    return r;
}

/* ------------------------------------------------------------------ */
/* Initialisation, versions, devices, context                          */
/* ------------------------------------------------------------------ */

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return drv_enter();
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = DRV_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(ordinal);
    if (r != CUDA_SUCCESS)
        return r;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    (void)drv_enter();
    *count = drv.ndev;
    return CUDA_SUCCESS;
}

/* Every simulated device reaches every other's memory (sim_drv_vmm.c
 * maps for any of them). */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r == CUDA_SUCCESS && !drv_valid_device(peerDev))
        r = CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS)
        *canAccessPeer = dev != peerDev;
    return r;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    snprintf(name, (size_t)len, "%s", "gpumemtrace simulated device");
    return CUDA_SUCCESS;
}

static CUresult drv_total_mem(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    *bytes = drv.capacity;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    return drv_total_mem(bytes, dev);
}

/* The 32-bit ABI saturates rather than wrapping. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_total_mem(&b, dev);
    if (r == CUDA_SUCCESS)
        *bytes = b > UINT_MAX ? UINT_MAX : (unsigned int)b;
    return r;
}

/* The runtime simulator's UUID: "gmtsim-gpu-0", three zeros, the ordinal. */
static CUresult drv_uuid(CUuuid *uuid, CUdevice dev)
{
    static const char prefix[12] = { 'g', 'm', 't', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '0' };
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    memset(uuid->bytes, 0, sizeof uuid->bytes);
    memcpy(uuid->bytes, prefix, sizeof prefix);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return drv_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return drv_uuid(uuid, dev);
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r == CUDA_SUCCESS)
        *device = drv_tls_device;
    return r;
}

CUresult simDrvSetDevice(int ordinal)
{
    CUresult r = drv_enter_device(ordinal);
    if (r != CUDA_SUCCESS)
        return r;
    drv_tls_device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult drv_mem_info(size_t *free_b, size_t *total_b)
{
    if (!free_b || !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_enter();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&drv.lock);
    *free_b = (size_t)sim_free_reported(drv.capacity - drv.dev[drv_tls_device].used);
    *total_b = drv.capacity;
    pthread_mutex_unlock(&drv.lock);
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    return drv_mem_info(free_b, total_b);
}

CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b)
{
    size_t f = 0, t = 0;
    if (!free_b || !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv_mem_info(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free_b = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        *total_b = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return r;
}

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                    */
/* ------------------------------------------------------------------ */

/* The hidden aliases of this file's functions; each of the other files
 * defines those of its own (sim_drv_internal.h). */
DRV_CORE_FUNCS(DRV_LOCAL)

#define F(n) ((void *)drv_local_##n)

/*
 * What cuGetProcAddress knows, by base name.  `since`: the first CUDA
 * version that has the function (an older request gets SUCCESS, a NULL
 * pointer and VERSION_NOT_SUFFICIENT, as the real driver answers);
 * `v2_since`: from that version on the _v2 ABI is returned, before it the
 * base one; `ptsz`: the per-thread-default-stream variant, returned for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM from `ptsz_since` on
 * (before it that flag gets SUCCESS, NULL and VERSION_NOT_SUFFICIENT, even
 * where the default one is found).  Versions as measured on driver 580
 * (H200).
 */
static const struct drv_sym {
    const char *name;
    int since;
    void *base;
    int v2_since;
    void *v2;
    void *ptsz;
    int ptsz_since;
} drv_syms[] = {
    { "cuInit", 2000, F(cuInit), 0, NULL, NULL, 0 },
    { "cuDriverGetVersion", 2020, F(cuDriverGetVersion), 0, NULL, NULL, 0 },
    { "cuDeviceGet", 2000, F(cuDeviceGet), 0, NULL, NULL, 0 },
    { "cuDeviceGetCount", 2000, F(cuDeviceGetCount), 0, NULL, NULL, 0 },
    { "cuDeviceCanAccessPeer", 4000, F(cuDeviceCanAccessPeer), 0, NULL, NULL, 0 },
    { "cuDeviceGetName", 2000, F(cuDeviceGetName), 0, NULL, NULL, 0 },
    { "cuDeviceTotalMem", 2000, F(cuDeviceTotalMem), 3020, F(cuDeviceTotalMem_v2), NULL, 0 },
    { "cuDeviceGetUuid", 9020, F(cuDeviceGetUuid), 11040, F(cuDeviceGetUuid_v2), NULL, 0 },
    { "cuDeviceGetAttribute", 2000, F(cuDeviceGetAttribute), 0, NULL, NULL, 0 },
    { "cuCtxGetDevice", 2000, F(cuCtxGetDevice), 0, NULL, NULL, 0 },
    { "cuMemGetInfo", 2000, F(cuMemGetInfo), 3020, F(cuMemGetInfo_v2), NULL, 0 },
    { "cuMemAlloc", 2000, F(cuMemAlloc), 3020, F(cuMemAlloc_v2), NULL, 0 },
    { "cuMemFree", 2000, F(cuMemFree), 3020, F(cuMemFree_v2), NULL, 0 },
    { "cuMemAllocPitch", 2000, F(cuMemAllocPitch), 3020, F(cuMemAllocPitch_v2), NULL, 0 },
    { "cuMemAllocManaged", 6000, F(cuMemAllocManaged), 0, NULL, NULL, 0 },
    { "cuMemAllocHost", 2000, F(cuMemAllocHost), 3020, F(cuMemAllocHost_v2), NULL, 0 },
    { "cuMemHostAlloc", 2020, F(cuMemHostAlloc), 0, NULL, NULL, 0 },
    { "cuMemFreeHost", 2000, F(cuMemFreeHost), 0, NULL, NULL, 0 },
    { "cuMemGetAllocationGranularity", 10020, F(cuMemGetAllocationGranularity), 0, NULL, NULL, 0 },
    { "cuMemCreate", 10020, F(cuMemCreate), 0, NULL, NULL, 0 },
    { "cuMemRelease", 10020, F(cuMemRelease), 0, NULL, NULL, 0 },
    { "cuMemAddressReserve", 10020, F(cuMemAddressReserve), 0, NULL, NULL, 0 },
    { "cuMemAddressFree", 10020, F(cuMemAddressFree), 0, NULL, NULL, 0 },
    { "cuMemMap", 10020, F(cuMemMap), 0, NULL, NULL, 0 },
    { "cuMemUnmap", 10020, F(cuMemUnmap), 0, NULL, NULL, 0 },
    { "cuMemSetAccess", 10020, F(cuMemSetAccess), 0, NULL, NULL, 0 },
    { "cuMemAllocAsync", 11020, F(cuMemAllocAsync), 0, NULL, F(cuMemAllocAsync_ptsz), 11020 },
    { "cuMemAllocFromPoolAsync", 11020, F(cuMemAllocFromPoolAsync), 0, NULL,
      F(cuMemAllocFromPoolAsync_ptsz), 11020 },
    { "cuMemFreeAsync", 11020, F(cuMemFreeAsync), 0, NULL, F(cuMemFreeAsync_ptsz), 11020 },
    { "cuMemPoolCreate", 11020, F(cuMemPoolCreate), 0, NULL, NULL, 0 },
    { "cuMemPoolDestroy", 11020, F(cuMemPoolDestroy), 0, NULL, NULL, 0 },
    { "cuDeviceGetDefaultMemPool", 11020, F(cuDeviceGetDefaultMemPool), 0, NULL, NULL, 0 },
    { "cuDeviceGetMemPool", 11020, F(cuDeviceGetMemPool), 0, NULL, NULL, 0 },
    { "cuMemPoolGetAttribute", 11020, F(cuMemPoolGetAttribute), 0, NULL, NULL, 0 },
    { "cuMemPoolTrimTo", 11020, F(cuMemPoolTrimTo), 0, NULL, NULL, 0 },
    { "cuStreamCreate", 2000, F(cuStreamCreate), 0, NULL, NULL, 0 },
    { "cuStreamDestroy", 2000, F(cuStreamDestroy), 4000, F(cuStreamDestroy_v2), NULL, 0 },
    { "cuStreamSynchronize", 2000, F(cuStreamSynchronize), 0, NULL, F(cuStreamSynchronize_ptsz), 7000 },
    { "cuGetProcAddress", 11030, F(cuGetProcAddress), 12050, F(cuGetProcAddress_v2), NULL, 0 },
    { "cuMemcpy", 4000, F(cuMemcpy), 0, NULL, F(cuMemcpy_ptds), 7000 },
    { "cuMemcpyAsync", 4000, F(cuMemcpyAsync), 0, NULL, F(cuMemcpyAsync_ptsz), 7000 },
    { "cuMemcpyHtoD", 2000, F(cuMemcpyHtoD), 3020, F(cuMemcpyHtoD_v2), F(cuMemcpyHtoD_v2_ptds), 7000 },
    { "cuMemcpyDtoH", 2000, F(cuMemcpyDtoH), 3020, F(cuMemcpyDtoH_v2), F(cuMemcpyDtoH_v2_ptds), 7000 },
    { "cuMemcpyDtoD", 2000, F(cuMemcpyDtoD), 3020, F(cuMemcpyDtoD_v2), F(cuMemcpyDtoD_v2_ptds), 7000 },
    { "cuMemcpyHtoDAsync", 2000, F(cuMemcpyHtoDAsync), 3020, F(cuMemcpyHtoDAsync_v2),
      F(cuMemcpyHtoDAsync_v2_ptsz), 7000 },
    { "cuMemcpyDtoHAsync", 2000, F(cuMemcpyDtoHAsync), 3020, F(cuMemcpyDtoHAsync_v2),
      F(cuMemcpyDtoHAsync_v2_ptsz), 7000 },
    { "cuMemcpyDtoDAsync", 3000, F(cuMemcpyDtoDAsync), 3020, F(cuMemcpyDtoDAsync_v2),
      F(cuMemcpyDtoDAsync_v2_ptsz), 7000 },
    { "cuMemsetD8", 2000, F(cuMemsetD8), 3020, F(cuMemsetD8_v2), F(cuMemsetD8_v2_ptds), 7000 },
    { "cuMemsetD16", 2000, F(cuMemsetD16), 3020, F(cuMemsetD16_v2), F(cuMemsetD16_v2_ptds), 7000 },
    { "cuMemsetD32", 2000, F(cuMemsetD32), 3020, F(cuMemsetD32_v2), F(cuMemsetD32_v2_ptds), 7000 },
    { "cuMemsetD8Async", 3020, F(cuMemsetD8Async), 0, NULL, F(cuMemsetD8Async_ptsz), 7000 },
    { "cuMemsetD16Async", 3020, F(cuMemsetD16Async), 0, NULL, F(cuMemsetD16Async_ptsz), 7000 },
    { "cuMemsetD32Async", 3020, F(cuMemsetD32Async), 0, NULL, F(cuMemsetD32Async_ptsz), 7000 },
    { "cuPointerGetAttribute", 4000, F(cuPointerGetAttribute), 0, NULL, NULL, 0 },
};

#undef F

static CUresult drv_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof drv_syms / sizeof drv_syms[0]; i++) {
        const struct drv_sym *e = &drv_syms[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        if (cudaVersion < e->since) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_SUCCESS;
        }
        bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && e->ptsz;
        if (ptsz && cudaVersion < e->ptsz_since) {
            if (status)
                *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            return CUDA_SUCCESS;
        }
        if (ptsz)
            *pfn = e->ptsz;
        else if (e->v2 && cudaVersion >= e->v2_since)
            *pfn = e->v2;
        else
            *pfn = e->base;
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        pthread_mutex_lock(&drv.lock);
        drv.n_lookup++;
        pthread_mutex_unlock(&drv.lock);
        return CUDA_SUCCESS;
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return drv_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return drv_proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------ */
/* Statistics                                                          */
/* ------------------------------------------------------------------ */

/* SIM_CUDA_DRIVER_STATS=1: one line on stderr at exit, so that a test can
 * tell the driver was really called (e.g. by the runtime simulator under
 * SIM_CUDA_DRIVER=1).  Allocations count every successful allocating
 * call including cuMemCreate; frees include cuMemRelease. */
__attribute__((destructor)) static void drv_print_stats(void)
{
    const char *env = getenv("SIM_CUDA_DRIVER_STATS");
    if (!env || strcmp(env, "1") != 0)
        return;
    pthread_mutex_lock(&drv.lock);
    unsigned long long na = drv.n_alloc, nf = drv.n_free, nl = drv.n_lookup;
    pthread_mutex_unlock(&drv.lock);
    fprintf(stderr, "sim driver: %llu allocations, %llu frees, %llu lookups\n", na, nf, nl);
}
