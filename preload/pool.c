/* pool.c - the caching pool's core: allocation, free, and when a freed
 * block may be handed out again.
 *
 * Layout. A device's pool has POOL_ARENAS arenas. An arena owns segments
 * (memory taken from upstream); a segment is cut into blocks listed in
 * address order, so that a freed block merges with free neighbours. Free
 * blocks sit in size bins (linear 512-byte bins up to 64 KiB, then 16 bins
 * per power of two), each bin sorted by size then address: the first block
 * that fits, searching upward from the request's bin, is the best fit.
 * Small requests (<= 1 MiB) and large ones use separate bins and separate
 * segments, as PyTorch does, so small blocks never fragment large segments.
 *
 * Pending frees. A freed block waits in its arena's FIFO with a tag: the
 * device's epoch when it was freed. A snapshot taken before a device-wide
 * synchronization (or a fence, fence.c) advances the epoch; when the
 * synchronization has completed, the device's safe mark moves past every
 * tag drawn before it and the block is promoted - merged and binned - by
 * the next thread that takes the arena's lock. See pool.h for the rule.
 *
 * IPC. cudaIpcGetMemHandle names a whole segment; the caller refuses it
 * for a block that does not start its segment (pool_lookup tells). Large
 * requests that need a new segment get it to themselves, so a tensor
 * shared right after allocation usually qualifies; placing every large
 * block at a segment start instead was measured to more than double the
 * memory a transformer keeps reserved, so blocks are best-fit anywhere.
 *
 * Serving a request (pool_alloc, read top-down below): a large one with
 * virtual memory first in the arena of mapped segments (pool_vmm.c); then
 * the thread's own arena - where a large request's best free fit is
 * loose and pending memory would fit it better, after waiting for that
 * memory; what completed fences cover; pending memory
 * made reusable, when what it would release is worth a wait (pool_sync.c
 * decides); whole free segments of other arenas, then their blocks; a
 * new segment - after giving back empty large segments that did not fit
 * (pool_trim.c); out of memory, one synchronization and a trim, then a
 * new segment again.
 *
 * Files. This file holds the entry points and decides what to hand out.
 * The rest of the pool is split by concern, each file opening with what
 * it owns: pool_vmm.c backs large segments with pages mapped where blocks
 * need them (virtual memory, GPUMEMTRACE_POOL_VMM); pool_sync.c decides
 * when a synchronization is worth its stall and moves the device marks
 * that pending blocks wait for; pool_trim.c gives memory back. The data
 * structures - size bins, block structs, the address map, the segment
 * index - are in pool_index.c, their fast paths inline in
 * pool_internal.h with the types all share; pool_check.c checks the
 * invariants, for tests. pool_internal.h declares what the files share,
 * grouped under the file that defines it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"

#define LARGE_SPLIT_MIN (1u << 20)  /* large remainders below this stay */
#define LARGE_END_MIN (384u << 10)  /* but a segment's free end splits */
#define STEAL_MIN (8u << 20)

/* Defined below the entry points that use them, to read top-down. */
static struct blk *try_arena(struct pool *p, struct arena *a, int dev,
                             size_t size, size_t req);
static struct blk *try_tail(struct pool *p, struct arena *a, int dev,
                            size_t size, size_t req);
static struct blk *try_others(struct pool *p, struct pdev *d, int dev,
                              unsigned own, size_t size, size_t req, bool wait);
static struct blk *try_all(struct pool *p, struct pdev *d, int dev,
                           unsigned own, size_t size, size_t req);
static struct blk *try_tight(struct pool *p, struct arena *a, int dev,
                             size_t size, size_t req, size_t *loose);
static struct blk *reclaim_retry(struct pool *p, struct pdev *d, int dev,
                                 unsigned ai, size_t size, size_t req,
                                 bool all);
static int grow(struct pool *p, struct pdev *d, int dev, unsigned ai,
                size_t size, size_t req, struct blk **out);
static void retire_locked(struct arena *a, struct blk *b);
static void make_free(struct arena *a, struct blk *b);
static struct blk *take(struct arena *a, struct blk *b, size_t size,
                        size_t req);
static size_t segment_size(size_t size, bool mapped);

/* ---- devices ------------------------------------------------------------ */

struct pool *pool_create(const struct pool_upstream *up,
                         const struct pool_observer *obs)
{
    struct pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->up = *up;
    if (!up->reserve || !up->unreserve || !up->create || !up->destroy ||
        !up->map || !up->unmap || (up->page & (up->page - 1)) ||
        up->page < POOL_ROUND)
        p->up.page = 0; /* no virtual memory: plain segments */
    if (p->up.page || !up->reserve || !up->unreserve || !up->create ||
        !up->destroy || !up->map || !up->unmap)
        p->up.whole = false; /* pages that move, or no virtual memory */
    if (p->up.page && p->up.chunk < p->up.page)
        p->up.chunk = p->up.page;
    p->up.chunk -= p->up.page ? p->up.chunk % p->up.page : 0;
    if (obs)
        p->obs = *obs;
    pthread_mutex_init(&p->dev_lock, NULL);
    pthread_mutex_init(&p->seg_lock, NULL);
    return p;
}

