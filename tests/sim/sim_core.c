/*
 * sim_core.c - process-wide state of the simulated CUDA runtime (tests/sim,
 * see README.md): lazy initialisation from the environment, per-thread
 * state (current device, last error, capture interaction mode, per-thread
 * default streams), device enumeration / properties / attributes, peer
 * access, versions, and the sim* statistics exports.
 */
#include "sim_internal.h"
#include "simcudart.h"
#include "sim_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sim_global sim_g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
};

/* ------------------------------------------------------------------ */
/* Per-thread state                                                    */
/* ------------------------------------------------------------------ */

/* Per-thread default streams live in a heap block rather than in the TLS
 * variable itself, because the pthread key destructor that retires them at
 * thread exit must not depend on when the thread's TLS block is torn down. */
struct sim_ptds_block {
    struct CUstream_st *s[SIM_MAX_DEVICES];
};

struct sim_tls {
    int device;                        /* current device, default 0 */
    cudaError_t last_error;            /* cudaGetLastError / PeekAtLastError */
    enum cudaStreamCaptureMode mode;   /* cudaThreadExchangeStreamCaptureMode; Global = 0 */
    struct sim_ptds_block *ptds;
};

static _Thread_local struct sim_tls sim_tls;

static pthread_once_t sim_once = PTHREAD_ONCE_INIT;
static pthread_key_t sim_ptds_key;

static void sim_ptds_key_destructor(void *p)
{
    struct sim_ptds_block *b = p;
    /* The thread is exiting: its per-thread streams finish their queued
     * work and then free themselves (the worker threads own them now).
     * Destructors run on the exiting thread while its TLS is still there;
     * forget the block so that a CUDA call from a later destructor starts
     * a fresh one instead of using freed memory. */
    if (sim_tls.ptds == b)
        sim_tls.ptds = NULL;
    sim_lock();
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        if (b->s[i])
            sim_stream_mark_destroyed(b->s[i]);
    sim_unlock();
    free(b);
}

/* ------------------------------------------------------------------ */
/* Initialisation                                                      */
/* ------------------------------------------------------------------ */

static void sim_warn(const char *fmt, const char *name, const char *val)
{
    fprintf(stderr, "simcudart: ");
    fprintf(stderr, fmt, name, val);
    fputc('\n', stderr);
}

static struct CUmemPoolHandle_st *sim_default_pool_new(int dev)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->magic = SIM_MAGIC_POOL;
    p->device = dev;
    p->is_default = true;
    p->reuse_follow_event = p->reuse_opportunistic = p->reuse_internal = 1;
    p->next = sim_g.pools;
    sim_g.pools = p;
    return p;
}

/*
 * fork(): the child has only the forking thread, so the stream workers and
 * everything they would still have run are gone.  Like the real runtime,
 * a child must not use the CUDA state of a parent that initialised it: in
 * the child every call that needs the runtime fails with
 * cudaErrorInitializationError.  The handlers keep the global lock
 * consistent across the fork so that such calls cannot deadlock.
 */
static void sim_atfork_prepare(void)
{
    pthread_mutex_lock(&sim_g.lock);
}

static void sim_atfork_parent(void)
{
    pthread_mutex_unlock(&sim_g.lock);
}

static void sim_atfork_child(void)
{
    sim_g.forked_child = true;
    pthread_cond_init(&sim_g.progress, NULL); /* waiters of the parent are gone */
    pthread_mutex_unlock(&sim_g.lock);
}

static void sim_init_once(void)
{
    const char *env;
    unsigned long long ndev = 1, cap = 1ULL << 30;

    env = getenv("SIM_CUDA_DEVICES");
    if (env && *env) {
        int bad = sim_parse_devices(env, SIM_MAX_DEVICES, &ndev); /* 0: none */
        if (bad == 1)
            sim_warn("invalid %s=\"%s\", using 1 device", "SIM_CUDA_DEVICES", env);
        else if (bad == 2)
            sim_warn("%s=%s exceeds the maximum, using 8 devices", "SIM_CUDA_DEVICES", env);
    }
    env = getenv("SIM_CUDA_MEM");
    if (env && *env && !sim_parse_size(env, &cap)) {
        sim_warn("invalid %s=\"%s\", using 1G per device", "SIM_CUDA_MEM", env);
        cap = 1ULL << 30;
    }
    if (cap > (unsigned long long)SIZE_MAX)
        cap = SIZE_MAX;

    (void)pthread_key_create(&sim_ptds_key, sim_ptds_key_destructor);
    (void)pthread_atfork(sim_atfork_prepare, sim_atfork_parent, sim_atfork_child);

    sim_lock();
    sim_g.ndev = (int)ndev;
    for (int d = 0; d < sim_g.ndev; d++) {
        sim_g.dev[d].capacity = (size_t)cap;
        sim_g.dev[d].default_pool = sim_default_pool_new(d);
        sim_g.dev[d].current_pool = sim_g.dev[d].default_pool;
    }
    sim_unlock();
}

