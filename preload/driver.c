/* driver.c - the driver-level observer: what the runtime hooks can't see.
 *
 * Every CUDA runtime - the shared libcudart, a statically linked one
 * (nvcc's default), the copies inside CuPy and JAX - reaches the driver
 * the same way: dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2")
 * and then every entry point through cuGetProcAddress. Frameworks that
 * call the driver themselves (JAX's XLA plugin) dlsym each function.
 * Measured on the H200; docs/driver-observer.md has the evidence and why
 * this beats a CUPTI subscriber (one per process: it would take
 * torch.profiler's place).
 *
 * So the observer wraps dlsym: a lookup whose result is one of the driver
 * functions we watch returns our wrapper instead, and cuGetProcAddress's
 * results get the same treatment. Results are swapped by pointer, never
 * by name: whichever ABI version or per-thread-stream variant the caller
 * asked for, it gets the wrapper of exactly that variant, and variants we
 * don't wrap (the 32-bit v1 functions) pass untouched. Programs linked
 * against libcuda bind to the same wrappers through the exported names.
 *
 * Counted once: a driver call made while one of our runtime hooks is in
 * flight on the same thread (the runtime's cudaMalloc calling
 * cuMemAlloc_v2, the pool taking a segment) is not recorded again - the
 * thread's guard makes gmt_call_begin decline it.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define GMT_EXPORT __attribute__((visibility("default")))

/* The cuda.h macros rename some of these (cuGetProcAddress ->
 * cuGetProcAddress_v2); the table only ever stringizes or pastes the
 * names, which macros don't touch. */
#define GMT_DRV_WRAPPED(X)                                                    \
    X(cuGetProcAddress_v2) X(cuGetProcAddress) X(cuInit)                      \
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
    X(cuPointerGetAttribute)

enum {
#define GMT_DRV_ENUM(n) D_##n,
    GMT_DRV_WRAPPED(GMT_DRV_ENUM) GMT_DRV_SELF(GMT_DRV_ENUM) D_COUNT
#undef GMT_DRV_ENUM
};
#define D_WRAPPED_COUNT D_cuCtxGetDevice /* the first of GMT_DRV_SELF */

static const char *const g_names[D_COUNT] = {
#define GMT_DRV_NAME(n) [D_##n] = #n,
    GMT_DRV_WRAPPED(GMT_DRV_NAME) GMT_DRV_SELF(GMT_DRV_NAME)
#undef GMT_DRV_NAME
};

static void *g_real[D_COUNT];    /* libcuda's own functions */
static bool g_table_ready;       /* g_real filled (release/acquire) */
static bool g_observe = true;    /* GPUMEMTRACE_DRIVER, _DISABLE */
static bool g_disabled;          /* GPUMEMTRACE_DISABLE=1 */
static uint64_t g_handed_out;    /* wrappers given to the program */
static bool g_driver_init;       /* the program called cuInit */

static void *(*g_real_dlsym)(void *, const char *);

/* glibc's dlsym: in libc since 2.34, in libdl under the architecture's
 * base version before. */
static void *find_real_dlsym(void)
{
    static const char *const versions[] = {
        "GLIBC_2.34",
#if defined(__x86_64__)
        "GLIBC_2.2.5",
#elif defined(__aarch64__)
        "GLIBC_2.17",
#endif
    };
    void *f = NULL;
    for (size_t i = 0; f == NULL && i < sizeof versions / sizeof *versions; i++)
        f = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f == NULL)
        gmt_warn("glibc's dlsym not found: every dlsym in this process "
                 "fails; unset LD_PRELOAD");
    __atomic_store_n(&g_real_dlsym, (void *(*)(void *, const char *))f,
                     __ATOMIC_RELEASE);
    return f;
}

void *gmt_real_dlsym(void *handle, const char *name)
{
    void *(*f)(void *, const char *) =
        __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (f == NULL && (f = find_real_dlsym()) == NULL)
        return NULL;
    return f(handle, name);
}

/* Fill g_real from the libcuda that `any` (one of its functions, or NULL
 * for "the libcuda.so.1 already loaded") lives in. */
static bool table_init(const void *any)
{
    if (__atomic_load_n(&g_table_ready, __ATOMIC_ACQUIRE))
        return true;
    const char *path = "libcuda.so.1";
    Dl_info di;
    if (any != NULL) {
        if (!dladdr(any, &di) || di.dli_fname == NULL)
            return false;
        const char *base = strrchr(di.dli_fname, '/');
        base = base ? base + 1 : di.dli_fname;
        if (strncmp(base, "libcuda.so", 10) != 0)
            return false;
        path = di.dli_fname;
    }
    /* No lock of ours around the loader's calls: glibc holds its own
     * while constructors run, and a constructor may look a driver
     * function up. Two threads may both fill the table; they write the
     * same values. */
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        dlerror(); /* ours, not the program's */
        return false;
    }
    void *got[D_COUNT]; /* h stays open: the driver stays to the end */
    for (int i = 0; i < D_COUNT; i++)
        got[i] = gmt_real_dlsym(h, g_names[i]);
    dlerror(); /* names an older driver lacks must not look like the
                  program's failed lookup */
    for (int i = 0; i < D_COUNT; i++)
        __atomic_store_n(&g_real[i], got[i], __ATOMIC_RELAXED);
    __atomic_store_n(&g_table_ready, true, __ATOMIC_RELEASE);
    return true;
}

