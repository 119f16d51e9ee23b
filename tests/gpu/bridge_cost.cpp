// bridge_cost.cpp - what the PyTorch bridge's ingredients cost on a GPU
// machine (scripts/bridge-cost.sh builds it against the installed torch
// and drives it from Python through ctypes): a getDeviceStats call, as the
// bridge makes one or two per block allocation, and a no-op trace tracker
// attached, which makes PyTorch build a TraceEntry for every event.
#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <cstdint>

namespace cca = c10::cuda::CUDACachingAllocator;

static uint64_t g_events;

extern "C" double stats_ns(int n)
{
    auto t0 = std::chrono::steady_clock::now();
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += cca::getDeviceStats(0).active_bytes[0].current;
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / n + (sum == -1);
}

extern "C" size_t stats_size(void)
{
    return sizeof(cca::DeviceStats);
}

extern "C" void attach_noop(void)
{
    cca::attachAllocatorTraceTracker([](const cca::TraceEntry &) { g_events++; });
}

extern "C" uint64_t noop_events(void)
{
    return g_events;
}
