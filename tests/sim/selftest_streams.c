/*
 * selftest_streams.c - the self test's checks of streams and what runs on
 * them (tests/sim, not part of the library; see selftest.c): async work and
 * events, host functions, stream-ordered allocation, copies and capture.
 * Timing-based checks follow selftest.c's rule: delayed work has NOT
 * happened right after it was enqueued, and HAS after a synchronisation.
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
#include <unistd.h>

void test_async_and_events(void)
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

    /* ...and that work queued on a blocking stream (s2) runs after the
     * legacy stream's work queued before it; a non-blocking stream's (s1)
     * does not wait for it. */
    OK(simLaunchSleep(DELAY_US, cudaStreamLegacy));
    OK(cudaEventRecord(e0, s2));
    OK(cudaEventRecord(e1, s1));
    OK(cudaEventSynchronize(e1));
    EXPECT(cudaEventQuery(e0), cudaErrorNotReady);
    EXPECT(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);
    OK(cudaEventSynchronize(e0));
    OK(cudaStreamQuery(cudaStreamLegacy));

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

void test_host_func(void)
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

void test_stream_ordered(void)
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

void test_copies(void)
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

void test_capture(void)
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
