/* c10_cuda.cpp - a stand-in for PyTorch's libc10_cuda.so: its CUDA caching
 * allocator, over the simulated CUDA runtime, for the tests of
 * gpumemtrace's PyTorch bridge on machines without PyTorch or a GPU.
 *
 * gpumemtrace finds PyTorch by the module its allocator's cudaMalloc calls
 * come from (a file named libc10_cuda.so*), compiles preload/fw_torch.cpp
 * against ../include beside it (include/c10/cuda/CUDACachingAllocator.h
 * here) and attaches a trace tracker. What the bridge relies on is what
 * this file must do as PyTorch does, from
 * c10/cuda/CUDACachingAllocator.cpp (2.x, default configuration: no
 * max_split_size, no roundup_power2_divisions, no expandable segments):
 *
 *  - Sizes: below 512 bytes 512, else rounded up to 512. Requests up to
 *    1 MiB come from the small pool, whose segments are 2 MiB; larger
 *    ones from the large pool, whose segments are 20 MiB for requests
 *    under 10 MiB, else the request rounded up to 2 MiB. A request takes
 *    the smallest free block of its pool and stream (best fit), split when
 *    the rest is worth keeping (>= 512 bytes in the small pool, > 1 MiB
 *    in the large one), else whole: a block can be larger than the
 *    rounded request, which only the statistics show. Freed blocks merge
 *    with free neighbours of their segment.
 *  - Segments are cudaMalloc'd here, in this library, with the device's
 *    recursive mutex held; when that fails, every unsplit free segment is
 *    cudaFree'd and cudaMalloc tried once more; when that fails too the
 *    OOM event fires (addr = the device's free bytes, size = the rounded
 *    request) and the C API returns NULL (PyTorch raises
 *    OutOfMemoryError; no C++ exception crosses the C API here).
 *  - Trackers are called for every event on the calling thread with the
 *    device's mutex held, at the same point relative to the statistics
 *    as in PyTorch: ALLOC before allocated/active/requested bytes count
 *    the block (the segment, if one was taken, is already reserved);
 *    FREE_REQUESTED after allocated_bytes dropped (active_bytes still has
 *    the block); FREE_COMPLETED before active/requested bytes drop;
 *    SEGMENT_ALLOC after reserved_bytes grew; SEGMENT_FREE before it
 *    shrinks and before the cudaFree. ALLOC and FREE_* carry the requested
 *    size, segment events the segment's. A block used on other streams
 *    (record_stream) completes its free only when an event recorded on
 *    each of them has passed, checked at the next allocation or
 *    empty_cache; otherwise FREE_COMPLETED follows FREE_REQUESTED at once.
 *  - getDeviceStats takes the device's mutex (recursive: a tracker may
 *    call it), attachAllocatorTraceTracker adds the tracker to every
 *    device allocator that exists (none before init: it is lost),
 *    initialized() is false until init.
 *  - Private memory pools (MempoolId_t != {0, 0}) have their own small and
 *    large pools; their segments are kept until the pool is released.
 *  - PYTORCH_NO_CUDA_MEMORY_CACHING=1: every block is a cudaMalloc of its
 *    own and nothing is reported, as PyTorch's uncached path.
 *  - SIM_TORCH_BACKEND=cudaMallocAsync: a stand-in of PyTorch's
 *    cudaMallocAsync backend (name() "cudaMallocAsync", one
 *    cudaMallocAsync per block, attaching a tracker throws). Any other
 *    value keeps this allocator and only changes what name() says.
 *
 * Left out: expandable segments, CUDA graph capture, the allocator
 * configuration, snapshots, the event pool (events are created and
 * destroyed per use), garbage collection, memory fraction.
 */
#include <c10/cuda/CUDACachingAllocator.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "simcudart.h"
#include "sim_torch.h"

#define SIM_TORCH_API __attribute__((visibility("default")))

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

std::atomic<CUDAAllocator *> allocator{nullptr};

namespace {

constexpr size_t kMinBlockSize = 512;      /* all sizes are rounded to this */
constexpr size_t kSmallSize = 1048576;     /* largest "small" request */
constexpr size_t kSmallBuffer = 2097152;   /* small pool segment size */
constexpr size_t kLargeBuffer = 20971520;  /* large segment for requests < 10 MiB */
constexpr size_t kMinLargeAlloc = 10485760;/* from here: segment = request */
constexpr size_t kRoundLarge = 2097152;    /* ... rounded up to 2 MiB */

uint64_t now_ns()
{
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count());
}

