/* pool_vmm.c - the caching pool's virtual memory: the pages behind
 * mapped segments, where they come from, and unmaps made later.
 *
 * With pool_upstream.page set (GPUMEMTRACE_POOL_VMM=1 in the library),
 * segments for large requests are address ranges with physical memory
 * mapped only where blocks need it, and memory of free blocks is
 * unmapped before the pool holds more than the program's peak. All such
 * segments live in one arena (VMM_ARENA), so large requests of all
 * threads share its lock; see pool_alloc_mapped for why, pool_back_block
 * for where memory comes from.
 *
 * A mapped segment is an address range with physical memory (or none)
 * behind each page of the range: s->pages[i] is the handle mapped there,
 * and a mapping - one handle, mapped and unmapped whole - is a run of
 * pages with the same handle. A page that any
 * allocated or pending block touches is mapped; pages wholly inside free
 * blocks may be mapped or not. An arena's `unbacked` counts its segments'
 * bytes without memory, so the byte identities of plain segments hold for
 * address ranges, and memory held is reserved - unbacked (+ parked
 * handles). Every mapping made or undone is a segment in the trace.
 *
 * pool.c calls in here for large requests (pool_alloc_mapped, pool_fit,
 * pool_back_block through pool_take_backed) and to count what is backed
 * (pool_backed); pool.c and pool_trim.c give segments back through
 * pool_release_segment, which handles plain segments too.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool_internal.h"

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

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
 * address (pool_back_block) and before its handle or address range goes
 * back to the driver. Safe: the old address lies in a free block that no
 * GPU work touches; the memory is counted once, as its handle's. */

/* Wait until GPU work issued before the free tagged `tag` has finished
 * (with ordered reuse, memory reused at once may still be in use): the
 * upstream's fences, oldest first, else one synchronization. Rare: only
 * to unmap or give back such memory sooner than it became idle. False if
 * neither could be had (a capture, a broken context): then nothing may
 * be unmapped or given back - it stays, lost rather than pulled from
 * under the GPU. */
