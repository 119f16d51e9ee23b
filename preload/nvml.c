/* nvml.c - this process's own device memory, as NVML reports it.
 *
 * The driver's free/total figure (cuMemGetInfo) is device-wide: on a card
 * that several processes share - two ranks of one job, a notebook beside a
 * training run - the memory "beyond the trace" of each would count the
 * others'. NVML lists, per device, the processes holding memory and how
 * much each holds (context, the program's own, libraries'): the one row
 * with our pid is what this process costs the card. Every sample of a
 * device (mem.c, every GPUMEMTRACE_SAMPLE_MS) then also records that
 * figure (GMT_X_PROC_MEM), and the report takes it over the device-wide one.
 *
 * NVML is optional and loaded on first use: no libnvidia-ml.so.1, an
 * nvmlInit that fails, or our pid absent from NVML's list (a container
 * whose pid namespace NVML does not see, MIG without per-process figures)
 * all turn this off for good, and the trace keeps the device-wide figure.
 * Devices are matched by UUID (CUDA_VISIBLE_DEVICES renumbers ordinals,
 * NVML does not), as the device record gave it. A forked child does not
 * query (NVML's state belongs to the parent; DataLoader workers touch no
 * GPU). NVML takes its own locks and never calls back into CUDA, so this
 * is safe from inside a hook; it runs at most once per device per sample.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* NVML's ABI, as nvml.h declares it (the header is not installed with
 * the toolkit everywhere; these have been stable since CUDA 11). */
typedef void *nvml_dev;
struct nvml_proc { /* nvmlProcessInfo_t, for ..._v3 (and _v2) */
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};
#define NVML_SUCCESS 0
#define NVML_NOT_AVAILABLE (~0ull) /* NVML_VALUE_NOT_AVAILABLE */

enum { OFF = -1, UNTRIED = 0, ON = 1 };
#define NVML_MAX_PROCS 128 /* processes on one device we look through */
#define NVML_MISSES 3      /* queries without our pid before giving up */

static int g_state = UNTRIED;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int (*g_procs)(nvml_dev, unsigned int *, struct nvml_proc *);
static int (*g_by_uuid)(const char *, nvml_dev *);
static nvml_dev g_dev[GMT_MAX_DEVICES];
static uint8_t g_uuid[GMT_MAX_DEVICES][16];
static bool g_have_uuid[GMT_MAX_DEVICES];
static int g_misses;

static void load(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        g_state = OFF;
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    g_by_uuid = (int (*)(const char *, nvml_dev *))dlsym(h, "nvmlDeviceGetHandleByUUID");
    g_procs = (int (*)(nvml_dev, unsigned int *, struct nvml_proc *))dlsym(
        h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (g_procs == NULL)
        g_procs = (int (*)(nvml_dev, unsigned int *, struct nvml_proc *))dlsym(
            h, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (init == NULL || g_by_uuid == NULL || g_procs == NULL || init() != NVML_SUCCESS) {
        g_state = OFF; /* the library stays loaded: cheaper than unloading */
        return;
    }
    __atomic_store_n(&g_state, ON, __ATOMIC_RELEASE);
}

void gmt_nvml_device(int dev, const uint8_t uuid[16])
{
    if (dev < 0 || dev >= GMT_MAX_DEVICES)
        return;
    memcpy(g_uuid[dev], uuid, 16);
    __atomic_store_n(&g_have_uuid[dev], true, __ATOMIC_RELEASE);
}

static nvml_dev handle(int dev)
{
    nvml_dev d = __atomic_load_n(&g_dev[dev], __ATOMIC_ACQUIRE);
    if (d || !__atomic_load_n(&g_have_uuid[dev], __ATOMIC_ACQUIRE))
        return d;
    const uint8_t *u = g_uuid[dev];
    char s[48];
    snprintf(s, sizeof s,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
             u[10], u[11], u[12], u[13], u[14], u[15]);
    if (g_by_uuid(s, &d) != NVML_SUCCESS)
        return NULL;
    __atomic_store_n(&g_dev[dev], d, __ATOMIC_RELEASE);
    return d;
}

bool gmt_nvml_used(int dev, uint64_t *used)
{
    if (dev < 0 || dev >= GMT_MAX_DEVICES ||
        __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == OFF)
        return false;
    pthread_once(&g_once, load);
    if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != ON)
        return false;
    nvml_dev d = handle(dev);
    if (d == NULL)
        return false;
    struct nvml_proc procs[NVML_MAX_PROCS];
    unsigned int n = NVML_MAX_PROCS;
    if (g_procs(d, &n, procs) != NVML_SUCCESS)
        return false; /* more processes than we look through, say */
    unsigned int me = (unsigned int)getpid();
    for (unsigned int i = 0; i < n && i < NVML_MAX_PROCS; i++) {
        if (procs[i].pid == me && procs[i].used != NVML_NOT_AVAILABLE) {
            __atomic_store_n(&g_misses, 0, __ATOMIC_RELAXED);
            *used = procs[i].used;
            return true;
        }
    }
    /* we sample only devices we use, so we should be listed: NVML sees
     * another pid namespace, or keeps no per-process figures */
    if (__atomic_add_fetch(&g_misses, 1, __ATOMIC_RELAXED) >= NVML_MISSES)
        __atomic_store_n(&g_state, OFF, __ATOMIC_RELEASE);
    return false;
}

void gmt_nvml_reset_after_fork(void)
{
    g_state = OFF;
}
