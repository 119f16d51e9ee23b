/* pool.h - gpumemtrace's caching pool for device memory.
 *
 * The pool serves cudaMalloc/cudaFree from segments it takes from the
 * driver ("upstream") and keeps. It knows nothing of CUDA or of the trace:
 * the upstream interface gives it memory and device synchronization (the
 * real runtime in the library, host memory in unit tests), and an observer
 * interface tells the caller what it did (segments taken and given back,
 * blocks becoming reusable, synchronizations it issued).
 *
 * Safety rule: a block freed by the program may only be handed out again
 * once every piece of GPU work issued on its device before the free - on
 * any of that device's streams - has finished. Work of other devices
 * (peer access), other processes (IPC) and NICs (GPUDirect) is not
 * covered: nothing the upstream can wait for orders it, and the real
 * cudaFree does not promise to wait for it either (docs/usage.md). Freed blocks are therefore "pending", tagged with their
 * device's epoch. A device-wide synchronization that started after
 * a block was freed makes it reusable, and so does anything else the
 * upstream knows to cover the device (its `reclaim`: the library's fences,
 * events on the legacy stream). Synchronizations the program makes itself
 * count (pool_synced). When a request cannot be served otherwise and
 * enough memory is pending to be worth it, the pool first waits for the
 * upstream's oldest fences, one at a time, and only then makes a
 * synchronization of its own, which releases every pending block at once.
 *
 * Ordered reuse (an option of the library's, GPUMEMTRACE_POOL_ORDERED):
 * where the upstream knows that every piece of GPU work the new owner
 * can issue will run after a barrier it has already issued - an event
 * recorded on the legacy stream, while the process has no stream that
 * does not wait for it - the blocks freed before that barrier are handed
 * out again at once (pool_issued), as PyTorch's allocator does on one
 * stream. Their memory may still be in use on the GPU: it is reused, but
 * never unmapped or given back, until `safe` covers it too.
 *
 * Concurrency: each device's pool is split into arenas, each with its own
 * lock. Threads share the first until they contend for its lock
 * (POOL_SPREAD_AFTER times); then each uses its own (by thread index) and
 * visits the others only when its own cannot serve it. A free finds its segment in a
 * lock-free index and its block in the owning arena's map. Statistics are
 * per arena; the epoch and safe mark are per device and change once per
 * synchronization: threads on different arenas write no common cache line
 * between synchronizations.
 */
#ifndef GMT_POOL_H
#define GMT_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_MAX_DEVICES 64
#define POOL_ARENAS 32
#define POOL_ROUND 512u                       /* request rounding */
#define POOL_SMALL_MAX (1u << 20)             /* <= this: small pool */
#define POOL_SMALL_SEGMENT (2u << 20)
#define POOL_MEDIUM_MAX (10u << 20)           /* <= this: shared segments */
#define POOL_MEDIUM_SEGMENT (20u << 20)       /* of virtual memory */
#define POOL_MEDIUM_MIN (12u << 20)           /* plain: a multiple of the */
#define POOL_MEDIUM_TOP (24u << 20)           /* request within these */
#define POOL_LARGE_ROUND (2u << 20)           /* larger: own segment */
#define POOL_WHOLE_KEEP ((size_t)256 << 20)   /* pool_upstream.whole */
/* The largest request the pool serves. No device has this much, and
 * nothing the pool computes from a request up to it wraps (its rounding
 * to blocks, segments and pages; the multiples it compares with). */
#define POOL_MAX_REQUEST (SIZE_MAX >> 4)

