/*
 * sim_internal.h - shared internals of the simulated CUDA runtime
 * (tests/sim: a host-memory stand-in for libcudart.so.13, see README.md).
 *
 * Everything in here is private to the library: the version script
 * (libcudart.map) exports only cuda* and sim[A-Z]* names, and the
 * visibility pragma below additionally makes calls between the library's
 * own files bind directly.  Internal helpers are named sim_* (lower case +
 * underscore) so the sim[A-Z]* export pattern never catches them.
 *
 * One rule matters for the profiler that is LD_PRELOADed on top of this
 * library: no exported cuda* function may call another exported cuda*
 * function, because such a call would go through the PLT and be
 * intercepted a second time.  Exported functions are thin wrappers around
 * the static / hidden helpers declared here.
 *
 * Concurrency model: one process-wide mutex (sim_g.lock) protects all
 * state (allocation registry, streams, events, pools, captures, stats).
 * Stream worker threads take the same lock to pop and run operations and
 * drop it only while sleeping or calling user host functions.  Anything
 * that waits for device progress waits on sim_g.progress, which is
 * broadcast whenever any stream completes an operation.  This is slow
 * compared with a real driver and deliberately simple.
 */
#ifndef SIM_INTERNAL_H
#define SIM_INTERNAL_H

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SIM_MAX_DEVICES 8
#define SIM_DEV_ALIGN 512     /* device / managed allocations, pitches */
#define SIM_HOST_ALIGN 4096   /* pinned host allocations (page aligned) */
#define SIM_FREED_FILL 0xDB   /* written over device memory before free() */

/* Magic numbers so that a stale or foreign handle is recognisable in a
 * debugger; validity itself is decided by list membership. */
#define SIM_MAGIC_STREAM 0x5354524dU
#define SIM_MAGIC_EVENT 0x4556544dU
#define SIM_MAGIC_POOL 0x504f4f4cU
#define SIM_MAGIC_GRAPH 0x47525048U
#define SIM_MAGIC_ARRAY 0x41525259U

/* The _ptsz exports (per-thread default stream builds) treat the handle 0
 * as the calling thread's default stream; an explicit cudaStreamLegacy
 * keeps its meaning. */
#define SIM_PTSZ(s) ((s) ? (s) : cudaStreamPerThread)

/* Prototypes for the per-thread-default-stream exports of the entry
 * points the profiler hooks (the headers declare them only in a build
 * with per-thread default streams), derived from the base functions so
 * the compiler checks our definitions. The list is the profiler's
 * (preload/gmt_api.h, generated from preload/gen-hooks.py); a file that
 * defines other such exports declares them itself. A few base functions
 * are marked deprecated in the CUDA 13 headers; naming them in
 * __typeof__ would warn, which says nothing about our definitions.
 * Before the visibility push below: these are exported. */
#include "../../preload/gmt_api.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define SIM_DECLARE_PTDS(base, sfx) __typeof__(base) base##sfx;
GMT_RT_PTDS(SIM_DECLARE_PTDS)
#undef SIM_DECLARE_PTDS
#pragma GCC diagnostic pop

#pragma GCC visibility push(hidden)

/* ------------------------------------------------------------------ */
/* Allocations                                                         */
/* ------------------------------------------------------------------ */

enum sim_mem_type {
    SIM_MEM_DEVICE = 1, /* cudaMalloc, Pitch, 3D, MallocAsync, FromPool */
    SIM_MEM_MANAGED,    /* cudaMallocManaged */
    SIM_MEM_PINNED,     /* cudaMallocHost, cudaHostAlloc */
    SIM_MEM_REGISTERED, /* cudaHostRegister (memory owned by the user) */
    SIM_MEM_ARRAY       /* backing store of a cudaArray */
};

struct sim_alloc {
    uintptr_t base;        /* first byte, key of the registry tree */
    size_t size;           /* bytes, > 0 */
    uint64_t id;           /* unique, never reused: detects reuse of an address */
    enum sim_mem_type type;
    int device;            /* owning / current device at allocation time */
    unsigned flags;        /* API flags (cudaHostAlloc*, cudaMemAttach*, ...) */
    bool charged;          /* counted against the device capacity */
    bool freeing;          /* a free is in flight (cudaFree draining, FreeAsync queued) */
    struct CUmemPoolHandle_st *pool; /* stream-ordered allocations only */
    struct cudaArray *array;         /* SIM_MEM_ARRAY only */
    uintptr_t drv_ptr;               /* SIM_CUDA_DRIVER=1: the driver's twin allocation (0: none) */
    bool drv_lent;                   /* the twin is this memory itself (drv_ptr == base) */
    /* AVL tree links */
    struct sim_alloc *left, *right;
    int height;
};

/* cudaArray_t is an opaque pointer in the headers; the simulator completes
 * the type.  The array is stored linearly, rows of width*elem bytes. */
