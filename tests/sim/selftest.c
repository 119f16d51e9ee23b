/*
 * selftest.c - self test of the simulated CUDA runtime (tests/sim).
 *
 * Not part of the library: build it against libcudart.so.13 from this
 * directory (see build.sh) and run it; it exits 0 when every check passes
 * and prints each failing check otherwise.  It pins its own environment
 * (2 devices of 64 MiB) before the first CUDA call so results do not depend
 * on the caller's SIM_CUDA_* settings.
 *
 * Timing-based checks only ever assert that delayed work has NOT happened
 * yet right after it was enqueued (with delays of 200 ms or more) and that
 * it HAS happened after an explicit synchronisation, so they are robust on
 * slow machines and under valgrind / sanitizers.
 */
#include <cuda_runtime_api.h>

#include "simcudart.h"
#include "selftest.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* make_cudaExtent & co. live in driver_functions.h, which C programs cannot
 * include on its own; these are equivalent. */
struct cudaExtent extent3(size_t w, size_t h, size_t d)
{
    struct cudaExtent e = { w, h, d };
    return e;
}

struct cudaPos pos3(size_t x, size_t y, size_t z)
{
    struct cudaPos p = { x, y, z };
    return p;
}

struct cudaPitchedPtr pitched(void *ptr, size_t pitch, size_t xsize, size_t ysize)
{
    struct cudaPitchedPtr p = { ptr, pitch, xsize, ysize };
    return p;
}

int failures, checks;
static void *ptds_buf_for_thread;

bool all_bytes(const void *p, int value, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)value)
            return false;
    return true;
}

/* ------------------------------------------------------------------ */

static void test_devices(void)
{
    int n = -1, dev = -1, v = 0;
    struct cudaDeviceProp prop, prop1;

    OK(cudaGetDeviceCount(&n));
    CHECK(n == 2);
    OK(cudaGetDevice(&dev));
    CHECK(dev == 0);
    OK(cudaGetDeviceProperties(&prop, 0));
    OK(cudaGetDeviceProperties(&prop1, 1));
    CHECK(strcmp(prop.name, "gpumemtrace simulated device") == 0);
    CHECK(prop.totalGlobalMem == 64u * MiB);
    CHECK(prop.major == 9 && prop.minor == 0);
    CHECK(prop.pciBusID == 0 && prop1.pciBusID == 1);
    CHECK(memcmp(prop.uuid.bytes, prop1.uuid.bytes, sizeof prop.uuid.bytes) != 0);
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 1));
    CHECK(v == 9);
    OK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    CHECK(v == prop.multiProcessorCount);
    EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrMaxTexture1DWidth, 0), cudaErrorInvalidValue);
    EXPECT(cudaGetDeviceProperties(&prop, 2), cudaErrorInvalidDevice);
    OK(cudaDeviceCanAccessPeer(&v, 0, 1));
    CHECK(v == 1);
    OK(cudaDeviceEnablePeerAccess(1, 0));
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    OK(cudaRuntimeGetVersion(&v));
    CHECK(v == 13000);
    OK(cudaDriverGetVersion(&v));
    CHECK(v == 13000);
    (void)cudaGetLastError();
}

static void test_last_error(void)
{
    int dev;
    (void)cudaGetLastError();
    EXPECT(cudaSetDevice(7), cudaErrorInvalidDevice);
    OK(cudaGetDevice(&dev)); /* a success leaves the last error alone */
    CHECK(dev == 0);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaSuccess);
    CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    CHECK(strcmp(cudaGetErrorString((cudaError_t)12345), "unknown error") == 0);
}

static void *last_error_thread(void *arg)
{
    (void)arg;
    /* Each thread has its own last error and current device. */
    int *ok = malloc(sizeof *ok), dev = -1;
    *ok = cudaPeekAtLastError() == cudaSuccess;
    *ok &= cudaSetDevice(1) == cudaSuccess && cudaGetDevice(&dev) == cudaSuccess && dev == 1;
    *ok &= cudaMalloc(NULL, 1) == cudaErrorInvalidValue;
    *ok &= cudaPeekAtLastError() == cudaErrorInvalidValue;
    return ok;
}

