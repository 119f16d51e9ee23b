/* real.h - the CUDA runtime functions the library intercepts or calls.
 *
 * GMT_REAL_FUNCS lists every runtime symbol we need the real definition
 * of: the ones hooks.c exports (the call goes on to the real one) and the
 * few the tracer calls for itself (device, pointer attributes, errors).
 * GMT_REAL(name) returns the real function with the exact type of the
 * runtime's declaration, resolved on first use.
 */
#ifndef GMT_REAL_H
#define GMT_REAL_H

#include <cuda_runtime_api.h>

#include "internal.h"

/* The runtime exports per-thread-default-stream variants (what
 * --default-stream per-thread compiles calls into). The headers only
 * declare them under a macro; declare them here with the base type. */
#define GMT_PTDS_FUNCS(X)                                                     \
    X(cudaMemcpy, _ptds) X(cudaMemcpyAsync, _ptsz) X(cudaMemcpy2D, _ptds)     \
    X(cudaMemcpy2DAsync, _ptsz) X(cudaMemcpy3D, _ptds)                        \
    X(cudaMemcpy3DAsync, _ptsz) X(cudaMemcpy3DPeer, _ptds)                    \
    X(cudaMemcpy3DPeerAsync, _ptsz) X(cudaMemcpyToSymbol, _ptds)              \
    X(cudaMemcpyFromSymbol, _ptds) X(cudaMemcpyToSymbolAsync, _ptsz)          \
    X(cudaMemcpyFromSymbolAsync, _ptsz) X(cudaMemcpyToArray, _ptds)           \
    X(cudaMemcpyFromArray, _ptds) X(cudaMemcpyArrayToArray, _ptds)            \
    X(cudaMemcpyToArrayAsync, _ptsz) X(cudaMemcpyFromArrayAsync, _ptsz)       \
    X(cudaMemcpy2DToArray, _ptds) X(cudaMemcpy2DFromArray, _ptds)             \
    X(cudaMemcpy2DArrayToArray, _ptds) X(cudaMemcpy2DToArrayAsync, _ptsz)     \
    X(cudaMemcpy2DFromArrayAsync, _ptsz) X(cudaMemcpyBatchAsync, _ptsz)       \
    X(cudaMemcpy3DBatchAsync, _ptsz) X(cudaMemset, _ptds)                     \
    X(cudaMemsetAsync, _ptsz) X(cudaMemset2D, _ptds)                          \
    X(cudaMemset2DAsync, _ptsz) X(cudaMemset3D, _ptds)                        \
    X(cudaMemset3DAsync, _ptsz) X(cudaMallocAsync, _ptsz)                     \
    X(cudaFreeAsync, _ptsz) X(cudaMallocFromPoolAsync, _ptsz)                 \
    X(cudaStreamSynchronize, _ptsz) X(cudaStreamBeginCapture, _ptsz)         \
    X(cudaStreamBeginCaptureToGraph, _ptsz) X(cudaStreamEndCapture, _ptsz)

/* Some of these are deprecated for callers; we are the definition. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define GMT_DECLARE_PTDS(base, sfx) extern __typeof__(base) base##sfx;
GMT_PTDS_FUNCS(GMT_DECLARE_PTDS)
#undef GMT_DECLARE_PTDS
#pragma GCC diagnostic pop

#define GMT_BASE_FUNCS(X)                                                     \
    /* allocation */                                                          \
    X(cudaMalloc) X(cudaFree) X(cudaMallocManaged) X(cudaMallocPitch)         \
    X(cudaMalloc3D) X(cudaMallocHost) X(cudaHostAlloc) X(cudaFreeHost)        \
    X(cudaMallocAsync) X(cudaFreeAsync) X(cudaMallocFromPoolAsync)            \
    /* copies and sets */                                                     \
    X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaMemcpy2D) X(cudaMemcpy2DAsync)     \
    X(cudaMemcpy3D) X(cudaMemcpy3DAsync) X(cudaMemcpy3DPeer)                  \
    X(cudaMemcpy3DPeerAsync) X(cudaMemcpyPeer) X(cudaMemcpyPeerAsync)         \
    X(cudaMemcpyToSymbol) X(cudaMemcpyFromSymbol)                             \
    X(cudaMemcpyToSymbolAsync) X(cudaMemcpyFromSymbolAsync)                   \
    X(cudaMemcpyToArray) X(cudaMemcpyFromArray) X(cudaMemcpyArrayToArray)     \
    X(cudaMemcpyToArrayAsync) X(cudaMemcpyFromArrayAsync)                     \
    X(cudaMemcpy2DToArray) X(cudaMemcpy2DFromArray)                           \
    X(cudaMemcpy2DArrayToArray) X(cudaMemcpy2DToArrayAsync)                   \
    X(cudaMemcpy2DFromArrayAsync) X(cudaMemcpyBatchAsync)                     \
    X(cudaMemcpy3DBatchAsync) X(cudaMemset) X(cudaMemsetAsync)                \
    X(cudaMemset2D) X(cudaMemset2DAsync) X(cudaMemset3D)                      \
    X(cudaMemset3DAsync)                                                      \
    /* device, streams, synchronization */                                    \
    X(cudaMemGetInfo) X(cudaDeviceSynchronize) X(cudaStreamSynchronize)       \
    X(cudaStreamCreate) X(cudaStreamCreateWithFlags)                          \
    X(cudaStreamCreateWithPriority) X(cudaStreamDestroy) X(cudaSetDevice)     \
    X(cudaDeviceReset) X(cudaIpcGetMemHandle) X(cudaStreamBeginCapture)       \
    X(cudaStreamBeginCaptureToGraph) X(cudaStreamEndCapture)                  \
    /* called by the tracer itself, not intercepted */                        \
    X(cudaGetDevice) X(cudaGetLastError) X(cudaPeekAtLastError)               \
    X(cudaPointerGetAttributes) X(cudaGetDeviceProperties)                    \
    X(cudaDeviceGetAttribute) X(cudaArrayGetInfo) X(cudaStreamIsCapturing)     \
    X(cudaRuntimeGetVersion) X(cudaEventCreateWithFlags) X(cudaEventRecord)     \
    X(cudaEventQuery) X(cudaEventSynchronize)

enum gmt_real_idx {
#define GMT_ENUM_BASE(n) GMT_R_##n,
#define GMT_ENUM_PTDS(n, sfx) GMT_R_##n##sfx,
    GMT_BASE_FUNCS(GMT_ENUM_BASE) GMT_PTDS_FUNCS(GMT_ENUM_PTDS)
#undef GMT_ENUM_BASE
#undef GMT_ENUM_PTDS
    GMT_R_COUNT
};

#define GMT_REAL(name) ((__typeof__(&name))gmt_real(GMT_R_##name))

#endif /* GMT_REAL_H */
