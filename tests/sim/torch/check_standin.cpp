/* check_standin.cpp - the PyTorch stand-in's own test: does
 * build/tests/torch/lib/libc10_cuda.so behave as PyTorch's caching
 * allocator does, in what gpumemtrace's bridge relies on?
 *
 * It attaches a trace tracker through the stand-in's header, as the bridge
 * does, and checks each event's action, address, size, memory pool,
 * device, and the statistics as the tracker sees them (getDeviceStats from
 * inside the callback: the device's lock is recursive), through a scripted
 * sequence whose answers follow from PyTorch's rules: rounding, pools,
 * segment sizes, best fit, splitting, merging, a whole block handed out
 * unsplit, record_stream's deferred free, the out-of-memory path, private
 * pools, empty_cache, a second device, threads. It also checks that the
 * callback runs with the device's lock held (another thread's
 * getDeviceStats waits for it).
 *
 *   check_standin                 the checks above; prints "ok"
 *   check_standin --bridge SO     also loads a bridge built from
 *                                 preload/fw_torch.cpp, attaches it through
 *                                 its C ABI (fw_bridge.h) and checks what it
 *                                 reports: the same events, a block-size
 *                                 correction exactly for the unsplit block,
 *                                 and peaks replayed from its events equal
 *                                 to the allocator's own.
 *
 * Run with SIM_CUDA_DEVICES=2 for the second-device checks (skipped with
 * one device). Compiled like the bridge: -fvisibility=hidden, against the
 * header copy in build/tests/torch/include.
 */
#include <c10/cuda/CUDACachingAllocator.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "fw_bridge.h"
#include "sim_torch.h"

namespace cca = c10::cuda::CUDACachingAllocator;
using Action = cca::TraceEntry::Action;

namespace {

constexpr size_t MiB = size_t(1) << 20;
int g_failures;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "check_standin.cpp:%d: %s: ", __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            if (++g_failures > 20)                                           \
                exit(1);                                                     \
        }                                                                    \
    } while (0)

const char *action_name(int a)
{
    static const char *names[] = {"ALLOC", "FREE_REQUESTED", "FREE_COMPLETED",
                                  "SEGMENT_ALLOC", "SEGMENT_FREE", "SEGMENT_MAP",
                                  "SEGMENT_UNMAP", "SNAPSHOT", "OOM"};
    return a >= 0 && a < 9 ? names[a] : "?";
}

/* One event as our tracker saw it, with the statistics at that moment. */
struct Seen {
    Action action;
    int device;
    uintptr_t addr;
    size_t size;
    cudaStream_t stream;
    cca::MempoolId_t pool;
    int64_t allocated, reserved, active, requested;
};

std::mutex g_mu;
std::vector<Seen> g_seen;
bool g_probe_lock;               /* next ALLOC: is the device lock held? */
std::future<int64_t> g_probe;    /* another thread's getDeviceStats */
bool g_probe_blocked;
int g_early_calls;               /* a tracker attached before init */

void tracker(const cca::TraceEntry &te)
{
    /* recursive: the device's lock is held by this thread */
    cca::DeviceStats st = cca::getDeviceStats(te.device_);
    std::lock_guard<std::mutex> lk(g_mu);
    g_seen.push_back(Seen{te.action_, te.device_, te.addr_, te.size_, te.stream_,
                          te.mempool_, st.allocated_bytes[0].current,
                          st.reserved_bytes[0].current, st.active_bytes[0].current,
                          st.requested_bytes[0].current});
    if (g_probe_lock && te.action_ == Action::ALLOC) {
        g_probe_lock = false;
        c10::DeviceIndex dev = te.device_;
        g_probe = std::async(std::launch::async, [dev] {
            return cca::getDeviceStats(dev).allocated_bytes[0].current;
        });
        g_probe_blocked = g_probe.wait_for(std::chrono::milliseconds(100)) ==
                          std::future_status::timeout;
    }
}

size_t mark()
{
    std::lock_guard<std::mutex> lk(g_mu);
    return g_seen.size();
}

