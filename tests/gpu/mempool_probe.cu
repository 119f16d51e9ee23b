// mempool_probe.cu - how the driver's stream-ordered pool reserves memory,
// for whatif's model of it (gpumemreport whatif --policy cuda-async).
//
// Each experiment runs on a pool of its own (cudaMemPoolCreate on device
// 0, release threshold UINT64_MAX as PyTorch's cudaMallocAsync backend
// sets it), on one stream, synchronizing after every call, and prints one
// line: the experiment, then after each step the pool's reserved bytes
// (cudaMemPoolAttrReservedMemCurrent) in bytes.
//
// Build with nvcc -cudart shared.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rt_check.h"

static const size_t KiB = 1024, MiB = 1024 * 1024;
static cudaStream_t g_s;
static cudaMemPool_t g_pool;

static void fresh(void)
{
    if (g_pool) {
        CHECK(cudaStreamSynchronize(g_s));
        CHECK(cudaMemPoolDestroy(g_pool));
    }
    cudaMemPoolProps p = {};
    p.allocType = cudaMemAllocationTypePinned;
    p.location.type = cudaMemLocationTypeDevice;
    p.location.id = 0;
    CHECK(cudaMemPoolCreate(&g_pool, &p));
    uint64_t max = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(g_pool, cudaMemPoolAttrReleaseThreshold, &max));
}

static unsigned long long reserved(void)
{
    CHECK(cudaStreamSynchronize(g_s));
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(g_pool, cudaMemPoolAttrReservedMemCurrent, &v));
    return (unsigned long long)v;
}

static void *get(size_t n)
{
    void *p;
    CHECK(cudaMallocFromPoolAsync(&p, n, g_pool, g_s));
    return p;
}

static void put(void *p) { CHECK(cudaFreeAsync(p, g_s)); }

int main(void)
{
    CHECK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    // 1. One allocation of each size, alone in a pool.
    const size_t sizes[] = {512, 4 * KiB, 64 * KiB, 1 * MiB, 1 * MiB + 1, 2 * MiB,
                            2 * MiB + 1, 3 * MiB, 4 * MiB + 1, 10 * MiB, 20 * MiB + 1,
                            31 * MiB, 32 * MiB, 32 * MiB + 1, 33 * MiB, 63 * MiB,
                            64 * MiB + 1, 100 * MiB, 257 * MiB, 1000 * MiB};
    for (size_t s : sizes) {
        fresh();
        void *p = get(s);
        printf("single %zu %llu\n", s, reserved());
        put(p);
    }
    // 2. Many of one size, kept: where the reservation steps.
    const size_t many[] = {4 * KiB, 256 * KiB, 1 * MiB + 512, 3 * MiB, 9 * MiB, 40 * MiB};
    for (size_t s : many) {
        fresh();
        printf("many %zu", s);
        std::vector<void *> v;
        unsigned long long last = 0;
        for (int i = 0; i < 64; i++) {
            v.push_back(get(s));
            unsigned long long r = reserved();
            if (r != last)
                printf(" %d:%llu", i + 1, r);
            last = r;
        }
        printf("\n");
        for (void *p : v)
            put(p);
    }
    // 3. Reuse: a freed range serves smaller and larger requests?
    fresh();
    {
        void *a = get(100 * MiB);
        unsigned long long r0 = reserved();
        put(a);
        void *b = get(60 * MiB), *c = get(40 * MiB);
        unsigned long long r1 = reserved();
        put(b);
        put(c);
        void *d = get(120 * MiB);
        unsigned long long r2 = reserved();
        put(d);
        printf("reuse 100M %llu then-60M+40M %llu then-120M %llu\n", r0, r1, r2);
    }
    // 4. A hole: 50 MiB, 50 MiB, the first freed, 60 MiB asked.
    fresh();
    {
        void *a = get(50 * MiB), *b = get(50 * MiB);
        unsigned long long r0 = reserved();
        put(a);
        void *c = get(60 * MiB);
        unsigned long long r1 = reserved();
        put(b);
        put(c);
        void *d = get(100 * MiB);
        unsigned long long r2 = reserved();
        void *e = get(10 * MiB);
        unsigned long long r3 = reserved();
        put(d);
        put(e);
        printf("hole 50M+50M %llu free-first+60M %llu all-freed+100M %llu +10M %llu\n", r0,
               r1, r2, r3);
    }
    // 5. Small blocks in a freed large range, and a large block in freed
    //    small ones.
    fresh();
    {
        void *a = get(64 * MiB);
        put(a);
        std::vector<void *> v;
        for (int i = 0; i < 64; i++)
            v.push_back(get(512 * KiB));
        unsigned long long r0 = reserved();
        for (void *p : v)
            put(p);
        void *b = get(60 * MiB);
        unsigned long long r1 = reserved();
        put(b);
        printf("mix 64M-then-64x512K %llu then-60M %llu\n", r0, r1);
    }
    CHECK(cudaStreamSynchronize(g_s));
    return 0;
}