struct BlockPool;
struct PrivatePool;

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

/* PyTorch's order of free blocks: by stream, then size, then address, so
 * lower_bound on (stream, size) finds the best fit of that stream. */
bool block_less(const Block *a, const Block *b)
{
    if (a->stream != b->stream)
        return reinterpret_cast<uintptr_t>(a->stream) <
               reinterpret_cast<uintptr_t>(b->stream);
    if (a->size != b->size)
        return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) <
           reinterpret_cast<uintptr_t>(b->ptr);
}

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

MempoolId_t BlockPool::owner_MempoolId() const
{
    return owner_PrivatePool ? owner_PrivatePool->id : MempoolId_t{0, 0};
}

using StatTypes = std::array<bool, static_cast<size_t>(StatType::NUM_TYPES)>;

template <typename F>
void for_each_selected_stat_type(const StatTypes &types, F f)
{
    for (size_t i = 0; i < types.size(); i++)
        if (types[i])
            f(i);
}

StatTypes get_stat_types_for_pool(const BlockPool &pool)
{
    StatTypes t{};
    t[size_t(StatType::AGGREGATE)] = true;
    t[size_t(pool.is_small ? StatType::SMALL_POOL : StatType::LARGE_POOL)] = true;
    return t;
}

struct AllocParams {
    size_t size;       /* rounded request */
    cudaStream_t stream;
    BlockPool *pool;
    size_t alloc_size; /* the segment size if one is needed */
    StatTypes stat_types{};
    Block *block = nullptr;
    cudaError_t err = cudaSuccess;
};

size_t round_size(size_t size)
{
    if (size < kMinBlockSize)
        return kMinBlockSize;
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t get_allocation_size(size_t size)
{
    if (size <= kSmallSize)
        return kSmallBuffer;
    if (size < kMinLargeAlloc)
        return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

/* One device's allocator: PyTorch's DeviceCachingAllocator. Every public
 * member takes the recursive mutex; trackers run under it. */
class DeviceCachingAllocator {
public:
    explicit DeviceCachingAllocator(c10::DeviceIndex device)
        : device_(device), large_blocks(false), small_blocks(true)
    {
    }

    /* NULL when out of memory (the OOM event has fired) or on a CUDA
     * error other than out of memory. */
    Block *malloc(size_t orig_size, cudaStream_t stream, MempoolId_t mempool)
    {
        std::unique_lock<std::recursive_mutex> lock(mutex);
        process_events();
        size_t size = round_size(orig_size);
        BlockPool &pool = get_pool(size, mempool);
        AllocParams params{size, stream, &pool, get_allocation_size(size)};
        params.stat_types = get_stat_types_for_pool(pool);

        bool block_found = get_free_block(params);
        if (!block_found) {
            /* PyTorch: alloc_block || (release_available_cached_blocks &&
             * alloc_block) || (release_cached_blocks && alloc_block(retry));
             * the middle one does nothing without max_split_size. */
            block_found = alloc_block(params, false) ||
                          (params.err == cudaErrorMemoryAllocation &&
                           release_cached_blocks() && alloc_block(params, true));
        }
        if (!block_found) {
            if (params.err != cudaErrorMemoryAllocation) {
                /* PyTorch raises the CUDA error (C10_CUDA_CHECK) */
                fprintf(stderr, "sim torch: cudaMalloc failed: %s\n",
                        cudaGetErrorName(params.err));
                return nullptr;
            }
            size_t device_free = 0, device_total = 0;
            if (cudaMemGetInfo(&device_free, &device_total) != cudaSuccess)
                device_free = 0;
            record_trace(TraceEntry::OOM, device_free, params.size,
                         params.stream, pool.owner_MempoolId());
            stats.num_ooms += 1;
            return nullptr;
        }
        bool split_remainder = should_split(params.block, params.size);
        return alloc_found_block(params, orig_size, split_remainder);
    }

    void free(Block *block)
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        block->allocated = false;
        StatTypes stat_types = get_stat_types_for_pool(*block->pool);
        for_each_selected_stat_type(stat_types, [&](size_t t) {
            stats.allocation[t].decrease(1);
            stats.allocated_bytes[t].decrease(block->size);
        });
        record_trace(TraceEntry::FREE_REQUESTED, uintptr_t(block->ptr),
                     block->requested_size, block->stream,
                     block->pool->owner_MempoolId());
        if (!block->stream_uses.empty())
            insert_events(block);
        else
            free_block(block);
    }

    void recordStream(Block *block, cudaStream_t stream)
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        if (stream == block->stream)
            return; /* uses on the allocation stream need nothing */
        block->stream_uses.insert(stream);
    }

    void emptyCache()
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        release_cached_blocks();
    }

    void releasePool(MempoolId_t mempool)
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        auto it = graph_pools.find(mempool);
        if (it != graph_pools.end())
            it->second->freeable = true;
    }

    DeviceStats getStats()
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        return stats;
    }

    void resetPeakStats()
    {
        std::lock_guard<std::recursive_mutex> lock(mutex);
        for (StatArray *a : {&stats.allocation, &stats.segment, &stats.active,
                             &stats.inactive_split, &stats.allocated_bytes,
                             &stats.reserved_bytes, &stats.active_bytes,
                             &stats.inactive_split_bytes, &stats.requested_bytes})
            for (Stat &s : *a)
                s.reset_peak();
        stats.oversize_allocations.reset_peak();
        stats.oversize_segments.reset_peak();
    }

    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker)
    {
        std::unique_lock<std::recursive_mutex> lock(mutex);
        trace_trackers_.emplace_back(std::move(tracker));
    }

