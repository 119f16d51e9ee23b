/* test_pool.c - the caching pool against a host-memory upstream
 * (pool_fixture.h): no reuse before the GPU is done, synchronizations,
 * out of memory, coalescing, large blocks, loose fits, fences, ordered
 * reuse, and sixteen threads. The virtual-memory cases are in test_pool_vmm.c.
 */
#include "pool_fixture.h"
#include "pool_internal.h" /* the shared arena's contention count */

static void no_reuse_before_sync(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 1000);
    CHECK(a != 0);
    gpu_free(p, a, 1000);
    /* plenty of room: the pool grows the segment's free part, no sync */
    uintptr_t b = gpu_alloc(p, 0, 1000);
    CHECK(b != 0 && b != a);
    CHECK(up.syncs == 0 && up.violations == 0);
    /* the program synchronizes: the block is reusable */
    struct pool_snapshot snap;
    pool_sync_snapshot(p, 0, &snap);
    up_sync(NULL, 0);
    pool_synced(p, 0, &snap);
    uintptr_t c = gpu_alloc(p, 0, 1000);
    CHECK(c == a); /* best fit: the freed block */
    CHECK(up.completed == 1);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, b, 1000);
    pool_release_all(p); /* c is still live: its segment stays */
    CHECK(up.used == POOL_SMALL_SEGMENT);
    gpu_free(p, c, 1000);
    pool_release_all(p);
    CHECK(up.used == 0);
}

static void one_sync_per_wave(void)
{
    /* Capacity for exactly one small segment: once it is full, only
     * pending memory can serve, and one sync frees all of it. */
    reset(POOL_SMALL_SEGMENT);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t blocks[4096];
    int n = 0;
    uintptr_t a;
    while (n < 4096 && (a = gpu_alloc(p, 0, 4096)) != 0)
        blocks[n++] = a;
    CHECK(n == POOL_SMALL_SEGMENT / 4096);
    for (int i = 0; i < n; i++)
        gpu_free(p, blocks[i], 4096);
    CHECK(up.syncs == 0);
    for (int i = 0; i < n; i++)
        CHECK(gpu_alloc(p, 0, 4096) != 0);
    CHECK(up.syncs == 1); /* one wave, one sync - not one per free */
    CHECK(up.violations == 0);
    CHECK(pool_check(p) == NULL);
    pool_release_all(p);
}

static void oom_cascade(void)
{
    reset(3 * POOL_MEDIUM_SEGMENT);
    struct pool *p = pool_create(&upstream, &observer);
    /* fill two medium segments, free them (pending), then ask for a large
     * block that needs their memory back: sync, trim, grow */
    uintptr_t x[8];
    int n = 0;
    for (int i = 0; i < 8; i++)
        if ((x[i] = gpu_alloc(p, 0, 8u << 20)) != 0)
            n++;
    CHECK(n == 6); /* 2 per 16 MiB segment, 3 segments; 12 MiB left */
    for (int i = 0; i < 8; i++)
        if (x[i])
            gpu_free(p, x[i], 8u << 20);
    uintptr_t big = gpu_alloc(p, 0, 50u << 20);
    CHECK(big != 0); /* needed the whole capacity: segments given back */
    CHECK(up.releases == 3 && up.syncs >= 1 && up.violations == 0);
    struct pool_block_info bi;
    CHECK(pool_lookup(p, big, &bi) && bi.seg_base == big);
    /* more than exists: a clean failure */
    uintptr_t none = 0;
    CHECK(pool_alloc(p, 0, 0, 100u << 20, &none) == 2 && none == 0);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, big, 50u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0);
    pool_release_all(p);
}

/* Requests near 2^64 - (size_t)-1 is the classic n - 1 with n == 0 -
 * fail at once, with nothing handed out and nothing asked of the
 * upstream. Rounded up to 512 bytes, the first 511 of them wrapped to a
 * 512-byte block, returned as a success; rounded up to a segment, the
 * sizes from 2^64 - 2 MiB wrapped to a segment of 0 bytes, and the pool
 * crashed binning it. The largest request served asks the upstream for
 * what it needs, which the upstream refuses. */
