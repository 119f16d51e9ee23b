/* whatif_pytorch.c - a model of PyTorch's CUDA caching allocator.
 *
 * The rules are those of c10/cuda/CUDACachingAllocator.cpp
 * (DeviceCachingAllocator) at pytorch/pytorch commit 001074d2 (2025;
 * the options as c10/core/AllocatorConfig.cpp reads them), written anew
 * in C from reading it:
 *
 * - round_size: under 512 bytes (kMinBlockSize) 512; else a multiple of
 *   512, or with roundup_power2_divisions for the size's power-of-two
 *   interval (1 MiB .. 64 GiB, 16 of them) the next of that many
 *   divisions between two powers of two, when size > 512 * divisions.
 * - Two pools: small (rounded size <= 1 MiB, kSmallSize) and large. Free
 *   blocks are ordered by (stream, size, address) and found best-fit
 *   with a lower bound, so a stream reuses only its own blocks.
 * - get_free_block: a block at or above max_split_size never serves a
 *   request under it; a request at or above it takes a block under
 *   size + max_non_split_rounding (default 20 MiB, kLargeBuffer). With
 *   expandable segments a block's size for best fit includes the
 *   unmapped space after it.
 * - A new segment (get_allocation_size): 2 MiB (kSmallBuffer) for small
 *   requests, 20 MiB (kLargeBuffer) for requests under 10 MiB
 *   (kMinLargeAlloc), else the size rounded up to 2 MiB (kRoundLarge).
 * - should_split: small pool or expandable: remainder >= 512; large pool:
 *   request < max_split_size and remainder > 1 MiB. A freed block merges
 *   with its free neighbours in the segment.
 * - When nothing cached fits: garbage collection (below); a new segment;
 *   if the device refuses, release_available_cached_blocks (with
 *   max_split_size set: the smallest oversize cached block that covers
 *   the request, or the largest oversize ones until enough) and retry;
 *   then release_cached_blocks (synchronize, cudaFree every unsplit
 *   cached block of both pools, unmap the free pages of expandable
 *   segments) and retry once more (a "retry"); then out of memory.
 * - expandable_segments: per stream and pool one segment with address
 *   space for 1 1/8 of the card (1 TiB without --device-memory), mapped
 *   in pages of 2 MiB (small pool) or 20 MiB (large pool) at the lowest
 *   free address that fits, so it grows in place; emptying the cache
 *   unmaps whole free pages and gives back a segment once nothing in it
 *   is mapped. A map or an unmap is one device call (num_device_alloc /
 *   num_device_free, as PyTorch counts them).
 * - garbage_collection_threshold: PyTorch runs it only under a memory
 *   fraction (set_per_process_memory_fraction); the model runs it when
 *   --device-memory is given, as if the fraction were 1.0 of that card:
 *   when reserved exceeds threshold * card, unsplit large cached blocks
 *   at least as old (in block searches since cached) as the average are
 *   freed until reserved is back under the threshold.
 *
 * Simplified or left out: the device limit is what this model reserves
 * plus what the program holds outside it, so a real card's CUDA context
 * and other processes are not counted; a free is reusable at once (the
 * events of recordStream are not in the trace); CUDA graph private pools,
 * IPC, and the free-memory callbacks are not modelled; a set fraction's
 * own check before each segment (total + allocation size > allowed) is
 * the device check here. syncs counts release_cached_blocks'
 * synchronization of all streams, each stream synchronization before an
 * unmap, and each cudaFree outside an emptying of the cache (cudaFree
 * waits for the device).
 */
#include <stdlib.h>
#include <string.h>

#include "whatif.h"

#define K_MIN_BLOCK 512ull
#define K_SMALL_SIZE (1ull << 20)
#define K_SMALL_BUFFER (2ull << 20)
#define K_LARGE_BUFFER (20ull << 20)
#define K_MIN_LARGE_ALLOC (10ull << 20)
#define K_ROUND_LARGE (2ull << 20)
#define DEFAULT_CARD (1ull << 40)

struct pool;
struct eseg { /* an expandable segment: address space, mapped in pages */
    uint64_t base, va_size, page;
    struct eseg *lprev, *lnext; /* the model's list of them */
};

struct blk {
    uint64_t addr, size, stream, serial;
    struct blk *prev, *next;  /* neighbours in the segment; a spare: the next spare */
    struct blk *c[2];         /* treap children, before and after (blocks or unmapped set) */
    struct blk *up;           /* treap parent; NULL at the root */
    uint32_t prio;
    bool in_tree;             /* in its pool's blocks or unmapped set */
    bool allocated, mapped;
    struct pool *pool;
    struct eseg *es;
    int64_t gc_base;
};

