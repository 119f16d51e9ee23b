/* example.c - the example the README's first command traces: a small
 * "training loop" written against the plain CUDA runtime API.
 *
 * Weights and optimizer state are allocated once; each step allocates
 * activations, copies a batch in, frees most activations and - the bug
 * gpumemtrace helps find - keeps one buffer per step that is never freed.
 * Builds against the real runtime (nvcc -cudart shared example.c) or the
 * simulated one (make tests).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define CHECK(call)                                                           \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define MiB (1u << 20)

static void *alloc_weights(size_t bytes)
{
    void *p;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMemset(p, 0, bytes));
    return p;
}

static void forward(void *batch, void **act, int layers, cudaStream_t s)
{
    for (int i = 0; i < layers; i++) {
        CHECK(cudaMalloc(&act[i], 4 * MiB));
        CHECK(cudaMemcpyAsync(act[i], batch, 1 * MiB, cudaMemcpyDeviceToDevice, s));
    }
}

static void *keep_for_logging(void *act, cudaStream_t s)
{
    void *copy; /* appended to a history that nobody frees */
    CHECK(cudaMalloc(&copy, 256 * 1024));
    CHECK(cudaMemcpyAsync(copy, act, 256 * 1024, cudaMemcpyDeviceToDevice, s));
    return copy;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    enum { LAYERS = 6 };
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *weights = alloc_weights(64 * MiB);
    void *adam_m = alloc_weights(64 * MiB), *adam_v = alloc_weights(64 * MiB);
    void *host_batch;
    CHECK(cudaMallocHost(&host_batch, 1 * MiB));
    memset(host_batch, 1, 1 * MiB);
    void *history[1024];
    for (int step = 0; step < steps && step < 1024; step++) {
        void *batch, *act[LAYERS];
        CHECK(cudaMalloc(&batch, 1 * MiB));
        CHECK(cudaMemcpyAsync(batch, host_batch, 1 * MiB, cudaMemcpyHostToDevice, s));
        forward(batch, act, LAYERS, s);
        history[step] = keep_for_logging(act[LAYERS - 1], s);
        CHECK(cudaStreamSynchronize(s));
        usleep(2000); /* stands in for the step's compute: steps take time */
        for (int i = 0; i < LAYERS; i++)
            CHECK(cudaFree(act[i]));
        CHECK(cudaFree(batch));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(weights));
    CHECK(cudaFree(adam_m));
    CHECK(cudaFree(adam_v));
    CHECK(cudaFreeHost(host_batch));
    CHECK(cudaStreamDestroy(s));
    printf("trained %d steps, %d log buffers kept (%p ...)\n", steps,
           steps < 1024 ? steps : 1024, steps > 0 ? history[0] : NULL);
    return 0;
}
