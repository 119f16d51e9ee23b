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
 * Pending frees. A freed block waits in its arena's FIFO with a tag from
 * the device's free counter. When a device-wide synchronization that
 * started after the tag was drawn completes, the device's safe mark moves
 * past it and the block is promoted - merged and binned - by the next
 * thread that takes the arena's lock. See pool.h for the rule.
 *
 * IPC. Requests above POOL_MEDIUM_MAX are only ever placed at the start of
 * a segment, so cudaIpcGetMemHandle on them - which names the whole
 * segment - gives another process the right address.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define NLINEAR 128                 /* 512-byte bins up to 64 KiB */
#define NBINS (NLINEAR + 48 * 16)   /* then 16 per power of two */
#define BIN_WORDS ((NBINS + 63) / 64)
#define NSHARDS 64
#define LARGE_SPLIT_MIN (1u << 20)  /* large remainders below this stay */

enum { B_FREE = 1, B_ALLOC = 2, B_PENDING = 3 };

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
    int dev;
    uint8_t large, arena;
};

struct bins {
    uint64_t map[BIN_WORDS];
    struct blk *head[NBINS];
};

struct arena {
    pthread_mutex_t lock;
    struct bins small, large;
    struct blk *pend_head, *pend_tail;
    struct seg *segs;
    struct blk *spare;
    /* read without the lock by pool_idle/stats: relaxed atomics */
    uint64_t reserved, allocated, requested, pending, free_bytes;
    uint64_t nsegs;
};

struct pdev {
    struct arena arenas[POOL_ARENAS];
    uint64_t free_seq;      /* next tag */
    uint64_t safe_seq;      /* tags below this are reusable */
    uint64_t pending_bytes; /* over all arenas */
    uint64_t syncs, promotions;
    pthread_mutex_t sync_lock;
};

struct entry {
    uintptr_t key; /* 0: empty */
    struct blk *b;
};

struct shard {
    pthread_mutex_t lock;
    struct entry *tab;
    size_t cap, n; /* cap: power of two */
};

struct pool {
    struct pool_upstream up;
    struct pool_observer obs;
    struct pdev *dev[POOL_MAX_DEVICES];
    pthread_mutex_t dev_lock;
    struct shard shards[NSHARDS];
    pthread_rwlock_t seg_lock; /* the sorted segment index */
    struct seg **segidx;
    size_t nseg, segcap;
};

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define ADD(x, v) STORE(x, LOAD(x) + (v)) /* writers hold the arena lock */

/* ---- size bins ------------------------------------------------------- */

static unsigned bin_of(size_t size)
{
    if (size <= (size_t)NLINEAR * POOL_ROUND)
        return (unsigned)(size / POOL_ROUND) - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
    unsigned sub = (unsigned)(size >> (k - 4)) & 15u;
    unsigned b = NLINEAR + (k - 16) * 16 + sub;
    return b < NBINS ? b : NBINS - 1;
}

static void bin_insert(struct bins *bs, struct blk *b)
{
    unsigned i = bin_of(b->size);
    b->bin = (uint16_t)i;
    struct blk **pp = &bs->head[i], *prev = NULL;
    while (*pp && ((*pp)->size < b->size ||
                   ((*pp)->size == b->size && (*pp)->addr < b->addr))) {
        prev = *pp;
        pp = &(*pp)->lnext;
    }
    b->lnext = *pp;
    b->lprev = prev;
    if (*pp)
        (*pp)->lprev = b;
    *pp = b;
    bs->map[i / 64] |= 1ull << (i % 64);
}

static void bin_remove(struct bins *bs, struct blk *b)
{
    unsigned i = b->bin;
    if (b->lprev)
        b->lprev->lnext = b->lnext;
    else
        bs->head[i] = b->lnext;
    if (b->lnext)
        b->lnext->lprev = b->lprev;
    if (bs->head[i] == NULL)
        bs->map[i / 64] &= ~(1ull << (i % 64));
    b->lprev = b->lnext = NULL;
}

/* Smallest free block of at least `size`; with at_base, only blocks at the
 * start of their segment. */
static struct blk *bin_find(struct bins *bs, size_t size, bool at_base)
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
                if (b->size >= size && (!at_base || b->addr == b->seg->base))
                    return b;
        }
    }
    return NULL;
}