/* A treap ordered by (stream, size, address) or (stream, address): with
 * size_mask 0, a block's size is not looked at. Nodes know their parent,
 * so a block leaves the set, and the set is walked, without a search:
 * a request takes a block out and puts its rest in, a free takes its
 * free neighbours out and puts the whole in, and searches were most of
 * the model's time. */
struct tree {
    struct blk *root;
    uint64_t size_mask;
};
struct key {
    uint64_t stream, size, addr, serial; /* size 0 in a tree by address */
};

/* A pool's free blocks, in the same order, (stream, size, address):
 * per stream, a treap per size class - 16 classes per power of two -
 * found through two levels of bitmaps, so that best fit looks at the few
 * blocks of one class, where one treap of them all was a dozen levels
 * deep. Streams in order, then classes in order, then a class's treap. */
#define CLASS_SUB 16 /* classes per power of two */
#define CLASS_GROUPS 64
struct sset { /* one stream's */
    uint64_t stream;
    uint64_t groups;                  /* bit g: a class of group g has blocks */
    uint16_t classes[CLASS_GROUPS];   /* bit s: class g * CLASS_SUB + s has blocks */
    struct blk **roots[CLASS_GROUPS]; /* a group's CLASS_SUB roots, made when first used */
};
struct bset {
    struct sset *s; /* by stream */
    size_t n, cap;
};

/* Blocks come from slabs of BLK_SLAB and go back to a list of spares: a
 * request splits a block and a free merges two nearly every time. */
#define BLK_SLAB 256
struct slab {
    struct slab *next;
    struct blk b[BLK_SLAB];
};

struct pool {
    struct bset blocks;   /* free, mapped */
    struct tree unmapped; /* expandable segments' unmapped ranges */
    bool small;
    int64_t get_free_calls;
};

struct pt {
    struct wi_conf conf;
    uint64_t limit, card;
    const uint64_t *outside;
    struct pool small, large;
    struct wi_stats st;
    struct eseg *esegs;
    uint64_t next_addr, serial, rng;
    struct slab *slabs;
    struct blk *spare;
    /* Segments (cudaMalloc) take addresses downward from here. Best fit
     * breaks ties between free blocks of one size by address, so where
     * new segments lie decides which of them is reused; the driver hands
     * out lower addresses as a run goes on, and a model whose segments
     * rose instead chose other blocks: the TransformerEncoder's reserved
     * peak came out 2.75% low at the settings it was recorded under, and
     * exact with addresses going down (docs/validation.md, session 13). */
    uint64_t seg_top;
    bool in_release; /* inside release_cached_blocks: cudaFree adds no sync */
};

/* ---- the ordered sets ---------------------------------------------------- */

static struct key key_of(const struct tree *t, const struct blk *b)
{
    return (struct key){b->stream, b->size & t->size_mask, b->addr, b->serial};
}

/* Is block b before key k in tree t? Without branches: a search goes
 * either way at random at every level, and a mispredicted branch there
 * cost more than the comparisons (the key as two 128-bit halves). */
typedef unsigned __int128 u128;
static inline bool before(const struct tree *t, const struct blk *b, const struct key *k)
{
    u128 bh = (u128)b->stream << 64 | (b->size & t->size_mask);
    u128 kh = (u128)k->stream << 64 | k->size;
    u128 bl = (u128)b->addr << 64 | b->serial, kl = (u128)k->addr << 64 | k->serial;
    bool hl = bh < kh, he = bh == kh, ll = bl < kl;
    return (unsigned)hl + ((unsigned)he & (unsigned)ll); /* '|' became a branch */
}

/* split n into nodes < k and >= k, the before- and after-children of b */
static void tsplit(const struct tree *t, struct blk *n, const struct key *k, struct blk *b)
{
    struct blk **hole[2] = {&b->c[0], &b->c[1]}, *owner[2] = {b, b};
    while (n) { /* iterative: depth is bounded by the loop, not the stack */
        int s = !before(t, n, k); /* 0: n and its before-side go before b */
        *hole[s] = n;
        n->up = owner[s];
        owner[s] = n;
        hole[s] = &n->c[!s];
        n = n->c[!s];
    }
    *hole[0] = *hole[1] = NULL;
}

/* a's and b's nodes (all of a before all of b) as one subtree under up */
static struct blk *tmerge(struct blk *a, struct blk *b, struct blk *up)
{
    struct blk *root = NULL, **at = &root, *ab[2] = {a, b};
    while (ab[0] && ab[1]) {
        int s = ab[0]->prio <= ab[1]->prio; /* 0: a's root on top, b merged into its after-side */
        struct blk *x = ab[s];
        *at = x;
        x->up = up;
        up = x;
        at = &x->c[!s];
        ab[s] = x->c[!s];
    }
    *at = ab[0] ? ab[0] : ab[1];
    if (*at)
        (*at)->up = up;
    return root;
}

