/* pool_index.c - the caching pool's data structures, which decide nothing.
 *
 * Size bins (free blocks sorted by size then address, and a bitmap of the
 * bins that hold any), the growth of an arena's address map, and the
 * segment index that frees search without a lock (a seqlock: see struct
 * pool in pool_internal.h). Their fast paths - bin lookup, the map's
 * get/put/take, block structs - are inline in pool_internal.h, next to
 * the types. What to allocate, when to synchronize and when to give
 * memory back is pool.c's business.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pool_internal.h"

/* ---- size bins ------------------------------------------------------- */

void bin_insert(struct bins *bs, struct blk *b)
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

void bin_remove(struct bins *bs, struct blk *b)
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

/* ---- an arena's live blocks by address (arena locked) ------------------- */

bool map_grow(struct addrmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 256;
    struct entry *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->tab[i].key == 0)
            continue;
        size_t j = slot_of(m->tab[i].key, cap);
        while (t[j].key)
            j = (j + 1) & (cap - 1);
        t[j] = m->tab[i];
    }
    free(m->tab);
    m->tab = t;
    m->cap = cap;
    return true;
}

/* ---- the segment index --------------------------------------------------- */

/* Writers hold seg_lock and keep seg_seq odd while they change the index;
 * readers retry until they see the same even count before and after. */

static void seg_write_begin(struct pool *p)
{
    __atomic_store_n(&p->seg_seq, p->seg_seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void seg_write_end(struct pool *p)
{
    __atomic_store_n(&p->seg_seq, p->seg_seq + 1, __ATOMIC_RELEASE);
}

struct seg *seg_new(struct pool *p)
{
    pthread_mutex_lock(&p->seg_lock);
    struct seg *s = p->seg_spare;
    if (s)
        p->seg_spare = s->snext;
    pthread_mutex_unlock(&p->seg_lock);
    if (s == NULL)
        s = malloc(sizeof *s);
    if (s)
        memset(s, 0, sizeof *s);
    return s;
}

#define STORE_REF(dst, src)                                                   \
    do {                                                                      \
        __atomic_store_n(&(dst).base, (src).base, __ATOMIC_RELAXED);          \
        __atomic_store_n(&(dst).size, (src).size, __ATOMIC_RELAXED);          \
        __atomic_store_n(&(dst).s, (src).s, __ATOMIC_RELAXED);                \
        __atomic_store_n(&(dst).dev, (src).dev, __ATOMIC_RELAXED);            \
        __atomic_store_n(&(dst).arena, (src).arena, __ATOMIC_RELAXED);        \
    } while (0)

bool segidx_add(struct pool *p, struct seg *s)
{
    pthread_mutex_lock(&p->seg_lock);
    if (p->segidx == NULL) {
        void *m = mmap(NULL, MAX_SEGMENTS * sizeof *p->segidx,
                       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                       MAP_NORESERVE, -1, 0);
        p->segidx = m == MAP_FAILED ? NULL : m;
    }
    if (p->segidx == NULL || p->nseg == MAX_SEGMENTS) {
        pthread_mutex_unlock(&p->seg_lock);
        return false;
    }
    struct segref ref = {s->base, s->size, s, s->dev, s->arena};
    seg_write_begin(p);
    size_t i = p->nseg;
    while (i > 0 && p->segidx[i - 1].base > s->base) {
        STORE_REF(p->segidx[i], p->segidx[i - 1]);
        i--;
    }
    STORE_REF(p->segidx[i], ref);
    __atomic_store_n(&p->nseg, p->nseg + 1, __ATOMIC_RELAXED);
    seg_write_end(p);
    pthread_mutex_unlock(&p->seg_lock);
    return true;
}

void segidx_remove(struct pool *p, struct seg *s)
{
    pthread_mutex_lock(&p->seg_lock);
    seg_write_begin(p);
    for (size_t i = 0; i < p->nseg; i++) {
        if (p->segidx[i].s == s) {
            for (size_t k = i; k + 1 < p->nseg; k++)
                STORE_REF(p->segidx[k], p->segidx[k + 1]);
            __atomic_store_n(&p->nseg, p->nseg - 1, __ATOMIC_RELAXED);
            break;
        }
    }
    seg_write_end(p);
    s->snext = p->seg_spare;
    p->seg_spare = s;
    pthread_mutex_unlock(&p->seg_lock);
}

void segidx_set_arena(struct pool *p, struct seg *s, unsigned arena)
{
    pthread_mutex_lock(&p->seg_lock);
    s->arena = (uint8_t)arena;
    seg_write_begin(p);
    for (size_t i = 0; i < p->nseg; i++) {
        if (p->segidx[i].s == s) {
            __atomic_store_n(&p->segidx[i].arena, arena, __ATOMIC_RELAXED);
            break;
        }
    }
    seg_write_end(p);
    pthread_mutex_unlock(&p->seg_lock);
}

bool segidx_find(struct pool *p, uintptr_t ptr, struct segref *out)
{
    for (;;) {
        uint64_t s1 = __atomic_load_n(&p->seg_seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) {
            __builtin_ia32_pause();
            continue;
        }
        bool found = false;
        size_t lo = 0, hi = __atomic_load_n(&p->nseg, __ATOMIC_RELAXED);
        struct segref *v = __atomic_load_n(&p->segidx, __ATOMIC_RELAXED);
        while (v && lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            uintptr_t base = __atomic_load_n(&v[mid].base, __ATOMIC_RELAXED);
            size_t size = __atomic_load_n(&v[mid].size, __ATOMIC_RELAXED);
            if (ptr < base) {
                hi = mid;
            } else if (ptr >= base + size) {
                lo = mid + 1;
            } else {
                out->base = base;
                out->size = size;
                out->s = __atomic_load_n(&v[mid].s, __ATOMIC_RELAXED);
                out->dev = __atomic_load_n(&v[mid].dev, __ATOMIC_RELAXED);
                out->arena = __atomic_load_n(&v[mid].arena, __ATOMIC_RELAXED);
                found = true;
                break;
            }
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->seg_seq, __ATOMIC_RELAXED) == s1)
            return found;
    }
}
