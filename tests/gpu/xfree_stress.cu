// xfree_stress.cu - the pool's two unsafe frees on a real GPU, kernels still
// writing.
//
// usage: xfree_stress MODE [ITERATIONS] [SPIN_US] [HEADROOM_MIB]
//   MODE: xdev-managed | xdev-async | xdev-malloc | freeasync | same-async
//   defaults: 300 iterations, 5000 us, 256 MiB
//
// Each iteration, on device 0: allocate 8 blocks (cudaMalloc, 256 KiB ..
// 12 MiB), launch on each of 8 non-blocking streams a kernel that spins
// SPIN_US and then writes the OLD pattern into its block, and free the
// blocks at once - cudaFree in the xdev modes, cudaFreeAsync on the
// kernel's own stream in `freeasync` - so that under the pool every block
// is pending while its kernel still runs. Then:
//   xdev-managed  cudaFree, with device 0 current, of managed memory made
//                 (and touched) on device 1 - memory the pool does not own;
//   xdev-async    the same with cudaMallocAsync memory of device 1;
//   xdev-malloc   the same with cudaMalloc memory of device 1 (a pool
//                 block of device 1 when traced);
//   freeasync     nothing more: the frees above were the faulty kind
//                 (cudaFreeAsync of the pool's own blocks on a busy stream);
//   same-async    cudaFree of cudaMallocAsync memory of device 0 itself:
//                 the real call waits for nothing (free_semantics), though
//                 the runtime calls the memory device 0's.
// A real cudaFree of device 1's memory may be no synchronization of device
// 0 at all; a pool that took it for one would hand the
// pending blocks out while their kernels run, as would one that let
// cudaFreeAsync of its blocks through or reused them at once.
// Right after, new blocks of the same sizes are allocated and a fast
// kernel on ANOTHER stream (8 more, idle, non-blocking) writes the NEW
// pattern into each. Once everything is done every new block must hold
// only the NEW pattern: an OLD word is a late write of a kernel into
// memory handed out again while it still ran.
//
// Most of device 0's memory is taken first (all but HEADROOM_MIB), so new
// blocks can only come from memory just freed: a correct pool must wait
// and reuse, a wrong one reuses without waiting. Device 1's memory is made
// before the kernels start, so that making it cannot wait for them.
//
// Prints
//   xfree_stress MODE iterations=N reused=R corrupted=C window=W exact=E
// reused: new blocks that overlap a block freed in the same iteration
// (exact: those with the very address); window: iterations in which a
// slow kernel was still running when the faulty free returned (after the
// frees, in freeasync mode) - the iterations a wrong reuse could corrupt.
// Untraced, the real cudaFree of the first block already waits for device
// 0, so window=0 is expected in the xdev modes; traced, those frees stay in
// the pool and window says whether the faulty free itself waited for
// device 0 (window=0 there: this GPU's cudaFree did, and the run could not
// have caught a pool that took that free for a synchronization). Exit: 0,
// 1 if any word is corrupted, 2 if a CUDA call fails. An xdev mode with
// fewer than 2 GPUs prints "xfree_stress MODE SKIP: needs 2 GPUs" and exits 0.
//
// Runs untraced (the baseline: the real runtime) and under
// LD_PRELOAD=libgpumemtrace.so. Build with nvcc -cudart shared.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define PROG "xfree_stress"
#define CHECK(x)                                                              \
    do {                                                                      \
        cudaError_t e_ = (x);                                                 \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s: %s: %s (line %d)\n", PROG, #x,               \
                    cudaGetErrorName(e_), __LINE__);                          \
            exit(2);                                                          \
        }                                                                     \
    } while (0)

static __device__ unsigned long long gtime(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins ns nanoseconds of the global timer, then writes v everywhere.
__global__ void slow_fill(unsigned *p, size_t n, unsigned v, unsigned long long ns)
{
    unsigned long long t0 = gtime();
    while (gtime() - t0 < ns)
        ;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void fast_fill(unsigned *p, size_t n, unsigned v)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void count_not(const unsigned *p, size_t n, unsigned v,
                          unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != v;
    if (mine)
        atomicAdd(bad, mine);
}

enum mode { M_MANAGED, M_ASYNC, M_MALLOC, M_FREEASYNC, M_SAME_ASYNC };
static const char *const names[] = {"xdev-managed", "xdev-async", "xdev-malloc",
                                    "freeasync", "same-async"};

int main(int argc, char **argv)
{
    int m = -1;
    for (int i = 0; argc > 1 && i < 5; i++)
        if (strcmp(argv[1], names[i]) == 0)
            m = i;
    if (m < 0) {
        fprintf(stderr,
                "usage: %s xdev-managed|xdev-async|xdev-malloc|freeasync|same-async "
                "[ITERATIONS] [SPIN_US] [HEADROOM_MIB]\n",
                PROG);
        return 2;
    }
    int iters = argc > 2 ? atoi(argv[2]) : 300;
    long spin_us = argc > 3 ? atol(argv[3]) : 5000;
    size_t headroom = (size_t)(argc > 4 ? atoi(argv[4]) : 256) << 20;
    if (iters <= 0)
        iters = 300;
    if (spin_us <= 0)
        spin_us = 5000;
    unsigned long long spin_ns = (unsigned long long)spin_us * 1000ull;
    bool xdev = m != M_FREEASYNC && m != M_SAME_ASYNC;
    bool victim_mode = m != M_FREEASYNC; // a free of memory the pool does not own
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    if (xdev && ndev < 2) {
        printf("xfree_stress %s SKIP: needs 2 GPUs (found %d)\n", names[m], ndev);
        return 0;
    }

    const int S = 8;
    cudaStream_t st[S], fst[S], st1 = NULL; // slow kernels, fills, device 1
    cudaEvent_t ev[S];
    if (victim_mode) { // the victim's stream, on its device
        CHECK(cudaSetDevice(xdev ? 1 : 0));
        CHECK(cudaStreamCreateWithFlags(&st1, cudaStreamNonBlocking));
    }
    CHECK(cudaSetDevice(0));
    for (int i = 0; i < S; i++) {
        CHECK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithFlags(&fst[i], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    }
    unsigned long long *bad;
    CHECK(cudaMallocHost(&bad, sizeof *bad));
    *bad = 0;
    // Take nearly all of device 0's memory: new blocks can only come from
    // memory just freed.
    size_t free_b, total_b;
    void *ballast = NULL;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b > headroom)
        CHECK(cudaMalloc(&ballast, free_b - headroom));

    unsigned long long reused = 0, exact = 0, window = 0, checked = 0;
    const size_t victim_bytes = 1u << 20;
    for (int r = 0; r < iters; r++) {
        // Device 1's memory, made while device 0 is idle.
        void *victim = NULL;
        if (victim_mode) {
            CHECK(cudaSetDevice(xdev ? 1 : 0));
            if (m == M_MANAGED)
                CHECK(cudaMallocManaged(&victim, victim_bytes, cudaMemAttachGlobal));
            else if (m == M_ASYNC || m == M_SAME_ASYNC)
                CHECK(cudaMallocAsync(&victim, victim_bytes, st1));
            else
                CHECK(cudaMalloc(&victim, victim_bytes));
            CHECK(cudaMemsetAsync(victim, r & 0xff, victim_bytes, st1));
            CHECK(cudaStreamSynchronize(st1));
            CHECK(cudaSetDevice(0));
        }
        std::vector<unsigned *> old(S), fresh(S);
        std::vector<size_t> n(S);
        const unsigned oldv = 0xDEAD0000u + (unsigned)r, newv = 0x600D0000u + (unsigned)r;
        // All blocks first, while the GPU is idle: a block allocated after
        // another one's free would make a correct pool (and the real
        // cudaFree) wait for the kernels one by one.
        for (int i = 0; i < S; i++) {
            n[i] = (size_t)(64 << 10) * (1 + (r * 7 + i) % 48); // 256 KiB .. 12 MiB
            CHECK(cudaMalloc(&old[i], n[i] * sizeof(unsigned)));
        }
        for (int i = 0; i < S; i++) {
            slow_fill<<<32, 256, 0, st[i]>>>(old[i], n[i], oldv, spin_ns);
            CHECK(cudaGetLastError());
            CHECK(cudaEventRecord(ev[i], st[i]));
        }
        for (int i = 0; i < S; i++) {
            if (m == M_FREEASYNC)
                CHECK(cudaFreeAsync(old[i], st[i])); // the stream is busy
            else
                CHECK(cudaFree(old[i])); // the kernel is still spinning
        }
        if (victim_mode)
            CHECK(cudaFree(victim)); // device 1's memory (or pool memory), device 0 current
        // Could a wrong reuse be caught this iteration?
        bool running = false;
        for (int i = 0; i < S; i++) {
            cudaError_t q = cudaEventQuery(ev[i]);
            if (q == cudaErrorNotReady) {
                (void)cudaGetLastError(); // not an error: leave none behind
                running = true;
            } else {
                CHECK(q);
            }
        }
        window += running;
        for (int i = 0; i < S; i++) {
            size_t bytes = n[i] * sizeof(unsigned);
            CHECK(cudaMalloc(&fresh[i], bytes));
            uintptr_t a = (uintptr_t)fresh[i];
            bool over = false, same = false;
            for (int j = 0; j < S; j++) {
                uintptr_t o = (uintptr_t)old[j], ob = n[j] * sizeof(unsigned);
                over |= a < o + ob && o < a + bytes;
                same |= fresh[i] == old[j];
            }
            reused += over;
            exact += same;
            // The new owner writes at once, on another stream - an idle
            // one: on a slow kernel's stream the fill would wait for it.
            fast_fill<<<132, 256, 0, fst[i]>>>(fresh[i], n[i], newv);
            CHECK(cudaGetLastError());
        }
        CHECK(cudaDeviceSynchronize()); // every kernel, old and new, is done
        for (int i = 0; i < S; i++) {
            count_not<<<64, 256>>>(fresh[i], n[i], newv, bad);
            CHECK(cudaGetLastError());
            checked += n[i];
        }
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < S; i++)
            CHECK(cudaFree(fresh[i]));
    }
    CHECK(cudaDeviceSynchronize());
    if (ballast)
        CHECK(cudaFree(ballast));
    printf("xfree_stress %s iterations=%d reused=%llu corrupted=%llu window=%llu "
           "exact=%llu words_checked=%llu spin_us=%ld\n",
           names[m], iters, reused, *bad, window, exact, checked, spin_us);
    return *bad != 0;
}