/* Down the key's path to where b's priority puts it, and the subtree
 * there split around b: one pass, touching only that path. */
static void tinsert(struct tree *t, struct blk *b)
{
    struct key k = key_of(t, b);
    struct blk **at = &t->root, *up = NULL;
    while (*at && (*at)->prio > b->prio) {
        up = *at;
        at = &(*at)->c[before(t, *at, &k)];
    }
    tsplit(t, *at, &k, b);
    *at = b;
    b->up = up;
    b->in_tree = true;
}

/* b's two subtrees merged in its place. */
static void terase(struct tree *t, struct blk *b)
{
    if (!b->in_tree)
        return;
    struct blk **at = b->up ? &b->up->c[b->up->c[1] == b] : &t->root;
    *at = tmerge(b->c[0], b->c[1], b->up);
    b->c[0] = b->c[1] = b->up = NULL;
    b->in_tree = false;
}

/* smallest node >= k */
static struct blk *tlower(const struct tree *t, const struct key *k)
{
    struct blk *n = t->root, *best = NULL;
    while (n) {
        bool lt = before(t, n, k);
        best = lt ? best : n;
        n = n->c[lt];
    }
    return best;
}

/* the node after b (in the set) */
static struct blk *tnext(const struct blk *b)
{
    if (b->c[1]) {
        b = b->c[1];
        while (b->c[0])
            b = b->c[0];
        return (struct blk *)b;
    }
    while (b->up && b->up->c[1] == b)
        b = b->up;
    return b->up;
}

/* largest node < k */
static struct blk *tbefore(const struct tree *t, const struct key *k)
{
    struct blk *n = t->root, *best = NULL;
    while (n) {
        bool lt = before(t, n, k);
        best = lt ? n : best;
        n = n->c[lt];
    }
    return best;
}

static struct blk *tfirst(const struct tree *t)
{
    struct blk *n = t->root;
    while (n && n->c[0])
        n = n->c[0];
    return n;
}

static struct blk *tlast(const struct tree *t)
{
    struct blk *n = t->root;
    while (n && n->c[1])
        n = n->c[1];
    return n;
}

/* ---- free blocks by stream and size class ----------------------------------- */

/* A size's class: exact below 16, else its power of two and the next four
 * bits; classes rise with sizes. */
static unsigned size_class(uint64_t size)
{
    if (size < CLASS_SUB)
        return (unsigned)size;
    unsigned lg = 63 - (unsigned)__builtin_clzll(size);
    return (lg - 3) * CLASS_SUB + (unsigned)(size >> (lg - 4)) % CLASS_SUB;
}

/* A class's treap, seen as a tree (written back with tree_done). */
static struct tree class_tree(struct blk *const *root)
{
    return (struct tree){root ? *root : NULL, UINT64_MAX};
}

static struct sset *sset_find(const struct bset *bs, uint64_t stream)
{
    size_t lo = 0, hi = bs->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (bs->s[mid].stream < stream)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < bs->n && bs->s[lo].stream == stream ? &bs->s[lo] : NULL;
}

/* The stream's, made where it has none; NULL when out of host memory. */
static struct sset *sset_get(struct bset *bs, uint64_t stream)
{
    struct sset *ss = sset_find(bs, stream);
    if (ss)
        return ss;
    if (bs->n == bs->cap) {
        size_t cap = bs->cap ? 2 * bs->cap : 4;
        struct sset *s = realloc(bs->s, cap * sizeof *s);
        if (s == NULL)
            return NULL;
        bs->s = s;
        bs->cap = cap;
    }
    size_t at = 0;
    while (at < bs->n && bs->s[at].stream < stream)
        at++;
    memmove(&bs->s[at + 1], &bs->s[at], (bs->n - at) * sizeof *bs->s);
    bs->n++;
    bs->s[at] = (struct sset){.stream = stream};
    return &bs->s[at];
}

/* Class c's root in ss; NULL when its group has none made. */
static struct blk **class_root(const struct sset *ss, unsigned c)
{
    struct blk **g = ss->roots[c / CLASS_SUB];
    return g ? &g[c % CLASS_SUB] : NULL;
}

/* The same, made where it is not; NULL when out of host memory. */
static struct blk **class_root_made(struct sset *ss, unsigned c)
{
    struct blk ***g = &ss->roots[c / CLASS_SUB];
    if (*g == NULL)
        *g = calloc(CLASS_SUB, sizeof **g);
    return *g ? &(*g)[c % CLASS_SUB] : NULL;
}

