/* pool_internal.h - what the files of the caching pool share.
 *
 * pool.c decides: arenas, allocation and free, pending frees, growth,
 * statistics and the entry points of pool.h; pool_vmm.c backs large
 * segments with pages mapped on demand (virtual memory); pool_sync.c
 * decides when to synchronize and moves the marks pending blocks wait
 * for; pool_trim.c gives memory back. pool_index.c holds the data
 * structures under them, which decide nothing: size bins, block structs,
 * the per-arena address map and the lock-free segment index. pool_check.c
 * checks the invariants (tests). Nothing outside the pool includes this
 * header. Below the types, what each file defines for the others is
 * grouped under its name, so this header is the pool's map.
 *
 * The helpers on the fast path (bin lookup, the address map, block
 * structs) are static inline here so that pool.c still inlines them, as
 * when they were static to it. The functions the files share are hidden
 * from the library's users, and declared so here (-fvisibility=hidden
 * covers only definitions) so that the compiler knows its calls stay
 * inside.
 */
#ifndef GMT_POOL_INTERNAL_H
#define GMT_POOL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define POOL_HIDDEN __attribute__((visibility("hidden")))

#define NLINEAR 128                 /* 512-byte bins up to 64 KiB */
#define NBINS (NLINEAR + 48 * 16)   /* then 16 per power of two */
#define BIN_WORDS ((NBINS + 63) / 64)

/* B_BACKING: taken, not yet handed out, while the thread that took it
 * waits (its arena unlocked) for pages to back it (pool_vmm.c,
 * pool_back_block). */
enum { B_FREE = 1, B_ALLOC = 2, B_PENDING = 3, B_BACKING = 4 };

struct seg;

struct blk {
    uintptr_t addr;
    size_t size;               /* block size, a multiple of POOL_ROUND */
    size_t req;                /* bytes requested (allocated blocks) */
    struct blk *prev, *next;   /* neighbours in the segment */
    struct blk *lprev, *lnext; /* bin list, pending FIFO or spare list */
    struct seg *seg;
    uint64_t tag;              /* pending: the device's free counter */
    uint16_t bin;
    uint8_t state;
};

struct seg {
    uintptr_t base;
    size_t size;
    size_t busy;               /* bytes allocated or pending */
    struct seg *snext, *sprev;
    struct blk *first;
    /* A mapped segment (virtual memory): the physical page behind each
     * page of its range, 0 where none is mapped; NULL for a plain one. */
    uint64_t *pages;
    size_t nmapped;
    uint64_t ftag; /* the tag of its latest free (ordered reuse) */
    uint64_t handle; /* pool_upstream.whole: the one handle mapped over it */
    int dev;
    uint8_t large, arena;
};

struct bins {
    uint64_t map[BIN_WORDS];
    struct blk *head[NBINS];
};

struct entry {
    uintptr_t key; /* 0: empty */
    struct blk *b;
};

/* Live blocks of one arena by address: open addressing, under the lock. */
struct addrmap {
    struct entry *tab;
    size_t cap, n; /* cap: power of two */
};

struct pdev;

/* Everything a thread touches on its fast path lives in its arena, so
 * threads on different arenas share no written cache line. */
struct arena {
    pthread_mutex_t lock;
    uint32_t contended; /* times a thread found the lock taken (a window) */
    uint32_t locks;     /* acquisitions in the window, under the lock */
    struct pdev *d;            /* its device: the epoch and safe marks */
    struct bins small, large;
    struct blk *pend_head, *pend_tail;
    struct seg *segs;
    struct blk *spare;
    struct addrmap map;
    /* On its own cache line: the owner updates the counters on every
     * call; other threads only read them. */
    _Alignas(64) uint64_t reserved; /* counters: read unlocked by others */
    uint64_t allocated, requested, pending, free_bytes, nsegs, promotions;
    uint64_t adopted, lent; /* segments it took from others; blocks it gave */
    uint64_t unbacked; /* bytes of its segments with no page mapped */
    uint64_t syncs;   /* synchronizations this arena's threads made */
    uint64_t sync_ns; /* what they cost, moving average */
} __attribute__((aligned(64)));

/* A device. A freed block is tagged with the device's epoch; a snapshot
 * (taken before a synchronization or a fence) advances the epoch, and when
 * that synchronization has completed, `safe` moves past every tag drawn
 * before it. Frees only read the epoch's line and promotions only `safe`'s:
 * both change once per synchronization, not per call. (Free counters per
 * arena, which every synchronization read and every safe mark per arena,
 * which it wrote, made the owners' lines bounce between cores.) */
struct pspare {
    uint64_t h; /* a physical allocation of n pages, mapped nowhere */
    size_t n;
};