struct pdev *pool_get_dev(struct pool *p, int dev)
{
    if (dev < 0 || dev >= POOL_MAX_DEVICES)
        return NULL;
    struct pdev *d = __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE);
    if (d)
        return d;
    pthread_mutex_lock(&p->dev_lock);
    d = p->dev[dev];
    if (d == NULL && (d = aligned_alloc(64, sizeof *d)) != NULL) {
        memset(d, 0, sizeof *d);
        /* brief critical sections: spin a little before sleeping */
        pthread_mutexattr_t at;
        pthread_mutexattr_init(&at);
        pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ADAPTIVE_NP);
        for (int i = 0; i < POOL_ARENAS; i++) {
            pthread_mutex_init(&d->arenas[i].lock, &at);
            d->arenas[i].d = d;
        }
        pthread_mutexattr_destroy(&at);
        pthread_mutex_init(&d->page_lock, NULL);
        pthread_mutex_init(&d->defer_lock, NULL);
        d->dev = dev;
        __atomic_store_n(&p->dev[dev], d, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->dev_lock);
    return d;
}

/* ---- allocation --------------------------------------------------------- */

int pool_alloc(struct pool *p, int dev, unsigned arena_hint, size_t req,
               uintptr_t *out)
{
    struct pdev *d = pool_get_dev(p, dev);
    if (d == NULL)
        return 2;
    if (req > POOL_MAX_REQUEST)
        return 2; /* rounded up below, it would wrap to a small block */
    size_t size = (req + POOL_ROUND - 1) & ~(size_t)(POOL_ROUND - 1);
    if (size == 0)
        size = POOL_ROUND;
    /* One arena serves every thread until threads contend for it: PyTorch's
     * forward thread and its autograd thread take turns, and arenas of
     * their own held 1.04-1.40x the memory one would (the live corpus,
     * replayed: the backward pass could not reuse what the forward pass
     * freed in the other arena). Once threads contend for it (pool_lock_arena
     * counts), every thread slot moves to an arena of its own as it next
     * allocates, and threads scale as before (bench_pool). */
    unsigned slot = arena_hint % POOL_ARENAS;
    unsigned ai = __atomic_load_n(&d->home[slot], __ATOMIC_RELAXED);
    if (ai != slot &&
        __atomic_load_n(&d->arenas[ai].contended, __ATOMIC_RELAXED) >= POOL_SPREAD_AFTER) {
        ai = slot;
        __atomic_store_n(&d->home[slot], (uint8_t)slot, __ATOMIC_RELAXED);
    }
    struct blk *b = NULL;
    /* Ordered reuse: a large request chooses among every block freed so
     * far - a barrier now, if anything was freed since the last - not
     * only among those an earlier barrier covers. The best fit among all
     * frees held 1.04-1.18x the peak requested in replays of the live
     * corpus (docs/benchmarks.md), among the covered ones 1.05-1.71x.
     * Without ordered reuse the upstream answers 0 at once. */
    if (pool_is_large(size) && p->up.reclaim && __atomic_load_n(&d->dirty, __ATOMIC_RELAXED))
        p->up.reclaim(p->up.ctx, dev, POOL_ISSUE);
    if (pool_vmm_on(p) && pool_is_large(size)) {
        ai = VMM_ARENA;
        b = pool_alloc_mapped(p, d, dev, size, req);
    }
    struct arena *own = &d->arenas[ai];
    /* A large request whose best free fit is loose - cutting it would
     * leave twice the request free beside it, and at least what makes a
     * wait worth it - waits for pending memory that fits it better, if
     * there is any: memory freed a moment ago usually fits the next
     * request of its kind, and cutting the request from a larger free
     * block instead (a segment just emptied) scatters the next pass's
     * blocks over it, so that the next request of that segment's size
     * finds no room (GPT-2 inference held 2.1x the memory it used; with
     * the rule, 1.05x: docs/benchmarks.md, whatif). With fences the wait
     * is for the oldest fence, then the best fit, whatever it is: waiting
     * on until a tighter block came cost GPT-2 inference 6% of its step
     * time for 6% of its memory (measured on an H200). */
    size_t loose = 0;
    if (b == NULL && pool_is_large(size) && !pool_vmm_on(p)) {
        uint64_t w = pool_sync_worth(own, size);
        loose = w > 2 * size ? w : 2 * size;
    }
    if (b == NULL)
        b = try_tight(p, own, dev, size, req, &loose);
    if (b == NULL && loose && pool_pending_could_fit(d, ai, size, loose))
        b = reclaim_retry(p, d, dev, ai, size, req, false);
    if (b == NULL && loose)
        b = try_arena(p, own, dev, size, req); /* the loose fit after all */
    /* What completed fences cover is reusable for a query each. */
    if (b == NULL && p->up.reclaim && p->up.reclaim(p->up.ctx, dev, POOL_POLL) > 0)
        b = try_arena(p, own, dev, size, req);
    /* Only pending memory could serve this: wait until it is reusable.
     * The thread's own arena first, so threads that free what they
     * allocate never touch the others. */
    uint64_t worth = pool_sync_worth(own, size);
    if (b == NULL && LOAD(own->pending) >= worth)
        b = reclaim_retry(p, d, dev, ai, size, req, false);
    if (b == NULL)
        b = try_others(p, d, dev, ai, size, req, false);
    if (b == NULL && pool_pending_bytes(d) >= worth)
        b = reclaim_retry(p, d, dev, ai, size, req, true);
    if (b == NULL && pool_pending_could_fit(d, ai, size, SIZE_MAX))
        b = reclaim_retry(p, d, dev, ai, size, req, true);
    /* About to grow a small segment: a large segment's rounding tail
     * (below) serves it instead, if there is one. */
    if (b == NULL && !pool_is_large(size))
        b = try_tail(p, own, dev, size, req);
    /* About to grow a large segment: large segments with nothing in them
     * did not fit, and small ones never serve it; give them back first
     * rather than hold both. (The small ones too: resnet50 training held
     * six empty 2 MiB segments at its peak; in replays of the live
     * corpus, every trace the same or less, resnet50 1.056x -> 1.054x the
     * peak requested with ordered reuse, 1.130x -> 1.082x by the default
     * rule, for 2 more segments given back a step; docs/benchmarks.md.) */
    if (b == NULL && pool_is_large(size)) {
        int released = pool_trim_class(p, d, dev, true, true);
        released += pool_trim_class(p, d, dev, true, false);
        if (released)
            b = try_all(p, d, dev, ai, size, req); /* a release synchronized */
    }
    int r = 0;
    if (b == NULL && (r = grow(p, d, dev, ai, size, req, &b)) != 0) {
        /* Out of memory: make pending memory reusable, give back what is
         * cached and unused, and try again. */
        if (pool_pending_bytes(d) && pool_sync(p, d, &d->arenas[ai], dev))
            b = try_all(p, d, dev, ai, size, req);
        if (b == NULL) {
            pool_trim_device(p, d, dev);
            /* a block passed over for a refused segment, now gone */
            if ((b = try_all(p, d, dev, ai, size, req)) == NULL)
                r = grow(p, d, dev, ai, size, req, &b);
        }
    }
    if (b == NULL)
        return r ? r : 2;
    if (b->state != B_ALLOC)
        return 2; /* no host memory to track it (see pool_publish) */
    *out = b->addr;
    return 0;
}