/* The first class at or after c with blocks; -1: none. */
static int class_from(const struct sset *ss, unsigned c)
{
    if (c >= CLASS_GROUPS * CLASS_SUB)
        return -1;
    unsigned g = c / CLASS_SUB;
    unsigned here = ss->classes[g] & (0xffffu << (c % CLASS_SUB)) & 0xffffu;
    if (here)
        return (int)(g * CLASS_SUB + (unsigned)__builtin_ctz(here));
    uint64_t later = g + 1 < CLASS_GROUPS ? ss->groups & (~0ull << (g + 1)) : 0;
    if (later == 0)
        return -1;
    g = (unsigned)__builtin_ctzll(later);
    return (int)(g * CLASS_SUB + (unsigned)__builtin_ctz(ss->classes[g]));
}

/* The last class before c with blocks; -1: none. */
static int class_before(const struct sset *ss, unsigned c)
{
    if (c == 0)
        return -1;
    c--;
    unsigned g = c / CLASS_SUB;
    unsigned here = ss->classes[g] & (0xffffu >> (CLASS_SUB - 1 - c % CLASS_SUB));
    if (here)
        return (int)(g * CLASS_SUB + 31 - (unsigned)__builtin_clz(here));
    uint64_t earlier = ss->groups & ((1ull << g) - 1);
    if (earlier == 0)
        return -1;
    g = 63 - (unsigned)__builtin_clzll(earlier);
    return (int)(g * CLASS_SUB + 31 - (unsigned)__builtin_clz(ss->classes[g]));
}

static void class_mark(struct sset *ss, unsigned c, bool has)
{
    unsigned g = c / CLASS_SUB;
    uint16_t bit = (uint16_t)(1u << (c % CLASS_SUB));
    ss->classes[g] = has ? ss->classes[g] | bit : ss->classes[g] & (uint16_t)~bit;
    ss->groups = ss->classes[g] ? ss->groups | 1ull << g : ss->groups & ~(1ull << g);
}

/* Out of host memory for a stream or a class, the block stays out of the
 * set: a free block never reused, let go with the model. */
static void bset_insert(struct bset *bs, struct blk *b)
{
    struct sset *ss = sset_get(bs, b->stream);
    unsigned c = size_class(b->size);
    struct blk **root = ss ? class_root_made(ss, c) : NULL;
    if (root == NULL)
        return;
    struct tree t = class_tree(root);
    tinsert(&t, b);
    *root = t.root;
    class_mark(ss, c, true);
}

static void bset_erase(struct bset *bs, struct blk *b)
{
    if (!b->in_tree)
        return;
    struct sset *ss = sset_find(bs, b->stream);
    unsigned c = size_class(b->size);
    struct blk **root = class_root(ss, c);
    struct tree t = class_tree(root);
    terase(&t, b);
    *root = t.root;
    if (t.root == NULL)
        class_mark(ss, c, false);
}

/* The first block of class c (-1: none) of ss's stream or a later one. */
static struct blk *first_from(const struct bset *bs, const struct sset *ss, int c)
{
    for (;;) {
        if (c >= 0) {
            struct tree t = class_tree(class_root(ss, (unsigned)c));
            return tfirst(&t);
        }
        if (++ss == bs->s + bs->n)
            return NULL;
        c = class_from(ss, 0);
    }
}

/* The first block of the stream at or above size. */
static struct blk *bset_lower(const struct bset *bs, uint64_t stream, uint64_t size)
{
    struct sset *ss = sset_find(bs, stream);
    if (ss == NULL)
        return NULL;
    unsigned c = size_class(size);
    struct blk **root = class_root(ss, c);
    if (root && *root) {
        struct tree t = class_tree(root);
        struct blk *b = tlower(&t, &(struct key){stream, size, 0, 0});
        if (b)
            return b;
    }
    int next = class_from(ss, c + 1);
    return next < 0 ? NULL : first_from(bs, ss, next);
}

/* The last block of the stream before k. */
static struct blk *bset_before(const struct bset *bs, const struct key *k)
{
    struct sset *ss = sset_find(bs, k->stream);
    if (ss == NULL)
        return NULL;
    unsigned c = size_class(k->size);
    struct tree t = class_tree(class_root(ss, c));
    struct blk *b = tbefore(&t, k);
    int prev = b ? -1 : class_before(ss, c);
    if (prev >= 0) {
        t = class_tree(class_root(ss, (unsigned)prev));
        b = tlast(&t);
    }
    return b;
}

static struct blk *bset_first(const struct bset *bs)
{
    return bs->n ? first_from(bs, bs->s, class_from(bs->s, 0)) : NULL;
}

