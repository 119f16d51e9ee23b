#!/usr/bin/env python3
# gen-hooks.py - the CUDA runtime API the library hooks, listed once, and
# the files generated from that list.
#
# The table below is the one list of the hooked runtime entry points and of
# the trace's api codes (the api byte of a record: which entry point made
# it). Everything else is generated from it or expands it:
#
#   preload/hooks.c    the exported wrappers (rows H, M, CAPTURE, RETRY)
#   preload/gmt_api.h  X-macros: GMT_API_CODES (enum gmt_api in
#                      gmt_format.h, the names in report/trace/names.c),
#                      GMT_RT_FUNCS and GMT_RT_PTDS (the real functions in
#                      preload/real.h; the simulator's prototypes of the
#                      per-thread-default-stream exports, tests/sim)
#
# Both generated files are committed, so that they can be read where they
# are used; the build checks them and never rewrites them.
#
# To add a runtime entry point:
#   1. Add its row below, in its section: H for a traced wrapper (with
#      oom= for an allocation of device memory), RETRY for an allocation
#      only given the pool's idle memory, M when its body lives in
#      preload/mem.c, HAND when another preload file defines it
#      (hooks_compat.c), OWN for a function the tracer only calls. A row that records gives its api code a new value in its
#      section's range (API_RANGES); a value is part of the trace format
#      (docs/trace-format.md): never change or reuse one, or old traces
#      read differently.
#   2. `make generate` (python3 preload/gen-hooks.py) rewrites the two
#      files; commit them with the table. `make check-generated` fails
#      while a committed file differs from what the table makes, and both
#      `make` (the library) and `make test` run it.
#   3. If the tests call it, the simulator needs the function itself
#      (tests/sim); its _ptds/_ptsz prototype already comes from here.
#
#   python3 preload/gen-hooks.py            rewrite the generated files
#   python3 preload/gen-hooks.py --check    exit 1, naming the stale file
import os
import sys
import textwrap

ROWS = []  # every row, in table order: what kind, and its fields


# H: a traced wrapper in hooks.c. params and args as C writes them;
# before: the call stamps its place in the order before the real call (a
# free: its memory may be handed out again the moment it returns); record:
# the event, an expression that sees the call as c_, the result as r_, API
# (the api code, with GMT_API_PTDS in the variant) and STREAM (base_stream,
# or ptds_stream in the variant); api: (constant, value), or None for a
# call recorded without one; sfx: the runtime's per-thread-default-stream
# export (_ptds or _ptsz) wrapped too; pre: a statement run first; oom:
# an allocation, the bytes it asks for as a C expression: one that fails
# for lack of memory is made once more when the pool gave memory back
# (TRACED_OOM).
def H(name, params, args, before, record, api, base_stream, sfx=None, ptds_stream=None, pre=None,
      oom=None):
    ROWS.append(dict(kind="H", name=name, params=params, args=args, before=before,
                     record=record, api=api, stream=base_stream, sfx=sfx,
                     ptds_stream=ptds_stream, pre=pre, oom=oom))


# RETRY: an allocation the trace does not record that still gets the
# memory the pool holds idle when it runs out (OOM_RETRIED).
def RETRY(name, params, args):
    ROWS.append(dict(kind="RETRY", name=name, params=params, args=args, api=None, sfx=None))


# M: an entry point whose behaviour the caching pool changes; the wrapper
# forwards to call (preload/mem.c), where {ptsz} reads false, or true in
# the sfx variant. api: the code mem.c records the call with.
def M(name, params, call, api=None, sfx=None):
    ROWS.append(dict(kind="M", name=name, params=params, call=call, api=api, sfx=sfx))


# CAPTURE: stream capture, counted so the pool never synchronizes inside
# one; begin: the call starts a capture (else it ends one). Always with
# its _ptsz variant.
def CAPTURE(name, params, args, begin):
    ROWS.append(dict(kind="CAPTURE", name=name, params=params, args=args, begin=begin,
                     api=None, sfx="_ptsz"))


# HAND: an exported wrapper written by hand in another preload file.
def HAND(name, api, sfx):
    ROWS.append(dict(kind="HAND", name=name, api=api, sfx=sfx))


# OWN: runtime functions the tracer calls for itself, not intercepted.
def OWN(*names):
    for n in names:
        ROWS.append(dict(kind="OWN", name=n, api=None, sfx=None))


