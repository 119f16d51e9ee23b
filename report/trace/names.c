/* names.c - readable names for the trace's numeric codes. */
#include "gmttrace.h"

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
#define GMT_API_NAME(constant, value, name) [constant] = name,
        GMT_API_CODES(GMT_API_NAME)
#undef GMT_API_NAME
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