/* The block after b (in the set), in the set's order. */
static struct blk *bset_next(const struct bset *bs, const struct blk *b)
{
    struct blk *n = tnext(b);
    if (n)
        return n;
    const struct sset *ss = sset_find(bs, b->stream);
    return first_from(bs, ss, class_from(ss, size_class(b->size) + 1));
}

static void bset_clear(struct bset *bs)
{
    for (size_t i = 0; i < bs->n; i++)
        for (int g = 0; g < CLASS_GROUPS; g++)
            free(bs->s[i].roots[g]);
    free(bs->s);
    *bs = (struct bset){0};
}

/* ---- blocks -------------------------------------------------------------- */

static struct blk *new_blk(struct pt *m, struct pool *p, uint64_t stream, uint64_t addr,
                           uint64_t size)
{
    if (m->spare == NULL) {
        struct slab *sl = malloc(sizeof *sl);
        if (sl == NULL)
            return NULL;
        sl->next = m->slabs;
        m->slabs = sl;
        for (int i = 0; i < BLK_SLAB; i++) {
            sl->b[i].next = m->spare;
            m->spare = &sl->b[i];
        }
    }
    struct blk *b = m->spare;
    m->spare = b->next;
    m->rng ^= m->rng << 13; /* xorshift: treap priorities */
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    *b = (struct blk){.addr = addr, .size = size, .stream = stream, .serial = ++m->serial,
                      .prio = (uint32_t)(m->rng >> 32), .pool = p, .mapped = true};
    return b;
}

static void del_blk(struct pt *m, struct blk *b)
{
    if (b) {
        b->next = m->spare;
        m->spare = b;
    }
}

static void insert_free(struct pool *p, struct blk *b)
{
    b->gc_base = p->get_free_calls;
    bset_insert(&p->blocks, b);
}

static bool is_split(const struct blk *b)
{
    return b->prev || b->next;
}

static bool device_has_room(struct pt *m, uint64_t n)
{
    if (!m->limit)
        return true;
    uint64_t out = m->outside ? *m->outside : 0;
    return out <= m->limit && n <= m->limit - out && m->st.reserved <= m->limit - out - n;
}

static void reserved_add(struct pt *m, uint64_t n)
{
    m->st.reserved += n;
}

/* The size rule of round_size and roundup_power2_next_division. */
uint64_t wi_pytorch_round(const struct wi_conf *c, uint64_t size)
{
    if (size < K_MIN_BLOCK)
        return K_MIN_BLOCK;
    int idx = 63 - __builtin_clzll(size) - 20;
    idx = idx < 0 ? 0 : idx > WI_ROUNDUP_INTERVALS - 1 ? WI_ROUNDUP_INTERVALS - 1 : idx;
    uint64_t div = c->roundup[idx];
    if (div > 1 && size > K_MIN_BLOCK * div) {
        if (!(size & (size - 1)))
            return size;
        uint64_t floor2 = 1ull << (63 - __builtin_clzll(size));
        uint64_t step = floor2 >> (63 - __builtin_clzll(div));
        if (step == 0)
            return floor2 << 1;
        uint64_t lo = size & ~(step - 1);
        return lo == size ? size : lo + step;
    }
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) / K_MIN_BLOCK);
}

static uint64_t allocation_size(uint64_t size)
{
    if (size <= K_SMALL_SIZE)
        return K_SMALL_BUFFER;
    if (size < K_MIN_LARGE_ALLOC)
        return K_LARGE_BUFFER;
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) / K_ROUND_LARGE);
}

/* try_merge_blocks: dst (in no set) takes in its free neighbour src. */
static uint64_t try_merge(struct pt *m, struct blk *dst, struct blk *src)
{
    if (!src || src->allocated || dst->mapped != src->mapped)
        return 0;
    struct pool *p = src->pool;
    if (src->mapped)
        bset_erase(&p->blocks, src);
    else
        terase(&p->unmapped, src);
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    dst->size += src->size;
    uint64_t n = src->size;
    del_blk(m, src);
    return n;
}

/* free_block: back into its pool, merged with its free neighbours. */
static void free_block(struct pt *m, struct blk *b)
{
    b->allocated = false;
    try_merge(m, b, b->prev);
    try_merge(m, b, b->next);
    insert_free(b->pool, b);
}

/* ---- getting a block ------------------------------------------------------ */