# CODE: an api code no runtime entry point of ours makes (the pool, a
# framework allocator, the driver-level observer); name: its name in
# reports; doc: what its record means, when that is not the usual.
def CODE(api, name, doc=None):
    ROWS.append(dict(kind="CODE", name=name, api=api, sfx=None, doc=doc))


# The api byte's value ranges; a new code takes a free value in its
# section. Bit 7 is GMT_API_PTDS (the _ptds/_ptsz variant), so codes stay
# below 128 (GMT_API_API_MAX).
API_RANGES = [
    (1, "allocation"),
    (16, "free"),
    (32, "copies"),
    (64, "sets"),
    (80, "synchronization"),
    (96, "streams"),
    (100, "driver API, seen by the driver-level observer: allocations"),
    (112, "driver API: frees"),
    (120, "driver API: address space (GMT_X_VMM records)"),
    (124, "driver API: copies (every cuMemcpy* the observer wraps; the dir "
          "byte says which way) and sets (cuMemsetD8/16/32*)"),
]
API_MAX = 127

# ---- the table ---------------------------------------------------------------
# allocation
M("cudaMalloc", "void **devPtr, size_t size",
  "gmt_mem_malloc(devPtr, size, __builtin_return_address(0))", ("GMT_API_MALLOC", 1))
M("cudaFree", "void *devPtr", "gmt_mem_free(devPtr, __builtin_return_address(0))", ("GMT_API_FREE", 16))
H("cudaMallocManaged", "void **devPtr, size_t size, unsigned int flags", "devPtr, size, flags", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, size, size, flags, STREAM)", ("GMT_API_MALLOC_MANAGED", 2), "GMT_NO_STREAM",
  oom="size")
H("cudaMallocPitch", "void **devPtr, size_t *pitch, size_t width, size_t height", "devPtr, pitch, width, height", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, gmt_mul_sat(width, height), r_ == cudaSuccess && pitch ? (uint64_t)*pitch * height : 0, 0, STREAM)", ("GMT_API_MALLOC_PITCH", 3), "GMT_NO_STREAM",
  oom="gmt_mul_sat(width, height)")
H("cudaMalloc3D", "struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent", "pitchedDevPtr, extent", False,
  "gmt_ev_alloc(&c_, r_, API, pitchedDevPtr ? pitchedDevPtr->ptr : NULL, EXTENT_BYTES(extent), r_ == cudaSuccess && pitchedDevPtr ? (uint64_t)pitchedDevPtr->pitch * extent.height * extent.depth : 0, 0, STREAM)", ("GMT_API_MALLOC_3D", 4), "GMT_NO_STREAM",
  oom="EXTENT_BYTES(extent)")
H("cudaMallocHost", "void **ptr, size_t size", "ptr, size", False,
  "gmt_ev_alloc(&c_, r_, API, ptr ? *ptr : NULL, size, size, 0, STREAM)", ("GMT_API_MALLOC_HOST", 5), "GMT_NO_STREAM")
H("cudaHostAlloc", "void **pHost, size_t size, unsigned int flags", "pHost, size, flags", False,
  "gmt_ev_alloc(&c_, r_, API, pHost ? *pHost : NULL, size, size, flags, STREAM)", ("GMT_API_HOST_ALLOC", 6), "GMT_NO_STREAM")
H("cudaFreeHost", "void *ptr", "ptr", True,
  "gmt_ev_free(&c_, r_, API, ptr, STREAM)", ("GMT_API_FREE_HOST", 17), "GMT_NO_STREAM")
# PyTorch's cudaMallocAsync backend reports no block events: its first call
# tells fw.c so (one line), and its allocations are recorded as they are.
H("cudaMallocAsync", "void **devPtr, size_t size, cudaStream_t hStream", "devPtr, size, hStream", False,
  "gmt_ev_alloc(&c_, r_, API, devPtr ? *devPtr : NULL, size, size, 0, STREAM)", ("GMT_API_MALLOC_ASYNC", 7), "S(hStream)", "_ptsz", "SZ(hStream)",
  pre="gmt_fw_segment_call(__builtin_return_address(0), true);", oom="size")
M("cudaFreeAsync", "void *devPtr, cudaStream_t hStream",
  "gmt_mem_free_async(devPtr, hStream, {ptsz}, __builtin_return_address(0))", ("GMT_API_FREE_ASYNC", 18), "_ptsz")