static void *const g_wrappers[D_WRAPPED_COUNT];

/* The wrapper of p if p is a driver function we watch, else p. */
static void *swap(void *p)
{
    if (p == NULL || !table_init(p))
        return p;
    for (int i = 0; i < D_WRAPPED_COUNT; i++) {
        if (g_real[i] == p) {
            __atomic_add_fetch(&g_handed_out, 1, __ATOMIC_RELAXED);
            return g_wrappers[i];
        }
    }
    return p;
}

/* RTLD_NEXT means "after the caller", and glibc finds the caller from the
 * return address: that lookup must leave as a sibling call (a jump), so
 * that the caller glibc sees is the program's, not ours. The Makefile
 * builds this file with sibling calls on whatever CFLAGS say, and the
 * test suite checks the result (tests/progs/driver/nexter.c). */
GMT_EXPORT void *dlsym(void *handle, const char *name)
{
    void *(*f)(void *, const char *) =
        __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (GMT_UNLIKELY(f == NULL) &&
        (f = (void *(*)(void *, const char *))find_real_dlsym()) == NULL)
        return NULL;
    if (handle == RTLD_NEXT || !g_observe ||
        name[0] != 'c' || name[1] != 'u')
        return f(handle, name);
    int saved = errno;
    void *r = f(handle, name);
    for (int i = 0; r != NULL && i < D_WRAPPED_COUNT; i++) {
        /* Our own export, found by a global lookup: it stands for the
         * driver only if there is one ("is libcuda loaded?" probes). */
        if (r == g_wrappers[i]) {
            r = table_init(NULL) && g_real[i] != NULL ? r : NULL;
            errno = saved;
            return r;
        }
    }
    r = swap(r);
    errno = saved;
    return r;
}

/* The real function of a wrapper; the first call of an exported wrapper
 * by a program linked with -lcuda may come before any lookup. */
static void *real(int i)
{
    if (GMT_UNLIKELY(!__atomic_load_n(&g_table_ready, __ATOMIC_ACQUIRE)))
        table_init(NULL);
    return g_real[i];
}
#define REAL(n) ((__typeof__(&gmtw_##n))real(D_##n))
#define MISSING(n) (real(D_##n) == NULL)

/* ---- recording ------------------------------------------------------------ */

static bool begin(struct gmt_call *c, bool stamp_before)
{
    return g_observe && gmt_call_begin(c, stamp_before);
}

static int device_now(struct gmt_thread *t)
{
    CUdevice d;
    CUresult (*f)(CUdevice *) = (CUresult(*)(CUdevice *))real(D_cuCtxGetDevice);
    if (f && f(&d) == CUDA_SUCCESS && d >= 0 && d < GMT_MAX_DEVICES)
        return d;
    return t->last_device;
}

#define DEV_NOW (-1000) /* alloc_done: ask the driver, after errno is kept */

static void emit(struct gmt_call *c, unsigned kind, unsigned api, CUresult r,
                 int dev, uint64_t addr, uint64_t size, uint64_t extra,
                 uint64_t flags, uint64_t stream)
{
    struct gmt_event ev = {
        .kind = (uint8_t)kind,
        .api = (uint8_t)api,
        .result = (int32_t)r,
        .device = dev,
        .addr = r == CUDA_SUCCESS || kind != GMT_K_ALLOC ? addr : 0,
        .size = size,
        .size2 = extra,
        .flags = flags,
    };
    if (stream != GMT_NO_STREAM) {
        ev.has_stream = true;
        ev.stream = stream;
    }
    if (r == CUDA_SUCCESS)
        c->t->last_device = dev;
    gmt_call_emit(c, &ev);
}

static void alloc_done(struct gmt_call *c, unsigned api, CUresult r,
                       int dev, uint64_t addr, uint64_t size, uint64_t extra,
                       uint64_t flags, uint64_t stream)
{
    gmt_call_errno(c);
    if (dev == DEV_NOW)
        dev = r == CUDA_SUCCESS ? device_now(c->t) : c->t->last_device;
    emit(c, GMT_K_ALLOC, api, r, dev, addr, size, extra, flags, stream);
    gmt_mem_maybe_sample(c->t, dev);
    gmt_call_finish(c);
}

static void free_done(struct gmt_call *c, unsigned api, CUresult r,
                      uint64_t addr, uint64_t stream)
{
    gmt_call_errno(c);
    emit(c, GMT_K_FREE, api, r, c->t->last_device, addr, 0, 0, 0, stream);
    gmt_call_finish(c);
}

static void vmm_done(struct gmt_call *c, unsigned api, CUresult r, int dev,
                     uint64_t addr, uint64_t size, uint64_t offset,
                     uint64_t handle)
{
    gmt_call_errno(c);
    uint8_t buf[8 * GMT_VARINT_MAX], *p = buf;
    p = gmt_put_varint(p, api);
    p = gmt_put_varint(p, (uint64_t)r);
    p = gmt_put_varint(p, (uint64_t)(dev < 0 ? 0 : dev));
    p = gmt_put_varint(p, addr);
    p = gmt_put_varint(p, size);
    p = gmt_put_varint(p, offset);
    p = gmt_put_varint(p, handle);
    p = gmt_put_varint(p, c->stack);
    gmt_trace_emit_ext(c->t, GMT_X_VMM, buf, (size_t)(p - buf));
    gmt_call_finish(c);
}

