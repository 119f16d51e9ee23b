/* c10_cuda_async.cpp - the stand-in's other backend, PyTorch's
 * cudaMallocAsync allocator (SIM_TORCH_BACKEND=cudaMallocAsync): one
 * cudaMallocAsync per block, its own statistics, no trace events, and a
 * tracker cannot be attached - which is what gpumemtrace's bridge must
 * notice and fall back from.
 */
#include "c10_cuda_internal.h"

#include <stdexcept>
#include <unordered_map>

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

namespace {

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

} // namespace

SimBackend *make_async_backend()
{
    return new AsyncAllocator();
}

} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