H("cudaMallocFromPoolAsync", "void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream", "ptr, size, memPool, stream", False,
  "gmt_ev_alloc(&c_, r_, API, ptr ? *ptr : NULL, size, size, 0, STREAM)", ("GMT_API_MALLOC_FROM_POOL_ASYNC", 8), "S(stream)", "_ptsz", "SZ(stream)",
  oom="size")
# CUDA arrays: device memory the trace does not follow
RETRY("cudaMallocArray", "cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width, size_t height, unsigned int flags",
      "array, desc, width, height, flags")
RETRY("cudaMalloc3DArray", "cudaArray_t *array, const struct cudaChannelFormatDesc *desc, struct cudaExtent extent, unsigned int flags",
      "array, desc, extent, flags")

# copies
C = "gmt_ev_copy(&c_, r_, API, %s, %s, %s, %s, STREAM)"
H("cudaMemcpy", "void *dst, const void *src, size_t count, enum cudaMemcpyKind kind", "dst, src, count, kind", False,
  C % ("dst", "src", "count", "kind"), ("GMT_API_MEMCPY", 32), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyAsync", "void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, src, count, kind, stream", False,
  C % ("dst", "src", "count", "kind"), ("GMT_API_MEMCPY_ASYNC", 33), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2D", "void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, dpitch, src, spitch, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "kind"), ("GMT_API_MEMCPY_2D", 34), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DAsync", "void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, dpitch, src, spitch, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "kind"), ("GMT_API_MEMCPY_2D_ASYNC", 35), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy3D", "const struct cudaMemcpy3DParms *p", "p", False,
  "gmt_ev_copy3d(&c_, r_, API, p, STREAM)", ("GMT_API_MEMCPY_3D", 36), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy3DAsync", "const struct cudaMemcpy3DParms *p, cudaStream_t stream", "p, stream", False,
  "gmt_ev_copy3d(&c_, r_, API, p, STREAM)", ("GMT_API_MEMCPY_3D_ASYNC", 37), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy3DPeer", "const struct cudaMemcpy3DPeerParms *p", "p", False,
  "gmt_ev_copy3d_peer(&c_, r_, API, p, STREAM)", ("GMT_API_MEMCPY_3D_PEER", 38), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy3DPeerAsync", "const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream", "p, stream", False,
  "gmt_ev_copy3d_peer(&c_, r_, API, p, STREAM)", ("GMT_API_MEMCPY_3D_PEER_ASYNC", 39), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyPeer", "void *dst, int dstDevice, const void *src, int srcDevice, size_t count", "dst, dstDevice, src, srcDevice, count", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), ("GMT_API_MEMCPY_PEER", 40), "GMT_STREAM_LEGACY")
H("cudaMemcpyPeerAsync", "void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream", "dst, dstDevice, src, srcDevice, count, stream", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), ("GMT_API_MEMCPY_PEER_ASYNC", 41), "S(stream)")
H("cudaMemcpyToSymbol", "const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind", "symbol, src, count, offset, kind", False,
  C % ("(const char *)symbol + offset", "src", "count", "kind"), ("GMT_API_MEMCPY_TO_SYMBOL", 42), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyFromSymbol", "void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind", "dst, symbol, count, offset, kind", False,
  C % ("dst", "(const char *)symbol + offset", "count", "kind"), ("GMT_API_MEMCPY_FROM_SYMBOL", 44), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyToSymbolAsync", "const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream", "symbol, src, count, offset, kind, stream", False,
  C % ("(const char *)symbol + offset", "src", "count", "kind"), ("GMT_API_MEMCPY_TO_SYMBOL_ASYNC", 43), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyFromSymbolAsync", "void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, symbol, count, offset, kind, stream", False,
  C % ("dst", "(const char *)symbol + offset", "count", "kind"), ("GMT_API_MEMCPY_FROM_SYMBOL_ASYNC", 45), "S(stream)", "_ptsz", "SZ(stream)")
