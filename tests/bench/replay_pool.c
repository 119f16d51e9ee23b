/* replay_pool.c - replay a trace's allocations through the caching pool.
 *
 * usage: replay_pool [--eager | --ordered] [--async] [--vmm [--page MB] [--chunk MB]]
 *                    [--lag MS] TRACE [SYNC_US]
 * Reads the cudaMalloc/cudaFree events and the program's device
 * synchronizations of a trace (recorded with or without the pool), in
 * order, per thread, and replays them into pool.c with an upstream that
 * hands out address space but no memory. A pool synchronization takes
 * SYNC_US microseconds (default 50, what a busy GPU costs), so the pool's
 * cost model sees what it would on the GPU. Prints the peak of live
 * requested bytes, the pool's peak reserved bytes, their ratio and the
 * synchronizations - the figures of the GPU benchmark, without a GPU.
 * --eager makes every free reusable at once (as if each were followed by
 * a synchronization that cost nothing): the bound faster reuse could
 * reach. --vmm gives the pool virtual memory (2 MiB pages as on an H200,
 * or --page MB; mappings of at most 16 MiB or --chunk MB, as the
 * library's options): large segments are address ranges it maps where
 * blocks need memory, and the peak counts the physical memory; it also
 * prints the pages mapped and unmapped and the mappings made and undone
 * (map_calls, unmap_calls: the driver's cost is per mapping).
 * --ordered (with --lag) models ordered reuse (GPUMEMTRACE_POOL_ORDERED):
 * no fence per free; when the pool would wait, a barrier is recorded,
 * which makes every earlier free reusable at once and idle `lag` later.
 * Against live runs on an H100 (lag 2): GPT-2 training 1.046x (live
 * 1.045x), resnet50 1.158x (live 1.124-1.156x); the figures move with
 * the lag (what is idle decides what the pool gives back before growing).
 * --lag MS models the library's fences: the GPU runs MS milliseconds (of
 * trace time) behind the program, a free becomes reusable once the GPU
 * has passed it, and the pool may wait for the oldest free still ahead of
 * the GPU (it then counts a fence wait).
 * --async takes segments from a model of the driver's stream-ordered pool
 * (report/whatif_async.c: 32 MiB pages, mapped wherever needed), and the
 * peak is what that model holds: segments given back are then cheap to
 * have again, in memory if not in time.
 * REPLAY_SEGS=1 or 2 (environment) prints what the segments hold at each
 * new peak (see dump_segs). The last line counts the segments made and
 * given back (segments MADE/GIVEN).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>

#include "pool.h"
#include "pool_internal.h"
#include "reader.h"
#include "whatif/whatif.h"

/* REPLAY_ALIAS=1 with --vmm: the upstream maps a handle at a second
 * address while the first stays, as the driver does (the library's
 * default, GPUMEMTRACE_POOL_VMM_DEFER=1): unmaps of old addresses are
 * queued until a wait, and a handle given back waits for its memory to be
 * idle first. Without it each unmap is made at once.
 *
 * REPLAY_SEGS=1: at each new peak reserved, the pool's segments by kind
 * (small; large up to 24 MiB, where requests of up to 10 MiB share; larger)
 * with bytes busy, pending and free; REPLAY_SEGS=2 adds each large
 * segment's blocks, in address order (F free, A allocated, P pending, B
 * being backed; MiB). Single-threaded: it reads the pool unlocked. */