std::vector<Seen> since(size_t m)
{
    std::lock_guard<std::mutex> lk(g_mu);
    return std::vector<Seen>(g_seen.begin() + long(m), g_seen.end());
}

std::string describe(const std::vector<Seen> &v)
{
    std::string s;
    char buf[160];
    for (const Seen &e : v) {
        snprintf(buf, sizeof buf, " %s(dev %d addr 0x%lx size %zu pool %llu/%llu)",
                 action_name(e.action), e.device, (unsigned long)e.addr, e.size,
                 e.pool.first, e.pool.second);
        s += buf;
    }
    return s.empty() ? " (none)" : s;
}

/* The actions of v are exactly `want`. */
bool actions_are(const std::vector<Seen> &v, std::vector<Action> want)
{
    if (v.size() != want.size())
        return false;
    for (size_t i = 0; i < v.size(); i++)
        if (v[i].action != want[i])
            return false;
    return true;
}

int64_t stat(int dev, const char *name)
{
    return sim_torch_stat(dev, name);
}

uintptr_t u(void *p)
{
    return reinterpret_cast<uintptr_t>(p);
}

/* ---- the bridge, driven through its C ABI ------------------------------- */

std::mutex g_fw_mu;
std::vector<gmt_fw_event> g_fw;

void fw_host_event(const gmt_fw_event *ev)
{
    std::lock_guard<std::mutex> lk(g_fw_mu);
    g_fw.push_back(*ev);
}

const gmt_fw_host g_fw_host = {GMT_FW_ABI, fw_host_event};

uint64_t rounded(uint64_t n)
{
    return n < 512 ? 512 : (n + 511) & ~uint64_t(511);
}

/* Replays the bridge's events as gpumemtrace will: block sizes from
 * ALLOC (rounded) corrected by BLOCK_SIZE, segments from SEGMENT_*.
 * Returns false (and says why) on an inconsistent stream. */
struct Replay {
    std::map<uint64_t, uint64_t> live, segments;
    int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
    uint64_t last_alloc = 0;
    bool last_was_alloc = false;
    int block_sizes = 0;
};

bool replay(int dev, Replay &r)
{
    std::lock_guard<std::mutex> lk(g_fw_mu);
    for (const gmt_fw_event &e : g_fw) {
        if (e.device != dev)
            continue;
        bool after_alloc = r.last_was_alloc;
        r.last_was_alloc = false;
        switch (e.action) {
        case GMT_FW_ALLOC:
            if (r.live.count(e.addr)) {
                fprintf(stderr, "bridge: ALLOC of a live block 0x%lx\n", (unsigned long)e.addr);
                return false;
            }
            r.live[e.addr] = rounded(e.size);
            r.allocated += int64_t(rounded(e.size));
            r.last_alloc = e.addr;
            r.last_was_alloc = true;
            break;
        case GMT_FW_BLOCK_SIZE:
            if (!after_alloc || e.addr != r.last_alloc || !r.live.count(e.addr)) {
                fprintf(stderr, "bridge: BLOCK_SIZE 0x%lx not right after its ALLOC\n",
                        (unsigned long)e.addr);
                return false;
            }
            r.allocated += int64_t(e.size) - int64_t(r.live[e.addr]);
            r.live[e.addr] = e.size;
            r.block_sizes++;
            break;
        case GMT_FW_FREE_REQUESTED: {
            auto it = r.live.find(e.addr);
            if (it == r.live.end()) {
                fprintf(stderr, "bridge: FREE of an unknown block 0x%lx\n", (unsigned long)e.addr);
                return false;
            }
            r.allocated -= int64_t(it->second);
            r.live.erase(it);
            break;
        }
        case GMT_FW_SEGMENT_ALLOC:
            r.segments[e.addr] = e.size;
            r.reserved += int64_t(e.size);
            break;
        case GMT_FW_SEGMENT_FREE:
            if (!r.segments.count(e.addr) || r.segments[e.addr] != e.size) {
                fprintf(stderr, "bridge: SEGMENT_FREE of an unknown segment\n");
                return false;
            }
            r.reserved -= int64_t(e.size);
            r.segments.erase(e.addr);
            break;
        default:
            break;
        }
        r.peak_allocated = std::max(r.peak_allocated, r.allocated);
        r.peak_reserved = std::max(r.peak_reserved, r.reserved);
    }
    return true;
}