# arrays: the array side is device memory, so Default is resolved statically
H("cudaMemcpyToArray", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind", "dst, wOffset, hOffset, src, count, kind", False,
  C % ("dst", "src", "count", "ARRAY_DST(kind)"), ("GMT_API_MEMCPY_TO_ARRAY", 46), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyFromArray", "void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind", "dst, src, wOffset, hOffset, count, kind", False,
  C % ("dst", "src", "count", "ARRAY_SRC(kind)"), ("GMT_API_MEMCPY_FROM_ARRAY", 48), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyArrayToArray", "cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind", "dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind", False,
  C % ("dst", "src", "count", "cudaMemcpyDeviceToDevice"), ("GMT_API_MEMCPY_ARRAY_TO_ARRAY", 50), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpyToArrayAsync", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, wOffset, hOffset, src, count, kind, stream", False,
  C % ("dst", "src", "count", "ARRAY_DST(kind)"), ("GMT_API_MEMCPY_TO_ARRAY_ASYNC", 47), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpyFromArrayAsync", "void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, src, wOffset, hOffset, count, kind, stream", False,
  C % ("dst", "src", "count", "ARRAY_SRC(kind)"), ("GMT_API_MEMCPY_FROM_ARRAY_ASYNC", 49), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2DToArray", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, wOffset, hOffset, src, spitch, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_DST(kind)"), ("GMT_API_MEMCPY_2D_TO_ARRAY", 51), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DFromArray", "void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, dpitch, src, wOffset, hOffset, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_SRC(kind)"), ("GMT_API_MEMCPY_2D_FROM_ARRAY", 53), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DArrayToArray", "cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind", "dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind", False,
  C % ("dst", "src", "(uint64_t)width * height", "cudaMemcpyDeviceToDevice"), ("GMT_API_MEMCPY_2D_ARRAY_TO_ARRAY", 55), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemcpy2DToArrayAsync", "cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, wOffset, hOffset, src, spitch, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_DST(kind)"), ("GMT_API_MEMCPY_2D_TO_ARRAY_ASYNC", 52), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemcpy2DFromArrayAsync", "void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream", "dst, dpitch, src, wOffset, hOffset, width, height, kind, stream", False,
  C % ("dst", "src", "(uint64_t)width * height", "ARRAY_SRC(kind)"), ("GMT_API_MEMCPY_2D_FROM_ARRAY_ASYNC", 54), "S(stream)", "_ptsz", "SZ(stream)")
# In preload/hooks_compat.c: their signature differs between CUDA 12.8/12.9
# and 13.
HAND("cudaMemcpyBatchAsync", ("GMT_API_MEMCPY_BATCH_ASYNC", 56), "_ptsz")
HAND("cudaMemcpy3DBatchAsync", ("GMT_API_MEMCPY_3D_BATCH_ASYNC", 57), "_ptsz")

# sets
H("cudaMemset", "void *devPtr, int value, size_t count", "devPtr, value, count", False,
  "gmt_ev_set(&c_, r_, API, devPtr, count, value, STREAM)", ("GMT_API_MEMSET", 64), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemsetAsync", "void *devPtr, int value, size_t count, cudaStream_t stream", "devPtr, value, count, stream", False,
  "gmt_ev_set(&c_, r_, API, devPtr, count, value, STREAM)", ("GMT_API_MEMSET_ASYNC", 65), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemset2D", "void *devPtr, size_t pitch, int value, size_t width, size_t height", "devPtr, pitch, value, width, height", False,
  "gmt_ev_set(&c_, r_, API, devPtr, (uint64_t)width * height, value, STREAM)", ("GMT_API_MEMSET_2D", 66), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemset2DAsync", "void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream", "devPtr, pitch, value, width, height, stream", False,
  "gmt_ev_set(&c_, r_, API, devPtr, (uint64_t)width * height, value, STREAM)", ("GMT_API_MEMSET_2D_ASYNC", 67), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaMemset3D", "struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent", "pitchedDevPtr, value, extent", False,
  "gmt_ev_set(&c_, r_, API, pitchedDevPtr.ptr, (uint64_t)extent.width * extent.height * extent.depth, value, STREAM)", ("GMT_API_MEMSET_3D", 68), "GMT_STREAM_LEGACY", "_ptds", "GMT_STREAM_PER_THREAD")
H("cudaMemset3DAsync", "struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream", "pitchedDevPtr, value, extent, stream", False,
  "gmt_ev_set(&c_, r_, API, pitchedDevPtr.ptr, (uint64_t)extent.width * extent.height * extent.depth, value, STREAM)", ("GMT_API_MEMSET_3D_ASYNC", 69), "S(stream)", "_ptsz", "SZ(stream)")