struct cudaArray {
    uint32_t magic;
    int device;
    struct cudaChannelFormatDesc desc;
    size_t elem;               /* bytes per element */
    size_t width, height, depth; /* height / depth >= 1 */
    struct cudaExtent extent;    /* as requested (0 height / depth: 1D / 2D) */
    unsigned flags;
    char *data;
    struct sim_alloc *alloc;
    struct cudaArray *next;
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    int device;
    bool is_default;
    bool destroyed;            /* destroyed by the user, freed once unused */
    size_t max_size;           /* 0 = no pool limit (device capacity only) */
    size_t used, used_high;
    unsigned long long release_threshold;
    int reuse_follow_event, reuse_opportunistic, reuse_internal;
    struct CUmemPoolHandle_st *next;
};

struct CUgraph_st {
    uint32_t magic;
    struct CUgraph_st *next;
};

/* ------------------------------------------------------------------ */
/* Streams, operations, events, capture                                */
/* ------------------------------------------------------------------ */

enum sim_region_kind {
    SIM_REGION_HOST,   /* untracked (pageable) host memory: used directly */
    SIM_REGION_DEVICE, /* inside a tracked allocation: re-checked when run */
    SIM_REGION_STATIC  /* a __device__ symbol: static storage, always valid */
};

/* A (possibly pitched, 3D) byte region that an operation reads or writes. */
struct sim_region {
    char *ptr;
    size_t pitch, slice;   /* bytes between rows / between 2D slices */
    size_t span;           /* bytes from ptr to the last byte touched + 1 */
    enum sim_region_kind kind;
    uint64_t alloc_id;     /* SIM_REGION_DEVICE: allocation at enqueue time (0: none) */
};

struct sim_copy {
    struct sim_region dst, src;
    size_t width, height, depth; /* width in bytes */
};

enum sim_op_kind {
    SIM_OP_COPY,   /* one or more 3D copies */
    SIM_OP_SET,    /* memset of a 3D region, optionally delayed (simLaunchFill) */
    SIM_OP_SLEEP,  /* simLaunchSleep */
    SIM_OP_RECORD, /* event marker */
    SIM_OP_WAIT,   /* cudaStreamWaitEvent */
    SIM_OP_FREE,   /* cudaFreeAsync */
    SIM_OP_AFTER_LEGACY, /* implicit: a blocking stream's next op waits for
                          * the legacy stream's work queued before it */
    SIM_OP_HOSTFN  /* cudaLaunchHostFunc / cudaStreamAddCallback */
};

struct sim_op {
    struct sim_op *next;
    unsigned long long seq;   /* position in its stream, from 1 */
    enum sim_op_kind kind;
    unsigned delay_us;
    union {
        struct {
            size_t n;
            struct sim_copy *v;  /* &one when n == 1, else heap */
            struct sim_copy one;
        } copy;
        struct {
            struct sim_region dst;
            int value;
            size_t width, height, depth;
        } set;
        struct {
            struct CUevent_st *ev; /* holds a reference */
            unsigned long long gen;
            /* A record on the legacy stream first waits for the work queued
             * before it on the device's blocking streams (each held by a
             * reference): deps[i] must reach seq[i]. */
            size_t ndeps;
            struct CUstream_st **deps;
            unsigned long long *seq;
        } event;
        struct {
            struct sim_alloc *a;   /* still in the registry, freeing == true */
        } free;
        struct {
            cudaHostFn_t fn;
            cudaStreamCallback_t cb;
            cudaStream_t handle;   /* as passed by the user, for cb */
            void *arg;
        } host;
    } u;
};

struct sim_capture;

enum sim_stream_kind { SIM_STREAM_USER, SIM_STREAM_LEGACY, SIM_STREAM_PER_THREAD };

struct CUstream_st {
    uint32_t magic;
    enum sim_stream_kind kind;
    int device;
    unsigned flags;
    int priority;
    unsigned long long id;
    struct sim_op *head, *tail;       /* head is the op being run, if any */
    unsigned long long enqueued;      /* seq of the last enqueued op */
    unsigned long long completed;     /* seq of the last completed op */
    pthread_cond_t work;              /* signalled on enqueue / destroy */
    bool has_worker, worker_exited;
    bool destroyed;                   /* handle invalid; struct lives until drained */
    int refs;                         /* waiters that must not see it freed */
    struct sim_capture *capture;      /* capture sequence it belongs to */
    struct CUstream_st *next;         /* sim_g.streams */
};

struct CUevent_st {
    uint32_t magic;
    int device;
    unsigned flags;
    unsigned long long record_gen;    /* bumped by every cudaEventRecord */
    unsigned long long done_gen;      /* highest generation whose marker ran */
    struct timespec t_done;           /* host time the done_gen marker ran */
    unsigned long long capture_id;    /* capture the last record was part of */
    bool destroyed;
    int refs;                         /* 1 for the user + pending ops */
    struct CUevent_st *next;
};

struct sim_capture {
    unsigned long long id;
    enum cudaStreamCaptureMode mode;
    pthread_t thread;                 /* thread that began it */
    struct CUstream_st *origin;
    bool invalidated;
    struct CUgraph_st *graph;
    struct sim_capture *next;
};