/* Where memory comes from. Functions return 0 or a CUDA error code. */
#define POOL_NO_VMM 801 /* cudaErrorNotSupported */
enum { POOL_POLL, POOL_REUSE, POOL_IDLE, POOL_ISSUE }; /* reclaim's `wait` */
struct pool_upstream {
    int (*alloc)(void *ctx, int dev, size_t size, uintptr_t *out);
    int (*release)(void *ctx, int dev, uintptr_t ptr, size_t size);
    /* A device-wide synchronization; non-zero if it could not be done
     * (e.g. a stream capture is in progress): the pool then grows. */
    int (*sync)(void *ctx, int dev);
    /* Optional: make pending frees reusable without a device-wide
     * synchronization, by whatever the upstream knows has completed (it
     * calls pool_synced for it). `wait`: POOL_POLL, only look;
     * POOL_REUSE, first wait for the oldest thing outstanding - or, with
     * ordered reuse, issue a barrier (pool_issued) and return; POOL_IDLE,
     * wait as with POOL_REUSE, even with ordered reuse; POOL_ISSUE, only
     * with ordered reuse: issue a barrier if anything was freed since the
     * last, never wait (0 without ordered reuse). 1: something
     * became reusable (or idle); 0: nothing did (or nothing is
     * outstanding), and a synchronization is the way left. */
    int (*reclaim)(void *ctx, int dev, int wait);
    void *ctx;
    /* Optional: virtual memory. With `page` set (the physical granularity;
     * all of the functions below present), segments for large requests are
     * address ranges (reserve) whose pages the pool backs with physical
     * memory only where blocks need it (map). Before it creates more than
     * the program's peak, the pool unmaps memory lying wholly in free
     * blocks and gives it back (or maps it again where a run of the same
     * size needs it): memory freed in a hole then serves a request of any
     * size, and what the pool holds stays close to what the program uses.
     * Only memory of reusable free blocks is unmapped, never memory GPU
     * work may still touch. */
    size_t page;
    /* The most one mapping covers, a multiple of page (smaller: page).
     * The driver's cost is per mapping, not per byte; but a handle is
     * unmapped only whole, and one a live block covers in part stays. */
    size_t chunk;
    /* POOL_NO_VMM: not on this device; the pool takes a plain segment. */
    int (*reserve)(void *ctx, int dev, size_t size, uintptr_t *out);
    int (*unreserve)(void *ctx, int dev, uintptr_t va, size_t size);
    /* Physical memory of `size` bytes (a multiple of page), mapped once
     * as a whole, and given back whole; on failure *handle is left as it
     * was. */
    int (*create)(void *ctx, int dev, size_t size, uint64_t *handle);
    int (*destroy)(void *ctx, int dev, uint64_t handle);
    /* Map `handle` (all of its `size` bytes) at va, accessible to the
     * device and its peers; all or nothing. */
    int (*map)(void *ctx, int dev, uintptr_t va, size_t size,
               uint64_t handle);
    /* Unmap what one map() put at va. */
    int (*unmap)(void *ctx, int dev, uintptr_t va, size_t size);
    /* The upstream maps a handle at a second address while the first
     * mapping stays (the driver does): then memory unmapped from a free
     * block is mapped again elsewhere at once, and the unmap of its old
     * address - a driver call as dear as the map - waits until a thread is
     * about to wait for the GPU anyway (see pool_vmm.c, "Deferred
     * unmaps"). */
    bool alias;
    /* Synchronizations cost nothing (a model: whatif): the pool does not
     * time them, so that its decisions do not depend on the host's clock. */
    bool sync_free;
    /* With page 0 and the virtual memory functions above: each large
     * segment is one mapping of one handle (reserve, create, map) instead
     * of an alloc, and goes back (unmap, destroy, unreserve) once no GPU
     * work can touch it - without the device-wide synchronization a
     * release makes. Then a whole free segment of POOL_WHOLE_KEEP or more
     * is not cut for a request of half its size or less: given back, a
     * segment of the request's size takes its place. */
    bool whole;
};

/* What the pool did, for the trace. May be NULL. Called with an arena
 * lock held: must not call back into the pool. */
struct pool_observer {
    void (*segment_alloc)(void *ctx, int dev, uintptr_t addr, size_t size);
    void (*segment_free)(void *ctx, int dev, uintptr_t addr, size_t size);
    void (*free_completed)(void *ctx, int dev, uintptr_t addr, size_t size);
    void (*synced)(void *ctx, int dev, int result);
    void *ctx;
};

struct pool_stats {
    uint64_t reserved;      /* bytes in segments (backed by memory) */
    uint64_t allocated;     /* bytes in blocks handed out (rounded) */
    uint64_t requested;     /* bytes the program asked for, live */
    uint64_t pending;       /* freed, not yet reusable */
    uint64_t free_bytes;    /* reusable now */
    uint64_t largest_free;  /* largest reusable block */
    uint64_t free_blocks;   /* number of reusable blocks */
    uint64_t segments;
    uint64_t syncs;         /* synchronizations the pool issued */
    uint64_t promotions;    /* times pending blocks became reusable */
    uint64_t adopted;       /* free segments moved to another arena */
    uint64_t lent;          /* blocks served from another thread's arena */
    uint64_t spread;        /* threads moved off the shared arena */
    /* virtual memory (pool_upstream.page): */
    uint64_t page_maps;     /* pages mapped */
    uint64_t page_unmaps;   /* pages unmapped */
    uint64_t pages_created; /* physical pages created */
    uint64_t pages_taken;   /* pages another arena's free blocks gave */
    uint64_t map_calls, unmap_calls; /* mappings made and undone */
    uint64_t page;          /* bytes per page */
    uint64_t page_ns;       /* time in them and in creating pages */
    uint64_t destroys;      /* physical allocations given back */
    /* of page_ns: creating, mapping (with access), unmapping where the
     * pool needed the memory, unmapping before waits (deferred), giving
     * back */
    uint64_t create_ns, map_ns, unmap_ns, deferred_ns, destroy_ns;
    uint64_t deferred_calls; /* of unmap_calls: made before a wait */
    uint64_t idle_waits;     /* ordered reuse: waits to unmap or give back */
};