# device, streams, sync
M("cudaDeviceSynchronize", "void", "gmt_mem_device_synchronize()",
  ("GMT_API_DEVICE_SYNCHRONIZE", 80))
M("cudaMemGetInfo", "size_t *free, size_t *total", "gmt_mem_get_info(free, total)")
H("cudaStreamSynchronize", "cudaStream_t stream", "stream", False,
  "gmt_ev_sync(&c_, r_, API, STREAM)", ("GMT_API_STREAM_SYNCHRONIZE", 81), "S(stream)", "_ptsz", "SZ(stream)")
H("cudaStreamCreate", "cudaStream_t *pStream", "pStream", False,
  "gmt_ev_stream_create(&c_, r_, API, pStream ? (const void *)*pStream : NULL, 0, 0)", ("GMT_API_STREAM_CREATE", 96), "GMT_NO_STREAM")
# Non-blocking streams: the pool's fences record an event on each
# (preload/fence.c), and go off when one is destroyed.
M("cudaStreamCreateWithFlags", "cudaStream_t *pStream, unsigned int flags",
  "gmt_stream_create(pStream, flags, 0, false, __builtin_return_address(0))", ("GMT_API_STREAM_CREATE_WITH_FLAGS", 97))
M("cudaStreamCreateWithPriority", "cudaStream_t *pStream, unsigned int flags, int priority",
  "gmt_stream_create(pStream, flags, priority, true, __builtin_return_address(0))", ("GMT_API_STREAM_CREATE_WITH_PRIORITY", 98))
M("cudaStreamDestroy", "cudaStream_t stream", "gmt_stream_destroy(stream)")
H("cudaSetDevice", "int device", "device", False,
  "gmt_ev_set_device(&c_, r_, device)", None, "GMT_NO_STREAM")

M("cudaIpcGetMemHandle", "cudaIpcMemHandle_t *handle, void *devPtr",
  "gmt_mem_ipc_get_handle(handle, devPtr)")
M("cudaDeviceReset", "void", "gmt_mem_device_reset()")
CAPTURE("cudaStreamBeginCapture", "cudaStream_t stream, enum cudaStreamCaptureMode mode",
        "stream, mode", True)
CAPTURE("cudaStreamBeginCaptureToGraph",
        "cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies, "
        "const cudaGraphEdgeData *dependencyData, size_t numDependencies, "
        "enum cudaStreamCaptureMode mode",
        "stream, graph, dependencies, dependencyData, numDependencies, mode", True)
CAPTURE("cudaStreamEndCapture", "cudaStream_t stream, cudaGraph_t *pGraph", "stream, pGraph", False)

# called by the tracer itself (device, pointer attributes, errors, fences)
OWN("cudaGetDevice", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaPointerGetAttributes", "cudaGetDeviceProperties",
    "cudaDeviceGetAttribute", "cudaArrayGetInfo", "cudaStreamIsCapturing",
    "cudaRuntimeGetVersion", "cudaEventCreateWithFlags", "cudaEventRecord",
    "cudaEventQuery", "cudaEventSynchronize", "cudaStreamQuery")

# api codes of records no runtime entry point of ours makes
CODE(("GMT_API_FW_ALLOC", 9), "torch_block",
     "a framework allocator handed out a block: size requested, extra to "
     "512-byte rounding (see GMT_FWX_BLOCK_SIZE), flags the framework's "
     "memory pool (PyTorch MempoolId_t first << 32 | second; 0: the default "
     "pool), stream the block's; failed: the framework raised out of memory. "
     "Its name is FW_FREE's too: the record kind says which")
CODE(("GMT_API_FW_FREE", 19), "torch_block",
     "the program freed a framework block (free requested; FREE_COMPLETED "
     "when reusable)")
CODE(("GMT_API_POOL_SYNCHRONIZE", 82), "pool-synchronize",
     "issued by the pool, not the program")
CODE(("GMT_API_POOL_FENCE_WAIT", 83), "pool-fence-wait",
     "the pool waited for one of its fences (an event on the legacy stream)")
