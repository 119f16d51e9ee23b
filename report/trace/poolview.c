/* poolview.c - the pool's segments and blocks, rebuilt (see poolview.h).
 *
 * Blocks live in an open-addressing table by address (one probe per
 * record, as in the replay). Segments are an array sorted by address, so
 * "which segment holds this address" is a binary search; each segment
 * also lists the addresses of its blocks in order, which is what lets a
 * picture be taken by sweeping a segment from its start to its end, and
 * what finds the free run a large block was carved from. Segments are
 * few (the pool's are 2 MiB and up) and a segment's block list is bounded
 * by its size over 512 bytes, so inserting into these arrays stays cheap.
 * The addresses of a framework's backing allocations are a sorted array
 * too: one per segment of 2 MiB and up.
 */
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "defs.h"
#include "pool.h"
#include "poolview.h"

/* The pool (pool.c) keeps the rest of a large free block with the block
 * carved from it when the rest is smaller than this - or, when the rest
 * is its segment's end, smaller than PV_LARGE_END_MIN. */
#define PV_LARGE_SPLIT_MIN (1u << 20)
#define PV_LARGE_END_MIN (384u << 10)

enum { PV_ALLOC = 1, PV_PENDING = 2 };

struct pv_block {
    uint64_t addr;    /* 0: empty slot */
    uint64_t req;     /* bytes requested */
    uint64_t size;    /* bytes of the block */
    uint32_t device;
    uint32_t stack;   /* its allocation's stack id */
    uint8_t state;    /* PV_ALLOC or PV_PENDING */
    bool pooled;      /* listed by the segment that holds it */
    bool fw;          /* a framework allocator's block */
};

/* Whose segment: the pool's, the framework's, or a mapped piece of one of
 * the framework's expandable segments (which joins its neighbours). */
enum { PV_SEG_POOL = 0, PV_SEG_FW = 1, PV_SEG_FW_MAPPED = 2 };

struct pv_segment {
    uint64_t addr, size;
    uint32_t device;
    uint64_t *blk;    /* addresses of its blocks, ascending */
    size_t nblk, cap;
    uint8_t kind;     /* PV_SEG_* */
};

ADDRMAP_FUNCS(blkmap, struct pv_blocks, struct pv_block, 1024)

void pv_init(struct poolview *v)
{
    memset(v, 0, sizeof *v);
}

void pv_free(struct poolview *v)
{
    for (size_t i = 0; i < v->nsegs; i++)
        free(v->segs[i].blk);
    free(v->segs);
    blkmap_release(&v->blocks);
    free(v->backing);
    memset(v, 0, sizeof *v);
}

/* ---- blocks by address ------------------------------------------------- */

static struct pv_block *blk_find(const struct poolview *v, uint64_t addr)
{
    return blkmap_find((struct pv_blocks *)&v->blocks, addr); /* find writes nothing */
}

/* Count a block in or out of its device's pending bytes. */
static void pend(struct poolview *v, const struct pv_block *b, bool in)
{
    if (b->device >= PV_DEVICES)
        return;
    uint64_t *p = &v->pending[b->device];
    *p = in ? *p + b->size : *p > b->size ? *p - b->size : 0;
}

uint64_t pv_pending(const struct poolview *v, uint32_t device)
{
    return device < PV_DEVICES ? v->pending[device] : 0;
}

/* ---- a framework's backing allocations ------------------------------------- */

