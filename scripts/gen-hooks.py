# Generates preload/hooks.c: one exported wrapper per runtime entry point.
# Each row: name, params, args, stamp_before, record-expression (uses c_, r_, and
# STREAM which is the stream expression for the variant), api constant,
# stream for base variant, ptds suffix or None, stream for ptds variant.
rows = []
def H(name, params, args, before, record, api, base_stream, sfx=None, ptds_stream=None, pre=None):
    rows.append((name, params, args, before, record, api, base_stream, sfx, ptds_stream, pre))

# Before a non-blocking stream exists, the pool stops recording fences on the
# legacy stream: they would not cover it (preload/fence.c).
def NB(fn):
    return ("if (flags & cudaStreamNonBlocking)\n"
            f"        gmt_fence_off(\"the program created a non-blocking stream ({fn})\");")

# allocation
H("cudaMalloc", "void **devPtr, size_t size", "devPtr, size", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, size, size, 0, STREAM)", "GMT_API_MALLOC", "GMT_NO_STREAM")
H("cudaFree", "void *devPtr", "devPtr", True,
  "gmt_ev_free(&c_, r_, API, devPtr, STREAM)", "GMT_API_FREE", "GMT_NO_STREAM")
H("cudaMallocManaged", "void **devPtr, size_t size, unsigned int flags", "devPtr, size, flags", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, size, size, flags, STREAM)", "GMT_API_MALLOC_MANAGED", "GMT_NO_STREAM")
H("cudaMallocPitch", "void **devPtr, size_t *pitch, size_t width, size_t height", "devPtr, pitch, width, height", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, (uint64_t)width * height, r_ == cudaSuccess && pitch ? (uint64_t)*pitch * height : 0, 0, STREAM)", "GMT_API_MALLOC_PITCH", "GMT_NO_STREAM")
H("cudaMalloc3D", "struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent", "pitchedDevPtr, extent", False,
  "gmt_ev_alloc(&c_, r_, API, pitchedDevPtr ? pitchedDevPtr->ptr : NULL, (uint64_t)extent.width * extent.height * extent.depth, r_ == cudaSuccess && pitchedDevPtr ? (uint64_t)pitchedDevPtr->pitch * extent.height * extent.depth : 0, 0, STREAM)", "GMT_API_MALLOC_3D", "GMT_NO_STREAM")
H("cudaMallocHost", "void **ptr, size_t size", "ptr, size", False,
  "gmt_ev_alloc(&c_, r_, API, ptr ? *ptr : NULL, size, size, 0, STREAM)", "GMT_API_MALLOC_HOST", "GMT_NO_STREAM")
H("cudaHostAlloc", "void **pHost, size_t size, unsigned int flags", "pHost, size, flags", False,
  "gmt_ev_alloc(&c_, r_, API, pHost ? *pHost : NULL, size, size, flags, STREAM)", "GMT_API_HOST_ALLOC", "GMT_NO_STREAM")
H("cudaFreeHost", "void *ptr", "ptr", True,
  "gmt_ev_free(&c_, r_, API, ptr, STREAM)", "GMT_API_FREE_HOST", "GMT_NO_STREAM")
# PyTorch's cudaMallocAsync backend reports no block events: its first call
# tells fw.c so (one line), and its allocations are recorded as they are.
H("cudaMallocAsync", "void **devPtr, size_t size, cudaStream_t hStream", "devPtr, size, hStream", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, size, size, 0, STREAM)", "GMT_API_MALLOC_ASYNC", "S(hStream)", "_ptsz", "SZ(hStream)",
  pre="gmt_fw_segment_call(__builtin_return_address(0), true);")
H("cudaFreeAsync", "void *devPtr, cudaStream_t hStream", "devPtr, hStream", True,
  "gmt_ev_free(&c_, r_, API, devPtr, STREAM)", "GMT_API_FREE_ASYNC", "S(hStream)", "_ptsz", "SZ(hStream)")
H("cudaMallocFromPoolAsync", "void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream", "ptr, size, memPool, stream", False,
  "gmt_ev_alloc(&c_, r_, API, ptr ? *ptr : NULL, size, size, 0, STREAM)", "GMT_API_MALLOC_FROM_POOL_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")