cudaError_t sim_enter(void)
{
    (void)pthread_once(&sim_once, sim_init_once);
    if (sim_g.forked_child)
        return cudaErrorInitializationError;
    if (sim_g.ndev == 0)
        return cudaErrorNoDevice;
    /* A default pool allocation failure at init leaves NULL pools; treat
     * the runtime as unusable rather than crashing later. */
    if (!sim_g.dev[0].default_pool)
        return cudaErrorInitializationError;
    return cudaSuccess;
}

cudaError_t sim_ret(cudaError_t err)
{
    /* cudaErrorNotReady is a status, not a failure: the real runtime does
     * not leave it behind for cudaGetLastError either. */
    if (err != cudaSuccess && err != cudaErrorNotReady)
        sim_tls.last_error = err;
    return err;
}

void sim_lock(void)
{
    pthread_mutex_lock(&sim_g.lock);
}

void sim_unlock(void)
{
    pthread_mutex_unlock(&sim_g.lock);
}

int sim_current_device(void)
{
    return sim_tls.device;
}

bool sim_valid_device(int dev)
{
    return dev >= 0 && dev < sim_g.ndev;
}

enum cudaStreamCaptureMode sim_thread_capture_mode(void)
{
    return sim_tls.mode;
}

struct CUstream_st **sim_thread_ptds(int dev)
{
    if (!sim_tls.ptds) {
        sim_tls.ptds = calloc(1, sizeof *sim_tls.ptds);
        if (!sim_tls.ptds)
            return NULL;
        (void)pthread_setspecific(sim_ptds_key, sim_tls.ptds);
    }
    return &sim_tls.ptds->s[dev];
}

size_t sim_round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* ------------------------------------------------------------------ */
/* Errors and versions                                                 */
/* ------------------------------------------------------------------ */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = sim_tls.last_error;
    sim_tls.last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return sim_tls.last_error;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return sim_ret(cudaErrorInvalidValue);
    *runtimeVersion = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return sim_ret(cudaErrorInvalidValue);
    *driverVersion = 13000;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    *count = err == cudaSuccess ? sim_g.ndev : 0;
    return sim_ret(err);
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);
    sim_tls.device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    *device = sim_tls.device;
    return cudaSuccess;
}

/* Deterministic per-device UUID: a fixed prefix plus the ordinal, so runs
 * and reports are reproducible. */
