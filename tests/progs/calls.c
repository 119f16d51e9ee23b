/* calls.c - calls every intercepted CUDA runtime entry point a known number
 * of times and prints what it did, so the test can compare the trace's
 * counts with the calls made.
 *
 * Output: one line per count, "api <entry point> <n>" and
 * "kind <event kind> <n>", then "ok". Exit status 1 if a call failed that
 * should have succeeded (the simulated runtime is wrong, or we broke it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "simcudart.h"

/* per-thread-default-stream exports, as --default-stream per-thread code
 * calls them */
extern __typeof__(cudaMemcpy) cudaMemcpy_ptds;
extern __typeof__(cudaMemcpyAsync) cudaMemcpyAsync_ptsz;
extern __typeof__(cudaMemset) cudaMemset_ptds;
extern __typeof__(cudaMemsetAsync) cudaMemsetAsync_ptsz;
extern __typeof__(cudaMallocAsync) cudaMallocAsync_ptsz;
extern __typeof__(cudaFreeAsync) cudaFreeAsync_ptsz;
extern __typeof__(cudaStreamSynchronize) cudaStreamSynchronize_ptsz;
extern __typeof__(cudaMemcpy2D) cudaMemcpy2D_ptds;

#define MAXN 128
static const char *names[MAXN];
static int counts[MAXN];
static int failures;

static void count(const char *name)
{
    for (int i = 0; i < MAXN; i++) {
        if (names[i] == NULL)
            names[i] = name;
        if (strcmp(names[i], name) == 0) {
            counts[i]++;
            return;
        }
    }
}

/* Make a call that must succeed and count it under its entry point and
 * event kind. */
#define CALL(expr, api, kind)                                                 \
    do {                                                                      \
        cudaError_t e_ = (expr);                                              \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__,     \
                    #expr, (int)e_);                                          \
            failures++;                                                       \
        }                                                                     \
        count("api " api);                                                    \
        count("kind " kind);                                                  \
    } while (0)

static char symbol_area[4096]; /* stands in for a __device__ variable */

