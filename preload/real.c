/* real.c - finding the real CUDA runtime functions.
 *
 * The library does not link libcudart: the program brings its own (system
 * toolkit, a pip wheel's copy, ...), and we must call exactly the one the
 * program would have called. dlsym(RTLD_NEXT) finds it when the runtime is
 * in the global scope (linked by the program, or dlopen'ed RTLD_GLOBAL).
 * Frameworks often load it as a dependency of an RTLD_LOCAL extension
 * module (PyTorch does), where RTLD_NEXT cannot see it; then we look for a
 * loaded libcudart.so* and ask that object directly. Resolution happens on
 * first use of each function, after the runtime is certainly loaded (the
 * program is calling it).
 */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "real.h"

void *gmt_real_fn[GMT_R_COUNT];

static const char *const g_names[GMT_R_COUNT] = {
#define GMT_NAME_BASE(n) [GMT_R_##n] = #n,
#define GMT_NAME_PTDS(n, sfx) [GMT_R_##n##sfx] = #n #sfx,
    GMT_RT_FUNCS(GMT_NAME_BASE) GMT_RT_PTDS(GMT_NAME_PTDS)
#undef GMT_NAME_BASE
#undef GMT_NAME_PTDS
};

/* What a hook calls when the program's runtime lacks the function (a
 * program that found our export with dlsym but runs an older runtime).
 * Every runtime entry point returns cudaError_t, and the System V ABI lets
 * a function that ignores its arguments be called with any. */
static cudaError_t missing_function(void)
{
    return cudaErrorNotSupported;
}

static int find_cudart(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    if (base && strncmp(base, "libcudart.so", 12) == 0) {
        void **handle = data;
        *handle = dlopen(name, RTLD_NOLOAD | RTLD_LAZY);
        return *handle != NULL;
    }
    return 0;
}

static void *lookup(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        void *handle = NULL;
        dl_iterate_phdr(find_cudart, &handle);
        if (handle != NULL) {
            f = gmt_real_dlsym(handle, name); /* not our dlsym's swap */
            dlclose(handle); /* drops the NOLOAD reference only */
        }
    }
    return f;
}

bool gmt_code_loaded(const void *fn)
{
    Dl_info di;
    return fn != NULL && dladdr(fn, &di) != 0;
}

bool gmt_real_present(unsigned idx)
{
    static bool absent[GMT_R_COUNT]; /* looked for once, not found */
    void *f = __atomic_load_n(&gmt_real_fn[idx], __ATOMIC_ACQUIRE);
    if (f == NULL && !__atomic_load_n(&absent[idx], __ATOMIC_RELAXED)) {
        if ((f = lookup(g_names[idx])) != NULL)
            __atomic_store_n(&gmt_real_fn[idx], f, __ATOMIC_RELEASE);
        else
            __atomic_store_n(&absent[idx], true, __ATOMIC_RELAXED);
    }
    return f != NULL && f != (void *)missing_function;
}

/* ---- lookups through a handle ---------------------------------------------
 * dlsym(dlopen("libcudart.so.13"), "cudaMalloc") - what
 * ctypes.CDLL("libcudart.so.13").cudaMalloc does - finds the runtime's
 * own function, not our export: its calls would bypass the hooks, the
 * pool and the stacks, and reach only the driver-level observer. Our
 * dlsym (driver.c) asks here about every lookup of a cuda* name. A
 * function of the runtime that is the very one our hook of that name
 * calls is handed out as the hook: the program calls what it would have
 * called, through us, as if it had linked the runtime. Anything else is
 * returned as found: a name we do not hook, our own export already, or a
 * second copy of the runtime beside the one our hooks call (its calls
 * stay visible at the driver level). */
static void *self_handle(void)
{
    static void *self;
    void *h = __atomic_load_n(&self, __ATOMIC_ACQUIRE);
    Dl_info di;
    if (h == NULL && dladdr((void *)self_handle, &di) != 0 &&
        di.dli_fname != NULL) {
        /* The library stays loaded as long as its code runs: NOLOAD
         * only takes a reference. Two threads may both take one. */
        h = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (h == NULL)
            dlerror(); /* ours, not the program's */
        else
            __atomic_store_n(&self, h, __ATOMIC_RELEASE);
    }
    return h;
}

void *gmt_real_swap(const char *name, void *found)
{
    if (found == NULL)
        return found;
    unsigned idx = 0;
    while (idx < GMT_R_COUNT && strcmp(g_names[idx], name) != 0)
        idx++;
    if (idx == GMT_R_COUNT || !gmt_real_present(idx) ||
        __atomic_load_n(&gmt_real_fn[idx], __ATOMIC_ACQUIRE) != found)
        return found;
    void *self = self_handle();
    void *hook = self ? gmt_real_dlsym(self, name) : NULL;
    Dl_info at, us;
    /* Only our own definition: the tracer's own runtime calls
     * (cudaGetDevice, ...) are not exported, and a lookup in our handle
     * also searches the libraries we depend on. */
    if (hook == NULL || dladdr(hook, &at) == 0 ||
        dladdr((void *)gmt_real_swap, &us) == 0 || at.dli_fbase != us.dli_fbase) {
        dlerror();
        return found;
    }
    return hook;
}

void *gmt_real_resolve(unsigned idx)
{
    const char *name = g_names[idx];
    void *f = lookup(name);
    if (f == NULL) {
        gmt_error_once(GMT_ERR_NOSYM,
                       "the CUDA runtime in this process has no %s; "
                       "calls to it return cudaErrorNotSupported", name);
        f = (void *)missing_function;
    }
    __atomic_store_n(&gmt_real_fn[idx], f, __ATOMIC_RELEASE);
    return f;
}

/* The tracer's own runtime calls must leave the program's error state as
 * it was. The runtime keeps one sticky "last error" per thread: we only
 * call when none is pending, and consume any error our call produced,
 * which restores exactly the state we found. */
static bool error_pending(void)
{
    return GMT_REAL(cudaPeekAtLastError)() != cudaSuccess;
}

int gmt_quiet_get_device(int fallback)
{
    int dev;
    if (error_pending())
        return fallback;
    if (GMT_REAL(cudaGetDevice)(&dev) != cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        return fallback;
    }
    return dev;
}

/* The runtime's attributes of p, leaving no error behind; false if it
 * could not say. */
static bool quiet_attributes(const void *p, struct cudaPointerAttributes *a)
{
    memset(a, 0, sizeof *a);
    if (error_pending())
        return false;
    if (GMT_REAL(cudaPointerGetAttributes)(a, p) != cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        return false;
    }
    return true;
}

int gmt_quiet_ptr_class(const void *p)
{
    struct cudaPointerAttributes a;
    if (!quiet_attributes(p, &a))
        return GMT_PTR_UNKNOWN;
    switch (a.type) {
    case cudaMemoryTypeUnregistered:
        return GMT_PTR_PAGEABLE;
    case cudaMemoryTypeHost:
        return GMT_PTR_PINNED;
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
        return GMT_PTR_DEVICE;
    default:
        return GMT_PTR_UNKNOWN;
    }
}

static int find_libcuda(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    return base && strncmp(base, "libcuda.so", 10) == 0;
}

bool gmt_real_cuda_loaded(void)
{
    return dl_iterate_phdr(find_libcuda, NULL) != 0;
}
