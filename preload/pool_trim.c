/* pool_trim.c - the caching pool gives memory back.
 *
 * The pool keeps the segments it takes from upstream. It gives back the
 * ones with nothing in them when asked (pool_trim; pool_release_all at
 * exit, after one synchronization), before it grows a large segment
 * (large ones left empty did not fit: pool_trim_class), and when out of
 * memory (pool_trim_device). What goes back, and which segment events
 * the trace gets for it, is pool_release_segment's (pool_vmm.c). At a
 * device reset the driver frees the cudaMalloc segments but not virtual
 * memory: pool_forget_device drops the books and lists that, and
 * pool_leftover_release gives it back after the reset.
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

/* Room for one more of `each` bytes in *list (n used, *cap allocated);
 * false if no host memory is left (the item is lost). */
static bool room(void *list, size_t n, size_t *cap, size_t each)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? 2 * *cap : 64;
    void *l = realloc(*(void **)list, c * each);
    if (l == NULL)
        return false;
    *(void **)list = l;
    *cap = c;
    return true;
}

static void leave_range(struct pool_range **list, size_t *n, size_t *cap,
                        uintptr_t va, size_t size)
{
    if (room(list, *n, cap, sizeof **list))
        (*list)[(*n)++] = (struct pool_range){va, size};
}

static void leave_handle(struct pool_leftover *left, uint64_t h)
{
    if (room(&left->destroy, left->ndestroy, &left->cap[2], sizeof h))
        left->destroy[left->ndestroy++] = h;
}

/* A segment's virtual memory, for after the reset: its mappings (one per
 * run of pages of one handle, or the whole one), their handles, its
 * address range. */
static void leave_segment(struct pool *p, struct seg *s,
                          struct pool_leftover *left)
{
    if (s->handle) {
        leave_range(&left->unmap, &left->nunmap, &left->cap[0], s->base, s->size);
        leave_handle(left, s->handle);
    } else if (s->pages) {
        size_t pg = p->up.page, n = s->size / pg;
        for (size_t i = 0; i < n;) {
            uint64_t h = s->pages[i];
            size_t j = i + 1;
            while (j < n && s->pages[j] == h)
                j++;
            if (h) {
                leave_range(&left->unmap, &left->nunmap, &left->cap[0],
                            s->base + i * pg, (j - i) * pg);
                leave_handle(left, h);
            }
            i = j;
        }
    } else {
        return; /* cudaMalloc memory: the reset frees it */
    }
    leave_range(&left->unreserve, &left->nunreserve, &left->cap[1], s->base, s->size);
}

static void drop_arena(struct pool *p, struct arena *a,
                       struct pool_leftover *left)
{
    for (struct seg *s = a->segs, *next; s; s = next) {
        next = s->snext;
        leave_segment(p, s, left);
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

void pool_forget_device(struct pool *p, int dev, struct pool_leftover *left)
{
    memset(left, 0, sizeof *left);
    struct pdev *d = pool_dev_of(p, dev);
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        pthread_mutex_lock(&d->arenas[i].lock);
        drop_arena(p, &d->arenas[i], left);
        pthread_mutex_unlock(&d->arenas[i].lock);
    }
    /* mappings of handles moved elsewhere, not unmapped yet; handles parked */
    pthread_mutex_lock(&d->defer_lock);
    for (unsigned i = 0; i < d->ndefer; i++)
        leave_range(&left->unmap, &left->nunmap, &left->cap[0], d->defer[i].va,
                    d->defer[i].size);
    d->ndefer = 0;
    pthread_mutex_unlock(&d->defer_lock);
    pthread_mutex_lock(&d->page_lock);
    for (size_t i = 0; i < d->nspare; i++)
        leave_handle(left, d->spare[i].h);
    d->nspare = 0;
    d->spare_pages = 0;
    pthread_mutex_unlock(&d->page_lock);
}

void pool_leftover_release(struct pool *p, int dev, struct pool_leftover *left)
{
    for (size_t i = 0; i < left->nunmap; i++)
        p->up.unmap(p->up.ctx, dev, left->unmap[i].va, left->unmap[i].size);
    for (size_t i = 0; i < left->ndestroy; i++)
        p->up.destroy(p->up.ctx, dev, left->destroy[i]);
    for (size_t i = 0; i < left->nunreserve; i++)
        p->up.unreserve(p->up.ctx, dev, left->unreserve[i].va, left->unreserve[i].size);
    free(left->unmap);
    free(left->unreserve);
    free(left->destroy);
    memset(left, 0, sizeof *left);
}
