/* pool.c - the caching pool: segments, blocks, best fit, pending frees.
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
 * Synchronizing. A synchronization stalls the calling thread until the GPU
 * has drained, so the pool makes one only when what it would release is
 * worth what it costs: pending bytes of at least the request and of a MiB
 * per microsecond that synchronizations have been taking (a moving
 * average), at most POOL_SYNC_MAX. Cheap synchronizations (an idle GPU)
 * happen readily and keep memory tight; expensive ones are batched, and
 * the pool grows a little instead - by at most POOL_SYNC_MAX of slack.
 * Out of memory, it always synchronizes before giving up.
 *
 * Virtual memory (pool_upstream.page, GPUMEMTRACE_POOL_VMM=1 in the
 * library): segments for large requests are address ranges with physical
 * memory mapped only where blocks need it, and memory of free blocks is
 * unmapped before the pool holds more than the program's peak. All such
 * segments live in one
 * arena (VMM_ARENA), so large requests of all threads share its lock; see
 * alloc_mapped for why, back_block for where memory comes from.
 *
 * Files. This file decides; the data structures it works on - size bins,
 * block structs, the address map, the segment index - are in pool_index.c,
 * their fast paths inline in pool_internal.h with the types both share;
 * pool_check.c checks the invariants, for tests.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool_internal.h"

#define LARGE_SPLIT_MIN (1u << 20)  /* large remainders below this stay */
#define POOL_SYNC_MAX (32u << 20)
#define STEAL_MIN (8u << 20)
#define POOL_SYNC_FLOOR (4u << 20) /* even a free sync touches every arena */
#define RECLAIM_MAX 256            /* fence waits per request, at most */
#define VMM_ARENA 0                /* where mapped segments live */

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define ADD(x, v) STORE(x, LOAD(x) + (v)) /* writers hold the arena lock */

/* ---- devices and arenas ------------------------------------------------ */

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
    if (p->up.page && p->up.chunk < p->up.page)
        p->up.chunk = p->up.page;
    p->up.chunk -= p->up.page ? p->up.chunk % p->up.page : 0;
    if (obs)
        p->obs = *obs;
    pthread_mutex_init(&p->dev_lock, NULL);
    pthread_mutex_init(&p->seg_lock, NULL);
    return p;
}

static struct pdev *get_dev(struct pool *p, int dev)
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

static struct bins *bins_for(struct arena *a, bool large)
{
    return large ? &a->large : &a->small;
}

/* Free a block (merge with free neighbours, bin it). Arena locked. */
static void make_free(struct arena *a, struct blk *b)
{
    struct seg *s = b->seg;
    struct bins *bs = bins_for(a, s->large);
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

/* Move every pending block the device's safe mark has passed to the free
 * bins. Arena locked. */
static void promote(struct pool *p, struct arena *a, int dev)
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

/* Hand out `size` bytes of free block b, splitting off the rest when it
 * is worth keeping. Arena locked. */
static struct blk *take(struct arena *a, struct blk *b, size_t size, size_t req)
{
    struct seg *s = b->seg;
    struct bins *bs = bins_for(a, s->large);
    bin_remove(bs, b);
    ADD(a->free_bytes, -b->size);
    size_t rest = b->size - size;
    size_t min = s->large ? LARGE_SPLIT_MIN : POOL_ROUND;
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

static bool is_large(size_t size)
{
    return size > POOL_SMALL_MAX;
}

static bool lock_arena(struct arena *a, bool wait)
{
    if (wait) {
        pthread_mutex_lock(&a->lock);
        return true;
    }
    return pthread_mutex_trylock(&a->lock) == 0;
}

/* ---- virtual memory: the pages behind mapped segments --------------------
 *
 * With pool_upstream.page set, large segments are address ranges with
 * physical memory (or none) behind each page of the range: s->pages[i] is
 * the handle mapped there, and a mapping - one handle, mapped and unmapped
 * whole - is a run of pages with the same handle. A page that any
 * allocated or pending block touches is mapped; pages wholly inside free
 * blocks may be mapped or not. An arena's `unbacked` counts its segments'
 * bytes without memory, so the byte identities of plain segments hold for
 * address ranges, and memory held is reserved - unbacked (+ parked
 * handles). Every mapping made or undone is a segment in the trace.
 */


static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static bool vmm_on(const struct pool *p)
{
    return p->up.page != 0;
}

#define BUMP(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)

/* Time since t0 into the driver's total and into one kind's. */
static void driver_time(struct pdev *d, uint64_t *kind, uint64_t t0)
{
    uint64_t dt = now_ns() - t0;
    BUMP(d->page_ns, dt);
    BUMP(*kind, dt);
}

/* ---- deferred unmaps ------------------------------------------------------
 *
 * Memory moved from a free block to a request costs two driver calls of
 * about the same price: the unmap of its old address and the map (with
 * access) at the new one. They fall where the program's peak is, right
 * after the thread waited for the GPU, whose queue is then nearly empty:
 * CPU time there is step time (docs/benchmarks.md). With an upstream that
 * maps a handle at a second address while the first stays (up.alias: the
 * driver does), the old mapping only leaves the pool's books at once; its
 * unmap is queued and made just before some thread next waits for the
 * GPU (a fence or a synchronization), when the GPU still has work queued
 * - or first, where it must be: before anything is mapped over the old
 * address (back_block) and before its handle or address range goes back
 * to the driver. Safe: the old address lies in a free block that no GPU
 * work touches; the memory is counted once, as its handle's. */


static bool pool_sync(struct pool *p, struct pdev *d, struct arena *own,
                      int dev);

/* Wait until GPU work issued before the free tagged `tag` has finished
 * (with ordered reuse, memory reused at once may still be in use): the
 * upstream's fences, oldest first, else one synchronization. Rare: only
 * to unmap or give back such memory sooner than it became idle. */
static void wait_idle(struct pool *p, struct pdev *d, uint64_t tag)
{
    if (__atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) > tag)
        return;
    BUMP(d->idle_waits, 1);
    for (int n = 0; n < RECLAIM_MAX && p->up.reclaim &&
                    __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= tag;
         n++)
        if (p->up.reclaim(p->up.ctx, d->dev, POOL_IDLE) <= 0)
            break;
    if (__atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= tag)
        pool_sync(p, d, &d->arenas[VMM_ARENA], d->dev);
}

/* The tag an unmap of memory in s must wait for: with ordered reuse, its
 * latest free's; else none (its free blocks are idle). */
static uint64_t unmap_tag(const struct pdev *d, const struct seg *s)
{
    return __atomic_load_n(&d->issued, __ATOMIC_RELAXED) ? s->ftag : 0;
}

/* Make the queued unmaps of handle h (h != 0), or of those overlapping
 * [lo, hi) (hi != 0), or all of them - those whose memory is idle; the
 * others stay queued. The highest tag of those left that were asked for,
 * or 0 if none is left. defer_lock held. */
static uint64_t defer_run(struct pool *p, struct pdev *d, uint64_t h,
                          uintptr_t lo, uintptr_t hi, bool before_wait)
{
    unsigned kept = 0, n = d->ndefer;
    uint64_t safe = __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE), left = 0;
    for (unsigned i = 0; i < n; i++) {
        struct pdefer e = d->defer[i];
        bool asked = !(h ? e.h != h : hi && (e.va >= hi || e.va + e.size <= lo));
        if (!asked || e.tag >= safe) {
            if (asked && e.tag + 1 > left)
                left = e.tag + 1;
            d->defer[kept++] = e;
            continue;
        }
        uint64_t t0 = now_ns();
        /* A refusal leaves the old mapping there (said once, vmm.c): a
         * later map over it fails, which the request survives. */
        p->up.unmap(p->up.ctx, d->dev, e.va, e.size);
        driver_time(d, before_wait ? &d->deferred_ns : &d->unmap_ns, t0);
        if (before_wait)
            BUMP(d->deferred_calls, 1);
    }
    __atomic_store_n(&d->ndefer, kept, __ATOMIC_RELAXED);
    return left;
}