/* ---- the wrappers ----------------------------------------------------------
 * Each has the exact type of the driver function it stands for, and is
 * exported under that function's name (for programs linked with -lcuda).
 */
#define WRAPPER(ret, n, params) GMT_EXPORT ret gmtw_##n params __asm__(#n)

/* A lookup through the driver: swap what it found like dlsym does. */
WRAPPER(CUresult, cuGetProcAddress_v2,
        (const char *symbol, void **pfn, int version, cuuint64_t flags,
         CUdriverProcAddressQueryResult *status));
CUresult gmtw_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                  cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status)
{
    if (MISSING(cuGetProcAddress_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
    int saved = errno;
    if (r == CUDA_SUCCESS && pfn != NULL && g_observe)
        *pfn = swap(*pfn);
    errno = saved;
    return r;
}

WRAPPER(CUresult, cuGetProcAddress,
        (const char *symbol, void **pfn, int version, cuuint64_t flags));
CUresult gmtw_cuGetProcAddress(const char *symbol, void **pfn, int version,
                               cuuint64_t flags)
{
    if (MISSING(cuGetProcAddress))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress)(symbol, pfn, version, flags);
    int saved = errno;
    if (r == CUDA_SUCCESS && pfn != NULL && g_observe)
        *pfn = swap(*pfn);
    errno = saved;
    return r;
}

WRAPPER(CUresult, cuInit, (unsigned int flags));
CUresult gmtw_cuInit(unsigned int flags)
{
    if (MISSING(cuInit))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuInit)(flags);
    if (r == CUDA_SUCCESS)
        __atomic_store_n(&g_driver_init, true, __ATOMIC_RELAXED);
    return r;
}

/* Device memory. */
WRAPPER(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t size));
CUresult gmtw_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAlloc_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAlloc_v2)(dptr, size);
    CUresult r = REAL(cuMemAlloc_v2)(dptr, size);
    alloc_done(&c, GMT_API_CU_MEM_ALLOC, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, size, 0, 0, GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemAllocPitch_v2,
        (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
         unsigned int elem));
CUresult gmtw_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch,
                                 size_t width, size_t height,
                                 unsigned int elem)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocPitch_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    CUresult r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, elem);
    uint64_t want = (uint64_t)width * height;
    uint64_t block = r == CUDA_SUCCESS ? (uint64_t)*pitch * height : want;
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_PITCH, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, want,
               block > want ? block - want : 0, 0, GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemAllocManaged,
        (CUdeviceptr *dptr, size_t size, unsigned int flags));
CUresult gmtw_cuMemAllocManaged(CUdeviceptr *dptr, size_t size,
                                unsigned int flags)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocManaged))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAllocManaged)(dptr, size, flags);
    CUresult r = REAL(cuMemAllocManaged)(dptr, size, flags);
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_MANAGED, r, DEV_NOW,
               r == CUDA_SUCCESS ? *dptr : 0, size, 0, flags, GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemFree_v2, (CUdeviceptr dptr));
CUresult gmtw_cuMemFree_v2(CUdeviceptr dptr)
{
    struct gmt_call c;
    if (MISSING(cuMemFree_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemFree_v2)(dptr);
    CUresult r = REAL(cuMemFree_v2)(dptr);
    free_done(&c, GMT_API_CU_MEM_FREE, r, dptr, GMT_NO_STREAM);
    return r;
}

/* Pinned host memory. */
WRAPPER(CUresult, cuMemAllocHost_v2, (void **pp, size_t size));
CUresult gmtw_cuMemAllocHost_v2(void **pp, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAllocHost_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAllocHost_v2)(pp, size);
    CUresult r = REAL(cuMemAllocHost_v2)(pp, size);
    alloc_done(&c, GMT_API_CU_MEM_ALLOC_HOST, r, c.t->last_device,
               r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, size, 0, 0,
               GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemHostAlloc, (void **pp, size_t size, unsigned int flags));
CUresult gmtw_cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
    struct gmt_call c;
    if (MISSING(cuMemHostAlloc))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemHostAlloc)(pp, size, flags);
    CUresult r = REAL(cuMemHostAlloc)(pp, size, flags);
    alloc_done(&c, GMT_API_CU_MEM_HOST_ALLOC, r, c.t->last_device,
               r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, size, 0, flags,
               GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemFreeHost, (void *p));
CUresult gmtw_cuMemFreeHost(void *p)
{
    struct gmt_call c;
    if (MISSING(cuMemFreeHost))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemFreeHost)(p);
    CUresult r = REAL(cuMemFreeHost)(p);
    free_done(&c, GMT_API_CU_MEM_FREE_HOST, r, (uintptr_t)p, GMT_NO_STREAM);
    return r;
}

/* Virtual memory: physical allocations are the memory; mappings and
 * reservations are address space (GMT_X_VMM). */
WRAPPER(CUresult, cuMemCreate,
        (CUmemGenericAllocationHandle *handle, size_t size,
         const CUmemAllocationProp *prop, unsigned long long flags));