private:
    BlockPool &get_pool(size_t size, MempoolId_t mempool)
    {
        if (mempool.first != 0 || mempool.second != 0) {
            auto &pp = graph_pools[mempool];
            if (!pp)
                pp.reset(new PrivatePool(mempool));
            return size <= kSmallSize ? pp->small_blocks : pp->large_blocks;
        }
        return size <= kSmallSize ? small_blocks : large_blocks;
    }

    bool get_free_block(AllocParams &p)
    {
        BlockPool &pool = *p.pool;
        Block key(device_, p.stream, p.size);
        auto it = pool.blocks.lower_bound(&key);
        if (it == pool.blocks.end() || (*it)->stream != p.stream)
            return false;
        p.block = *it;
        pool.blocks.erase(it);
        return true;
    }

    bool should_split(const Block *block, size_t size) const
    {
        size_t remaining = block->size - size;
        if (block->pool->is_small)
            return remaining >= kMinBlockSize;
        return remaining > kSmallSize;
    }

    /* A new segment: cudaMalloc from this library, the mutex held. */
    bool alloc_block(AllocParams &p, bool isRetry)
    {
        size_t size = p.alloc_size;
        void *ptr = nullptr;
        if (isRetry)
            stats.num_alloc_retries += 1;
        p.err = cudaMalloc(&ptr, size);
        if (p.err != cudaSuccess) {
            /* clear CUDA's last error, as PyTorch does */
            (void)cudaGetLastError();
            return false;
        }
        if (p.pool->owner_PrivatePool)
            p.pool->owner_PrivatePool->cudaMalloc_count++;
        total_allocated_memory += size;
        p.block = new Block(device_, p.stream, size, p.pool,
                            static_cast<char *>(ptr));
        for_each_selected_stat_type(p.stat_types, [&](size_t t) {
            stats.segment[t].increase(1);
            stats.reserved_bytes[t].increase(size);
        });
        stats.num_device_alloc++;
        record_trace(TraceEntry::SEGMENT_ALLOC, uintptr_t(p.block->ptr),
                     p.block->size, p.stream, p.pool->owner_MempoolId());
        return true;
    }

    Block *alloc_found_block(AllocParams &p, size_t orig_size,
                             bool split_remainder)
    {
        Block *block = p.block;
        BlockPool *pool = p.pool;
        const bool already_split = block->is_split();
        if (split_remainder) {
            Block *remaining = block;
            block = new Block(device_, p.stream, p.size, pool, block->ptr);
            block->prev = remaining->prev;
            if (block->prev)
                block->prev->next = block;
            block->next = remaining;
            remaining->prev = block;
            remaining->ptr += p.size;
            remaining->size -= p.size;
            pool->blocks.insert(remaining);
            if (already_split) {
                /* an inactive split block shrinks by size bytes */
                for_each_selected_stat_type(p.stat_types, [&](size_t t) {
                    stats.inactive_split_bytes[t].decrease(block->size);
                });
            } else {
                for_each_selected_stat_type(p.stat_types, [&](size_t t) {
                    stats.inactive_split_bytes[t].increase(remaining->size);
                    stats.inactive_split[t].increase(1);
                });
            }
        } else if (already_split) {
            for_each_selected_stat_type(p.stat_types, [&](size_t t) {
                stats.inactive_split_bytes[t].decrease(block->size);
                stats.inactive_split[t].decrease(1);
            });
        }
        block->allocated = true;
        block->requested_size = orig_size;
        active_blocks.insert(block);

        /* before the statistics count the block: a tracker that reads
         * active_bytes now and at the next event learns its size */
        record_trace(TraceEntry::ALLOC, uintptr_t(block->ptr), orig_size,
                     block->stream, pool->owner_MempoolId());
        for_each_selected_stat_type(p.stat_types, [&](size_t t) {
            stats.allocation[t].increase(1);
            stats.allocated_bytes[t].increase(block->size);
            stats.active[t].increase(1);
            stats.active_bytes[t].increase(block->size);
            stats.requested_bytes[t].increase(block->requested_size);
        });
        return block;
    }

    void free_block(Block *block)
    {
        record_trace(TraceEntry::FREE_COMPLETED, uintptr_t(block->ptr),
                     block->requested_size, block->stream,
                     block->pool->owner_MempoolId());
        size_t original_block_size = block->size;
        size_t requested_size = block->requested_size;
        BlockPool &pool = *block->pool;
        int64_t net_change_inactive_split_blocks = 0;
        int64_t net_change_inactive_split_size = 0;

        const std::array<Block *, 2> merge_candidates = {block->prev, block->next};
        for (Block *candidate : merge_candidates) {
            size_t subsumed = try_merge_blocks(block, candidate, pool);
            if (subsumed > 0) {
                net_change_inactive_split_blocks -= 1;
                net_change_inactive_split_size -= int64_t(subsumed);
            }
        }
        active_blocks.erase(block);
        pool.blocks.insert(block);
        if (block->is_split()) {
            net_change_inactive_split_blocks += 1;
            net_change_inactive_split_size += int64_t(block->size);
        }
        StatTypes stat_types = get_stat_types_for_pool(pool);
        for_each_selected_stat_type(stat_types, [&](size_t t) {
            if (net_change_inactive_split_blocks > 0)
                stats.inactive_split[t].increase(size_t(net_change_inactive_split_blocks));
            else if (net_change_inactive_split_blocks < 0)
                stats.inactive_split[t].decrease(size_t(-net_change_inactive_split_blocks));
            if (net_change_inactive_split_size > 0)
                stats.inactive_split_bytes[t].increase(size_t(net_change_inactive_split_size));
            else if (net_change_inactive_split_size < 0)
                stats.inactive_split_bytes[t].decrease(size_t(-net_change_inactive_split_size));
            stats.active[t].decrease(1);
            stats.active_bytes[t].decrease(original_block_size);
            stats.requested_bytes[t].decrease(requested_size);
        });
    }

    size_t try_merge_blocks(Block *dst, Block *src, BlockPool &pool)
    {
        if (src == nullptr || src->allocated || src->event_count > 0 ||
            !src->stream_uses.empty())
            return 0;
        if (dst->prev == src) { /* [src dst] */
            dst->ptr = src->ptr;
            dst->prev = src->prev;
            if (dst->prev)
                dst->prev->next = dst;
        } else { /* [dst src] */
            dst->next = src->next;
            if (dst->next)
                dst->next->prev = dst;
        }
        size_t subsumed = src->size;
        dst->size += subsumed;
        pool.blocks.erase(src);
        delete src;
        return subsumed;
    }

    /* Every unsplit free segment back to CUDA. */
    bool release_cached_blocks()
    {
        synchronize_and_free_events();
        release_blocks(large_blocks);
        release_blocks(small_blocks);
        for (auto it = graph_pools.begin(); it != graph_pools.end();) {
            PrivatePool &pp = *it->second;
            if (pp.freeable) {
                release_blocks(pp.large_blocks);
                release_blocks(pp.small_blocks);
                if (pp.cudaMalloc_count == 0) {
                    it = graph_pools.erase(it);
                    continue;
                }
            }
            ++it;
        }
        return true;
    }

    void release_blocks(BlockPool &pool)
    {
        for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
            Block *block = *it;
            ++it;
            if (!block->prev && !block->next)
                release_block(block);
        }
    }

    void release_block(Block *block)
    {
        stats.num_device_free++;
        /* before the cudaFree and the statistics, as PyTorch */
        record_trace(TraceEntry::SEGMENT_FREE, uintptr_t(block->ptr),
                     block->size, block->stream, block->pool->owner_MempoolId());
        cudaError_t err = cudaFree(block->ptr);
        if (err != cudaSuccess)
            fprintf(stderr, "sim torch: cudaFree failed: %s\n",
                    cudaGetErrorName(err));
        total_allocated_memory -= block->size;
        BlockPool *pool = block->pool;
        if (pool->owner_PrivatePool)
            pool->owner_PrivatePool->cudaMalloc_count--;
        StatTypes stat_types = get_stat_types_for_pool(*pool);
        for_each_selected_stat_type(stat_types, [&](size_t t) {
            stats.segment[t].decrease(1);
            stats.reserved_bytes[t].decrease(block->size);
        });
        pool->blocks.erase(block);
        delete block;
    }

    /* The block is freed while other streams may still use it: an event
     * on each, and the free completes when all have passed. */
    void insert_events(Block *block)
    {
        std::set<cudaStream_t> streams(std::move(block->stream_uses));
        block->stream_uses.clear();
        for (cudaStream_t s : streams) {
            cudaEvent_t ev = nullptr;
            if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
                cudaEventRecord(ev, s) != cudaSuccess) {
                fprintf(stderr, "sim torch: cannot record an event\n");
                if (ev)
                    cudaEventDestroy(ev);
                continue;
            }
            block->event_count++;
            cuda_events[s].emplace_back(ev, block);
        }
        if (block->event_count == 0)
            free_block(block);
    }

    /* At each allocation: the frees whose events have passed complete. */
    void process_events()
    {
        for (auto it = cuda_events.begin(); it != cuda_events.end();) {
            while (!it->second.empty()) {
                auto &e = it->second.front();
                cudaError_t err = cudaEventQuery(e.first);
                if (err == cudaErrorNotReady) {
                    (void)cudaGetLastError();
                    break;
                }
                Block *block = e.second;
                cudaEventDestroy(e.first);
                it->second.pop_front();
                if (--block->event_count == 0)
                    free_block(block);
            }
            if (it->second.empty())
                it = cuda_events.erase(it);
            else
                ++it;
        }
    }

    void synchronize_and_free_events()
    {
        for (auto &st : cuda_events) {
            for (auto &e : st.second) {
                cudaEventSynchronize(e.first);
                cudaEventDestroy(e.first);
                Block *block = e.second;
                if (--block->event_count == 0)
                    free_block(block);
            }
        }
        cuda_events.clear();
    }

    void record_trace(TraceEntry::Action action, size_t addr, size_t size,
                      cudaStream_t stream, MempoolId_t mempool)
    {
        if (trace_trackers_.empty())
            return;
        TraceEntry te(action, device_, addr, size, stream, mempool, now_ns());
        for (const auto &cb : trace_trackers_)
            cb(te);
    }

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