/* Ordered reuse (pool.h): has a barrier issued since covered every free
 * before `upto`? Then all of it is reusable already; waiting for the GPU
 * would only make it idle, which reuse does not need. */
static bool all_issued(struct pdev *d, uint64_t upto)
{
    uint64_t issued = __atomic_load_n(&d->issued, __ATOMIC_ACQUIRE);
    /* == upto: the newest barrier is the newest snapshot; nothing freed
     * since (a free racing this read only makes the pool grow: safe) */
    return issued > upto ||
           (issued == upto && issued != 0 && !__atomic_load_n(&d->dirty, __ATOMIC_RELAXED));
}

/* Make pending blocks reusable and try again (the own arena, or all of
 * them). The upstream's fences first: one at a time, oldest first, trying
 * after each, so that the thread waits only until the GPU has passed a
 * block that fits, and the GPU keeps the work queued after it. Then one
 * device-wide synchronization for the frees no fence covers yet. With
 * ordered reuse the first reclaim issues a barrier instead of waiting;
 * if what it made reusable does not serve the request, neither waiting
 * nor a synchronization would (GPT-2 training waited 43 times a step for
 * nothing, on an H200): the pool grows instead, as PyTorch's would. */
static struct blk *reclaim_retry(struct pool *p, struct pdev *d, int dev,
                                 unsigned ai, size_t size, size_t req,
                                 bool all)
{
    struct blk *b;
    struct arena *own = &d->arenas[ai];
    uint64_t upto = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    for (int n = 0; pool_may_wait(p, d, upto, n) && !all_issued(d, upto) &&
                    (pool_before_wait(p, d),
                     p->up.reclaim(p->up.ctx, dev, POOL_REUSE)) > 0;
         n++)
        if ((b = all ? try_all(p, d, dev, ai, size, req)
                     : try_arena(p, own, dev, size, req)) != NULL)
            return b;
    if (all_issued(d, upto))
        return NULL;
    if (!pool_sync(p, d, own, dev))
        return NULL;
    return all ? try_all(p, d, dev, ai, size, req)
               : try_arena(p, own, dev, size, req);
}

/* pool_upstream.whole: a whole free segment of POOL_WHOLE_KEEP or more is
 * not cut for a request of half its size or less; it goes back (before
 * the pool grows, as empty large segments do) and one of the request's
 * size takes its place. Cut, it held the rest of its size for blocks of
 * other sizes (replayed: Llama and BERT training held 1.13-1.15x the peak
 * requested, 1.06-1.07x so). Giving it back synchronizes nothing, but the
 * request now finds no free block: it may first wait for pending memory
 * (the default rule), and with ordered reuse the segment goes back only
 * once a fence shows the GPU past its last free (replayed, Llama: 72
 * such waits against 13 without the rule). */
