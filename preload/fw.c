/* fw.c - the framework bridge, library side: PyTorch's caching allocator's
 * own block events, recorded with its cache left on.
 *
 * PyTorch serves tensors from segments it caches, so the CUDA calls our
 * hooks see are its segments, not its tensors. Its allocator reports every
 * block it hands out and takes back to trace trackers
 * (attachAllocatorTraceTracker), a C++ hook; a small C++ bridge
 * (fw_torch.cpp, built against the program's own PyTorch by fw_build.c)
 * attaches one and calls fw_event below for each event, which records it
 * with the calling thread's stacks like any hooked call.
 *
 * When. Nothing is done until an allocation hook is called from a module
 * whose file is libc10_cuda.so: PyTorch's allocator taking its first
 * segment. By then the allocator is initialized (the tracker must be
 * attached after that, or PyTorch drops it), and the tracker, attached
 * inside that call, sees the segment and the block it was taken for.
 * Callers are classified by their return address: the framework's span
 * once it is found, and a small cache of spans known to be something else,
 * so the hooks pay a few compares, and a dladdr only for a caller never
 * seen before.
 *
 * What changes. Once attached, the allocator's own cudaMalloc/cudaFree
 * (and cuMemCreate of expandable segments) go straight to CUDA, as
 * without us - a second cache under PyTorch's would hold memory PyTorch
 * believes it gave back - and their records carry GMT_ALLOC_FW_BACKING, so
 * reports count that memory once, as PyTorch's segments. Everything else
 * is as untraced: PyTorch's cache, its out-of-memory handling, CUDA graph
 * pools. A PyTorch whose cache is off (PYTORCH_NO_CUDA_MEMORY_CACHING)
 * or whose bridge cannot be built or attached is recorded as before, at
 * the CUDA calls, with one line on stderr and a note in the trace.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fw_bridge.h"
#include "internal.h"

enum { FW_SEARCH, FW_ATTACHED, FW_OFF };

static int g_state = FW_SEARCH;
static uintptr_t g_lo, g_hi;        /* libc10_cuda.so, once found */
static char g_path[4096];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* classify */
static pthread_mutex_t g_attach_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_feature_set;          /* in this process's trace header */

/* Spans of modules that called an allocation hook and are not the
 * framework: written under g_lock, read without it (published count). */
#define NOT_FW_MAX 32
static struct span { uintptr_t lo, hi; } g_not[NOT_FW_MAX];
static unsigned g_nnot;

/* ---- notes ---------------------------------------------------------------- */

static void note(unsigned level, const char *text)
{
    struct gmt_thread *t = gmt_thread_get();
    if (t != NULL)
        gmt_trace_note(t, level, text);
}

/* Give up for this process: one line on stderr, the same in the trace. */
static void give_up(const char *why)
{
    char text[560];
    snprintf(text, sizeof text, "PyTorch's caching allocator: no block "
             "events (%s); the trace shows its segments, not its tensors "
             "(gpumemtrace --no-framework-cache traces every tensor)", why);
    gmt_warn("%s", text);
    note(1, text);
    __atomic_store_n(&g_state, FW_OFF, __ATOMIC_RELEASE);
}

/* ---- events from the bridge ----------------------------------------------- */

static void fw_ext(struct gmt_thread *t, unsigned action,
                   const struct gmt_fw_event *ev, uint32_t stack)
{
    uint8_t buf[8 * GMT_VARINT_MAX];
    uint8_t *p = gmt_put_varint(buf, action);
    p = gmt_put_varint(p, (uint64_t)ev->device);
    p = gmt_put_varint(p, ev->addr);
    p = gmt_put_varint(p, ev->size);
    p = gmt_put_varint(p, ev->stream);
    p = gmt_put_varint(p, ev->pool);
    p = gmt_put_varint(p, stack);
    gmt_trace_emit_ext(t, GMT_X_FW, buf, (size_t)(p - buf));
}

/* Called by the bridge from inside PyTorch's allocator, its device lock
 * held: record, never call back into it. Allocations, segments and
 * out-of-memory capture the thread's stacks; frees do not (what a block
 * is, is where it was allocated - PyTorch's own snapshots make the same
 * choice by default - and a stack is most of an event's cost: on a
 * launch-bound model, half the tracing time). */