/* The C API's view of a backend. */
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

bool no_caching()
{
    /* PyTorch's check_env: "1" is true, "0" false, others warn and are
     * ignored */
    const char *s = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    return s != nullptr && strcmp(s, "1") == 0;
}

int current_device()
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return -1;
    return dev;
}

/* PyTorch's NativeCachingAllocator: a DeviceCachingAllocator per device,
 * and the map from pointers to blocks (its own lock). */
class NativeCachingAllocator final : public SimBackend {
public:
    explicit NativeCachingAllocator(std::string n) : name_(std::move(n)) {}

    int init(int device_count) override
    {
        size_t have = device_allocator.size();
        if (have < size_t(device_count)) {
            device_allocator.resize(size_t(device_count));
            for (size_t i = have; i < size_t(device_count); i++)
                device_allocator[i].reset(
                    new DeviceCachingAllocator(c10::DeviceIndex(i)));
        }
        return 0;
    }

    bool initialized() override { return !device_allocator.empty(); }

    std::string name() override { return name_; }

    void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override
    {
        for (auto &a : device_allocator)
            a->attachAllocatorTraceTracker(tracker);
    }

    DeviceStats getDeviceStats(c10::DeviceIndex device) override
    {
        return valid(device).getStats();
    }

    void *malloc(size_t size, cudaStream_t stream, MempoolId_t pool) override
    {
        int dev = current_device();
        if (dev < 0 || size_t(dev) >= device_allocator.size() || size == 0)
            return nullptr;
        if (no_caching()) {
            void *p = nullptr;
            if (cudaMalloc(&p, size) != cudaSuccess) {
                (void)cudaGetLastError();
                return nullptr;
            }
            std::lock_guard<std::mutex> lk(blocks_mutex);
            uncached.insert(p);
            return p;
        }
        Block *b = device_allocator[size_t(dev)]->malloc(size, stream, pool);
        if (b == nullptr)
            return nullptr;
        std::lock_guard<std::mutex> lk(blocks_mutex);
        allocated_blocks[b->ptr] = b;
        return b->ptr;
    }