# copies
C = "gmt_ev_copy(&c_, r_, API, %s, %s, %s, %s, STREAM)"
H("cudaMemcpy", "void *dst, const void *src, size_t count, enum cudaMemcpyKind kind", "dst, src, count, kind", False,
  C % ("dst", "src", "count", "kind"), "GMT_API_MEMCPY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyAsync", "void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, src, count, kind, stream", False,
  C % ("dst", "src", "count", "kind"), "GMT_API_MEMCPY_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2D", "void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, dpitch, src, spitch, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "kind"), "GMT_API_MEMCPY_2D", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DAsync", "void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, dpitch, src, spitch, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "kind"), "GMT_API_MEMCPY_2D_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy3D", "const struct cudaMemcpy3DParms *p", "p", False,
  "gmt_ev_copy3d(&c_, r_, API, p, STREAM)", "GMT_API_MEMCPY_3D", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy3DAsync", "const struct cudaMemcpy3DParms *p, cudaStream_t stream", "p, stream", False,
  "gmt_ev_copy3d(&c_, r_, API, p, STREAM)", "GMT_API_MEMCPY_3D_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy3DPeer", "const struct cudaMemcpy3DPeerParms *p", "p", False,
  "gmt_ev_copy3d_peer(&c_, r_, API, p, STREAM)", "GMT_API_MEMCPY_3D_PEER", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy3DPeerAsync", "const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream", "p, stream", False,
  "gmt_ev_copy3d_peer(&c_, r_, API, p, STREAM)", "GMT_API_MEMCPY_3D_PEER_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyPeer", "void *dst, int dstDevice, const void *src, int srcDevice, size_t count", "dst, dstDevice, src, srcDevice, count", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), "GMT_API_MEMCPY_PEER", "GMT_STREAM_LEGACY")
H("cudaMemcpyPeerAsync", "void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream", "dst, dstDevice, src, srcDevice, count, stream", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), "GMT_API_MEMCPY_PEER_ASYNC", "S(stream)")
H("cudaMemcpyToSymbol", "const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind", "symbol, src, count, offset, kind", False,
  C % ("(const char *)symbol + offset", "src", "count", "kind"), "GMT_API_MEMCPY_TO_SYMBOL", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyFromSymbol", "void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind", "dst, symbol, count, offset, kind", False,
  C % ("dst", "(const char *)symbol + offset", "count", "kind"), "GMT_API_MEMCPY_FROM_SYMBOL", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyToSymbolAsync", "const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream", "symbol, src, count, offset, kind, stream", False,
  C % ("(const char *)symbol + offset", "src", "count", "kind"), "GMT_API_MEMCPY_TO_SYMBOL_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyFromSymbolAsync", "void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, symbol, count, offset, kind, stream", False,
  C % ("dst", "(const char *)symbol + offset", "count", "kind"), "GMT_API_MEMCPY_FROM_SYMBOL_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
# arrays: the array side is device memory, so Default is resolved statically
H("cudaMemcpyToArray", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind", "dst, wOffset, hOffset, src, count, kind", False,
  C % ("dst", "src", "count", "ARRAY_DST(kind)"), "GMT_API_MEMCPY_TO_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyFromArray", "void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind", "dst, src, wOffset, hOffset, count, kind", False,
  C % ("dst", "src", "count", "ARRAY_SRC(kind)"), "GMT_API_MEMCPY_FROM_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyArrayToArray", "cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind", "dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), "GMT_API_MEMCPY_ARRAY_TO_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyToArrayAsync", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, wOffset, hOffset, src, count, kind, stream", False,
  C % ("dst", "src", "count", "ARRAY_DST(kind)"), "GMT_API_MEMCPY_TO_ARRAY_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyFromArrayAsync", "void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, src, wOffset, hOffset, count, kind, stream", False,
  C % ("dst", "src", "count", "ARRAY_SRC(kind)"), "GMT_API_MEMCPY_FROM_ARRAY_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2DToArray", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, wOffset, hOffset, src, spitch, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_DST(kind)"), "GMT_API_MEMCPY_2D_TO_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DFromArray", "void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, dpitch, src, wOffset, hOffset, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_SRC(kind)"), "GMT_API_MEMCPY_2D_FROM_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DArrayToArray", "cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "cudaMemcpyDeviceToDevice"), "GMT_API_MEMCPY_2D_ARRAY_TO_ARRAY", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DToArrayAsync", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, wOffset, hOffset, src, spitch, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_DST(kind)"), "GMT_API_MEMCPY_2D_TO_ARRAY_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2DFromArrayAsync", "void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, dpitch, src, wOffset, hOffset, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_SRC(kind)"), "GMT_API_MEMCPY_2D_FROM_ARRAY_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
# cudaMemcpyBatchAsync and cudaMemcpy3DBatchAsync: preload/hooks_compat.c
# (their signature differs between CUDA 12.8/12.9 and 13).