CUresult gmtw_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemCreate)(handle, size, prop, flags);
    CUresult r = REAL(cuMemCreate)(handle, size, prop, flags);
    bool on_device = prop == NULL ||
                     prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    int dev = r == CUDA_SUCCESS && on_device && prop != NULL &&
                      prop->location.id >= 0 &&
                      prop->location.id < GMT_MAX_DEVICES
                  ? prop->location.id
                  : c.t->last_device;
    alloc_done(&c,
               on_device ? GMT_API_CU_MEM_CREATE : GMT_API_CU_MEM_CREATE_HOST,
               r, dev, r == CUDA_SUCCESS ? (uint64_t)*handle : 0, size, 0,
               flags, GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemRelease, (CUmemGenericAllocationHandle handle));
CUresult gmtw_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct gmt_call c;
    if (MISSING(cuMemRelease))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemRelease)(handle);
    CUresult r = REAL(cuMemRelease)(handle);
    free_done(&c, GMT_API_CU_MEM_RELEASE, r, (uint64_t)handle, GMT_NO_STREAM);
    return r;
}

WRAPPER(CUresult, cuMemMap,
        (CUdeviceptr ptr, size_t size, size_t offset,
         CUmemGenericAllocationHandle handle, unsigned long long flags));
CUresult gmtw_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle,
                       unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemMap))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemMap)(ptr, size, offset, handle, flags);
    CUresult r = REAL(cuMemMap)(ptr, size, offset, handle, flags);
    vmm_done(&c, GMT_API_CU_MEM_MAP, r, c.t->last_device, ptr, size, offset,
             (uint64_t)handle);
    return r;
}

WRAPPER(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size));
CUresult gmtw_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemUnmap))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemUnmap)(ptr, size);
    CUresult r = REAL(cuMemUnmap)(ptr, size);
    vmm_done(&c, GMT_API_CU_MEM_UNMAP, r, c.t->last_device, ptr, size, 0, 0);
    return r;
}

WRAPPER(CUresult, cuMemAddressReserve,
        (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
         unsigned long long flags));
CUresult gmtw_cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                  size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags)
{
    struct gmt_call c;
    if (MISSING(cuMemAddressReserve))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, false))
        return REAL(cuMemAddressReserve)(ptr, size, alignment, addr, flags);
    CUresult r = REAL(cuMemAddressReserve)(ptr, size, alignment, addr, flags);
    vmm_done(&c, GMT_API_CU_MEM_ADDRESS_RESERVE, r, c.t->last_device,
             r == CUDA_SUCCESS ? *ptr : 0, size, 0, 0);
    return r;
}

WRAPPER(CUresult, cuMemAddressFree, (CUdeviceptr ptr, size_t size));
CUresult gmtw_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct gmt_call c;
    if (MISSING(cuMemAddressFree))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!begin(&c, true))
        return REAL(cuMemAddressFree)(ptr, size);
    CUresult r = REAL(cuMemAddressFree)(ptr, size);
    vmm_done(&c, GMT_API_CU_MEM_ADDRESS_FREE, r, c.t->last_device, ptr, size,
             0, 0);
    return r;
}

/* ---- stream-ordered pools, as the driver reports them ---------------------
 * The pools that stream-ordered allocations came from (a device's current
 * pool, pools of the program's own) are sampled every GPUMEMTRACE_SAMPLE_MS
 * from the allocating thread: reserved and used bytes and their high
 * watermarks, so a peak between samples is not lost. Also under the
 * runtime's cudaMallocAsync, whose pool is the same. */
#define MAX_POOLS 32
static struct {
    uint64_t pool;
    int dev;
} g_pools[MAX_POOLS];
static int g_npools;
static bool g_pools_full;
static pthread_mutex_t g_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t g_dev_pool_noted[GMT_MAX_DEVICES];
static uint64_t g_pools_sampled[GMT_MAX_DEVICES];

static void pools_sample(struct gmt_thread *t, int dev, bool now_anyway);
static void pool_sample_one(struct gmt_thread *t,
                            CUresult (*get)(CUmemoryPool, CUmemPool_attribute,
                                            void *),
                            int i);
static void pools_at_exit(void);

static void pool_note(uint64_t pool, int dev)
{
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_pools[i].pool == pool && g_pools[i].dev >= 0)
            return;
    if (__atomic_load_n(&g_pools_full, __ATOMIC_RELAXED))
        return; /* more live pools than we follow: the rest go unsampled */
    pthread_mutex_lock(&g_pools_lock);
    bool known = false;
    for (int i = 0; i < g_npools && !known; i++) {
        /* a destroyed pool's slot (or its handle, reused) is taken over */
        if (g_pools[i].pool == pool || g_pools[i].dev < 0) {
            g_pools[i].pool = pool;
            __atomic_store_n(&g_pools[i].dev, dev, __ATOMIC_RELEASE);
            known = true;
        }
    }
    if (!known && g_npools == MAX_POOLS)
        __atomic_store_n(&g_pools_full, true, __ATOMIC_RELAXED);
    if (!known && g_npools < MAX_POOLS) {
        g_pools[g_npools].pool = pool;
        g_pools[g_npools].dev = dev;
        __atomic_store_n(&g_npools, g_npools + 1, __ATOMIC_RELEASE);
        static bool exit_hook;
        if (!exit_hook)
            exit_hook = atexit(pools_at_exit) == 0;
    }
    pthread_mutex_unlock(&g_pools_lock);
}