    int free(void *p) override
    {
        Block *b = nullptr;
        {
            std::lock_guard<std::mutex> lk(blocks_mutex);
            if (uncached.erase(p)) {
                cudaFree(p);
                return 0;
            }
            auto it = allocated_blocks.find(p);
            if (it == allocated_blocks.end())
                return -1;
            b = it->second;
            allocated_blocks.erase(it);
        }
        device_allocator[size_t(b->device)]->free(b);
        return 0;
    }

    int recordStream(void *p, cudaStream_t stream) override
    {
        Block *b = find(p);
        if (b == nullptr)
            return -1;
        device_allocator[size_t(b->device)]->recordStream(b, stream);
        return 0;
    }

    void emptyCache() override
    {
        for (auto &a : device_allocator)
            a->emptyCache();
    }

    int releasePool(MempoolId_t pool) override
    {
        for (auto &a : device_allocator)
            a->releasePool(pool);
        return 0;
    }

    void resetPeakStats(c10::DeviceIndex device) override
    {
        valid(device).resetPeakStats();
    }

    size_t blockSize(void *p) override
    {
        Block *b = find(p);
        return b ? b->size : 0;
    }

private:
    DeviceCachingAllocator &valid(c10::DeviceIndex device)
    {
        if (device < 0 || size_t(device) >= device_allocator.size())
            throw std::out_of_range("Allocator not initialized for device " +
                                    std::to_string(int(device)));
        return *device_allocator[size_t(device)];
    }

