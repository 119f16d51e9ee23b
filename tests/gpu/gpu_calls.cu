// gpu_calls.cu - the GPU counterpart of tests/progs/calls.c: real kernels,
// real copies, several threads, counted by the program itself.
//
// Build with `nvcc -cudart shared` (a static cudart is invisible to
// LD_PRELOAD). Prints "api <entry point> <n>", "kind <kind> <n>",
// "bytes_allocated <n>" and "ok"; tests/gpu/gpu-validate.sh compares these
// with `gpumemreport info --json` of the trace.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

static std::mutex mu;
static std::map<std::string, long> counts;
static long long bytes_allocated;
static std::atomic<int> failures{0};

#define CALL(expr, api, kind)                                                  \
    do {                                                                       \
        cudaError_t e_ = (expr);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,      \
                    cudaGetErrorString(e_));                                   \
            failures++;                                                        \
        }                                                                      \
        std::lock_guard<std::mutex> g(mu);                                     \
        if (api[0])                                                            \
            counts[std::string("api ") + api]++;                               \
        counts[std::string("kind ") + kind]++;                                 \
    } while (0)

__device__ char dev_symbol[4096];

__global__ void fill(float *p, size_t n, float v)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v + (float)(i % 7);
}

static void worker(int id, int rounds)
{
    cudaStream_t s;
    CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
         "cudaStreamCreateWithFlags", "stream_create");
    std::vector<float> host(1 << 16);
    for (int r = 0; r < rounds; r++) {
        size_t n = (size_t)(1 << 14) * (1 + (r + id) % 5);
        float *d;
        CALL(cudaMalloc(&d, n * sizeof(float)), "cudaMalloc", "alloc");
        {
            std::lock_guard<std::mutex> g(mu);
            bytes_allocated += (long long)(n * sizeof(float));
        }
        fill<<<64, 256, 0, s>>>(d, n, (float)r);
        CALL(cudaMemcpyAsync(host.data(), d, 4096 * sizeof(float),
                             cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync", "memcpy");
        CALL(cudaMemsetAsync(d, 0, n * sizeof(float), s), "cudaMemsetAsync",
             "memset");
        CALL(cudaStreamSynchronize(s), "cudaStreamSynchronize", "sync");
        if (host[1] != (float)r + 1.0f)
            failures++;
        CALL(cudaFree(d), "cudaFree", "free_requested");
    }
    CALL(cudaStreamDestroy(s), "", "stream_destroy");
}

int main()
{
    CALL(cudaSetDevice(0), "", "set_device");
    size_t free_b, total_b;
    CALL(cudaMemGetInfo(&free_b, &total_b), "", "mem_get_info");

    void *d1, *d2, *h1, *m1, *p1, *a1;
    size_t pitch;
    CALL(cudaMalloc(&d1, 1 << 20), "cudaMalloc", "alloc");
    CALL(cudaMalloc(&d2, 1 << 20), "cudaMalloc", "alloc");
    bytes_allocated += 2 << 20;
    CALL(cudaMallocManaged(&m1, 1 << 16), "cudaMallocManaged", "alloc");
    CALL(cudaMallocPitch(&p1, &pitch, 1000, 100), "cudaMallocPitch", "alloc");
    CALL(cudaMallocHost(&h1, 1 << 20), "cudaMallocHost", "alloc");
    cudaStream_t s;
    CALL(cudaStreamCreate(&s), "cudaStreamCreate", "stream_create");
    CALL(cudaMallocAsync(&a1, 1 << 20, s), "cudaMallocAsync", "alloc");

    std::vector<char> pageable(1 << 20, 3);
    CALL(cudaMemcpy(d1, pageable.data(), 1 << 20, cudaMemcpyHostToDevice),
         "cudaMemcpy", "memcpy");
    CALL(cudaMemcpy(d2, d1, 1 << 20, cudaMemcpyDefault), "cudaMemcpy", "memcpy");
    CALL(cudaMemcpyAsync(h1, d2, 1 << 20, cudaMemcpyDeviceToHost, s),
         "cudaMemcpyAsync", "memcpy");
    CALL(cudaMemcpy2D(p1, pitch, pageable.data(), 1000, 1000, 100,
                      cudaMemcpyHostToDevice),
         "cudaMemcpy2D", "memcpy");
    CALL(cudaMemcpyToSymbol(dev_symbol, pageable.data(), 4096),
         "cudaMemcpyToSymbol", "memcpy");
    CALL(cudaMemset(d1, 0, 1 << 20), "cudaMemset", "memset");
    CALL(cudaMemset2D(p1, pitch, 1, 1000, 100), "cudaMemset2D", "memset");
    CALL(cudaStreamSynchronize(s), "cudaStreamSynchronize", "sync");

    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++)
        threads.emplace_back(worker, i, 50);
    for (auto &t : threads)
        t.join();

    CALL(cudaFreeAsync(a1, s), "cudaFreeAsync", "free_requested");
    CALL(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "sync");
    CALL(cudaFree(d1), "cudaFree", "free_requested");
    CALL(cudaFree(d2), "cudaFree", "free_requested");
    CALL(cudaFree(m1), "cudaFree", "free_requested");
    CALL(cudaFree(p1), "cudaFree", "free_requested");
    CALL(cudaFreeHost(h1), "cudaFreeHost", "free_requested");
    CALL(cudaStreamDestroy(s), "", "stream_destroy");

    // out of memory: recorded, and the error is the program's to read
    void *huge;
    if (cudaMalloc(&huge, total_b * 4) != cudaErrorMemoryAllocation)
        failures++;
    counts["api cudaMalloc"]++;
    counts["kind oom"]++;
    if (cudaGetLastError() != cudaErrorMemoryAllocation)
        failures++;

    for (auto &kv : counts)
        printf("%s %ld\n", kv.first.c_str(), kv.second);
    printf("bytes_allocated %lld\n", bytes_allocated);
    printf(failures ? "FAILED %d\n" : "ok\n", failures.load());
    return failures != 0;
}
