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
 * This file finds the driver's functions and hands the wrappers out; the
 * wrappers of the memory calls, and what they record, are in
 * driver_calls.c; driver.h is what the two share.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "internal.h"

static const char *const g_names[D_COUNT] = {
#define GMT_DRV_NAME(n) [D_##n] = #n,
    GMT_DRV_WRAPPED(GMT_DRV_NAME) GMT_DRV_SELF(GMT_DRV_NAME)
#undef GMT_DRV_NAME
};

void *gmt_drv_real[D_COUNT];     /* libcuda's own functions */
bool gmt_drv_table_ready;        /* gmt_drv_real filled (release/acquire) */
bool gmt_drv_observe = true;     /* GPUMEMTRACE_DRIVER, _DISABLE */
static bool g_disabled;          /* GPUMEMTRACE_DISABLE=1 */
static uint64_t g_handed_out;    /* wrappers given to the program */
static bool g_driver_init;       /* the program called cuInit */

static void *(*g_real_dlsym)(void *, const char *);

/* Our dlsym runs before a sanitizer runtime has set itself up (ASan
 * looks its interceptors' targets up with dlsym, from its own init): in a
 * sanitizer build of the library (docs/ci.md), the two functions on that
 * path are not instrumented. No effect on a normal build. */
#define GMT_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* glibc's dlsym: in libc since 2.34, in libdl under the architecture's
 * base version before. */
GMT_NO_SANITIZE static void *find_real_dlsym(void)
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

/* Fill gmt_drv_real from the libcuda that `any` (one of its functions, or
 * NULL for "the libcuda.so.1 already loaded") lives in. */
bool gmt_drv_table_init(const void *any)
{
    if (__atomic_load_n(&gmt_drv_table_ready, __ATOMIC_ACQUIRE))
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
        __atomic_store_n(&gmt_drv_real[i], got[i], __ATOMIC_RELAXED);
    __atomic_store_n(&gmt_drv_table_ready, true, __ATOMIC_RELEASE);
    return true;
}

/* What dlsym and cuGetProcAddress hand out in place of libcuda's functions. */
static void *const g_wrappers[D_WRAPPED_COUNT] = {
#define GMT_DRV_WRAP(n) [D_##n] = (void *)gmtw_##n,
    GMT_DRV_WRAPPED(GMT_DRV_WRAP)
#undef GMT_DRV_WRAP
};