/* ---- block structs ----------------------------------------------------- */

static struct blk *blk_new(struct arena *a)
{
    struct blk *b = a->spare;
    if (b)
        a->spare = b->lnext;
    else if ((b = malloc(sizeof *b)) == NULL)
        return NULL;
    memset(b, 0, sizeof *b);
    return b;
}

static void blk_put(struct arena *a, struct blk *b)
{
    b->lnext = a->spare;
    a->spare = b;
}

/* ---- the address map of live blocks ----------------------------------- */

static struct shard *shard_of(struct pool *p, uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
    return &p->shards[(h >> 58) % NSHARDS];
}

static size_t slot_of(uintptr_t key, size_t cap)
{
    return (size_t)(((uint64_t)key * 0xff51afd7ed558ccdull) >> 17) & (cap - 1);
}

static bool map_put_locked(struct shard *s, uintptr_t key, struct blk *b)
{
    if ((s->n + 1) * 10 > s->cap * 7) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        struct entry *t = calloc(cap, sizeof *t);
        if (t == NULL)
            return false;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->tab[i].key == 0)
                continue;
            size_t j = slot_of(s->tab[i].key, cap);
            while (t[j].key)
                j = (j + 1) & (cap - 1);
            t[j] = s->tab[i];
        }
        free(s->tab);
        s->tab = t;
        s->cap = cap;
    }
    size_t j = slot_of(key, s->cap);
    while (s->tab[j].key)
        j = (j + 1) & (s->cap - 1);
    s->tab[j] = (struct entry){key, b};
    s->n++;
    return true;
}