/* ------------------------------------------------------------------ */
/* Process-wide state                                                  */
/* ------------------------------------------------------------------ */

struct sim_device {
    size_t capacity, used, peak;      /* capacity-charged bytes */
    struct CUstream_st *legacy;       /* created on first use */
    struct CUmemPoolHandle_st *default_pool, *current_pool;
    bool peer_enabled[SIM_MAX_DEVICES];
};

struct sim_global {
    pthread_mutex_t lock;
    pthread_cond_t progress;
    int ndev;
    struct sim_device dev[SIM_MAX_DEVICES];
    struct sim_alloc *tree;
    uint64_t next_alloc_id;
    unsigned long long next_stream_id, next_capture_id;
    struct CUstream_st *streams;
    struct CUevent_st *events;
    struct CUmemPoolHandle_st *pools;
    struct CUgraph_st *graphs;
    struct cudaArray *arrays;
    struct sim_capture *captures;
    unsigned long long mallocs, frees, device_syncs, stream_syncs;
    unsigned long long stale_writes, stale_reads;
    bool forked_child;             /* we are a fork() child of an initialised process */
};

extern struct sim_global sim_g;

/* sim_core.c */
cudaError_t sim_enter(void);              /* lazy init; cudaErrorNoDevice if none */
cudaError_t sim_ret(cudaError_t err);     /* records err as the thread's last error */
void sim_lock(void);
void sim_unlock(void);
int sim_current_device(void);
bool sim_valid_device(int dev);
struct CUstream_st **sim_thread_ptds(int dev); /* per-thread stream slot, NULL on OOM */
enum cudaStreamCaptureMode sim_thread_capture_mode(void);
size_t sim_round_up(size_t v, size_t a);

/* sim_registry.c (lock held) */
void sim_reg_insert(struct sim_alloc *a);
void sim_reg_remove(struct sim_alloc *a);
struct sim_alloc *sim_reg_find(const void *p);             /* contains p */
struct sim_alloc *sim_reg_find_range(const void *p, size_t n); /* contains [p,p+n) */
struct sim_alloc *sim_reg_overlap(const void *p, size_t n); /* one overlapping [p,p+n) */
size_t sim_reg_collect(struct sim_alloc ***out);           /* all, in order; caller frees */

/* sim_mem.c */
/* Unlinks a from the registry and accounting (lock held). */
void sim_alloc_unlink(struct sim_alloc *a);
/* Poisons and releases the memory of an unlinked allocation, and its
 * driver twin (lock NOT held). */
void sim_alloc_destroy(struct sim_alloc *a);
/* Creates, charges and registers an allocation (lock held). */
cudaError_t sim_alloc_new(enum sim_mem_type type, size_t size, int dev, unsigned flags,
                          struct CUmemPoolHandle_st *pool, struct sim_alloc **out);
/* The driver underneath (SIM_CUDA_DRIVER=1), lock NOT held: loads it the
 * first time and says whether it is in use; gives a fresh allocation its
 * driver twin; releases a twin. */
bool sim_drv_ready(void);
/* SIM_CUDA_DRIVER=1: a stream's creation makes a driver stream too. */
void sim_drv_stream_twin(unsigned flags);
cudaError_t sim_drv_attach(struct sim_alloc *a);
void sim_drv_release(enum sim_mem_type type, uintptr_t twin);

/* sim_array.c */
bool sim_array_is_live(const struct cudaArray *arr); /* lock held */

/* sim_stream.c, sim_worker.c, sim_capture.c, sim_event.c (lock held unless noted) */
cudaError_t sim_stream_resolve(cudaStream_t h, struct CUstream_st **out);
void sim_stream_maybe_free(struct CUstream_st *s); /* frees a destroyed stream once idle */
cudaError_t sim_submit(cudaStream_t h, struct sim_op *op); /* validates h, enqueues (lock NOT held) */
void sim_capture_end(struct sim_capture *c); /* its streams stop capturing */
struct sim_op *sim_op_new(enum sim_op_kind kind);           /* no lock needed */
void sim_op_free(struct sim_op *op);                        /* lock held */
cudaError_t sim_enqueue(struct CUstream_st *s, struct sim_op *op); /* frees op on error */
void sim_wait_seq(struct CUstream_st *s, unsigned long long seq);
void sim_drain_device(int dev);                             /* dev < 0: all devices */
cudaError_t sim_capture_check_unsafe(void);
cudaError_t sim_capture_check_sync_stream(struct CUstream_st *s);
struct sim_capture *sim_capture_find(unsigned long long id);
struct CUgraph_st *sim_graph_new(void);
void sim_graph_free(struct CUgraph_st *g);
void sim_event_unref(struct CUevent_st *ev);
void sim_stream_mark_destroyed(struct CUstream_st *s);
bool sim_legacy_deps(struct sim_op *op, struct CUstream_st *legacy); /* false: no memory */
void sim_device_reset_streams(int dev);

#pragma GCC visibility pop

#endif /* SIM_INTERNAL_H */