CODE(("GMT_API_CU_MEM_ALLOC", 100), "cuMemAlloc")
CODE(("GMT_API_CU_MEM_ALLOC_PITCH", 101), "cuMemAllocPitch")
CODE(("GMT_API_CU_MEM_ALLOC_MANAGED", 102), "cuMemAllocManaged")
CODE(("GMT_API_CU_MEM_ALLOC_HOST", 103), "cuMemAllocHost")
CODE(("GMT_API_CU_MEM_HOST_ALLOC", 104), "cuMemHostAlloc")
CODE(("GMT_API_CU_MEM_ALLOC_ASYNC", 105), "cuMemAllocAsync")
CODE(("GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC", 106), "cuMemAllocFromPoolAsync")
CODE(("GMT_API_CU_MEM_CREATE", 107), "cuMemCreate",
     "physical memory on a device; the address field holds the handle")
CODE(("GMT_API_CU_MEM_CREATE_HOST", 108), "cuMemCreate(host)",
     "physical memory on the host (not device memory); addr: the handle")
CODE(("GMT_API_CU_MEM_FREE", 112), "cuMemFree")
CODE(("GMT_API_CU_MEM_FREE_HOST", 113), "cuMemFreeHost")
CODE(("GMT_API_CU_MEM_FREE_ASYNC", 114), "cuMemFreeAsync")
CODE(("GMT_API_CU_MEM_RELEASE", 115), "cuMemRelease", "addr: the handle")
CODE(("GMT_API_CU_MEM_MAP", 120), "cuMemMap")
CODE(("GMT_API_CU_MEM_UNMAP", 121), "cuMemUnmap")
CODE(("GMT_API_CU_MEM_ADDRESS_RESERVE", 122), "cuMemAddressReserve")
CODE(("GMT_API_CU_MEM_ADDRESS_FREE", 123), "cuMemAddressFree")
CODE(("GMT_API_CU_MEMCPY", 124), "cuMemcpy")
CODE(("GMT_API_CU_MEMSET", 125), "cuMemset")


# ---- checks ----------------------------------------------------------------
def exports(r):
    """The row's functions: (name, whether it is the _ptds/_ptsz variant)."""
    return [(r["name"], False)] + ([(r["name"] + r["sfx"], True)] if r["sfx"] else [])


def check_table():
    """Stops with a message when two rows collide or a code is out of range."""
    seen_fn, seen_const, seen_val = set(), set(), {}
    for r in ROWS:
        if r["kind"] != "CODE":
            for (fn, _) in exports(r):
                if fn in seen_fn:
                    sys.exit(f"gen-hooks.py: {fn} is in the table twice")
                seen_fn.add(fn)
        if r["sfx"] not in (None, "_ptds", "_ptsz"):
            sys.exit(f"gen-hooks.py: {r['name']}: suffix {r['sfx']} is not _ptds or _ptsz")
        if r["api"] is None:
            continue
        const, val = r["api"]
        if const in seen_const:
            sys.exit(f"gen-hooks.py: {const} is in the table twice")
        if not 0 < val <= API_MAX:
            sys.exit(f"gen-hooks.py: {const} = {val} is outside 1..{API_MAX}")
        if val in seen_val:
            sys.exit(f"gen-hooks.py: {const} and {seen_val[val]} are both {val}")
        seen_const.add(const)
        seen_val[val] = const


