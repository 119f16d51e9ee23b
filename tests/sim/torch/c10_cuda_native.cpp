/* c10_cuda_native.cpp - the stand-in's native backend, PyTorch's
 * NativeCachingAllocator: what the C API calls when SIM_TORCH_BACKEND is
 * not "cudaMallocAsync". It owns a DeviceCachingAllocator per device
 * (c10_cuda_device.cpp), made at init, the map from the pointers it
 * handed out to their blocks, and PyTorch's uncached path
 * (PYTORCH_NO_CUDA_MEMORY_CACHING=1: a cudaMalloc per block, no events).
 */
#include "c10_cuda_internal.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {
namespace Native {

namespace {

bool no_caching()
{
    /* PyTorch's check_env: "1" is true, "0" false, others warn and are
     * ignored */
    const char *s = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    return s != nullptr && strcmp(s, "1") == 0;
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

} // namespace

SimBackend *make_native_backend(std::string name)
{
    return new NativeCachingAllocator(std::move(name));
}

} // namespace Native
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