static uint64_t expandable_size(const struct blk *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static struct blk *get_free_block(struct pt *m, struct pool *p, uint64_t stream, uint64_t size)
{
    if (m->limit && m->conf.gc_threshold > 0)
        p->get_free_calls++;
    struct blk *b = bset_lower(&p->blocks, stream, size);
    if (b == NULL)
        return NULL;
    if (b->es) { /* best fit counts the unmapped space after a block */
        struct blk *n = bset_next(&p->blocks, b);
        while (b->es && n && n->stream == stream && expandable_size(n) < expandable_size(b)) {
            b = n;
            n = bset_next(&p->blocks, b);
        }
    }
    uint64_t mss = m->conf.max_split_size;
    if (size < mss && b->size >= mss)
        return NULL;
    if (size >= mss && b->size - size >= m->conf.max_non_split_rounding)
        return NULL;
    bset_erase(&p->blocks, b);
    return b;
}

static void release_block(struct pt *m, struct blk *b)
{
    bset_erase(&b->pool->blocks, b);
    m->st.reserved -= b->size;
    m->st.device_frees++;
    m->st.segments--;
    if (!m->in_release)
        m->st.syncs++; /* cudaFree waits for the device */
    del_blk(m, b);
}

static void garbage_collect(struct pt *m)
{
    uint64_t threshold = (uint64_t)(m->conf.gc_threshold * (double)m->limit);
    if (m->st.reserved <= threshold)
        return;
    uint64_t target = m->st.reserved - threshold, reclaimed = 0;
    struct pool *p = &m->large;
    double total_age = 0;
    int64_t count = 0;
    for (struct blk *b = bset_first(&p->blocks); b; b = bset_next(&p->blocks, b)) {
        if (!is_split(b) && !b->es) {
            total_age += (double)(p->get_free_calls - b->gc_base);
            count++;
        }
    }
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double threshold_age = total_age / (double)count;
        freed = false;
        struct blk *b = bset_first(&p->blocks);
        while (b) {
            struct blk *n = bset_next(&p->blocks, b);
            double age = (double)(p->get_free_calls - b->gc_base);
            if (!is_split(b) && !b->es && age >= threshold_age) {
                freed = true;
                reclaimed += b->size;
                total_age -= age;
                count--;
                release_block(m, b);
            }
            b = n;
        }
    }
}

/* ---- expandable segments --------------------------------------------------- */

static uint64_t pages_left(const struct eseg *e, uint64_t a)
{
    return (a - e->base) / e->page;
}
static uint64_t pages_right(const struct eseg *e, uint64_t a)
{
    uint64_t off = a - e->base;
    return off / e->page + (off % e->page != 0);
}

static bool allocatable(const struct blk *b)
{
    return b && !b->allocated && b->mapped;
}

/* find_expandable_block: the lowest address in a segment of this stream
 * with room for size (free and unmapped space), or a new segment. */
static struct blk *find_expandable(struct pt *m, struct pool *p, uint64_t stream,
                                   uint64_t size)
{
    struct key k = {stream, 0, 0, 0};
    for (struct blk *u = tlower(&p->unmapped, &k); u && u->stream == stream;
         u = tnext(u)) {
        struct blk *c = u;
        if (allocatable(c->prev))
            c = c->prev;
        uint64_t bytes = 0;
        for (struct blk *x = c; x && bytes < size && (!x->allocated); x = x->next)
            bytes += x->size;
        if (bytes >= size)
            return c;
    }
    uint64_t page = p->small ? K_SMALL_BUFFER : K_LARGE_BUFFER;
    uint64_t space = m->card + m->card / 8;
    space = (space + page - 1) / page * page;
    if (size > space)
        return NULL; /* more than the card: the real one fails too */
    struct eseg *e = calloc(1, sizeof *e);
    struct blk *b = e ? new_blk(m, p, stream, m->next_addr, space) : NULL;
    if (b == NULL) {
        free(e);
        return NULL;
    }
    e->base = m->next_addr;
    e->va_size = space;
    e->page = page;
    e->lnext = m->esegs;
    if (m->esegs)
        m->esegs->lprev = e;
    m->esegs = e;
    m->next_addr += space;
    b->mapped = false;
    b->es = e;
    tinsert(&p->unmapped, b);
    m->st.segments++;
    return b;
}

/* map_block: map the pages under the first size bytes of unmapped block
 * b; false when the device has no room for them. */
static bool map_block(struct pt *m, struct blk *b, uint64_t size)
{
    struct eseg *e = b->es;
    uint64_t first = pages_left(e, b->addr), last = pages_right(e, b->addr + size);
    uint64_t bytes = (last - first) * e->page;
    if (bytes > b->size)
        bytes = b->size;
    if (!device_has_room(m, bytes))
        return false;
    struct pool *p = b->pool;
    struct blk *rest = NULL;
    if (bytes < b->size) {
        rest = new_blk(m, p, b->stream, b->addr + bytes, b->size - bytes);
        if (rest == NULL)
            return false;
    }
    terase(&p->unmapped, b);
    b->mapped = true;
    if (rest) {
        rest->mapped = false;
        rest->es = e;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = bytes;
        tinsert(&p->unmapped, rest);
    }
    try_merge(m, b, b->prev);
    try_merge(m, b, b->next);
    insert_free(p, b);
    reserved_add(m, bytes);
    m->st.device_allocs++;
    return true;
}