/* Position of the first of a[0..n) (ascending) that is >= x. */
static size_t lower(const uint64_t *a, size_t n, uint64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t backing_lower(const struct poolview *v, uint64_t addr)
{
    return lower(v->backing, v->nbacking, addr);
}

static void backing_add(struct poolview *v, uint64_t addr)
{
    size_t i = backing_lower(v, addr);
    if (i < v->nbacking && v->backing[i] == addr)
        return;
    if (v->nbacking == v->cap_backing) {
        size_t cap = v->cap_backing ? 2 * v->cap_backing : 64;
        uint64_t *n = realloc(v->backing, cap * sizeof *n);
        if (n == NULL) {
            v->nomem = true;
            return;
        }
        v->backing = n;
        v->cap_backing = cap;
    }
    memmove(v->backing + i + 1, v->backing + i, (v->nbacking - i) * sizeof *v->backing);
    v->backing[i] = addr;
    v->nbacking++;
}

/* Drop addr if it is a backing allocation; false if it is not one. */
static bool backing_drop(struct poolview *v, uint64_t addr)
{
    size_t i = backing_lower(v, addr);
    if (i >= v->nbacking || v->backing[i] != addr)
        return false;
    memmove(v->backing + i, v->backing + i + 1, (v->nbacking - i - 1) * sizeof *v->backing);
    v->nbacking--;
    return true;
}

/* ---- segments -------------------------------------------------------------- */

static uint64_t seg_end(const struct pv_segment *s)
{
    return s->addr + s->size; /* no overflow: checked when it was added */
}

/* Index of the first segment whose base is >= addr. */
static size_t seg_lower(const struct poolview *v, uint64_t addr)
{
    size_t lo = 0, hi = v->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->segs[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The segment holding addr, or NULL. */
static struct pv_segment *seg_holding(const struct poolview *v, uint64_t addr)
{
    size_t i = seg_lower(v, addr);
    if (i < v->nsegs && v->segs[i].addr == addr)
        return &v->segs[i];
    if (i > 0 && addr < seg_end(&v->segs[i - 1]))
        return &v->segs[i - 1];
    return NULL;
}

/* Position of the first block address >= addr in s's list. */
static size_t blk_lower(const struct pv_segment *s, uint64_t addr)
{
    return lower(s->blk, s->nblk, addr);
}

static bool seg_list_add(struct pv_segment *s, uint64_t addr)
{
    if (s->nblk == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        uint64_t *n = realloc(s->blk, cap * sizeof *n);
        if (n == NULL)
            return false;
        s->blk = n;
        s->cap = cap;
    }
    size_t i = blk_lower(s, addr);
    memmove(s->blk + i + 1, s->blk + i, (s->nblk - i) * sizeof *s->blk);
    s->blk[i] = addr;
    s->nblk++;
    return true;
}

static void seg_list_drop(struct pv_segment *s, uint64_t addr)
{
    size_t i = blk_lower(s, addr);
    if (i < s->nblk && s->blk[i] == addr) {
        memmove(s->blk + i, s->blk + i + 1, (s->nblk - i - 1) * sizeof *s->blk);
        s->nblk--;
    }
}

/* Where the free run starting at addr ends: the next block of s, or the
 * end of s. */
static uint64_t run_end(const struct pv_segment *s, uint64_t addr)
{
    size_t i = blk_lower(s, addr);
    while (i < s->nblk && s->blk[i] <= addr)
        i++;
    return i < s->nblk ? s->blk[i] : seg_end(s);
}

/* Drop segment i and every block it lists. Returns how many of those
 * blocks were still allocated. */
static uint64_t seg_drop(struct poolview *v, size_t i)
{
    struct pv_segment *s = &v->segs[i];
    uint64_t live = 0;
    for (size_t k = 0; k < s->nblk; k++) {
        struct pv_block *b = blk_find(v, s->blk[k]);
        if (b == NULL)
            continue;
        live += b->state == PV_ALLOC;
        if (b->state == PV_PENDING)
            pend(v, b, false);
        blkmap_remove(&v->blocks, b);
    }
    free(s->blk);
    memmove(s, s + 1, (v->nsegs - i - 1) * sizeof *s);
    v->nsegs--;
    return live;
}

/* ---- records --------------------------------------------------------------- */

/* Forget a block: out of its segment's list and out of the table. */
static void forget(struct poolview *v, struct pv_block *b)
{
    if (b->state == PV_PENDING)
        pend(v, b, false);
    if (b->pooled) {
        struct pv_segment *s = seg_holding(v, b->addr);
        if (s)
            seg_list_drop(s, b->addr);
    }
    blkmap_remove(&v->blocks, b);
}

/* The real size of a block carved at addr from segment s: the recorded
 * 512-byte rounding, or for a large block the whole free run when what
 * the pool would have split off is under PV_LARGE_SPLIT_MIN (under
 * PV_LARGE_END_MIN when the run ends the segment). */
static uint64_t extent(const struct pv_segment *s, uint64_t addr, uint64_t block)
{
    if (block <= POOL_SMALL_MAX)
        return block;
    uint64_t end = run_end(s, addr), run = end - addr;
    uint64_t min = end == seg_end(s) ? PV_LARGE_END_MIN : PV_LARGE_SPLIT_MIN;
    return run > block && run - block < min ? run : block;
}

/* Host memory, and virtual memory handles: not device addresses. */
static bool is_host(unsigned api)
{
    switch (api & ~GMT_API_PTDS) {
    case GMT_API_MALLOC_HOST:
    case GMT_API_HOST_ALLOC:
    case GMT_API_FREE_HOST:
    case GMT_API_CU_MEM_ALLOC_HOST:
    case GMT_API_CU_MEM_HOST_ALLOC:
    case GMT_API_CU_MEM_FREE_HOST:
    case GMT_API_CU_MEM_CREATE:
    case GMT_API_CU_MEM_CREATE_HOST:
    case GMT_API_CU_MEM_RELEASE:
        return true;
    default:
        return false;
    }
}

static bool is_fw_api(unsigned api, unsigned which)
{
    return (api & ~GMT_API_PTDS) == which;
}

static void on_alloc(struct poolview *v, const struct gmt_rec *rec)
{
    if (rec->result || !rec->addr || !rec->size || is_host(rec->api))
        return;
    bool fw = is_fw_api(rec->api, GMT_API_FW_ALLOC);
    if (gmt_is_fw_backing(rec)) {
        backing_add(v, rec->addr);
        return;
    }
    struct pv_block *b = blk_find(v, rec->addr);
    if (b) { /* allocated again without a free: the old one is gone */
        v->odd++;
        forget(v, b);
    }
    uint64_t block = rec->size + rec->size2 < rec->size ? rec->size
                                                        : rec->size + rec->size2;
    struct pv_segment *s = seg_holding(v, rec->addr);
    if (s && !seg_list_add(s, rec->addr)) {
        v->nomem = true;
        return;
    }
    if ((b = blkmap_insert(&v->blocks, rec->addr)) == NULL) {
        if (s)
            seg_list_drop(s, rec->addr);
        v->nomem = true;
        return;
    }
    b->req = rec->size;
    b->size = s && !fw ? extent(s, rec->addr, block) : block;
    b->device = rec->device;
    b->stack = rec->stack;
    b->state = PV_ALLOC;
    b->pooled = s != NULL;
    b->fw = fw;
}

static void on_free(struct poolview *v, const struct gmt_rec *rec)
{
    if (rec->result || !rec->addr || is_host(rec->api))
        return;
    /* CUDA's free of a segment's memory; a framework block at the same
     * address is the framework's to free */
    if (!is_fw_api(rec->api, GMT_API_FW_FREE) && backing_drop(v, rec->addr))
        return;
    struct pv_block *b = blk_find(v, rec->addr);
    if (b == NULL || b->state != PV_ALLOC) {
        v->odd++; /* never allocated, or freed twice */
        return;
    }
    if (b->pooled) {
        b->state = PV_PENDING; /* reusable after FREE_COMPLETED */
        pend(v, b, true);
    } else {
        forget(v, b);          /* back to the driver at once */
    }
}

static void on_completed(struct poolview *v, const struct gmt_rec *rec)
{
    struct pv_block *b = blk_find(v, rec->addr);
    if (b == NULL || !b->pooled || b->state != PV_PENDING) {
        v->odd++;
        return;
    }
    /* the pool's record carries its block's size, the framework's the
     * size requested */
    if (rec->size != (b->fw ? b->req : b->size))
        v->odd++; /* the rebuilt block was not the allocator's */
    forget(v, b);
}

/* A segment [a, a + size) taken: its index, or -1. */
static long seg_add(struct poolview *v, uint64_t a, uint64_t size, uint32_t device,
                    uint8_t kind)
{
    uint64_t end = a + size;
    if (!a || !size || end < a) {
        v->odd++;
        return -1;
    }
    /* The driver handed out this range: nothing older can be in it. */
    size_t i = seg_lower(v, a);
    if (i > 0 && seg_end(&v->segs[i - 1]) > a)
        i--;
    while (i < v->nsegs && v->segs[i].addr < end) {
        v->odd++;
        seg_drop(v, i);
    }
    if (v->nsegs == v->cap_segs) {
        size_t cap = v->cap_segs ? 2 * v->cap_segs : 64;
        struct pv_segment *n = realloc(v->segs, cap * sizeof *n);
        if (n == NULL) {
            v->nomem = true;
            return -1;
        }
        v->segs = n;
        v->cap_segs = cap;
    }
    memmove(v->segs + i + 1, v->segs + i, (v->nsegs - i) * sizeof *v->segs);
    v->segs[i] = (struct pv_segment){a, size, device, NULL, 0, 0, kind};
    v->nsegs++;
    return (long)i;
}

static void seg_free(struct poolview *v, uint64_t addr, uint64_t size)
{
    size_t i = seg_lower(v, addr);
    if (i >= v->nsegs || v->segs[i].addr != addr) {
        v->odd++; /* not a segment we know */
        return;
    }
    if (v->segs[i].size != size)
        v->odd++;
    if (seg_drop(v, i))
        v->odd++; /* given back with blocks still allocated in it */
}

/* ---- a framework's segments ------------------------------------------------ */

/* Mapped pieces of one expandable segment: adjacent, on one device. */
static bool joinable(const struct pv_segment *x, const struct pv_segment *y)
{
    return x->kind == PV_SEG_FW_MAPPED && y->kind == PV_SEG_FW_MAPPED &&
           x->device == y->device && seg_end(x) == y->addr;
}

/* Segment i + 1 becomes the end of segment i. Its blocks all lie above
 * segment i's, so the lists join in order. */
static void seg_join(struct poolview *v, size_t i)
{
    struct pv_segment *a = &v->segs[i], *b = &v->segs[i + 1];
    if (a->nblk + b->nblk > a->cap) {
        uint64_t *n = realloc(a->blk, (a->nblk + b->nblk) * sizeof *n);
        if (n == NULL) {
            v->nomem = true; /* left apart: the picture shows two segments */
            return;
        }
        a->blk = n;
        a->cap = a->nblk + b->nblk;
    }
    if (b->nblk)
        memcpy(a->blk + a->nblk, b->blk, b->nblk * sizeof *b->blk);
    a->nblk += b->nblk;
    a->size += b->size;
    free(b->blk);
    memmove(b, b + 1, (v->nsegs - i - 2) * sizeof *b);
    v->nsegs--;
}

static void seg_map(struct poolview *v, uint64_t a, uint64_t size, uint32_t device)
{
    long k = seg_add(v, a, size, device, PV_SEG_FW_MAPPED);
    if (k < 0)
        return;
    size_t i = (size_t)k;
    if (i + 1 < v->nsegs && joinable(&v->segs[i], &v->segs[i + 1]))
        seg_join(v, i);
    if (i > 0 && joinable(&v->segs[i - 1], &v->segs[i]))
        seg_join(v, i - 1);
}

/* Pages [a, a + size) of an expandable segment unmapped: what lay there
 * goes (a block still allocated there is odd), and the segment keeps what
 * lies before and after the hole, as one or two segments. */
static void seg_unmap(struct poolview *v, uint64_t a, uint64_t size)
{
    struct pv_segment *s = seg_holding(v, a);
    if (s == NULL || s->kind == PV_SEG_POOL) {
        v->odd++;
        return;
    }
    size_t i = (size_t)(s - v->segs);
    uint64_t end = seg_end(s), hi = size < end - a ? a + size : end;
    if (size > end - a)
        v->odd++; /* past the piece: clipped */
    size_t lo_k = blk_lower(s, a), hi_k = blk_lower(s, hi);
    for (size_t k = lo_k; k < hi_k; k++) {
        struct pv_block *b = blk_find(v, s->blk[k]);
        if (b == NULL)
            continue;
        v->odd += b->state == PV_ALLOC;
        if (b->state == PV_PENDING)
            pend(v, b, false);
        blkmap_remove(&v->blocks, b);
    }
    if (hi < end) {
        size_t nr = s->nblk - hi_k;
        uint64_t *rb = nr ? malloc(nr * sizeof *rb) : NULL;
        if (v->nsegs == v->cap_segs) {
            size_t cap = 2 * v->cap_segs;
            struct pv_segment *n = realloc(v->segs, cap * sizeof *n);
            if (n) {
                v->segs = n;
                v->cap_segs = cap;
            }
        }
        s = &v->segs[i];
        if ((nr && rb == NULL) || v->nsegs == v->cap_segs) {
            free(rb);
            v->nomem = true; /* the part after the hole is lost */
        } else {
            if (nr)
                memcpy(rb, s->blk + hi_k, nr * sizeof *rb);
            memmove(s + 2, s + 1, (v->nsegs - i - 1) * sizeof *s);
            s[1] = (struct pv_segment){hi, end - hi, s->device, rb, nr, nr, s->kind};
            v->nsegs++;
        }
    }
    s->nblk = lo_k;
    s->size = a - s->addr;
    if (s->size == 0) {
        free(s->blk);
        memmove(s, s + 1, (v->nsegs - i - 1) * sizeof *s);
        v->nsegs--;
    }
}

/* A framework block is `size` bytes, not what its ALLOC record said. */
static void block_size(struct poolview *v, uint64_t addr, uint64_t size)
{
    struct pv_block *b = blk_find(v, addr);
    if (b == NULL || !b->fw || b->state != PV_ALLOC || size < b->req) {
        v->odd++;
        return;
    }
    b->size = size;
}

static void on_fw(struct poolview *v, const struct gmt_rec *rec)
{
    struct gmt_fw f;
    if (rec->ext != GMT_X_FW || gmt_fw_decode(rec, &f) != 0)
        return;
    switch (f.action) {
    case GMT_FWX_SEGMENT_ALLOC:
        seg_add(v, f.addr, f.size, f.device, PV_SEG_FW);
        break;
    case GMT_FWX_SEGMENT_FREE:
        seg_free(v, f.addr, f.size);
        break;
    case GMT_FWX_SEGMENT_MAP:
        seg_map(v, f.addr, f.size, f.device);
        break;
    case GMT_FWX_SEGMENT_UNMAP:
        seg_unmap(v, f.addr, f.size);
        break;
    case GMT_FWX_BLOCK_SIZE:
        block_size(v, f.addr, f.size);
        break;
    default:
        break;
    }
}

void pv_apply(struct poolview *v, const struct gmt_rec *rec)
{
    switch (rec->kind) {
    case GMT_K_ALLOC:
        on_alloc(v, rec);
        break;
    case GMT_K_FREE:
        on_free(v, rec);
        break;
    case GMT_K_FREE_COMPLETED:
        on_completed(v, rec);
        break;
    case GMT_K_SEGMENT_ALLOC:
        seg_add(v, rec->addr, rec->size, rec->device, PV_SEG_POOL);
        break;
    case GMT_K_SEGMENT_FREE:
        seg_free(v, rec->addr, rec->size);
        break;
    case GMT_K_EXT:
        on_fw(v, rec);
        break;
    default:
        break;
    }
}

/* ---- the picture ------------------------------------------------------------- */

/* Sweep segment s from start to end: its blocks and the free runs
 * between them, in address order, to fn (b NULL: free). Blocks overlapping
 * one another or running past the end are clipped, so the runs always
 * add up to the segment's size. */
typedef void run_fn(void *ctx, uint64_t size, const struct pv_block *b);

static void sweep(const struct poolview *v, const struct pv_segment *s, run_fn *fn, void *ctx)
{
    uint64_t end = seg_end(s), cur = s->addr;
    for (size_t i = 0; i < s->nblk; i++) {
        const struct pv_block *b = blk_find(v, s->blk[i]);
        if (b == NULL || b->addr < s->addr || b->addr >= end)
            continue; /* listed blocks lie inside: cannot happen */
        uint64_t lo = b->addr > cur ? b->addr : cur;
        uint64_t hi = b->size < end - b->addr ? b->addr + b->size : end;
        if (hi <= lo)
            continue;
        if (lo > cur)
            fn(ctx, lo - cur, NULL);
        fn(ctx, hi - lo, b);
        cur = hi;
    }
    if (end > cur)
        fn(ctx, end - cur, NULL);
}

static void stat_run(void *ctx, uint64_t size, const struct pv_block *b)
{
    struct pv_seg_stat *st = ctx;
    if (b == NULL) {
        st->free += size;
        st->gaps++;
        if (size > st->largest_gap)
            st->largest_gap = size;
    } else if (b->state == PV_ALLOC) {
        st->allocated += size;
        st->live++;
    } else {
        st->pending += size;
    }
}

static void seg_stat(const struct poolview *v, const struct pv_segment *s,
                     struct pv_seg_stat *st)
{
    memset(st, 0, sizeof *st);
    st->addr = s->addr;
    st->size = s->size;
    st->device = s->device;
    st->fw = s->kind != PV_SEG_POOL;
    sweep(v, s, stat_run, st);
}

/* ---- the map of a segment ------------------------------------------------------ */

struct pieces {
    struct pv_piece *out;
    size_t n, max;
    uint64_t width;          /* merge runs into pieces of at least this */
    uint64_t biggest;        /* the allocated block that names the piece */
    bool open;
};

static void count_run(void *ctx, uint64_t size, const struct pv_block *b)
{
    (void)size;
    (void)b;
    ++*(size_t *)ctx;
}

static void piece_run(void *ctx, uint64_t size, const struct pv_block *b)
{
    struct pieces *p = ctx;
    if (!p->open) {
        if (p->n == p->max)
            return; /* cannot happen: the width bounds the count */
        p->out[p->n] = (struct pv_piece){0};
        p->biggest = 0;
        p->open = true;
    }
    struct pv_piece *q = &p->out[p->n];
    q->size += size;
    if (b && b->state == PV_ALLOC) {
        q->allocated += size;
        if (size > p->biggest) {
            p->biggest = size;
            q->stack = b->stack;
            q->named = true;
        }
    } else if (b) {
        q->pending += size;
    }
    if (q->size >= p->width) {
        p->n++;
        p->open = false;
    }
}

size_t pv_pieces(const struct poolview *v, uint64_t addr, struct pv_piece *out, size_t max)
{
    size_t i = seg_lower(v, addr), runs = 0;
    if (max == 0 || i == v->nsegs || v->segs[i].addr != addr)
        return 0;
    const struct pv_segment *s = &v->segs[i];
    sweep(v, s, count_run, &runs);
    /* pieces closed at >= width bytes number under size / width <= max - 1 */
    struct pieces p = {out, 0, max, runs <= max ? 1 : s->size / (max - 1 ? max - 1 : 1) + 1,
                       0, false};
    sweep(v, s, piece_run, &p);
    return p.n + p.open;
}

static int cmp_seg(const void *a, const void *b)
{
    const struct pv_seg_stat *x = a, *y = b;
    if (x->free != y->free)
        return x->free > y->free ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void add_segment(struct pv_state *out, const struct pv_seg_stat *st)
{
    out->segs[out->nsegs++] = *st;
    out->fw_segs += st->fw;
    out->reserved += st->size;
    out->allocated += st->allocated;
    out->pending += st->pending;
    out->free += st->free;
    out->free_blocks += st->gaps;
    out->live_blocks += st->live;
    if (st->largest_gap > out->largest_free)
        out->largest_free = st->largest_gap;
}

static void add_allocations(const struct poolview *v, int64_t device,
                            struct pv_state *out)
{
    for (size_t i = 0; i < v->blocks.cap; i++) {
        const struct pv_block *b = &v->blocks.slot[i];
        if (!b->addr || b->state != PV_ALLOC || (device >= 0 && b->device != device))
            continue;
        out->requested += b->req;
        out->waste += b->size > b->req ? b->size - b->req : 0;
        out->allocations++;
        if (!b->pooled) {
            out->unpooled_bytes += b->size;
            out->unpooled_count++;
        }
    }
}

bool pv_state(const struct poolview *v, int64_t device, struct pv_state *out)
{
    memset(out, 0, sizeof *out);
    out->segs = calloc(v->nsegs ? v->nsegs : 1, sizeof *out->segs);
    if (out->segs == NULL)
        return false;
    for (size_t i = 0; i < v->nsegs; i++) {
        if (device >= 0 && v->segs[i].device != device)
            continue;
        struct pv_seg_stat st;
        seg_stat(v, &v->segs[i], &st);
        add_segment(out, &st);
    }
    add_allocations(v, device, out);
    out->frag = out->free ? 1.0 - (double)out->largest_free / (double)out->free : 0.0;
    qsort(out->segs, out->nsegs, sizeof *out->segs, cmp_seg);
    return true;
}

void pv_state_free(struct pv_state *s)
{
    free(s->segs);
    s->segs = NULL;
    s->nsegs = 0;
}