# ---- preload/hooks.c ---------------------------------------------------------
HOOKS_HEAD = '''/* hooks.c - the CUDA runtime entry points libgpumemtrace.so exports.
 *
 * GENERATED by preload/gen-hooks.py from its table; edit the table, not
 * this file (`make generate`). Each wrapper calls the real function with
 * the program's own arguments and, when tracing, hands the call and its
 * result to events.c. Nothing else in the library is exported (see
 * exports.map). The runtime's per-thread-default-stream exports (_ptds,
 * _ptsz) are wrapped too: that is what code built with --default-stream
 * per-thread calls.
 */
#include "real.h"

cudaError_t gmt_mem_malloc(void **devPtr, size_t size, const void *caller);
cudaError_t gmt_mem_free(void *devPtr, const void *caller);
cudaError_t gmt_mem_free_async(void *devPtr, cudaStream_t hStream, bool ptsz,
                               const void *caller);
cudaError_t gmt_mem_device_synchronize(void);
cudaError_t gmt_mem_get_info(size_t *free, size_t *total);
cudaError_t gmt_mem_ipc_get_handle(cudaIpcMemHandle_t *handle, void *devPtr);
cudaError_t gmt_mem_device_reset(void);
cudaError_t gmt_stream_create(cudaStream_t *ps, unsigned flags, int priority,
                              bool with_priority, const void *caller);
cudaError_t gmt_stream_destroy(cudaStream_t stream);

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

/* TRACED, for an allocation of `size` bytes (a C expression): one that
 * failed for lack of memory is made once more if the pool gave back
 * memory it held idle (mem.c, gmt_mem_oom_retry), and one that then
 * succeeds leaves no error behind. Not from inside the library's own
 * calls: gmt_call_begin declines those. */
#define TRACED_OOM(size, real_call, record)                                   \\
    do {                                                                      \\
        struct gmt_call c_;                                                   \\
        if (!gmt_call_begin(&c_, false))                                      \\
            return real_call;                                                 \\
        cudaError_t r_ = real_call;                                           \\
        if (r_ == cudaErrorMemoryAllocation && gmt_mem_oom_retry(size, true) && \\
            (r_ = real_call) == cudaSuccess)                                  \\
            GMT_REAL(cudaGetLastError)();                                     \\
        gmt_call_errno(&c_);                                                  \\
        record;                                                               \\
        gmt_call_finish(&c_);                                                 \\
        return r_;                                                            \\
    } while (0)

/* An allocation not recorded, retried as in TRACED_OOM. */
#define OOM_RETRIED(real_call)                                                \\
    do {                                                                      \\
        cudaError_t r_ = real_call;                                           \\
        if (r_ == cudaErrorMemoryAllocation && gmt_mem_oom_retry(0, false) && \\
            (r_ = real_call) == cudaSuccess)                                  \\
            GMT_REAL(cudaGetLastError)();                                     \\
        return r_;                                                            \\
    } while (0)

/* The bytes a 3D extent asks for, saturated rather than wrapped. */
#define EXTENT_BYTES(e) gmt_mul_sat(gmt_mul_sat((e).width, (e).height), (e).depth)

#define S(s) gmt_stream_of((const void *)(s), false)
#define SZ(s) gmt_stream_of((const void *)(s), true)
/* A CUDA array is device memory: resolve cudaMemcpyDefault without
 * asking the driver about an array handle. */
#define ARRAY_DST(k) ((k) == cudaMemcpyDefault ? cudaMemcpyHostToDevice : (k))
#define ARRAY_SRC(k) ((k) == cudaMemcpyDefault ? cudaMemcpyDeviceToHost : (k))

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
'''


def traced(r):
    out = []
    for (fn, ptds) in exports(r):
        a = r["api"][0] + (" | GMT_API_PTDS" if ptds else "") if r["api"] else "0"
        st = r["ptds_stream"] if ptds else r["stream"]
        rec = r["record"].replace("STREAM", st).replace("API", "(" + a + ")")
        b = "true" if r["before"] else "false"
        p = f"    {r['pre']}\n" if r["pre"] else ""
        if r["oom"]:
            assert not r["before"], "an allocation stamps after its call"
            head = f"TRACED_OOM({r['oom']}, "
        else:
            head = f"TRACED({b}, "
        out.append(f"GMT_EXPORT cudaError_t {fn}({r['params']})\n{{\n{p}    {head}GMT_REAL({fn})({r['args']}),\n           {rec});\n}}\n")
    return out


def retried(r):
    return [f"GMT_EXPORT cudaError_t {r['name']}({r['params']})\n{{\n"
            f"    OOM_RETRIED(GMT_REAL({r['name']})({r['args']}));\n}}\n"]


def forwarded(r):
    return [f"GMT_EXPORT cudaError_t {fn}({r['params']})\n{{\n"
            f"    return {r['call'].format(ptsz='true' if ptsz else 'false')};\n}}\n"
            for (fn, ptsz) in exports(r)]


