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

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The per-thread-default-stream entry points have no prototypes unless a
 * program is compiled for per-thread default streams. */
__typeof__(cudaMemcpyAsync) cudaMemcpyAsync_ptsz;
__typeof__(cudaMemcpy) cudaMemcpy_ptds;
__typeof__(cudaStreamSynchronize) cudaStreamSynchronize_ptsz;
__typeof__(cudaStreamQuery) cudaStreamQuery_ptsz;

/* make_cudaExtent & co. live in driver_functions.h, which C programs cannot
 * include on its own; these are equivalent. */
static struct cudaExtent extent3(size_t w, size_t h, size_t d)
{
    struct cudaExtent e = { w, h, d };
    return e;
}

static struct cudaPos pos3(size_t x, size_t y, size_t z)
{
    struct cudaPos p = { x, y, z };
    return p;
}

static struct cudaPitchedPtr pitched(void *ptr, size_t pitch, size_t xsize, size_t ysize)
{
    struct cudaPitchedPtr p = { ptr, pitch, xsize, ysize };
    return p;
}

#define MiB (1024u * 1024u)
#define DELAY_US 200000u

static int failures, checks;
static void *ptds_buf_for_thread;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                             \
    } while (0)

/* Expect a specific cudaError_t, printing both names on mismatch. */
#define EXPECT(call, want)                                                            \
    do {                                                                              \
        cudaError_t got_ = (call);                                                    \
        checks++;                                                                     \
        if (got_ != (want)) {                                                         \
            failures++;                                                               \
            fprintf(stderr, "FAIL %s:%d: %s -> %s, expected %s\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorName(got_), cudaGetErrorName(want));           \
        }                                                                             \
    } while (0)

#define OK(call) EXPECT(call, cudaSuccess)

static bool all_bytes(const void *p, int value, size_t n)
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

static void test_async_and_events(void)
{
    cudaStream_t s1, s2;
    cudaEvent_t e0, e1, e2, enotime;
    unsigned char *d = NULL, *h = NULL;
    const size_t n = 4096;
    unsigned flags = 99;
    int prio = 1;

    OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithPriority(&s2, cudaStreamDefault, -3));
    OK(cudaStreamGetFlags(s1, &flags));
    CHECK(flags == cudaStreamNonBlocking);
    OK(cudaStreamGetFlags(s2, &flags));
    CHECK(flags == cudaStreamDefault);
    OK(cudaStreamGetPriority(s2, &prio));
    CHECK(prio == -3);
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    OK(cudaEventCreateWithFlags(&e2, cudaEventBlockingSync));
    OK(cudaEventCreateWithFlags(&enotime, cudaEventDisableTiming));
    OK(cudaMalloc((void **)&d, n));
    OK(cudaMallocHost((void **)&h, n));
    OK(cudaMemset(d, 0, n));

    /* Work completes after the call that enqueued it. */
    OK(cudaEventQuery(e0)); /* never recorded: complete */
    OK(cudaEventRecord(e0, s1));
    OK(simLaunchFill(d, 0x5A, n, DELAY_US, s1));
    OK(cudaEventRecord(e1, s1));
    OK(cudaEventRecord(enotime, s1));
    CHECK(d[0] == 0 && d[n - 1] == 0);
    EXPECT(cudaStreamQuery(s1), cudaErrorNotReady);
    EXPECT(cudaEventQuery(e1), cudaErrorNotReady);
    EXPECT(cudaGetLastError(), cudaSuccess); /* NotReady is not an error */
    float ms = -1;
    EXPECT(cudaEventElapsedTime(&ms, e0, e1), cudaErrorNotReady);

    /* s2 waits for e1, then copies d to pinned h: must see the fill. */
    OK(cudaStreamWaitEvent(s2, e1, 0));
    OK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s2));
    OK(cudaEventRecord(e2, s2));
    OK(cudaEventSynchronize(e2));
    CHECK(all_bytes(h, 0x5A, n));
    OK(cudaEventQuery(e1));
    OK(cudaStreamQuery(s1));
    OK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 150.0f); /* the fill slept 200 ms between the markers */
    EXPECT(cudaEventElapsedTime(&ms, e0, enotime), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();

    /* Legacy stream and other streams are independent. */
    OK(simLaunchSleep(DELAY_US, s1));
    OK(cudaStreamQuery(cudaStreamLegacy));
    OK(cudaStreamQuery(NULL));
    EXPECT(cudaStreamQuery(s1), cudaErrorNotReady);
    OK(cudaStreamSynchronize(s1));

    /* ...except that an event recorded on the legacy stream completes only
     * after the work queued before it on the blocking streams (s2), never
     * waiting for non-blocking ones (s1). */
    OK(simLaunchSleep(DELAY_US, s2));
    OK(cudaEventRecord(e0, cudaStreamLegacy));
    EXPECT(cudaEventQuery(e0), cudaErrorNotReady);
    OK(cudaEventSynchronize(e0));
    OK(cudaStreamQuery(s2));
    OK(simLaunchSleep(DELAY_US, s1));
    OK(cudaEventRecord(e0, NULL));
    OK(cudaEventSynchronize(e0));
    EXPECT(cudaStreamQuery(s1), cudaErrorNotReady);
    OK(cudaStreamSynchronize(s1));

    /* Async copies with a pageable host side return only when done. */
    unsigned char pageable[64];
    memset(pageable, 0x33, sizeof pageable);
    OK(simLaunchSleep(DELAY_US, s1));
    OK(cudaMemcpyAsync(d, pageable, sizeof pageable, cudaMemcpyHostToDevice, s1));
    CHECK(all_bytes(d, 0x33, sizeof pageable));

    EXPECT(cudaLaunchHostFunc(s1, NULL, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* A destroyed stream still finishes its work; the device sync waits. */
    cudaStream_t s3;
    OK(cudaStreamCreate(&s3));
    OK(simLaunchFill(d, 0x77, n, DELAY_US, s3));
    OK(cudaStreamDestroy(s3));
    EXPECT(cudaStreamQuery(s3), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CHECK(d[n - 1] != 0x77);
    OK(cudaDeviceSynchronize());
    CHECK(all_bytes(d, 0x77, n));

    OK(cudaEventDestroy(e0));
    OK(cudaEventDestroy(e1));
    OK(cudaEventDestroy(e2));
    OK(cudaEventDestroy(enotime));
    EXPECT(cudaEventQuery(e0), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    OK(cudaStreamDestroy(s1));
    OK(cudaStreamDestroy(s2));
    OK(cudaFree(d));
    OK(cudaFreeHost(h));
}

static void host_fn(void *arg)
{
    *(int *)arg = 42;
}

static void test_host_func(void)
{
    cudaStream_t s;
    static int value;
    value = 0;
    OK(cudaStreamCreate(&s));
    OK(simLaunchSleep(DELAY_US / 2, s));
    OK(cudaLaunchHostFunc(s, host_fn, &value));
    CHECK(value == 0);
    OK(cudaStreamSynchronize(s));
    CHECK(value == 42);
    OK(cudaStreamDestroy(s));
}

static void test_stream_ordered(void)
{
    cudaStream_t s, other;
    cudaMemPool_t pool, mine;
    void *p = NULL;
    size_t f0, f1, t;
    unsigned long long used = 1;

    OK(cudaStreamCreate(&s));
    OK(cudaStreamCreate(&other));
    OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    OK(cudaMemGetInfo(&f0, &t));
    OK(cudaMallocAsync(&p, MiB, s));
    CHECK(p != NULL);
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CHECK(used == MiB);
    OK(simLaunchSleep(DELAY_US, s));
    OK(cudaFreeAsync(p, s));
    EXPECT(cudaFreeAsync(p, s), cudaErrorInvalidValue); /* already being freed */
    (void)cudaGetLastError();
    OK(cudaMemGetInfo(&f1, &t));
    CHECK(f0 - f1 == MiB); /* not released yet: the stream has not got there */
    OK(cudaStreamSynchronize(s));
    OK(cudaMemGetInfo(&f1, &t));
    CHECK(f1 == f0);
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    CHECK(used == 0);
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used));
    CHECK(used >= MiB);

    /* Explicit pool with a size limit. */
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    props.maxSize = 2 * MiB;
    OK(cudaMemPoolCreate(&mine, &props));
    OK(cudaMallocFromPoolAsync(&p, MiB, mine, s));
    void *p2 = (void *)1;
    EXPECT(cudaMallocFromPoolAsync(&p2, 2 * MiB, mine, s), cudaErrorMemoryAllocation);
    CHECK(p2 == NULL);
    (void)cudaGetLastError();
    OK(cudaMemPoolTrimTo(mine, 0));
    OK(cudaMemPoolDestroy(mine)); /* outstanding allocation keeps it alive */
    OK(cudaFreeAsync(p, s));
    OK(cudaStreamSynchronize(s));
    EXPECT(cudaMemPoolDestroy(pool), cudaErrorInvalidValue); /* default pool */
    (void)cudaGetLastError();

    /* Stale write: a kernel still queued on s while the memory is freed in
     * stream order on another stream.  cudaFreeAsync does not synchronise. */
    unsigned long long stale0 = simStaleWrites();
    OK(cudaMalloc(&p, 8192));
    OK(simLaunchFill(p, 0x11, 8192, DELAY_US, s));
    OK(cudaFreeAsync(p, other));
    OK(cudaStreamSynchronize(other));
    OK(cudaStreamSynchronize(s));
    CHECK(simStaleWrites() == stale0 + 1);

    /* Stale read: the source is freed before the queued copy runs; the
     * destination then holds the 0xDB poison of freed device memory. */
    unsigned long long staler0 = simStaleReads();
    unsigned char *h = NULL;
    OK(cudaMallocHost((void **)&h, 4096));
    memset(h, 0, 4096);
    OK(cudaMalloc(&p, 4096));
    OK(simLaunchSleep(DELAY_US, s));
    OK(cudaMemcpyAsync(h, p, 4096, cudaMemcpyDeviceToHost, s));
    OK(cudaFreeAsync(p, other));
    OK(cudaStreamSynchronize(s));
    CHECK(simStaleReads() == staler0 + 1);
    CHECK(all_bytes(h, 0xDB, 4096));
    OK(cudaFreeHost(h));

    /* cudaFree waits for the device, so the same pattern is safe there. */
    struct simStats st0, st1;
    simGetStats(&st0);
    OK(cudaMalloc(&p, 8192));
    OK(simLaunchFill(p, 0x22, 8192, DELAY_US, s));
    OK(cudaFree(p));
    simGetStats(&st1);
    CHECK(simStaleWrites() == stale0 + 1);
    CHECK(st1.device_syncs == st0.device_syncs + 1);

    /* A kernel launched on already freed memory is a stale write too. */
    OK(cudaMalloc(&p, 512));
    OK(cudaFree(p));
    OK(simLaunchFill(p, 0x33, 512, 0, s));
    OK(cudaStreamSynchronize(s));
    CHECK(simStaleWrites() >= stale0 + 2);

    OK(cudaStreamDestroy(s));
    OK(cudaStreamDestroy(other));
}

static int device_symbol[64]; /* stands in for a __device__ variable */

static void test_copies(void)
{
    unsigned char *d = NULL, *d2 = NULL, hbuf[4096], out[4096];
    size_t pitch;
    for (size_t i = 0; i < sizeof hbuf; i++)
        hbuf[i] = (unsigned char)(i * 7 + 1);

    OK(cudaMalloc((void **)&d, 4096));
    OK(cudaMemcpy(d, hbuf, 4096, cudaMemcpyHostToDevice));
    CHECK(memcmp(d, hbuf, 4096) == 0);
    memset(out, 0, sizeof out);
    OK(cudaMemcpy(out, d, 4096, cudaMemcpyDefault));
    CHECK(memcmp(out, hbuf, 4096) == 0);

    /* Validation. */
    EXPECT(cudaMemcpy(out, hbuf, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(d + 4000, hbuf, 200, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(d, hbuf, 16, (enum cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    EXPECT(cudaMemset(out, 0, 16), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* 2D with pitches. */
    OK(cudaMallocPitch((void **)&d2, &pitch, 100, 8));
    CHECK(pitch == 512);
    OK(cudaMemset2D(d2, pitch, 0xEE, pitch, 8));
    OK(cudaMemcpy2D(d2, pitch, hbuf, 100, 100, 8, cudaMemcpyHostToDevice));
    CHECK(memcmp(d2 + 3 * pitch, hbuf + 300, 100) == 0 && d2[3 * pitch + 100] == 0xEE);
    memset(out, 0, sizeof out);
    OK(cudaMemcpy2D(out, 100, d2, pitch, 100, 8, cudaMemcpyDeviceToHost));
    CHECK(memcmp(out, hbuf, 800) == 0);
    EXPECT(cudaMemcpy2D(d2, 50, hbuf, 100, 100, 8, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
    (void)cudaGetLastError();

    /* 3D through a pitched pointer: copy a 10x2x3 box at (5,1,1). */
    struct cudaPitchedPtr pp;
    OK(cudaMalloc3D(&pp, extent3(64, 4, 4)));
    OK(cudaMemset3D(pp, 0, extent3(64, 4, 4)));
    struct cudaMemcpy3DParms p3;
    memset(&p3, 0, sizeof p3);
    p3.srcPtr = pitched(hbuf, 10, 10, 2);
    p3.dstPtr = pp;
    p3.dstPos = pos3(5, 1, 1);
    p3.extent = extent3(10, 2, 3);
    p3.kind = cudaMemcpyHostToDevice;
    OK(cudaMemcpy3D(&p3));
    unsigned char *base = pp.ptr;
    size_t slice = pp.pitch * pp.ysize;
    CHECK(memcmp(base + 1 * slice + 1 * pp.pitch + 5, hbuf, 10) == 0);
    CHECK(memcmp(base + 3 * slice + 2 * pp.pitch + 5, hbuf + 50, 10) == 0);
    CHECK(base[1 * slice + 1 * pp.pitch + 4] == 0 && base[0] == 0);

    /* CUDA arrays: 2D round trip, and a 3D copy out of an array. */
    cudaArray_t arr;
    struct cudaChannelFormatDesc desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    OK(cudaMallocArray(&arr, &desc, 16, 4, 0)); /* rows of 64 bytes */
    struct cudaExtent ext;
    struct cudaChannelFormatDesc desc2;
    unsigned aflags = 99;
    OK(cudaArrayGetInfo(&desc2, &ext, &aflags, arr));
    CHECK(desc2.x == 32 && desc2.f == cudaChannelFormatKindFloat && aflags == 0);
    CHECK(ext.width == 16 && ext.height == 4 && ext.depth == 0);
    OK(cudaMemcpy2DToArray(arr, 0, 0, hbuf, 64, 64, 4, cudaMemcpyHostToDevice));
    memset(out, 0, sizeof out);
    OK(cudaMemcpy2DFromArray(out, 32, arr, 8, 1, 32, 2, cudaMemcpyDeviceToHost));
    CHECK(memcmp(out, hbuf + 64 + 8, 32) == 0 && memcmp(out + 32, hbuf + 128 + 8, 32) == 0);
    memset(&p3, 0, sizeof p3);
    memset(out, 0, sizeof out);
    p3.srcArray = arr;
    p3.srcPos = pos3(2, 3, 0); /* elements */
    p3.dstPtr = pitched(out, 64, 16, 1);
    p3.extent = extent3(4, 1, 1); /* 4 floats */
    p3.kind = cudaMemcpyDeviceToHost;
    OK(cudaMemcpy3D(&p3));
    CHECK(memcmp(out, hbuf + 3 * 64 + 8, 16) == 0);
    EXPECT(cudaMemcpy2DToArray(arr, 40, 0, hbuf, 64, 32, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    OK(cudaFreeArray(arr));
    EXPECT(cudaFreeArray(arr), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* Symbols: the symbol's address is the device memory. */
    int vals[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
    OK(cudaMemcpyToSymbol(device_symbol, vals, sizeof vals, 8 * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(device_symbol[8] == 1 && device_symbol[11] == 4);
    OK(cudaMemcpyFromSymbol(back, device_symbol, sizeof back, 8 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, vals, sizeof vals) == 0);
    EXPECT(cudaMemcpyToSymbol(device_symbol, vals, 4, 0, cudaMemcpyDeviceToHost),
           cudaErrorInvalidMemcpyDirection);
    (void)cudaGetLastError();

    /* Peer copy into a device-1 allocation. */
    unsigned char *d1 = NULL;
    OK(cudaSetDevice(1));
    OK(cudaMalloc((void **)&d1, 4096));
    OK(cudaSetDevice(0));
    OK(cudaMemcpyPeer(d1, 1, d, 0, 4096));
    CHECK(memcmp(d1, hbuf, 4096) == 0);

    /* Batched copies (not allowed on the legacy stream). */
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    void *dsts[2] = { out, out + 100 };
    const void *srcs[2] = { d, d + 1000 };
    size_t sizes[2] = { 50, 60 }, idx = 0;
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    memset(out, 0, sizeof out);
    OK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s));
    OK(cudaStreamSynchronize(s));
    CHECK(memcmp(out, hbuf, 50) == 0 && memcmp(out + 100, hbuf + 1000, 60) == 0);
    EXPECT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, NULL), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* Per-thread default stream (as compiled with --default-stream
     * per-thread): independent of the legacy stream. */
    OK(simLaunchFill(d, 0x44, 4096, DELAY_US, cudaStreamPerThread));
    EXPECT(cudaStreamQuery_ptsz(NULL), cudaErrorNotReady);
    OK(cudaStreamQuery(NULL));
    OK(cudaMemcpyAsync_ptsz(out, d, 16, cudaMemcpyDeviceToHost, NULL)); /* pageable: waits */
    CHECK(all_bytes(out, 0x44, 16));
    OK(cudaMemcpy_ptds(d, hbuf, 16, cudaMemcpyHostToDevice));
    OK(cudaStreamSynchronize_ptsz(NULL));
    CHECK(memcmp(d, hbuf, 16) == 0);

    OK(cudaStreamDestroy(s));
    OK(cudaFree(pp.ptr));
    OK(cudaFree(d));
    OK(cudaFree(d2));
    OK(cudaFree(d1));
}

struct capture_thread_arg {
    cudaError_t malloc_err;
    enum cudaStreamCaptureMode mode;
};

static void *capture_other_thread(void *argp)
{
    struct capture_thread_arg *arg = argp;
    void *p = NULL;
    enum cudaStreamCaptureMode m = arg->mode;
    cudaThreadExchangeStreamCaptureMode(&m);
    arg->malloc_err = cudaMalloc(&p, 64);
    if (p)
        cudaFree(p);
    return NULL;
}

static cudaError_t malloc_in_thread(enum cudaStreamCaptureMode mode)
{
    pthread_t t;
    struct capture_thread_arg arg = { cudaErrorUnknown, mode };
    pthread_create(&t, NULL, capture_other_thread, &arg);
    pthread_join(t, NULL);
    return arg.malloc_err;
}

static void test_capture(void)
{
    cudaStream_t s, s2;
    cudaGraph_t g = (cudaGraph_t)1;
    cudaEvent_t outside, inside;
    enum cudaStreamCaptureStatus st;
    unsigned long long id = 0;
    void *p = NULL, *d = NULL;

    OK(cudaStreamCreate(&s));
    OK(cudaStreamCreate(&s2));
    OK(cudaEventCreate(&outside));
    OK(cudaEventCreate(&inside));
    OK(cudaMalloc(&d, 256));
    OK(cudaEventRecord(outside, s2));
    OK(cudaStreamSynchronize(s2));

    EXPECT(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    (void)cudaGetLastError();

    /* Global mode: unsafe calls fail and invalidate the capture. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaStreamIsCapturing(s, &st));
    CHECK(st == cudaStreamCaptureStatusActive);
    OK(cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    CHECK(st == cudaStreamCaptureStatusActive && id != 0);
    OK(cudaStreamIsCapturing(s2, &st));
    CHECK(st == cudaStreamCaptureStatusNone);
    OK(cudaMemsetAsync(d, 1, 256, s)); /* capturable */
    EXPECT(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
    CHECK(p == NULL);
    EXPECT(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    OK(cudaStreamIsCapturing(s, &st));
    CHECK(st == cudaStreamCaptureStatusInvalidated);
    EXPECT(cudaFree(d), cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaStreamSynchronize(s2), cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaEventQuery(outside), cudaErrorStreamCaptureUnsupported);
    EXPECT(cudaEventSynchronize(outside), cudaErrorStreamCaptureUnsupported);
    EXPECT(malloc_in_thread(cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    OK(malloc_in_thread(cudaStreamCaptureModeRelaxed));
    EXPECT(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    CHECK(g == NULL);
    (void)cudaGetLastError();
    OK(cudaStreamIsCapturing(s, &st));
    CHECK(st == cudaStreamCaptureStatusNone);

    /* Captured events cannot be queried; syncing the capturing stream
     * itself is illegal in any mode. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    OK(cudaMemsetAsync(d, 2, 256, s));
    OK(cudaEventRecord(inside, s));
    EXPECT(cudaEventQuery(inside), cudaErrorCapturedEvent);
    EXPECT(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported); /* the capturing stream */
    EXPECT(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();

    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    OK(cudaMemsetAsync(d, 3, 256, s));
    OK(cudaEventRecord(inside, s));
    OK(cudaStreamWaitEvent(s2, inside, 0)); /* s2 joins the capture */
    OK(cudaStreamIsCapturing(s2, &st));
    CHECK(st == cudaStreamCaptureStatusActive);
    OK(malloc_in_thread(cudaStreamCaptureModeGlobal)); /* thread-local: others unaffected */
    OK(cudaStreamEndCapture(s, &g));
    CHECK(g != NULL);
    OK(cudaStreamIsCapturing(s2, &st));
    CHECK(st == cudaStreamCaptureStatusNone);
    OK(cudaGraphDestroy(g));

    /* Relaxed capture, or a relaxed thread, may call cudaMalloc. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    OK(cudaMalloc(&p, 64));
    OK(cudaFree(p));
    OK(cudaStreamEndCapture(s, &g));
    OK(cudaGraphDestroy(g));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == cudaStreamCaptureModeGlobal);
    OK(cudaMalloc(&p, 64));
    OK(cudaFree(p));
    OK(cudaThreadExchangeStreamCaptureMode(&mode));
    OK(cudaStreamEndCapture(s, &g));
    CHECK(g != NULL);
    OK(cudaGraphDestroy(g));

    OK(cudaEventRecord(inside, s2)); /* recorded outside capture again */
    OK(cudaEventSynchronize(inside));
    OK(cudaEventDestroy(inside));
    OK(cudaEventDestroy(outside));
    OK(cudaStreamDestroy(s));
    OK(cudaStreamDestroy(s2));
    OK(cudaFree(d));
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