static void huge_requests_fail(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    const size_t two_mib = 2u << 20;
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 510, SIZE_MAX - 511,
                            SIZE_MAX - 512, SIZE_MAX - two_mib + 1,
                            SIZE_MAX - two_mib, SIZE_MAX - (20u << 20),
                            (size_t)1 << 63, POOL_MAX_REQUEST + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uintptr_t a = 0;
        int r = pool_alloc(p, 0, 0, sizes[i], &a);
        CHECK(r == 2 && a == 0);
        if (r == 0)
            fprintf(stderr, "huge_requests_fail: %zu bytes served at %#lx\n",
                    sizes[i], (unsigned long)a);
    }
    CHECK(up.allocs == 0 && up.used == 0);
    uintptr_t a = 0;
    CHECK(pool_alloc(p, 0, 0, POOL_MAX_REQUEST, &a) == 2 && a == 0);
    CHECK(up.allocs == 0 && up.violations == 0 && pool_check(p) == NULL);
    /* and the pool serves as before */
    CHECK((a = gpu_alloc(p, 0, 0)) != 0);
    gpu_free(p, a, POOL_ROUND);
    pool_release_all(p);
    CHECK(up.used == 0);
}

static void coalescing(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 512), b = gpu_alloc(p, 0, 512),
              c = gpu_alloc(p, 0, 512);
    CHECK(b == a + 512 && c == b + 512);
    gpu_free(p, b, 512);
    gpu_free(p, a, 512);
    gpu_free(p, c, 512);
    pool_trim(p, 0); /* syncs, promotes, coalesces, gives the segment back */
    CHECK(up.used == 0 && up.releases == 1);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(st.reserved == 0 && st.allocated == 0 && st.pending == 0);
    /* coalescing without giving back: the free blocks merge into one */
    a = gpu_alloc(p, 0, 512);
    b = gpu_alloc(p, 0, 1024);
    gpu_free(p, a, 512);
    gpu_free(p, b, 1024);
    struct pool_snapshot snap;
    pool_sync_snapshot(p, 0, &snap);
    up_sync(NULL, 0);
    pool_synced(p, 0, &snap);
    uintptr_t whole = gpu_alloc(p, 0, POOL_SMALL_MAX);
    CHECK(whole == a); /* the merged block, from the segment start */
    pool_stats(p, 0, &st);
    CHECK(st.free_blocks == 1 && st.largest_free == POOL_SMALL_SEGMENT - POOL_SMALL_MAX);
    CHECK(up.violations == 0);
    CHECK(pool_check(p) == NULL);
    pool_release_all(p);
}

static void refused_sync_grows(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    up.refuse_sync = 1; /* a capture is in progress */
    uintptr_t a = gpu_alloc(p, 0, POOL_SMALL_MAX);
    uintptr_t b = gpu_alloc(p, 0, POOL_SMALL_MAX);
    gpu_free(p, a, POOL_SMALL_MAX);
    gpu_free(p, b, POOL_SMALL_MAX);
    uintptr_t c = gpu_alloc(p, 0, POOL_SMALL_MAX);
    CHECK(c != 0 && c != a && c != b && up.violations == 0);
    CHECK(up.syncs == 0);
    up.refuse_sync = 0;
    pool_release_all(p);
}

static void invalid_frees(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 4096);
    int dev;
    CHECK(pool_free(p, a + 512, &dev) == POOL_INVALID);  /* interior */
    CHECK(pool_free(p, 0x1000, &dev) == POOL_NOT_MINE);  /* not ours */
    CHECK(pool_free(p, a, &dev) == 0 && dev == 0);
    CHECK(pool_free(p, a, &dev) == POOL_INVALID);        /* double free */
    CHECK(pool_check(p) == NULL);
    pool_release_all(p);
}