/* ---- the scripted sequence --------------------------------------------- */

void check_sequence(bool bridge)
{
    const int dev = 0;
    size_t m;
    std::vector<Seen> v;

    /* B: 4 bytes: a 2 MiB small segment, a 512-byte block at its start */
    m = mark();
    g_probe_lock = true;
    void *p1 = sim_torch_malloc(4, nullptr);
    v = since(m);
    CHECK(p1 != nullptr, "4-byte malloc failed");
    CHECK(actions_are(v, {Action::SEGMENT_ALLOC, Action::ALLOC}), "4 bytes:%s", describe(v).c_str());
    if (v.size() == 2) {
        CHECK(v[0].addr == u(p1) && v[0].size == 2 * MiB, "segment:%s", describe(v).c_str());
        CHECK(v[0].reserved == int64_t(2 * MiB) && v[0].allocated == 0,
              "SEGMENT_ALLOC after reserved grows: reserved %ld", long(v[0].reserved));
        CHECK(v[1].addr == u(p1) && v[1].size == 4, "ALLOC carries the request:%s", describe(v).c_str());
        CHECK(v[1].allocated == 0 && v[1].active == 0 && v[1].requested == 0 &&
                  v[1].reserved == int64_t(2 * MiB),
              "ALLOC before allocated/active/requested grow: %ld %ld %ld", long(v[1].allocated),
              long(v[1].active), long(v[1].requested));
        CHECK(v[1].device == 0 && v[1].stream == nullptr && v[1].pool == cca::MempoolId_t(0, 0),
              "device/stream/pool");
    }
    CHECK(g_probe.valid() && g_probe_blocked,
          "another thread's getDeviceStats did not wait for the callback: the lock is not held");
    if (g_probe.valid())
        CHECK(g_probe.get() == 512, "the waiting getDeviceStats saw the block counted");
    CHECK(sim_torch_block_size(p1) == 512, "block of 4 bytes: %zu", sim_torch_block_size(p1));
    CHECK(stat(dev, "allocated_bytes.current") == 512 && stat(dev, "requested_bytes.current") == 4,
          "after the ALLOC");

    /* C: 3 MiB: a 20 MiB large segment, split (17 MiB left > 1 MiB) */
    m = mark();
    void *p2 = sim_torch_malloc(3 * MiB, nullptr);
    v = since(m);
    CHECK(p2 != nullptr && actions_are(v, {Action::SEGMENT_ALLOC, Action::ALLOC}),
          "3 MiB:%s", describe(v).c_str());
    if (v.size() == 2) {
        CHECK(v[0].size == 20 * MiB && v[0].addr == u(p2) && v[0].reserved == int64_t(22 * MiB),
              "20 MiB segment:%s", describe(v).c_str());
        CHECK(v[1].size == 3 * MiB && v[1].allocated == 512, "3 MiB ALLOC");
    }
    CHECK(sim_torch_block_size(p2) == 3 * MiB, "3 MiB block: %zu", sim_torch_block_size(p2));
    CHECK(stat(dev, "inactive_split.current") == 2 &&
              stat(dev, "inactive_split_bytes.current") == int64_t(2 * MiB - 512 + 17 * MiB),
          "inactive split after two splits: %lld %lld", sim_torch_stat(dev, "inactive_split.current"),
          sim_torch_stat(dev, "inactive_split_bytes.current"));

    /* D: free it: FREE_REQUESTED after allocated drops, FREE_COMPLETED
     * before active drops; the block merges back into a whole segment */
    m = mark();
    sim_torch_free(p2);
    v = since(m);
    CHECK(actions_are(v, {Action::FREE_REQUESTED, Action::FREE_COMPLETED}), "free:%s", describe(v).c_str());
    if (v.size() == 2) {
        CHECK(v[0].addr == u(p2) && v[0].size == 3 * MiB && v[1].addr == u(p2) && v[1].size == 3 * MiB,
              "free events carry the request:%s", describe(v).c_str());
        CHECK(v[0].allocated == 512 && v[0].active == int64_t(512 + 3 * MiB),
              "FREE_REQUESTED after allocated drops, active still counts: %ld %ld",
              long(v[0].allocated), long(v[0].active));
        CHECK(v[1].active == int64_t(512 + 3 * MiB) && v[1].requested == int64_t(4 + 3 * MiB),
              "FREE_COMPLETED before active/requested drop: %ld %ld", long(v[1].active),
              long(v[1].requested));
    }
    CHECK(stat(dev, "active_bytes.current") == 512 && stat(dev, "inactive_split.current") == 1,
          "merged back");

    /* E: 19.5 MiB - 100: the cached 20 MiB segment, whole (0.5 MiB left is
     * not worth a split in the large pool): block 20 MiB, not 19.5 */
    const size_t whole_req = 20 * MiB - MiB / 2 - 100;
    m = mark();
    void *p3 = sim_torch_malloc(whole_req, nullptr);
    v = since(m);
    CHECK(p3 == p2 && actions_are(v, {Action::ALLOC}), "whole block:%s", describe(v).c_str());
    CHECK(sim_torch_block_size(p3) == 20 * MiB, "whole block size %zu", sim_torch_block_size(p3));
    CHECK(stat(dev, "allocated_bytes.current") == int64_t(512 + 20 * MiB), "allocated counts the block");
    CHECK(stat(dev, "requested_bytes.current") == int64_t(4 + whole_req), "requested counts the request");

    /* F: 12 MiB + 1: >= 10 MiB, a segment of the request rounded to 2 MiB
     * (14 MiB), split (2 MiB - 512 left > 1 MiB) */
    m = mark();
    void *p4 = sim_torch_malloc(12 * MiB + 1, nullptr);
    v = since(m);
    CHECK(p4 && actions_are(v, {Action::SEGMENT_ALLOC, Action::ALLOC}) && v[0].size == 14 * MiB,
          "12 MiB + 1:%s", describe(v).c_str());
    CHECK(sim_torch_block_size(p4) == 12 * MiB + 512, "12 MiB + 1 block %zu", sim_torch_block_size(p4));

    /* G: 1 MiB is still small: best fit in the small segment, after p1 */
    m = mark();
    void *p5 = sim_torch_malloc(MiB, nullptr);
    v = since(m);
    CHECK(p5 && u(p5) == u(p1) + 512 && actions_are(v, {Action::ALLOC}), "1 MiB small:%s",
          describe(v).c_str());

    /* H: record_stream: the free completes when the other stream passes */
    void *s2 = sim_torch_stream_create();
    CHECK(s2 != nullptr, "stream");
    void *q = sim_torch_malloc(1000, nullptr);
    CHECK(q && u(q) == u(p5) + MiB && sim_torch_block_size(q) == 1024, "q");
    CHECK(sim_torch_record_stream(q, s2) == 0, "record_stream");
    CHECK(sim_torch_stream_sleep(s2, 300000) == 0, "sleep");
    m = mark();
    sim_torch_free(q);
    v = since(m);
    CHECK(actions_are(v, {Action::FREE_REQUESTED}), "free of a block in use on a stream:%s",
          describe(v).c_str());
    m = mark();
    void *r = sim_torch_malloc(600, nullptr);
    v = since(m);
    CHECK(r && r != q && actions_are(v, {Action::ALLOC}), "while the stream runs:%s", describe(v).c_str());
    sim_torch_synchronize();
    m = mark();
    void *t = sim_torch_malloc(600, nullptr);
    v = since(m);
    CHECK(t == q && actions_are(v, {Action::FREE_COMPLETED, Action::ALLOC}) && v[0].addr == u(q) &&
              v[0].size == 1000,
          "after the stream passed:%s", describe(v).c_str());

    /* I: out of memory: the cached unsplit segment goes first (p4's, once
     * freed), cudaMalloc is retried, then OOM (free bytes, rounded size) */
    sim_torch_free(p4);
    size_t dfree = 0, dtotal = 0;
    cudaMemGetInfo(&dfree, &dtotal);
    const size_t huge = dtotal + 2 * MiB + 3;
    m = mark();
    void *big = sim_torch_malloc(huge, nullptr);
    v = since(m);
    CHECK(big == nullptr, "a request over the device's memory succeeded");
    CHECK(actions_are(v, {Action::SEGMENT_FREE, Action::OOM}), "OOM:%s", describe(v).c_str());
    if (v.size() == 2) {
        CHECK(v[0].addr == u(p4) && v[0].size == 14 * MiB && v[0].reserved == int64_t(36 * MiB),
              "SEGMENT_FREE before reserved drops: %ld", long(v[0].reserved));
        CHECK(v[1].size == rounded(huge) && v[1].addr == dtotal - 22 * MiB,
              "OOM event: size %zu (want %zu) free %lu (want %zu)", v[1].size, size_t(rounded(huge)),
              (unsigned long)v[1].addr, dtotal - 22 * MiB);
    }
    CHECK(stat(dev, "num_ooms") == 1 && stat(dev, "num_alloc_retries") == 1, "OOM counters");

    /* J: a private pool keeps its segments until released */
    m = mark();
    void *pp = sim_torch_malloc_pool(1000, nullptr, 0, 7);
    sim_torch_free(pp);
    sim_torch_empty_cache();
    v = since(m);
    CHECK(pp && actions_are(v, {Action::SEGMENT_ALLOC, Action::ALLOC, Action::FREE_REQUESTED,
                                Action::FREE_COMPLETED}),
          "private pool:%s", describe(v).c_str());
    for (const Seen &e : v)
        CHECK(e.pool == cca::MempoolId_t(0, 7), "private pool id:%s", describe(v).c_str());
    m = mark();
    sim_torch_release_pool(0, 7);
    sim_torch_empty_cache();
    v = since(m);
    CHECK(actions_are(v, {Action::SEGMENT_FREE}) && v[0].pool == cca::MempoolId_t(0, 7) &&
              v[0].size == 2 * MiB,
          "released pool:%s", describe(v).c_str());

    /* K: everything back */
    for (void *p : {p1, p3, p5, r, t})
        sim_torch_free(p);
    m = mark();
    sim_torch_empty_cache();
    v = since(m);
    CHECK(actions_are(v, {Action::SEGMENT_FREE, Action::SEGMENT_FREE}), "empty_cache:%s",
          describe(v).c_str());
    long long s[4];
    sim_torch_stats(dev, s);
    CHECK(s[0] == 0 && s[2] == 0, "all freed: allocated %lld reserved %lld", s[0], s[2]);
    CHECK(s[1] == int64_t(512 + 20 * MiB + 12 * MiB + 512 + MiB + 1024 + 1024),
          "peak allocated %lld", s[1]);
    CHECK(s[3] == int64_t(36 * MiB), "peak reserved %lld", s[3]);
    CHECK(stat(dev, "active_bytes.current") == 0 && stat(dev, "requested_bytes.current") == 0 &&
              stat(dev, "inactive_split.current") == 0 &&
              stat(dev, "inactive_split_bytes.current") == 0,
          "nothing active");

    (void)bridge;
}