static void fw_event(const struct gmt_fw_event *ev)
{
    bool stack = ev->action == GMT_FW_ALLOC ||
                 ev->action == GMT_FW_SEGMENT_ALLOC ||
                 ev->action == GMT_FW_SEGMENT_MAP || ev->action == GMT_FW_OOM;
    struct gmt_call c;
    if (!gmt_call_begin_flags(&c, stack ? 0 : GMT_CALL_NO_STACK))
        return;
    if (GMT_UNLIKELY(!g_feature_set)) { /* this process's trace (a fork's) */
        g_feature_set = true;
        gmt_trace_add_feature(GMT_FEAT_FW_BLOCKS);
    }
    int dev = ev->device >= 0 && ev->device < GMT_MAX_DEVICES ? ev->device : 0;
    c.t->call_device = dev;
    struct gmt_event e = {.device = dev, .addr = ev->addr, .size = ev->size,
                          .stream = ev->stream, .has_stream = true};
    switch (ev->action) {
    case GMT_FW_ALLOC:
        e.kind = GMT_K_ALLOC;
        e.api = GMT_API_FW_ALLOC;
        e.size2 = (ev->size < 512 ? 512 : (ev->size + 511) & ~511ull) - ev->size;
        e.flags = ev->pool;
        gmt_call_emit(&c, &e);
        if (!gmt_capture_active()) /* no driver query inside a capture */
            gmt_mem_maybe_sample(c.t, dev);
        break;
    case GMT_FW_FREE_REQUESTED:
        e.kind = GMT_K_FREE;
        e.api = GMT_API_FW_FREE;
        e.size = 0;
        gmt_call_emit(&c, &e);
        break;
    case GMT_FW_FREE_COMPLETED:
        e.kind = GMT_K_FREE_COMPLETED;
        gmt_call_emit(&c, &e);
        break;
    case GMT_FW_SEGMENT_ALLOC:
    case GMT_FW_SEGMENT_FREE:
    case GMT_FW_SEGMENT_MAP:
    case GMT_FW_SEGMENT_UNMAP: {
        static const unsigned fwx[] = {
            [GMT_FW_SEGMENT_ALLOC] = GMT_FWX_SEGMENT_ALLOC,
            [GMT_FW_SEGMENT_FREE] = GMT_FWX_SEGMENT_FREE,
            [GMT_FW_SEGMENT_MAP] = GMT_FWX_SEGMENT_MAP,
            [GMT_FW_SEGMENT_UNMAP] = GMT_FWX_SEGMENT_UNMAP};
        gmt_device_seen(c.t, dev);
        fw_ext(c.t, fwx[ev->action], ev, c.stack);
        break;
    }
    case GMT_FW_BLOCK_SIZE:
        fw_ext(c.t, GMT_FWX_BLOCK_SIZE, ev, 0);
        break;
    case GMT_FW_OOM: {
        size_t free_b = ev->addr, total_b = 0, f;
        if (gmt_drv_mem_info(&f, &total_b) == false)
            total_b = 0;
        uint64_t v[5] = {free_b, total_b, ev->reserved, ev->allocated, 0};
        gmt_ev_oom(&c, dev, ev->size, v);
        e.kind = GMT_K_ALLOC;
        e.api = GMT_API_FW_ALLOC;
        e.result = 2; /* cudaErrorMemoryAllocation: PyTorch raises */
        e.addr = 0;
        e.flags = ev->pool;
        gmt_call_emit(&c, &e);
        break;
    }
    default:
        break;
    }
    gmt_call_finish(&c);
}

static const struct gmt_fw_host g_host = {GMT_FW_ABI, fw_event};

/* ---- finding and attaching ------------------------------------------------ */

struct find {
    uintptr_t ip, lo, hi;
    const char *name;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct find *f = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || f->ip < a || f->ip >= a + ph->p_memsz)
            continue;
        f->lo = UINTPTR_MAX;
        f->hi = 0;
        for (int j = 0; j < info->dlpi_phnum; j++) { /* the whole object */
            const ElfW(Phdr) *q = &info->dlpi_phdr[j];
            uintptr_t b = info->dlpi_addr + q->p_vaddr;
            if (q->p_type != PT_LOAD)
                continue;
            if (b < f->lo)
                f->lo = b;
            if (b + q->p_memsz > f->hi)
                f->hi = b + q->p_memsz;
        }
        f->name = info->dlpi_name;
        return 1;
    }
    return 0;
}

static bool is_framework(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libc10_cuda.so", 14) == 0;
}

/* Under g_attach_lock: ask the bridge to attach. True when this call is
 * the framework's (attached now). */