    Block *find(void *p)
    {
        std::lock_guard<std::mutex> lk(blocks_mutex);
        auto it = allocated_blocks.find(p);
        return it == allocated_blocks.end() ? nullptr : it->second;
    }

    std::string name_;
    std::vector<std::unique_ptr<DeviceCachingAllocator>> device_allocator;
    std::mutex blocks_mutex;
    std::unordered_map<void *, Block *> allocated_blocks;
    std::unordered_set<void *> uncached;
};

/* PyTorch's CudaMallocAsyncAllocator, reduced: each block is a
 * cudaMallocAsync of its own on its stream, made with the allocator's
 * (non-recursive) mutex held, as PyTorch's; no trace events. */
class AsyncAllocator final : public SimBackend {
public:
    int init(int device_count) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        if (stats.size() < size_t(device_count))
            stats.resize(size_t(device_count));
        inited.store(true);
        return 0;
    }

    /* Without the lock, as PyTorch's (it reads its per-device flags):
     * malloc holds the lock, non-recursive, across cudaMallocAsync, where
     * a profiler's hook may ask. */
    bool initialized() override { return inited.load(); }

    std::string name() override { return "cudaMallocAsync"; }

    void attachAllocatorTraceTracker(AllocatorTraceTracker) override
    {
        throw std::runtime_error(
            "cudaMallocAsync does not yet support attachAllocatorTraceTracker. "
            "If you need it, please file an issue describing your use case.");
    }

    DeviceStats getDeviceStats(c10::DeviceIndex device) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        if (device < 0 || size_t(device) >= stats.size())
            throw std::out_of_range("no such device");
        return stats[size_t(device)];
    }

    void *malloc(size_t size, cudaStream_t stream, MempoolId_t) override
    {
        int dev = current_device();
        std::lock_guard<std::mutex> lk(mutex);
        if (dev < 0 || size_t(dev) >= stats.size() || size == 0)
            return nullptr;
        void *p = nullptr;
        if (cudaMallocAsync(&p, size, stream) != cudaSuccess) {
            (void)cudaGetLastError();
            stats[size_t(dev)].num_ooms += 1;
            return nullptr;
        }
        live[p] = Live{size, dev, stream};
        DeviceStats &s = stats[size_t(dev)];
        s.allocation[0].increase(1);
        s.allocated_bytes[0].increase(size);
        s.reserved_bytes[0].increase(size);
        s.active[0].increase(1);
        s.active_bytes[0].increase(size);
        s.requested_bytes[0].increase(size);
        return p;
    }

    int free(void *p) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        auto it = live.find(p);
        if (it == live.end())
            return -1;
        Live l = it->second;
        live.erase(it);
        cudaFreeAsync(p, l.stream);
        DeviceStats &s = stats[size_t(l.device)];
        s.allocation[0].decrease(1);
        s.allocated_bytes[0].decrease(l.size);
        s.reserved_bytes[0].decrease(l.size);
        s.active[0].decrease(1);
        s.active_bytes[0].decrease(l.size);
        s.requested_bytes[0].decrease(l.size);
        return 0;
    }

    int recordStream(void *p, cudaStream_t) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        return live.count(p) ? 0 : -1;
    }

    void emptyCache() override { cudaDeviceSynchronize(); }

    int releasePool(MempoolId_t) override { return 0; }

    void resetPeakStats(c10::DeviceIndex device) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        if (device >= 0 && size_t(device) < stats.size())
            for (Stat &s : stats[size_t(device)].allocated_bytes)
                s.reset_peak();
    }

    size_t blockSize(void *p) override
    {
        std::lock_guard<std::mutex> lk(mutex);
        auto it = live.find(p);
        return it == live.end() ? 0 : it->second.size;
    }