/* defer_run under the lock, if anything is queued; with `force`, until
 * none of those asked for is left, waiting for their memory to become
 * idle (without defer_lock: the wait may make the queue's unmaps). */
static void defer_flush(struct pool *p, struct pdev *d, uint64_t h,
                        uintptr_t lo, uintptr_t hi, bool before_wait,
                        bool force)
{
    while (p->up.alias && __atomic_load_n(&d->ndefer, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&d->defer_lock);
        uint64_t left = defer_run(p, d, h, lo, hi, before_wait);
        pthread_mutex_unlock(&d->defer_lock);
        if (!force || left == 0)
            return;
        wait_idle(p, d, left - 1);
    }
}

/* The thread is about to wait for the GPU: the queued unmaps first. */
static void before_wait(struct pool *p, struct pdev *d)
{
    defer_flush(p, d, 0, 0, 0, true, false);
}

/* Give handle h back to the driver, its queued unmaps made first. */
static void give_back(struct pool *p, struct pdev *d, int dev, uint64_t h)
{
    defer_flush(p, d, h, 0, 0, false, true);
    uint64_t t0 = now_ns();
    p->up.destroy(p->up.ctx, dev, h);
    driver_time(d, &d->destroy_ns, t0);
    BUMP(d->destroys, 1);
}

/* A handle of exactly n pages parked on the device, or 0. */
static uint64_t spare_take(struct pdev *d, size_t n)
{
    uint64_t h = 0;
    pthread_mutex_lock(&d->page_lock);
    for (size_t i = d->nspare; i-- > 0;)
        if (d->spare[i].n == n) {
            h = d->spare[i].h;
            d->spare[i] = d->spare[--d->nspare];
            STORE(d->spare_pages, d->spare_pages - n);
            break;
        }
    pthread_mutex_unlock(&d->page_lock);
    return h;
}

/* Park handle h of n pages on the device; with no host memory to list it,
 * it goes back to the driver. */
static void spare_put(struct pool *p, struct pdev *d, int dev, uint64_t h,
                      size_t n)
{
    pthread_mutex_lock(&d->page_lock);
    if (d->nspare == d->spare_cap) {
        size_t cap = d->spare_cap ? 2 * d->spare_cap : 64;
        struct pspare *ns = realloc(d->spare, cap * sizeof *ns);
        if (ns) {
            d->spare = ns;
            d->spare_cap = cap;
        }
    }
    bool kept = d->nspare < d->spare_cap;
    if (kept) {
        d->spare[d->nspare++] = (struct pspare){h, n};
        STORE(d->spare_pages, d->spare_pages + n);
    }
    pthread_mutex_unlock(&d->page_lock);
    if (!kept)
        give_back(p, d, dev, h);
}

/* Give the largest parked handle back to the driver; its pages, 0 if none
 * was parked. */
static size_t spare_drop(struct pool *p, struct pdev *d, int dev)
{
    uint64_t h = 0;
    size_t n = 0;
    pthread_mutex_lock(&d->page_lock);
    size_t best = 0;
    for (size_t i = 1; i < d->nspare; i++)
        if (d->spare[i].n > d->spare[best].n)
            best = i;
    if (d->nspare) {
        h = d->spare[best].h;
        n = d->spare[best].n;
        d->spare[best] = d->spare[--d->nspare];
        STORE(d->spare_pages, d->spare_pages - n);
    }
    pthread_mutex_unlock(&d->page_lock);
    if (n)
        give_back(p, d, dev, h);
    return n;
}

/* Give every parked handle of d back to the driver. */
static void spare_drain(struct pool *p, struct pdev *d, int dev)
{
    while (spare_drop(p, d, dev))
        ;
}

/* The mapping page i of s (mapped) belongs to: [*lo, *hi). One handle is
 * mapped once, so a mapping is a run of pages with the same handle. */
static void mapping_at(const struct seg *s, size_t pg, size_t i, size_t *lo,
                       size_t *hi)
{
    uint64_t h = s->pages[i];
    size_t a = i, b = i + 1, n = s->size / pg;
    while (a > 0 && s->pages[a - 1] == h)
        a--;
    while (b < n && s->pages[b] == h)
        b++;
    *lo = a;
    *hi = b;
}

/* Unmap the mapping [i, j) of segment s: its handle, or 0 if the upstream
 * refused. With `later` (and an upstream that aliases) the driver's unmap
 * is queued (deferred unmaps, above). Arena a (s's) locked, or NULL for a
 * segment out of every arena. */