# sets
H("cudaMemset", "void *devPtr, int value, size_t count", "devPtr, value, count", False,
  "gmt_ev_set(&c_, r_, API, devPtr, count, value, STREAM)", "GMT_API_MEMSET", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemsetAsync", "void *devPtr, int value, size_t count, cudaStream_t stream", "devPtr, value, count, stream", False,
  "gmt_ev_set(&c_, r_, API, devPtr, count, value, STREAM)", "GMT_API_MEMSET_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemset2D", "void *devPtr, size_t pitch, int value, size_t width, size_t height", "devPtr, pitch, value, width, height", False,
  "gmt_ev_set(&c_, r_, API, devPtr, (uint64_t)width * height, value, STREAM)", "GMT_API_MEMSET_2D", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemset2DAsync", "void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream", "devPtr, pitch, value, width, height, stream", False,
  "gmt_ev_set(&c_, r_, API, devPtr, (uint64_t)width * height, value, STREAM)", "GMT_API_MEMSET_2D_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemset3D", "struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent", "pitchedDevPtr, value, extent", False,
  "gmt_ev_set(&c_, r_, API, pitchedDevPtr.ptr, (uint64_t)extent.width * extent.height * extent.depth, value, STREAM)", "GMT_API_MEMSET_3D", "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemset3DAsync", "struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream", "pitchedDevPtr, value, extent, stream", False,
  "gmt_ev_set(&c_, r_, API, pitchedDevPtr.ptr, (uint64_t)extent.width * extent.height * extent.depth, value, STREAM)", "GMT_API_MEMSET_3D_ASYNC", "S(stream)", "_ptsz", "SZ(stream)")

# device, streams, sync
H("cudaMemGetInfo", "size_t *free, size_t *total", "free, total", False,
  "gmt_ev_mem_get_info(&c_, r_, free ? *free : 0, total ? *total : 0)", "0", "GMT_NO_STREAM")
H("cudaDeviceSynchronize", "void", "", False,
  "gmt_ev_sync(&c_, r_, API, STREAM)", "GMT_API_DEVICE_SYNCHRONIZE", "GMT_NO_STREAM")
H("cudaStreamSynchronize", "cudaStream_t stream", "stream", False,
  "gmt_ev_sync(&c_, r_, API, STREAM)", "GMT_API_STREAM_SYNCHRONIZE", "S(stream)", "_ptsz", "SZ(stream)")
H("cudaStreamCreate", "cudaStream_t *pStream", "pStream", False,
  "gmt_ev_stream_create(&c_, r_, API, pStream ? (const void *)*pStream : NULL, 0, 0)", "GMT_API_STREAM_CREATE", "GMT_NO_STREAM")
H("cudaStreamCreateWithFlags", "cudaStream_t *pStream, unsigned int flags", "pStream, flags", False,
  "gmt_ev_stream_create(&c_, r_, API, pStream ? (const void *)*pStream : NULL, flags, 0)", "GMT_API_STREAM_CREATE_WITH_FLAGS", "GMT_NO_STREAM",
  pre=NB("cudaStreamCreateWithFlags"))
H("cudaStreamCreateWithPriority", "cudaStream_t *pStream, unsigned int flags, int priority", "pStream, flags, priority", False,
  "gmt_ev_stream_create(&c_, r_, API, pStream ? (const void *)*pStream : NULL, flags, priority)", "GMT_API_STREAM_CREATE_WITH_PRIORITY", "GMT_NO_STREAM",
  pre=NB("cudaStreamCreateWithPriority"))
H("cudaStreamDestroy", "cudaStream_t stream", "stream", True,
  "gmt_ev_stream_destroy(&c_, r_, stream)", "0", "GMT_NO_STREAM")
H("cudaSetDevice", "int device", "device", False,
  "gmt_ev_set_device(&c_, r_, device)", "0", "GMT_NO_STREAM")

# Entry points whose behaviour the caching pool changes: their bodies live
# in preload/mem.c. (name, params, forwarded call)
CUSTOM = [
    ("cudaMalloc", "void **devPtr, size_t size",
     "gmt_mem_malloc(devPtr, size, __builtin_return_address(0))"),
    ("cudaFree", "void *devPtr", "gmt_mem_free(devPtr)"),
    ("cudaFreeAsync", "void *devPtr, cudaStream_t hStream",
     "gmt_mem_free_async(devPtr, hStream, false)"),
    ("cudaFreeAsync_ptsz", "void *devPtr, cudaStream_t hStream",
     "gmt_mem_free_async(devPtr, hStream, true)"),
    ("cudaDeviceSynchronize", "void", "gmt_mem_device_synchronize()"),
    ("cudaMemGetInfo", "size_t *free, size_t *total", "gmt_mem_get_info(free, total)"),
    ("cudaIpcGetMemHandle", "cudaIpcMemHandle_t *handle, void *devPtr",
     "gmt_mem_ipc_get_handle(handle, devPtr)"),
    ("cudaDeviceReset", "void", "gmt_mem_device_reset()"),
]
rows = [r for r in rows if r[0] not in {c[0] for c in CUSTOM}]

