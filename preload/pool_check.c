/* pool_check.c - the caching pool's invariants, checked from outside.
 *
 * For tests: pool_check takes every lock of the pool and walks every
 * segment, block, bin, pending list and the segment index, and says what
 * first disagrees. Nothing in the library calls it. Split from pool.c,
 * which decides; this file only looks.
 */
#include <stdio.h>

#include "pool_internal.h"

const char *pool_check(struct pool *p)
{
    static char msg[256];
    const char *bad = NULL;
#define FAIL(...)                                                             \
    do {                                                                      \
        snprintf(msg, sizeof msg, __VA_ARGS__);                               \
        bad = msg;                                                            \
        goto out;                                                             \
    } while (0)
    for (int dev = 0; dev < POOL_MAX_DEVICES && !bad; dev++) {
        struct pdev *d = __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE);
        if (d == NULL)
            continue;
        for (int i = 0; i < POOL_ARENAS; i++)
            pthread_mutex_lock(&d->arenas[i].lock);
        uint64_t pend_total = 0;
        for (int i = 0; i < POOL_ARENAS; i++) {
            struct arena *a = &d->arenas[i];
            uint64_t res = 0, alloc = 0, req = 0, pend = 0, fr = 0, nfree = 0;
            uint64_t nlive = 0, unbacked = 0;
            size_t pg = p->up.page;
            for (struct seg *s = a->segs; s; s = s->snext) {
                res += s->size;
                if (s->pages) {
                    size_t n = 0;
                    for (size_t k = 0; k < s->size / pg; k++)
                        n += s->pages[k] != 0;
                    if (n != s->nmapped)
                        FAIL("dev %d: segment %#lx maps %zu pages, says %zu",
                             dev, (unsigned long)s->base, n, s->nmapped);
                    unbacked += s->size - n * pg;
                }
                uintptr_t at = s->base;
                size_t busy = 0;
                for (struct blk *b = s->first; b; b = b->next) {
                    if (b->addr != at)
                        FAIL("dev %d arena %d: block at %#lx, expected %#lx",
                             dev, i, (unsigned long)b->addr, (unsigned long)at);
                    if (b->seg != s || b->size == 0 || b->size % POOL_ROUND)
                        FAIL("dev %d: block %#lx malformed", dev,
                             (unsigned long)b->addr);
                    if (b->next && b->next->prev != b)
                        FAIL("dev %d: broken neighbour links at %#lx", dev,
                             (unsigned long)b->addr);
                    if (b->state == B_FREE) {
                        if (b->next && b->next->state == B_FREE)
                            FAIL("dev %d: adjacent free blocks at %#lx", dev,
                                 (unsigned long)b->addr);
                        fr += b->size;
                        nfree++;
                    } else if (b->state == B_ALLOC) {
                        if (map_get(&a->map, b->addr) != b)
                            FAIL("dev %d: live block %#lx not in the map", dev,
                                 (unsigned long)b->addr);
                        if (b->req > b->size)
                            FAIL("dev %d: block %#lx smaller than its request",
                                 dev, (unsigned long)b->addr);
                        alloc += b->size;
                        req += b->req;
                        nlive++;
                        busy += b->size;
                    } else if (b->state == B_BACKING) {
                        alloc += b->size; /* taken; its taker waits */
                        req += b->req;
                        busy += b->size;
                    } else if (b->state == B_PENDING) {
                        pend += b->size;
                        busy += b->size;
                    } else {
                        FAIL("dev %d: block %#lx in state %d", dev,
                             (unsigned long)b->addr, b->state);
                    }
                    if (s->pages && (b->state == B_ALLOC || b->state == B_PENDING))
                        for (uintptr_t x = b->addr & ~(uintptr_t)(pg - 1);
                             x < b->addr + b->size; x += pg)
                            if (s->pages[(x - s->base) / pg] == 0)
                                FAIL("dev %d: block %#lx (state %d) on an "
                                     "unmapped page", dev,
                                     (unsigned long)b->addr, b->state);
                    at += b->size;
                }
                if (at != s->base + s->size)
                    FAIL("dev %d: segment %#lx not covered by its blocks", dev,
                         (unsigned long)s->base);
                if (busy != s->busy)
                    FAIL("dev %d: segment %#lx busy %zu, blocks say %zu", dev,
                         (unsigned long)s->base, s->busy, busy);
            }
            uint64_t binned = 0, binbytes = 0;
            for (int k = 0; k < 2; k++) {
                struct bins *bs = k ? &a->large : &a->small;
                for (unsigned bin = 0; bin < NBINS; bin++) {
                    bool set = (bs->map[bin / 64] >> (bin % 64)) & 1;
                    if (set != (bs->head[bin] != NULL))
                        FAIL("dev %d: bin %u bitmap wrong", dev, bin);
                    for (struct blk *b = bs->head[bin]; b; b = b->lnext) {
                        if (b->state != B_FREE || b->bin != bin ||
                            bin_of(b->size) != bin || (bool)k != b->seg->large)
                            FAIL("dev %d: bin %u holds a wrong block", dev, bin);
                        if (b->lnext && b->lnext->size < b->size)
                            FAIL("dev %d: bin %u not sorted", dev, bin);
                        binned++;
                        binbytes += b->size;
                    }
                }
            }
            uint64_t listed = 0;
            for (struct blk *b = a->pend_head; b; b = b->lnext) {
                if (b->state != B_PENDING)
                    FAIL("dev %d: pending list holds a non-pending block", dev);
                if (b->lnext && b->lnext->tag < b->tag)
                    FAIL("dev %d: pending list out of order", dev);
                listed += b->size;
            }
            if (binned != nfree || binbytes != fr)
                FAIL("dev %d arena %d: %lu free blocks, %lu binned", dev, i,
                     (unsigned long)nfree, (unsigned long)binned);
            if (listed != pend)
                FAIL("dev %d arena %d: pending bytes differ", dev, i);
            if (a->map.n != nlive)
                FAIL("dev %d arena %d: %zu blocks in the map, %lu live", dev, i,
                     a->map.n, (unsigned long)nlive);
            if (res != a->reserved || alloc != a->allocated ||
                req != a->requested || pend != a->pending || fr != a->free_bytes)
                FAIL("dev %d arena %d: counters disagree with the blocks", dev, i);
            if (unbacked != a->unbacked)
                FAIL("dev %d arena %d: unbacked bytes differ", dev, i);
            if (res != alloc + pend + fr)
                FAIL("dev %d arena %d: reserved != allocated+pending+free", dev, i);
            pend_total += pend;
        }
        (void)pend_total;
    out:
        for (int i = 0; i < POOL_ARENAS; i++)
            pthread_mutex_unlock(&d->arenas[i].lock);
    }
    if (!bad) {
        pthread_mutex_lock(&p->seg_lock);
        for (size_t i = 1; i < p->nseg; i++)
            if (p->segidx[i - 1].base + p->segidx[i - 1].size > p->segidx[i].base)
                bad = "segments overlap";
        for (size_t i = 0; i < p->nseg && !bad; i++)
            if (p->segidx[i].arena != p->segidx[i].s->arena ||
                p->segidx[i].base != p->segidx[i].s->base)
                bad = "segment index out of date";
        pthread_mutex_unlock(&p->seg_lock);
    }
#undef FAIL
    return bad;
}