void check_second_device()
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("skip: second device (%d device)\n", n);
        return;
    }
    long long before[4], after[4];
    sim_torch_stats(0, before);
    sim_torch_set_device(1);
    size_t m = mark();
    void *x = sim_torch_malloc(5000, nullptr);
    std::vector<Seen> v = since(m);
    CHECK(x && actions_are(v, {Action::SEGMENT_ALLOC, Action::ALLOC}) && v[0].device == 1 &&
              v[1].device == 1,
          "device 1:%s", describe(v).c_str());
    CHECK(stat(1, "allocated_bytes.current") == 5120, "device 1 stats");
    sim_torch_stats(0, after);
    CHECK(memcmp(before, after, sizeof before) == 0, "device 0 stats moved");
    sim_torch_free(x);
    sim_torch_empty_cache();
    CHECK(stat(1, "reserved_bytes.current") == 0, "device 1 reserved");
    sim_torch_set_device(0);
}

/* Threads allocating and freeing at once; events of a device come one at
 * a time (its lock), so their sequence must be consistent. */
void check_threads()
{
    size_t m = mark();
    std::vector<std::thread> th;
    for (int i = 0; i < 4; i++) {
        th.emplace_back([i] {
            uint64_t x = 0x9e3779b97f4a7c15ull * uint64_t(i + 1);
            std::vector<void *> live;
            for (int k = 0; k < 400; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                if (live.size() < 8 && (x & 3) != 0) {
                    size_t n = (x >> 8) % 4 == 0 ? (x >> 16) % (16 * MiB) + 1 : (x >> 16) % (600 * 1024) + 1;
                    void *p = sim_torch_malloc(n, nullptr);
                    if (p)
                        live.push_back(p);
                } else if (!live.empty()) {
                    size_t j = (x >> 20) % live.size();
                    sim_torch_free(live[j]);
                    live.erase(live.begin() + long(j));
                }
            }
            for (void *p : live)
                sim_torch_free(p);
        });
    }
    for (auto &t : th)
        t.join();
    sim_torch_empty_cache();
    std::vector<Seen> v = since(m);
    std::set<uintptr_t> live, freeing;
    int allocs = 0;
    for (const Seen &e : v) {
        if (e.action == Action::ALLOC) {
            allocs++;
            CHECK(!live.count(e.addr) && !freeing.count(e.addr), "ALLOC of a live block");
            live.insert(e.addr);
        } else if (e.action == Action::FREE_REQUESTED) {
            CHECK(live.erase(e.addr) == 1, "FREE_REQUESTED of a block not live");
            freeing.insert(e.addr);
        } else if (e.action == Action::FREE_COMPLETED) {
            CHECK(freeing.erase(e.addr) == 1, "FREE_COMPLETED without FREE_REQUESTED");
        }
    }
    CHECK(allocs > 100 && live.empty() && freeing.empty(), "threads: %d allocs, %zu live, %zu freeing",
          allocs, live.size(), freeing.size());
    CHECK(stat(0, "allocated_bytes.current") == 0 && stat(0, "reserved_bytes.current") == 0,
          "threads: all back");
}