struct pool_block_info {
    uintptr_t addr, seg_base;
    size_t size, requested, seg_size;
    int device;
    bool mapped; /* in an address range the pool maps piece by piece: no
                    IPC handle can name it */
};

struct pool;

struct pool *pool_create(const struct pool_upstream *up,
                         const struct pool_observer *obs);
/* Serve `size` bytes on `dev` from arena `arena_hint`. 0: *out is the
 * block; otherwise the CUDA error (cudaErrorMemoryAllocation = 2), and
 * *out is left alone. A size of 0 gets a block of POOL_ROUND bytes; one
 * above POOL_MAX_REQUEST fails at once, asking the upstream nothing. */
int pool_alloc(struct pool *p, int dev, unsigned arena_hint, size_t size,
               uintptr_t *out);
/* Free a block. POOL_NOT_MINE: not a pool address (pass it on);
 * POOL_INVALID: inside a pool segment but not a live block (a double or
 * interior free); 0: now pending. *dev gets the block's device. */
enum { POOL_NOT_MINE = -1, POOL_INVALID = -2 };
int pool_free(struct pool *p, uintptr_t ptr, int *dev);
/* A device-wide synchronization (or an event covering the device) is
 * about to start / has completed: every block freed before the snapshot
 * is reusable. A snapshot advances the device's epoch. */
struct pool_snapshot {
    uint64_t epoch;
};
void pool_sync_snapshot(struct pool *p, int dev, struct pool_snapshot *s);
/* Was anything freed on dev since the last snapshot? A hint: it may say
 * yes when the answer is no, never the reverse when no snapshot races. */
bool pool_freed_since_snapshot(struct pool *p, int dev);
/* The snapshot just taken will not be followed by a synchronization: let
 * pool_freed_since_snapshot say yes again. */
void pool_snapshot_abandoned(struct pool *p, int dev);
void pool_synced(struct pool *p, int dev, const struct pool_snapshot *s);
/* Ordered reuse: a barrier that all later GPU work will wait for was
 * issued after snapshot s: its frees may be handed out again (reused in
 * place), not yet unmapped or given back. */
void pool_issued(struct pool *p, int dev, const struct pool_snapshot *s);
/* Give back every segment with nothing allocated in it (after making
 * pending blocks reusable if a synchronization is allowed). */
void pool_trim(struct pool *p, int dev);
/* Synchronize every device the pool has, unless nothing was freed since
 * the last synchronization: then every free is idle. false if one could
 * not be made. */
bool pool_settle(struct pool *p);
void pool_stats(struct pool *p, int dev, struct pool_stats *out);
/* Bytes the pool holds on dev that the program could get: reserved minus
 * allocated (reusable and pending). */
uint64_t pool_idle(struct pool *p, int dev);
/* Describe the live block or segment containing ptr; false if none. */
bool pool_lookup(struct pool *p, uintptr_t ptr, struct pool_block_info *out);
/* Drop everything on dev without giving it back: the device is being
 * reset, and the driver frees its allocations - but not virtual memory
 * (measured on an H100). *left gets the device's mappings, handles and
 * address ranges (virtual memory: whole-mapped segments, mapped pages,
 * parked handles, queued unmaps), for pool_leftover_release after the
 * reset. */
struct pool_range {
    uintptr_t va;
    size_t size;
};
struct pool_leftover {
    struct pool_range *unmap, *unreserve;
    uint64_t *destroy;
    size_t nunmap, nunreserve, ndestroy, cap[3];
};
void pool_forget_device(struct pool *p, int dev, struct pool_leftover *left);
/* Give `left` back through the pool's upstream: every unmap, then every
 * handle, then every address range; then free its lists. */
void pool_leftover_release(struct pool *p, int dev, struct pool_leftover *left);
/* At exit: synchronize once and give back every segment nothing lives in.
 * Segments holding blocks the program never freed stay (the driver frees
 * them with the process); the pool keeps working for late callers. */
void pool_release_all(struct pool *p);
/* Forget the most the program has asked for at once (page mode grows up
 * to it before it moves memory): for a pool emptied and used again for
 * another program (whatif's models). */
void pool_reset_peak(struct pool *p);
/* Check every invariant; returns a description of the first violation,
 * or NULL. For tests. Takes all locks. */
const char *pool_check(struct pool *p);

#endif /* GMT_POOL_H */