static void sim_fill_uuid(cudaUUID_t *u, int dev)
{
    static const char prefix[12] = { 'g', 'm', 't', 's', 'i', 'm', '-', 'g', 'p', 'u', '-', '0' };
    memcpy(u->bytes, prefix, sizeof prefix);
    u->bytes[12] = 0;
    u->bytes[13] = 0;
    u->bytes[14] = 0;
    u->bytes[15] = (char)dev;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);

    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "gpumemtrace simulated device");
    sim_fill_uuid(&prop->uuid, device);
    sim_lock();
    prop->totalGlobalMem = sim_g.dev[device].capacity;
    sim_unlock();
    /* Plausible numbers for a compute capability 9.0 part (H100-like). */
    prop->sharedMemPerBlock = 48 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->memPitch = 2147483647;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->totalConstMem = 64 * 1024;
    prop->major = 9;
    prop->minor = 0;
    prop->textureAlignment = 512;
    prop->texturePitchAlignment = 32;
    prop->multiProcessorCount = 132;
    prop->integrated = 0;
    prop->canMapHostMemory = 1;
    prop->concurrentKernels = 1;
    prop->pciBusID = device;
    prop->pciDeviceID = 0;
    prop->pciDomainID = 0;
    prop->asyncEngineCount = 2;
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->streamPrioritiesSupported = 1;
    prop->globalL1CacheSupported = 1;
    prop->localL1CacheSupported = 1;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerMultiprocessor = 65536;
    prop->managedMemory = 1;
    prop->concurrentManagedAccess = 1;
    prop->pageableMemoryAccess = 0;
    prop->computePreemptionSupported = 1;
    prop->canUseHostPointerForRegisteredMem = 1;
    prop->cooperativeLaunch = 1;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->hostRegisterSupported = 1;
    prop->memoryPoolsSupported = 1;
    prop->ipcEventSupported = 1;
    prop->clusterLaunch = 1;
    prop->deviceNumaId = -1;
    prop->hostNumaId = -1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device))
        return sim_ret(cudaErrorInvalidDevice);

    /* The common attributes, consistent with cudaGetDeviceProperties; the
     * rest are reported as unsupported rather than invented. */
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxBlockDimX: *value = 1024; break;
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrPciBusId: *value = device; break;
    case cudaDevAttrPciDeviceId: *value = 0; break;
    case cudaDevAttrPciDomainId: *value = 0; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrAsyncEngineCount: *value = 2; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrConcurrentManagedAccess: *value = 1; break;
    case cudaDevAttrPageableMemoryAccess: *value = 0; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrHostRegisterSupported: *value = 1; break;
    case cudaDevAttrTotalConstantMemory: *value = 64 * 1024; break;
    default:
        return sim_ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    /* Same range as current data-centre GPUs: 0 (lowest) .. -5 (highest). */
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    if (!canAccessPeer)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (!sim_valid_device(device) || !sim_valid_device(peerDevice))
        return sim_ret(cudaErrorInvalidDevice);
    /* All simulated devices share the host address space; like the real
     * runtime a device is not reported as its own peer. */
    *canAccessPeer = device != peerDevice;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    if (flags != 0)
        return sim_ret(cudaErrorInvalidValue);
    int cur = sim_tls.device;
    if (!sim_valid_device(peerDevice) || peerDevice == cur)
        return sim_ret(cudaErrorInvalidDevice);
    sim_lock();
    bool was = sim_g.dev[cur].peer_enabled[peerDevice];
    sim_g.dev[cur].peer_enabled[peerDevice] = true;
    sim_unlock();
    return was ? sim_ret(cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    int cur = sim_tls.device;
    if (!sim_valid_device(peerDevice) || peerDevice == cur)
        return sim_ret(cudaErrorInvalidDevice);
    sim_lock();
    bool was = sim_g.dev[cur].peer_enabled[peerDevice];
    sim_g.dev[cur].peer_enabled[peerDevice] = false;
    sim_unlock();
    return was ? cudaSuccess : sim_ret(cudaErrorPeerAccessNotEnabled);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode)
        return sim_ret(cudaErrorInvalidValue);
    switch (*mode) {
    case cudaStreamCaptureModeGlobal:
    case cudaStreamCaptureModeThreadLocal:
    case cudaStreamCaptureModeRelaxed:
        break;
    default:
        return sim_ret(cudaErrorInvalidValue);
    }
    enum cudaStreamCaptureMode old = sim_tls.mode;
    sim_tls.mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* Test-only statistics                                                */
/* ------------------------------------------------------------------ */

unsigned long long simStaleWrites(void)
{
    sim_lock();
    unsigned long long v = sim_g.stale_writes;
    sim_unlock();
    return v;
}

unsigned long long simStaleReads(void)
{
    sim_lock();
    unsigned long long v = sim_g.stale_reads;
    sim_unlock();
    return v;
}

void simGetStats(struct simStats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    sim_lock();
    out->mallocs = sim_g.mallocs;
    out->frees = sim_g.frees;
    for (int d = 0; d < sim_g.ndev; d++) {
        out->live_bytes[d] = sim_g.dev[d].used;
        out->peak_bytes[d] = sim_g.dev[d].peak;
    }
    out->device_syncs = sim_g.device_syncs;
    out->stream_syncs = sim_g.stream_syncs;
    sim_unlock();
}