static uint64_t unmap_one(struct pool *p, struct pdev *d, struct arena *a,
                          struct seg *s, size_t i, size_t j, bool later)
{
    size_t pg = p->up.page;
    uint64_t h = s->pages[i], tag = unmap_tag(d, s);
    uintptr_t va = s->base + i * pg;
    BUMP(d->unmap_calls, 1);
    int r = 0;
    if (later && p->up.alias) {
        pthread_mutex_lock(&d->defer_lock);
        while (d->ndefer == DEFER_MAX) { /* full: room, idle or waited */
            defer_run(p, d, 0, 0, 0, false);
            if (d->ndefer < DEFER_MAX)
                break;
            uint64_t oldest = d->defer[0].tag;
            pthread_mutex_unlock(&d->defer_lock);
            wait_idle(p, d, oldest);
            pthread_mutex_lock(&d->defer_lock);
        }
        d->defer[d->ndefer] = (struct pdefer){va, (j - i) * pg, h, tag};
        __atomic_store_n(&d->ndefer, d->ndefer + 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&d->defer_lock);
    } else {
        wait_idle(p, d, tag); /* nothing to wait for without ordered reuse */
        uint64_t t0 = now_ns();
        r = p->up.unmap(p->up.ctx, s->dev, va, (j - i) * pg);
        driver_time(d, &d->unmap_ns, t0);
    }
    if (r != 0)
        return 0;
    for (size_t k = i; k < j; k++)
        s->pages[k] = 0;
    if (p->obs.segment_free)
        p->obs.segment_free(p->obs.ctx, s->dev, s->base + i * pg, (j - i) * pg);
    s->nmapped -= j - i;
    if (a)
        ADD(a->unbacked, (j - i) * pg);
    BUMP(d->unmaps, j - i);
    return h;
}

/* Unmap mappings that lie wholly inside a's free blocks (which no GPU work
 * can touch any more) and park their handles, until `want` pages are
 * parked or none is left; returns the pages parked. Arena locked. */
static size_t harvest(struct pool *p, struct arena *a, int dev, size_t want)
{
    size_t got = 0, pg = p->up.page;
    struct bins *bs = &a->large;
    for (unsigned w = 0; w < BIN_WORDS && got < want; w++) {
        for (uint64_t m = bs->map[w]; m && got < want; m &= m - 1) {
            unsigned bin = w * 64 + (unsigned)__builtin_ctzll(m);
            for (struct blk *b = bs->head[bin]; b && got < want; b = b->lnext) {
                struct seg *s = b->seg;
                if (s->pages == NULL || s->nmapped == 0)
                    continue;
                size_t i0 = (b->addr - s->base + pg - 1) / pg;
                size_t i1 = (b->addr + b->size - s->base) / pg;
                for (size_t i = i0; i < i1 && got < want;) {
                    if (s->pages[i] == 0) {
                        i++;
                        continue;
                    }
                    size_t lo, hi;
                    mapping_at(s, pg, i, &lo, &hi);
                    uint64_t h;
                    if (lo >= i0 && hi <= i1 &&
                        (h = unmap_one(p, a->d, a, s, lo, hi, true)) != 0) {
                        spare_put(p, a->d, dev, h, hi - lo);
                        got += hi - lo;
                    }
                    i = hi;
                }
            }
        }
    }
    return got;
}

static uint64_t pending_bytes(struct pdev *d);
static uint64_t sync_worth(struct arena *own, size_t size);

/* May a thread wait for the n-th fence, having started at epoch `upto`?
 * Only until what was pending then is reusable: other threads freeing
 * meanwhile must not keep it waiting for ever. */
static bool may_wait(struct pool *p, struct pdev *d, uint64_t upto, int n)
{
    return n < RECLAIM_MAX && p->up.reclaim &&
           __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= upto;
}

/* Would `more` bytes of new memory keep what dev holds within the most the
 * program has asked for at once (as seen here)? Then the pool creates it
 * rather than unmap free memory first. (Slack above that peak saved no
 * mappings in replay_pool --vmm on the transformer trace.) */
static bool within_peak(struct pool *p, struct pdev *d, uint64_t more)
{
    uint64_t held = 0, req = 0;
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *o = &d->arenas[i];
        held += LOAD(o->reserved) - LOAD(o->unbacked);
        req += LOAD(o->requested);
    }
    held += LOAD(d->spare_pages) * p->up.page;
    uint64_t peak = LOAD(d->peak_req);
    if (req > peak)
        STORE(d->peak_req, peak = req);
    return held + more <= peak;
}

/* Park the handles of free memory, `want` pages if there are: a's free
 * blocks (locked), then other arenas' whose lock is free (waiting for one
 * while holding ours could deadlock). Returns the pages parked. */
static size_t gather(struct pool *p, struct arena *a, int dev, size_t want)
{
    struct pdev *d = a->d;
    promote(p, a, dev);
    size_t got = harvest(p, a, dev, want);
    for (int i = 0; i < POOL_ARENAS && got < want; i++) {
        struct arena *o = &d->arenas[i];
        if (o == a || LOAD(o->nsegs) == 0 || !lock_arena(o, false))
            continue;
        promote(p, o, dev);
        size_t k = harvest(p, o, dev, want - got);
        pthread_mutex_unlock(&o->lock);
        got += k;
        BUMP(d->taken, k);
    }
    return got;
}

/* A run of unmapped pages of a block, and the handle that will back it. */
struct run {
    size_t i, n;
    uint64_t h;
};

/* The runs of unmapped pages in pages [i0, i1) of s, each at most a
 * chunk, into *run (buf, or grown on the heap: *cap entries), their
 * number into *out; false without host memory. Arena locked. */
