/* vmm_stall.cu - do the driver's virtual memory calls slow down the GPU?
 *
 * The pool's virtual memory mode moves mappings while the program's
 * kernels run (GPUMEMTRACE_POOL_VMM=1). vmm_cost.cu measures what the
 * calls cost the CPU; this measures what they cost the GPU: the same
 * queue of memsets over a 1 GiB buffer is timed with events, once while
 * the CPU waits, once while the CPU moves a 16 MiB handle between two
 * address ranges (cuMemUnmap, cuMemMap, cuMemSetAccess) MOVES times. The
 * buffer is plain cudaMalloc memory, then memory mapped through the same
 * calls (as the pool's blocks are). If the calls stall the GPU, the GPU's
 * time grows by about what they take.
 *
 *   nvcc -O2 -cudart shared -o vmm_stall tests/gpu/vmm_stall.cu -lcuda
 *   ./vmm_stall
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MOVES 200
#define MEMSETS 400
#define ROUNDS 5

#define PROG "vmm_stall"
#include "cu_check.h"
#define CR(x)                                                                 \
    do {                                                                      \
        cudaError_t r_ = (x);                                                 \
        if (r_ != cudaSuccess) {                                              \
            fprintf(stderr, "vmm_stall: %s: %s (line %d)\n", #x,              \
                    cudaGetErrorName(r_), __LINE__);                          \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static CUmemAllocationProp prop;
static CUmemAccessDesc acc;

/* GPU milliseconds for MEMSETS memsets of buf (1 GiB), while the CPU does
 * `moves` moves of h between ra and rb; *cpu_ms: the CPU's time in them. */
static float timed(void *buf, int moves, CUmemGenericAllocationHandle h,
                   CUdeviceptr ra, CUdeviceptr rb, size_t hs, double *cpu_ms)
{
    cudaEvent_t e0, e1;
    CR(cudaEventCreate(&e0));
    CR(cudaEventCreate(&e1));
    CR(cudaEventRecord(e0, 0));
    for (int k = 0; k < MEMSETS; k++)
        CR(cudaMemsetAsync(buf, k, 1ull << 30, 0));
    CR(cudaEventRecord(e1, 0));
    double t0 = now_ms();
    for (int m = 0; m < moves; m++) {
        CUdeviceptr from = m % 2 ? rb : ra, to = m % 2 ? ra : rb;
        CK(cuMemUnmap(from, hs));
        CK(cuMemMap(to, hs, 0, h, 0));
        CK(cuMemSetAccess(to, hs, &acc, 1));
    }
    *cpu_ms = now_ms() - t0;
    CR(cudaEventSynchronize(e1));
    float ms = 0;
    CR(cudaEventElapsedTime(&ms, e0, e1));
    CR(cudaEventDestroy(e0));
    CR(cudaEventDestroy(e1));
    return ms;
}

int main(void)
{
    CK(cuInit(0));
    CR(cudaSetDevice(0));
    CR(cudaFree(0));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t hs = 16u << 20;
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, hs, &prop, 0));
    CUdeviceptr ra = 0, rb = 0;
    CK(cuMemAddressReserve(&ra, hs, 0, 0, 0));
    CK(cuMemAddressReserve(&rb, hs, 0, 0, 0));
    CK(cuMemMap(ra, hs, 0, h, 0));
    CK(cuMemSetAccess(ra, hs, &acc, 1));

    /* the two kinds of buffer the memsets stream through */
    void *plain = NULL;
    CR(cudaMalloc(&plain, 1ull << 30));
    CUdeviceptr mapped = 0;
    CK(cuMemAddressReserve(&mapped, 1ull << 30, 0, 0, 0));
    for (size_t off = 0; off < (1ull << 30); off += hs) {
        CUmemGenericAllocationHandle b;
        CK(cuMemCreate(&b, hs, &prop, 0));
        CK(cuMemMap(mapped + off, hs, 0, b, 0));
    }
    CK(cuMemSetAccess(mapped, 1ull << 30, &acc, 1));

    void *bufs[2] = {plain, (void *)mapped};
    const char *names[2] = {"cudaMalloc buffer", "mapped buffer"};
    double cpu = 0;
    timed(plain, 0, h, ra, rb, hs, &cpu); /* warm up */
    for (int bi = 0; bi < 2; bi++) {
        double quiet = 0, busy = 0, cpu_sum = 0;
        int moved = 0;
        for (int r = 0; r < ROUNDS; r++) {
            quiet += timed(bufs[bi], 0, h, ra, rb, hs, &cpu);
            busy += timed(bufs[bi], MOVES, h, ra, rb, hs, &cpu);
            cpu_sum += cpu;
            moved += MOVES;
        }
        /* an even number of moves per round: h is back at ra */
        printf("%s: GPU %.2f ms for %d memsets of 1 GiB with the CPU idle, "
               "%.2f ms while it made %d moves (%.1f us each on the CPU): "
               "%+.1f us of GPU time per move\n",
               names[bi], quiet / ROUNDS, MEMSETS, busy / ROUNDS, MOVES,
               cpu_sum * 1e3 / moved, (busy - quiet) * 1e3 / moved);
    }
    return 0;
}