static bool wait_idle(struct pool *p, struct pdev *d, uint64_t tag)
{
    if (__atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) > tag)
        return true;
    BUMP(d->idle_waits, 1);
    for (int n = 0; n < RECLAIM_MAX && p->up.reclaim &&
                    __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= tag;
         n++)
        if (p->up.reclaim(p->up.ctx, d->dev, POOL_IDLE) <= 0)
            break;
    if (__atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= tag)
        pool_sync(p, d, &d->arenas[VMM_ARENA], d->dev);
    return __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) > tag;
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
 * idle (without defer_lock: the wait may make the queue's unmaps). With
 * `force`, false if some are left: their memory could not be shown idle
 * (neither a fence nor a synchronization could be had), and they stay
 * queued - mapped. */
static bool defer_flush(struct pool *p, struct pdev *d, uint64_t h,
                        uintptr_t lo, uintptr_t hi, bool before_wait,
                        bool force)
{
    while (p->up.alias && __atomic_load_n(&d->ndefer, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&d->defer_lock);
        uint64_t left = defer_run(p, d, h, lo, hi, before_wait);
        pthread_mutex_unlock(&d->defer_lock);
        if (!force || left == 0)
            return true;
        if (!wait_idle(p, d, left - 1))
            return false;
    }
    return true;
}

/* The thread is about to wait for the GPU: the queued unmaps first. */
void pool_before_wait(struct pool *p, struct pdev *d)
{
    defer_flush(p, d, 0, 0, 0, true, false);
}

/* Give handle h back to the driver, its queued unmaps made first. */
static void give_back(struct pool *p, struct pdev *d, int dev, uint64_t h)
{
    if (!defer_flush(p, d, h, 0, 0, false, true))
        return; /* still mapped where the GPU may be: kept (lost) */
    uint64_t t0 = now_ns();
    p->up.destroy(p->up.ctx, dev, h);
    driver_time(d, &d->destroy_ns, t0);
    BUMP(d->destroys, 1);
}

/* ---- parked handles: physical memory mapped nowhere --------------------- */

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
void pool_spare_drain(struct pool *p, struct pdev *d, int dev)
{
    while (spare_drop(p, d, dev))
        ;
}

/* ---- making room: unmapping free blocks' memory ------------------------- */

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
            if (!wait_idle(p, d, oldest))
                return 0; /* no room, nothing idle: left mapped */
            pthread_mutex_lock(&d->defer_lock);
        }
        d->defer[d->ndefer] = (struct pdefer){va, (j - i) * pg, h, tag};
        __atomic_store_n(&d->ndefer, d->ndefer + 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&d->defer_lock);
    } else {
        /* nothing to wait for without ordered reuse */
        if (!wait_idle(p, d, tag))
            return 0; /* the GPU may be there still: left mapped */
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

void pool_reset_peak(struct pool *p)
{
    for (int i = 0; i < POOL_MAX_DEVICES; i++) {
        struct pdev *d = __atomic_load_n(&p->dev[i], __ATOMIC_ACQUIRE);
        if (d)
            STORE(d->peak_req, 0);
    }
}

/* Park the handles of free memory, `want` pages if there are: a's free
 * blocks (locked), then other arenas' whose lock is free (waiting for one
 * while holding ours could deadlock). Returns the pages parked. */
static size_t gather(struct pool *p, struct arena *a, int dev, size_t want)
{
    struct pdev *d = a->d;
    pool_promote(p, a, dev);
    size_t got = harvest(p, a, dev, want);
    for (int i = 0; i < POOL_ARENAS && got < want; i++) {
        struct arena *o = &d->arenas[i];
        if (o == a || LOAD(o->nsegs) == 0 || !pool_lock_arena(o, false))
            continue;
        pool_promote(p, o, dev);
        size_t k = harvest(p, o, dev, want - got);
        pthread_mutex_unlock(&o->lock);
        got += k;
        BUMP(d->taken, k);
    }
    return got;
}

/* ---- backing a block ---------------------------------------------------- */

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
int pool_back_block(struct pool *p, struct arena *a, struct blk *b)
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
        if (pool_pending_bytes(d) >= pg && pool_may_wait(p, d, upto, waits)) {
            b->state = B_BACKING;
            unlocked = true;
            pthread_mutex_unlock(&a->lock);
            pool_before_wait(p, d);
            int k = p->up.reclaim(p->up.ctx, dev, POOL_REUSE);
            pthread_mutex_lock(&a->lock);
            b->state = B_ALLOC;
            waits = k > 0 ? waits + 1 : RECLAIM_MAX;
            continue;
        }
        if (!synced && pool_pending_bytes(d) >= pool_sync_worth(a, left * pg)) {
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
            pool_spare_drain(p, d, dev);
            gather(p, a, dev, left);
            left = match_spares(d, run, nrun);
            pool_spare_drain(p, d, dev);
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
    if (r == 0 && !defer_flush(p, d, 0, s->base + i0 * pg, s->base + i1 * pg,
                               false, true))
        r = 2; /* an old mapping there stays: nothing can be mapped */
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

/* ---- large requests: where they land ------------------------------------ */

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
struct blk *pool_alloc_mapped(struct pool *p, struct pdev *d, int dev,
                              size_t size, size_t req)
{
    struct arena *a = &d->arenas[VMM_ARENA];
    uint64_t upto = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    for (int n = 0;; n++) {
        pthread_mutex_lock(&a->lock);
        pool_promote(p, a, dev);
        size_t missing;
        struct blk *b = pool_fit(p, &a->large, size, &missing);
        size_t miss = b ? missing * p->up.page : size;
        bool wait = miss && LOAD(a->pending) >= miss &&
                    pool_may_wait(p, d, upto, n);
        if (b && !wait &&
            (b = pool_take_backed(p, a, b, size, req, NULL)) != NULL)
            pool_publish(a, b);
        pthread_mutex_unlock(&a->lock);
        if (wait)
            pool_before_wait(p, d);
        if (!wait || p->up.reclaim(p->up.ctx, dev, POOL_REUSE) <= 0)
            return wait ? NULL : b;
    }
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
struct blk *pool_fit(struct pool *p, struct bins *bs, size_t size,
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
uint64_t pool_backed(const struct pool *p, const struct blk *b)
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

/* ---- whole-mapped segments (pool_upstream.whole) ------------------------- */

int pool_whole_create(struct pool *p, struct pdev *d, int dev, size_t size,
                      uintptr_t *base, uint64_t *handle)
{
    uint64_t t0 = now_ns();
    int r = p->up.reserve(p->up.ctx, dev, size, base);
    if (r != 0)
        return r;
    if ((r = p->up.create(p->up.ctx, dev, size, handle)) != 0) {
        p->up.unreserve(p->up.ctx, dev, *base, size);
        return r;
    }
    driver_time(d, &d->create_ns, t0);
    t0 = now_ns();
    r = p->up.map(p->up.ctx, dev, *base, size, *handle);
    driver_time(d, &d->map_ns, t0);
    BUMP(d->map_calls, 1);
    if (r != 0) {
        p->up.destroy(p->up.ctx, dev, *handle);
        p->up.unreserve(p->up.ctx, dev, *base, size);
        return r;
    }
    return 0;
}

/* ---- giving a segment back ---------------------------------------------- */

/* Give a segment that is out of its arena and the index back: a plain
 * one to the driver; a mapped one's handles to the driver or, with
 * `park`, to the device's parked handles, then its address range. Segment events
 * are recorded only for what really went back: at exit the runtime may
 * already be gone, and the trace must not say otherwise. */
void pool_release_segment(struct pool *p, struct pdev *d, int dev,
                          uintptr_t base, size_t size, uint64_t *pages,
                          uint64_t handle, uint64_t ftag, bool park)
{
    if (handle != 0) {
        /* One mapping: once the GPU is past its latest free (with ordered
         * reuse; else its free blocks are idle), unmap it and give its
         * handle and range back - no synchronization. A refused unmap
         * leaves it all there (said once, vmm.c). */
        if (__atomic_load_n(&d->issued, __ATOMIC_RELAXED) && !wait_idle(p, d, ftag))
            return; /* the GPU may be there still: left mapped (lost) */
        uint64_t t0 = now_ns();
        int r = p->up.unmap(p->up.ctx, dev, base, size);
        driver_time(d, &d->unmap_ns, t0);
        BUMP(d->unmap_calls, 1);
        if (r != 0)
            return;
        if (p->obs.segment_free)
            p->obs.segment_free(p->obs.ctx, dev, base, size);
        give_back(p, d, dev, handle);
        p->up.unreserve(p->up.ctx, dev, base, size);
        return;
    }
    if (pages == NULL) {
        if (p->up.release(p->up.ctx, dev, base, size) == 0 &&
            p->obs.segment_free)
            p->obs.segment_free(p->obs.ctx, dev, base, size);
        return;
    }
    size_t pg = p->up.page, npg = size / pg;
    struct seg s = {.base = base, .size = size, .pages = pages, .dev = dev,
                    .ftag = ftag};
    bool flushed = defer_flush(p, d, 0, base, base + size, false, true); /* before unreserve */
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
    if (s.nmapped == 0 && flushed) /* else left mapped: the range must stay */
        p->up.unreserve(p->up.ctx, dev, base, size);
}
