/* whatif_gmtpool.c - gpumemtrace's own caching pool (preload/pool*.c) as
 * a whatif model: the real pool code, linked in, serving the replayed
 * requests.
 *
 * The upstream hands out address ranges and touches no memory: synthetic
 * addresses, rising from 2^40 in steps of 2 MiB, never reused; it counts
 * the bytes and segments it has handed out (reserved) and its calls (a
 * cudaMalloc per segment, a cudaFree per segment given back). With
 * --device-memory it refuses (cudaErrorMemoryAllocation) a segment that
 * would take reserved plus what the program holds outside the model past
 * the card; the pool then synchronizes, gives back what it caches, and
 * retries, as it would on the GPU.
 *
 * Synchronization is free and immediate, as on a GPU that is idle: a
 * free is pending (the pool's safety rule) until the pool's next
 * device-wide synchronization, which the pool makes when pending memory
 * is worth it (pool_sync.c: at least the request and 4 MiB, since a
 * synchronization here costs nothing) or before it runs out of memory.
 * Simplified or left out: the library's fences (no `reclaim`: only the
 * pool's own synchronizations release frees), the program's own
 * synchronizations (not in whatif's stream), virtual memory
 * (GPUMEMTRACE_POOL_VMM) and the other options: the pool as the library
 * runs it by default, or (gmt-pool:ordered) with ordered reuse, every
 * free reusable at once. One arena serves every request (the library's
 * threads share one until they contend; streams do not matter to the
 * pool).
 *
 * An id is the block's address in the pool. Figures: reserved is the
 * pool's segments; at the reserved peak, free is reserved minus the
 * pool's allocated bytes (pending frees included) and the largest free
 * block is the pool's largest reusable one; syncs are the pool's own.
 *
 * The pool has no destructor: an instance's pool, emptied (every block
 * freed, then pool_release_all), is kept on a free list for the next
 * instance, which counts its figures from zero.
 */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "whatif.h"

#define GP_BASE (1ull << 40)
#define GP_ALIGN (2ull << 20)

struct gp {
    struct pool *pool;
    struct wi_stats st;
    uint64_t limit;
    const uint64_t *outside;
    uint64_t next_va;
    uint64_t syncs0; /* the pool's syncs before this instance */
    bool new_peak;   /* a segment took reserved past its peak */
    bool ordered;    /* gmt-pool:ordered: a free is reusable at once */
    bool whole;      /* gmt-pool:...whole: GPUMEMTRACE_POOL_VMM_WHOLE=1 */
    struct gp *spare;
};

/* emptied pools, plain and whole; whatif runs on one thread */
static struct gp *gp_spares[2];

static int up_alloc(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)dev;
    struct gp *m = ctx;
    uint64_t out_b = m->outside ? *m->outside : 0;
    if (m->limit && (out_b > m->limit || size > m->limit - out_b ||
                     m->st.reserved > m->limit - out_b - size))
        return 2; /* cudaErrorMemoryAllocation */
    *out = (uintptr_t)m->next_va;
    m->next_va += (size + GP_ALIGN - 1) & ~(GP_ALIGN - 1);
    m->st.reserved += size;
    m->st.device_allocs++;
    if (++m->st.segments > m->st.peak_segments)
        m->st.peak_segments = m->st.segments;
    if (m->st.reserved > m->st.peak_reserved) {
        m->st.peak_reserved = m->st.reserved;
        m->new_peak = true;
    }
    return 0;
}

static int up_release(void *ctx, int dev, uintptr_t ptr, size_t size)
{
    (void)dev;
    (void)ptr;
    struct gp *m = ctx;
    m->st.reserved -= size <= m->st.reserved ? size : m->st.reserved;
    m->st.device_frees++;
    if (m->st.segments)
        m->st.segments--;
    return 0;
}

/* Whole segments (pool_upstream.whole): an address range, one handle of
 * memory mapped over it; the handle is what is reserved. */
static int up_reserve(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)dev;
    struct gp *m = ctx;
    *out = (uintptr_t)m->next_va;
    m->next_va += (size + GP_ALIGN - 1) & ~(GP_ALIGN - 1);
    return 0;
}

static int up_unreserve(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    (void)dev;
    (void)va;
    (void)size;
    return 0;
}

static int up_create(void *ctx, int dev, size_t size, uint64_t *h)
{
    uintptr_t unused;
    int r = up_alloc(ctx, dev, size, &unused); /* the limit and the counts */
    *h = size;
    return r;
}

static int up_destroy(void *ctx, int dev, uint64_t h)
{
    return up_release(ctx, dev, 0, (size_t)h);
}

static int up_map(void *ctx, int dev, uintptr_t va, size_t size, uint64_t h)
{
    (void)ctx;
    (void)dev;
    (void)va;
    (void)size;
    (void)h;
    return 0;
}

static int up_unmap(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    (void)dev;
    (void)va;
    (void)size;
    return 0;
}

static int up_sync(void *ctx, int dev)
{
    (void)ctx;
    (void)dev;
    return 0; /* an idle GPU: done at once */
}