static bool attach(void)
{
    static gmt_fw_attach_fn fn;
    if (!gmt_opt.framework) {
        __atomic_store_n(&g_state, FW_OFF, __ATOMIC_RELEASE);
        return false;
    }
    const char *nocache = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    if (nocache != NULL) {
        /* Every tensor is a cudaMalloc of its own, which the hooks see;
         * PyTorch's uncached path reports nothing to trackers, and
         * flagging its calls as segments would hide every tensor. Any
         * value, to be safe: versions differ on which values mean off. */
        char text[160];
        snprintf(text, sizeof text, "PYTORCH_NO_CUDA_MEMORY_CACHING=%.40s: "
                 "PyTorch's tensors are recorded at their cudaMalloc", nocache);
        note(0, text);
        __atomic_store_n(&g_state, FW_OFF, __ATOMIC_RELEASE);
        return false;
    }
    char why[512] = "";
    if (fn == NULL) {
        fn = gmt_fw_build(g_path, why, sizeof why);
        if (fn == NULL)
            give_up(why);
        else if (why[0])
            note(0, why); /* a damaged cached bridge, built again */
        /* a stopping signal that came during the build: the program's */
        gmt_fw_build_reraise();
        if (fn == NULL)
            return false;
    }
    int rc = fn(&g_host, why, sizeof why);
    if (rc > 0)
        return false; /* not initialized yet: the next call asks again */
    if (rc < 0) {
        give_up(why[0] ? why : "the bridge could not attach");
        return false;
    }
    gmt_trace_add_feature(GMT_FEAT_FW_BLOCKS);
    g_feature_set = true;
    char text[4200];
    snprintf(text, sizeof text, "PyTorch's caching allocator: block events "
             "recorded (%s)", g_path);
    note(0, text);
    __atomic_store_n(&g_state, FW_ATTACHED, __ATOMIC_RELEASE);
    return true;
}

/* A caller never seen: find its module, under g_lock (held only for
 * that, never across an attach): the framework, or one more span known
 * not to be. True if ip is the framework's. */
static bool classify(uintptr_t ip)
{
    pthread_mutex_lock(&g_lock);
    bool fw = g_hi != 0 && ip >= g_lo && ip < g_hi;
    if (!fw) {
        struct find f = {.ip = ip};
        if (dl_iterate_phdr(find_cb, &f) == 1 && f.name != NULL &&
            is_framework(f.name) && g_hi == 0) {
            snprintf(g_path, sizeof g_path, "%s", f.name);
            __atomic_store_n(&g_lo, f.lo, __ATOMIC_RELAXED);
            __atomic_store_n(&g_hi, f.hi, __ATOMIC_RELEASE);
            fw = true;
        } else if (f.hi != 0 && g_nnot < NOT_FW_MAX) {
            g_not[g_nnot] = (struct span){f.lo, f.hi};
            __atomic_store_n(&g_nnot, g_nnot + 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return fw;
}

/* The framework called: attach, unless another thread is attaching. That
 * one must never be waited for: it holds its device's allocator lock and
 * takes every other device's, and this thread may hold one of them
 * (PyTorch calls cudaMalloc with it held). So this call is taken for the
 * framework's segment - its first block and segment are then missed if
 * its device's tracker comes too late, as docs/usage.md says. */
static bool framework_call(bool async)
{
    if (pthread_mutex_trylock(&g_attach_lock) != 0)
        return !async;
    int st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
    bool fw = false;
    if (async && st == FW_SEARCH)
        /* PyTorch's cudaMallocAsync backend: nothing to attach to, and
         * no reason to build the bridge to learn that */
        give_up("PyTorch's allocator backend is cudaMallocAsync, which "
                "reports no block events; its allocations are recorded as "
                "they are");
    else if (!async)
        fw = st == FW_SEARCH ? attach() : st == FW_ATTACHED;
    pthread_mutex_unlock(&g_attach_lock);
    return fw;
}

bool gmt_fw_segment_call(const void *caller, bool async)
{
    uintptr_t ip = (uintptr_t)caller;
    int st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
    if (GMT_LIKELY(st == FW_ATTACHED))
        return !async && ip >= g_lo && ip < g_hi;
    if (st == FW_OFF || !gmt_tracer_active())
        return false;
    uintptr_t hi = __atomic_load_n(&g_hi, __ATOMIC_ACQUIRE);
    if (hi == 0 || ip < g_lo || ip >= hi) {
        unsigned n = __atomic_load_n(&g_nnot, __ATOMIC_ACQUIRE);
        for (unsigned i = 0; i < n; i++)
            if (ip >= g_not[i].lo && ip < g_not[i].hi)
                return false;
    }
    /* the slow path: the program must not see its errno (dladdr, the
     * bridge's build: files and directories probed) */
    int saved = errno;
    bool fw = classify(ip) && framework_call(async);
    errno = saved;
    return fw;
}

void gmt_fw_reset_after_fork(void)
{
    /* PyTorch's allocator (and the tracker attached to it) came along;
     * the child records into its own trace through it. */
    pthread_mutex_init(&g_lock, NULL);
    pthread_mutex_init(&g_attach_lock, NULL);
    g_feature_set = false;
}
