/* pool_sync.c - when the caching pool synchronizes a device, and the
 * marks that tell which pending blocks a synchronization released.
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
 * Marks. A snapshot (pool_sync_snapshot), taken before a synchronization
 * or a fence, advances the device's epoch; once that synchronization has
 * completed, pool_synced moves the safe mark up to the snapshot, and with
 * ordered reuse pool_issued moves the issued mark once the barrier is
 * issued (pool.h). Frees draw their tags from the epoch and promotion
 * (pool.c, pool_promote) reads the marks; only this file moves them.
 */
#include <pthread.h>
#include <time.h>

#include "pool_internal.h"

#define POOL_SYNC_MAX (32u << 20)
#define POOL_SYNC_FLOOR (4u << 20) /* even a free sync touches every arena */

/* ---- is a synchronization worth it? ------------------------------------- */

/* Pending bytes that make a synchronization worth it (see the top): a
 * MiB for each microsecond a synchronization has been taking, at most
 * POOL_SYNC_MAX, and at least the request. */
uint64_t pool_sync_worth(struct arena *own, size_t size)
{
    uint64_t w = LOAD(own->sync_ns) * 1024;
    if (w > POOL_SYNC_MAX)
        w = POOL_SYNC_MAX;
    if (w < POOL_SYNC_FLOOR)
        w = POOL_SYNC_FLOOR;
    return w > size ? w : size;
}

uint64_t pool_pending_bytes(struct pdev *d)
{
    uint64_t n = 0;
    for (int i = 0; i < POOL_ARENAS; i++)
        n += LOAD(d->arenas[i].pending);
    return n;
}

static bool idle_block(const struct blk *b)
{
    return b->state == B_FREE || b->state == B_PENDING;
}

/* Would a synchronization create a block of `size`, and one smaller than
 * `below`? True if some pending block, merged with its free and pending
 * neighbours, spans at least `size` and less than `below`: fragmented
 * free memory next to pending memory serves a request that neither could
 * alone, and memory freed a moment ago often fits a request better than
 * the free block it would otherwise be cut from. Bounded work: it runs
 * only before growing or cutting a loose fit. The thread's own arena
 * first; another thread's only if its lock is free: locking and walking
 * the other threads' pending lists on every miss was what made two
 * threads slower than one (2.6x the time per pair on the 16-core GPU
 * host, bench_pool). */
bool pool_pending_could_fit(struct pdev *d, unsigned own, size_t size,
                            size_t below)
{
    for (int k = 0; k < POOL_ARENAS; k++) {
        unsigned i = (own + (unsigned)k) % POOL_ARENAS;
        struct arena *a = &d->arenas[i];
        if (LOAD(a->pending) == 0)
            continue;
        if (!pool_lock_arena(a, k == 0))
            continue;
        unsigned budget = 100000;
        for (struct blk *b = a->pend_head; b && budget; b = b->lnext) {
            if ((bool)b->seg->large != pool_is_large(size))
                continue;
            struct blk *start = b;
            while (start->prev && idle_block(start->prev) && budget--)
                start = start->prev;
            size_t run = 0;
            for (struct blk *x = start; x && idle_block(x) && budget--;
                 x = x->next)
                run += x->size;
            if (run >= size && run < below) {
                pthread_mutex_unlock(&a->lock);
                return true;
            }
        }
        pthread_mutex_unlock(&a->lock);
    }
    return false;
}

/* May a thread wait for the n-th fence, having started at epoch `upto`?
 * Only until what was pending then is reusable: other threads freeing
 * meanwhile must not keep it waiting for ever. */
bool pool_may_wait(struct pool *p, struct pdev *d, uint64_t upto, int n)
{
    return n < RECLAIM_MAX && p->up.reclaim &&
           __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) <= upto;
}

/* ---- synchronizing ------------------------------------------------------ */

/* One device-wide synchronization on behalf of the pool. Threads that
 * find a synchronization already under way wait for it instead of making
 * another. true if the safe mark covers every free before the call. */
bool pool_sync(struct pool *p, struct pdev *d, struct arena *own, int dev)
{
    /* No lock: two threads that miss at once may both synchronize, which
     * is redundant but harmless; a device lock here became the contended
     * global lock the pool must not have (measured at 4+ threads). */
    uint64_t epoch = __atomic_load_n(&d->epoch, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&d->dirty, __ATOMIC_RELAXED) &&
        __atomic_load_n(&d->safe, __ATOMIC_ACQUIRE) >= epoch)
        return true; /* nothing freed since a synchronization completed */
    pool_before_wait(p, d);
    struct pool_snapshot snap;
    pool_sync_snapshot(p, dev, &snap);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = p->up.sync(p->up.ctx, dev);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
                  (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
    if (p->up.sync_free)
        ns = 0;
    STORE(own->sync_ns, (LOAD(own->sync_ns) * 7 + ns) / 8); /* own line */
    if (p->obs.synced)
        p->obs.synced(p->obs.ctx, dev, r);
    if (r != 0)
        return false;
    ADD(own->syncs, 1); /* racy across threads sharing an arena: a statistic */
    pool_synced(p, dev, &snap);
    return true;
}

bool pool_settle(struct pool *p)
{
    bool ok = true;
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++) {
        struct pdev *d = pool_dev_of(p, dev);
        if (d && !pool_sync(p, d, &d->arenas[0], dev))
            ok = false;
    }
    return ok;
}

/* ---- snapshots and marks ------------------------------------------------ */

void pool_sync_snapshot(struct pool *p, int dev, struct pool_snapshot *s)
{
    struct pdev *d = pool_dev_of(p, dev);
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
    struct pdev *d = pool_dev_of(p, dev);
    return d && __atomic_load_n(&d->dirty, __ATOMIC_RELAXED);
}

void pool_snapshot_abandoned(struct pool *p, int dev)
{
    struct pdev *d = pool_dev_of(p, dev);
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
    struct pdev *d = pool_dev_of(p, dev);
    if (d == NULL)
        return;
    raise_mark(&d->issued, s->epoch);
}

void pool_synced(struct pool *p, int dev, const struct pool_snapshot *s)
{
    struct pdev *d = pool_dev_of(p, dev);
    if (d == NULL)
        return;
    raise_mark(&d->safe, s->epoch);
}