private:
    struct Live {
        size_t size;
        int device;
        cudaStream_t stream;
    };
    std::mutex mutex; /* PyTorch's general_mutex */
    std::atomic<bool> inited{false};
    std::vector<DeviceStats> stats;
    std::unordered_map<void *, Live> live;
};

std::string g_backend_name;

/* PyTorch picks its backend when libc10_cuda.so is loaded
 * (BackendStaticInitializer): `allocator` is never NULL, and not
 * initialized() until CUDA's lazy init calls init(device_count). */
SimBackend *make_backend()
{
    const char *env = getenv("SIM_TORCH_BACKEND");
    g_backend_name = env && *env ? env : "native";
    if (g_backend_name == "cudaMallocAsync")
        return new AsyncAllocator();
    return new NativeCachingAllocator(g_backend_name);
}

struct BackendStaticInitializer {
    BackendStaticInitializer() { allocator.store(make_backend()); }
} g_backend_initializer;

SimBackend *backend()
{
    return static_cast<SimBackend *>(allocator.load());
}

} // namespace
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10

namespace cca = c10::cuda::CUDACachingAllocator;

/* ---- the C API (sim_torch.h) ---------------------------------------------
 * Everything is caught here: a test program gets NULL or -1, never a C++
 * exception through C or ctypes frames. */

extern "C" SIM_TORCH_API int sim_torch_init(int ndev)
{
    try {
        if (ndev <= 0 && cudaGetDeviceCount(&ndev) != cudaSuccess)
            return -1;
        if (ndev <= 0 || ndev > 127)
            return -1;
        return cca::backend()->init(ndev);
    } catch (...) {
        return -1;
    }
}

extern "C" SIM_TORCH_API const char *sim_torch_backend(void)
{
    return cca::g_backend_name.c_str();
}

extern "C" SIM_TORCH_API void *sim_torch_malloc(size_t size, void *stream)
{
    try {
        return cca::backend()->malloc(size, static_cast<cudaStream_t>(stream),
                                      cca::MempoolId_t{0, 0});
    } catch (...) {
        return nullptr;
    }
}

extern "C" SIM_TORCH_API void *sim_torch_malloc_pool(size_t size, void *stream,
                                                     unsigned long long first,
                                                     unsigned long long second)
{
    try {
        return cca::backend()->malloc(size, static_cast<cudaStream_t>(stream),
                                      cca::MempoolId_t{first, second});
    } catch (...) {
        return nullptr;
    }
}

extern "C" SIM_TORCH_API int sim_torch_free(void *p)
{
    try {
        return p ? cca::backend()->free(p) : 0;
    } catch (...) {
        return -1;
    }
}

extern "C" SIM_TORCH_API int sim_torch_record_stream(void *p, void *stream)
{
    try {
        return cca::backend()->recordStream(p, static_cast<cudaStream_t>(stream));
    } catch (...) {
        return -1;
    }
}

extern "C" SIM_TORCH_API void sim_torch_empty_cache(void)
{
    try {
        cca::backend()->emptyCache();
    } catch (...) {
    }
}