int main(void)
{
    cudaStream_t s;
    void *d1, *d2, *d3, *h1, *h2, *m1, *p1, *a1, *a2;
    size_t pitch, free_b, total_b;
    char host[8192];
    memset(host, 7, sizeof host);

    CALL(cudaSetDevice(0), "", "set_device");
    CALL(cudaStreamCreate(&s), "cudaStreamCreate", "stream_create");
    cudaStream_t s2, s3;
    CALL(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking),
         "cudaStreamCreateWithFlags", "stream_create");
    CALL(cudaStreamCreateWithPriority(&s3, 0, -1),
         "cudaStreamCreateWithPriority", "stream_create");

    for (int i = 0; i < 3; i++) {
        CALL(cudaMalloc(&d1, 1000 + (size_t)i), "cudaMalloc", "alloc");
        CALL(cudaFree(d1), "cudaFree", "free_requested");
    }
    CALL(cudaMalloc(&d1, 8192), "cudaMalloc", "alloc");
    CALL(cudaMalloc(&d2, 8192), "cudaMalloc", "alloc");
    CALL(cudaMallocManaged(&m1, 4096, cudaMemAttachGlobal), "cudaMallocManaged",
         "alloc");
    CALL(cudaMallocPitch(&p1, &pitch, 100, 10), "cudaMallocPitch", "alloc");
    struct cudaPitchedPtr pp;
    struct cudaExtent ext = {64, 4, 2};
    CALL(cudaMalloc3D(&pp, ext), "cudaMalloc3D", "alloc");
    CALL(cudaMallocHost(&h1, 8192), "cudaMallocHost", "alloc");
    CALL(cudaHostAlloc(&h2, 8192, cudaHostAllocDefault), "cudaHostAlloc",
         "alloc");
    CALL(cudaMallocAsync(&a1, 4096, s), "cudaMallocAsync", "alloc");
    CALL(cudaMallocAsync_ptsz(&a2, 4096, 0), "cudaMallocAsync_ptds", "alloc");
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess)
        failures++;
    CALL(cudaMallocFromPoolAsync(&d3, 4096, pool, s), "cudaMallocFromPoolAsync",
         "alloc");

    /* copies */
    CALL(cudaMemcpy(d1, host, 4096, cudaMemcpyHostToDevice), "cudaMemcpy",
         "memcpy");
    CALL(cudaMemcpy(host, d1, 4096, cudaMemcpyDeviceToHost), "cudaMemcpy",
         "memcpy");
    CALL(cudaMemcpy(d2, d1, 4096, cudaMemcpyDefault), "cudaMemcpy", "memcpy");
    CALL(cudaMemcpy(h1, d1, 4096, cudaMemcpyDefault), "cudaMemcpy", "memcpy");
    CALL(cudaMemcpy_ptds(d2, host, 100, cudaMemcpyHostToDevice),
         "cudaMemcpy_ptds", "memcpy");
    CALL(cudaMemcpyAsync(d1, h1, 4096, cudaMemcpyHostToDevice, s),
         "cudaMemcpyAsync", "memcpy");
    CALL(cudaMemcpyAsync_ptsz(d1, h1, 4096, cudaMemcpyHostToDevice, 0),
         "cudaMemcpyAsync_ptds", "memcpy");
    CALL(cudaMemcpy2D(d1, 64, host, 64, 64, 4, cudaMemcpyHostToDevice),
         "cudaMemcpy2D", "memcpy");
    CALL(cudaMemcpy2D_ptds(d1, 64, host, 64, 64, 4, cudaMemcpyHostToDevice),
         "cudaMemcpy2D_ptds", "memcpy");
    CALL(cudaMemcpy2DAsync(d1, 64, host, 64, 64, 4, cudaMemcpyHostToDevice, s),
         "cudaMemcpy2DAsync", "memcpy");
    struct cudaMemcpy3DParms p3;
    memset(&p3, 0, sizeof p3);
    p3.srcPtr = (struct cudaPitchedPtr){host, 64, 64, 4};
    p3.dstPtr = pp;
    p3.extent = (struct cudaExtent){64, 4, 2};
    p3.kind = cudaMemcpyHostToDevice;
    CALL(cudaMemcpy3D(&p3), "cudaMemcpy3D", "memcpy");
    CALL(cudaMemcpy3DAsync(&p3, s), "cudaMemcpy3DAsync", "memcpy");
    struct cudaMemcpy3DPeerParms pp3;
    memset(&pp3, 0, sizeof pp3);
    pp3.srcPtr = pp;
    pp3.dstPtr = pp;
    pp3.extent = (struct cudaExtent){64, 1, 1};
    CALL(cudaMemcpy3DPeer(&pp3), "cudaMemcpy3DPeer", "memcpy");
    CALL(cudaMemcpy3DPeerAsync(&pp3, s), "cudaMemcpy3DPeerAsync", "memcpy");
    CALL(cudaMemcpyPeer(d2, 0, d1, 0, 1024), "cudaMemcpyPeer", "memcpy");
    CALL(cudaMemcpyPeerAsync(d2, 0, d1, 0, 1024, s), "cudaMemcpyPeerAsync",
         "memcpy");
    CALL(cudaMemcpyToSymbol(symbol_area, host, 128, 16, cudaMemcpyHostToDevice),
         "cudaMemcpyToSymbol", "memcpy");
    CALL(cudaMemcpyFromSymbol(host, symbol_area, 128, 16,
                              cudaMemcpyDeviceToHost),
         "cudaMemcpyFromSymbol", "memcpy");
    CALL(cudaMemcpyToSymbolAsync(symbol_area, host, 128, 0,
                                 cudaMemcpyHostToDevice, s),
         "cudaMemcpyToSymbolAsync", "memcpy");
    CALL(cudaMemcpyFromSymbolAsync(host, symbol_area, 128, 0,
                                   cudaMemcpyDeviceToHost, s),
         "cudaMemcpyFromSymbolAsync", "memcpy");

    cudaArray_t arr = NULL, arr2 = NULL;
    struct cudaChannelFormatDesc desc = {8, 0, 0, 0, cudaChannelFormatKindUnsigned};
    if (cudaMallocArray(&arr, &desc, 64, 4, 0) != cudaSuccess ||
        cudaMallocArray(&arr2, &desc, 64, 4, 0) != cudaSuccess)
        failures++;
    CALL(cudaMemcpyToArray(arr, 0, 0, host, 64, cudaMemcpyHostToDevice),
         "cudaMemcpyToArray", "memcpy");
    CALL(cudaMemcpyFromArray(host, arr, 0, 0, 64, cudaMemcpyDeviceToHost),
         "cudaMemcpyFromArray", "memcpy");
    CALL(cudaMemcpyArrayToArray(arr2, 0, 0, arr, 0, 0, 64,
                                cudaMemcpyDeviceToDevice),
         "cudaMemcpyArrayToArray", "memcpy");
    CALL(cudaMemcpyToArrayAsync(arr, 0, 0, host, 64, cudaMemcpyHostToDevice, s),
         "cudaMemcpyToArrayAsync", "memcpy");
    CALL(cudaMemcpyFromArrayAsync(host, arr, 0, 0, 64, cudaMemcpyDeviceToHost, s),
         "cudaMemcpyFromArrayAsync", "memcpy");
    CALL(cudaMemcpy2DToArray(arr, 0, 0, host, 64, 64, 4, cudaMemcpyHostToDevice),
         "cudaMemcpy2DToArray", "memcpy");
    CALL(cudaMemcpy2DFromArray(host, 64, arr, 0, 0, 64, 4,
                               cudaMemcpyDeviceToHost),
         "cudaMemcpy2DFromArray", "memcpy");
    CALL(cudaMemcpy2DArrayToArray(arr2, 0, 0, arr, 0, 0, 64, 4,
                                  cudaMemcpyDeviceToDevice),
         "cudaMemcpy2DArrayToArray", "memcpy");
    CALL(cudaMemcpy2DToArrayAsync(arr, 0, 0, host, 64, 64, 4,
                                  cudaMemcpyHostToDevice, s),
         "cudaMemcpy2DToArrayAsync", "memcpy");
    CALL(cudaMemcpy2DFromArrayAsync(host, 64, arr, 0, 0, 64, 4,
                                    cudaMemcpyDeviceToHost, s),
         "cudaMemcpy2DFromArrayAsync", "memcpy");

    /* a batch of three copies is three events */
    void *dsts[3] = {d2, (char *)d2 + 1024, (char *)d2 + 2048};
    const void *srcs[3] = {d1, (char *)d1 + 1024, host};
    size_t sizes[3] = {512, 512, 512};
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    cudaError_t be = cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &attr_idx,
                                          1, s);
    if (be != cudaSuccess) {
        fprintf(stderr, "cudaMemcpyBatchAsync failed: %d\n", (int)be);
        failures++;
    }
    for (int i = 0; i < 3; i++) {
        count("api cudaMemcpyBatchAsync");
        count("kind memcpy");
    }

    /* sets */
    CALL(cudaMemset(d1, 1, 4096), "cudaMemset", "memset");
    CALL(cudaMemset_ptds(d1, 1, 4096), "cudaMemset_ptds", "memset");
    CALL(cudaMemsetAsync(d1, 2, 4096, s), "cudaMemsetAsync", "memset");
    CALL(cudaMemsetAsync_ptsz(d1, 2, 4096, 0), "cudaMemsetAsync_ptds", "memset");
    CALL(cudaMemset2D(p1, pitch, 3, 100, 10), "cudaMemset2D", "memset");
    CALL(cudaMemset2DAsync(p1, pitch, 3, 100, 10, s), "cudaMemset2DAsync",
         "memset");
    CALL(cudaMemset3D(pp, 4, ext), "cudaMemset3D", "memset");
    CALL(cudaMemset3DAsync(pp, 4, ext, s), "cudaMemset3DAsync", "memset");

    /* device and synchronization */
    CALL(cudaMemGetInfo(&free_b, &total_b), "", "mem_get_info");
    CALL(cudaStreamSynchronize(s), "cudaStreamSynchronize", "sync");
    CALL(cudaStreamSynchronize_ptsz(0), "cudaStreamSynchronize_ptds", "sync");
    CALL(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "sync");

    /* frees */
    CALL(cudaFreeAsync(a1, s), "cudaFreeAsync", "free_requested");
    CALL(cudaFreeAsync_ptsz(a2, 0), "cudaFreeAsync_ptds", "free_requested");
    CALL(cudaFreeAsync(d3, s), "cudaFreeAsync", "free_requested");
    CALL(cudaStreamSynchronize(s), "cudaStreamSynchronize", "sync");
    CALL(cudaFree(d1), "cudaFree", "free_requested");
    CALL(cudaFree(d2), "cudaFree", "free_requested");
    CALL(cudaFree(m1), "cudaFree", "free_requested");
    CALL(cudaFree(p1), "cudaFree", "free_requested");
    CALL(cudaFree(pp.ptr), "cudaFree", "free_requested");
    CALL(cudaFreeHost(h1), "cudaFreeHost", "free_requested");
    CALL(cudaFreeHost(h2), "cudaFreeHost", "free_requested");
    CALL(cudaStreamDestroy(s), "", "stream_destroy");
    CALL(cudaStreamDestroy(s2), "", "stream_destroy");
    CALL(cudaStreamDestroy(s3), "", "stream_destroy");
    cudaFreeArray(arr);
    cudaFreeArray(arr2);

    /* a failed allocation is recorded, as an out-of-memory event */
    void *huge;
    if (cudaMalloc(&huge, (size_t)1 << 50) != cudaErrorMemoryAllocation)
        failures++;
    count("api cudaMalloc");
    count("kind oom");
    if (cudaGetLastError() != cudaErrorMemoryAllocation)
        failures++;

    for (int i = 0; i < MAXN && names[i]; i++)
        if (strcmp(names[i], "api ") != 0)
            printf("%s %d\n", names[i], counts[i]);
    printf(failures ? "FAILED %d\n" : "ok\n", failures);
    return failures != 0;
}