/* The last samples, with the high watermarks since the one before. Runs
 * from atexit, registered once the driver was in use: before the driver's
 * own teardown, which runs in its destructors. */
static void pools_at_exit(void)
{
    struct gmt_thread *t = gmt_thread_get();
    if (t == NULL || !gmt_tracer_active())
        return;
    t->guard = 1;
    for (int dev = 0; dev < GMT_MAX_DEVICES; dev++)
        if (__atomic_load_n(&g_pools_sampled[dev], __ATOMIC_RELAXED))
            pools_sample(t, dev, true);
    t->guard = 0;
}

static void pools_sample(struct gmt_thread *t, int dev, bool now_anyway)
{
    CUresult (*get)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))
            real(D_cuMemPoolGetAttribute);
    if (get == NULL || gmt_opt.sample_ms <= 0)
        return;
    uint64_t now = gmt_now_ns(), last = g_pools_sampled[dev];
    if (!now_anyway &&
        (now - last < (uint64_t)gmt_opt.sample_ms * 1000000u ||
         !__atomic_compare_exchange_n(&g_pools_sampled[dev], &last, now, false,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)))
        return;
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_pools[i].dev == dev)
            pool_sample_one(t, get, i);
}

static void pool_sample_one(struct gmt_thread *t,
                            CUresult (*get)(CUmemoryPool, CUmemPool_attribute,
                                            void *),
                            int i)
{
    static const CUmemPool_attribute attrs[4] = {
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT, CU_MEMPOOL_ATTR_USED_MEM_HIGH};
    int dev = g_pools[i].dev;
    if (dev >= 0) {
        uint8_t buf[6 * GMT_VARINT_MAX], *p = buf;
        p = gmt_put_varint(p, (uint64_t)dev);
        p = gmt_put_varint(p, g_pools[i].pool);
        bool ok = true;
        for (int a = 0; a < 4 && ok; a++) {
            cuuint64_t v = 0;
            ok = get((CUmemoryPool)(uintptr_t)g_pools[i].pool, attrs[a], &v) ==
                 CUDA_SUCCESS;
            p = gmt_put_varint(p, v);
        }
        if (ok)
            gmt_trace_emit_ext(t, GMT_X_MEMPOOL, buf, (size_t)(p - buf));
    }
}

/* After a stream-ordered allocation (note: the pool it came from; NULL
 * for the device's current pool) or free: sample the device's pools when
 * it is time. Runs whether or not the call itself is recorded. */
static void pools_after(bool note, CUmemoryPool pool)
{
    struct gmt_thread *t = gmt_thread_peek();
    if (t == NULL || !gmt_tracer_active())
        return;
    int dev = device_now(t);
    if (dev < 0 || dev >= GMT_MAX_DEVICES)
        return;
    if (note && pool != NULL) {
        pool_note((uintptr_t)pool, dev);
    } else if (note && !__atomic_load_n(&g_dev_pool_noted[dev], __ATOMIC_RELAXED)) {
        CUresult (*cur)(CUmemoryPool *, CUdevice) =
            (CUresult(*)(CUmemoryPool *, CUdevice))real(D_cuDeviceGetMemPool);
        CUmemoryPool p;
        if (cur && cur(&p, dev) == CUDA_SUCCESS) {
            pool_note((uintptr_t)p, dev);
            __atomic_store_n(&g_dev_pool_noted[dev], 1, __ATOMIC_RELAXED);
        }
    }
    pools_sample(t, dev, false);
}