static bool find_runs(const struct pool *p, const struct seg *s, size_t i0,
                      size_t i1, struct run *buf, struct run **run,
                      size_t *cap, size_t *out)
{
    size_t nrun = 0, most = p->up.chunk / p->up.page;
    for (size_t i = i0; i < i1;) {
        if (s->pages[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < i1 && s->pages[j] == 0 && j - i < most)
            j++;
        if (nrun == *cap) {
            struct run *nr = malloc(2 * *cap * sizeof *nr);
            if (nr == NULL) {
                if (*run != buf)
                    free(*run);
                *run = buf;
                return false;
            }
            memcpy(nr, *run, nrun * sizeof *nr);
            if (*run != buf)
                free(*run);
            *run = nr;
            *cap *= 2;
        }
        (*run)[nrun++] = (struct run){i, j - i, 0};
        i = j;
    }
    *out = nrun;
    return true;
}

/* Give runs without a handle one parked of their exact size; returns the
 * pages still without. */
static size_t match_spares(struct pdev *d, struct run *run, size_t nrun)
{
    size_t left = 0;
    for (size_t k = 0; k < nrun; k++)
        if (run[k].h == 0 && (run[k].h = spare_take(d, run[k].n)) == 0)
            left += run[k].n;
    return left;
}

/* Back every page block b (just taken, arena a locked) touches with
 * physical memory: one handle per run of unmapped pages, or per `chunk`
 * of a longer run, each mapped in one piece. The driver's cost is per
 * mapping, whatever its size (~30 us on an H200, docs/benchmarks.md), so
 * a 128 MiB block costs 8 mappings of 16 MiB, not 64 of 2 MiB; chunks
 * that large still move between blocks: a handle can be unmapped only
 * whole, so one that a live block covers in part stays, however much of
 * it is free (larger chunks: fewer mappings, more memory held). A handle parked with the run's exact size first; new ones
 * only while what the device holds stays within the program's peak.
 * Otherwise room is made: parked handles go back to the driver, then
 * mappings lying wholly in free blocks are unmapped (gather), then, while
 * memory is pending, the upstream's fences are waited for one at a time,
 * oldest first, and failing them one synchronization if it is worth it
 * (as for a request that only pending blocks could serve, pool_alloc) -
 * memory GPU work may still touch is never unmapped. The arena's lock is
 * let go while waiting: b (B_BACKING meanwhile) is in no map or list, so
 * nothing another thread does can touch it. 0 or a CUDA error; on error
 * b's pages may be partly mapped, which is allowed. */
static int back_block(struct pool *p, struct arena *a, struct blk *b)
{
    struct seg *s = b->seg;
    if (s->pages == NULL)
        return 0;
    size_t pg = p->up.page;
    size_t i0 = (b->addr - s->base) / pg;
    size_t i1 = (b->addr + b->size - s->base + pg - 1) / pg;
    bool unlocked = false;
    struct run buf[8], *run = buf;
    size_t cap = 8, nrun;
    if (!find_runs(p, s, i0, i1, buf, &run, &cap, &nrun))
        return 2;
    if (nrun == 0)
        return 0;
    struct pdev *d = a->d;
    int dev = s->dev;
    size_t left = match_spares(d, run, nrun);
    uint64_t upto = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    int waits = 0;
    bool synced = false;
    /* handles taken for runs are held nowhere else meanwhile: all of
     * the runs count against the peak */
    size_t need = 0;
    for (size_t k = 0; k < nrun; k++)
        need += run[k].n;
    while (left && !within_peak(p, d, need * pg)) {
        if (spare_drop(p, d, dev))
            continue;
        if (gather(p, a, dev, left)) {
            left = match_spares(d, run, nrun);
            continue;
        }
        if (pending_bytes(d) >= pg && may_wait(p, d, upto, waits)) {
            b->state = B_BACKING;
            unlocked = true;
            pthread_mutex_unlock(&a->lock);
            before_wait(p, d);
            int k = p->up.reclaim(p->up.ctx, dev, POOL_REUSE);
            pthread_mutex_lock(&a->lock);
            b->state = B_ALLOC;
            waits = k > 0 ? waits + 1 : RECLAIM_MAX;
            continue;
        }
        if (!synced && pending_bytes(d) >= sync_worth(a, left * pg)) {
            synced = true;
            b->state = B_BACKING;
            unlocked = true;
            pthread_mutex_unlock(&a->lock);
            pool_sync(p, d, a, dev);
            pthread_mutex_lock(&a->lock);
            b->state = B_ALLOC;
            continue;
        }
        break; /* grow past the peak */
    }
    if (unlocked) {
        /* Meanwhile a neighbour may have mapped a page it shares with b:
         * the runs again, from what is mapped now. */
        for (size_t k = 0; k < nrun; k++)
            if (run[k].h)
                spare_put(p, d, dev, run[k].h, run[k].n);
        if (!find_runs(p, s, i0, i1, buf, &run, &cap, &nrun))
            return 2;
        left = match_spares(d, run, nrun);
    }
    int r = 0;
    uint64_t t0;
    for (size_t k = 0; k < nrun && r == 0; k++) {
        if (run[k].h)
            continue;
        t0 = now_ns();
        r = p->up.create(p->up.ctx, dev, run[k].n * pg, &run[k].h);
        driver_time(d, &d->create_ns, t0);
        if (r == 0) {
            BUMP(d->created, run[k].n);
        } else {
            /* The driver is short (another process?): what is free here
             * goes back to it, then once more. */
            spare_drain(p, d, dev);
            gather(p, a, dev, left);
            left = match_spares(d, run, nrun);
            spare_drain(p, d, dev);
            t0 = now_ns();
            if (run[k].h == 0 &&
                (r = p->up.create(p->up.ctx, dev, run[k].n * pg,
                                  &run[k].h)) == 0)
                BUMP(d->created, run[k].n);
            else if (run[k].h)
                r = 0;
            driver_time(d, &d->create_ns, t0);
        }
    }
    /* old mappings still at these addresses go first (s's arena is
     * locked: none can be queued there meanwhile) */
    if (r == 0)
        defer_flush(p, d, 0, s->base + i0 * pg, s->base + i1 * pg, false,
                    true);
    for (size_t k = 0; k < nrun && r == 0; k++) {
        BUMP(d->map_calls, 1);
        t0 = now_ns();
        r = p->up.map(p->up.ctx, dev, s->base + run[k].i * pg, run[k].n * pg,
                      run[k].h);
        driver_time(d, &d->map_ns, t0);
        if (r != 0)
            break;
        for (size_t x = run[k].i; x < run[k].i + run[k].n; x++)
            s->pages[x] = run[k].h;
        if (p->obs.segment_alloc)
            p->obs.segment_alloc(p->obs.ctx, dev, s->base + run[k].i * pg,
                                 run[k].n * pg);
        s->nmapped += run[k].n;
        ADD(a->unbacked, -run[k].n * pg);
        BUMP(d->maps, run[k].n);
        run[k].h = 0; /* mapped */
    }
    for (size_t k = 0; k < nrun; k++) /* a failure: keep them for the next */
        if (run[k].h)
            spare_put(p, d, dev, run[k].h, run[k].n);
    if (run != buf)
        free(run);
    return r;
}

/* Pages a block of `size` at b's start would need mapped. */
static size_t pages_missing(const struct pool *p, const struct blk *b,
                            size_t size)
{
    const struct seg *s = b->seg;
    size_t pg = p->up.page;
    if (s->pages == NULL || s->nmapped == s->size / pg)
        return 0;
    size_t n = 0;
    size_t e = (b->addr + size - s->base + pg - 1) / pg;
    for (size_t i = (b->addr - s->base) / pg; i < e; i++)
        n += s->pages[i] == 0;
    return n;
}

#define FIT_SCAN 32 /* free blocks a large request weighs, at most */

/* Best fit, for a pool that maps pages: of the free blocks that fit (the
 * smallest first), the one that needs the fewest pages mapped (*missing),
 * so that a request lands where memory already is rather than move pages
 * there from elsewhere. Arena locked. */
static struct blk *fit(struct pool *p, struct bins *bs, size_t size,
                       size_t *missing)
{
    struct blk *b = bin_find(bs, size);
    *missing = 0;
    if (b == NULL)
        return b;
    size_t best_n = pages_missing(p, b, size);
    struct blk *best = b;
    unsigned seen = 1, bin = b->bin;
    struct blk *x = b->lnext;
    while (best_n && seen < FIT_SCAN) {
        while (x == NULL && ++bin < NBINS)
            if ((bs->map[bin / 64] >> (bin % 64)) & 1)
                x = bs->head[bin];
        if (x == NULL)
            break;
        if (x->size >= size) {
            size_t n = pages_missing(p, x, size);
            if (n < best_n) {
                best_n = n;
                best = x;
            }
            seen++;
        }
        x = x->lnext;
    }
    *missing = best_n;
    return best;
}

/* Bytes of free block b that memory is behind: all of it in a plain
 * segment; in a mapped one, what lies on mapped pages. Arena locked. */
static uint64_t backed(const struct pool *p, const struct blk *b)
{
    const struct seg *s = b->seg;
    if (s->pages == NULL)
        return b->size;
    size_t pg = p->up.page;
    uint64_t n = 0;
    for (uintptr_t x = b->addr; x < b->addr + b->size;) {
        uintptr_t end = (x - s->base) / pg * pg + s->base + pg;
        if (end > b->addr + b->size)
            end = b->addr + b->size;
        if (s->pages[(x - s->base) / pg])
            n += end - x;
        x = end;
    }
    return n;
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
static struct blk *take_backed(struct pool *p, struct arena *a, struct blk *b,
                               size_t size, size_t req, int *err)
{
    b = take(a, b, size, req);
    int r = back_block(p, a, b);
    if (err)
        *err = r;
    if (r != 0) {
        untake(a, b);
        return NULL;
    }
    return b;
}

static size_t segment_size(size_t size)
{
    if (size <= POOL_SMALL_MAX)
        return POOL_SMALL_SEGMENT;
    if (size <= POOL_MEDIUM_MAX)
        return POOL_MEDIUM_SEGMENT;
    return (size + POOL_LARGE_ROUND - 1) & ~(size_t)(POOL_LARGE_ROUND - 1);
}

static void retire_locked(struct arena *a, struct blk *b);

/* Enter a block just taken into the address map (arena locked, so the
 * map and the arena agree at every lock boundary). Without host memory
 * for the map entry the block goes straight back as pending and the
 * caller sees the failure through b->state. */
static void publish(struct arena *a, struct blk *b)
{
    if (!map_put(&a->map, b->addr, b))
        retire_locked(a, b);
}

/* Try one arena: promote, best fit, take. */
static struct blk *try_arena_lock(struct pool *p, struct arena *a, int dev,
                                  size_t size, size_t req, bool wait)
{
    if (!lock_arena(a, wait))
        return NULL;
    promote(p, a, dev);
    struct blk *b;
    if (vmm_on(p) && is_large(size)) {
        size_t missing;
        b = fit(p, &a->large, size, &missing);
        if (b)
            b = take_backed(p, a, b, size, req, NULL);
    } else if ((b = bin_find(bins_for(a, is_large(size)), size)) != NULL) {
        b = take(a, b, size, req); /* the hot path: nothing to map */
    }
    if (b)
        publish(a, b);
    pthread_mutex_unlock(&a->lock);
    return b;
}

static struct blk *try_arena(struct pool *p, struct arena *a, int dev,
                             size_t size, size_t req)
{
    return try_arena_lock(p, a, dev, size, req, true);
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
    bool large = is_large(size);
    if (!lock_arena(from, wait))
        return NULL;
    promote(p, from, dev);
    struct seg *s = from->segs;
    while (s && (s->busy != 0 || (bool)s->large != large || s->size < size))
        s = s->snext;
    if (s == NULL) {
        pthread_mutex_unlock(&from->lock);
        return NULL;
    }
    struct blk *b = s->first; /* the one free block spanning it */
    bin_remove(bins_for(from, large), b);
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
    bin_insert(bins_for(to, large), b);
    if ((b = take_backed(p, to, b, size, req, NULL)) != NULL)
        publish(to, b);
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
        struct blk *b = try_arena_lock(p, a, dev, size, req, wait);
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

static struct pdev *dev_of(struct pool *p, int dev)
{
    return dev >= 0 && dev < POOL_MAX_DEVICES
               ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
               : NULL;
}

void pool_sync_snapshot(struct pool *p, int dev, struct pool_snapshot *s)
{
    struct pdev *d = dev_of(p, dev);
    if (d == NULL) {
        s->epoch = 0; /* nothing was ever freed there */
        return;
    }
    if (__atomic_load_n(&d->dirty, __ATOMIC_RELAXED))
        __atomic_store_n(&d->dirty, 0, __ATOMIC_RELAXED);
    /* Every free that drew a tag below the new epoch drew it before this
     * (the GPU work it ended was issued before): a synchronization that
     * starts now covers it. */
    s->epoch = __atomic_add_fetch(&d->epoch, 1, __ATOMIC_SEQ_CST);
}

bool pool_freed_since_snapshot(struct pool *p, int dev)
{
    struct pdev *d = dev_of(p, dev);
    return d && __atomic_load_n(&d->dirty, __ATOMIC_RELAXED);
}

void pool_snapshot_abandoned(struct pool *p, int dev)
{
    struct pdev *d = dev_of(p, dev);
    if (d)
        __atomic_store_n(&d->dirty, 1, __ATOMIC_RELAXED);
}

/* Move a device's mark up to `to`, never down (threads race to move it). */
static void raise_mark(uint64_t *mark, uint64_t to)
{
    uint64_t cur = __atomic_load_n(mark, __ATOMIC_RELAXED);
    while (cur < to &&
           !__atomic_compare_exchange_n(mark, &cur, to, false,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

void pool_issued(struct pool *p, int dev, const struct pool_snapshot *s)
{
    struct pdev *d = dev_of(p, dev);
    if (d == NULL)
        return;
    raise_mark(&d->issued, s->epoch);
}

void pool_synced(struct pool *p, int dev, const struct pool_snapshot *s)
{
    struct pdev *d = dev_of(p, dev);
    if (d == NULL)
        return;
    raise_mark(&d->safe, s->epoch);
}

/* Pending bytes that make a synchronization worth it (see the top): a
 * MiB for each microsecond a synchronization has been taking, at most
 * POOL_SYNC_MAX, and at least the request. */
static uint64_t sync_worth(struct arena *own, size_t size)
{
    uint64_t w = LOAD(own->sync_ns) * 1024;
    if (w > POOL_SYNC_MAX)
        w = POOL_SYNC_MAX;
    if (w < POOL_SYNC_FLOOR)
        w = POOL_SYNC_FLOOR;
    return w > size ? w : size;
}

static bool idle_block(const struct blk *b)
{
    return b->state == B_FREE || b->state == B_PENDING;
}

/* Would a synchronization create a block of `size`? True if some pending
 * block, merged with its free and pending neighbours, spans that much:
 * fragmented free memory next to pending memory serves a request that
 * neither could alone. Bounded work: it runs only before growing. The
 * thread's own arena first; another thread's only if its lock is free:
 * locking and walking the other threads' pending lists on every miss was
 * what made two threads slower than one (2.6x the time per pair on the
 * 16-core GPU host, bench_pool). */
static bool pending_could_fit(struct pdev *d, unsigned own, size_t size)
{
    for (int k = 0; k < POOL_ARENAS; k++) {
        unsigned i = (own + (unsigned)k) % POOL_ARENAS;
        struct arena *a = &d->arenas[i];
        if (LOAD(a->pending) == 0)
            continue;
        if (!lock_arena(a, k == 0))
            continue;
        unsigned budget = 100000;
        for (struct blk *b = a->pend_head; b && budget; b = b->lnext) {
            struct blk *start = b;
            while (start->prev && idle_block(start->prev) && budget--)
                start = start->prev;
            size_t run = 0;
            for (struct blk *x = start; x && idle_block(x) && budget--;
                 x = x->next)
                run += x->size;
            if (run >= size && (bool)b->seg->large == is_large(size)) {
                pthread_mutex_unlock(&a->lock);
                return true;
            }
        }
        pthread_mutex_unlock(&a->lock);
    }
    return false;
}

static uint64_t pending_bytes(struct pdev *d)
{
    uint64_t n = 0;
    for (int i = 0; i < POOL_ARENAS; i++)
        n += LOAD(d->arenas[i].pending);
    return n;
}

/* One device-wide synchronization on behalf of the pool. Threads that
 * find a synchronization already under way wait for it instead of making
 * another. true if the safe mark covers every free before the call. */
static bool pool_sync(struct pool *p, struct pdev *d, struct arena *own,
                      int dev)
{
    /* No lock: two threads that miss at once may both synchronize, which
     * is redundant but harmless; a device lock here became the contended
     * global lock the pool must not have (measured at 4+ threads). */
    uint64_t epoch = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&d->dirty, __ATOMIC_RELAXED) &&
        __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) >= epoch)
        return true; /* nothing freed since a synchronization completed */
    before_wait(p, d);
    struct pool_snapshot snap;
    pool_sync_snapshot(p, dev, &snap);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = p->up.sync(p->up.ctx, dev);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
                  (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
    STORE(own->sync_ns, (LOAD(own->sync_ns) * 7 + ns) / 8); /* own line */
    if (p->obs.synced)
        p->obs.synced(p->obs.ctx, dev, r);
    if (r != 0)
        return false;
    ADD(own->syncs, 1); /* racy across threads sharing an arena: a statistic */
    pool_synced(p, dev, &snap);
    return true;
}

/* A large request with virtual memory. All mapped segments live in one
 * arena, VMM_ARENA: with them spread over the threads' arenas, PyTorch's
 * forward pass (main thread) and backward pass (autograd thread) each
 * pulled the other's pages into their own segments, and every step moved
 * most of the memory twice (replay_pool --vmm: 2.5x the maps). Blocks
 * that need no page mapped are served at once. Otherwise, while pending
 * memory could become such a block, the thread waits for the upstream's
 * fences one at a time, oldest first, and looks again: a block reused in
 * place costs no call, memory moved costs two (an unmap, a map and its
 * access). NULL: not served here; pool_alloc goes on as for any request,
 * mapping pages where it must. */
static struct blk *alloc_mapped(struct pool *p, struct pdev *d, int dev,
                                size_t size, size_t req)
{
    struct arena *a = &d->arenas[VMM_ARENA];
    uint64_t upto = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    for (int n = 0;; n++) {
        pthread_mutex_lock(&a->lock);
        promote(p, a, dev);
        size_t missing;
        struct blk *b = fit(p, &a->large, size, &missing);
        size_t miss = b ? missing * p->up.page : size;
        bool wait = miss && LOAD(a->pending) >= miss && may_wait(p, d, upto, n);
        if (b && !wait && (b = take_backed(p, a, b, size, req, NULL)) != NULL)
            publish(a, b);
        pthread_mutex_unlock(&a->lock);
        if (wait)
            before_wait(p, d);
        if (!wait || p->up.reclaim(p->up.ctx, dev, POOL_REUSE) <= 0)
            return wait ? NULL : b;
    }
}

/* Make pending blocks reusable and try again (the own arena, or all of
 * them). The upstream's fences first: one at a time, oldest first, trying
 * after each, so that the thread waits only until the GPU has passed a
 * block that fits, and the GPU keeps the work queued after it. Then one
 * device-wide synchronization for the frees no fence covers yet. */
static struct blk *reclaim_retry(struct pool *p, struct pdev *d, int dev,
                                 unsigned ai, size_t size, size_t req,
                                 bool all)
{
    struct blk *b;
    struct arena *own = &d->arenas[ai];
    uint64_t upto = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    for (int n = 0; may_wait(p, d, upto, n) &&
                    (before_wait(p, d), p->up.reclaim(p->up.ctx, dev, POOL_REUSE)) > 0;
         n++)
        if ((b = all ? try_all(p, d, dev, ai, size, req)
                     : try_arena(p, own, dev, size, req)) != NULL)
            return b;
    if (!pool_sync(p, d, own, dev))
        return NULL;
    return all ? try_all(p, d, dev, ai, size, req)
               : try_arena(p, own, dev, size, req);
}

/* Give a segment that is out of its arena and the index back: a plain
 * one to the driver; a mapped one's handles to the driver or, with
 * `park`, to the device's parked handles, then its address range. Segment events
 * are recorded only for what really went back: at exit the runtime may
 * already be gone, and the trace must not say otherwise. */
static void release_segment(struct pool *p, struct pdev *d, int dev,
                            uintptr_t base, size_t size, uint64_t *pages,
                            uint64_t ftag, bool park)
{
    if (pages == NULL) {
        if (p->up.release(p->up.ctx, dev, base, size) == 0 &&
            p->obs.segment_free)
            p->obs.segment_free(p->obs.ctx, dev, base, size);
        return;
    }
    size_t pg = p->up.page, npg = size / pg;
    struct seg s = {.base = base, .size = size, .pages = pages, .dev = dev,
                    .ftag = ftag};
    defer_flush(p, d, 0, base, base + size, false, true); /* before unreserve */
    for (size_t i = 0; i < npg; i++)
        s.nmapped += pages[i] != 0;
    for (size_t i = 0; i < npg;) {
        if (pages[i] == 0) {
            i++;
            continue;
        }
        size_t lo, hi;
        mapping_at(&s, pg, i, &lo, &hi);
        uint64_t h = unmap_one(p, d, NULL, &s, lo, hi, false);
        if (h && park)
            spare_put(p, d, dev, h, hi - lo);
        else if (h)
            give_back(p, d, dev, h);
        i = hi;
    }
    free(pages);
    if (s.nmapped == 0) /* else left mapped: the address range must stay */
        p->up.unreserve(p->up.ctx, dev, base, size);
}

/* Give back fully free segments of dev: all, or only large or small ones
 * when `only` is set (before growing: then the pages of mapped segments
 * stay parked, for the segment about to be made). */
static int trim_class(struct pool *p, struct pdev *d, int dev, bool only,
                      bool large)
{
    int released = 0;
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[i];
        struct seg *gone = NULL;
        pthread_mutex_lock(&a->lock);
        promote(p, a, dev);
        for (struct seg *s = a->segs, *next; s; s = next) {
            next = s->snext;
            if (s->busy != 0 || (only && (bool)s->large != large))
                continue;
            struct blk *b = s->first; /* one free block spans it */
            bin_remove(bins_for(a, s->large), b);
            blk_put(a, b);
            ADD(a->free_bytes, -s->size);
            ADD(a->reserved, -s->size);
            if (s->pages)
                ADD(a->unbacked, -(s->size - s->nmapped * p->up.page));
            ADD(a->nsegs, -1);
            if (s->sprev)
                s->sprev->snext = s->snext;
            else
                a->segs = s->snext;
            if (s->snext)
                s->snext->sprev = s->sprev;
            s->snext = gone;
            gone = s;
        }
        pthread_mutex_unlock(&a->lock);
        while (gone) {
            struct seg *s = gone;
            gone = s->snext;
            uintptr_t base = s->base;
            size_t size = s->size;
            uint64_t *pages = s->pages, ftag = s->ftag;
            released += pages == NULL; /* what synchronized the device */
            segidx_remove(p, s); /* recycles s */
            release_segment(p, d, dev, base, size, pages, ftag, only);
        }
    }
    return released;
}

static void trim(struct pool *p, struct pdev *d, int dev)
{
    trim_class(p, d, dev, false, false);
    if (vmm_on(p))
        spare_drain(p, d, dev);
}

void pool_trim(struct pool *p, int dev)
{
    struct pdev *d = get_dev(p, dev);
    if (d == NULL)
        return;
    if (pending_bytes(d))
        pool_sync(p, d, &d->arenas[0], dev);
    trim(p, d, dev);
}

/* Take a new segment from upstream into arena a and carve the block. */
static int grow(struct pool *p, struct pdev *d, int dev, unsigned ai,
                size_t size, size_t req, struct blk **out)
{
    size_t ssize = segment_size(size);
    bool mapped = vmm_on(p) && is_large(size);
    size_t pg = p->up.page;
    uintptr_t base = 0;
    int r;
    uint64_t *pages = NULL;
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
    if (!mapped && (r = p->up.alloc(p->up.ctx, dev, ssize, &base)) != 0)
        return r;
    struct seg *s = seg_new(p);
    if (s) {
        /* everything the index copies, before it goes in */
        s->base = base;
        s->size = ssize;
        s->dev = dev;
        s->large = is_large(size);
        s->arena = (uint8_t)ai;
        s->pages = pages;
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
        release_segment(p, d, dev, base, ssize, pages, 0, false);
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
    bin_insert(bins_for(a, s->large), b);
    if ((b = take_backed(p, a, b, size, req, &r)) == NULL) {
        /* no memory behind it: the empty range stays for trim */
        pthread_mutex_unlock(&a->lock);
        return r;
    }
    publish(a, b);
    *out = b;
    pthread_mutex_unlock(&a->lock);
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

int pool_alloc(struct pool *p, int dev, unsigned arena_hint, size_t req,
               uintptr_t *out)
{
    struct pdev *d = get_dev(p, dev);
    if (d == NULL)
        return 2;
    size_t size = (req + POOL_ROUND - 1) & ~(size_t)(POOL_ROUND - 1);
    if (size == 0 || size < req)
        size = POOL_ROUND;
    unsigned ai = arena_hint % POOL_ARENAS;
    struct blk *b = NULL;
    if (vmm_on(p) && is_large(size)) {
        ai = VMM_ARENA;
        b = alloc_mapped(p, d, dev, size, req);
    }
    struct arena *own = &d->arenas[ai];
    if (b == NULL)
        b = try_arena(p, own, dev, size, req);
    /* What completed fences cover is reusable for a query each. */
    if (b == NULL && p->up.reclaim && p->up.reclaim(p->up.ctx, dev, POOL_POLL) > 0)
        b = try_arena(p, own, dev, size, req);
    /* Only pending memory could serve this: wait until it is reusable.
     * The thread's own arena first, so threads that free what they
     * allocate never touch the others. */
    uint64_t worth = sync_worth(own, size);
    if (b == NULL && LOAD(own->pending) >= worth)
        b = reclaim_retry(p, d, dev, ai, size, req, false);
    if (b == NULL)
        b = try_others(p, d, dev, ai, size, req, false);
    if (b == NULL && pending_bytes(d) >= worth)
        b = reclaim_retry(p, d, dev, ai, size, req, true);
    if (b == NULL && pending_could_fit(d, ai, size))
        b = reclaim_retry(p, d, dev, ai, size, req, true);
    /* About to grow a large segment: large segments with nothing in them
     * did not fit; give them back first rather than hold both. */
    if (b == NULL && is_large(size) && trim_class(p, d, dev, true, true))
        b = try_all(p, d, dev, ai, size, req); /* a release synchronized */
    int r = 0;
    if (b == NULL && (r = grow(p, d, dev, ai, size, req, &b)) != 0) {
        /* Out of memory: make pending memory reusable, give back what is
         * cached and unused, and try again. */
        if (pending_bytes(d) && pool_sync(p, d, &d->arenas[ai], dev))
            b = try_all(p, d, dev, ai, size, req);
        if (b == NULL) {
            trim(p, d, dev);
            r = grow(p, d, dev, ai, size, req, &b);
        }
    }
    if (b == NULL)
        return r ? r : 2;
    if (b->state != B_ALLOC)
        return 2; /* no host memory to track it (see publish) */
    *out = b->addr;
    return 0;
}

int pool_free(struct pool *p, uintptr_t ptr, int *devp)
{
    /* The segment (lock-free), then its arena's lock and map. A segment
     * with a live block in it can neither go away nor change owner
     * meanwhile; if ptr is not live (a double free racing a release) the
     * map says so. */
    struct segref ref;
    if (!segidx_find(p, ptr, &ref))
        return POOL_NOT_MINE;
    struct pdev *d = dev_of(p, ref.dev);
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

void pool_stats(struct pool *p, int dev, struct pool_stats *out)
{
    memset(out, 0, sizeof *out);
    struct pdev *d = dev_of(p, dev);
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
        for (int k = 0; k < 2; k++) {
            struct bins *bs = k ? &a->large : &a->small;
            for (unsigned bin = 0; bin < NBINS; bin++) {
                for (struct blk *b = bs->head[bin]; b; b = b->lnext) {
                    uint64_t n = backed(p, b);
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
    struct pdev *d = dev_of(p, dev);
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
    struct pdev *d = dev_of(p, ref.dev);
    if (d == NULL || ref.arena >= POOL_ARENAS)
        return false;
    struct arena *a = &d->arenas[ref.arena];
    pthread_mutex_lock(&a->lock);
    out->seg_base = ref.base;
    out->seg_size = ref.size;
    out->device = ref.dev;
    /* under the arena's lock: a segment it owns cannot change */
    out->mapped = ref.s->base == ref.base && ref.s->pages != NULL;
    struct blk *b = map_get(&a->map, ptr);
    if (b) {
        out->addr = b->addr;
        out->size = b->size;
        out->requested = b->req;
    }
    pthread_mutex_unlock(&a->lock);
    return true;
}

static void drop_arena(struct pool *p, struct arena *a)
{
    for (struct seg *s = a->segs, *next; s; s = next) {
        next = s->snext;
        for (struct blk *b = s->first, *bn; b; b = bn) {
            bn = b->next;
            free(b);
        }
        free(s->pages);
        segidx_remove(p, s); /* recycles s */
    }
    while (a->spare) {
        struct blk *b = a->spare;
        a->spare = b->lnext;
        free(b);
    }
    memset(&a->small, 0, sizeof a->small);
    memset(&a->large, 0, sizeof a->large);
    free(a->map.tab);
    memset(&a->map, 0, sizeof a->map);
    a->segs = NULL;
    a->pend_head = a->pend_tail = NULL;
    STORE(a->reserved, 0);
    STORE(a->allocated, 0);
    STORE(a->requested, 0);
    STORE(a->pending, 0);
    STORE(a->free_bytes, 0);
    STORE(a->unbacked, 0);
    STORE(a->nsegs, 0);
}

void pool_forget_device(struct pool *p, int dev)
{
    struct pdev *d = dev_of(p, dev);
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        pthread_mutex_lock(&d->arenas[i].lock);
        drop_arena(p, &d->arenas[i]);
        pthread_mutex_unlock(&d->arenas[i].lock);
    }
    pthread_mutex_lock(&d->page_lock);
    d->nspare = 0; /* the reset freed them */
    d->spare_pages = 0;
    pthread_mutex_unlock(&d->page_lock);
}

bool pool_settle(struct pool *p)
{
    bool ok = true;
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++) {
        struct pdev *d = dev_of(p, dev);
        if (d && !pool_sync(p, d, &d->arenas[0], dev))
            ok = false;
    }
    return ok;
}

void pool_release_all(struct pool *p)
{
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++)
        if (__atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE))
            pool_trim(p, dev);
}