# Stream capture: counted so the pool never synchronizes inside one.
CAPTURE = [
    ("cudaStreamBeginCapture", "cudaStream_t stream, enum cudaStreamCaptureMode mode",
     "stream, mode", True),
    ("cudaStreamBeginCaptureToGraph",
     "cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies, "
     "const cudaGraphEdgeData *dependencyData, size_t numDependencies, "
     "enum cudaStreamCaptureMode mode",
     "stream, graph, dependencies, dependencyData, numDependencies, mode", True),
    ("cudaStreamEndCapture", "cudaStream_t stream, cudaGraph_t *pGraph", "stream, pGraph", False),
]

out = []
out.append('''/* hooks.c - the CUDA runtime entry points libgpumemtrace.so exports.
 *
 * GENERATED by scripts/gen-hooks.py from its table; edit the table, not
 * this file. Each wrapper calls the real function with the program's own
 * arguments and, when tracing, hands the call and its result to events.c.
 * Nothing else in the library is exported (see exports.map). The runtime's
 * per-thread-default-stream exports (_ptds, _ptsz) are wrapped too: that is
 * what code built with --default-stream per-thread calls.
 */
#include "real.h"

cudaError_t gmt_mem_malloc(void **devPtr, size_t size, const void *caller);
cudaError_t gmt_mem_free(void *devPtr);
cudaError_t gmt_mem_free_async(void *devPtr, cudaStream_t hStream, bool ptsz);
cudaError_t gmt_mem_device_synchronize(void);
cudaError_t gmt_mem_get_info(size_t *free, size_t *total);
cudaError_t gmt_mem_ipc_get_handle(cudaIpcMemHandle_t *handle, void *devPtr);
cudaError_t gmt_mem_device_reset(void);

#define GMT_EXPORT __attribute__((visibility("default")))

/* Run the real call; when the tracer is on, record it with `record`,
 * which sees the call as c_ and the result as r_. Frees stamp their place
 * in the total order before the real call (the memory may be handed out
 * again the moment it returns); everything else after. */
#define TRACED(before, real_call, record)                                     \\
    do {                                                                      \\
        struct gmt_call c_;                                                   \\
        if (!gmt_call_begin(&c_, before))                                     \\
            return real_call;                                                 \\
        cudaError_t r_ = real_call;                                           \\
        gmt_call_errno(&c_);                                                  \\
        record;                                                               \\
        gmt_call_finish(&c_);                                                 \\
        return r_;                                                            \\
    } while (0)

#define S(s) gmt_stream_of((const void *)(s), false)
#define SZ(s) gmt_stream_of((const void *)(s), true)
/* A CUDA array is device memory: resolve cudaMemcpyDefault without
 * asking the driver about an array handle. */
#define ARRAY_DST(k) ((k) == cudaMemcpyDefault ? cudaMemcpyHostToDevice : (k))
#define ARRAY_SRC(k) ((k) == cudaMemcpyDefault ? cudaMemcpyDeviceToHost : (k))

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
''')
import re
for (name, params, args, before, record, api, bs, sfx, ps, pre) in rows:
    variants = [(name, api, bs)]
    if sfx:
        variants.append((name + sfx, api + " | GMT_API_PTDS" if api != "0" else api, ps))
    for (fn, a, st) in variants:
        rec = record.replace("STREAM", st).replace("API", "(" + a + ")")
        b = "true" if before else "false"
        p = f"    {pre}\n" if pre else ""
        out.append(f"GMT_EXPORT cudaError_t {fn}({params})\n{{\n{p}    TRACED({b}, GMT_REAL({fn})({args}),\n           {rec});\n}}\n")
for (name, params, call) in CUSTOM:
    out.append(f"GMT_EXPORT cudaError_t {name}({params})\n{{\n    return {call};\n}}\n")
for (name, params, args, begin) in CAPTURE:
    for (fn, ptsz) in ((name, "false"), (name + "_ptsz", "true")):
        if begin:
            body = (f"    gmt_capture_begin(gmt_stream_of(stream, {ptsz}));\n"
                    f"    cudaError_t r = GMT_REAL({fn})({args});\n"
                    f"    if (r != cudaSuccess)\n"
                    f"        gmt_capture_end(gmt_stream_of(stream, {ptsz}), stream);\n"
                    f"    return r;\n")
        else:
            body = (f"    cudaError_t r = GMT_REAL({fn})({args});\n"
                    f"    gmt_capture_end(gmt_stream_of(stream, {ptsz}), stream);\n"
                    f"    return r;\n")
        out.append(f"GMT_EXPORT cudaError_t {fn}({params})\n{{\n{body}}}\n")
open(__import__('os').path.join(__import__('os').path.dirname(__file__), '..', 'preload', 'hooks.c'), 'w').write("\n".join(out))
print(len(rows), "rows")