/* A pool about to go: its last sample first. */
WRAPPER(CUresult, cuMemPoolDestroy, (CUmemoryPool pool));
CUresult gmtw_cuMemPoolDestroy(CUmemoryPool pool)
{
    if (MISSING(cuMemPoolDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    struct gmt_thread *t = gmt_thread_peek();
    CUresult (*get)(CUmemoryPool, CUmemPool_attribute, void *) =
        (CUresult(*)(CUmemoryPool, CUmemPool_attribute, void *))
            real(D_cuMemPoolGetAttribute);
    int saved = errno;
    int n = __atomic_load_n(&g_npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && g_observe && t && !t->guard && get &&
                    gmt_tracer_active(); i++) {
        if (g_pools[i].pool == (uintptr_t)pool && g_pools[i].dev >= 0) {
            t->guard = 1;
            pool_sample_one(t, get, i);
            t->guard = 0;
            __atomic_store_n(&g_pools[i].dev, -1, __ATOMIC_RELAXED);
            __atomic_store_n(&g_pools_full, false, __ATOMIC_RELAXED);
        }
    }
    errno = saved;
    return REAL(cuMemPoolDestroy)(pool);
}

/* Stream-ordered allocation; the _ptsz variants take stream 0 as the
 * per-thread stream. */
static CUresult alloc_async(int fn, bool ptsz, CUdeviceptr *dptr, size_t size,
                            CUmemoryPool pool, CUstream stream)
{
    typedef CUresult (*plain_t)(CUdeviceptr *, size_t, CUstream);
    typedef CUresult (*pool_t)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    void *f = real(fn);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool from_pool = fn == D_cuMemAllocFromPoolAsync ||
                     fn == D_cuMemAllocFromPoolAsync_ptsz;
    struct gmt_call c;
    bool rec = begin(&c, false);
    CUresult r = from_pool ? ((pool_t)f)(dptr, size, pool, stream)
                           : ((plain_t)f)(dptr, size, stream);
    int saved = errno;
    if (g_observe && r == CUDA_SUCCESS)
        pools_after(true, from_pool ? pool : NULL);
    errno = saved;
    if (!rec)
        return r;
    unsigned api = (from_pool ? GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC
                              : GMT_API_CU_MEM_ALLOC_ASYNC) |
                   (ptsz ? GMT_API_PTDS : 0);
    alloc_done(&c, api, r, DEV_NOW, r == CUDA_SUCCESS ? *dptr : 0,
               size, 0, (uintptr_t)pool, gmt_stream_of(stream, ptsz));
    return r;
}

static CUresult free_async(int fn, bool ptsz, CUdeviceptr dptr,
                           CUstream stream)
{
    CUresult (*f)(CUdeviceptr, CUstream) =
        (CUresult(*)(CUdeviceptr, CUstream))real(fn);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct gmt_call c;
    bool rec = begin(&c, true);
    CUresult r = f(dptr, stream);
    int saved = errno;
    if (g_observe && r == CUDA_SUCCESS)
        pools_after(false, NULL);
    errno = saved;
    if (!rec)
        return r;
    free_done(&c, GMT_API_CU_MEM_FREE_ASYNC | (ptsz ? GMT_API_PTDS : 0), r,
              dptr, gmt_stream_of(stream, ptsz));
    return r;
}

WRAPPER(CUresult, cuMemAllocAsync,
        (CUdeviceptr *dptr, size_t size, CUstream stream));
CUresult gmtw_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(D_cuMemAllocAsync, false, dptr, size, NULL, stream);
}

WRAPPER(CUresult, cuMemAllocAsync_ptsz,
        (CUdeviceptr *dptr, size_t size, CUstream stream));
CUresult gmtw_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                   CUstream stream)
{
    return alloc_async(D_cuMemAllocAsync_ptsz, true, dptr, size, NULL, stream);
}

WRAPPER(CUresult, cuMemAllocFromPoolAsync,
        (CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream));
CUresult gmtw_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size,
                                      CUmemoryPool pool, CUstream stream)
{
    return alloc_async(D_cuMemAllocFromPoolAsync, false, dptr, size, pool,
                       stream);
}

WRAPPER(CUresult, cuMemAllocFromPoolAsync_ptsz,
        (CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream));
CUresult gmtw_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                           CUmemoryPool pool, CUstream stream)
{
    return alloc_async(D_cuMemAllocFromPoolAsync_ptsz, true, dptr, size, pool,
                       stream);
}

WRAPPER(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream));
CUresult gmtw_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    return free_async(D_cuMemFreeAsync, false, dptr, stream);
}

WRAPPER(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream stream));
CUresult gmtw_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return free_async(D_cuMemFreeAsync_ptsz, true, dptr, stream);
}

/* ---- copies and sets -------------------------------------------------------
 * What a statically linked runtime's cudaMemcpy/cudaMemset become, and
 * what JAX calls directly: recorded like the runtime's (GMT_K_MEMCPY with
 * the direction and, for the host side, pinned or pageable). */

/* The kind of memory at p: GMT_PTR_*. The driver answers "invalid value"
 * for memory it does not know: pageable host memory. */
static int ptr_class(uint64_t p)
{
    CUresult (*f)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))
            real(D_cuPointerGetAttribute);
    unsigned type = 0;
    if (f == NULL)
        return GMT_PTR_UNKNOWN;
    CUresult r = f(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return GMT_PTR_PAGEABLE;
    if (r != CUDA_SUCCESS)
        return GMT_PTR_UNKNOWN;
    return type == CU_MEMORYTYPE_HOST ? GMT_PTR_PINNED : GMT_PTR_DEVICE;
}

static unsigned hostmem_of(int cls)
{
    return cls == GMT_PTR_PINNED     ? GMT_HOSTMEM_PINNED
           : cls == GMT_PTR_PAGEABLE ? GMT_HOSTMEM_PAGEABLE
                                     : GMT_HOSTMEM_UNKNOWN;
}

/* dir: GMT_DIR_H2D/D2H/D2D, or GMT_DIR_UNKNOWN for a unified-address copy
 * (cuMemcpy), resolved from the pointers. */
static uint8_t copy_dir(CUresult r, unsigned dir, uint64_t dst, uint64_t src)
{
    if (r != CUDA_SUCCESS) /* pointers may be garbage */
        return (uint8_t)dir;
    if (dir == GMT_DIR_UNKNOWN) {
        int cd = ptr_class(dst), cs = ptr_class(src);
        if (cd == GMT_PTR_UNKNOWN || cs == GMT_PTR_UNKNOWN)
            return GMT_DIR_UNKNOWN;
        bool dd = cd == GMT_PTR_DEVICE, sd = cs == GMT_PTR_DEVICE;
        dir = sd ? (dd ? GMT_DIR_D2D : GMT_DIR_D2H)
                 : (dd ? GMT_DIR_H2D : GMT_DIR_H2H);
        if (dir == GMT_DIR_H2D)
            return (uint8_t)(dir | hostmem_of(cs) << GMT_HOSTMEM_SHIFT);
        if (dir == GMT_DIR_D2H)
            return (uint8_t)(dir | hostmem_of(cd) << GMT_HOSTMEM_SHIFT);
        return (uint8_t)dir;
    }
    if ((dir != GMT_DIR_H2D && dir != GMT_DIR_D2H) || !gmt_opt.hostmem)
        return (uint8_t)dir;
    uint64_t host = dir == GMT_DIR_H2D ? src : dst;
    return (uint8_t)(dir | hostmem_of(ptr_class(host)) << GMT_HOSTMEM_SHIFT);
}