static inline bool refused(const struct pool *p, const struct seg *s,
                           size_t size)
{
    return p->up.whole && s->handle && s->busy == 0 &&
           s->size >= POOL_WHOLE_KEEP && size <= s->size / 2;
}

/* bin_find, passing over free segments refused (above): the smallest
 * block that fits and may be cut, among the first 32 that fit. */
static struct blk *fit_unrefused(const struct pool *p, struct bins *bs,
                                 size_t size)
{
    struct blk *b = bin_find(bs, size);
    if (b == NULL || !refused(p, b->seg, size))
        return b;
    unsigned bin = b->bin, seen = 1;
    for (struct blk *x = b->lnext; seen < 32; x = x->lnext) {
        while (x == NULL && ++bin < NBINS)
            if ((bs->map[bin / 64] >> (bin % 64)) & 1)
                x = bs->head[bin];
        if (x == NULL)
            return NULL;
        if (x->size >= size && !refused(p, x->seg, size))
            return x;
        seen += x->size >= size;
    }
    return NULL;
}

/* Try one arena: promote, best fit, take. */
static struct blk *try_arena_lock(struct pool *p, struct arena *a, int dev,
                                  size_t size, size_t req, bool wait,
                                  size_t *loose)
{
    if (!pool_lock_arena(a, wait))
        return NULL;
    pool_promote(p, a, dev);
    struct blk *b;
    if (pool_vmm_on(p) && pool_is_large(size)) {
        size_t missing;
        b = pool_fit(p, &a->large, size, &missing);
        if (b)
            b = pool_take_backed(p, a, b, size, req, NULL);
    } else if ((b = fit_unrefused(p, pool_bins_for(a, pool_is_large(size)),
                                  size)) != NULL) {
        if (loose && *loose && b->size - size >= *loose) {
            *loose = b->size; /* pending memory may fit better */
            pthread_mutex_unlock(&a->lock);
            return NULL;
        }
        b = take(a, b, size, req); /* the hot path: nothing to map */
    }
    if (loose)
        *loose = 0;
    if (b)
        pool_publish(a, b);
    pthread_mutex_unlock(&a->lock);
    return b;
}

/* A small request the small segments cannot serve, from the free end of a
 * large segment in use, shorter than 2 MiB: a large request is rounded up
 * to 2 MiB (the driver's page), and a 26 MiB segment for a 24.5 MiB block
 * keeps 1.5 MiB that no large request of its layer fits. Only there, and
 * only instead of growing: small blocks taking any free large block first
 * scattered them over the space large requests come back for (GPT-2
 * training 1.041x -> 1.114x the peak requested, replayed). Only in
 * segments under POOL_WHOLE_KEEP, which whole mode gives back: a small
 * block that outlives its neighbour keeps its segment from going back;
 * without the limit whatif's GPT-2 training (segments up to 786 MiB) went
 * 1.034x -> 1.107x with ordered reuse.
 * Replayed with ordered reuse, every trace of the live corpus holds the
 * same or less (Llama 1.128x -> 1.115x, 1.063x -> 1.046x with whole
 * segments; resnet50 training 1.054x -> 1.052x); by the default rule
 * within +-2.5% (docs/benchmarks.md). Not with virtual memory (its blocks
 * need pages mapped). */
static struct blk *try_tail(struct pool *p, struct arena *a, int dev,
                            size_t size, size_t req)
{
    if (pool_vmm_on(p))
        return NULL;
    pool_lock_arena(a, true);
    pool_promote(p, a, dev);
    struct blk *b = bin_find(&a->large, size);
    if (b && b->size < POOL_LARGE_ROUND && b->seg->busy > 0 &&
        b->seg->size < POOL_WHOLE_KEEP) {
        b = take(a, b, size, req);
        pool_publish(a, b);
    } else
        b = NULL;
    pthread_mutex_unlock(&a->lock);
    return b;
}

static struct blk *try_arena(struct pool *p, struct arena *a, int dev,
                             size_t size, size_t req)
{
    return try_arena_lock(p, a, dev, size, req, true, NULL);
}

/* try_arena, but no fit that would leave *loose bytes or more free beside
 * the block: then NULL, and *loose is the size of the block it passed
 * over (0: it found no fit at all, or took one). */
static struct blk *try_tight(struct pool *p, struct arena *a, int dev,
                             size_t size, size_t req, size_t *loose)
{
    return try_arena_lock(p, a, dev, size, req, true, loose);
}

/* Move a fully free segment of the right kind and size from arena `from`
 * to arena `to`, and carve the block there. Segments, not blocks, change
 * owner: after a synchronization most segments are empty, and the thread
 * that needs memory takes whole ones instead of reaching into another
 * thread's arena on every allocation. Nothing in a free segment is in a
 * map or a pending list, so no other thread can be looking for it. */