static void dump_segs(struct pool *p, int dev, size_t want)
{
    struct pdev *d = p->dev[dev];
    if (d == NULL)
        return;
    uint64_t n[3] = {0}, sz[3] = {0}, busy[3] = {0}, pend[3] = {0};
    for (int i = 0; i < POOL_ARENAS; i++)
        for (struct seg *s = d->arenas[i].segs; s; s = s->snext) {
            int c = !s->large ? 0 : s->size <= POOL_MEDIUM_TOP ? 1 : 2;
            n[c]++;
            sz[c] += s->size;
            busy[c] += s->busy;
            for (struct blk *b = s->first; b; b = b->next)
                if (b->state == B_PENDING)
                    pend[c] += b->size;
        }
    printf("PEAK want %.1f MiB:", want / 1048576.0);
    const char *nm[3] = {"small", "large<=24MiB", "larger"};
    for (int c = 0; c < 3; c++)
        printf(" %s %llu segs %.1f MiB busy %.1f (pending %.1f) free %.1f;", nm[c],
               (unsigned long long)n[c], sz[c] / 1048576.0, busy[c] / 1048576.0,
               pend[c] / 1048576.0, (sz[c] - busy[c]) / 1048576.0);
    printf("\n");
    if (getenv("REPLAY_SEGS")[0] == '2')
        for (int i = 0; i < POOL_ARENAS; i++)
            for (struct seg *s = d->arenas[i].segs; s; s = s->snext) {
                if (!s->large)
                    continue;
                printf("  seg %.1f MiB:", s->size / 1048576.0);
                for (struct blk *b = s->first; b; b = b->next)
                    printf(" %c%.1f", "?FAPB"[b->state], b->size / 1048576.0);
                printf("\n");
            }
}

static uintptr_t next_va = 1ull << 40;
static uint64_t reserved, peak_reserved;
static unsigned sync_us = 50;

static struct pool *g_pool;
static uint64_t g_requested;
static int verbose;

static uint64_t seg_allocs, seg_releases;

/* --async: segments come from a model of the driver's stream-ordered pool
 * (report/whatif_async.c); what it holds is the reserved memory. */
static void *g_async;
struct aseg {
    uintptr_t va;
    uint64_t id;
    UT_hash_handle hh;
};
static struct aseg *g_asegs;

static int up_alloc(void *c, int d, size_t s, uintptr_t *o)
{
    (void)c;
    seg_allocs++;
    *o = next_va;
    next_va += (s + 4095) & ~(size_t)4095;
    if (g_async) {
        struct aseg *a = calloc(1, sizeof *a);
        if (a == NULL || wi_async.alloc(g_async, s, 0, &a->id) != 0)
            return 2;
        a->va = *o;
        HASH_ADD(hh, g_asegs, va, sizeof a->va, a);
        struct wi_stats st;
        wi_async.stats(g_async, &st);
        if (st.peak_reserved > peak_reserved)
            peak_reserved = st.peak_reserved;
        return 0;
    }
    reserved += s;
    if (reserved > peak_reserved) {
        peak_reserved = reserved;
        if (getenv("REPLAY_SEGS"))
            dump_segs(g_pool, d, s);
        if (verbose) {
            /* what the pool holds when it must grow past its peak */
            struct pool_stats st;
            pool_stats(g_pool, d, &st);
            printf("grow %zu: reserved %llu requested %llu allocated %llu "
                   "pending %llu free %llu largest_free %llu free_blocks %llu\n",
                   s, (unsigned long long)reserved,
                   (unsigned long long)g_requested,
                   (unsigned long long)st.allocated,
                   (unsigned long long)st.pending,
                   (unsigned long long)st.free_bytes,
                   (unsigned long long)st.largest_free,
                   (unsigned long long)st.free_blocks);
        }
    }
    return 0;
}

static int up_release(void *c, int d, uintptr_t p, size_t s)
{
    (void)c;
    (void)d;
    seg_releases++;
    if (g_async) {
        struct aseg *a;
        HASH_FIND(hh, g_asegs, &p, sizeof p, a);
        if (a) {
            wi_async.free(g_async, a->id);
            HASH_DEL(g_asegs, a);
            free(a);
        }
        return 0;
    }
    reserved -= s;
    return 0;
}

static size_t PAGE = 2u << 20, CHUNK = 16u << 20;

/* REPLAY_SEGS with --vmm: at each new peak, the mapped segments' pages
 * against the blocks on them, and the plain (small) segments; after the
 * request that made it. */