/* A large request that needs new memory gets a segment of its own (so an
 * IPC handle of it names it); freed large blocks are then reused by best
 * fit wherever they are, without taking more from upstream. */
static void large_blocks(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t x[6];
    for (int i = 0; i < 6; i++) {
        x[i] = gpu_alloc(p, 0, (11u + (unsigned)i * 7u) << 20);
        struct pool_block_info bi;
        CHECK(x[i] && pool_lookup(p, x[i], &bi) && bi.seg_base == x[i]);
    }
    for (int i = 0; i < 6; i++)
        gpu_free(p, x[i], (11u + (unsigned)i * 7u) << 20);
    struct pool_snapshot snap;
    pool_sync_snapshot(p, 0, &snap);
    up_sync(NULL, 0);
    pool_synced(p, 0, &snap);
    unsigned long allocs = up.allocs;
    /* segments of 12 (11 rounded to 2 MiB), 18, 26, 32, 40 and 46 MiB are
     * free: room for twelve 12 MiB blocks by best fit, no new segment */
    for (int i = 0; i < 12; i++)
        CHECK(gpu_alloc(p, 0, 12u << 20) != 0);
    CHECK(up.allocs == allocs);
    CHECK(up.violations == 0);
    CHECK(pool_check(p) == NULL);
    pool_release_all(p);
}

/* A large request whose best free fit would leave twice the request free
 * beside it waits for pending memory that fits better: the segment just
 * emptied stays whole for the next request of its size. A tight free fit
 * is taken at once. */
static void loose_fit_waits(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 300u << 20), b = gpu_alloc(p, 0, 48u << 20);
    uintptr_t c = gpu_alloc(p, 0, 60u << 20);
    CHECK(a && b && c && up.allocs == 3);
    gpu_free(p, a, 300u << 20);
    gpu_free(p, c, 60u << 20);
    struct pool_snapshot snap; /* the program synchronizes */
    pool_sync_snapshot(p, 0, &snap);
    up_sync(NULL, 0);
    pool_synced(p, 0, &snap);
    gpu_free(p, b, 48u << 20); /* pending: the GPU may still use it */
    unsigned long syncs = up.syncs;
    /* 60 MiB free for 40: tight enough, no wait */
    uintptr_t t = gpu_alloc(p, 0, 40u << 20);
    CHECK(t == c && up.syncs == syncs);
    /* 300 MiB free for 48 is loose; b, pending, fits it exactly */
    uintptr_t x = gpu_alloc(p, 0, 48u << 20);
    CHECK(x == b && up.syncs == syncs + 1 && up.violations == 0);
    uintptr_t y = gpu_alloc(p, 0, 300u << 20); /* a's segment, whole */
    CHECK(y == a && up.allocs == 3 && up.violations == 0);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, t, 40u << 20);
    gpu_free(p, x, 48u << 20);
    gpu_free(p, y, 300u << 20);
    pool_release_all(p);
    CHECK(up.used == 0);
}

/* Threads that take turns (PyTorch's forward thread and its autograd
 * thread) share one arena: what one freed in a busy segment serves the
 * other at once. With an arena each, the second was served only by a
 * loan from the first's arena, which it takes only when that arena has
 * plenty free or after waiting for pending memory - and replays of real
 * training runs held 4-40% more memory. */
static void turns_share_an_arena(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    size_t mib = 1u << 20;
    uintptr_t a = gpu_alloc(p, 0, 8 * mib), b = gpu_alloc(p, 0, 8 * mib);
    CHECK(a && b && up.allocs == 1); /* one 16 MiB segment */
    gpu_free(p, a, 8 * mib);
    pool_trim(p, 0); /* synchronizes; gives nothing back: b is live */
    uintptr_t c = gpu_alloc(p, 5, 8 * mib); /* another thread */
    CHECK(c == a && up.allocs == 1);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(st.spread == 0 && st.lent == 0);
    gpu_free(p, b, 8 * mib);
    gpu_free(p, c, 8 * mib);
    CHECK(up.violations == 0);
    pool_release_all(p);
}