static struct blk *alloc_expandable(struct pt *m, struct pool *p, uint64_t stream,
                                    uint64_t size)
{
    struct blk *c = find_expandable(m, p, stream, size);
    if (c == NULL)
        return NULL;
    if (!c->mapped && !map_block(m, c, c->size < size ? c->size : size))
        return NULL;
    while (c->size < size) {
        struct blk *n = c->next;
        if (n == NULL || n->mapped) /* cannot happen: find_expandable saw room */
            return NULL;
        uint64_t want = size - c->size;
        if (!map_block(m, n, want < n->size ? want : n->size))
            return NULL;
        c = n; /* map_block merged c, free before it, into n */
    }
    bset_erase(&p->blocks, c);
    return c;
}

/* unmap_block: the whole free pages inside free block b go back. */
static void unmap_block(struct pt *m, struct blk *b)
{
    struct eseg *e = b->es;
    uint64_t first = pages_right(e, b->addr), last = pages_left(e, b->addr + b->size);
    if (first >= last)
        return;
    struct pool *p = b->pool;
    uint64_t ua = e->base + first * e->page, un = (last - first) * e->page;
    uint64_t before = ua - b->addr, after = b->size - before - un;
    struct blk *bf = before ? new_blk(m, p, b->stream, b->addr, before) : NULL;
    struct blk *af = after ? new_blk(m, p, b->stream, ua + un, after) : NULL;
    if ((before && !bf) || (after && !af)) {
        del_blk(m, bf);
        del_blk(m, af);
        return;
    }
    bset_erase(&p->blocks, b);
    if (bf) {
        bf->es = e;
        bf->prev = b->prev;
        bf->next = b;
        if (b->prev)
            b->prev->next = bf;
        b->prev = bf;
        insert_free(p, bf);
    }
    if (af) {
        af->es = e;
        af->prev = b;
        af->next = b->next;
        if (b->next)
            b->next->prev = af;
        b->next = af;
        insert_free(p, af);
    }
    b->addr = ua;
    b->size = un;
    b->mapped = false;
    try_merge(m, b, b->prev);
    try_merge(m, b, b->next);
    tinsert(&p->unmapped, b);
    m->st.reserved -= un;
    m->st.device_frees++;
    m->st.syncs++; /* unmapHandles synchronizes the stream first */
}

/* ---- emptying the cache ------------------------------------------------------ */

static void drop_eseg(struct pt *m, struct eseg *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        m->esegs = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    free(e);
}

static void release_blocks(struct pt *m, struct pool *p)
{
    struct blk **to_unmap = NULL;
    size_t n = 0, cap = 0;
    struct blk *b = bset_first(&p->blocks);
    while (b) {
        struct blk *next = bset_next(&p->blocks, b);
        if (b->es) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct blk **t = realloc(to_unmap, nc * sizeof *t);
                if (t == NULL)
                    break;
                to_unmap = t;
                cap = nc;
            }
            to_unmap[n++] = b;
        } else if (!is_split(b)) {
            release_block(m, b);
        }
        b = next;
    }
    for (size_t i = 0; i < n; i++) {
        struct blk *u = to_unmap[i];
        unmap_block(m, u);
        if (!u->mapped && !is_split(u)) { /* the whole segment is unmapped */
            terase(&p->unmapped, u);
            drop_eseg(m, u->es);
            del_blk(m, u);
            m->st.segments--;
        }
    }
    free(to_unmap);
}

static bool release_cached_blocks(struct pt *m)
{
    m->st.syncs++; /* synchronize_and_free_events */
    m->in_release = true;
    release_blocks(m, &m->large);
    release_blocks(m, &m->small);
    m->in_release = false;
    return true;
}

static bool release_available(struct pt *m, struct pool *p, uint64_t stream, uint64_t size)
{
    uint64_t mss = m->conf.max_split_size;
    if (mss == UINT64_MAX)
        return false;
    struct key k = {stream, size < mss ? mss : size, 0, 0};
    struct blk *b = bset_lower(&p->blocks, stream, k.size);
    if (b) {
        if (b->es)
            return false; /* PyTorch would assert; never release a mapped part */
        release_block(m, b);
        return true;
    }
    /* none big enough: the largest oversize blocks of this stream */
    uint64_t released = 0;
    b = bset_before(&p->blocks, &k);
    while (b && released < k.size && b->size >= mss && !b->es) {
        struct blk *prev = bset_before(&p->blocks, &(struct key){b->stream, b->size, b->addr,
                                                                 b->serial});
        released += b->size;
        release_block(m, b);
        b = prev;
    }
    return released >= k.size;
}