/* A mapping taken out of the pool's books whose cuMemUnmap has not been
 * made yet (pool_vmm.c, "Deferred unmaps"); its handle may be mapped
 * elsewhere already. */
struct pdefer {
    uintptr_t va;
    size_t size;
    uint64_t h;
    uint64_t tag; /* unmapped once `safe` passes it: its segment's last free */
};
#define DEFER_MAX 256

struct pdev {
    struct arena arenas[POOL_ARENAS];
    /* The arena of each thread slot (arena hint): 0, shared, until that
     * arena's lock has been found taken POOL_SPREAD_AFTER times; then the
     * slot's own. Written once per slot. */
    _Alignas(64) uint8_t home[POOL_ARENAS];
    _Alignas(64) uint64_t epoch;  /* tag of a free now */
    uint32_t dirty;               /* a free since the last snapshot (a hint) */
    _Alignas(64) uint64_t safe;   /* tags below this are idle */
    uint64_t issued;              /* ordered reuse: below this, reusable */
    /* Virtual memory: physical pages mapped nowhere (taken from a trimmed
     * segment, or unmapped for a request that then failed), and what the
     * device's pages did. A leaf lock, held for no upstream call. */
    _Alignas(64) pthread_mutex_t page_lock;
    struct pspare *spare;
    size_t nspare, spare_cap;
    uint64_t spare_pages;
    uint64_t maps, unmaps, created, taken, map_calls, unmap_calls, page_ns;
    uint64_t destroys, create_ns, map_ns, unmap_ns, deferred_ns, destroy_ns;
    uint64_t deferred_calls, idle_waits;
    /* the most requested at once, as pool_back_block saw it */
    uint64_t peak_req;
    /* Unmaps not made yet. Taken after an arena's lock, before page_lock;
     * held across the driver calls that make them, so that nobody maps
     * at an address whose old mapping is still there. */
    _Alignas(64) pthread_mutex_t defer_lock;
    unsigned ndefer;
    int dev;
    struct pdefer defer[DEFER_MAX];
};

/* Segments by base address, for frees: read without any lock under a
 * sequence counter (seqlock), written under seg_lock when segments come
 * and go. Segment structs are recycled, never freed, so a reader that
 * races a change reads stale but valid memory, and retries. */
#define MAX_SEGMENTS (1u << 20)

/* An index entry carries what a free needs (address range, device,
 * owning arena), so a search never reads the segment structs, whose busy
 * counts their owners write on every allocation. */
struct segref {
    uintptr_t base;
    size_t size;
    struct seg *s;
    int32_t dev;
    uint32_t arena;
};

struct pool {
    struct pool_upstream up;
    struct pool_observer obs;
    struct pdev *dev[POOL_MAX_DEVICES];
    pthread_mutex_t dev_lock;
    pthread_mutex_t seg_lock;
    uint64_t seg_seq;       /* odd while the index changes */
    struct segref *segidx;  /* MAX_SEGMENTS slots, reserved lazily */
    size_t nseg;
    struct seg *seg_spare;
};

/* ---- size bins (pool_index.c) ------------------------------------------ */

static inline unsigned bin_of(size_t size)
{
    if (size <= (size_t)NLINEAR * POOL_ROUND)
        return (unsigned)(size / POOL_ROUND) - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    unsigned sub = (unsigned)(size >> (k - 4)) & 15u;
    unsigned b = NLINEAR + (k - 16) * 16 + sub;
    return b < NBINS ? b : NBINS - 1;
}

/* Put free block b in its bin, after the blocks smaller or lower. */
POOL_HIDDEN void bin_insert(struct bins *bs, struct blk *b);
POOL_HIDDEN void bin_remove(struct bins *bs, struct blk *b);

/* Smallest free block of at least `size`. */
static inline struct blk *bin_find(struct bins *bs, size_t size)
{
    unsigned i = bin_of(size);
    for (unsigned w = i / 64; w < BIN_WORDS; w++) {
        uint64_t m = bs->map[w];
        if (w == i / 64)
            m &= ~0ull << (i % 64);
        while (m) {
            unsigned bin = w * 64 + (unsigned)__builtin_ctzll(m);
            m &= m - 1;
            for (struct blk *b = bs->head[bin]; b; b = b->lnext)
                if (b->size >= size)
                    return b;
        }
    }
    return NULL;
}

/* ---- block structs (arena locked) --------------------------------------- */

static inline struct blk *blk_new(struct arena *a)
{
    struct blk *b = a->spare;
    if (b)
        a->spare = b->lnext;
    else if ((b = malloc(sizeof *b)) == NULL)
        return NULL;
    memset(b, 0, sizeof *b);
    return b;
}

static inline void blk_put(struct arena *a, struct blk *b)
{
    b->lnext = a->spare;
    a->spare = b;
}