def capture(r):
    out = []
    args = r["args"]
    for (fn, variant) in exports(r):
        ptsz = "true" if variant else "false"
        if r["begin"]:
            body = (f"    gmt_capture_begin(gmt_stream_of(stream, {ptsz}));\n"
                    f"    cudaError_t r = GMT_REAL({fn})({args});\n"
                    f"    if (r != cudaSuccess)\n"
                    f"        gmt_capture_end(gmt_stream_of(stream, {ptsz}), stream);\n"
                    f"    return r;\n")
        else:
            body = (f"    cudaError_t r = GMT_REAL({fn})({args});\n"
                    f"    gmt_capture_end(gmt_stream_of(stream, {ptsz}), stream);\n"
                    f"    return r;\n")
        out.append(f"GMT_EXPORT cudaError_t {fn}({r['params']})\n{{\n{body}}}\n")
    return out


def hooks_c():
    out = [HOOKS_HEAD]
    for (kind, emit) in (("H", traced), ("RETRY", retried), ("M", forwarded), ("CAPTURE", capture)):
        for r in ROWS:
            if r["kind"] == kind:
                out += emit(r)
    return "\n".join(out)


# ---- preload/gmt_api.h -------------------------------------------------------
API_HEAD = '''/* gmt_api.h - the hooked CUDA runtime API and the trace's api codes.
 *
 * GENERATED by preload/gen-hooks.py from its table; edit the table, not
 * this file (`make generate`). Each list is an X-macro, expanded where it
 * is needed:
 *
 *   GMT_API_CODES(X)  X(constant, value, name): every value of a record's
 *                     api byte, the entry point (or the pool, a framework
 *                     allocator, the driver-level observer) that made it:
 *                     enum gmt_api (gmt_format.h), the names in reports
 *                     (report/trace/names.c). The values are the trace format's:
 *                     one never changes.
 *   GMT_RT_FUNCS(X)   X(name): every runtime function the library needs
 *                     the real definition of: the ones it exports and the
 *                     few the tracer calls for itself (real.h).
 *   GMT_RT_PTDS(X)    X(name, suffix): the per-thread-default-stream
 *                     exports (_ptds, _ptsz) of those it wraps (real.h,
 *                     the simulator's prototypes).
 */
#ifndef GMT_API_H
#define GMT_API_H
'''


def macro(name, params, lines):
    """#define name(params) with one item a line, backslashes in column 79."""
    body = [f"#define {name}({params})"] + ["    " + l for l in lines]
    width = max([78] + [len(l) + 1 for l in body])
    return "\n".join(l.ljust(width) + "\\" for l in body[:-1]) + "\n" + body[-1] + "\n"


def comment(text):
    lines = textwrap.wrap(text, 70, initial_indent="/* ", subsequent_indent="   ")
    lines[-1] += " */"
    return lines


def gmt_api_h():
    codes = sorted((r["api"][1], r["api"][0], r) for r in ROWS if r["api"])
    lines, ranges = [], list(API_RANGES)
    for (val, const, r) in codes:
        while ranges and ranges[0][0] <= val:
            lines += comment(ranges.pop(0)[1])
        if r.get("doc"):
            lines += comment(r["doc"])
        lines.append(f'X({const}, {val}, "{r["name"]}")')
    funcs = [r["name"] for r in ROWS if r["kind"] != "CODE"]
    ptds = [f"X({r['name']}, {r['sfx']})" for r in ROWS if r["sfx"]]
    return (API_HEAD + "\n" + macro("GMT_API_CODES", "X", lines) + "\n"
            + macro("GMT_RT_FUNCS", "X", [f"X({f})" for f in funcs]) + "\n"
            + macro("GMT_RT_PTDS", "X", ptds) + "\n#endif /* GMT_API_H */\n")


# ---- main --------------------------------------------------------------------
def main():
    if sys.argv[1:] not in ([], ["--check"]):
        sys.exit("usage: preload/gen-hooks.py [--check]")
    check = sys.argv[1:] == ["--check"]
    check_table()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")  # preload/..
    stale = 0
    for (path, text) in (("preload/hooks.c", hooks_c()), ("preload/gmt_api.h", gmt_api_h())):
        full = os.path.join(root, path)
        try:
            with open(full) as f:
                old = f.read()
        except FileNotFoundError:
            old = None
        if old == text:
            continue
        if check:
            state = "missing" if old is None else "stale"
            print(f"{path} is {state}: preload/gen-hooks.py's table makes another; "
                  "run `make generate` and commit it", file=sys.stderr)
            stale = 1
        else:
            with open(full + ".tmp", "w") as f:
                f.write(text)
            os.replace(full + ".tmp", full)
            print(f"  GEN      {path}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