/* Contention moves threads off the shared arena: once its lock has been
 * found taken POOL_SPREAD_AFTER times in a window, a thread slot takes an
 * arena of its own as it next allocates; slot 0 stays. Fewer contentions
 * than that in a window of POOL_SPREAD_WINDOW acquisitions are forgotten. */
static void contention_spreads(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    size_t mib = 1u << 20;
    uintptr_t a = gpu_alloc(p, 5, mib);
    struct arena *shared = &p->dev[0]->arenas[0];
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(a && st.spread == 0 && up.allocs == 1);
    /* fewer than enough in a window: forgotten at its end */
    __atomic_store_n(&shared->contended, POOL_SPREAD_AFTER - 1, __ATOMIC_RELAXED);
    for (int i = 0; i < POOL_SPREAD_WINDOW; i++) {
        uintptr_t x = gpu_alloc(p, 7, 512);
        gpu_free(p, x, 512);
    }
    pool_stats(p, 0, &st);
    CHECK(st.spread == 0 && __atomic_load_n(&shared->contended, __ATOMIC_RELAXED) == 0);
    /* enough: slot 5 moves; its own arena empty, the shared one lends */
    __atomic_store_n(&shared->contended, POOL_SPREAD_AFTER, __ATOMIC_RELAXED);
    uintptr_t b = gpu_alloc(p, 5, mib);
    pool_stats(p, 0, &st);
    CHECK(b && st.spread == 1 && st.lent == 1);
    uintptr_t c = gpu_alloc(p, 0, mib); /* slot 0 stays: no loan */
    pool_stats(p, 0, &st);
    CHECK(c && st.spread == 1 && st.lent == 1);
    gpu_free(p, a, mib);
    gpu_free(p, b, mib);
    gpu_free(p, c, mib);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    pool_release_all(p);
}

static void sixteen_threads(void)
{
    reset(2ull << 30);
    g_pool = pool_create(&upstream, &observer);
    struct pool_stats st;
    run_sixteen(&st);
    CHECK(st.reserved == st.pending + st.free_bytes);
    pool_trim(g_pool, 0);
    pool_stats(g_pool, 0, &st);
    CHECK(st.reserved == 0 && up.used == 0); /* every byte returned */
    pool_release_all(g_pool);
}

static void fences_before_syncs(void)
{
    reset(4u << 20); /* two small segments' worth */
    static const struct pool_upstream fenced = {up_alloc, up_release, up_sync,
                                                up_reclaim, NULL};
    memset(&fq, 0, sizeof fq);
    struct pool *p = fq.p = pool_create(&fenced, &observer);
    uintptr_t a = gpu_alloc(p, 0, 1u << 20), b = gpu_alloc(p, 0, 1u << 20);
    uintptr_t c = gpu_alloc(p, 0, 1u << 20), e = gpu_alloc(p, 0, 1u << 20);
    CHECK(a && b && c && e && up.used == 4u << 20);
    gpu_free(p, a, 1u << 20);
    up_reclaim(NULL, 0, true); /* a fence after a's free: waited for at once */
    CHECK(fq.waits == 1);
    gpu_alloc(p, 0, 1u << 20); /* takes a */
    gpu_free(p, b, 1u << 20);
    pool_sync_snapshot(p, 0, &fq.snap[fq.tail]); /* a fence covering b */
    fq.busy_at[fq.tail++] = up.nbusy;
    gpu_free(p, c, 1u << 20); /* after it: not covered */
    /* Only pending memory can serve: the pool waits for b's fence (the
     * oldest), not for the device, and never hands out c. */
    uintptr_t x = gpu_alloc(p, 0, 1u << 20);
    CHECK(x == b && up.syncs == 0 && up.violations == 0 && fq.waits == 2);
    /* A reclaim that claims progress for ever still ends in a sync. */
    fq.always = 1;
    uintptr_t y = gpu_alloc(p, 0, 1u << 20);
    CHECK(y == c && up.syncs == 1 && up.violations == 0);
    pool_release_all(p);
}