static void dump_pages(struct pool *p, int dev)
{
    struct pdev *d = p->dev[dev];
    if (d == NULL)
        return;
    uint64_t mapped = 0, alloc = 0, pend = 0, freemapped = 0, plain = 0, pbusy = 0;
    for (int i = 0; i < POOL_ARENAS; i++)
        for (struct seg *s = d->arenas[i].segs; s; s = s->snext) {
            if (s->pages == NULL) {
                plain += s->size;
                pbusy += s->busy;
                continue;
            }
            for (size_t k = 0; k < s->size / PAGE; k++)
                mapped += s->pages[k] ? PAGE : 0;
            for (struct blk *b = s->first; b; b = b->next) {
                if (b->state == B_ALLOC)
                    alloc += b->size;
                else if (b->state == B_PENDING)
                    pend += b->size;
                else
                    for (uintptr_t a = (b->addr + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
                         a + PAGE <= b->addr + b->size; a += PAGE)
                        freemapped += s->pages[(a - s->base) / PAGE] ? PAGE : 0;
            }
        }
    printf("PEAK reserved %.1f MiB requested %.1f: plain %.1f (busy %.1f); mapped %.1f: "
           "allocated %.1f pending %.1f whole free pages %.1f rest %.1f\n",
           reserved / 1048576.0, g_requested / 1048576.0, plain / 1048576.0,
           pbusy / 1048576.0, mapped / 1048576.0, alloc / 1048576.0, pend / 1048576.0,
           freemapped / 1048576.0, (double)(mapped - alloc - pend - freemapped) / 1048576.0);
}

static void count(uint64_t s)
{
    reserved += s;
    if (reserved > peak_reserved)
        peak_reserved = reserved;
}

static int up_reserve(void *c, int d, size_t s, uintptr_t *o)
{
    (void)c;
    (void)d;
    next_va = (next_va + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    *o = next_va;
    next_va += s;
    return 0;
}

static int up_unreserve(void *c, int d, uintptr_t va, size_t s)
{
    (void)c;
    (void)d;
    (void)va;
    (void)s;
    return 0;
}

static uint64_t next_handle = 1;

/* A handle names its pages: id << 24 | pages. */
static int up_create(void *c, int d, size_t size, uint64_t *h)
{
    (void)c;
    (void)d;
    *h = next_handle++ << 24 | (size / PAGE);
    count(size);
    return 0;
}

static int up_destroy(void *c, int d, uint64_t h)
{
    (void)c;
    (void)d;
    reserved -= (h & 0xffffff) * PAGE;
    return 0;
}

static uint64_t map_calls, unmap_calls;

static int up_map(void *c, int d, uintptr_t va, size_t size, uint64_t h)
{
    map_calls++;
    (void)c;
    (void)d;
    (void)va;
    (void)size;
    (void)h;
    return 0;
}

static int up_unmap(void *c, int d, uintptr_t va, size_t size)
{
    unmap_calls++;
    (void)c;
    (void)d;
    (void)va;
    (void)size;
    return 0;
}

/* The fences: a snapshot after each free, with the trace time of the
 * free; the GPU is `lag_ns` behind the trace's clock, `now`. */
#define MAXF (1u << 20)
static struct pool_snapshot fsnap[MAXF];
static uint64_t ftime[MAXF], lag_ns, now, fence_waits;
static size_t fhead, ftail;
static bool ordered;
static uint64_t issued, dropped;

static int up_reclaim(void *c, int d, int wait)
{
    (void)c;
    int n = 0;
    while (fhead < ftail && ftime[fhead] + lag_ns <= now) {
        pool_synced(g_pool, d, &fsnap[fhead++]);
        n = 1;
    }
    if (wait == POOL_ISSUE && !ordered)
        return n;
    /* a barrier request is answered with a barrier, as fence.c does, even
     * when an older fence has just completed */
    if ((n && wait != POOL_ISSUE) || !wait)
        return n;
    if (ordered && (wait == POOL_REUSE || wait == POOL_ISSUE) &&
        pool_freed_since_snapshot(g_pool, d)) {
        /* ordered reuse: a barrier recorded now makes every free before it
         * reusable at once; the GPU reaches it `lag` later */
        struct pool_snapshot s;
        pool_sync_snapshot(g_pool, d, &s);
        pool_issued(g_pool, d, &s);
        if (ftail < MAXF) {
            fsnap[ftail] = s;
            ftime[ftail++] = now;
        } else {
            dropped++; /* never idle: what it covers stays in use */
        }
        issued++;
        return 1;
    }
    if (fhead == ftail)
        return 0;
    /* waiting for the oldest: the GPU catches up to it */
    now = ftime[fhead] + lag_ns;
    pool_synced(g_pool, d, &fsnap[fhead++]);
    fence_waits++;
    return 1;
}

static int up_sync(void *c, int d)
{
    (void)c;
    (void)d;
    struct timespec ts = {0, (long)sync_us * 1000};
    nanosleep(&ts, NULL);
    return 0;
}

struct live {
    uint64_t addr; /* in the trace */
    uintptr_t mine;
    uint64_t size;
    UT_hash_handle hh;
};

int main(int argc, char **argv)
{
    bool eager = false, vmm = false, whole = false;
    for (; argc > 1 && argv[1][0] == '-' && argv[1][1] == '-'; argv++, argc--) {
        if (strcmp(argv[1], "--eager") == 0)
            eager = true;
        else if (strcmp(argv[1], "--async") == 0) {
            static const struct wi_opts o = {0};
            g_async = wi_async.init(&o);
        } else if (strcmp(argv[1], "--ordered") == 0)
            ordered = true;
        else if (strcmp(argv[1], "--vmm") == 0)
            vmm = true;
        else if (strcmp(argv[1], "--whole") == 0)
            whole = true;
        else if (strcmp(argv[1], "--page") == 0 && argc > 2) {
            PAGE = (size_t)atoi(argv[2]) << 20;
            argv++;
            argc--;
        } else if (strcmp(argv[1], "--chunk") == 0 && argc > 2) {
            CHUNK = (size_t)atoi(argv[2]) << 20;
            argv++;
            argc--;
        } else if (strcmp(argv[1], "--lag") == 0 && argc > 2) {
            lag_ns = (uint64_t)(atof(argv[2]) * 1e6);
            argv++;
            argc--;
        }
        else
            break;
    }
    if (argc < 2 || argv[1][0] == '-' || (eager && ordered) || (vmm && whole)) {
        fprintf(stderr, "usage: replay_pool [--eager | --ordered] [--async] [--vmm [--page MB] "
                        "[--chunk MB] | --whole] [--lag MS] TRACE [SYNC_US]\n");
        return 2;
    }
    if (argc > 2)
        sync_us = (unsigned)atoi(argv[2]);
    char err[256];
    struct gmt_reader *r = gmt_reader_open(argv[1], err, sizeof err);
    if (r == NULL) {
        fprintf(stderr, "replay_pool: %s\n", err);
        return 2;
    }
    struct pool_upstream up = {.alloc = up_alloc, .release = up_release, .sync = up_sync};
    if (lag_ns || ordered)
        up.reclaim = up_reclaim;
    if (vmm || whole) {
        up.page = whole ? 0 : PAGE;
        up.chunk = whole ? 0 : CHUNK;
        up.whole = whole;
        up.reserve = up_reserve;
        up.unreserve = up_unreserve;
        up.create = up_create;
        up.destroy = up_destroy;
        up.map = up_map;
        up.unmap = up_unmap;
        up.alias = getenv("REPLAY_ALIAS") != NULL;
    }
    struct pool *p = pool_create(&up, NULL);
    g_pool = p;
    verbose = getenv("REPLAY_VERBOSE") != NULL;
    struct live *map = NULL;
    struct gmt_rec rec;
    uint64_t requested = 0, peak_requested = 0, allocs = 0;
    int got;
    while ((got = gmt_reader_next(r, &rec)) == 1) {
        unsigned api = rec.api & 0x7f;
        if (rec.time > now)
            now = rec.time;
        if (rec.kind == GMT_K_ALLOC && api == GMT_API_MALLOC && rec.result == 0 &&
            rec.size > 0) {
            struct live *l = calloc(1, sizeof *l);
            l->addr = rec.addr;
            l->size = rec.size;
            struct pool_stats s0, s1;
            if (getenv("XMAPS"))
                pool_stats(p, 0, &s0);
            if (pool_alloc(p, (int)rec.device, rec.thread, rec.size, &l->mine) != 0) {
                fprintf(stderr, "replay_pool: pool_alloc failed\n");
                return 1;
            }
            HASH_ADD(hh, map, addr, sizeof l->addr, l);
            if (getenv("XMAPS")) {
                pool_stats(p, 0, &s1);
                if (s1.page_maps != s0.page_maps)
                    printf("MAP t=%.3f thr=%u size=%llu maps=%llu created=%llu req=%llu alloc=%llu pend=%llu free=%llu\n",
                           rec.time / 1e9, rec.thread, (unsigned long long)rec.size,
                           (unsigned long long)(s1.page_maps - s0.page_maps),
                           (unsigned long long)(s1.pages_created - s0.pages_created),
                           (unsigned long long)requested, (unsigned long long)s1.allocated,
                           (unsigned long long)s1.pending, (unsigned long long)s1.free_bytes);
            }
            requested += rec.size;
            g_requested = requested;
            static uint64_t dumped;
            if (PAGE && peak_reserved > dumped && getenv("REPLAY_SEGS")) {
                dumped = peak_reserved; /* after the request: a whole state */
                if (vmm)
                    dump_pages(p, (int)rec.device);
            }
            if (requested > peak_requested)
                peak_requested = requested;
            allocs++;
        } else if (rec.kind == GMT_K_FREE && api == GMT_API_FREE && rec.result == 0) {
            struct live *l;
            HASH_FIND(hh, map, &rec.addr, sizeof rec.addr, l);
            if (l) {
                int dev;
                pool_free(p, l->mine, &dev);
                if (lag_ns && !ordered && ftail < MAXF) {
                    pool_sync_snapshot(p, dev, &fsnap[ftail]);
                    ftime[ftail++] = now;
                }
                if (eager) { /* reusable at once: the bound fences approach */
                    struct pool_snapshot snap;
                    pool_sync_snapshot(p, dev, &snap);
                    pool_synced(p, dev, &snap);
                }
                requested -= l->size;
                g_requested = requested;
                HASH_DEL(map, l);
                free(l);
            }
        } else if (rec.kind == GMT_K_SYNC && api == GMT_API_DEVICE_SYNCHRONIZE &&
                   rec.result == 0) {
            struct pool_snapshot s;
            pool_sync_snapshot(p, (int)rec.device, &s);
            pool_synced(p, (int)rec.device, &s);
        }
    }
    if (got < 0) {
        fprintf(stderr, "replay_pool: %s\n", gmt_reader_error(r));
        return 2;
    }
    struct pool_stats st;
    pool_stats(p, 0, &st);
    printf("allocations %llu peak_requested %llu peak_reserved %llu ratio %.4f "
           "segments %llu/%llu pool_syncs %llu",
           (unsigned long long)allocs, (unsigned long long)peak_requested,
           (unsigned long long)peak_reserved,
           peak_requested ? (double)peak_reserved / (double)peak_requested : 0.0,
           (unsigned long long)seg_allocs, (unsigned long long)seg_releases,
           (unsigned long long)st.syncs);
    if (lag_ns)
        printf(" fence_waits %llu", (unsigned long long)fence_waits);
    if (ordered)
        printf(" barriers %llu", (unsigned long long)issued);
    if (dropped)
        printf(" barriers_never_idle %llu (more than %u fences)",
               (unsigned long long)dropped, MAXF);
    if (vmm)
        printf(" page_maps %llu page_unmaps %llu pages_created %llu "
               "map_calls %llu unmap_calls %llu destroys %llu idle_waits %llu",
               (unsigned long long)st.page_maps,
               (unsigned long long)st.page_unmaps,
               (unsigned long long)st.pages_created,
               (unsigned long long)map_calls, (unsigned long long)unmap_calls,
               (unsigned long long)st.destroys, (unsigned long long)st.idle_waits);
    if (whole) /* whole segments: one map and one unmap each */
        printf(" whole_made %llu whole_given_back %llu",
               (unsigned long long)map_calls, (unsigned long long)unmap_calls);
    printf("\n");
    gmt_reader_close(r);
    return 0;
}
