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
 * synchronizations (not in whatif's stream) and the pool's other options:
 * the pool as the library runs it by default, with ordered reuse
 * (gmt-pool:ordered: every free reusable at once), with whole-mapped
 * segments (:whole, GPUMEMTRACE_POOL_VMM_WHOLE=1) or with pages of
 * virtual memory (:vmm, GPUMEMTRACE_POOL_VMM=1, 2 MiB pages, mappings of
 * up to chunk=MB). One arena serves every request (the library's threads
 * share one until they contend; streams do not matter to the pool).
 *
 * With pages, reserved is the physical memory (handles) the pool holds
 * plus its plain segments for small requests, and device calls are its
 * mappings made and undone (and those segments' allocs and frees): the
 * driver's cost is per mapping.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "whatif.h"

#define GP_BASE (1ull << 40)
#define GP_ALIGN (2ull << 20)

struct gp {
    struct pool *pool;
    struct wi_gmt kind; /* fixed when the pool is made: its upstream's */
    struct wi_stats st;
    uint64_t limit;
    const uint64_t *outside;
    uint64_t next_va;
    uint64_t handles; /* created so far: a handle's serial number */
    uint64_t syncs0; /* the pool's syncs before this instance */
    bool new_peak;   /* a segment took reserved past its peak */
    bool ordered;    /* a free is reusable at once */
    struct gp *spare;
};

/* emptied pools, of every kind; whatif runs on one thread */
static struct gp *gp_spares;

/* Memory taken from the device, unless it would pass --device-memory. */
static int take(struct gp *m, size_t size)
{
    uint64_t out_b = m->outside ? *m->outside : 0;
    if (m->limit && (out_b > m->limit || size > m->limit - out_b ||
                     m->st.reserved > m->limit - out_b - size))
        return 2; /* cudaErrorMemoryAllocation */
    m->st.reserved += size;
    if (++m->st.segments > m->st.peak_segments)
        m->st.peak_segments = m->st.segments;
    if (m->st.reserved > m->st.peak_reserved) {
        m->st.peak_reserved = m->st.reserved;
        m->new_peak = true;
    }
    return 0;
}

static void give(struct gp *m, size_t size)
{
    m->st.reserved -= size <= m->st.reserved ? size : m->st.reserved;
    if (m->st.segments)
        m->st.segments--;
}

static int up_alloc(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)dev;
    struct gp *m = ctx;
    int r = take(m, size);
    if (r != 0)
        return r;
    *out = (uintptr_t)m->next_va;
    m->next_va += (size + GP_ALIGN - 1) & ~(GP_ALIGN - 1);
    m->st.device_allocs++;
    return 0;
}

static int up_release(void *ctx, int dev, uintptr_t ptr, size_t size)
{
    (void)dev;
    (void)ptr;
    struct gp *m = ctx;
    give(m, size);
    m->st.device_frees++;
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

/* A handle: a serial number over its size in 2 MiB units (every size the
 * pool asks for is a multiple: pages, or whole segments rounded to 2 MiB).
 * Handles must differ: the pool tells a mapping's pages by their handle;
 * 36 bits of serial number do not wrap. Only a handle made is written
 * (the pool's contract). Whole segments count their creates and destroys
 * as device calls; pages, their mappings. */
#define GP_HSIZE_BITS 28
#define GP_HUNIT (2ull << 20)
static int up_create(void *ctx, int dev, size_t size, uint64_t *h)
{
    struct gp *m = ctx;
    uintptr_t unused;
    size = (size + GP_HUNIT - 1) & ~(size_t)(GP_HUNIT - 1);
    int r = m->kind.vm == WI_GMT_WHOLE ? up_alloc(ctx, dev, size, &unused) : take(m, size);
    if (r == 0)
        *h = ++m->handles << GP_HSIZE_BITS | size / GP_HUNIT;
    return r;
}

static int up_destroy(void *ctx, int dev, uint64_t h)
{
    struct gp *m = ctx;
    size_t size = (size_t)(h & ((1ull << GP_HSIZE_BITS) - 1)) * GP_HUNIT;
    if (m->kind.vm == WI_GMT_WHOLE)
        return up_release(ctx, dev, 0, size);
    give(m, size);
    return 0;
}

static int up_map(void *ctx, int dev, uintptr_t va, size_t size, uint64_t h)
{
    (void)dev;
    (void)va;
    (void)size;
    (void)h;
    struct gp *m = ctx;
    if (m->kind.vm == WI_GMT_PAGES)
        m->st.device_allocs++;
    return 0;
}

static int up_unmap(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)dev;
    (void)va;
    (void)size;
    struct gp *m = ctx;
    if (m->kind.vm == WI_GMT_PAGES)
        m->st.device_frees++;
    return 0;
}

static int up_sync(void *ctx, int dev)
{
    (void)ctx;
    (void)dev;
    return 0; /* an idle GPU: done at once */
}

static bool same_kind(const struct wi_gmt *a, const struct wi_gmt *b)
{
    return a->vm == b->vm && (a->vm != WI_GMT_PAGES || a->chunk_mb == b->chunk_mb);
}

static void *gp_init(const struct wi_opts *o)
{
    struct wi_gmt kind = o->gmt ? *o->gmt : (struct wi_gmt){0};
    if (kind.vm == WI_GMT_PAGES && kind.chunk_mb == 0)
        kind.chunk_mb = 16;
    struct gp *m, **pm = &gp_spares;
    while ((m = *pm) != NULL && !same_kind(&m->kind, &kind))
        pm = &m->spare;
    if (m) {
        *pm = m->spare;
        pool_reset_peak(m->pool); /* the last program's: page mode grows up to it */
    } else {
        if ((m = wi_model_state(sizeof *m)) == NULL)
            return NULL;
        m->kind = kind;
        struct pool_upstream up = {.alloc = up_alloc, .release = up_release,
                                   .sync = up_sync, .ctx = m, .sync_free = true};
        if (kind.vm != WI_GMT_PLAIN) {
            up.whole = kind.vm == WI_GMT_WHOLE;
            up.page = up.whole ? 0 : GP_ALIGN;
            up.chunk = up.whole ? 0 : (size_t)kind.chunk_mb << 20;
            up.reserve = up_reserve;
            up.unreserve = up_unreserve;
            up.create = up_create;
            up.destroy = up_destroy;
            up.map = up_map;
            up.unmap = up_unmap;
        }
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
    m->ordered = kind.ordered;
    m->spare = NULL;
    return m;
}

int wi_gmt_parse(const char *s, struct wi_gmt *g, char *why, size_t whylen)
{
    *g = (struct wi_gmt){0};
    bool chunk = false;
    if (*s == '\0') {
        snprintf(why, whylen, "no options after ':'");
        return -1;
    }
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 0) {
            snprintf(why, whylen, "an empty option");
            return -1;
        } else if (n == 7 && !strncmp(s, "ordered", n)) {
            g->ordered = true;
        } else if ((n == 5 && !strncmp(s, "whole", n)) || (n == 3 && !strncmp(s, "vmm", n))) {
            uint8_t vm = n == 5 ? WI_GMT_WHOLE : WI_GMT_PAGES;
            if (g->vm != WI_GMT_PLAIN && g->vm != vm) {
                snprintf(why, whylen, "whole and vmm exclude each other");
                return -1;
            }
            g->vm = vm;
        } else if (n > 6 && !strncmp(s, "chunk=", 6)) {
            char *end;
            if (chunk) {
                snprintf(why, whylen, "chunk= given twice");
                return -1;
            }
            unsigned long v = strtoul(s + 6, &end, 10);
            if (end != s + n || s[6] < '0' || s[6] > '9' || v < 2 || v > 1024 || v % 2) {
                snprintf(why, whylen, "chunk=%.*s: a mapping's most MiB, 2-1024 and even",
                         (int)(n - 6 < 20 ? n - 6 : 20), s + 6);
                return -1;
            }
            g->chunk_mb = (uint32_t)v;
            chunk = true;
        } else {
            snprintf(why, whylen, "unknown option '%.*s' (ordered, whole, vmm, chunk=MB)",
                     (int)(n < 40 ? n : 40), s);
            return -1;
        }
        s += n;
        if (*s == ',' && *++s == '\0') {
            snprintf(why, whylen, "an empty option");
            return -1;
        }
    }
    if (chunk && g->vm != WI_GMT_PAGES) {
        snprintf(why, whylen, "chunk= needs vmm");
        return -1;
    }
    if (g->vm == WI_GMT_PAGES && !chunk)
        g->chunk_mb = 16;
    return 0;
}

/* Page mode maps a request in pieces of at most `chunk`: one of 2^48
 * bytes would take the model minutes and gigabytes of host memory for
 * what no card holds. Past GP_PAGES_MAX a request runs out of memory. */
#define GP_PAGES_MAX (1ull << 40)

static int gp_alloc(void *p, uint64_t size, uint64_t stream, uint64_t *id)
{
    (void)stream;
    struct gp *m = p;
    uintptr_t a;
    if (m->kind.vm == WI_GMT_PAGES && size > GP_PAGES_MAX)
        return -1;
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
        m->spare = gp_spares;
        gp_spares = m;
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