/* A freed block goes to the next request once a barrier is issued after
 * the free - no wait, no synchronization; the new owner's work is ordered
 * after the old owner's (gpu_alloc checks). */
static void ordered_reuse(void)
{
    reset(2u << 20); /* one small segment: nothing can grow */
    static const struct pool_upstream ordered = {up_alloc, up_release, up_sync,
                                                 ordered_reclaim, NULL};
    memset(&fq, 0, sizeof fq);
    struct pool *p = fq.p = pool_create(&ordered, &observer);
    uintptr_t a = gpu_alloc(p, 0, 1u << 20), b = gpu_alloc(p, 0, 1u << 20);
    CHECK(a && b && up.used == 2u << 20);
    gpu_free(p, a, 1u << 20); /* GPU work may still use a */
    uintptr_t x = gpu_alloc(p, 0, 1u << 20);
    CHECK(x == a && fq.issued == 1 && fq.waits == 0 && up.syncs == 0);
    CHECK(up.nbusy == 1 && up.violations == 0);
    gpu_free(p, b, 1u << 20);
    gpu_free(p, x, 1u << 20);
    pool_release_all(p);
}

/* Ordered reuse: when the memory a barrier made reusable does not serve
 * a request, the pool neither waits for the GPU nor synchronizes - that
 * would make nothing more reusable - it grows. Two 20 MiB blocks freed,
 * 30 MiB asked for. */
static void ordered_grows_instead_of_waiting(void)
{
    reset(256u << 20);
    static const struct pool_upstream ordered = {up_alloc, up_release, up_sync,
                                                 ordered_reclaim, NULL};
    memset(&fq, 0, sizeof fq);
    struct pool *p = fq.p = pool_create(&ordered, &observer);
    uintptr_t a = gpu_alloc(p, 0, 20u << 20), b = gpu_alloc(p, 0, 20u << 20);
    CHECK(a && b);
    gpu_free(p, a, 20u << 20);
    gpu_free(p, b, 20u << 20);
    uintptr_t x = gpu_alloc(p, 0, 30u << 20);
    CHECK(x && fq.issued == 1 && fq.reuse_waits == 0 && up.syncs == 0);
    CHECK(up.violations == 0);
    gpu_free(p, x, 30u << 20);
    pool_release_all(p);
}

/* Ordered reuse: a large request first has every free made reusable (a
 * barrier, no wait), so it takes the block just freed that fits it best
 * rather than cutting a larger reusable one. Without ordered reuse the
 * same request neither waits nor synchronizes for it. */
static void ordered_large_sees_every_free(void)
{
    for (int ordered = 0; ordered < 2; ordered++) {
        reset(256u << 20);
        const struct pool_upstream u = {up_alloc, up_release, up_sync,
                                        ordered ? ordered_reclaim : up_reclaim, NULL};
        memset(&fq, 0, sizeof fq);
        struct pool *p = fq.p = pool_create(&u, &observer);
        /* three in a 22 MiB segment (it holds five), 9.25 MiB after them */
        size_t b = (4u << 20) + (1u << 18);
        uintptr_t x1 = gpu_alloc(p, 0, b), x2 = gpu_alloc(p, 0, b),
                  x3 = gpu_alloc(p, 0, b);
        CHECK(x2 == x1 + b && x3 == x2 + b && up.allocs == 1);
        gpu_free(p, x2, b); /* GPU work may still use it */
        uintptr_t y = gpu_alloc(p, 0, b);
        if (ordered)
            CHECK(y == x2 && fq.issued == 1);
        else
            CHECK(y == x3 + b && fq.issued == 0);
        CHECK(fq.waits == 0 && up.syncs == 0 && up.violations == 0);
        gpu_free(p, x1, b);
        gpu_free(p, x3, b);
        gpu_free(p, y, b);
        pool_release_all(p);
    }
}