/* The counters against the events our tracker saw since init. */
void check_counts()
{
    long long c[6];
    sim_torch_counts(0, c);
    long long want[6] = {};
    for (const Seen &e : since(0)) {
        if (e.device != 0)
            continue;
        switch (e.action) {
        case Action::ALLOC: want[0]++; break;
        case Action::FREE_REQUESTED: want[1]++; break;
        case Action::FREE_COMPLETED: want[2]++; break;
        case Action::SEGMENT_ALLOC: want[3]++; break;
        case Action::SEGMENT_FREE: want[4]++; break;
        case Action::OOM: want[5]++; break;
        default: break;
        }
    }
    for (int i = 0; i < 6; i++)
        CHECK(c[i] == want[i], "count %d: allocator %lld, events %lld", i, c[i], want[i]);
}

void check_bridge_events()
{
    std::lock_guard<std::mutex> lk(g_fw_mu);
    std::vector<std::pair<int, uint64_t>> ours, theirs;
    /* the same events, in the same order, but for the bridge's own
     * BLOCK_SIZE */
    {
        std::lock_guard<std::mutex> lk2(g_mu);
        for (const Seen &e : g_seen)
            if (e.action != Action::SNAPSHOT)
                ours.emplace_back(e.action == Action::OOM ? int(GMT_FW_OOM) : int(e.action),
                                  e.addr);
    }
    for (const gmt_fw_event &e : g_fw)
        if (e.action != GMT_FW_BLOCK_SIZE)
            theirs.emplace_back(e.action, e.addr);
    CHECK(ours == theirs, "the bridge saw %zu events, our tracker %zu", theirs.size(), ours.size());
    int whole = 0, ooms = 0;
    for (size_t i = 0; i < g_fw.size(); i++) {
        const gmt_fw_event &e = g_fw[i];
        if (e.action == GMT_FW_BLOCK_SIZE && e.size == 20 * MiB && i > 0 &&
            g_fw[i - 1].action == GMT_FW_ALLOC && g_fw[i - 1].size == 20 * MiB - MiB / 2 - 100 &&
            g_fw[i - 1].addr == e.addr)
            whole++;
        if (e.action == GMT_FW_OOM && ooms++ == 0) /* check_sequence's */
            CHECK(e.reserved == 22 * MiB && e.allocated == 512 + 20 * MiB + MiB + 1024 + 1024,
                  "bridge OOM: reserved %lu allocated %lu", (unsigned long)e.reserved,
                  (unsigned long)e.allocated);
    }
    CHECK(whole == 1, "the unsplit 20 MiB block's size: %d corrections", whole);
}

} // namespace