/* ---- an arena's live blocks by address (pool_index.c; arena locked) --- */

static inline size_t slot_of(uintptr_t key, size_t cap)
{
    return (size_t)(((uint64_t)key * 0xff51afd7ed558ccdull) >> 17) & (cap - 1);
}

/* Double the table (first: 256 slots); false without host memory. */
POOL_HIDDEN bool map_grow(struct addrmap *m);

static inline bool map_put(struct addrmap *m, uintptr_t key, struct blk *b)
{
    if ((m->n + 1) * 10 > m->cap * 7 && !map_grow(m))
        return false;
    size_t j = slot_of(key, m->cap);
    while (m->tab[j].key)
        j = (j + 1) & (m->cap - 1);
    m->tab[j] = (struct entry){key, b};
    m->n++;
    return true;
}

static inline size_t map_find(const struct addrmap *m, uintptr_t key)
{
    if (m->cap == 0)
        return SIZE_MAX;
    size_t j = slot_of(key, m->cap);
    while (m->tab[j].key && m->tab[j].key != key)
        j = (j + 1) & (m->cap - 1);
    return m->tab[j].key == key ? j : SIZE_MAX;
}

static inline struct blk *map_get(const struct addrmap *m, uintptr_t key)
{
    size_t j = map_find(m, key);
    return j == SIZE_MAX ? NULL : m->tab[j].b;
}

/* Remove key; returns its block or NULL. Backward-shift deletion keeps
 * probe sequences intact without tombstones. */
static inline struct blk *map_take(struct addrmap *m, uintptr_t key)
{
    size_t j = map_find(m, key);
    if (j == SIZE_MAX)
        return NULL;
    struct blk *b = m->tab[j].b;
    size_t hole = j;
    for (;;) {
        j = (j + 1) & (m->cap - 1);
        if (m->tab[j].key == 0)
            break;
        size_t home = slot_of(m->tab[j].key, m->cap);
        /* move j back into the hole if its home is not in (hole, j] */
        if (((j - home) & (m->cap - 1)) >= ((j - hole) & (m->cap - 1))) {
            m->tab[hole] = m->tab[j];
            hole = j;
        }
    }
    m->tab[hole].key = 0;
    m->tab[hole].b = NULL;
    m->n--;
    return b;
}

/* ---- the segment index (pool_index.c) ---------------------------------- */

/* A segment struct, zeroed: a recycled one or a new one; NULL without
 * host memory. */
POOL_HIDDEN struct seg *seg_new(struct pool *p);
/* Enter s (base, size, dev and arena set) into the index; false if the
 * index could not be reserved or is full. */
POOL_HIDDEN bool segidx_add(struct pool *p, struct seg *s);
/* Take s out of the index and recycle it. */
POOL_HIDDEN void segidx_remove(struct pool *p, struct seg *s);
/* s changes owner: the struct and its index entry together. */
POOL_HIDDEN void segidx_set_arena(struct pool *p, struct seg *s,
                                  unsigned arena);
/* The index entry of the segment containing ptr, lock-free; false if
 * none. It is only as good as the moment of the search: callers confirm
 * under the arena lock. */
POOL_HIDDEN bool segidx_find(struct pool *p, uintptr_t ptr,
                             struct segref *out);

/* ---- shared by the pool's files ----------------------------------------- */

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define ADD(x, v) STORE(x, LOAD(x) + (v)) /* writers hold the arena lock */
#define BUMP(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)

#define RECLAIM_MAX 256            /* fence waits per request, at most */
#define VMM_ARENA 0                /* where mapped segments live */

static inline struct bins *pool_bins_for(struct arena *a, bool large)
{
    return large ? &a->large : &a->small;
}

static inline bool pool_is_large(size_t size)
{
    return size > POOL_SMALL_MAX;
}

/* Threads share arena 0 until its lock has been found taken this often
 * within POOL_SPREAD_WINDOW acquisitions (a rate: rare overlaps over a
 * long run do not add up): then each thread moves to its own, as it next
 * allocates (pool_alloc). */
#define POOL_SPREAD_AFTER 64
#define POOL_SPREAD_WINDOW 4096

static inline bool pool_lock_arena(struct arena *a, bool wait)
{
    if (pthread_mutex_trylock(&a->lock) != 0) {
        if (!wait)
            return false;
        __atomic_fetch_add(&a->contended, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&a->lock);
    }
    if (++a->locks == POOL_SPREAD_WINDOW) { /* under the lock */
        a->locks = 0;
        if (__atomic_load_n(&a->contended, __ATOMIC_RELAXED) < POOL_SPREAD_AFTER)
            __atomic_store_n(&a->contended, 0, __ATOMIC_RELAXED);
    }
    return true;
}