/* Requests of 1-10 MiB share segments of 12-24 MiB that hold a whole
 * number of blocks of the size that made them, with the least left over
 * (pool.c, segment_size): 7 MiB, two in 14 MiB; 6.75 MiB, two in 14
 * MiB (20 MiB would leave 6.5 MiB that no block of its size fits);
 * 4.25 MiB, five in 22 MiB (20 MiB would hold four, 3 MiB left over);
 * 10 MiB, two in 20 MiB; 1.5 MiB, eight in 12 MiB. */
static void medium_segments_hold_whole_blocks(void)
{
    static const struct { size_t req, seg; unsigned fit; } c[] = {
        {7u << 20, 14u << 20, 2},
        {(27u << 20) / 4, 14u << 20, 2},
        {(17u << 20) / 4, 22u << 20, 5},
        {10u << 20, 20u << 20, 2},
        {(3u << 20) / 2, 12u << 20, 8},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        reset(1u << 30);
        struct pool *p = pool_create(&upstream, &observer);
        uintptr_t x[9];
        for (unsigned j = 0; j <= c[i].fit; j++)
            x[j] = gpu_alloc(p, 0, c[i].req);
        /* the first `fit` in one segment of c.seg bytes, one more grows */
        CHECK(x[c[i].fit - 1] == x[0] + (c[i].fit - 1) * c[i].req);
        CHECK(up.allocs == 2 && up.used == 2 * c[i].seg);
        for (unsigned j = 0; j <= c[i].fit; j++)
            gpu_free(p, x[j], c[i].req);
        CHECK(pool_check(p) == NULL);
        pool_release_all(p);
    }
}

/* Before the pool grows a large segment it gives back the segments with
 * nothing in them that cannot serve the request: large ones smaller than
 * it, and small ones (pool.c, pool_alloc). Two 2 MiB small segments,
 * emptied and made reusable, then a 30 MiB request: both go back, and
 * the pool holds the new segment only. */
static void growth_gives_back_empty_small_segments(void)
{
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t x[4];
    for (int i = 0; i < 4; i++)
        x[i] = gpu_alloc(p, 0, 1u << 20); /* two per small segment */
    CHECK(up.allocs == 2 && up.used == 2 * POOL_SMALL_SEGMENT);
    for (int i = 0; i < 4; i++)
        gpu_free(p, x[i], 1u << 20);
    CHECK(pool_settle(p)); /* one synchronization: all of it reusable */
    uintptr_t big = gpu_alloc(p, 0, 30u << 20);
    CHECK(big && up.releases == 2 && up.used == 30u << 20);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, big, 30u << 20);
    pool_release_all(p);
}

/* A large block's remainder under 1 MiB stays with it - unless it is its
 * segment's end and at least 384 KiB: then it is split off, and a small
 * request that would grow a small segment takes it (a 15.5 MiB block in
 * its 16 MiB segment leaves 512 KiB). */
static void large_ends_split_for_small_requests(void)
{
    const size_t mib = 1u << 20, kib = 1u << 10, big = 16 * mib - 512 * kib;
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t s0 = gpu_alloc(p, 0, mib), s1 = gpu_alloc(p, 0, mib); /* a full small segment */
    uintptr_t x = gpu_alloc(p, 0, big);
    CHECK(s1 == s0 + mib && up.allocs == 2 && up.used == POOL_SMALL_SEGMENT + 16 * mib);
    uintptr_t t = gpu_alloc(p, 0, 256 * kib); /* the end of x's segment */
    CHECK(t == x + big && up.allocs == 2);
    uintptr_t t2 = gpu_alloc(p, 0, 256 * kib); /* and the rest of it */
    CHECK(t2 == t + 256 * kib && up.allocs == 2);
    uintptr_t g = gpu_alloc(p, 0, 256 * kib); /* nothing left: grows */
    CHECK(g != 0 && up.allocs == 3);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, g, 256 * kib);
    gpu_free(p, t, 256 * kib);
    gpu_free(p, t2, 256 * kib);
    gpu_free(p, x, big);
    gpu_free(p, s0, mib);
    gpu_free(p, s1, mib);
    pool_release_all(p);
}

