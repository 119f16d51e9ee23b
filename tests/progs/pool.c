/* pool.c - scenarios for the caching pool, on the simulated runtime.
 *
 * usage: pool SCENARIO. Prints what it found and "ok" last, or "FAIL ..."
 * and exits 1.
 *   reuse    blocks freed while simulated kernels on several non-blocking
 *            streams still write into them are reallocated at once; the
 *            new owner's data must never be overwritten by the old work
 *            (fences record an event on each of the streams)
 *   reuse-many  the same with nine non-blocking streams, one past what
 *            fences cover (they go off)
 *   reuse-destroyed  the same after a fifth non-blocking stream, its
 *            kernel still running, was destroyed (fences go off)
 *   reuse-joined LIB  the same with the old kernels run by a library
 *            (tests/progs/libs/joinlib.c, at path LIB) on 16 non-blocking
 *            streams of its own, joined back to the legacy stream
 *   reuse-unjoined LIB  the same, the library not joining: expects late
 *            writes into reused memory (a control, for fences told to
 *            leave the library's streams out)
 *   joined-scratch LIB  that library frees scratch memory inside a call
 *            while its own kernel still writes into it: the memory must
 *            not be handed out before that kernel is done
 *   reuse-blocking  the same on two blocking streams, the legacy stream
 *            and the per-thread stream: what the pool's fences cover
 *   reuse-legacy  the same with every kernel on the legacy stream (the
 *            new owner's host writes model any access not ordered after
 *            the old kernels)
 *   ordered-blocking  with GPUMEMTRACE_POOL_ORDERED=1: a 4 MiB block
 *            freed while a kernel on one blocking stream still writes it
 *            comes back at once for a kernel on another blocking stream;
 *            the barrier's event on the legacy stream orders the two, so
 *            the new owner's data must survive
 *   control  the same hazard created on purpose (cudaFreeAsync on another
 *            stream, which does not wait): proves the detector sees it
 *   oom      fill a small device, free (pending), allocate again, run out
 *            for real; recovered failures leave no error behind
 *   meminfo  cudaMemGetInfo counts the pool's idle memory as free
 *   ipc      IPC handles of pool blocks name the right memory or fail
 *   capture  while a stream captures, the pool neither synchronizes nor
 *            serves cudaMalloc (the runtime refuses it, as without us)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "simcudart.h"
#include "fail.h"

static int check_filled(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* Waves of 16 blocks of 96 KiB (1.5 MiB). With SIM_CUDA_MEM=3M the pool
 * can hold one 2 MiB small segment, so the second wave only fits in the
 * memory the first one freed - while the first wave's kernels, delayed by
 * 2 ms on four non-blocking streams, still write into it. */
enum streams { NON_BLOCKING, BLOCKING, LEGACY, MANY, DESTROYED, JOINED, UNJOINED };

/* JOINED, UNJOINED: the old kernels run on the 16 streams of a library
 * (tests/progs/libs/joinlib.c, dlopened from argv[2]), called on the
 * legacy stream, which does or does not join them back to it. */
static int (*g_fill)(void *, int, size_t, unsigned, cudaStream_t, int);
static int (*g_lib_sync)(void);
static int (*g_scratch)(size_t, unsigned, cudaStream_t, int, unsigned long *);

static void library(const char *path)
{
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (h == NULL)
        FAIL("no library: %s", path ? dlerror() : "no path given");
    g_fill = (int (*)(void *, int, size_t, unsigned, cudaStream_t, int))dlsym(h, "joinlib_fill");
    g_lib_sync = (int (*)(void))dlsym(h, "joinlib_sync");
    g_scratch = (int (*)(size_t, unsigned, cudaStream_t, int, unsigned long *))dlsym(
        h, "joinlib_scratch");
    if (g_fill == NULL || g_lib_sync == NULL || g_scratch == NULL)
        FAIL("library without joinlib_fill, joinlib_sync");
}