static void *gp_init_kind(const struct wi_opts *o, bool whole)
{
    struct gp *m = gp_spares[whole];
    if (m) {
        gp_spares[whole] = m->spare;
    } else {
        if ((m = calloc(1, sizeof *m)) == NULL)
            return NULL;
        struct pool_upstream up = {.alloc = up_alloc, .release = up_release,
                                   .sync = up_sync, .ctx = m, .sync_free = true};
        if (whole) {
            up.whole = true;
            up.reserve = up_reserve;
            up.unreserve = up_unreserve;
            up.create = up_create;
            up.destroy = up_destroy;
            up.map = up_map;
            up.unmap = up_unmap;
        }
        m->whole = whole;
        if ((m->pool = pool_create(&up, NULL)) == NULL) {
            free(m);
            return NULL;
        }
        m->next_va = GP_BASE;
    }
    struct pool_stats ps;
    pool_stats(m->pool, 0, &ps);
    memset(&m->st, 0, sizeof m->st);
    m->st.has_device_calls = true;
    m->syncs0 = ps.syncs;
    m->limit = o->limit;
    m->outside = o->outside;
    m->new_peak = false;
    m->ordered = false;
    m->spare = NULL;
    return m;
}

static void *gp_init(const struct wi_opts *o)
{
    return gp_init_kind(o, false);
}

static void *gp_init_ordered(const struct wi_opts *o)
{
    struct gp *m = gp_init_kind(o, false);
    if (m)
        m->ordered = true;
    return m;
}

static void *gp_init_whole(const struct wi_opts *o)
{
    return gp_init_kind(o, true);
}

static void *gp_init_ordered_whole(const struct wi_opts *o)
{
    struct gp *m = gp_init_kind(o, true);
    if (m)
        m->ordered = true;
    return m;
}

static int gp_alloc(void *p, uint64_t size, uint64_t stream, uint64_t *id)
{
    (void)stream;
    struct gp *m = p;
    uintptr_t a;
    m->new_peak = false;
    int r = pool_alloc(m->pool, 0, 0, (size_t)size, &a);
    if (m->new_peak) { /* the first moment of this peak: the pool's view */
        struct pool_stats ps;
        pool_stats(m->pool, 0, &ps);
        m->st.peak_free = ps.reserved > ps.allocated ? ps.reserved - ps.allocated : 0;
        m->st.peak_largest_free = ps.largest_free;
        m->new_peak = false;
    }
    if (r != 0)
        return -1;
    *id = a;
    return 0;
}

static void gp_free(void *p, uint64_t id)
{
    struct gp *m = p;
    int dev;
    if (pool_free(m->pool, (uintptr_t)id, &dev) != 0 || !m->ordered)
        return;
    /* Ordered reuse: a barrier recorded after the free makes the block
     * reusable before the GPU gets there, and the library records one
     * when a request needs it; here every free is reusable (and, the GPU
     * keeping up, idle) at once: an estimate of that mode. */
    struct pool_snapshot s;
    pool_sync_snapshot(m->pool, dev, &s);
    pool_synced(m->pool, dev, &s);
}

static void gp_stats(void *p, struct wi_stats *s)
{
    struct gp *m = p;
    struct pool_stats ps;
    pool_stats(m->pool, 0, &ps);
    *s = m->st;
    s->allocated = ps.allocated;
    s->syncs = ps.syncs - m->syncs0;
}

static void gp_fini(void *p)
{
    struct gp *m = p;
    if (m == NULL)
        return;
    /* the caller has freed every request: give back every segment */
    pool_release_all(m->pool);
    m->limit = 0;
    m->outside = NULL;
    struct pool_stats ps;
    pool_stats(m->pool, 0, &ps);
    if (ps.reserved == 0 && ps.allocated == 0 && ps.pending == 0) {
        m->spare = gp_spares[m->whole];
        gp_spares[m->whole] = m;
        return;
    }
    /* not empty (a request never freed): kept reachable, never reused */
    static struct gp *kept;
    m->spare = kept;
    kept = m;
}

const struct wi_model_ops wi_gmtpool = {
    .name = "gmt-pool",
    .init = gp_init,
    .alloc = gp_alloc,
    .free = gp_free,
    .stats = gp_stats,
    .fini = gp_fini,
};

const struct wi_model_ops wi_gmtpool_ordered = {
    .name = "gmt-pool:ordered",
    .init = gp_init_ordered,
    .alloc = gp_alloc,
    .free = gp_free,
    .stats = gp_stats,
    .fini = gp_fini,
};

const struct wi_model_ops wi_gmtpool_whole = {
    .name = "gmt-pool:whole",
    .init = gp_init_whole,
    .alloc = gp_alloc,
    .free = gp_free,
    .stats = gp_stats,
    .fini = gp_fini,
};

const struct wi_model_ops wi_gmtpool_ordered_whole = {
    .name = "gmt-pool:ordered,whole",
    .init = gp_init_ordered_whole,
    .alloc = gp_alloc,
    .free = gp_free,
    .stats = gp_stats,
    .fini = gp_fini,
};
