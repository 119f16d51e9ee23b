/* names.c - readable names for the trace's numeric codes. */
#include "report.h"

const char *gmt_kind_name(unsigned kind)
{
    static const char *const names[] = {
        [GMT_K_ALLOC] = "alloc",
        [GMT_K_FREE] = "free_requested",
        [GMT_K_FREE_COMPLETED] = "free_completed",
        [GMT_K_SEGMENT_ALLOC] = "segment_alloc",
        [GMT_K_SEGMENT_FREE] = "segment_free",
        [GMT_K_MEMCPY] = "memcpy",
        [GMT_K_MEMSET] = "memset",
        [GMT_K_SYNC] = "sync",
        [GMT_K_STREAM_CREATE] = "stream_create",
        [GMT_K_STREAM_DESTROY] = "stream_destroy",
        [GMT_K_SET_DEVICE] = "set_device",
        [GMT_K_MEMGETINFO] = "mem_get_info",
        [GMT_K_SAMPLE] = "sample",
        [GMT_K_OOM] = "oom_state",
        [GMT_K_MARKER] = "marker",
    };
    if (kind < sizeof names / sizeof *names && names[kind])
        return names[kind];
    return kind == GMT_K_EXT ? "definition" : "unknown";
}

const char *gmt_api_name(unsigned api)
{
    static const char *const names[GMT_API_API_MAX + 1] = {
        [GMT_API_MALLOC] = "cudaMalloc",
        [GMT_API_MALLOC_MANAGED] = "cudaMallocManaged",
        [GMT_API_MALLOC_PITCH] = "cudaMallocPitch",
        [GMT_API_MALLOC_3D] = "cudaMalloc3D",
        [GMT_API_MALLOC_HOST] = "cudaMallocHost",
        [GMT_API_HOST_ALLOC] = "cudaHostAlloc",
        [GMT_API_MALLOC_ASYNC] = "cudaMallocAsync",
        [GMT_API_MALLOC_FROM_POOL_ASYNC] = "cudaMallocFromPoolAsync",
        /* PyTorch's caching allocator handing out and taking back a block:
         * one name for both, the record kind says which */
        [GMT_API_FW_ALLOC] = "torch_block",
        [GMT_API_FW_FREE] = "torch_block",
        [GMT_API_FREE] = "cudaFree",
        [GMT_API_FREE_HOST] = "cudaFreeHost",
        [GMT_API_FREE_ASYNC] = "cudaFreeAsync",
        [GMT_API_MEMCPY] = "cudaMemcpy",
        [GMT_API_MEMCPY_ASYNC] = "cudaMemcpyAsync",
        [GMT_API_MEMCPY_2D] = "cudaMemcpy2D",
        [GMT_API_MEMCPY_2D_ASYNC] = "cudaMemcpy2DAsync",
        [GMT_API_MEMCPY_3D] = "cudaMemcpy3D",
        [GMT_API_MEMCPY_3D_ASYNC] = "cudaMemcpy3DAsync",
        [GMT_API_MEMCPY_3D_PEER] = "cudaMemcpy3DPeer",
        [GMT_API_MEMCPY_3D_PEER_ASYNC] = "cudaMemcpy3DPeerAsync",
        [GMT_API_MEMCPY_PEER] = "cudaMemcpyPeer",
        [GMT_API_MEMCPY_PEER_ASYNC] = "cudaMemcpyPeerAsync",
        [GMT_API_MEMCPY_TO_SYMBOL] = "cudaMemcpyToSymbol",
        [GMT_API_MEMCPY_TO_SYMBOL_ASYNC] = "cudaMemcpyToSymbolAsync",
        [GMT_API_MEMCPY_FROM_SYMBOL] = "cudaMemcpyFromSymbol",
        [GMT_API_MEMCPY_FROM_SYMBOL_ASYNC] = "cudaMemcpyFromSymbolAsync",
        [GMT_API_MEMCPY_TO_ARRAY] = "cudaMemcpyToArray",
        [GMT_API_MEMCPY_TO_ARRAY_ASYNC] = "cudaMemcpyToArrayAsync",
        [GMT_API_MEMCPY_FROM_ARRAY] = "cudaMemcpyFromArray",
        [GMT_API_MEMCPY_FROM_ARRAY_ASYNC] = "cudaMemcpyFromArrayAsync",
        [GMT_API_MEMCPY_ARRAY_TO_ARRAY] = "cudaMemcpyArrayToArray",
        [GMT_API_MEMCPY_2D_TO_ARRAY] = "cudaMemcpy2DToArray",
        [GMT_API_MEMCPY_2D_TO_ARRAY_ASYNC] = "cudaMemcpy2DToArrayAsync",
        [GMT_API_MEMCPY_2D_FROM_ARRAY] = "cudaMemcpy2DFromArray",
        [GMT_API_MEMCPY_2D_FROM_ARRAY_ASYNC] = "cudaMemcpy2DFromArrayAsync",
        [GMT_API_MEMCPY_2D_ARRAY_TO_ARRAY] = "cudaMemcpy2DArrayToArray",
        [GMT_API_MEMCPY_BATCH_ASYNC] = "cudaMemcpyBatchAsync",
        [GMT_API_MEMCPY_3D_BATCH_ASYNC] = "cudaMemcpy3DBatchAsync",
        [GMT_API_MEMSET] = "cudaMemset",
        [GMT_API_MEMSET_ASYNC] = "cudaMemsetAsync",
        [GMT_API_MEMSET_2D] = "cudaMemset2D",
        [GMT_API_MEMSET_2D_ASYNC] = "cudaMemset2DAsync",
        [GMT_API_MEMSET_3D] = "cudaMemset3D",
        [GMT_API_MEMSET_3D_ASYNC] = "cudaMemset3DAsync",
        [GMT_API_DEVICE_SYNCHRONIZE] = "cudaDeviceSynchronize",
        [GMT_API_STREAM_SYNCHRONIZE] = "cudaStreamSynchronize",
        [GMT_API_POOL_SYNCHRONIZE] = "pool-synchronize",
        [GMT_API_POOL_FENCE_WAIT] = "pool-fence-wait",
        [GMT_API_STREAM_CREATE] = "cudaStreamCreate",
        [GMT_API_STREAM_CREATE_WITH_FLAGS] = "cudaStreamCreateWithFlags",
        [GMT_API_STREAM_CREATE_WITH_PRIORITY] = "cudaStreamCreateWithPriority",
        [GMT_API_CU_MEM_ALLOC] = "cuMemAlloc",
        [GMT_API_CU_MEM_ALLOC_PITCH] = "cuMemAllocPitch",
        [GMT_API_CU_MEM_ALLOC_MANAGED] = "cuMemAllocManaged",
        [GMT_API_CU_MEM_ALLOC_HOST] = "cuMemAllocHost",
        [GMT_API_CU_MEM_HOST_ALLOC] = "cuMemHostAlloc",
        [GMT_API_CU_MEM_ALLOC_ASYNC] = "cuMemAllocAsync",
        [GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC] = "cuMemAllocFromPoolAsync",
        [GMT_API_CU_MEM_CREATE] = "cuMemCreate",
        [GMT_API_CU_MEM_CREATE_HOST] = "cuMemCreate(host)",
        [GMT_API_CU_MEM_FREE] = "cuMemFree",
        [GMT_API_CU_MEM_FREE_HOST] = "cuMemFreeHost",
        [GMT_API_CU_MEM_FREE_ASYNC] = "cuMemFreeAsync",
        [GMT_API_CU_MEM_RELEASE] = "cuMemRelease",
        [GMT_API_CU_MEM_MAP] = "cuMemMap",
        [GMT_API_CU_MEM_UNMAP] = "cuMemUnmap",
        [GMT_API_CU_MEM_ADDRESS_RESERVE] = "cuMemAddressReserve",
        [GMT_API_CU_MEM_ADDRESS_FREE] = "cuMemAddressFree",
        [GMT_API_CU_MEMCPY] = "cuMemcpy",
        [GMT_API_CU_MEMSET] = "cuMemset",
    };
    api &= ~GMT_API_PTDS;
    return api <= GMT_API_API_MAX && names[api] ? names[api] : "unknown";
}