static void reuse(enum streams kind)
{
    enum { STREAMS = 4, ROUNDS = 40, WAVE = 16, SIZE = 96 * 1024 };
    cudaStream_t s[STREAMS], extra[5];
    unsigned char *kept = NULL;
    for (int i = 0; kind == MANY && i < 5; i++)
        cudaStreamCreateWithFlags(&extra[i], cudaStreamNonBlocking);
    if (kind == DESTROYED) { /* its kernel outlives it */
        cudaStreamCreateWithFlags(&extra[0], cudaStreamNonBlocking);
        if (cudaMalloc((void **)&kept, SIZE) != cudaSuccess)
            FAIL("malloc kept");
        simLaunchFill(kept, 0xAA, SIZE, 2000, extra[0]);
        cudaStreamDestroy(extra[0]);
        cudaFree(kept);
    }
    for (int i = 0; i < STREAMS; i++) {
        if (kind == NON_BLOCKING || kind == MANY || kind == DESTROYED)
            cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
        else if (kind == BLOCKING && i < 2)
            cudaStreamCreateWithPriority(&s[i], cudaStreamDefault, -i);
        else if (kind == BLOCKING)
            s[i] = i == 2 ? cudaStreamLegacy : cudaStreamPerThread;
        else
            s[i] = i % 2 ? cudaStreamLegacy : NULL; /* both the legacy stream */
    }
    unsigned long corrupt = 0, reused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        unsigned char *old[WAVE], *fresh[WAVE];
        for (int i = 0; i < WAVE; i++) {
            if (cudaMalloc((void **)&old[i], SIZE) != cudaSuccess)
                FAIL("malloc old");
            if (kind == JOINED || kind == UNJOINED) {
                if (g_fill(old[i], 0xAA, SIZE, 2000, cudaStreamLegacy, kind == JOINED) != 0)
                    FAIL("joinlib_fill");
            } else {
                simLaunchFill(old[i], 0xAA, SIZE, 2000, s[i % STREAMS]);
            }
        }
        for (int i = 0; i < WAVE; i++)
            cudaFree(old[i]); /* the program is done; the GPU is not */
        for (int i = 0; i < WAVE; i++) {
            if (cudaMalloc((void **)&fresh[i], SIZE) != cudaSuccess)
                FAIL("malloc fresh");
            memset(fresh[i], 0x11, SIZE); /* the new owner's data */
            for (int j = 0; j < WAVE; j++)
                reused += fresh[i] == old[j];
        }
        if (kind == JOINED || kind == UNJOINED)
            g_lib_sync(); /* every old kernel has run now */
        else
            for (int i = 0; i < STREAMS; i++)
                cudaStreamSynchronize(s[i]);
        for (int i = 0; i < WAVE; i++) {
            corrupt += !check_filled(fresh[i], SIZE, 0x11);
            cudaFree(fresh[i]);
        }
    }
    cudaDeviceSynchronize();
    printf("rounds %d corrupt %lu reused_addresses %lu stale_writes %llu\n",
           ROUNDS, corrupt, reused, simStaleWrites());
    if (kind == UNJOINED) { /* the hazard on purpose: it must be seen */
        if (corrupt == 0)
            FAIL("no late write seen though the library did not join");
        return;
    }
    if (corrupt || simStaleWrites())
        FAIL("memory reused under pending GPU work");
    if (reused == 0)
        FAIL("no address was reused: the scenario did not test reuse");
}

/* The library's scratch memory: freed inside a call while its kernel,
 * on one of its own streams, still writes into it (joinlib_scratch). With
 * SIM_CUDA_MEM=3M the pool must reuse those blocks. */
static void joined_scratch(void)
{
    unsigned long reused = 0;
    int bad = g_scratch(96 * 1024, 2000, cudaStreamLegacy, 16, &reused);
    printf("scratch bad %d reused_addresses %lu\n", bad, reused);
    if (bad != 0)
        FAIL("the library's freed scratch memory was handed out under its queued work");
    if (reused == 0)
        FAIL("no address was reused: the scenario did not test reuse");
}