static void copy_done(struct gmt_call *c, CUresult r, unsigned kind,
                      unsigned dir, uint64_t dst, uint64_t src, uint64_t bytes,
                      uint64_t value, bool ptds, bool async, CUstream stream)
{
    gmt_call_errno(c);
    struct gmt_event ev = {
        .kind = (uint8_t)kind,
        .api = (uint8_t)((kind == GMT_K_MEMCPY ? GMT_API_CU_MEMCPY
                                               : GMT_API_CU_MEMSET) |
                         (ptds ? GMT_API_PTDS : 0)),
        .result = (int32_t)r,
        .device = r == CUDA_SUCCESS ? device_now(c->t) : c->t->last_device,
        .addr = dst,
        .addr2 = src,
        .size = bytes,
        .value = value,
    };
    if (kind == GMT_K_MEMCPY)
        ev.dir = copy_dir(r, dir, dst, src);
    if (async) {
        ev.has_stream = true;
        ev.stream = gmt_stream_of(stream, ptds);
    }
    gmt_call_emit(c, &ev);
    gmt_call_finish(c);
}

/* One wrapper per exported variant, each with its function's own types. */
#define COPY(name, DT, ST, DIR, PT)                                           \
    WRAPPER(CUresult, name, (DT dst, ST src, size_t n));                      \
    CUresult gmtw_##name(DT dst, ST src, size_t n)                            \
    {                                                                         \
        CUresult (*f)(DT, ST, size_t) =                                       \
            (CUresult(*)(DT, ST, size_t))real(D_##name);                      \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, src, n);                                            \
        CUresult r = f(dst, src, n);                                          \
        copy_done(&c, r, GMT_K_MEMCPY, DIR, (uintptr_t)dst, (uintptr_t)src,   \
                  n, 0, PT, false, NULL);                                     \
        return r;                                                             \
    }
#define COPY_ASYNC(name, DT, ST, DIR, PT)                                     \
    WRAPPER(CUresult, name, (DT dst, ST src, size_t n, CUstream s));          \
    CUresult gmtw_##name(DT dst, ST src, size_t n, CUstream s)                \
    {                                                                         \
        CUresult (*f)(DT, ST, size_t, CUstream) =                             \
            (CUresult(*)(DT, ST, size_t, CUstream))real(D_##name);            \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, src, n, s);                                         \
        CUresult r = f(dst, src, n, s);                                       \
        copy_done(&c, r, GMT_K_MEMCPY, DIR, (uintptr_t)dst, (uintptr_t)src,   \
                  n, 0, PT, true, s);                                         \
        return r;                                                             \
    }
#define SET(name, VT, SIZE, PT)                                               \
    WRAPPER(CUresult, name, (CUdeviceptr dst, VT v, size_t n));               \
    CUresult gmtw_##name(CUdeviceptr dst, VT v, size_t n)                     \
    {                                                                         \
        CUresult (*f)(CUdeviceptr, VT, size_t) =                              \
            (CUresult(*)(CUdeviceptr, VT, size_t))real(D_##name);             \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, v, n);                                              \
        CUresult r = f(dst, v, n);                                            \
        copy_done(&c, r, GMT_K_MEMSET, 0, dst, 0, (uint64_t)n * (SIZE),       \
                  (uint64_t)v, PT, false, NULL);                              \
        return r;                                                             \
    }
#define SET_ASYNC(name, VT, SIZE, PT)                                         \
    WRAPPER(CUresult, name, (CUdeviceptr dst, VT v, size_t n, CUstream s));   \
    CUresult gmtw_##name(CUdeviceptr dst, VT v, size_t n, CUstream s)         \
    {                                                                         \
        CUresult (*f)(CUdeviceptr, VT, size_t, CUstream) =                    \
            (CUresult(*)(CUdeviceptr, VT, size_t, CUstream))real(D_##name);   \
        struct gmt_call c;                                                    \
        if (f == NULL)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if (!begin(&c, false))                                                \
            return f(dst, v, n, s);                                           \
        CUresult r = f(dst, v, n, s);                                         \
        copy_done(&c, r, GMT_K_MEMSET, 0, dst, 0, (uint64_t)n * (SIZE),       \
                  (uint64_t)v, PT, true, s);                                  \
        return r;                                                             \
    }

COPY(cuMemcpy, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, false)
COPY(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, true)
COPY_ASYNC(cuMemcpyAsync, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, false)
COPY_ASYNC(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr, GMT_DIR_UNKNOWN, true)
COPY(cuMemcpyHtoD_v2, CUdeviceptr, const void *, GMT_DIR_H2D, false)
COPY(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *, GMT_DIR_H2D, true)
COPY(cuMemcpyDtoH_v2, void *, CUdeviceptr, GMT_DIR_D2H, false)
COPY(cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr, GMT_DIR_D2H, true)
COPY(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, false)
COPY(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, true)
COPY_ASYNC(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *, GMT_DIR_H2D, false)
COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *, GMT_DIR_H2D, true)
COPY_ASYNC(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr, GMT_DIR_D2H, false)
COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr, GMT_DIR_D2H, true)
COPY_ASYNC(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, false)
COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr, GMT_DIR_D2D, true)
SET(cuMemsetD8_v2, unsigned char, 1, false)
SET(cuMemsetD8_v2_ptds, unsigned char, 1, true)
SET(cuMemsetD16_v2, unsigned short, 2, false)
SET(cuMemsetD16_v2_ptds, unsigned short, 2, true)
SET(cuMemsetD32_v2, unsigned int, 4, false)
SET(cuMemsetD32_v2_ptds, unsigned int, 4, true)
SET_ASYNC(cuMemsetD8Async, unsigned char, 1, false)
SET_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, true)
SET_ASYNC(cuMemsetD16Async, unsigned short, 2, false)
SET_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, true)
SET_ASYNC(cuMemsetD32Async, unsigned int, 4, false)
SET_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, true)