extern "C" SIM_TORCH_API int sim_torch_release_pool(unsigned long long first,
                                                    unsigned long long second)
{
    try {
        return cca::backend()->releasePool(cca::MempoolId_t{first, second});
    } catch (...) {
        return -1;
    }
}

static bool device_stats(int dev, cca::DeviceStats &out)
{
    try {
        if (dev < 0 || dev > 127 || !cca::backend()->initialized())
            return false;
        out = cca::backend()->getDeviceStats(c10::DeviceIndex(dev));
        return true;
    } catch (...) {
        return false;
    }
}

extern "C" SIM_TORCH_API void sim_torch_stats(int dev, long long out[4])
{
    cca::DeviceStats s;
    if (!device_stats(dev, s)) {
        for (int i = 0; i < 4; i++)
            out[i] = -1;
        return;
    }
    out[0] = s.allocated_bytes[0].current;
    out[1] = s.allocated_bytes[0].peak;
    out[2] = s.reserved_bytes[0].current;
    out[3] = s.reserved_bytes[0].peak;
}

extern "C" SIM_TORCH_API void sim_torch_counts(int dev, long long out[6])
{
    cca::DeviceStats s;
    if (!device_stats(dev, s)) {
        for (int i = 0; i < 6; i++)
            out[i] = -1;
        return;
    }
    out[0] = s.allocation[0].allocated; /* increased at each ALLOC */
    out[1] = s.allocation[0].freed;     /* decreased at each FREE_REQUESTED */
    out[2] = s.active[0].freed;         /* decreased at each FREE_COMPLETED */
    out[3] = s.num_device_alloc;
    out[4] = s.num_device_free;
    out[5] = s.num_ooms;
}

extern "C" SIM_TORCH_API long long sim_torch_stat(int dev, const char *name)
{
    cca::DeviceStats s;
    if (name == nullptr || !device_stats(dev, s))
        return -1;
    std::string n(name);
    const struct {
        const char *key;
        int64_t value;
    } scalars[] = {{"num_ooms", s.num_ooms},
                   {"num_alloc_retries", s.num_alloc_retries},
                   {"num_device_alloc", s.num_device_alloc},
                   {"num_device_free", s.num_device_free}};
    for (const auto &sc : scalars)
        if (n == sc.key)
            return sc.value;
    const struct {
        const char *key;
        const cca::StatArray *a;
    } arrays[] = {{"allocation", &s.allocation},
                  {"segment", &s.segment},
                  {"active", &s.active},
                  {"inactive_split", &s.inactive_split},
                  {"allocated_bytes", &s.allocated_bytes},
                  {"reserved_bytes", &s.reserved_bytes},
                  {"active_bytes", &s.active_bytes},
                  {"inactive_split_bytes", &s.inactive_split_bytes},
                  {"requested_bytes", &s.requested_bytes}};
    size_t dot = n.find('.');
    if (dot == std::string::npos)
        return -1;
    std::string stat = n.substr(0, dot), field = n.substr(dot + 1);
    for (const auto &ar : arrays) {
        if (stat != ar.key)
            continue;
        const cca::Stat &st = (*ar.a)[0];
        if (field == "current")
            return st.current;
        if (field == "peak")
            return st.peak;
        if (field == "allocated")
            return st.allocated;
        if (field == "freed")
            return st.freed;
    }
    return -1;
}

extern "C" SIM_TORCH_API void sim_torch_reset_peak(int dev)
{
    try {
        cca::backend()->resetPeakStats(c10::DeviceIndex(dev));
    } catch (...) {
    }
}

extern "C" SIM_TORCH_API size_t sim_torch_block_size(void *p)
{
    try {
        return cca::backend()->blockSize(p);
    } catch (...) {
        return 0;
    }
}

extern "C" SIM_TORCH_API int sim_torch_set_device(int dev)
{
    return cudaSetDevice(dev) == cudaSuccess ? 0 : -1;
}

extern "C" SIM_TORCH_API void *sim_torch_stream_create(void)
{
    cudaStream_t s = nullptr;
    return cudaStreamCreate(&s) == cudaSuccess ? s : nullptr;
}

extern "C" SIM_TORCH_API int sim_torch_stream_sleep(void *stream, unsigned usec)
{
    return simLaunchSleep(usec, static_cast<cudaStream_t>(stream)) == cudaSuccess
               ? 0 : -1;
}

extern "C" SIM_TORCH_API int sim_torch_synchronize(void)
{
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}