static inline bool pool_vmm_on(const struct pool *p)
{
    return p->up.page != 0;
}

/* The device's pool, or NULL if it has none (pool_get_dev makes one). */
static inline struct pdev *pool_dev_of(struct pool *p, int dev)
{
    return dev >= 0 && dev < POOL_MAX_DEVICES
               ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
               : NULL;
}

/* ---- pool.c: entry points, serving requests, the reuse decision --------- */

/* The device's pool, made on first use; NULL if dev is out of range or
 * there is no host memory for it. */
POOL_HIDDEN struct pdev *pool_get_dev(struct pool *p, int dev);
/* Move every pending block the device's marks have passed to the free
 * bins. Arena locked. */
POOL_HIDDEN void pool_promote(struct pool *p, struct arena *a, int dev);
/* Hand out `size` bytes of free block b and back its pages; NULL if they
 * could not be (the CUDA error in *err, if err is not NULL). Arena
 * locked. */
POOL_HIDDEN struct blk *pool_take_backed(struct pool *p, struct arena *a,
                                         struct blk *b, size_t size,
                                         size_t req, int *err);
/* Enter a block just taken into the arena's address map (arena locked);
 * without host memory it goes back as pending (b->state says so). */
POOL_HIDDEN void pool_publish(struct arena *a, struct blk *b);

/* ---- pool_vmm.c: pages behind mapped segments, deferred unmaps ---------- */

/* Back every page block b (just taken, arena a locked) touches with
 * physical memory; 0 or a CUDA error. */
POOL_HIDDEN int pool_back_block(struct pool *p, struct arena *a,
                                struct blk *b);
/* Best fit among a's large free blocks, weighing the pages each would
 * need mapped (*missing). Arena locked. */
POOL_HIDDEN struct blk *pool_fit(struct pool *p, struct bins *bs, size_t size,
                                 size_t *missing);
/* Bytes of free block b that memory is behind. Arena locked. */
POOL_HIDDEN uint64_t pool_backed(const struct pool *p, const struct blk *b);
/* A large request in VMM_ARENA; NULL: not served there. */
POOL_HIDDEN struct blk *pool_alloc_mapped(struct pool *p, struct pdev *d,
                                          int dev, size_t size, size_t req);
/* The thread is about to wait for the GPU: make the queued unmaps. */
POOL_HIDDEN void pool_before_wait(struct pool *p, struct pdev *d);
/* Give a segment out of its arena and the index back to upstream (a
 * mapped one's handles parked with `park`; a whole-mapped one's handle). */
POOL_HIDDEN void pool_release_segment(struct pool *p, struct pdev *d, int dev,
                                      uintptr_t base, size_t size,
                                      uint64_t *pages, uint64_t handle,
                                      uint64_t ftag, bool park);
/* pool_upstream.whole: a segment of `size` bytes as one mapping of one
 * handle at *base. 0, POOL_NO_VMM (not on this device: take a plain one)
 * or the CUDA error. */
POOL_HIDDEN int pool_whole_create(struct pool *p, struct pdev *d, int dev,
                                  size_t size, uintptr_t *base,
                                  uint64_t *handle);
/* Give every parked handle of d back to the driver. */
POOL_HIDDEN void pool_spare_drain(struct pool *p, struct pdev *d, int dev);

/* ---- pool_sync.c: when to synchronize; snapshots and marks -------------- */

/* One device-wide synchronization on behalf of the pool; true if the
 * safe mark covers every free before the call. */
POOL_HIDDEN bool pool_sync(struct pool *p, struct pdev *d, struct arena *own,
                           int dev);
/* Pending bytes that make a synchronization worth it for a request of
 * `size` from arena own. */
POOL_HIDDEN uint64_t pool_sync_worth(struct arena *own, size_t size);
POOL_HIDDEN uint64_t pool_pending_bytes(struct pdev *d);
/* Would a synchronization create a free block of at least `size` and
 * less than `below`? */
POOL_HIDDEN bool pool_pending_could_fit(struct pdev *d, unsigned own,
                                        size_t size, size_t below);
/* May a thread wait for its n-th fence, having started at epoch upto? */
POOL_HIDDEN bool pool_may_wait(struct pool *p, struct pdev *d, uint64_t upto,
                               int n);

/* ---- pool_trim.c: giving memory back ------------------------------------ */

/* Give back fully free segments of dev (only large or small ones with
 * `only`); returns how many plain ones went. */
POOL_HIDDEN int pool_trim_class(struct pool *p, struct pdev *d, int dev,
                                bool only, bool large);
/* Every fully free segment and parked handle of dev. */
POOL_HIDDEN void pool_trim_device(struct pool *p, struct pdev *d, int dev);

#endif /* GMT_POOL_INTERNAL_H */
