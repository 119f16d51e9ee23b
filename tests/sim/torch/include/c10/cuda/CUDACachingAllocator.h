/* CUDACachingAllocator.h - STAND-IN for PyTorch's header of the same name,
 * for the tests of gpumemtrace's PyTorch bridge (preload/fw_torch.cpp) on
 * machines without PyTorch or a GPU.
 *
 * It mirrors the part of PyTorch 2.11's c10/cuda/CUDACachingAllocator.h
 * (with DeviceStats and Stat from c10/core/CachingDeviceAllocator.h) that
 * the bridge uses, with the same names, namespaces, field order and
 * types, so that the bridge compiles against it unchanged and the layout
 * it sees is the one a real PyTorch gives: the trace entry the allocator
 * passes to its trackers, the statistics, the allocator's virtuals, the
 * exported `allocator` pointer and the header-inline functions that
 * forward through it. It declares nothing else: PyTorch's header has far
 * more (snapshots, graph pools, IPC, configuration), which the bridge
 * must not need. The implementation is tests/sim/torch/c10_cuda.cpp,
 * built as libc10_cuda.so, a small caching allocator that follows
 * PyTorch's rules over the simulated CUDA runtime.
 *
 * Like PyTorch's, it includes <cuda_runtime_api.h> (cudaStream_t):
 * whoever compiles against it passes the CUDA include directory.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

/* PyTorch's C10_CUDA_API: these are exported from libc10_cuda.so, and
 * must stay visible to code compiled with -fvisibility=hidden (the
 * bridge is). */
#define SIM_C10_CUDA_API __attribute__((visibility("default")))

namespace c10 {

using DeviceIndex = int8_t; /* c10/core/Device.h */

namespace cuda {
namespace CUDACachingAllocator {

/* c10/core/CachingDeviceAllocator.h: one counter of the statistics. */
struct Stat {
    void increase(size_t amount)
    {
        current += static_cast<int64_t>(amount);
        peak = current > peak ? current : peak;
        allocated += static_cast<int64_t>(amount);
    }
    void decrease(size_t amount)
    {
        current -= static_cast<int64_t>(amount);
        freed += static_cast<int64_t>(amount);
    }
    void reset_accumulated()
    {
        allocated = 0;
        freed = 0;
    }
    void reset_peak() { peak = current; }

    int64_t current = 0;
    int64_t peak = 0;
    int64_t allocated = 0;
    int64_t freed = 0;
};

enum struct StatType : uint64_t {
    AGGREGATE = 0,
    SMALL_POOL = 1,
    LARGE_POOL = 2,
    NUM_TYPES = 3 /* remember to update this whenever a new stat type is added */
};

using StatArray = std::array<Stat, static_cast<size_t>(StatType::NUM_TYPES)>;

/* Per-device statistics of the caching allocator (all bytes are block
 * or segment sizes, except requested_bytes). */
struct DeviceStats {
    StatArray allocation;           /* blocks handed out */
    StatArray segment;              /* segments taken from CUDA */
    StatArray active;               /* blocks handed out or not yet reusable */
    StatArray inactive_split;       /* free pieces of split segments */
    StatArray allocated_bytes;      /* bytes of blocks handed out */
    StatArray reserved_bytes;       /* bytes of segments */
    StatArray active_bytes;         /* bytes of active blocks */
    StatArray inactive_split_bytes; /* bytes of inactive_split */
    StatArray requested_bytes;      /* bytes asked for, of active blocks */

    int64_t num_alloc_retries = 0; /* cudaMalloc retried after freeing the cache */
    int64_t num_ooms = 0;          /* out-of-memory errors raised */
    Stat oversize_allocations;
    Stat oversize_segments;
    int64_t num_sync_all_streams = 0;
    int64_t num_device_alloc = 0; /* cudaMalloc calls that succeeded */
    int64_t num_device_free = 0;  /* cudaFree calls */
    int64_t max_split_size = 0;
};

using CaptureId_t = unsigned long long;
/* A memory pool: {0, 0} the default one; {capture id, 0} a CUDA graph's
 * private pool; {0, id} a torch.cuda.MemPool. */
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;

/* One event of the allocator, as its trackers get it. */
struct TraceEntry {
    enum Action {
        ALLOC,          /* a block handed out: size requested */
        FREE_REQUESTED, /* the program freed a block */
        FREE_COMPLETED, /* the block is reusable (its streams are past it) */
        SEGMENT_ALLOC,  /* cudaMalloc of a segment */
        SEGMENT_FREE,   /* cudaFree of a segment */
        SEGMENT_MAP,    /* an expandable segment grew (cuMemMap) */
        SEGMENT_UNMAP,  /* an expandable segment shrank */
        SNAPSHOT,       /* a memory snapshot was taken */
        OOM             /* out of memory: addr_ is the device's free bytes */
    };
    TraceEntry(Action action, c10::DeviceIndex device, size_t addr,
               size_t size, cudaStream_t stream, MempoolId_t mempool,
               uint64_t time, std::shared_ptr<void> context = nullptr,
               std::string compile_context = "",
               std::string user_metadata = "")
        : action_(action), device_(device), addr_(addr),
          context_(std::move(context)), stream_(stream), size_(size),
          mempool_(std::move(mempool)), time_(time),
          compile_context_(std::move(compile_context)),
          user_metadata_(std::move(user_metadata))
    {
    }
    Action action_;
    c10::DeviceIndex device_;
    size_t addr_; /* for OOM, the free bytes cudaMemGetInfo reported */
    std::shared_ptr<void> context_; /* PyTorch: shared_ptr<GatheredContext> */
    cudaStream_t stream_{};
    size_t size_;
    MempoolId_t mempool_;
    uint64_t time_; /* PyTorch: a union of an approximate and a real time */
    std::string compile_context_;
    std::string user_metadata_;
};

/* Called for every event, on the thread that caused it, with that
 * device's allocator lock (a recursive mutex) held. */
using AllocatorTraceTracker = std::function<void(const TraceEntry &)>;

/* The allocator interface (PyTorch's has many more virtuals). */
class SIM_C10_CUDA_API CUDAAllocator {
public:
    virtual ~CUDAAllocator() = default;
    virtual bool initialized() = 0;
    virtual std::string name() = 0;
    virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
    virtual DeviceStats getDeviceStats(c10::DeviceIndex device) = 0;
};

/* The backend in use, set when libc10_cuda.so is loaded. */
SIM_C10_CUDA_API extern std::atomic<CUDAAllocator *> allocator;

inline CUDAAllocator *get()
{
    return allocator.load();
}

inline void attachAllocatorTraceTracker(AllocatorTraceTracker tracker)
{
    get()->attachAllocatorTraceTracker(std::move(tracker));
}

inline DeviceStats getDeviceStats(c10::DeviceIndex device)
{
    return get()->getDeviceStats(device);
}

} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