static void *const g_wrappers[D_WRAPPED_COUNT] = {
#define GMT_DRV_WRAP(n) [D_##n] = (void *)gmtw_##n,
    GMT_DRV_WRAPPED(GMT_DRV_WRAP)
#undef GMT_DRV_WRAP
};

/* ---- what the rest of the library asks ------------------------------------ */

bool gmt_drv_device_info(int dev, struct gmt_devinfo *out)
{
    if (!__atomic_load_n(&g_table_ready, __ATOMIC_ACQUIRE))
        return false;
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))
        g_real[D_cuDeviceGet];
    CUresult (*name)(char *, int, CUdevice) = (CUresult(*)(char *, int,
                                                           CUdevice))
        g_real[D_cuDeviceGetName];
    CUresult (*total)(size_t *, CUdevice) = (CUresult(*)(size_t *, CUdevice))
        g_real[D_cuDeviceTotalMem_v2];
    CUresult (*uuid)(CUuuid *, CUdevice) = (CUresult(*)(CUuuid *, CUdevice))
        g_real[D_cuDeviceGetUuid_v2];
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))
            g_real[D_cuDeviceGetAttribute];
    CUdevice d;
    size_t bytes = 0;
    CUuuid u;
    memset(out, 0, sizeof *out);
    if (!get || !name || !total || get(&d, dev) != CUDA_SUCCESS ||
        name(out->name, (int)sizeof out->name - 1, d) != CUDA_SUCCESS ||
        total(&bytes, d) != CUDA_SUCCESS)
        return false;
    out->total = bytes;
    if (uuid && uuid(&u, d) == CUDA_SUCCESS)
        memcpy(out->uuid, u.bytes, 16);
    static const CUdevice_attribute attrs[5] = {
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR};
    for (int i = 0; i < 5; i++)
        if (!attr || attr(&out->attr[i], attrs[i], d) != CUDA_SUCCESS ||
            out->attr[i] < 0)
            out->attr[i] = 0;
    return true;
}

bool gmt_drv_mem_info(size_t *free_b, size_t *total_b)
{
    if (!__atomic_load_n(&g_table_ready, __ATOMIC_ACQUIRE))
        return false;
    CUresult (*f)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))
        g_real[D_cuMemGetInfo_v2];
    return f && f(free_b, total_b) == CUDA_SUCCESS;
}

/* The parent's pools mean nothing in a forked child, and the lock may
 * have been held by a thread that does not exist there. */
void gmt_drv_reset_after_fork(void)
{
    pthread_mutex_init(&g_pools_lock, NULL);
    g_npools = 0;
    g_pools_full = false;
    memset(g_dev_pool_noted, 0, sizeof g_dev_pool_noted);
    memset(g_pools_sampled, 0, sizeof g_pools_sampled);
}

/* Why nothing was recorded in a process that used the driver (at exit,
 * when no hooked call happened); NULL: it did not use the driver. */
const char *gmt_drv_silence_reason(void)
{
    if (g_disabled)
        return NULL; /* the user asked for nothing */
    if (!g_observe) /* the caller saw libcuda loaded */
        return "the driver-level observer is off (GPUMEMTRACE_DRIVER=0) and "
               "no call went through a dynamically linked CUDA runtime";
    if (!__atomic_load_n(&g_driver_init, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&g_table_ready, __ATOMIC_ACQUIRE))
        return NULL;
    if (__atomic_load_n(&g_handed_out, __ATOMIC_RELAXED) == 0)
        return "the program reached the CUDA driver without looking its "
               "functions up through dlsym or cuGetProcAddress, so "
               "gpumemtrace could not see its memory calls";
    return "the program made no CUDA memory call (allocation, free, "
           "mapping)";
}

/* Read before main, while the process is single-threaded: dlsym runs long
 * before the tracer loads its options. */
__attribute__((constructor)) static void driver_options(void)
{
    const char *d = getenv("GPUMEMTRACE_DRIVER");
    const char *off = getenv("GPUMEMTRACE_DISABLE");
    g_disabled = off && strcmp(off, "1") == 0;
    if ((d && strcmp(d, "0") == 0) || g_disabled)
        g_observe = false;
}
