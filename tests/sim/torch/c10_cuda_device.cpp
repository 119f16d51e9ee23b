/* c10_cuda_device.cpp - the stand-in's DeviceCachingAllocator, one per
 * device: PyTorch's caching rules for one device's memory. Requests are
 * rounded and served from the small or large pool of the default or a
 * private memory pool, best fit per stream, the rest split off when worth
 * keeping; frees merge with free neighbours, or wait for the events of
 * the streams the block was recorded on; new segments are cudaMalloc'd
 * here, and the cache is emptied and the cudaMalloc retried before out of
 * memory. Statistics and trace events are kept at PyTorch's points
 * (c10_cuda.cpp's first comment lists the rules and what is left out).
 *
 * Its types are in c10_cuda_internal.h, for the native backend
 * (c10_cuda_native.cpp), which owns one of these per device.
 */
#include "c10_cuda_internal.h"

#include <array>
#include <chrono>
#include <cstdio>

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {
namespace Native {

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

} // namespace

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

MempoolId_t BlockPool::owner_MempoolId() const
{
    return owner_PrivatePool ? owner_PrivatePool->id : MempoolId_t{0, 0};
}

/* one request on its way through malloc */
struct AllocParams {
    size_t size;       /* rounded request */
    cudaStream_t stream;
    BlockPool *pool;
    size_t alloc_size; /* the segment size if one is needed */
    StatTypes stat_types{};
    Block *block = nullptr;
    cudaError_t err = cudaSuccess;
};

DeviceCachingAllocator::DeviceCachingAllocator(c10::DeviceIndex device)
    : device_(device), large_blocks(false), small_blocks(true)
{
}

/* The rounded request from the pool's free blocks, or a new segment;
 * NULL when out of memory (the OOM event has fired) or on a CUDA error
 * other than out of memory. */
Block *DeviceCachingAllocator::malloc(size_t orig_size, cudaStream_t stream,
                                     MempoolId_t mempool)
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

void DeviceCachingAllocator::free(Block *block)
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

void DeviceCachingAllocator::recordStream(Block *block, cudaStream_t stream)
{
    std::lock_guard<std::recursive_mutex> lock(mutex);
    if (stream == block->stream)
        return; /* uses on the allocation stream need nothing */
    block->stream_uses.insert(stream);
}

void DeviceCachingAllocator::emptyCache()
{
    std::lock_guard<std::recursive_mutex> lock(mutex);
    release_cached_blocks();
}

void DeviceCachingAllocator::releasePool(MempoolId_t mempool)
{
    std::lock_guard<std::recursive_mutex> lock(mutex);
    auto it = graph_pools.find(mempool);
    if (it != graph_pools.end())
        it->second->freeable = true;
}

DeviceStats DeviceCachingAllocator::getStats()
{
    std::lock_guard<std::recursive_mutex> lock(mutex);
    return stats;
}

void DeviceCachingAllocator::resetPeakStats()
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

void DeviceCachingAllocator::attachAllocatorTraceTracker(
    AllocatorTraceTracker tracker)
{
    std::unique_lock<std::recursive_mutex> lock(mutex);
    trace_trackers_.emplace_back(std::move(tracker));
}

BlockPool &DeviceCachingAllocator::get_pool(size_t size, MempoolId_t mempool)
{
    if (mempool.first != 0 || mempool.second != 0) {
        /* find and emplace rather than operator[]: its instantiation for
         * these (cross-file) types stays out of line, takes the address
         * of std::piecewise_construct and so adds that to the library's
         * exported symbols */
        auto it = graph_pools.find(mempool);
        if (it == graph_pools.end())
            it = graph_pools
                     .emplace(mempool, std::unique_ptr<PrivatePool>(
                                           new PrivatePool(mempool)))
                     .first;
        PrivatePool &pp = *it->second;
        return size <= kSmallSize ? pp.small_blocks : pp.large_blocks;
    }
    return size <= kSmallSize ? small_blocks : large_blocks;
}

bool DeviceCachingAllocator::get_free_block(AllocParams &p)
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

bool DeviceCachingAllocator::should_split(const Block *block, size_t size) const
{
    size_t remaining = block->size - size;
    if (block->pool->is_small)
        return remaining >= kMinBlockSize;
    return remaining > kSmallSize;
}

/* A new segment: cudaMalloc from this library, the mutex held. */
bool DeviceCachingAllocator::alloc_block(AllocParams &p, bool isRetry)
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

Block *DeviceCachingAllocator::alloc_found_block(AllocParams &p, size_t orig_size,
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

void DeviceCachingAllocator::free_block(Block *block)
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

size_t DeviceCachingAllocator::try_merge_blocks(Block *dst, Block *src, BlockPool &pool)
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
bool DeviceCachingAllocator::release_cached_blocks()
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

void DeviceCachingAllocator::release_blocks(BlockPool &pool)
{
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
        Block *block = *it;
        ++it;
        if (!block->prev && !block->next)
            release_block(block);
    }
}

void DeviceCachingAllocator::release_block(Block *block)
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
void DeviceCachingAllocator::insert_events(Block *block)
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
void DeviceCachingAllocator::process_events()
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

void DeviceCachingAllocator::synchronize_and_free_events()
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

void DeviceCachingAllocator::record_trace(TraceEntry::Action action, size_t addr,
                                          size_t size, cudaStream_t stream,
                                          MempoolId_t mempool)
{
    if (trace_trackers_.empty())
        return;
    TraceEntry te(action, device_, addr, size, stream, mempool, now_ns());
    for (const auto &cb : trace_trackers_)
        cb(te);
}

} // namespace Native
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