/* alloc_block: a new segment (or pages of an expandable one). */
static struct blk *alloc_block(struct pt *m, struct pool *p, uint64_t stream, uint64_t size,
                               bool retry)
{
    if (retry)
        m->st.retries++;
    if (m->conf.expandable)
        return alloc_expandable(m, p, stream, size);
    uint64_t n = allocation_size(size);
    if (!device_has_room(m, n))
        return NULL;
    struct blk *b = new_blk(m, p, stream, m->seg_top - n, n);
    if (b == NULL)
        return NULL;
    m->seg_top -= n;
    reserved_add(m, n);
    m->st.device_allocs++;
    if (++m->st.segments > m->st.peak_segments)
        m->st.peak_segments = m->st.segments;
    return b;
}

static bool should_split(const struct pt *m, const struct blk *b, uint64_t size)
{
    uint64_t rest = b->size - size;
    if (b->pool->small || m->conf.expandable)
        return rest >= K_MIN_BLOCK;
    return size < m->conf.max_split_size && rest > K_SMALL_SIZE;
}

/* The free bytes of the pools and the largest free block (mapped). */
static void free_figures(const struct pt *m, uint64_t *free_bytes, uint64_t *largest)
{
    *free_bytes = m->st.reserved - m->st.allocated;
    *largest = 0;
    const struct pool *ps[2] = {&m->small, &m->large};
    for (int i = 0; i < 2; i++)
        for (struct blk *b = bset_first(&ps[i]->blocks); b; b = bset_next(&ps[i]->blocks, b))
            if (b->size > *largest)
                *largest = b->size;
}

static int pt_alloc(void *v, uint64_t orig, uint64_t stream, uint64_t *id)
{
    struct pt *m = v;
    uint64_t size = wi_pytorch_round(&m->conf, orig);
    struct pool *p = size <= K_SMALL_SIZE ? &m->small : &m->large;
    struct blk *b = get_free_block(m, p, stream, size);
    if (b == NULL) {
        if (m->limit && m->conf.gc_threshold > 0)
            garbage_collect(m);
        b = alloc_block(m, p, stream, size, false);
        if (b == NULL && release_available(m, p, stream, size))
            b = alloc_block(m, p, stream, size, false);
        if (b == NULL && release_cached_blocks(m))
            b = alloc_block(m, p, stream, size, true);
    }
    if (b == NULL)
        return -1;
    if (should_split(m, b, size)) {
        struct blk *rest = new_blk(m, p, stream, b->addr + size, b->size - size);
        if (rest) {
            rest->es = b->es;
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            b->size = size;
            insert_free(p, rest);
        }
    }
    b->allocated = true;
    m->st.allocated += b->size;
    if (m->st.segments > m->st.peak_segments)
        m->st.peak_segments = m->st.segments;
    if (m->st.reserved > m->st.peak_reserved) {
        m->st.peak_reserved = m->st.reserved;
        free_figures(m, &m->st.peak_free, &m->st.peak_largest_free);
    }
    *id = (uint64_t)(uintptr_t)b;
    return 0;
}

static void pt_free(void *v, uint64_t id)
{
    struct pt *m = v;
    struct blk *b = (struct blk *)(uintptr_t)id;
    m->st.allocated -= b->size;
    free_block(m, b);
}

static void *pt_init(const struct wi_opts *o)
{
    struct pt *m = wi_model_state(sizeof *m);
    if (m == NULL)
        return NULL;
    m->conf = *o->conf;
    m->limit = o->limit;
    m->card = o->limit ? o->limit : DEFAULT_CARD;
    m->outside = o->outside;
    m->small.small = true;
    m->next_addr = 1ull << 40;  /* expandable segments' address space, upward */
    m->seg_top = 1ull << 47;
    m->rng = 0x9e3779b97f4a7c15ull;
    m->st.has_device_calls = true;
    return m;
}

static void pt_stats(void *v, struct wi_stats *s)
{
    *s = ((struct pt *)v)->st;
}

/* Every block lies in the slabs, held or not. */
static void pt_fini(void *v)
{
    struct pt *m = v;
    if (m == NULL)
        return;
    bset_clear(&m->small.blocks);
    bset_clear(&m->large.blocks);
    while (m->slabs) {
        struct slab *n = m->slabs->next;
        free(m->slabs);
        m->slabs = n;
    }
    while (m->esegs)
        drop_eseg(m, m->esegs);
    free(m);
}

const struct wi_model_ops wi_pytorch = {
    .name = "pytorch",
    .init = pt_init,
    .alloc = pt_alloc,
    .free = pt_free,
    .stats = pt_stats,
    .fini = pt_fini,
};