/* The hazard on purpose: a write lands in memory after it was freed. An
 * event orders it after the free, so the outcome does not depend on how
 * the simulator's stream threads happen to be scheduled. */
static void control(void)
{
    cudaStream_t a, b;
    cudaEvent_t freed;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaEventCreate(&freed);
    void *p;
    cudaMallocAsync(&p, 4096, a);
    cudaStreamSynchronize(a);
    cudaFreeAsync(p, b);             /* released in b's order... */
    cudaEventRecord(freed, b);
    cudaStreamWaitEvent(a, freed, 0); /* ...before a's kernel runs */
    simLaunchFill(p, 0xAA, 4096, 0, a);
    cudaDeviceSynchronize();
    printf("stale_writes %llu\n", simStaleWrites());
    if (simStaleWrites() == 0)
        FAIL("the detector missed a write into freed memory");
}

static void oom(void)
{
    /* SIM_CUDA_MEM=64M: the pool takes 16 MiB segments for 8 MiB blocks */
    void *p[64];
    int n = 0;
    while (n < 64 && cudaMalloc(&p[n], 8u << 20) == cudaSuccess)
        n++;
    cudaError_t last = cudaGetLastError();
    printf("filled %d blocks of 8 MiB, then %s\n", n, cudaGetErrorName(last));
    if (n < 4 || last != cudaErrorMemoryAllocation)
        FAIL("expected to run out with cudaErrorMemoryAllocation");
    for (int i = 0; i < n; i++)
        cudaFree(p[i]); /* pending: kernels might still use them */
    /* only the pending memory can serve this: the pool synchronizes once,
     * gives its 16 MiB segments back and takes a 40 MiB one */
    void *big;
    cudaError_t e = cudaMalloc(&big, 40u << 20);
    cudaError_t after = cudaGetLastError();
    printf("40 MiB after freeing: %s, then cudaGetLastError: %s\n",
           cudaGetErrorName(e), cudaGetErrorName(after));
    if (e != cudaSuccess || after != cudaSuccess)
        FAIL("recovery left an error behind or failed");
    void *huge;
    e = cudaMalloc(&huge, 100u << 20);
    after = cudaGetLastError();
    printf("100 MiB: %s, then cudaGetLastError: %s\n", cudaGetErrorName(e),
           cudaGetErrorName(after));
    if (e != cudaErrorMemoryAllocation || after != cudaErrorMemoryAllocation)
        FAIL("a real out-of-memory must fail like the runtime does");
    cudaFree(big);
}

static void ordered_blocking(void)
{
    enum { ROUNDS = 100, SIZE = 4 << 20 };
    cudaStream_t a, b;
    if (cudaStreamCreate(&a) != cudaSuccess || cudaStreamCreate(&b) != cudaSuccess)
        FAIL("stream create");
    unsigned long corrupt = 0, reused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        unsigned char *old, *fresh;
        if (cudaMalloc((void **)&old, SIZE) != cudaSuccess)
            FAIL("malloc old");
        simLaunchFill(old, 0xAA, SIZE, 300, a);
        cudaFree(old); /* the program is done; the GPU is not */
        if (cudaMalloc((void **)&fresh, SIZE) != cudaSuccess)
            FAIL("malloc fresh");
        reused += fresh == old;
        simLaunchFill(fresh, 0x11, SIZE, 0, b);
        cudaStreamSynchronize(a);
        cudaStreamSynchronize(b);
        corrupt += !check_filled(fresh, SIZE, 0x11);
        cudaFree(fresh);
    }
    printf("rounds %d corrupt %lu reused_addresses %lu\n", ROUNDS, corrupt, reused);
    if (corrupt)
        FAIL("%lu blocks lost their new owner's data", corrupt);
}