/* A small request that would make a small segment grow takes the free end
 * of a large segment in use instead, if it is shorter than 2 MiB (pool.c,
 * try_tail): 24.5 MiB is rounded to a segment of 26 MiB, whose last 1.5
 * MiB no large request fits. Only as a last resort: while a small segment
 * has room, small blocks go there; an empty large segment is not cut. */
static void small_requests_take_large_tails(void)
{
    const size_t big = (49u << 20) / 2, mib = 1u << 20;
    reset(1u << 30);
    struct pool *p = pool_create(&upstream, &observer);
    uintptr_t s0 = gpu_alloc(p, 0, 4096); /* a small segment, with room */
    uintptr_t x = gpu_alloc(p, 0, big);
    CHECK(up.allocs == 2 && up.used == POOL_SMALL_SEGMENT + (26u << 20));
    uintptr_t s1 = gpu_alloc(p, 0, 4096);
    CHECK(s1 == s0 + 4096); /* the small segment first */
    uintptr_t f0 = gpu_alloc(p, 0, mib), f1 = gpu_alloc(p, 0, mib - 8192);
    CHECK(f0 == s1 + 4096 && f1 == f0 + mib && up.allocs == 2); /* full */
    uintptr_t t0 = gpu_alloc(p, 0, mib);         /* the tail, not a grow */
    uintptr_t t1 = gpu_alloc(p, 0, mib / 2);     /* what is left of it */
    CHECK(t0 == x + big && t1 == x + big + mib);
    CHECK(up.allocs == 2);
    uintptr_t g = gpu_alloc(p, 0, mib);          /* no tail left: grows */
    uintptr_t g2 = gpu_alloc(p, 0, mib);         /* fills g's segment */
    CHECK(g != 0 && g2 == g + mib && up.allocs == 3);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, t0, mib);
    gpu_free(p, t1, mib / 2);
    gpu_free(p, x, big);
    CHECK(pool_settle(p));
    uintptr_t again = gpu_alloc(p, 0, big); /* the segment whole again */
    CHECK(again == x && up.allocs == 3);
    gpu_free(p, again, big);
    CHECK(pool_settle(p));
    /* the large segment is empty now: a small request grows rather than
     * cut it */
    uintptr_t h = gpu_alloc(p, 0, mib);
    CHECK(h != 0 && (h < x || h >= x + (26u << 20)) && up.allocs == 4);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, h, mib);
    gpu_free(p, g, mib);
    gpu_free(p, g2, mib);
    gpu_free(p, f1, mib - 8192);
    gpu_free(p, f0, mib);
    gpu_free(p, s1, 4096);
    gpu_free(p, s0, 4096);
    pool_release_all(p);
    CHECK(up.used == 0);
}

int main(void)
{
    no_reuse_before_sync();
    one_sync_per_wave();
    oom_cascade();
    huge_requests_fail();
    coalescing();
    refused_sync_grows();
    invalid_frees();
    large_blocks();
    medium_segments_hold_whole_blocks();
    growth_gives_back_empty_small_segments();
    small_requests_take_large_tails();
    large_ends_split_for_small_requests();
    loose_fit_waits();
    turns_share_an_arena();
    contention_spreads();
    fences_before_syncs();
    sixteen_threads();
    ordered_reuse();
    ordered_grows_instead_of_waiting();
    ordered_large_sees_every_free();
    return CHECK_DONE();
}