const char *gmt_dir_name(unsigned dir)
{
    static const char *const names[] = {"?", "H2H", "H2D", "D2H", "D2D"};
    dir &= GMT_DIR_MASK;
    return dir < 5 ? names[dir] : "?";
}

const char *gmt_hostmem_name(unsigned dir)
{
    switch ((dir >> GMT_HOSTMEM_SHIFT) & 3) {
    case GMT_HOSTMEM_PAGEABLE:
        return "pageable";
    case GMT_HOSTMEM_PINNED:
        return "pinned";
    default:
        return "";
    }
}

const char *gmt_cuda_error_name(uint32_t code)
{
    switch (code) {
    case 0: return "cudaSuccess";
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 3: return "cudaErrorInitializationError";
    case 4: return "cudaErrorCudartUnloading";
    case 17: return "cudaErrorInvalidDevicePointer";
    case 100: return "cudaErrorNoDevice";
    case 101: return "cudaErrorInvalidDevice";
    case 400: return "cudaErrorInvalidResourceHandle";
    case 600: return "cudaErrorNotReady";
    case 700: return "cudaErrorIllegalAddress";
    case 801: return "cudaErrorNotSupported";
    case 900: return "cudaErrorStreamCaptureUnsupported";
    case 901: return "cudaErrorStreamCaptureInvalidated";
    default: return "cudaError";
    }
}

const char *gmt_event_class(const struct gmt_rec *rec)
{
    if (rec->kind == GMT_K_ALLOC && rec->result != 0)
        return rec->result == 2 ? "oom" : "alloc_failed";
    return gmt_kind_name(rec->kind);
}
