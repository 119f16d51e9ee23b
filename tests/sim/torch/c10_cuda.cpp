/* c10_cuda.cpp - a stand-in for PyTorch's libc10_cuda.so: its CUDA caching
 * allocator, over the simulated CUDA runtime, for the tests of
 * gpumemtrace's PyTorch bridge on machines without PyTorch or a GPU.
 *
 * gpumemtrace finds PyTorch by the module its allocator's cudaMalloc calls
 * come from (a file named libc10_cuda.so*), compiles preload/fw_torch.cpp
 * against ../include beside it (include/c10/cuda/CUDACachingAllocator.h
 * here) and attaches a trace tracker. What the bridge relies on is what
 * this library must do as PyTorch does, from
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
 *
 * This file is the library's face: the allocator pointer PyTorch exports,
 * the backend picked at load time, and the C API. The allocator itself is
 * in c10_cuda_device.cpp, its backends in c10_cuda_native.cpp and
 * c10_cuda_async.cpp; c10_cuda_internal.h is what they share.
 */
#include "c10_cuda_internal.h"

#include <cstdlib>
#include <string>

#include "simcudart.h"
#include "sim_torch.h"

#define SIM_TORCH_API __attribute__((visibility("default")))

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

std::atomic<CUDAAllocator *> allocator{nullptr};

namespace {

std::string g_backend_name;

/* PyTorch picks its backend when libc10_cuda.so is loaded
 * (BackendStaticInitializer): `allocator` is never NULL, and not
 * initialized() until CUDA's lazy init calls init(device_count). */
SimBackend *make_backend()
{
    const char *env = getenv("SIM_TORCH_BACKEND");
    g_backend_name = env && *env ? env : "native";
    if (g_backend_name == "cudaMallocAsync")
        return make_async_backend();
    return Native::make_native_backend(g_backend_name);
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