static void meminfo(void)
{
    size_t f0, f1, f2, t;
    cudaMemGetInfo(&f0, &t);
    void *p;
    cudaMalloc(&p, 1u << 20); /* the pool takes a 2 MiB segment */
    cudaMemGetInfo(&f1, &t);
    cudaFree(p);
    cudaMemGetInfo(&f2, &t);
    printf("free before %zu, with 1 MiB allocated %zu, after free %zu\n", f0, f1,
           f2);
    if (f0 - f1 != (1u << 20) || f2 != f0)
        FAIL("cudaMemGetInfo must count the pool's idle memory as free");
}

static void ipc(void)
{
    void *a, *b, *big;
    cudaIpcMemHandle_t h;
    struct simIpcHandleLayout l;
    cudaMalloc(&a, 4096);
    cudaMalloc(&b, 4096); /* same 2 MiB segment, not at its start */
    cudaMalloc(&big, 32u << 20);
    cudaError_t ea = cudaIpcGetMemHandle(&h, a);
    int a_ok = ea == cudaSuccess && simIpcHandleDecode(&h, &l) &&
               l.base == (uintptr_t)a;
    cudaError_t eb = cudaIpcGetMemHandle(&h, b);
    cudaError_t ebig = cudaIpcGetMemHandle(&h, big);
    int big_ok = ebig == cudaSuccess && simIpcHandleDecode(&h, &l) &&
                 l.base == (uintptr_t)big;
    printf("segment start: %s names it %d; inside: %s; 32 MiB: %s names it %d\n",
           cudaGetErrorName(ea), a_ok, cudaGetErrorName(eb),
           cudaGetErrorName(ebig), big_ok);
    if (!a_ok || eb != cudaErrorInvalidValue || !big_ok)
        FAIL("IPC handles must name the block or be refused");
}

static void capture(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *p, *q;
    cudaMalloc(&p, 4096);
    cudaFree(p); /* pending */
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess)
        FAIL("begin capture");
    cudaError_t e = cudaMalloc(&q, 4096); /* the runtime refuses this */
    cudaGraph_t g;
    cudaError_t end = cudaStreamEndCapture(s, &g);
    printf("cudaMalloc while capturing: %s; end capture: %s\n",
           cudaGetErrorName(e), cudaGetErrorName(end));
    if (e != cudaErrorStreamCaptureUnsupported)
        FAIL("cudaMalloc during capture must behave as without the pool");
    cudaGetLastError();
    if (cudaMalloc(&q, 4096) != cudaSuccess)
        FAIL("after capture");
    cudaFree(q);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *s = argv[1];
    if (!strcmp(s, "joined-scratch")) {
        library(argc > 2 ? argv[2] : NULL);
        joined_scratch();
    } else if (!strcmp(s, "reuse-joined") || !strcmp(s, "reuse-unjoined")) {
        library(argc > 2 ? argv[2] : NULL);
        reuse(!strcmp(s, "reuse-joined") ? JOINED : UNJOINED);
    } else if (!strcmp(s, "reuse"))
        reuse(NON_BLOCKING);
    else if (!strcmp(s, "reuse-blocking"))
        reuse(BLOCKING);
    else if (!strcmp(s, "reuse-legacy"))
        reuse(LEGACY);
    else if (!strcmp(s, "reuse-many"))
        reuse(MANY);
    else if (!strcmp(s, "reuse-destroyed"))
        reuse(DESTROYED);
    else if (!strcmp(s, "ordered-blocking"))
        ordered_blocking();
    else if (!strcmp(s, "control"))
        control();
    else if (!strcmp(s, "oom"))
        oom();
    else if (!strcmp(s, "meminfo"))
        meminfo();
    else if (!strcmp(s, "ipc"))
        ipc();
    else if (!strcmp(s, "capture"))
        capture();
    else
        return 2;
    printf("ok\n");
    return 0;
}
