/* internal.h - the map of libgpumemtrace.so.
 *
 * Prototypes are grouped under the file that defines them, so this header
 * reads as a table of contents of preload/. Names: `gpumemtrace_` is the
 * public API (gpumemtrace.h), `gmt_` is shared between files of the
 * library, everything else is static to its file. Only hooks.c, driver.c,
 * driver_calls.c and api.c define exported symbols; the build hides
 * everything else.
 */
#ifndef GMT_INTERNAL_H
#define GMT_INTERNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "fw_bridge.h"
#include "gmt_format.h"
#include "gmt_options.h"

#define GMT_LIKELY(x) __builtin_expect(!!(x), 1)
#define GMT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GMT_TLS __thread __attribute__((tls_model("initial-exec")))
#define GMT_MAX_DEVICES 64

static inline uint64_t gmt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Bytes as the extension records hold a string: length, then the bytes. */
static inline uint8_t *gmt_put_str(uint8_t *p, const void *s, size_t n)
{
    p = gmt_put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

/* ---- options.c: the GPUMEMTRACE_* environment variables -------------- */

/* The table and the value rules: gmt_options.h (the launcher's too). */
struct gmt_options {
#define GMT_OPT_FIELD_str const char *
#define GMT_OPT_FIELD_int long
#define GMT_OPT_FIELD_bool bool
#define GMT_OPT_FIELD_hex uint64_t
#define X(NAME, field, type, def, lo, hi, help) GMT_OPT_FIELD_##type field;
    GMT_OPTIONS(X)
#undef X
    bool session_set; /* GPUMEMTRACE_SESSION was present and valid */
};

extern struct gmt_options gmt_opt;
void gmt_options_load(void); /* parse the environment; warn on bad values */
/* GPUMEMTRACE_VERBOSE, also in a process that never loaded its options
 * (nothing was traced), without a warning for a bad value. */
bool gmt_opt_verbose_now(void);

/* ---- log.c: messages on stderr, never through stdio ------------------ */

void gmt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gmt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report a tracer failure once per `key` (a small integer site id). */
void gmt_error_once(unsigned key, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
enum {
    GMT_ERR_OPEN, GMT_ERR_GROW, GMT_ERR_NOSYM, GMT_ERR_OOM_STATE,
    GMT_ERR_STACKTAB, GMT_ERR_MODULES, GMT_ERR_RECORD, GMT_ERR_IPC,
    GMT_ERR_VMM,
    GMT_ERR_MAX
};
void gmt_log_reset_after_fork(void);

/* ---- real.c: the functions we interpose, as the runtime defines them - */

void *gmt_real_resolve(unsigned idx); /* slow path of gmt_real() */
extern void *gmt_real_fn[];
/* What dlsym hands out for a cuda* name that found `found`: our hook of
 * that name when `found` is the runtime function the hook calls. */
void *gmt_real_swap(const char *name, void *found);
static inline void *gmt_real(unsigned idx)
{
    void *f = __atomic_load_n(&gmt_real_fn[idx], __ATOMIC_ACQUIRE);
    return GMT_LIKELY(f != NULL) ? f : gmt_real_resolve(idx);
}
/* A call that cannot leave an error behind: runs f only when no error is
 * pending on this thread, and consumes the error f itself produced. */
int gmt_quiet_get_device(int fallback);
/* What kind of memory p is: GMT_PTR_*. */
enum { GMT_PTR_UNKNOWN, GMT_PTR_PAGEABLE, GMT_PTR_PINNED, GMT_PTR_DEVICE };
int gmt_quiet_ptr_class(const void *p);
bool gmt_real_cuda_loaded(void);        /* is libcuda.so in the process? */
/* Does the process's runtime define function idx? (no warning if not) */
bool gmt_real_present(unsigned idx);
/* Is fn still code of a loaded object? Exit handlers ask before calling
 * a runtime or driver the program may have dlclosed. */
bool gmt_code_loaded(const void *fn);

/* ---- driver.c: the driver-level observer (dlsym, cuGetProcAddress) --- */
/* Its wrappers of the memory calls are in driver_calls.c; driver.h holds
 * what the two files share, and nothing else includes it. */

/* glibc's dlsym (ours interposes it). */
void *gmt_real_dlsym(void *handle, const char *name);
/* A device as the driver describes it; false if no driver is loaded. */
struct gmt_devinfo {
    char name[256];
    uint64_t total;
    uint8_t uuid[16];
    int attr[5]; /* PCI domain, bus, device; compute capability major, minor */
};
bool gmt_drv_device_info(int dev, struct gmt_devinfo *out);
/* The current device's free and total memory, from the driver. */
bool gmt_drv_mem_info(size_t *free_b, size_t *total_b);
/* Why a process that used the driver has no trace (NULL: it didn't). */
const char *gmt_drv_silence_reason(bool *worth);
void gmt_drv_reset_after_fork(void);

/* ---- driver_calls.c: the driver-level wrappers of the memory calls --- */

/* The device a real cudaFree(p) waits for; -1: none, or not known
 * (stream-ordered pool memory drains nothing). */
int gmt_drv_free_drains(const void *p);

/* ---- nvml.c: this process's own device memory ------------------------- */
/* The device's UUID (from its device record), to find it in NVML. */
void gmt_nvml_device(int dev, const uint8_t uuid[16]);
/* The bytes of dev this process holds, per NVML; false if not known. */
bool gmt_nvml_used(int dev, uint64_t *used);
void gmt_nvml_reset_after_fork(void);

/* ---- vmm.c: the driver's virtual memory, for the pool ----------------- */
/* Called straight (the driver-level observer does not see them); 0 or a
 * CUDA error code. Pages are gmt_vmm_page() bytes
 * (GPUMEMTRACE_POOL_VMM_PAGE_MB). */
size_t gmt_vmm_page(void);
/* cudaErrorNotSupported: dev has no virtual memory management (or its
 * granularity does not divide our page); the pool then uses plain
 * segments. */
int gmt_vmm_reserve(int dev, size_t size, uintptr_t *out);
int gmt_vmm_unreserve(int dev, uintptr_t va, size_t size);
int gmt_vmm_create(int dev, size_t size, uint64_t *handle);
int gmt_vmm_destroy(int dev, uint64_t handle);
int gmt_vmm_map(int dev, uintptr_t va, size_t size, uint64_t handle);
int gmt_vmm_unmap(int dev, uintptr_t va, size_t size);
void gmt_vmm_reset_after_fork(void);

/* ---- trace.c: the trace file, its chunks and the record encoder ------- */

/* One recorded event, filled by the hooks, encoded by gmt_trace_emit. */
struct gmt_event {
    uint8_t kind, api, dir, mtype;
    int32_t result;
    int32_t device;      /* -1: leave the thread's device register alone */
    uint64_t stream;     /* only for kinds/apis that have a stream */
    bool has_stream;
    uint64_t seq, time;  /* from gmt_stamp() */
    uint64_t addr, addr2;
    uint64_t size, size2, value, flags;
    uint64_t v[6];       /* SAMPLE and OOM values */
    uint32_t stack;
};

struct gmt_thread;
struct gmt_thread *gmt_thread_get(void); /* NULL if tracing is off */
void gmt_stamp(uint64_t *seq, uint64_t *time);
/* Encode a core record on this thread: the one place every event - a
 * hook's, the pool's, the driver observer's, a marker - is written. One
 * with seq 0 is stamped here (sequence number and time); a hook that had
 * to stamp before its real call (gmt_call_begin's GMT_CALL_STAMP) hands
 * its stamp in. */
bool gmt_trace_emit(struct gmt_thread *t, struct gmt_event *ev);
/* Write an extension record (ext kind, payload) on this thread. */
bool gmt_trace_emit_ext(struct gmt_thread *t, unsigned ext, const uint8_t *p,
                        size_t len);
size_t gmt_trace_ext_max(void); /* largest payload that fits a chunk */
/* A NOTE record: level 0 information, 1 a warning (cut to ~600 bytes). */
void gmt_trace_note(struct gmt_thread *t, unsigned level, const char *text);
struct gmt_thread *gmt_thread_peek(void); /* this thread's state or NULL */
void gmt_trace_lock(void);      /* the file lock, held across fork() */
void gmt_trace_unlock(void);
bool gmt_trace_open(void);      /* create the file; false: tracing off */
void gmt_trace_close(void);     /* flag the header closed, trim the file */
void gmt_trace_reset_after_fork(void);
uint64_t gmt_trace_events(void);/* events recorded so far */
const char *gmt_trace_path(void);
void gmt_trace_add_feature(uint64_t bit); /* GMT_FEAT_* found after open */
/* The file could not grow: nothing more is recorded (hooks skip stacks). */
bool gmt_trace_full(void);
/* Something was not recorded: count it in the file header, with why
 * (GMT_LOST_*; 0 when the cause was recorded where it began, as a file
 * that stopped growing is). */
enum gmt_lost_what {
    GMT_LOST_EVENT,  /* a core record */
    GMT_LOST_RECORD, /* an extension record */
    GMT_LOST_STACK,  /* an event recorded without its stack */
};
void gmt_trace_lost(enum gmt_lost_what what, uint32_t why);
void gmt_trace_windows(unsigned *mapped, unsigned *all);
/* Thread state that the hooks use directly. */
struct gmt_thread {
    int guard;                  /* >0 while inside our hooks */
    uint32_t gen;               /* process generation (bumped by fork) */
    uint32_t index;             /* thread index in the file */
    uint32_t ordinal;           /* next chunk ordinal */
    int last_device;            /* last device seen on this thread */
    struct gmt_chunk_header *chunk;
    uint8_t *pos, *end;
    uint64_t r_seq, r_time, r_addr, r_addr2, r_stream;
    uint32_t r_device;
    pid_t tid;
    uint32_t call_stack;        /* stack id of the hooked call in flight */
    int call_device;            /* its device when known (-1: ask) */
    bool upstream_failed;       /* the pool's real cudaMalloc failed */
    int interp_at;              /* frame where the last native stack met
                                   the interpreter (stack.c), 0: none */
    int self_at;                /* frames of ours atop the last native
                                   stack (stack.c), 0: not known yet */
    struct gmt_ucache *uc;      /* stacks unwound before (stack.c) */
    /* stack capture scratch: native frames, then Python (code, offset) */
    void *frames[GMT_MAX_STACK_DEPTH + 32 + 2 * GMT_MAX_PY_DEPTH];
};

/* ---- stack.c: native stacks, deduplicated --------------------------- */

/* Capture the calling thread's stack (tracer frames removed), intern it,
 * and return its id (0: stacks off or capture failed). */
uint32_t gmt_stack_capture(struct gmt_thread *t);
void gmt_stack_init(void);
/* Write a SYMBOL record for every distinct address of every stack. */
void gmt_stack_embed_symbols(struct gmt_thread *t);
void gmt_stack_reset_after_fork(void);
/* At thread exit: the thread's unwind cache goes. */
void gmt_stack_thread_free(struct gmt_thread *t);
/* With GPUMEMTRACE_VERBOSE: the line saying what capturing stacks cost
 * (time per capture, the Python part, frames, the unwind cache's work, t
 * the exiting thread); false if nothing was captured. */
bool gmt_stack_summary(struct gmt_thread *t, char *buf, size_t size);

/* ---- pystack.c: Python frames of the calling thread, without the GIL - */

/* Find the interpreter (at tracer start); true if frames will be read.
 * Writes a NOTE into the trace when a Python process cannot be read. */
bool gmt_py_init(struct gmt_thread *t);
/* retention.c: with GPUMEMTRACE_RETENTION, have the interpreter found by
 * gmt_py_init take its captures (once per process). */
void gmt_retention_start(struct gmt_thread *t);
/* A mark or region named s[0..n) (type: GMT_MARK...) was recorded: a
 * capture queued when GPUMEMTRACE_RETENTION asked for it (step:N,
 * mark:NAME). Called only while gmt_retention_marks. */
extern bool gmt_retention_marks;
void gmt_retention_on_mark(unsigned type, const char *s, size_t n);
/* While PyTorch's optimizer hook is still to be registered (step:N,
 * growth asked for, torch not yet imported at the bootstrap): a device
 * allocation was recorded, so try again (a pending call, one at a time). */
extern bool gmt_retention_rearm;
void gmt_retention_retry(void);
extern const char gmt_retention_py[]; /* preload/retention.py */
/* Up to max frames of this thread, innermost first, as (code id,
 * instruction offset in bytes) pairs in out[2 * i], out[2 * i + 1].
 * Code objects seen for the first time are described (PYCODE). */
int gmt_py_capture(struct gmt_thread *t, int64_t *out, int max);
void gmt_py_reset_after_fork(void);
/* The interpreter's code (executable segment), when Python frames are
 * recorded: a native stack that reaches it is cut there (what lies
 * beyond, the interpreter's own frames, the Python frames describe). */
extern uintptr_t gmt_py_interp_lo, gmt_py_interp_hi;

/* ---- modules.c: the module map for offline symbolization ------------ */

void gmt_modules_init(void);
/* Record modules not yet in the trace; called at start and whenever a new
 * stack holds an address outside every known module. */
void gmt_modules_scan(struct gmt_thread *t);
bool gmt_modules_covers(uintptr_t ip);
bool gmt_modules_self(uintptr_t ip); /* inside libgpumemtrace.so or the
                                        framework bridge it loaded? */
/* The framework bridge (the module holding addr) is ours too: stacks are
 * cut above its frames as above the library's. */
void gmt_modules_add_bridge(const void *addr);
/* The address range of the loaded module addr lies in (its PT_LOAD
 * segments); false if none. Takes the loader's lock (dl_iterate_phdr). */
bool gmt_module_span(const void *addr, uintptr_t *lo, uintptr_t *hi);
void gmt_modules_lock(void);  /* held across fork() */
void gmt_modules_unlock(void);
void gmt_modules_reset_after_fork(void);

/* ---- lifecycle.c: when tracing starts and stops ---------------------- */

/* GMT_TRACER_*: not started yet, tracing, off for good. Read on every
 * hooked call, so inline here; written only by lifecycle.c. */
enum { GMT_TRACER_UNINIT, GMT_TRACER_ACTIVE, GMT_TRACER_OFF };
extern int gmt_tracer_state;
static inline bool gmt_tracer_active(void)
{
    return __atomic_load_n(&gmt_tracer_state, __ATOMIC_ACQUIRE) == GMT_TRACER_ACTIVE;
}
/* Start tracing if it was not tried yet (the first hooked call does);
 * false: tracing is off. */
bool gmt_tracer_start(void);

/* ---- mem.c: the caching pool in the process (pool.c is the core) ----- */

void gmt_mem_init(void);             /* at tracer start, if the pool is on */
void gmt_mem_reset_after_fork(void);
void gmt_mem_verbose_summary(void); /* GPUMEMTRACE_VERBOSE at exit */
/* With GPUMEMTRACE_VERBOSE: time in cudaMalloc [0] and cudaFree [1] */
extern uint64_t gmt_hook_ns[2], gmt_hook_calls[2];
/* With GPUMEMTRACE_VERBOSE: a "step" mark; at exit, the hooks' time per
 * step between marks, warm-up left out (said only with enough marks). */
void gmt_mem_step_mark(void);
void gmt_mem_steady_summary(void);
/* Emit a SAMPLE for dev if the sampling interval has passed. */
void gmt_mem_maybe_sample(struct gmt_thread *t, int dev);
bool gmt_capture_active(void);
/* A free of ptr that reached the driver without our cudaFree: 0, not the
 * pool's (the driver frees it); 1, a pool block, now pending as after our
 * cudaFree (*dev: its device); -1, inside a pool segment but no live
 * block's start (refuse it: the driver must never free pool memory). */
int gmt_mem_driver_free(uint64_t ptr, int *dev);
/* An allocation the pool did not serve failed for lack of memory on dev,
 * the thread's current device: the pool gives back what it holds idle
 * there - the segments nothing lives in, after one synchronization if
 * frees are pending, so that no queued GPU work can touch what goes
 * back (pool_trim) - and the caller tries once more. false: nothing went
 * back (nothing idle, a stream capture under way, or more than the
 * device has), and a second try would fail the same. The caller is no
 * call of the library's own and holds no lock of the runtime's; only
 * failures come here: an allocation that succeeds costs nothing more. */
bool gmt_mem_oom_release(int dev, uint64_t size);
/* The same for a runtime entry point, on the current device. began: the
 * hook's gmt_call_begin succeeded (else it checks the thread is not
 * inside a call of the library's). */
bool gmt_mem_oom_retry(uint64_t size, bool began);
/* Is addr code of the runtime the pool allocates through? */
bool gmt_mem_runtime_code(const void *addr);
/* a * b, or UINT64_MAX where that wraps: a size from the program's
 * counts, for a record or a comparison, never for an allocation. */
static inline uint64_t gmt_mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
/* Hold the capture lock if no stream capture is under way (true), so that
 * none begins while the library makes a stream-ordered call of its own.
 * Without `wait`, false also when another thread holds it (it may be
 * waiting for the GPU). */
bool gmt_capture_hold(bool wait);
void gmt_capture_release(void);
/* Run f on device dev, restoring the thread's current device. */
int gmt_on_device(int dev, int (*f)(void *), void *arg);
/* Synchronize every device the pool holds memory on, making all its
 * frees idle (ordered reuse ends, fence.c). */
void gmt_mem_settle(void);
/* A stream capture begins (key: the stream, gmt_stream_of) / a Begin
 * failed or an End returned. cudaStream_t is declared by the runtime
 * headers (real.h users). */
void gmt_capture_begin(uint64_t stream_key);
struct CUstream_st;
void gmt_capture_end(uint64_t stream_key, struct CUstream_st *handle);

/* ---- fence.c: events on the legacy stream that make pool blocks reusable */

struct pool;
/* A pooled free on dev: maybe record a fence (at most one per 50 us). */
void gmt_fence_after_free(struct pool *p, int dev);
/* The pool's upstream reclaim (pool.h). */
int gmt_fence_reclaim(struct pool *p, int dev, int wait);
/* Ordered reuse (fence.c) ends for good: a stream or context fences
 * cannot cover is about to be created, or a capture to begin. Returns
 * when every device with a pool has been synchronized. */
void gmt_fence_ordered_end(const char *why);
/* A stream or context fences cannot cover is about to be created: use
 * device-wide synchronizations from now on. why: a static string. */
void gmt_fence_off(const char *why);
/* Why ordered reuse ends, and why fences go off, at a non-blocking
 * stream's creation through `api` (a string literal): static strings. */
#define GMT_NB_MADE(api) "the program created a non-blocking stream (" api ")"
#define GMT_NB_MANY(api)                                                      \
    "the program created more than 8 non-blocking streams (" api ")"
/* A non-blocking stream of device dev (the primary context) was created:
 * fences cover it from now on; past their limit (8), off with `why`. */
void gmt_fence_stream_created(void *stream, int dev, const char *why);
/* A non-blocking stream is about to be created by the code `caller`
 * returns to: COVERED, fences take it in (gmt_fence_stream_created) and
 * ordered reuse ends; JOINED, a library GPUMEMTRACE_POOL_JOINED_STREAMS
 * names made it, and fences leave it out (count it with
 * gmt_fence_nb_joined once made); INNER, the driver's creation under a
 * runtime hook's JOINED one: nothing to do. */
enum gmt_nb_kind { GMT_NB_COVERED, GMT_NB_JOINED, GMT_NB_INNER };
enum gmt_nb_kind gmt_fence_nb_kind(const void *caller);
void gmt_fence_nb_joined(void);
/* Is `caller` (a return address) in a module whose streams fences left
 * out? Lock-free: a few comparisons. */
bool gmt_fence_joined_caller(const void *caller);
/* How many streams fences left out, the first library's file name, and
 * whether other libraries made some too. */
uint64_t gmt_fence_joined(const char **lib, bool *more);
/* A stream is about to be destroyed: if fences cover it, they go off. */
void gmt_fence_stream_destroyed(void *stream, const char *why);
bool gmt_fence_usable(void);
/* Why fences are not used (NULL: they are). */
const char *gmt_fence_off_reason(void);
void gmt_fence_counts(uint64_t *recorded, uint64_t *waits, uint64_t *wait_ns,
                      uint64_t *issued, uint64_t *record_ns);
/* Event queries made to learn whether fences completed (verbose). */
uint64_t gmt_fence_queries(void);
void gmt_fence_forget_device(int dev); /* cudaDeviceReset destroyed them */
void gmt_fence_reset_after_fork(void);

/* ---- events.c: a hooked call, and the events it records ------------ */

/* A hooked call in flight. */
struct gmt_call {
    struct gmt_thread *t;
    uint32_t stack;
    int saved_errno;    /* restored by gmt_call_finish */
    uint64_t seq, time; /* stamped before the real call when asked */
};
/* Begin a hooked call: false means "just pass through" (tracing off, or a
 * call made from inside the tracer). stamp_before: take the event's place
 * in the total order now (frees: before the memory can be reused). */
bool gmt_call_begin(struct gmt_call *c, bool stamp_before);
/* The same with GMT_CALL_* flags: STAMP (stamp_before), NO_STACK (an
 * event whose record has no stack: capture none). */
#define GMT_CALL_STAMP 1u
#define GMT_CALL_NO_STACK 2u
bool gmt_call_begin_flags(struct gmt_call *c, unsigned flags);
/* Record one event of the call (a call may record several: a batch copy).
 * The event takes the call's stack; device GMT_DEVICE_CURRENT means the
 * thread's current device. */
#define GMT_DEVICE_CURRENT (-2)
void gmt_call_emit(struct gmt_call *c, struct gmt_event *ev);
void gmt_call_finish(struct gmt_call *c); /* leave the hook */
/* After the real call: keep the errno it left for gmt_call_finish. */
#define gmt_call_errno(c) ((c)->saved_errno = errno)
/* Describe device (a DEVICE record) unless done already; emitting an
 * event calls it. */
void gmt_device_seen(struct gmt_thread *t, int device);
void gmt_call_reset_after_fork(void);

#define GMT_NO_STREAM UINT64_MAX
/* Which stream a call ran on: the runtime's special handles folded to
 * GMT_STREAM_LEGACY / GMT_STREAM_PER_THREAD. ptsz: the _ptds/_ptsz export,
 * where stream 0 means the per-thread stream. */
uint64_t gmt_stream_of(const void *stream, bool ptsz);
void gmt_ev_alloc(struct gmt_call *c, int r, unsigned api, const void *ptr,
                  uint64_t size, uint64_t block, uint64_t flags,
                  uint64_t stream);
void gmt_ev_free(struct gmt_call *c, int r, unsigned api, const void *ptr,
                 uint64_t stream);
/* kind: the cudaMemcpyKind the program passed (cudaMemcpyDefault is
 * resolved from the pointers). */
void gmt_ev_copy(struct gmt_call *c, int r, unsigned api, const void *dst,
                 const void *src, uint64_t bytes, int kind, uint64_t stream);
struct cudaMemcpy3DParms;
struct cudaMemcpy3DPeerParms;
struct cudaMemcpy3DBatchOp;
void gmt_ev_copy3d(struct gmt_call *c, int r, unsigned api,
                   const struct cudaMemcpy3DParms *p, uint64_t stream);
void gmt_ev_copy3d_peer(struct gmt_call *c, int r, unsigned api,
                        const struct cudaMemcpy3DPeerParms *p,
                        uint64_t stream);
void gmt_ev_copy_batch(struct gmt_call *c, int r, unsigned api,
                       void *const *dsts, const void *const *srcs,
                       const size_t *sizes, size_t count, uint64_t stream);
void gmt_ev_copy3d_batch(struct gmt_call *c, int r, unsigned api,
                         size_t count, const struct cudaMemcpy3DBatchOp *ops,
                         uint64_t stream);
void gmt_ev_set(struct gmt_call *c, int r, unsigned api, const void *ptr,
                uint64_t bytes, int value, uint64_t stream);
void gmt_ev_sync(struct gmt_call *c, int r, unsigned api, uint64_t stream);
void gmt_ev_stream_create(struct gmt_call *c, int r, unsigned api,
                          const void *handle, unsigned flags, int priority);
void gmt_ev_stream_destroy(struct gmt_call *c, int r, const void *handle);
void gmt_ev_set_device(struct gmt_call *c, int r, int device);
void gmt_ev_mem_get_info(struct gmt_call *c, int r, uint64_t free_b,
                         uint64_t total_b);
/* Events the pool emits on its own (no hooked call of their own): they
 * take the current thread's stack id of the call in flight, if any. */
void gmt_ev_pool(struct gmt_thread *t, unsigned kind, int dev, uint64_t addr,
                 uint64_t size, uint32_t stack);
void gmt_ev_pool_sync(struct gmt_thread *t, int dev, unsigned api, int result);
void gmt_ev_sample(struct gmt_thread *t, int dev, const uint64_t v[6]);
void gmt_ev_oom(struct gmt_call *c, int dev, uint64_t size, const uint64_t v[5]);

/* ---- fw.c: the framework bridge (PyTorch's allocator's block events) -- */

/* Called by the allocation hooks (cudaMalloc, cudaMallocAsync: async,
 * the driver's cuMemCreate) with their caller's return address. True:
 * the call is PyTorch's caching allocator taking memory for a segment
 * while its block events are recorded - leave it to CUDA and flag its
 * record GMT_ALLOC_FW_BACKING. The first such call attaches the bridge
 * (a first cudaMallocAsync from PyTorch says it has nothing to attach
 * to). errno is left as it was. */
bool gmt_fw_segment_call(const void *caller, bool async);
void gmt_fw_reset_after_fork(void);

/* ---- fw_build.c: building the bridge against the program's PyTorch --- */

/* The bridge's attach function for the PyTorch whose libc10_cuda.so is
 * at path: loaded from the cache, else compiled into it first. NULL
 * with `why` (a few words) when it cannot be had; on success `why` is
 * empty, or says that a damaged cached bridge was built again. */
gmt_fw_attach_fn gmt_fw_build(const char *path, char *why, size_t whylen);
/* Raise again the program's stopping signals (SIGINT, SIGTERM, ...)
 * that came while gmt_fw_build ran, now that its own handlers are back:
 * call after saying why a build failed. May not return. */
void gmt_fw_build_reraise(void);

/* ---- api.c: the public API (markers), trace strings, NVTX injection -- */

/* The id of string s[0..n) in this trace, its STRING record written the
 * first time (before the id is returned); 0 if it could not be written.
 * Lock-free once known. String ids are one namespace per trace: every
 * STRING record takes its id here. Longer strings are cut. */
#define GMT_STRING_MAX 1024u
uint32_t gmt_string_id(struct gmt_thread *t, const char *s, size_t n);
void gmt_api_reset_after_fork(void);

#endif /* GMT_INTERNAL_H */
