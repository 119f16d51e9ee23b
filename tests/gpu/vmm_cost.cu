/* vmm_cost.cu - what the driver's virtual memory calls cost, for the pool.
 *
 * A pool that remaps physical pages of free holes (instead of growing)
 * pays cuMemCreate / cuMemMap / cuMemSetAccess / cuMemUnmap / cuMemRelease
 * per move. This measures each, per size, on an idle GPU and while a
 * kernel is running on another buffer (does an unmap or a map wait for
 * the GPU?), against cudaMalloc + cudaFree of the same size.
 *
 * Build and run on a GPU host (tests/gpu/gpu-validate.sh does not; see
 * docs/benchmarks.md):
 *   nvcc -O2 -cudart shared -o vmm_cost tests/gpu/vmm_cost.cu -lcuda
 *   ./vmm_cost
 * Prints one line per size and state: median microseconds per call over
 * REPS repetitions.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPS 41

#define PROG "vmm_cost"
#include "cu_check.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, REPS, sizeof *v, cmp);
    return v[REPS / 2];
}

__global__ void spin(volatile int *p, long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
    p[threadIdx.x] = 1;
}

int main(void)
{
    CK(cuInit(0));
    cudaSetDevice(0);
    cudaFree(0); /* the primary context */
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int *busy = NULL;
    cudaMalloc((void **)&busy, 4096);
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    long long spin_cycles = (long long)clock_khz * 20; /* ~20 ms */
    printf("granularity %zu bytes\n", gran);
    size_t sizes[] = {2u << 20, 20u << 20, 128u << 20};
    for (int busy_gpu = 0; busy_gpu < 2; busy_gpu++) {
        for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            size_t sz = sizes[si];
            double t_create[REPS], t_map[REPS], t_access[REPS], t_unmap[REPS],
                t_release[REPS], t_malloc[REPS], t_free[REPS];
            CUdeviceptr va = 0;
            CK(cuMemAddressReserve(&va, sz, 0, 0, 0));
            for (int r = 0; r < REPS; r++) {
                if (busy_gpu)
                    spin<<<1, 32>>>(busy, spin_cycles);
                CUmemGenericAllocationHandle h;
                double t0 = now_us();
                CK(cuMemCreate(&h, sz, &prop, 0));
                double t1 = now_us();
                CK(cuMemMap(va, sz, 0, h, 0));
                double t2 = now_us();
                CK(cuMemSetAccess(va, sz, &acc, 1));
                double t3 = now_us();
                CK(cuMemUnmap(va, sz));
                double t4 = now_us();
                CK(cuMemRelease(h));
                double t5 = now_us();
                void *m = NULL;
                if (cudaMalloc(&m, sz) != cudaSuccess)
                    return 1;
                double t6 = now_us();
                cudaFree(m);
                double t7 = now_us();
                t_create[r] = t1 - t0;
                t_map[r] = t2 - t1;
                t_access[r] = t3 - t2;
                t_unmap[r] = t4 - t3;
                t_release[r] = t5 - t4;
                t_malloc[r] = t6 - t5;
                t_free[r] = t7 - t6;
                cudaDeviceSynchronize();
            }
            CK(cuMemAddressFree(va, sz));
            printf("%s size %4zu MiB: cuMemCreate %.1f cuMemMap %.1f cuMemSetAccess %.1f "
                   "cuMemUnmap %.1f cuMemRelease %.1f | cudaMalloc %.1f cudaFree %.1f us\n",
                   busy_gpu ? "busy" : "idle", sz >> 20, median(t_create), median(t_map),
                   median(t_access), median(t_unmap), median(t_release), median(t_malloc),
                   median(t_free));
        }
    }
    printf("(busy: a ~20 ms kernel on another buffer runs during each call; a call "
           "that waits for it takes ~20000 us)\n");

    /* What the pool's virtual memory mode does (GPUMEMTRACE_POOL_VMM=1):
     * move NP pages, mapped one by one, from one range to another - one
     * cuMemUnmap over the whole run, NP cuMemMap, one cuMemSetAccess - on
     * an idle GPU, and while memsets stream through a 1 GiB buffer (as a
     * training step's kernels keep the GPU's memory busy). */
    enum { NP = 64 };
    CUmemGenericAllocationHandle hs[NP];
    for (int i = 0; i < NP; i++)
        CK(cuMemCreate(&hs[i], gran, &prop, 0));
    CUdeviceptr ra = 0, rb = 0;
    CK(cuMemAddressReserve(&ra, NP * gran, gran, 0, 0));
    CK(cuMemAddressReserve(&rb, NP * gran, gran, 0, 0));
    for (int i = 0; i < NP; i++)
        CK(cuMemMap(ra + i * gran, gran, 0, hs[i], 0));
    CK(cuMemSetAccess(ra, NP * gran, &acc, 1));
    void *big = NULL;
    if (cudaMalloc(&big, 1ull << 30) != cudaSuccess)
        return 1;
    bool at_a = true; /* where the pages are mapped now */
    for (int busy_gpu = 0; busy_gpu < 2; busy_gpu++) {
        double t_unmap[REPS], t_map[REPS], t_access[REPS];
        for (int r = 0; r < REPS; r++) {
            if (busy_gpu)
                for (int k = 0; k < 64; k++)
                    cudaMemsetAsync(big, k, 1ull << 30, 0);
            CUdeviceptr from = at_a ? ra : rb, to = at_a ? rb : ra;
            at_a = !at_a;
            double t0 = now_us();
            CK(cuMemUnmap(from, NP * gran));
            double t1 = now_us();
            for (int i = 0; i < NP; i++)
                CK(cuMemMap(to + i * gran, gran, 0, hs[i], 0));
            double t2 = now_us();
            CK(cuMemSetAccess(to, NP * gran, &acc, 1));
            double t3 = now_us();
            t_unmap[r] = t1 - t0;
            t_map[r] = t2 - t1;
            t_access[r] = t3 - t2;
            cudaDeviceSynchronize();
        }
        printf("%s: moving %d pages of %zu MiB: one cuMemUnmap %.1f, %d cuMemMap %.1f, "
               "one cuMemSetAccess %.1f us (%.1f us a page)\n",
               busy_gpu ? "busy (memsets streaming)" : "idle", NP, gran >> 20,
               median(t_unmap), NP, median(t_map), median(t_access),
               (median(t_unmap) + median(t_map) + median(t_access)) / NP);
    }
    return 0;
}
