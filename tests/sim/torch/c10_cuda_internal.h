/* c10_cuda_internal.h - what the files of the PyTorch stand-in's
 * libc10_cuda.so share: the backend interface the C API calls, the block
 * and pool types of the native caching allocator, and its per-device
 * allocator, DeviceCachingAllocator. Not installed: the bridge sees only
 * include/c10/cuda/CUDACachingAllocator.h.
 *
 * The library is built with -fvisibility=hidden, so nothing declared here
 * is exported; the C API marks its functions default itself. Names follow
 * PyTorch's (Native::DeviceCachingAllocator, Block, BlockPool, ...), so
 * that a stack through the stand-in reads as one through PyTorch does.
 *
 * The files, by what they own (c10_cuda.cpp's first comment lists the
 * rules of PyTorch they follow):
 *
 *   c10_cuda.cpp          the exported allocator pointer, the choice of a
 *                         backend at load time, the C API (sim_torch.h)
 *   c10_cuda_device.cpp   DeviceCachingAllocator: sizes, pools, best fit,
 *                         splitting and merging, segments, record_stream's
 *                         events, statistics, trace events
 *   c10_cuda_native.cpp   the native backend: a DeviceCachingAllocator per
 *                         device, the map from pointers to blocks, the
 *                         uncached path
 *   c10_cuda_async.cpp    the cudaMallocAsync backend
 */
#ifndef SIM_TORCH_C10_CUDA_INTERNAL_H
#define SIM_TORCH_C10_CUDA_INTERNAL_H

#include <c10/cuda/CUDACachingAllocator.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

/* The C API's view of a backend: PyTorch's interface (what the bridge
 * calls) plus what torch.empty / del / torch.cuda.* do underneath. */
class SimBackend : public CUDAAllocator {
public:
    virtual int init(int device_count) = 0;
    virtual void *malloc(size_t size, cudaStream_t stream, MempoolId_t pool) = 0;
    virtual int free(void *p) = 0;
    virtual int recordStream(void *p, cudaStream_t stream) = 0;
    virtual void emptyCache() = 0;
    virtual int releasePool(MempoolId_t pool) = 0;
    virtual void resetPeakStats(c10::DeviceIndex device) = 0;
    virtual size_t blockSize(void *p) = 0;
};

/* The runtime's current device, or -1. */
inline int current_device()
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return -1;
    return dev;
}

/* c10_cuda_async.cpp: the cudaMallocAsync backend. */
SimBackend *make_async_backend();

namespace Native {

struct BlockPool;
struct PrivatePool;
struct AllocParams;

/* A piece of a segment, allocated or free. */
struct Block {
    c10::DeviceIndex device;
    cudaStream_t stream;
    std::set<cudaStream_t> stream_uses; /* other streams it was used on */
    size_t size;
    size_t requested_size = 0;
    BlockPool *pool = nullptr;
    char *ptr = nullptr;
    bool allocated = false;
    Block *prev = nullptr; /* neighbours in the same segment */
    Block *next = nullptr;
    int event_count = 0; /* events still to pass before the free completes */

    Block(c10::DeviceIndex d, cudaStream_t s, size_t n, BlockPool *p, char *a)
        : device(d), stream(s), size(n), pool(p), ptr(a)
    {
    }
    /* a search key */
    Block(c10::DeviceIndex d, cudaStream_t s, size_t n)
        : device(d), stream(s), size(n)
    {
    }
    bool is_split() const { return prev != nullptr || next != nullptr; }
};

/* c10_cuda_device.cpp: the order of a pool's free blocks. */
bool block_less(const Block *a, const Block *b);

/* The free blocks of one size class (small or large) of one pool. */
struct BlockPool {
    BlockPool(bool small, PrivatePool *owner = nullptr)
        : blocks(block_less), is_small(small), owner_PrivatePool(owner)
    {
    }
    std::set<Block *, bool (*)(const Block *, const Block *)> blocks;
    const bool is_small;
    PrivatePool *owner_PrivatePool;
    MempoolId_t owner_MempoolId() const;
};

/* A private memory pool (MempoolId_t != {0, 0}). */
struct PrivatePool {
    explicit PrivatePool(MempoolId_t mid)
        : id(mid), large_blocks(false, this), small_blocks(true, this)
    {
    }
    PrivatePool(const PrivatePool &) = delete;
    PrivatePool &operator=(const PrivatePool &) = delete;
    MempoolId_t id;
    BlockPool large_blocks;
    BlockPool small_blocks;
    int cudaMalloc_count = 0; /* its segments still held */
    bool freeable = false;    /* released: its free segments may go */
};

/* One device's allocator: PyTorch's DeviceCachingAllocator
 * (c10_cuda_device.cpp). Every public member takes the recursive mutex;
 * trackers run under it. */
class DeviceCachingAllocator {
public:
    explicit DeviceCachingAllocator(c10::DeviceIndex device);

    /* NULL when out of memory (the OOM event has fired) or on a CUDA
     * error other than out of memory. */
    Block *malloc(size_t orig_size, cudaStream_t stream, MempoolId_t mempool);
    void free(Block *block);
    void recordStream(Block *block, cudaStream_t stream);
    void emptyCache();
    void releasePool(MempoolId_t mempool);
    DeviceStats getStats();
    void resetPeakStats();
    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker);

private:
    BlockPool &get_pool(size_t size, MempoolId_t mempool);
    bool get_free_block(AllocParams &p);
    bool should_split(const Block *block, size_t size) const;
    bool alloc_block(AllocParams &p, bool isRetry);
    Block *alloc_found_block(AllocParams &p, size_t orig_size,
                             bool split_remainder);
    void free_block(Block *block);
    size_t try_merge_blocks(Block *dst, Block *src, BlockPool &pool);
    bool release_cached_blocks();
    void release_blocks(BlockPool &pool);
    void release_block(Block *block);
    void insert_events(Block *block);
    void process_events();
    void synchronize_and_free_events();
    void record_trace(TraceEntry::Action action, size_t addr, size_t size,
                      cudaStream_t stream, MempoolId_t mempool);

    c10::DeviceIndex device_;
    std::recursive_mutex mutex;
    DeviceStats stats;
    BlockPool large_blocks;
    BlockPool small_blocks;
    std::set<Block *> active_blocks;
    std::map<MempoolId_t, std::unique_ptr<PrivatePool>> graph_pools;
    std::map<cudaStream_t, std::deque<std::pair<cudaEvent_t, Block *>>> cuda_events;
    std::vector<AllocatorTraceTracker> trace_trackers_;
    size_t total_allocated_memory = 0;
};

/* c10_cuda_native.cpp: the native backend, which says `name` for name(). */
SimBackend *make_native_backend(std::string name);

} // namespace Native
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10

#endif