static void test_threads(void)
{
    pthread_t t;
    void *res = NULL;
    int dev = -1;
    (void)cudaGetLastError();
    EXPECT(cudaSetDevice(9), cudaErrorInvalidDevice);
    CHECK(pthread_create(&t, NULL, last_error_thread, NULL) == 0);
    CHECK(pthread_join(t, &res) == 0);
    CHECK(res && *(int *)res);
    free(res);
    OK(cudaGetDevice(&dev));
    CHECK(dev == 0);
    EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
}

static void *ptds_thread(void *arg)
{
    /* Work on this thread's default stream outlives the thread. */
    *(cudaError_t *)arg = simLaunchFill(ptds_buf_for_thread, 0x66, 4096, DELAY_US, cudaStreamPerThread);
    return NULL;
}

static void test_ptds_thread_exit(void)
{
    pthread_t t;
    cudaError_t err = cudaErrorUnknown;
    OK(cudaMalloc(&ptds_buf_for_thread, 4096));
    OK(cudaMemset(ptds_buf_for_thread, 0, 4096));
    CHECK(pthread_create(&t, NULL, ptds_thread, &err) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    EXPECT(err, cudaSuccess);
    CHECK(((unsigned char *)ptds_buf_for_thread)[0] == 0);
    OK(cudaDeviceSynchronize());
    CHECK(all_bytes(ptds_buf_for_thread, 0x66, 4096));
    OK(cudaFree(ptds_buf_for_thread));
}

static void test_alloc(void)
{
    void *p = (void *)1, *q = NULL, *big = (void *)1;
    size_t free0, total, free1, pitch = 0;
    struct simStats st0, st1;

    simGetStats(&st0);
    OK(cudaMemGetInfo(&free0, &total));
    CHECK(total == 64u * MiB);

    OK(cudaMalloc(&p, 0));
    CHECK(p == NULL);
    OK(cudaMalloc(&p, 1000));
    CHECK(p != NULL && ((uintptr_t)p % 512) == 0);
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 1000);

    /* Out of memory: fails, pointer NULL, error recorded, nothing charged. */
    EXPECT(cudaMalloc(&big, 64u * MiB), cudaErrorMemoryAllocation);
    CHECK(big == NULL);
    EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    big = (void *)1;
    EXPECT(cudaMallocManaged(&big, 64u * MiB, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
    CHECK(big == NULL);
    (void)cudaGetLastError();
    /* Pinned host memory is not charged against the device. */
    OK(cudaMallocHost(&big, 80u * MiB));
    OK(cudaFreeHost(big));

    OK(cudaMallocPitch(&q, &pitch, 700, 3));
    CHECK(pitch == 1024);
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free0 - free1 == 1000 + 3 * 1024);
    OK(cudaFree(q));

    struct cudaPitchedPtr pp;
    OK(cudaMalloc3D(&pp, extent3(100, 4, 2)));
    CHECK(pp.ptr && pp.pitch == 512 && pp.xsize == 100 && pp.ysize == 4);
    OK(cudaFree(pp.ptr));

    /* Bad frees. */
    char stack_buf[16];
    EXPECT(cudaFree(stack_buf), cudaErrorInvalidValue);
    EXPECT(cudaFree((char *)p + 8), cudaErrorInvalidValue); /* interior */
    EXPECT(cudaFreeHost(p), cudaErrorInvalidValue);         /* wrong kind */
    OK(cudaFree(NULL));
    OK(cudaFree(p));
    EXPECT(cudaFree(p), cudaErrorInvalidValue); /* double free */
    (void)cudaGetLastError();

    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 == free0);
    simGetStats(&st1);
    CHECK(st1.mallocs - st0.mallocs == 4);
    CHECK(st1.frees - st0.frees == 4);
    CHECK(st1.live_bytes[0] == st0.live_bytes[0]);
    CHECK(st1.peak_bytes[0] >= 1000 + 3 * 1024);
    CHECK(st1.device_syncs - st0.device_syncs == 3); /* one per successful cudaFree */
}

