/* pool_trim.c - the caching pool gives memory back.
 *
 * The pool keeps the segments it takes from upstream. It gives back the
 * ones with nothing in them when asked (pool_trim; pool_release_all at
 * exit, after one synchronization), before it grows a large segment
 * (large ones left empty did not fit: pool_trim_class), and when out of
 * memory (pool_trim_device). What goes back, and which segment events
 * the trace gets for it, is pool_release_segment's (pool_vmm.c). After a
 * device reset nothing is given back: the driver freed it all, and
 * pool_forget_device only drops the books.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"

/* Give back fully free segments of dev: all, or only large or small ones
 * when `only` is set (before growing: then the pages of mapped segments
 * stay parked, for the segment about to be made). */
int pool_trim_class(struct pool *p, struct pdev *d, int dev, bool only,
                    bool large)
{
    int released = 0;
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[i];
        struct seg *gone = NULL;
        pthread_mutex_lock(&a->lock);
        pool_promote(p, a, dev);
        for (struct seg *s = a->segs, *next; s; s = next) {
            next = s->snext;
            if (s->busy != 0 || (only && (bool)s->large != large))
                continue;
            struct blk *b = s->first; /* one free block spans it */
            bin_remove(pool_bins_for(a, s->large), b);
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
            uint64_t *pages = s->pages, ftag = s->ftag, handle = s->handle;
            /* what synchronized the device */
            released += pages == NULL && handle == 0;
            segidx_remove(p, s); /* recycles s */
            pool_release_segment(p, d, dev, base, size, pages, handle, ftag,
                                 only);
        }
    }
    return released;
}

void pool_trim_device(struct pool *p, struct pdev *d, int dev)
{
    pool_trim_class(p, d, dev, false, false);
    if (pool_vmm_on(p))
        pool_spare_drain(p, d, dev);
}

void pool_trim(struct pool *p, int dev)
{
    struct pdev *d = pool_get_dev(p, dev);
    if (d == NULL)
        return;
    if (pool_pending_bytes(d))
        pool_sync(p, d, &d->arenas[0], dev);
    pool_trim_device(p, d, dev);
}

void pool_release_all(struct pool *p)
{
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++)
        if (__atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE))
            pool_trim(p, dev);
}

static void drop_arena(struct pool *p, struct arena *a,
                       struct pool_whole **whole, size_t *n, size_t *cap)
{
    for (struct seg *s = a->segs, *next; s; s = next) {
        next = s->snext;
        if (s->handle) { /* the reset leaves virtual memory */
            if (*n == *cap) {
                size_t c = *cap ? 2 * *cap : 64;
                struct pool_whole *w = realloc(*whole, c * sizeof *w);
                if (w) {
                    *whole = w;
                    *cap = c;
                }
            }
            if (*n < *cap) /* else lost: no host memory to list it */
                (*whole)[(*n)++] = (struct pool_whole){s->base, s->size, s->handle};
        }
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

void pool_forget_device(struct pool *p, int dev, struct pool_whole **whole,
                        size_t *n)
{
    size_t cap = 0;
    *whole = NULL;
    *n = 0;
    struct pdev *d = pool_dev_of(p, dev);
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        pthread_mutex_lock(&d->arenas[i].lock);
        drop_arena(p, &d->arenas[i], whole, n, &cap);
        pthread_mutex_unlock(&d->arenas[i].lock);
    }
    pthread_mutex_lock(&d->page_lock);
    d->nspare = 0; /* the reset freed them */
    d->spare_pages = 0;
    pthread_mutex_unlock(&d->page_lock);
}