static bool map_put(struct pool *p, uintptr_t key, struct blk *b)
{
    struct shard *s = shard_of(p, key);
    pthread_mutex_lock(&s->lock);
    bool ok = map_put_locked(s, key, b);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* Remove key; returns its block or NULL. Backward-shift deletion keeps
 * probe sequences intact without tombstones. */
static struct blk *map_take(struct pool *p, uintptr_t key)
{
    struct shard *s = shard_of(p, key);
    pthread_mutex_lock(&s->lock);
    struct blk *b = NULL;
    if (s->cap) {
        size_t j = slot_of(key, s->cap);
        while (s->tab[j].key && s->tab[j].key != key)
            j = (j + 1) & (s->cap - 1);
        if (s->tab[j].key == key) {
            b = s->tab[j].b;
            size_t hole = j;
            for (;;) {
                j = (j + 1) & (s->cap - 1);
                if (s->tab[j].key == 0)
                    break;
                size_t home = slot_of(s->tab[j].key, s->cap);
                /* move j back into the hole if its home is not in (hole, j] */
                if (((j - home) & (s->cap - 1)) >= ((j - hole) & (s->cap - 1))) {
                    s->tab[hole] = s->tab[j];
                    hole = j;
                }
            }
            s->tab[hole].key = 0;
            s->tab[hole].b = NULL;
            s->n--;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return b;
}

static struct blk *map_get(struct pool *p, uintptr_t key)
{
    struct shard *s = shard_of(p, key);
    pthread_mutex_lock(&s->lock);
    struct blk *b = NULL;
    if (s->cap) {
        size_t j = slot_of(key, s->cap);
        while (s->tab[j].key && s->tab[j].key != key)
            j = (j + 1) & (s->cap - 1);
        if (s->tab[j].key == key)
            b = s->tab[j].b;
    }
    pthread_mutex_unlock(&s->lock);
    return b;
}

/* ---- the segment index (sorted by base; changes only on grow/release) -- */

static bool segidx_add(struct pool *p, struct seg *s)
{
    pthread_rwlock_wrlock(&p->seg_lock);
    if (p->nseg == p->segcap) {
        size_t cap = p->segcap ? 2 * p->segcap : 64;
        struct seg **n = realloc(p->segidx, cap * sizeof *n);
        if (n == NULL) {
            pthread_rwlock_unlock(&p->seg_lock);
            return false;
        }
        p->segidx = n;
        p->segcap = cap;
    }
    size_t i = p->nseg;
    while (i > 0 && p->segidx[i - 1]->base > s->base) {
        p->segidx[i] = p->segidx[i - 1];
        i--;
    }
    p->segidx[i] = s;
    p->nseg++;
    pthread_rwlock_unlock(&p->seg_lock);
    return true;
}

static void segidx_remove(struct pool *p, struct seg *s)
{
    pthread_rwlock_wrlock(&p->seg_lock);
    for (size_t i = 0; i < p->nseg; i++) {
        if (p->segidx[i] == s) {
            memmove(&p->segidx[i], &p->segidx[i + 1],
                    (p->nseg - i - 1) * sizeof *p->segidx);
            p->nseg--;
            break;
        }
    }
    pthread_rwlock_unlock(&p->seg_lock);
}

/* The segment containing ptr, with the index read-locked; NULL if none. */
static struct seg *segidx_find_locked(struct pool *p, uintptr_t ptr)
{
    size_t lo = 0, hi = p->nseg;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        struct seg *s = p->segidx[mid];
        if (ptr < s->base)
            hi = mid;
        else if (ptr >= s->base + s->size)
            lo = mid + 1;
        else
            return s;
    }
    return NULL;
}

/* ---- devices and arenas ------------------------------------------------ */

struct pool *pool_create(const struct pool_upstream *up,
                         const struct pool_observer *obs)
{
    struct pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->up = *up;
    if (obs)
        p->obs = *obs;
    pthread_mutex_init(&p->dev_lock, NULL);
    pthread_rwlock_init(&p->seg_lock, NULL);
    for (int i = 0; i < NSHARDS; i++)
        pthread_mutex_init(&p->shards[i].lock, NULL);
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
    if (d == NULL && (d = calloc(1, sizeof *d)) != NULL) {
        for (int i = 0; i < POOL_ARENAS; i++)
            pthread_mutex_init(&d->arenas[i].lock, NULL);
        pthread_mutex_init(&d->sync_lock, NULL);
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
static void promote(struct pool *p, struct pdev *d, struct arena *a, int dev)
{
    uint64_t safe = __atomic_load_n(&d->safe_seq, __ATOMIC_ACQUIRE);
    if (a->pend_head == NULL || a->pend_head->tag >= safe)
        return;
    uint64_t n = 0;
    while (a->pend_head && a->pend_head->tag < safe) {
        struct blk *b = a->pend_head;
        a->pend_head = b->lnext;
        if (a->pend_head)
            a->pend_head->lprev = NULL;
        else
            a->pend_tail = NULL;
        b->lnext = b->lprev = NULL;
        ADD(a->pending, -b->size);
        __atomic_sub_fetch(&d->pending_bytes, b->size, __ATOMIC_RELAXED);
        if (p->obs.free_completed)
            p->obs.free_completed(p->obs.ctx, dev, b->addr, b->size);
        make_free(a, b);
        n++;
    }
    __atomic_add_fetch(&d->promotions, 1, __ATOMIC_RELAXED);
    (void)n;
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

static size_t segment_size(size_t size)
{
    if (size <= POOL_SMALL_MAX)
        return POOL_SMALL_SEGMENT;
    if (size <= POOL_MEDIUM_MAX)
        return POOL_MEDIUM_SEGMENT;
    return (size + POOL_LARGE_ROUND - 1) & ~(size_t)(POOL_LARGE_ROUND - 1);
}

static void retire_locked(struct pdev *d, struct arena *a, struct blk *b);

/* Enter a block just taken into the address map (arena locked, so the
 * map and the arena agree at every lock boundary). Without host memory
 * for the map entry the block goes straight back as pending and the
 * caller sees the failure through b->state. */
static void publish(struct pool *p, struct arena *a, struct pdev *d,
                    struct blk *b)
{
    if (!map_put(p, b->addr, b))
        retire_locked(d, a, b);
}

/* Try one arena: promote, best fit, take. */
static struct blk *try_arena(struct pool *p, struct pdev *d, struct arena *a,
                             int dev, size_t size, size_t req)
{
    pthread_mutex_lock(&a->lock);
    promote(p, d, a, dev);
    struct blk *b = bin_find(bins_for(a, is_large(size)), size,
                             size > POOL_MEDIUM_MAX);
    if (b) {
        b = take(a, b, size, req);
        publish(p, a, d, b);
    }
    pthread_mutex_unlock(&a->lock);
    return b;
}

static struct blk *try_all(struct pool *p, struct pdev *d, int dev,
                           unsigned first, size_t size, size_t req)
{
    for (unsigned i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[(first + i) % POOL_ARENAS];
        if (i > 0 && LOAD(a->nsegs) == 0)
            continue;
        struct blk *b = try_arena(p, d, a, dev, size, req);
        if (b)
            return b;
    }
    return NULL;
}

uint64_t pool_sync_snapshot(struct pool *p, int dev)
{
    struct pdev *d = dev >= 0 && dev < POOL_MAX_DEVICES
                         ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
                         : NULL;
    return d ? __atomic_load_n(&d->free_seq, __ATOMIC_ACQUIRE) : 0;
}

void pool_synced(struct pool *p, int dev, uint64_t snapshot)
{
    struct pdev *d = dev >= 0 && dev < POOL_MAX_DEVICES
                         ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
                         : NULL;
    if (d == NULL)
        return;
    uint64_t cur = __atomic_load_n(&d->safe_seq, __ATOMIC_RELAXED);
    while (cur < snapshot &&
           !__atomic_compare_exchange_n(&d->safe_seq, &cur, snapshot, false,
                                        __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

/* One device-wide synchronization on behalf of the pool. Threads that
 * find a synchronization already under way wait for it instead of making
 * another. true if the safe mark covers every free before the call. */
static bool pool_sync(struct pool *p, struct pdev *d, int dev)
{
    uint64_t want = __atomic_load_n(&d->free_seq, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&d->sync_lock);
    bool ok = true;
    if (__atomic_load_n(&d->safe_seq, __ATOMIC_ACQUIRE) < want) {
        uint64_t snap = __atomic_load_n(&d->free_seq, __ATOMIC_ACQUIRE);
        int r = p->up.sync(p->up.ctx, dev);
        if (p->obs.synced)
            p->obs.synced(p->obs.ctx, dev, r);
        if (r == 0) {
            __atomic_add_fetch(&d->syncs, 1, __ATOMIC_RELAXED);
            pool_synced(p, dev, snap);
        } else {
            ok = false;
        }
    }
    pthread_mutex_unlock(&d->sync_lock);
    return ok;
}

/* Give back every fully free segment of dev. */
static void trim(struct pool *p, struct pdev *d, int dev)
{
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[i];
        struct seg *gone = NULL;
        pthread_mutex_lock(&a->lock);
        promote(p, d, a, dev);
        for (struct seg *s = a->segs, *next; s; s = next) {
            next = s->snext;
            if (s->busy != 0)
                continue;
            struct blk *b = s->first; /* one free block spans it */
            bin_remove(bins_for(a, s->large), b);
            blk_put(a, b);
            ADD(a->free_bytes, -s->size);
            ADD(a->reserved, -s->size);
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
            segidx_remove(p, s);
            p->up.release(p->up.ctx, dev, s->base, s->size);
            if (p->obs.segment_free)
                p->obs.segment_free(p->obs.ctx, dev, s->base, s->size);
            free(s);
        }
    }
}

void pool_trim(struct pool *p, int dev)
{
    struct pdev *d = get_dev(p, dev);
    if (d == NULL)
        return;
    if (__atomic_load_n(&d->pending_bytes, __ATOMIC_RELAXED))
        pool_sync(p, d, dev);
    trim(p, d, dev);
}

/* Take a new segment from upstream into arena a and carve the block. */
static int grow(struct pool *p, struct pdev *d, int dev, unsigned ai,
                size_t size, size_t req, struct blk **out)
{
    size_t ssize = segment_size(size);
    uintptr_t base = 0;
    int r = p->up.alloc(p->up.ctx, dev, ssize, &base);
    if (r != 0)
        return r;
    struct seg *s = calloc(1, sizeof *s);
    if (s) {
        s->base = base; /* before it goes into the sorted index */
        s->size = ssize;
        s->dev = dev;
    }
    struct arena *a = &d->arenas[ai];
    pthread_mutex_lock(&a->lock);
    struct blk *b = s ? blk_new(a) : NULL;
    if (b == NULL || !segidx_add(p, s)) {
        if (b)
            blk_put(a, b);
        pthread_mutex_unlock(&a->lock);
        free(s);
        p->up.release(p->up.ctx, dev, base, ssize);
        return 2; /* cudaErrorMemoryAllocation: host memory ran out */
    }
    s->large = is_large(size);
    s->arena = (uint8_t)ai;
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
    if (p->obs.segment_alloc)
        p->obs.segment_alloc(p->obs.ctx, dev, base, ssize);
    bin_insert(bins_for(a, s->large), b);
    *out = take(a, b, size, req);
    publish(p, a, d, *out);
    pthread_mutex_unlock(&a->lock);
    return 0;
}

/* Make a live block pending (it is no longer in the map). Arena locked. */
static void retire_locked(struct pdev *d, struct arena *a, struct blk *b)
{
    b->state = B_PENDING;
    b->tag = __atomic_fetch_add(&d->free_seq, 1, __ATOMIC_ACQ_REL);
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
    __atomic_add_fetch(&d->pending_bytes, b->size, __ATOMIC_RELAXED);
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
    struct blk *b = try_all(p, d, dev, ai, size, req);
    if (b == NULL) {
        /* Only pending memory could serve this: one synchronization makes
         * every pending block reusable at once. */
        uint64_t pend = __atomic_load_n(&d->pending_bytes, __ATOMIC_RELAXED);
        if (pend >= size && pool_sync(p, d, dev))
            b = try_all(p, d, dev, ai, size, req);
    }
    int r = 0;
    if (b == NULL && (r = grow(p, d, dev, ai, size, req, &b)) != 0) {
        /* Out of memory: make pending memory reusable, give back what is
         * cached and unused, and try again. */
        if (__atomic_load_n(&d->pending_bytes, __ATOMIC_RELAXED) &&
            pool_sync(p, d, dev))
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
    /* Find the block, then remove it from the map under its arena's lock,
     * so that of two concurrent frees of one pointer exactly one wins. */
    struct blk *b = map_get(p, ptr);
    if (b == NULL) {
        pthread_rwlock_rdlock(&p->seg_lock);
        struct seg *s = segidx_find_locked(p, ptr);
        pthread_rwlock_unlock(&p->seg_lock);
        return s ? POOL_INVALID : POOL_NOT_MINE;
    }
    struct seg *s = b->seg;
    int dev = s->dev;
    struct pdev *d = p->dev[dev];
    struct arena *a = &d->arenas[s->arena];
    pthread_mutex_lock(&a->lock);
    if (map_take(p, ptr) != b) {
        pthread_mutex_unlock(&a->lock);
        return POOL_INVALID; /* freed meanwhile by another thread */
    }
    retire_locked(d, a, b);
    pthread_mutex_unlock(&a->lock);
    *devp = dev;
    return 0;
}

void pool_stats(struct pool *p, int dev, struct pool_stats *out)
{
    memset(out, 0, sizeof *out);
    struct pdev *d = dev >= 0 && dev < POOL_MAX_DEVICES
                         ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
                         : NULL;
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        struct arena *a = &d->arenas[i];
        pthread_mutex_lock(&a->lock);
        out->reserved += a->reserved;
        out->allocated += a->allocated;
        out->requested += a->requested;
        out->pending += a->pending;
        out->free_bytes += a->free_bytes;
        out->segments += a->nsegs;
        for (int k = 0; k < 2; k++) {
            struct bins *bs = k ? &a->large : &a->small;
            for (unsigned bin = 0; bin < NBINS; bin++) {
                for (struct blk *b = bs->head[bin]; b; b = b->lnext) {
                    out->free_blocks++;
                    if (b->size > out->largest_free)
                        out->largest_free = b->size;
                }
            }
        }
        pthread_mutex_unlock(&a->lock);
    }
    out->syncs = LOAD(d->syncs);
    out->promotions = LOAD(d->promotions);
}

uint64_t pool_idle(struct pool *p, int dev)
{
    struct pdev *d = dev >= 0 && dev < POOL_MAX_DEVICES
                         ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
                         : NULL;
    uint64_t idle = 0;
    for (int i = 0; d && i < POOL_ARENAS; i++)
        idle += LOAD(d->arenas[i].reserved) - LOAD(d->arenas[i].allocated);
    return idle;
}

bool pool_lookup(struct pool *p, uintptr_t ptr, struct pool_block_info *out)
{
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&p->seg_lock);
    struct seg *s = segidx_find_locked(p, ptr);
    if (s) {
        out->seg_base = s->base;
        out->seg_size = s->size;
        out->device = s->dev;
    }
    pthread_rwlock_unlock(&p->seg_lock);
    if (s == NULL)
        return false;
    struct blk *b = map_get(p, ptr);
    if (b) {
        out->addr = b->addr;
        out->size = b->size;
        out->requested = b->req;
    }
    return true;
}

static void drop_arena(struct pool *p, struct arena *a)
{
    for (struct seg *s = a->segs, *next; s; s = next) {
        next = s->snext;
        for (struct blk *b = s->first, *bn; b; b = bn) {
            bn = b->next;
            if (b->state == B_ALLOC)
                map_take(p, b->addr);
            free(b);
        }
        segidx_remove(p, s);
        free(s);
    }
    while (a->spare) {
        struct blk *b = a->spare;
        a->spare = b->lnext;
        free(b);
    }
    memset(&a->small, 0, sizeof a->small);
    memset(&a->large, 0, sizeof a->large);
    a->segs = NULL;
    a->pend_head = a->pend_tail = NULL;
    STORE(a->reserved, 0);
    STORE(a->allocated, 0);
    STORE(a->requested, 0);
    STORE(a->pending, 0);
    STORE(a->free_bytes, 0);
    STORE(a->nsegs, 0);
}

void pool_forget_device(struct pool *p, int dev)
{
    struct pdev *d = dev >= 0 && dev < POOL_MAX_DEVICES
                         ? __atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE)
                         : NULL;
    if (d == NULL)
        return;
    for (int i = 0; i < POOL_ARENAS; i++) {
        pthread_mutex_lock(&d->arenas[i].lock);
        drop_arena(p, &d->arenas[i]);
        pthread_mutex_unlock(&d->arenas[i].lock);
    }
    STORE(d->pending_bytes, 0);
}

void pool_release_all(struct pool *p)
{
    for (int dev = 0; dev < POOL_MAX_DEVICES; dev++)
        if (__atomic_load_n(&p->dev[dev], __ATOMIC_ACQUIRE))
            pool_trim(p, dev);
}

/* ---- invariants ---------------------------------------------------------- */

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
        struct pdev *d = p->dev[dev];
        if (d == NULL)
            continue;
        for (int i = 0; i < POOL_ARENAS; i++)
            pthread_mutex_lock(&d->arenas[i].lock);
        uint64_t pend_total = 0;
        for (int i = 0; i < POOL_ARENAS; i++) {
            struct arena *a = &d->arenas[i];
            uint64_t res = 0, alloc = 0, req = 0, pend = 0, fr = 0, nfree = 0;
            for (struct seg *s = a->segs; s; s = s->snext) {
                res += s->size;
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
                        if (map_get(p, b->addr) != b)
                            FAIL("dev %d: live block %#lx not in the map", dev,
                                 (unsigned long)b->addr);
                        if (b->req > b->size)
                            FAIL("dev %d: block %#lx smaller than its request",
                                 dev, (unsigned long)b->addr);
                        alloc += b->size;
                        req += b->req;
                        busy += b->size;
                    } else if (b->state == B_PENDING) {
                        pend += b->size;
                        busy += b->size;
                    } else {
                        FAIL("dev %d: block %#lx in state %d", dev,
                             (unsigned long)b->addr, b->state);
                    }
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
            if (res != a->reserved || alloc != a->allocated ||
                req != a->requested || pend != a->pending || fr != a->free_bytes)
                FAIL("dev %d arena %d: counters disagree with the blocks", dev, i);
            if (res != alloc + pend + fr)
                FAIL("dev %d arena %d: reserved != allocated+pending+free", dev, i);
            pend_total += pend;
        }
        if (pend_total != d->pending_bytes)
            FAIL("dev %d: pending total %lu, counter %lu", dev,
                 (unsigned long)pend_total, (unsigned long)d->pending_bytes);
    out:
        for (int i = 0; i < POOL_ARENAS; i++)
            pthread_mutex_unlock(&d->arenas[i].lock);
    }
    if (!bad) {
        pthread_rwlock_rdlock(&p->seg_lock);
        for (size_t i = 1; i < p->nseg; i++)
            if (p->segidx[i - 1]->base + p->segidx[i - 1]->size > p->segidx[i]->base)
                bad = "segments overlap";
        pthread_rwlock_unlock(&p->seg_lock);
    }
#undef FAIL
    return bad;
}
