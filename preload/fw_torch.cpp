/* fw_torch.cpp - the PyTorch bridge: PyTorch's caching allocator's own
 * block and segment events, handed to libgpumemtrace.so as C structs.
 *
 * PyTorch calls every trace tracker attached with
 * c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker for each
 * block it hands out and takes back and each segment it takes from CUDA,
 * on the thread that caused it, with that device's allocator lock held
 * (a recursive mutex). This file is not built with the library: fw.c
 * compiles it against the headers of the PyTorch the traced program
 * imported, the first time that PyTorch is seen, and caches the result
 * (fw_build.c). It needs only what CUDACachingAllocator.h declares.
 *
 * Block sizes. A trace entry carries the requested size, not the block's:
 * the allocator rounds to 512 bytes (finer with roundup_power2_divisions)
 * and may hand out a whole free block it decides not to split. The
 * block's size is what the device's active_bytes counter gains: PyTorch
 * raises it just after the ALLOC callback returns, and nothing else
 * changes it before the next event of that device (a FREE_COMPLETED
 * lowers it after its own callback). So at an ALLOC the counter is read,
 * and at the next event of the same device read again (one read serves
 * both when that event is an ALLOC too); when the
 * difference is not the 512-rounded size the ALLOC record said, a
 * GMT_FW_BLOCK_SIZE event goes first. Both reads are made with the
 * device's lock already held by this thread (recursive: no deadlock), and
 * the per-device state below is only touched under that lock.
 *
 * Nothing thrown here may reach the allocator: every entry catches all.
 */
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "fw_bridge.h"

namespace cca = c10::cuda::CUDACachingAllocator;

namespace {

constexpr int kMaxDevices = 64;

struct Pending {
    bool on;
    uint64_t addr, rounded; /* the ALLOC record's block size */
    int64_t active;         /* active_bytes before the block counted */
};

const gmt_fw_host *g_host;
Pending g_pending[kMaxDevices];

/* Index 0 of a StatArray is StatType::AGGREGATE (all pools). */
int64_t active_bytes(int dev)
{
    return cca::getDeviceStats(static_cast<c10::DeviceIndex>(dev))
        .active_bytes[0]
        .current;
}

uint64_t rounded(uint64_t size)
{
    return size < 512 ? 512 : (size + 511) & ~uint64_t(511);
}

void send(int action, int dev, uint64_t addr, uint64_t size)
{
    gmt_fw_event ev{};
    ev.action = action;
    ev.device = dev;
    ev.addr = addr;
    ev.size = size;
    g_host->event(&ev);
}

void on_trace(const cca::TraceEntry &te)
{
    try {
        int dev = te.device_;
        if (dev < 0 || dev >= kMaxDevices)
            return;
        Pending &p = g_pending[dev];
        int64_t active = -1; /* read once: it also serves this event's */
        if (p.on) {
            p.on = false;
            active = active_bytes(dev);
            int64_t size = active - p.active;
            if (size > 0 && uint64_t(size) != p.rounded)
                send(GMT_FW_BLOCK_SIZE, dev, p.addr, uint64_t(size));
        }
        gmt_fw_event ev{};
        switch (te.action_) {
        case cca::TraceEntry::ALLOC:
            ev.action = GMT_FW_ALLOC;
            break;
        case cca::TraceEntry::FREE_REQUESTED:
            ev.action = GMT_FW_FREE_REQUESTED;
            break;
        case cca::TraceEntry::FREE_COMPLETED:
            ev.action = GMT_FW_FREE_COMPLETED;
            break;
        case cca::TraceEntry::SEGMENT_ALLOC:
            ev.action = GMT_FW_SEGMENT_ALLOC;
            break;
        case cca::TraceEntry::SEGMENT_FREE:
            ev.action = GMT_FW_SEGMENT_FREE;
            break;
        case cca::TraceEntry::SEGMENT_MAP:
            ev.action = GMT_FW_SEGMENT_MAP;
            break;
        case cca::TraceEntry::SEGMENT_UNMAP:
            ev.action = GMT_FW_SEGMENT_UNMAP;
            break;
        case cca::TraceEntry::OOM: {
            ev.action = GMT_FW_OOM;
            auto st = cca::getDeviceStats(static_cast<c10::DeviceIndex>(dev));
            ev.allocated = uint64_t(st.allocated_bytes[0].current);
            ev.reserved = uint64_t(st.reserved_bytes[0].current);
            break;
        }
        default: /* SNAPSHOT, and actions of later versions */
            return;
        }
        ev.device = dev;
        ev.addr = uint64_t(te.addr_);
        ev.size = uint64_t(te.size_);
        ev.stream = uint64_t(reinterpret_cast<uintptr_t>(te.stream_));
        ev.pool = uint64_t(te.mempool_.first) << 32 |
                  (uint64_t(te.mempool_.second) & 0xffffffffu);
        g_host->event(&ev);
        if (ev.action == GMT_FW_ALLOC)
            p = Pending{true, ev.addr, rounded(ev.size),
                        active >= 0 ? active : active_bytes(dev)};
    } catch (...) {
        /* the allocator must not see our failure */
    }
}

void say(char *why, size_t n, const char *text)
{
    if (n == 0)
        return;
    /* one line: PyTorch's messages carry a C++ stack after the first */
    std::string s(text ? text : "");
    size_t nl = s.find('\n');
    if (nl != std::string::npos)
        s.resize(nl);
    snprintf(why, n, "%s", s.c_str());
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
gmt_fw_torch_attach(const gmt_fw_host *host, char *why, size_t whylen)
{
    if (host == nullptr || host->abi != GMT_FW_ABI) {
        say(why, whylen, "the bridge was built for another library version");
        return -1;
    }
    try {
        cca::CUDAAllocator *a = cca::get();
        if (a == nullptr || !a->initialized())
            return 1;
        std::string name = a->name();
        if (name != "native") {
            say(why, whylen,
                ("PyTorch's allocator backend is " + name +
                 ", which reports no block events").c_str());
            return -1;
        }
        g_host = host;
        cca::attachAllocatorTraceTracker(on_trace);
        return 0;
    } catch (const std::exception &e) {
        say(why, whylen, e.what());
    } catch (...) {
        say(why, whylen, "attaching failed");
    }
    return -1;
}