static void test_pointer_attributes(void)
{
    void *d = NULL, *m = NULL, *h = NULL;
    struct cudaPointerAttributes a;
    int local = 0;
    char *reg = malloc(8192);

    OK(cudaSetDevice(1));
    OK(cudaMalloc(&d, 4096));
    OK(cudaSetDevice(0));
    OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
    OK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
    OK(cudaHostRegister(reg, 8192, cudaHostRegisterDefault));

    OK(cudaPointerGetAttributes(&a, (char *)d + 100)); /* interior pointer */
    CHECK(a.type == cudaMemoryTypeDevice && a.device == 1);
    CHECK(a.devicePointer == (char *)d + 100 && a.hostPointer == NULL);
    OK(cudaPointerGetAttributes(&a, m));
    CHECK(a.type == cudaMemoryTypeManaged && a.devicePointer == m && a.hostPointer == m);
    OK(cudaPointerGetAttributes(&a, (char *)h + 4095));
    CHECK(a.type == cudaMemoryTypeHost && a.hostPointer == (char *)h + 4095);
    OK(cudaPointerGetAttributes(&a, reg + 5000));
    CHECK(a.type == cudaMemoryTypeHost && a.device == 0);
    OK(cudaPointerGetAttributes(&a, &local));
    CHECK(a.type == cudaMemoryTypeUnregistered);
    /* One past the end is not part of d (it may be where the next
     * allocation starts, depending on the malloc in use). */
    OK(cudaPointerGetAttributes(&a, (char *)d + 4096));
    CHECK(!(a.type == cudaMemoryTypeDevice && a.device == 1));

    void *dp = NULL;
    unsigned flags = 0;
    OK(cudaHostGetDevicePointer(&dp, h, 0));
    CHECK(dp == h);
    OK(cudaHostGetFlags(&flags, h));
    CHECK(flags == cudaHostAllocMapped);
    EXPECT(cudaHostRegister(reg + 4096, 100, 0), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT(cudaHostUnregister(reg + 1), cudaErrorHostMemoryNotRegistered);
    OK(cudaHostUnregister(reg));
    EXPECT(cudaHostUnregister(reg), cudaErrorHostMemoryNotRegistered);
    OK(cudaPointerGetAttributes(&a, reg));
    CHECK(a.type == cudaMemoryTypeUnregistered);

    /* IPC handles name the whole allocation containing the pointer. */
    cudaIpcMemHandle_t ih;
    struct simIpcHandleLayout lay;
    OK(cudaIpcGetMemHandle(&ih, (char *)d + 1234));
    CHECK(simIpcHandleDecode(&ih, &lay));
    CHECK(lay.base == (uintptr_t)d && lay.size == 4096 && lay.device == 1);
    EXPECT(cudaIpcGetMemHandle(&ih, &local), cudaErrorInvalidValue);
    EXPECT(cudaIpcGetMemHandle(&ih, m), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    OK(cudaFree(d));
    OK(cudaFree(m));
    OK(cudaFreeHost(h));
    free(reg);
}


static void test_device_reset(void)
{
    void *a = NULL, *b = NULL;
    size_t f, t;
    struct simStats st;
    cudaStream_t s;

    OK(cudaSetDevice(1));
    OK(cudaMalloc(&a, 3 * MiB));
    OK(cudaMallocManaged(&b, MiB, cudaMemAttachGlobal));
    OK(cudaStreamCreate(&s));
    OK(simLaunchFill(a, 1, 3 * MiB, DELAY_US / 2, s));
    simGetStats(&st);
    CHECK(st.live_bytes[1] == 4 * MiB);
    OK(cudaDeviceReset());
    simGetStats(&st);
    CHECK(st.live_bytes[1] == 0 && st.peak_bytes[1] >= 4 * MiB);
    OK(cudaMemGetInfo(&f, &t));
    CHECK(f == t);
    EXPECT(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    OK(cudaSetDevice(0));
}

/* Several threads hammering allocation, streams, events and the
 * per-thread default stream at once; checks results and that the
 * accounting returns to where it started. */
#define STRESS_THREADS 4
#define STRESS_ITERS 100

static cudaEvent_t stress_shared_event;

static void *stress_thread(void *arg)
{
    long id = (long)arg, bad = 0;
    cudaStream_t s;
    cudaEvent_t ev;
    unsigned char *h = NULL;

    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
        cudaMallocHost((void **)&h, 4096) != cudaSuccess)
        return (void *)1;
    for (int i = 0; i < STRESS_ITERS; i++) {
        void *d = NULL, *a = NULL;
        size_t n = 512 + (size_t)(i % 7) * 300;
        int v = (int)((id * 31 + i) & 0xff);
        bad += cudaMalloc(&d, n) != cudaSuccess;
        bad += cudaMallocAsync(&a, n, cudaStreamPerThread) != cudaSuccess;
        bad += simLaunchFill(d, v, n, (unsigned)(i % 3) * 100, s) != cudaSuccess;
        bad += cudaEventRecord(ev, s) != cudaSuccess;
        bad += cudaStreamWaitEvent(cudaStreamPerThread, ev, 0) != cudaSuccess;
        bad += cudaMemcpyAsync(a, d, n, cudaMemcpyDeviceToDevice, cudaStreamPerThread) != cudaSuccess;
        bad += cudaMemcpyAsync(h, a, n, cudaMemcpyDeviceToHost, cudaStreamPerThread) != cudaSuccess;
        bad += cudaFreeAsync(a, cudaStreamPerThread) != cudaSuccess;
        if (i % 10 == 0) /* shared event, recorded from several threads */
            bad += cudaEventRecord(stress_shared_event, s) != cudaSuccess;
        bad += cudaStreamSynchronize(cudaStreamPerThread) != cudaSuccess;
        bad += !all_bytes(h, v, n);
        bad += cudaFree(d) != cudaSuccess;
        if (i % 25 == 0)
            bad += cudaDeviceSynchronize() != cudaSuccess;
    }
    bad += cudaEventQuery(stress_shared_event) == cudaErrorInvalidResourceHandle;
    bad += cudaStreamDestroy(s) != cudaSuccess;
    bad += cudaEventDestroy(ev) != cudaSuccess;
    bad += cudaFreeHost(h) != cudaSuccess;
    return (void *)bad;
}

static void test_stress(void)
{
    pthread_t t[STRESS_THREADS];
    struct simStats st0, st1;
    unsigned long long stale0 = simStaleWrites() + simStaleReads();

    OK(cudaEventCreate(&stress_shared_event));
    simGetStats(&st0);
    for (long i = 0; i < STRESS_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, stress_thread, (void *)i) == 0);
    for (int i = 0; i < STRESS_THREADS; i++) {
        void *bad = (void *)1;
        CHECK(pthread_join(t[i], &bad) == 0);
        CHECK(bad == NULL);
    }
    OK(cudaDeviceSynchronize());
    simGetStats(&st1);
    CHECK(st1.live_bytes[0] == st0.live_bytes[0]);
    CHECK(st1.mallocs - st0.mallocs == STRESS_THREADS * (2 * STRESS_ITERS + 1));
    CHECK(st1.frees - st0.frees == st1.mallocs - st0.mallocs);
    CHECK(simStaleWrites() + simStaleReads() == stale0);
    OK(cudaEventSynchronize(stress_shared_event));
    OK(cudaEventDestroy(stress_shared_event));
}

/* Runs fn in a forked child; returns whether it exited 0. */
static bool in_child(int (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn());
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Before the parent initialised the runtime: SIM_CUDA_DEVICES=0. */
static int child_no_device(void)
{
    int n = -1;
    void *p = (void *)1;
    setenv("SIM_CUDA_DEVICES", "0", 1);
    if (cudaGetDeviceCount(&n) != cudaErrorNoDevice || n != 0)
        return 1;
    if (cudaMalloc(&p, 16) != cudaErrorNoDevice || p != NULL)
        return 2;
    return cudaGetLastError() == cudaErrorNoDevice ? 0 : 3;
}

/* After the parent initialised it: the child cannot use it. */
static int child_after_fork(void)
{
    void *p = NULL;
    return cudaMalloc(&p, 16) == cudaErrorInitializationError ? 0 : 1;
}

int main(void)
{
    CHECK(in_child(child_no_device));

    /* Fixed environment: read once, at the first CUDA call. */
    setenv("SIM_CUDA_DEVICES", "2", 1);
    setenv("SIM_CUDA_MEM", "64M", 1);

    test_devices();
    test_last_error();
    test_threads();
    test_alloc();
    test_pointer_attributes();
    test_async_and_events();
    test_host_func();
    test_stream_ordered();
    test_copies();
    test_capture();
    test_device_reset();
    test_ptds_thread_exit();
    test_stress();
    CHECK(in_child(child_after_fork));

    if (failures) {
        fprintf(stderr, "selftest: %d of %d checks FAILED\n", failures, checks);
        return 1;
    }
    printf("selftest: all %d checks passed\n", checks);
    return 0;
}
