// joinlib.cu - libgmtjoin.so, for stress_streams (STRESS_STREAMS=joined):
// a library that runs each call's work on 16 non-blocking streams of its
// own, forked from the caller's stream and joined back to it before the
// call returns, as cuDNN does. Half of its streams are made through the
// driver (cuStreamCreate, as libcudnn_graph does), half through the
// runtime. GMTJOIN_NOJOIN=1: it does not join (the hazard, on purpose).
//
// Build with nvcc -cudart shared -shared -Xcompiler -fPIC ... -lcuda.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "slow_fill.cuh"

static const int N = 16;
static cudaStream_t g_stream[N];
static cudaEvent_t g_fork, g_done[N];

static int setup(void)
{
    if (g_stream[0] != NULL)
        return 0;
    if (cudaEventCreateWithFlags(&g_fork, cudaEventDisableTiming) != cudaSuccess)
        return -1;
    for (int i = 0; i < N; i++) {
        if (i % 2 == 0) {
            CUstream s;
            if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
                return -1;
            g_stream[i] = (cudaStream_t)s;
        } else if (cudaStreamCreateWithFlags(&g_stream[i], cudaStreamNonBlocking) !=
                   cudaSuccess) {
            return -1;
        }
        if (cudaEventCreateWithFlags(&g_done[i], cudaEventDisableTiming) != cudaSuccess)
            return -1;
    }
    return 0;
}

// Fill n words at p with v, a slice on each of the library's streams,
// each after spinning `spin` clocks; after the caller's earlier work, and
// (unless GMTJOIN_NOJOIN=1) before the caller's later work.
extern "C" int gmtjoin_fill(unsigned *p, size_t n, unsigned v, long long spin,
                            cudaStream_t caller)
{
    static int nojoin = -1;
    if (nojoin < 0) {
        const char *e = getenv("GMTJOIN_NOJOIN");
        nojoin = e && strcmp(e, "1") == 0;
    }
    if (setup() != 0 || cudaEventRecord(g_fork, caller) != cudaSuccess)
        return -1;
    size_t part = n / N;
    for (int i = 0; i < N; i++) {
        size_t m = i == N - 1 ? n - part * i : part;
        if (cudaStreamWaitEvent(g_stream[i], g_fork, 0) != cudaSuccess)
            return -1;
        slow_fill<<<4, 256, 0, g_stream[i]>>>(p + part * i, m, v, spin);
        if (cudaGetLastError() != cudaSuccess)
            return -1;
        if (!nojoin && (cudaEventRecord(g_done[i], g_stream[i]) != cudaSuccess ||
                        cudaStreamWaitEvent(caller, g_done[i], 0) != cudaSuccess))
            return -1;
    }
    return 0;
}