/* The wrapper of p if p is a driver function we watch, else p. */
static void *swap(void *p)
{
    if (p == NULL || !gmt_drv_table_init(p))
        return p;
    for (int i = 0; i < D_WRAPPED_COUNT; i++) {
        if (gmt_drv_real[i] == p) {
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
GMT_EXPORT GMT_NO_SANITIZE void *dlsym(void *handle, const char *name)
{
    void *(*f)(void *, const char *) =
        __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
    if (GMT_UNLIKELY(f == NULL) &&
        (f = (void *(*)(void *, const char *))find_real_dlsym()) == NULL)
        return NULL;
    if (handle == RTLD_NEXT || g_disabled || name[0] != 'c' || name[1] != 'u')
        return f(handle, name);
    bool runtime = name[2] == 'd' && name[3] == 'a'; /* cuda*: real.c */
    if (!runtime && !gmt_drv_observe)
        return f(handle, name);
    int saved = errno;
    void *r = f(handle, name);
    if (runtime) {
        r = gmt_real_swap(name, r);
        errno = saved;
        return r;
    }
    for (int i = 0; r != NULL && i < D_WRAPPED_COUNT; i++) {
        /* Our own export, found by a global lookup: it stands for the
         * driver only if there is one ("is libcuda loaded?" probes). */
        if (r == g_wrappers[i]) {
            r = gmt_drv_table_init(NULL) && gmt_drv_real[i] != NULL
                    ? r : NULL;
            errno = saved;
            return r;
        }
    }
    r = swap(r);
    errno = saved;
    return r;
}

/* ---- the wrappers of the lookups and cuInit --------------------------------
 * Declared in driver.h, like those of the memory calls (driver_calls.c):
 * each has the exact type of the driver function it stands for, and is
 * exported under that function's name (for programs linked with -lcuda).
 */

/* A lookup through the driver: swap what it found like dlsym does. */
CUresult gmtw_cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                  cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status)
{
    if (MISSING(cuGetProcAddress_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
    int saved = errno;
    if (r == CUDA_SUCCESS && pfn != NULL && gmt_drv_observe)
        *pfn = swap(*pfn);
    errno = saved;
    return r;
}

CUresult gmtw_cuGetProcAddress(const char *symbol, void **pfn, int version,
                               cuuint64_t flags)
{
    if (MISSING(cuGetProcAddress))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuGetProcAddress)(symbol, pfn, version, flags);
    int saved = errno;
    if (r == CUDA_SUCCESS && pfn != NULL && gmt_drv_observe)
        *pfn = swap(*pfn);
    errno = saved;
    return r;
}

CUresult gmtw_cuInit(unsigned int flags)
{
    if (MISSING(cuInit))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = REAL(cuInit)(flags);
    if (r == CUDA_SUCCESS)
        __atomic_store_n(&g_driver_init, true, __ATOMIC_RELAXED);
    return r;
}

/* ---- streams and contexts, for the pool's fences -------------------------
 * A fence is an event on the legacy stream and one on each non-blocking
 * stream (fence.c): it covers the primary context's streams. Ordered
 * reuse ends before a non-blocking stream is created; fences take it in
 * once it exists, and go off before one is destroyed. */

/* After a creation: enter a non-blocking stream of the current context
 * that fences cover (why: if it is one too many), count a joined
 * library's. */
static void stream_created(CUresult r, CUstream *ph, enum gmt_nb_kind kind,
                           const char *why)
{
    if (r != CUDA_SUCCESS || ph == NULL)
        return;
    if (kind == GMT_NB_JOINED)
        gmt_fence_nb_joined();
    if (kind != GMT_NB_COVERED)
        return;
    CUdevice dev = -1;
    CUresult (*get)(CUdevice *) =
        (CUresult(*)(CUdevice *))gmt_drv_real[D_cuCtxGetDevice];
    if (get == NULL || get(&dev) != CUDA_SUCCESS)
        dev = -1; /* not entered: fences go off */
    gmt_fence_stream_created((void *)*ph, (int)dev, why);
}

/* Which a non-blocking creation is (fence.c), before it: a stream fences
 * cover ends ordered reuse first. */
static enum gmt_nb_kind stream_creating(unsigned flags, const void *caller,
                                        const char *made)
{
    if (!(flags & CU_STREAM_NON_BLOCKING))
        return GMT_NB_INNER;
    enum gmt_nb_kind kind = gmt_fence_nb_kind(caller);
    if (kind == GMT_NB_COVERED)
        gmt_fence_ordered_end(made);
    return kind;
}

CUresult gmtw_cuStreamCreate(CUstream *ph, unsigned int flags)
{
    if (MISSING(cuStreamCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    enum gmt_nb_kind kind = stream_creating(flags, __builtin_return_address(0),
                                            GMT_NB_MADE("cuStreamCreate"));
    CUresult r = REAL(cuStreamCreate)(ph, flags);
    stream_created(r, ph, kind, GMT_NB_MANY("cuStreamCreate"));
    return r;
}

CUresult gmtw_cuStreamCreateWithPriority(CUstream *ph, unsigned int flags,
                                         int priority)
{
    if (MISSING(cuStreamCreateWithPriority))
        return CUDA_ERROR_NOT_INITIALIZED;
    enum gmt_nb_kind kind =
        stream_creating(flags, __builtin_return_address(0),
                        GMT_NB_MADE("cuStreamCreateWithPriority"));
    CUresult r = REAL(cuStreamCreateWithPriority)(ph, flags, priority);
    stream_created(r, ph, kind, GMT_NB_MANY("cuStreamCreateWithPriority"));
    return r;
}

CUresult gmtw_cuStreamDestroy_v2(CUstream h)
{
    if (MISSING(cuStreamDestroy_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_stream_destroyed((void *)h, "the program destroyed a "
                                          "non-blocking stream (cuStreamDestroy)");
    return REAL(cuStreamDestroy_v2)(h);
}

#define CTX_OFF "a context of the program's own was created (cuCtxCreate)"

CUresult gmtw_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (MISSING(cuCtxCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_off(CTX_OFF);
    return REAL(cuCtxCreate)(pctx, flags, dev);
}

CUresult gmtw_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (MISSING(cuCtxCreate_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_off(CTX_OFF);
    return REAL(cuCtxCreate_v2)(pctx, flags, dev);
}

CUresult gmtw_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
                             int n, unsigned int flags, CUdevice dev)
{
    if (MISSING(cuCtxCreate_v3))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_off(CTX_OFF);
    return REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev);
}

CUresult gmtw_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                             unsigned int flags, CUdevice dev)
{
    if (MISSING(cuCtxCreate_v4))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_off(CTX_OFF);
    return REAL(cuCtxCreate_v4)(pctx, params, flags, dev);
}

CUresult gmtw_cuGreenCtxCreate(CUgreenCtx *ph, CUdevResourceDesc desc,
                               CUdevice dev, unsigned int flags)
{
    if (MISSING(cuGreenCtxCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    gmt_fence_off("a green context was created (cuGreenCtxCreate)");
    return REAL(cuGreenCtxCreate)(ph, desc, dev, flags);
}

/* ---- what the rest of the library asks ------------------------------------ */

bool gmt_drv_device_info(int dev, struct gmt_devinfo *out)
{
    if (!__atomic_load_n(&gmt_drv_table_ready, __ATOMIC_ACQUIRE))
        return false;
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))
        gmt_drv_real[D_cuDeviceGet];
    CUresult (*name)(char *, int, CUdevice) = (CUresult(*)(char *, int,
                                                           CUdevice))
        gmt_drv_real[D_cuDeviceGetName];
    CUresult (*total)(size_t *, CUdevice) = (CUresult(*)(size_t *, CUdevice))
        gmt_drv_real[D_cuDeviceTotalMem_v2];
    CUresult (*uuid)(CUuuid *, CUdevice) = (CUresult(*)(CUuuid *, CUdevice))
        gmt_drv_real[D_cuDeviceGetUuid_v2];
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))
            gmt_drv_real[D_cuDeviceGetAttribute];
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
    if (!__atomic_load_n(&gmt_drv_table_ready, __ATOMIC_ACQUIRE))
        return false;
    CUresult (*f)(size_t *, size_t *) = (CUresult(*)(size_t *, size_t *))
        gmt_drv_real[D_cuMemGetInfo_v2];
    return f && f(free_b, total_b) == CUDA_SUCCESS;
}

/* In a forked child: the pools driver_calls.c follows are the parent's. */
void gmt_drv_reset_after_fork(void)
{
    gmt_drv_pools_reset_after_fork();
}

/* Why nothing was recorded in a process that used the driver (at exit,
 * when no hooked call happened); NULL: it did not use the driver. *worth:
 * whether the user should hear it - a process that simply allocated
 * nothing (torchrun's agent imports torch and touches the driver) has
 * nothing to report, and a warning at every such exit is noise. */
const char *gmt_drv_silence_reason(bool *worth)
{
    *worth = true;
    if (g_disabled)
        return NULL; /* the user asked for nothing */
    if (!gmt_drv_observe) /* the caller saw libcuda loaded */
        return "the driver-level observer is off (GPUMEMTRACE_DRIVER=0) and "
               "no call went through a dynamically linked CUDA runtime";
    if (!__atomic_load_n(&g_driver_init, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&gmt_drv_table_ready, __ATOMIC_ACQUIRE))
        return NULL;
    if (__atomic_load_n(&g_handed_out, __ATOMIC_RELAXED) == 0)
        return "the program reached the CUDA driver without looking its "
               "functions up through dlsym or cuGetProcAddress, so "
               "gpumemtrace could not see its memory calls";
    *worth = false;
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
        gmt_drv_observe = false;
}