int main(int argc, char **argv)
{
    const char *bridge = argc == 3 && strcmp(argv[1], "--bridge") == 0 ? argv[2] : nullptr;
    if (argc != 1 && bridge == nullptr) {
        fprintf(stderr, "usage: check_standin [--bridge BRIDGE.so]\n");
        return 2;
    }
    gmt_fw_attach_fn attach = nullptr;
    if (bridge) {
        void *h = dlopen(bridge, RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            fprintf(stderr, "cannot load %s: %s\n", bridge, dlerror());
            return 1;
        }
        void *sym = dlsym(h, GMT_FW_ATTACH_SYM);
        memcpy(&attach, &sym, sizeof attach);
        CHECK(attach != nullptr, "%s has no %s", bridge, GMT_FW_ATTACH_SYM);
        if (attach == nullptr)
            return 1;
    }

    /* A: before PyTorch's lazy init */
    CHECK(cca::get() != nullptr, "allocator is NULL");
    CHECK(!cca::get()->initialized(), "initialized before init");
    CHECK(cca::get()->name() == "native" && strcmp(sim_torch_backend(), "native") == 0,
          "backend %s", cca::get()->name().c_str());
    cca::attachAllocatorTraceTracker([](const cca::TraceEntry &) { g_early_calls++; });
    CHECK(sim_torch_malloc(100, nullptr) == nullptr, "malloc before init");
    char why[256] = "";
    if (attach)
        CHECK(attach(&g_fw_host, why, sizeof why) == 1, "bridge before init: not 1 (%s)", why);
    CHECK(sim_torch_init(0) == 0 && cca::get()->initialized(), "init");
    cca::attachAllocatorTraceTracker(tracker);
    if (attach) {
        int rc = attach(&g_fw_host, why, sizeof why);
        CHECK(rc == 0, "bridge attach: %d (%s)", rc, why);
    }

    check_sequence(bridge != nullptr);
    check_second_device();
    check_threads();
    check_counts();
    CHECK(g_early_calls == 0, "a tracker attached before init was called %d times", g_early_calls);

    if (attach) {
        check_bridge_events();
        for (int dev = 0; dev < 2; dev++) {
            Replay r;
            if (dev == 1 && stat(1, "allocation.allocated") < 0)
                break;
            CHECK(replay(dev, r), "bridge events of device %d do not replay", dev);
            CHECK(r.peak_allocated == stat(dev, "allocated_bytes.peak"),
                  "device %d: peak allocated from the bridge's events %ld, allocator %lld", dev,
                  long(r.peak_allocated), sim_torch_stat(dev, "allocated_bytes.peak"));
            CHECK(r.peak_reserved == stat(dev, "reserved_bytes.peak"),
                  "device %d: peak reserved from the bridge's events %ld, allocator %lld", dev,
                  long(r.peak_reserved), sim_torch_stat(dev, "reserved_bytes.peak"));
            CHECK(r.allocated == 0 && r.reserved == 0 && r.live.empty(),
                  "device %d: left %ld allocated %ld reserved", dev, long(r.allocated),
                  long(r.reserved));
            if (dev == 0)
                CHECK(r.block_sizes >= 1, "no block size corrections");
        }
    }
    if (g_failures) {
        fprintf(stderr, "%d checks failed\n", g_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