static struct blk *adopt_segment(struct pool *p, struct arena *from,
                                 struct arena *to, unsigned to_index, int dev,
                                 size_t size, size_t req, bool wait)
{
    bool large = pool_is_large(size);
    if (!pool_lock_arena(from, wait))
        return NULL;
    pool_promote(p, from, dev);
    struct seg *s = from->segs;
    while (s && (s->busy != 0 || (bool)s->large != large || s->size < size ||
                 refused(p, s, size)))
        s = s->snext;
    if (s == NULL) {
        pthread_mutex_unlock(&from->lock);
        return NULL;
    }
    struct blk *b = s->first; /* the one free block spanning it */
    bin_remove(pool_bins_for(from, large), b);
    size_t unbacked = s->pages ? s->size - s->nmapped * p->up.page : 0;
    ADD(from->free_bytes, -s->size);
    ADD(from->reserved, -s->size);
    ADD(from->unbacked, -unbacked);
    ADD(from->nsegs, -1);
    if (s->sprev)
        s->sprev->snext = s->snext;
    else
        from->segs = s->snext;
    if (s->snext)
        s->snext->sprev = s->sprev;
    pthread_mutex_unlock(&from->lock);

    segidx_set_arena(p, s, to_index);
    pthread_mutex_lock(&to->lock);
    s->sprev = NULL;
    s->snext = to->segs;
    if (to->segs)
        to->segs->sprev = s;
    to->segs = s;
    ADD(to->reserved, s->size);
    ADD(to->unbacked, unbacked);
    ADD(to->nsegs, 1);
    ADD(to->adopted, 1);
    ADD(to->free_bytes, s->size);
    bin_insert(pool_bins_for(to, large), b);
    if ((b = pool_take_backed(p, to, b, size, req, NULL)) != NULL)
        pool_publish(to, b);
    pthread_mutex_unlock(&to->lock);
    return b;
}

/* Serve from the other arenas: first adopt a whole free segment, then, if
 * none is free, take a block where there is one. Without `wait`, an arena
 * whose lock is held is passed over: its owner is busy in it, and queueing
 * behind owners is what made the pool collapse at 8 threads (measured);
 * growing is cheaper. Out of memory, the pool waits. */
static struct blk *try_others(struct pool *p, struct pdev *d, int dev,
                              unsigned own, size_t size, size_t req, bool wait)
{
    for (unsigned i = 1; i < POOL_ARENAS; i++) {
        unsigned ai = (own + i) % POOL_ARENAS;
        if (LOAD(d->arenas[ai].nsegs) == 0)
            continue;
        struct blk *b = adopt_segment(p, &d->arenas[ai], &d->arenas[own], own,
                                      dev, size, req, wait);
        if (b)
            return b;
    }
    /* Single blocks only from an arena with plenty free (what a finished
     * forward pass leaves for PyTorch's autograd thread): taking blocks
     * from small busy arenas ties their owners' frees to us and stopped
     * the pool from scaling (measured); growing our own is cheaper. */
    uint64_t plenty = size * 4 > STEAL_MIN ? size * 4 : STEAL_MIN;
    for (unsigned i = 1; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[(own + i) % POOL_ARENAS];
        if (LOAD(a->nsegs) == 0 || (!wait && LOAD(a->free_bytes) < plenty))
            continue;
        struct blk *b = try_arena_lock(p, a, dev, size, req, wait, NULL);
        if (b) {
            __atomic_fetch_add(&a->lent, 1, __ATOMIC_RELAXED);
            return b;
        }
    }
    return NULL;
}

static struct blk *try_all(struct pool *p, struct pdev *d, int dev,
                           unsigned own, size_t size, size_t req)
{
    struct blk *b = try_arena(p, &d->arenas[own], dev, size, req);
    return b ? b : try_others(p, d, dev, own, size, req, true);
}

