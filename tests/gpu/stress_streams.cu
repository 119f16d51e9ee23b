// stress_streams.cu - the pool's safety rule on a real GPU.
//
// usage: [STRESS_STREAMS=blocking|joined] stress_streams [ROUNDS] [HEADROOM_MIB]
//
// Rounds of: on each of 8 non-blocking streams, allocate a buffer, launch
// a kernel that spins ~200 us and then writes the OLD pattern into it,
// and cudaFree the buffer at once (the kernel is still running). Then
// allocate new buffers - under the pool these may land on the freed
// memory - and have a kernel on a different stream write the NEW pattern
// into each. When everything is done, every new buffer must hold only the
// NEW pattern: an OLD value means memory was handed out while queued work
// still wrote into it.
//
// STRESS_STREAMS=joined: blocking streams as above, and the old kernels
// run by a library (libgmtjoin.so, joinlib.cu) on 16 non-blocking streams
// of its own, forked from and joined back to the caller's stream, as cuDNN
// does; the pool's fences leave them out when GPUMEMTRACE_POOL_JOINED_STREAMS
// names the library.
//
// Build with nvcc -cudart shared (-lgmtjoin). Prints rounds, corruptions and how many
// new buffers reused a just-freed address (so the run proves something).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rt_check.h"

#include "slow_fill.cuh"

extern "C" int gmtjoin_fill(unsigned *p, size_t n, unsigned v, long long spin,
                            cudaStream_t caller);

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

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    size_t headroom = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
    const int S = 8;
    // Take nearly all device memory, so that new buffers can only come
    // from memory just freed: the pool must reuse, and wait to do it.
    size_t free_b, total_b;
    void *ballast = NULL;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b > headroom)
        CHECK(cudaMalloc(&ballast, free_b - headroom));
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    long long spin = (long long)clock_khz * 200 / 1000; /* ~200 us */
    // STRESS_STREAMS=blocking: blocking streams, the legacy stream and the
    // per-thread stream instead - what the pool's fences cover.
    const char *kind = getenv("STRESS_STREAMS");
    bool joined = kind && strcmp(kind, "joined") == 0;
    bool blocking = joined || (kind && strcmp(kind, "blocking") == 0);
    cudaStream_t st[S];
    for (int i = 0; i < S; i++)
        CHECK(cudaStreamCreateWithFlags(&st[i], blocking ? cudaStreamDefault
                                                         : cudaStreamNonBlocking));
    if (blocking) {
        st[0] = cudaStreamLegacy;
        st[1] = cudaStreamPerThread;
    }
    unsigned long long *bad;
    CHECK(cudaMallocHost(&bad, sizeof *bad));
    *bad = 0;
    unsigned long long reused = 0, checked = 0;
    for (int r = 0; r < rounds; r++) {
        std::vector<unsigned *> old(S), fresh(S);
        std::vector<size_t> n(S);
        for (int i = 0; i < S; i++) {
            n[i] = (size_t)(64 << 10) * (1 + (r * 7 + i) % 48); // 256 KiB .. 12 MiB
            CHECK(cudaMalloc(&old[i], n[i] * sizeof(unsigned)));
            if (joined) {
                if (gmtjoin_fill(old[i], n[i], 0xDEAD0000u + r, spin, st[i]) != 0) {
                    fprintf(stderr, "gmtjoin_fill failed\n");
                    exit(2);
                }
            } else {
                slow_fill<<<32, 256, 0, st[i]>>>(old[i], n[i], 0xDEAD0000u + r, spin);
            }
            CHECK(cudaFree(old[i])); // the kernel is still spinning
        }
        for (int i = 0; i < S; i++) {
            CHECK(cudaMalloc(&fresh[i], n[i] * sizeof(unsigned)));
            for (int j = 0; j < S; j++)
                reused += fresh[i] == old[j];
            // the new owner writes at once, on another stream
            slow_fill<<<64, 256, 0, st[(i + 1) % S]>>>(fresh[i], n[i], 0x600D0000u + r, 0);
        }
        CHECK(cudaDeviceSynchronize()); // every kernel, old and new, is done
        for (int i = 0; i < S; i++) {
            count_not<<<64, 256>>>(fresh[i], n[i], 0x600D0000u + r, bad);
            checked += n[i];
        }
        CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < S; i++)
            CHECK(cudaFree(fresh[i]));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(ballast));
    printf("rounds %d buffers %d words_checked %llu corrupted_words %llu "
           "reused_addresses %llu\n",
           rounds, rounds * S, checked, *bad, reused);
    return *bad != 0;
}