/* Take a new segment from upstream into arena a and carve the block. */
static int grow(struct pool *p, struct pdev *d, int dev, unsigned ai,
                size_t size, size_t req, struct blk **out)
{
    bool mapped = pool_vmm_on(p) && pool_is_large(size);
    size_t ssize = segment_size(size, mapped);
    size_t pg = p->up.page;
    uintptr_t base = 0;
    int r;
    uint64_t *pages = NULL, handle = 0;
    if (!mapped && p->up.whole && pool_is_large(size)) {
        r = pool_whole_create(p, d, dev, ssize, &base, &handle);
        if (r != 0 && r != POOL_NO_VMM)
            return r;
        if (r != 0)
            handle = base = 0; /* not on this device: a plain one */
    }
    if (mapped) {
        size_t vsize = (ssize + pg - 1) / pg * pg;
        if ((pages = calloc(vsize / pg, sizeof *pages)) == NULL)
            return 2;
        if ((r = p->up.reserve(p->up.ctx, dev, vsize, &base)) == 0) {
            ssize = vsize;
        } else {
            free(pages);
            pages = NULL;
            if (r != POOL_NO_VMM)
                return r;
            mapped = false; /* not on this device */
        }
    }
    if (!mapped && handle == 0 && (r = p->up.alloc(p->up.ctx, dev, ssize, &base)) != 0)
        return r;
    struct seg *s = seg_new(p);
    if (s) {
        /* everything the index copies, before it goes in */
        s->base = base;
        s->size = ssize;
        s->dev = dev;
        s->large = pool_is_large(size);
        s->arena = (uint8_t)ai;
        s->pages = pages;
        s->handle = handle;
    }
    struct arena *a = &d->arenas[ai];
    pthread_mutex_lock(&a->lock);
    struct blk *b = s ? blk_new(a) : NULL;
    if (b == NULL || !segidx_add(p, s)) {
        if (b)
            blk_put(a, b);
        pthread_mutex_unlock(&a->lock);
        if (s) { /* recycle it */
            pthread_mutex_lock(&p->seg_lock);
            s->snext = p->seg_spare;
            p->seg_spare = s;
            pthread_mutex_unlock(&p->seg_lock);
        }
        /* the trace gets the segment it will be told went back */
        if (!mapped && p->obs.segment_alloc)
            p->obs.segment_alloc(p->obs.ctx, dev, base, ssize);
        pool_release_segment(p, d, dev, base, ssize, pages, handle, 0, false);
        return 2; /* cudaErrorMemoryAllocation: host memory ran out */
    }
    s->first = b;
    s->snext = a->segs;
    if (a->segs)
        a->segs->sprev = s;
    a->segs = s;
    b->addr = base;
    b->size = ssize;
    b->seg = s;
    b->state = B_FREE;
    ADD(a->reserved, ssize);
    ADD(a->nsegs, 1);
    ADD(a->free_bytes, ssize);
    if (mapped)
        ADD(a->unbacked, ssize); /* its pages are recorded as they come */
    else if (p->obs.segment_alloc)
        p->obs.segment_alloc(p->obs.ctx, dev, base, ssize);
    bin_insert(pool_bins_for(a, s->large), b);
    if ((b = pool_take_backed(p, a, b, size, req, &r)) == NULL) {
        /* no memory behind it: the empty range stays for trim */
        pthread_mutex_unlock(&a->lock);
        return r;
    }
    pool_publish(a, b);
    *out = b;
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* ---- free, and the reuse decision --------------------------------------- */

int pool_free(struct pool *p, uintptr_t ptr, int *devp)
{
    /* The segment (lock-free), then its arena's lock and map. A segment
     * with a live block in it can neither go away nor change owner
     * meanwhile; if ptr is not live (a double free racing a release) the
     * map says so. */
    struct segref ref;
    if (!segidx_find(p, ptr, &ref))
        return POOL_NOT_MINE;
    struct pdev *d = pool_dev_of(p, ref.dev);
    if (d == NULL || ref.arena >= POOL_ARENAS)
        return POOL_INVALID;
    struct arena *a = &d->arenas[ref.arena];
    pthread_mutex_lock(&a->lock);
    struct blk *b = map_take(&a->map, ptr);
    if (b == NULL) {
        pthread_mutex_unlock(&a->lock);
        return POOL_INVALID; /* freed twice, or not a block's start */
    }
    retire_locked(a, b);
    pthread_mutex_unlock(&a->lock);
    *devp = ref.dev;
    return 0;
}

/* Make a live block pending (it is no longer in the map). Arena locked. */
static void retire_locked(struct arena *a, struct blk *b)
{
    b->state = B_PENDING;
    /* The tag is drawn after the program's GPU work on b was issued (see
     * pool_sync_snapshot). Frees read the epoch's line and write `dirty`
     * only when it is clear: once per snapshot per device, not per free.
     * Set after the tag is drawn, a racing snapshot can leave it set for
     * nothing (one needless synchronization), never clear it wrongly. */
    b->tag = __atomic_load_n(&a->d->epoch, __ATOMIC_SEQ_CST);
    b->seg->ftag = b->tag;
    if (!__atomic_load_n(&a->d->dirty, __ATOMIC_RELAXED))
        __atomic_store_n(&a->d->dirty, 1, __ATOMIC_RELAXED);
    b->lnext = NULL;
    b->lprev = a->pend_tail;
    if (a->pend_tail)
        a->pend_tail->lnext = b;
    else
        a->pend_head = b;
    a->pend_tail = b;
    ADD(a->allocated, -b->size);
    ADD(a->requested, -b->req);
    ADD(a->pending, b->size);
}

/* Move every pending block the device's safe mark has passed to the free
 * bins. Arena locked. */
void pool_promote(struct pool *p, struct arena *a, int dev)
{
    if (a->pend_head == NULL)
        return; /* the common case: one load of our own line */
    uint64_t safe = __atomic_load_n(&a->d->safe, __ATOMIC_ACQUIRE);
    uint64_t issued = __atomic_load_n(&a->d->issued, __ATOMIC_ACQUIRE);
    if (issued > safe)
        safe = issued; /* ordered reuse (pool.h) */
    if (a->pend_head->tag >= safe)
        return;
    while (a->pend_head && a->pend_head->tag < safe) {
        struct blk *b = a->pend_head;
        a->pend_head = b->lnext;
        if (a->pend_head)
            a->pend_head->lprev = NULL;
        else
            a->pend_tail = NULL;
        b->lnext = b->lprev = NULL;
        ADD(a->pending, -b->size);
        if (p->obs.free_completed)
            p->obs.free_completed(p->obs.ctx, dev, b->addr, b->size);
        make_free(a, b);
    }
    ADD(a->promotions, 1);
}

/* Free a block (merge with free neighbours, bin it). Arena locked. */
static void make_free(struct arena *a, struct blk *b)
{
    struct seg *s = b->seg;
    struct bins *bs = pool_bins_for(a, s->large);
    s->busy -= b->size;
    b->state = B_FREE;
    ADD(a->free_bytes, b->size);
    if (b->prev && b->prev->state == B_FREE) {
        struct blk *pv = b->prev;
        bin_remove(bs, pv);
        pv->size += b->size;
        pv->next = b->next;
        if (b->next)
            b->next->prev = pv;
        blk_put(a, b);
        b = pv;
    }
    if (b->next && b->next->state == B_FREE) {
        struct blk *nx = b->next;
        bin_remove(bs, nx);
        b->size += nx->size;
        b->next = nx->next;
        if (nx->next)
            nx->next->prev = b;
        blk_put(a, nx);
    }
    bin_insert(bs, b);
}

/* ---- blocks (arena locked) ---------------------------------------------- */

/* Hand out `size` bytes of free block b, splitting off the rest when it
 * is worth keeping. Arena locked. */
static struct blk *take(struct arena *a, struct blk *b, size_t size, size_t req)
{
    struct seg *s = b->seg;
    struct bins *bs = pool_bins_for(a, s->large);
    bin_remove(bs, b);
    ADD(a->free_bytes, -b->size);
    size_t rest = b->size - size;
    /* A small block in a large segment's tail (try_tail) splits finely.
     * A large block's remainder stays with it below 1 MiB, which no large
     * request fits - but at its segment's end from 384 KiB, where try_tail
     * finds it for small requests rather than growing a small segment
     * (a 15.3 MiB block's 0.7 MiB in its 16 MiB segment). Replayed: BERT
     * training by the default rule 1.309x -> 1.146x the peak requested
     * (live on an H200, 1.237x -> 1.142x), EfficientNet 1.106x -> 1.074x
     * with ordered reuse; but resnet50 training by the default rule 1.063x
     * -> 1.098x, and with ordered reuse live 1.054x -> 1.060x (replayed
     * 1.052x -> 1.043x: the runs part at a warm-up trim). 256-512 KiB
     * replayed worse elsewhere (docs/benchmarks.md). */
    size_t min = POOL_ROUND;
    if (s->large && pool_is_large(size)) /* mapped pages: no tail rule */
        min = b->next == NULL && s->pages == NULL ? LARGE_END_MIN : LARGE_SPLIT_MIN;
    if (rest >= min) {
        struct blk *r = blk_new(a);
        if (r) {
            r->addr = b->addr + size;
            r->size = rest;
            r->seg = s;
            r->prev = b;
            r->next = b->next;
            if (b->next)
                b->next->prev = r;
            b->next = r;
            b->size = size;
            r->state = B_FREE;
            ADD(a->free_bytes, rest);
            bin_insert(bs, r);
        }
    }
    b->state = B_ALLOC;
    b->req = req;
    s->busy += b->size;
    ADD(a->allocated, b->size);
    ADD(a->requested, req);
    return b;
}

/* Undo take() for a block that could not be backed. Arena locked. */
static void untake(struct arena *a, struct blk *b)
{
    ADD(a->allocated, -b->size);
    ADD(a->requested, -b->req);
    make_free(a, b);
}

/* take(), then back the block's pages; NULL if they could not be (the
 * CUDA error in *err, if err is not NULL). */
struct blk *pool_take_backed(struct pool *p, struct arena *a, struct blk *b,
                             size_t size, size_t req, int *err)
{
    b = take(a, b, size, req);
    int r = pool_back_block(p, a, b);
    if (err)
        *err = r;
    if (r != 0) {
        untake(a, b);
        return NULL;
    }
    return b;
}

/* Enter a block just taken into the address map (arena locked, so the
 * map and the arena agree at every lock boundary). Without host memory
 * for the map entry the block goes straight back as pending and the
 * caller sees the failure through b->state. */
void pool_publish(struct arena *a, struct blk *b)
{
    if (!map_put(&a->map, b->addr, b))
        retire_locked(a, b);
}

/* A segment for a request of `size` bytes (rounded). Requests up to
 * POOL_MEDIUM_MAX share segments. A plain one holds a whole number of
 * blocks of the size that made it, with the least left over, between
 * POOL_MEDIUM_MIN and POOL_MEDIUM_TOP (the smallest such): a layer's
 * blocks of one size come together, and PyTorch's fixed 20 MiB held two
 * 6.9 MiB blocks and 6.2 MiB that fitted none (EfficientNet-B0: 13 such
 * segments at the peak, 80 MiB). Over the 16 corpus traces (whatif)
 * reserved at the peak fell on 15 and rose on one (ViT, 1.083x ->
 * 1.090x the peak requested); geomean 1.119x -> 1.103x, resnet50
 * inference 1.317x -> 1.273x (docs/benchmarks.md). Mapped segments keep
 * 20 MiB: their pages are mapped where blocks are. */
static size_t segment_size(size_t size, bool mapped)
{
    if (size <= POOL_SMALL_MAX)
        return POOL_SMALL_SEGMENT;
    size_t r = POOL_LARGE_ROUND - 1;
    if (size > POOL_MEDIUM_MAX)
        return (size + r) & ~r;
    if (mapped)
        return POOL_MEDIUM_SEGMENT;
    size_t best = POOL_MEDIUM_SEGMENT, waste = SIZE_MAX;
    for (size_t k = 1; k * size <= POOL_MEDIUM_TOP; k++) {
        size_t s = (k * size + r) & ~r;
        if (s >= POOL_MEDIUM_MIN && s <= POOL_MEDIUM_TOP &&
            (waste == SIZE_MAX || /* less left over, relatively */
             (s - k * size) * best < waste * s)) {
            best = s;
            waste = s - k * size;
        }
    }
    return best;
}

/* ---- looking at the pool ------------------------------------------------ */

void pool_stats(struct pool *p, int dev, struct pool_stats *out)
{
    memset(out, 0, sizeof *out);
    struct pdev *d = pool_dev_of(p, dev);
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[i];
        pthread_mutex_lock(&a->lock);
        out->reserved += a->reserved - a->unbacked;
        out->allocated += a->allocated;
        out->requested += a->requested;
        out->pending += a->pending;
        out->free_bytes += a->free_bytes;
        out->segments += a->nsegs;
        /* the non-empty bins only: every bin's head of 32 arenas is about
         * 460 KiB to read - 54 us a call against 1.3-2.3 us (a CPU
         * benchmark, a few free blocks); a memory sample took 0.2 ms
         * besides NVML on an H200 */
        for (int k = 0; k < 2; k++) {
            struct bins *bs = k ? &a->large : &a->small;
            for (unsigned w = 0; w < BIN_WORDS; w++)
                for (uint64_t m = bs->map[w]; m; m &= m - 1) {
                    unsigned bin = w * 64 + (unsigned)__builtin_ctzll(m);
                    for (struct blk *b = bs->head[bin]; b; b = b->lnext) {
                        uint64_t n = pool_backed(p, b);
                        out->free_blocks += n != 0;
                        if (n > out->largest_free)
                            out->largest_free = n;
                    }
                }
        }
        pthread_mutex_unlock(&a->lock);
    }
    for (int i = 0; i < POOL_ARENAS; i++) {
        out->promotions += LOAD(d->arenas[i].promotions);
        out->adopted += LOAD(d->arenas[i].adopted);
        out->lent += LOAD(d->arenas[i].lent);
        out->spread += i != 0 && LOAD(d->home[i]) == i;
        out->syncs += LOAD(d->arenas[i].syncs);
    }
    pthread_mutex_lock(&d->page_lock);
    out->reserved += LOAD(d->spare_pages) * p->up.page;
    pthread_mutex_unlock(&d->page_lock);
    out->page_maps = LOAD(d->maps);
    out->page_unmaps = LOAD(d->unmaps);
    out->pages_created = LOAD(d->created);
    out->pages_taken = LOAD(d->taken);
    out->map_calls = LOAD(d->map_calls);
    out->unmap_calls = LOAD(d->unmap_calls);
    out->page_ns = LOAD(d->page_ns);
    out->destroys = LOAD(d->destroys);
    out->create_ns = LOAD(d->create_ns);
    out->map_ns = LOAD(d->map_ns);
    out->unmap_ns = LOAD(d->unmap_ns);
    out->deferred_ns = LOAD(d->deferred_ns);
    out->destroy_ns = LOAD(d->destroy_ns);
    out->deferred_calls = LOAD(d->deferred_calls);
    out->idle_waits = LOAD(d->idle_waits);
    out->page = p->up.page;
}

uint64_t pool_idle(struct pool *p, int dev)
{
    struct pdev *d = pool_dev_of(p, dev);
    uint64_t idle = 0;
    for (int i = 0; d && i < POOL_ARENAS; i++)
        idle += LOAD(d->arenas[i].reserved) - LOAD(d->arenas[i].unbacked) -
                LOAD(d->arenas[i].allocated);
    if (d)
        idle += LOAD(d->spare_pages) * p->up.page;
    return idle;
}

bool pool_lookup(struct pool *p, uintptr_t ptr, struct pool_block_info *out)
{
    memset(out, 0, sizeof *out);
    struct segref ref;
    if (!segidx_find(p, ptr, &ref))
        return false;
    struct pdev *d = pool_dev_of(p, ref.dev);
    if (d == NULL || ref.arena >= POOL_ARENAS)
        return false;
    struct arena *a = &d->arenas[ref.arena];
    pthread_mutex_lock(&a->lock);
    out->seg_base = ref.base;
    out->seg_size = ref.size;
    out->device = ref.dev;
    /* under the arena's lock: a segment it owns cannot change */
    out->mapped = ref.s->base == ref.base && (ref.s->pages || ref.s->handle);
    struct blk *b = map_get(&a->map, ptr);
    if (b) {
        out->addr = b->addr;
        out->size = b->size;
        out->requested = b->req;
    }
    pthread_mutex_unlock(&a->lock);
    return true;
}
