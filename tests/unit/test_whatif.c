/* test_whatif.c - the allocator models of `gpumemreport whatif`
 * (report/whatif*.c) on hand-written streams whose answers are worked
 * out below from PyTorch's rules (see the top of whatif_pytorch.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "whatif/whatif.h"
#include "check.h"

#define MiB (1ull << 20)

static struct wi_conf conf(const char *s)
{
    struct wi_conf c;
    char why[160];
    if (wi_conf_parse(s, &c, why, sizeof why) != 0) {
        fprintf(stderr, "conf '%s': %s\n", s, why);
        check_failures++;
    }
    return c;
}

static void *make(const struct wi_model_ops *ops, const struct wi_conf *c, uint64_t limit)
{
    struct wi_opts o = {c, limit, NULL};
    return ops->init(&o);
}

/* gmt-pool with its options (wi_gmt_parse), as `--policy gmt-pool:OPTS` */
static void *make_gmt(const char *opts, uint64_t limit)
{
    struct wi_gmt g = {0};
    char why[160];
    if (opts[0] && wi_gmt_parse(opts, &g, why, sizeof why) != 0) {
        fprintf(stderr, "gmt-pool:%s: %s\n", opts, why);
        check_failures++;
        return NULL;
    }
    struct wi_opts o = {NULL, limit, NULL, &g};
    return wi_gmtpool.init(&o);
}

static struct wi_stats stats(const struct wi_model_ops *ops, void *m)
{
    struct wi_stats s;
    ops->stats(m, &s);
    return s;
}

/* A request to model `ops` that must succeed; its id. */
static uint64_t model_get(const struct wi_model_ops *ops, void *m, uint64_t size,
                          uint64_t stream)
{
    uint64_t id = 0;
    if (ops->alloc(m, size, stream, &id) != 0) {
        fprintf(stderr, "%s: alloc of %llu failed\n", ops->name, (unsigned long long)size);
        check_failures++;
    }
    return id;
}

static uint64_t get(void *m, uint64_t size, uint64_t stream)
{
    return model_get(&wi_pytorch, m, size, stream);
}

/* 2 MiB and 3 MiB (large pool, under 10 MiB: one 20 MiB segment). The
 * 2 MiB request splits it (18 MiB left > 1 MiB), the 3 MiB one takes
 * from the 18 MiB rest (15 MiB left). Two small 1 MiB requests share
 * one 2 MiB segment (the first splits it, the second fits the rest). */
static void test_split(void)
{
    struct wi_conf c = conf("");
    void *m = make(&wi_pytorch, &c, 0);
    uint64_t a = get(m, 2 * MiB, 0);
    struct wi_stats s = stats(&wi_pytorch, m);
    /* the peak was first reached after a: 18 MiB free, all in one block */
    CHECK(s.reserved == 20 * MiB && s.peak_free == 18 * MiB && s.peak_largest_free == 18 * MiB);
    uint64_t b = get(m, 3 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 20 * MiB && s.allocated == 5 * MiB && s.device_allocs == 1);
    uint64_t x = get(m, MiB, 0), y = get(m, MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 22 * MiB && s.device_allocs == 2 && s.allocated == 7 * MiB);
    /* at the 22 MiB peak (after x): 15 MiB + 1 MiB free, largest 15 MiB */
    CHECK(s.peak_reserved == 22 * MiB && s.peak_free == 16 * MiB &&
          s.peak_largest_free == 15 * MiB);
    wi_pytorch.free(m, a);
    wi_pytorch.free(m, b);
    wi_pytorch.free(m, x);
    wi_pytorch.free(m, y);
    /* freed blocks merge back: a 20 MiB request reuses the whole segment */
    uint64_t z = get(m, 20 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.device_allocs == 2 && s.allocated == 20 * MiB);
    /* another stream never reuses stream 0's cache: a new 2 MiB segment */
    uint64_t w = get(m, 1000, 7);
    s = stats(&wi_pytorch, m);
    CHECK(s.device_allocs == 3 && s.reserved == 24 * MiB && s.allocated == 20 * MiB + 1024);
    wi_pytorch.free(m, z);
    wi_pytorch.free(m, w);
    wi_pytorch.fini(m);
}

/* max_split_size_mb:20. A 24 MiB segment (24 MiB request, >= 10 MiB:
 * rounded to 2 MiB) once freed is oversize: a 2 MiB request may not use
 * it and gets its own 20 MiB segment (the default config splits the
 * 24 MiB block instead). A 30 MiB block serves a 25 MiB request (within
 * 20 MiB of it) whole, unsplit: 30 MiB allocated. */
static void test_max_split(void)
{
    struct wi_conf c = conf("max_split_size_mb:20");
    CHECK(c.max_split_size == 20 * MiB);
    void *m = make(&wi_pytorch, &c, 0);
    wi_pytorch.free(m, get(m, 24 * MiB, 0));
    uint64_t a = get(m, 2 * MiB, 0);
    struct wi_stats s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 44 * MiB && s.device_allocs == 2);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);

    struct wi_conf d = conf("");
    m = make(&wi_pytorch, &d, 0);
    wi_pytorch.free(m, get(m, 24 * MiB, 0));
    a = get(m, 2 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 24 * MiB && s.device_allocs == 1 && s.allocated == 2 * MiB);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);

    m = make(&wi_pytorch, &c, 0);
    wi_pytorch.free(m, get(m, 30 * MiB, 0));
    a = get(m, 25 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 30 * MiB && s.allocated == 30 * MiB && s.device_allocs == 1);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
    /* a 50 MiB block is not within 20 MiB of a 25 MiB request: a new
     * 26 MiB segment (25 MiB rounded to 2 MiB), unsplit */
    m = make(&wi_pytorch, &c, 0);
    wi_pytorch.free(m, get(m, 50 * MiB, 0));
    uint64_t b = get(m, 25 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.device_allocs == 2 && s.reserved == 76 * MiB && s.allocated == 26 * MiB);
    wi_pytorch.free(m, b);
    wi_pytorch.fini(m);
}

/* expandable_segments:True, two 25 MiB requests. The first maps two
 * 20 MiB pages (40 MiB) of a new segment and splits (25 + 15 free); the
 * second finds no free block of 25 MiB, takes the free 15 MiB plus one
 * more page mapped after it (35 MiB, split 25 + 10): 60 MiB reserved by
 * 2 maps, one segment. Without it: two segments of 26 MiB. */
static void test_expandable(void)
{
    struct wi_conf c = conf("expandable_segments:True");
    CHECK(c.expandable);
    void *m = make(&wi_pytorch, &c, 0);
    uint64_t a = get(m, 25 * MiB, 0);
    struct wi_stats s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 40 * MiB && s.device_allocs == 1 && s.segments == 1);
    uint64_t b = get(m, 25 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 60 * MiB && s.device_allocs == 2 && s.peak_segments == 1);
    CHECK(s.allocated == 50 * MiB && s.peak_free == 10 * MiB && s.peak_largest_free == 10 * MiB);
    /* small requests: their own segment, 2 MiB pages */
    uint64_t x = get(m, 4096, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 62 * MiB && s.device_allocs == 3 && s.segments == 2);
    wi_pytorch.free(m, a);
    wi_pytorch.free(m, b);
    wi_pytorch.free(m, x);
    wi_pytorch.fini(m);

    struct wi_conf d = conf("");
    m = make(&wi_pytorch, &d, 0);
    a = get(m, 25 * MiB, 0);
    b = get(m, 25 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 52 * MiB && s.device_allocs == 2 && s.peak_segments == 2);
    wi_pytorch.free(m, a);
    wi_pytorch.free(m, b);
    wi_pytorch.fini(m);
}

/* On a 100 MiB card, expandable: 60 MiB mapped (3 pages) for a 60 MiB
 * request, freed; a 70 MiB request on another stream needs 80 MiB of
 * its own segment: 60 + 80 > 100, so the cache is emptied (the 3 free
 * pages unmapped: one unmap, the empty segment given back) and the
 * retry maps 4 pages. */
static void test_expandable_oom_unmap(void)
{
    struct wi_conf c = conf("expandable_segments:True");
    void *m = make(&wi_pytorch, &c, 100 * MiB);
    wi_pytorch.free(m, get(m, 60 * MiB, 0));
    uint64_t a = get(m, 70 * MiB, 1);
    struct wi_stats s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 80 * MiB && s.device_allocs == 2 && s.device_frees == 1);
    CHECK(s.retries == 1 && s.segments == 1);
    CHECK(s.syncs == 2); /* synchronize all streams, then the unmap's stream sync */
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
}

/* roundup_power2_divisions. 4 divisions: 1.1 MiB (1153434 bytes, in the
 * 1-2 MiB interval) rounds to the next quarter between 1 and 2 MiB,
 * 1.25 MiB; plain 512-byte rounding makes it 1153536. 1200 bytes is not
 * above 512 * 4, so 512-byte rounding: 1536. The list form: intervals
 * 256 MiB:1, 512 MiB:2, 1 GiB:4, above: 8, and below 256 MiB the first
 * value (1). PyTorch fills ">" from the last interval named on, so the
 * 1 GiB interval gets 8 too (parseRoundUpPower2Divisions does exactly
 * that). 600 MiB (512 MiB interval, 2 divisions) -> 768 MiB. */
static void test_rounding(void)
{
    struct wi_conf d = conf(""), c = conf("roundup_power2_divisions:4");
    CHECK(wi_pytorch_round(&d, 4) == 512);
    CHECK(wi_pytorch_round(&d, 1153434) == 1153536);
    CHECK(wi_pytorch_round(&c, 1153434) == 1310720);
    CHECK(wi_pytorch_round(&c, 1200) == 1536);
    CHECK(wi_pytorch_round(&c, 2 * MiB) == 2 * MiB);
    struct wi_conf l = conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    CHECK(l.roundup[0] == 1 && l.roundup[7] == 1 && l.roundup[8] == 1 && l.roundup[9] == 2 &&
          l.roundup[10] == 8 && l.roundup[11] == 8 && l.roundup[15] == 8);
    CHECK(wi_pytorch_round(&l, 600 * MiB) == 768 * MiB);
    CHECK(wi_pytorch_round(&l, 300 * MiB) == 300 * MiB);
    /* the model hands out the rounded block: 1.25 MiB allocated */
    void *m = make(&wi_pytorch, &c, 0);
    uint64_t a = get(m, 1153434, 0);
    CHECK(stats(&wi_pytorch, m).allocated == 1310720);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
    /* bad settings are refused as PyTorch refuses them */
    struct wi_conf bad;
    char why[160];
    CHECK(wi_conf_parse("max_split_size_mb:19", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("roundup_power2_divisions:3", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("garbage_collection_threshold:1.0", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("expandable_segments:yes", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("no_such_key:1", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("max_split_size_mb", &bad, why, sizeof why) != 0);
    CHECK(wi_conf_parse("roundup_power2_divisions:[256:1", &bad, why, sizeof why) != 0);
}

/* A 40 MiB card. 24 MiB cached (freed); a 30 MiB request: 24 + 30 > 40,
 * nothing oversize to release (no max_split_size), so the whole cache is
 * emptied (one sync, one cudaFree) and the retry succeeds. A 20 MiB
 * request then: 30 + 20 > 40 and nothing cached: out of memory after a
 * second emptying. */
static void test_oom_retry(void)
{
    struct wi_conf c = conf("");
    void *m = make(&wi_pytorch, &c, 40 * MiB);
    wi_pytorch.free(m, get(m, 24 * MiB, 0));
    uint64_t a = get(m, 30 * MiB, 0);
    struct wi_stats s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 30 * MiB && s.device_allocs == 2 && s.device_frees == 1);
    CHECK(s.retries == 1 && s.syncs == 1 && s.peak_reserved == 30 * MiB);
    uint64_t id;
    CHECK(wi_pytorch.alloc(m, 20 * MiB, 0, &id) == -1);
    s = stats(&wi_pytorch, m);
    CHECK(s.retries == 2 && s.syncs == 2 && s.reserved == 30 * MiB);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);

    /* max_split_size_mb:20 on a 60 MiB card: 24 MiB and 30 MiB cached
     * (oversize); a 32 MiB request does not reuse the 24 MiB one, and
     * 54 + 32 > 60: release_available_cached_blocks frees the smallest
     * oversize block that covers 32 MiB - none does, so the largest ones
     * until 32 MiB: 30 then 24 - and the retry without a sync succeeds */
    struct wi_conf d = conf("max_split_size_mb:20");
    m = make(&wi_pytorch, &d, 60 * MiB);
    uint64_t x = get(m, 24 * MiB, 0), y = get(m, 30 * MiB, 0);
    wi_pytorch.free(m, x);
    wi_pytorch.free(m, y);
    a = get(m, 32 * MiB, 0);
    s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 32 * MiB && s.device_frees == 2 && s.retries == 0);
    CHECK(s.syncs == 2); /* two cudaFrees outside an emptying of the cache */
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
}

/* garbage_collection_threshold:0.5 on a 100 MiB card: 24 MiB and 30 MiB
 * cached and unsplit (54 MiB > 50 MiB); a 40 MiB request finds neither
 * big enough, and the collection frees blocks at least as old as the
 * average (both, ages 1 and 1 searches) before taking a 40 MiB segment. */
static void test_gc(void)
{
    struct wi_conf c = conf("garbage_collection_threshold:0.5");
    void *m = make(&wi_pytorch, &c, 100 * MiB);
    uint64_t x = get(m, 24 * MiB, 0), y = get(m, 30 * MiB, 0);
    wi_pytorch.free(m, x);
    wi_pytorch.free(m, y);
    uint64_t a = get(m, 40 * MiB, 0);
    struct wi_stats s = stats(&wi_pytorch, m);
    CHECK(s.reserved == 40 * MiB && s.device_frees == 2 && s.retries == 0);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
    /* without a card (no memory fraction) PyTorch never collects */
    m = make(&wi_pytorch, &c, 0);
    x = get(m, 24 * MiB, 0);
    y = get(m, 30 * MiB, 0);
    wi_pytorch.free(m, x);
    wi_pytorch.free(m, y);
    a = get(m, 40 * MiB, 0);
    CHECK(stats(&wi_pytorch, m).reserved == 94 * MiB);
    wi_pytorch.free(m, a);
    wi_pytorch.fini(m);
}

/* ideal: reserved is the live requested bytes; 10 + 20 MiB, free the 10,
 * 5 more: peak 30 MiB. On a 32 MiB card 25 MiB live + 10 MiB fails. */
static void test_ideal(void)
{
    void *m = make(&wi_ideal, NULL, 32 * MiB);
    uint64_t a, b, c, d;
    CHECK(wi_ideal.alloc(m, 10 * MiB, 0, &a) == 0);
    CHECK(wi_ideal.alloc(m, 20 * MiB, 0, &b) == 0);
    wi_ideal.free(m, a);
    CHECK(wi_ideal.alloc(m, 5 * MiB, 0, &c) == 0);
    CHECK(wi_ideal.alloc(m, 10 * MiB, 0, &d) == -1);
    struct wi_stats s = stats(&wi_ideal, m);
    CHECK(s.peak_reserved == 30 * MiB && s.reserved == 25 * MiB && !s.has_device_calls);
    wi_ideal.fini(m);
}

/* gmt-pool: the library's own pool (preload/pool.c), synchronizations
 * free and immediate. Its rules (pool.h, pool.c segment_size, take;
 * pool_sync.c pool_sync_worth): requests up to 1 MiB are small, served
 * from 2 MiB segments; up to 10 MiB from segments of 12-24 MiB that hold
 * a whole number of them with the least left over; a large
 * remainder of 1 MiB or more is split off; a free is pending until the
 * pool synchronizes, which it does only when what is pending in the arena
 * reaches max(4 MiB, the request) - or a pending block of the same class
 * could merge into one that fits. */
static uint64_t gp_get(void *m, uint64_t size)
{
    return model_get(&wi_gmtpool, m, size, 0);
}

static void test_gmtpool(void)
{
    /* 1 MiB + 1 MiB: one 2 MiB small segment, split. Both freed: 2 MiB
     * pending, under the 4 MiB that makes a synchronization worth it, and
     * small blocks never serve a large request anyway: 2 MiB (large) takes
     * a new segment of 12 MiB (six of them). Peak 14 MiB, two cudaMallocs,
     * no sync; at the peak 12 MiB are not handed out (10 MiB reusable
     * after the 2 MiB block, 2 MiB pending), the largest free block 10
     * MiB. */
    void *m = make(&wi_gmtpool, NULL, 0);
    CHECK(m != NULL);
    uint64_t a = gp_get(m, 1 * MiB), b = gp_get(m, 1 * MiB);
    CHECK(a != b && b == a + 1 * MiB);
    struct wi_stats s = stats(&wi_gmtpool, m);
    CHECK(s.reserved == 2 * MiB && s.allocated == 2 * MiB && s.device_allocs == 1);
    wi_gmtpool.free(m, a);
    wi_gmtpool.free(m, b);
    uint64_t c = gp_get(m, 2 * MiB);
    s = stats(&wi_gmtpool, m);
    CHECK(s.peak_reserved == 14 * MiB && s.reserved == 14 * MiB && s.allocated == 2 * MiB);
    CHECK(s.device_allocs == 2 && s.device_frees == 0 && s.syncs == 0);
    CHECK(s.segments == 2 && s.peak_segments == 2 && s.has_device_calls);
    CHECK(s.peak_free == 12 * MiB && s.peak_largest_free == 10 * MiB);
    wi_gmtpool.free(m, c);
    wi_gmtpool.fini(m);

    /* 5 MiB takes a 20 MiB segment (four of them), and 15 MiB fills it
     * exactly (the 15 MiB remainder of the first is split off and fits the
     * second). Both freed: 20 MiB pending >= max(4 MiB, 16 MiB), so a 16
     * MiB request makes the pool synchronize - at once - and the two merge
     * into one 20 MiB block that serves it: no new segment (on a busy GPU,
     * or without the sync, 36 MiB). The peak is first reached at the 5 MiB
     * request: 15 MiB free, all in one block. A second instance reuses the
     * first's emptied pool: its figures start from zero. */
    m = make(&wi_gmtpool, NULL, 0);
    a = gp_get(m, 5 * MiB);
    b = gp_get(m, 15 * MiB);
    CHECK(b == a + 5 * MiB);
    wi_gmtpool.free(m, a);
    wi_gmtpool.free(m, b);
    c = gp_get(m, 16 * MiB);
    s = stats(&wi_gmtpool, m);
    CHECK(c == a && s.peak_reserved == 20 * MiB && s.reserved == 20 * MiB);
    CHECK(s.device_allocs == 1 && s.device_frees == 0 && s.syncs == 1);
    CHECK(s.allocated == 16 * MiB && s.peak_free == 15 * MiB && s.peak_largest_free == 15 * MiB);
    wi_gmtpool.free(m, c);
    wi_gmtpool.fini(m);

    /* a 30 MiB card: 5 MiB takes a 20 MiB segment; 16 MiB does not fit
     * the 15 MiB left, and 20 + 16 > 30 with nothing pending or empty to
     * give back: out of memory, nothing more reserved */
    m = make(&wi_gmtpool, NULL, 30 * MiB);
    a = gp_get(m, 5 * MiB);
    uint64_t id;
    CHECK(wi_gmtpool.alloc(m, 16 * MiB, 0, &id) == -1);
    s = stats(&wi_gmtpool, m);
    CHECK(s.reserved == 20 * MiB && s.device_allocs == 1 && s.peak_reserved == 20 * MiB);
    /* freed, the 5 MiB block is pending: 5 MiB is under the 16 MiB
     * request, but merged with the free 15 MiB after it, it would span
     * 16 MiB (pool_pending_could_fit): the pool synchronizes and the
     * merged 20 MiB block serves the retry in place */
    wi_gmtpool.free(m, a);
    b = gp_get(m, 16 * MiB);
    s = stats(&wi_gmtpool, m);
    CHECK(b == a && s.reserved == 20 * MiB && s.syncs == 1);
    wi_gmtpool.free(m, b);
    wi_gmtpool.fini(m);
}

/* gmt-pool:ordered: every free is reusable at once. Three 4.25 MiB
 * blocks in a 22 MiB segment (it holds five, 0.75 MiB left over), 9.25
 * MiB free after them; the middle one freed. A 4.25 MiB request: the
 * ordered pool reuses the freed block (the best fit), the default one
 * cuts the free 9.25 MiB (the freed block is pending, and what is
 * reusable fits without leaving twice the request beside it). Then 8
 * MiB: the ordered pool has it; the default one has 4.25 + 5 MiB apart,
 * and takes a second segment, of 16 MiB. */
static void test_gmtpool_ordered(void)
{
    for (int ordered = 0; ordered < 2; ordered++) {
        const struct wi_model_ops *ops = &wi_gmtpool;
        void *m = make_gmt(ordered ? "ordered" : "", 0);
        CHECK(m != NULL);
        const uint64_t b = 4 * MiB + MiB / 4;
        uint64_t x1 = model_get(ops, m, b, 0), x2 = model_get(ops, m, b, 0),
                 x3 = model_get(ops, m, b, 0);
        CHECK(x2 == x1 + b && x3 == x2 + b);
        ops->free(m, x2);
        uint64_t y = model_get(ops, m, b, 0);
        CHECK(ordered ? y == x2 : y == x3 + b);
        uint64_t z = model_get(ops, m, 8 * MiB, 0);
        struct wi_stats s = stats(ops, m);
        CHECK(s.peak_reserved == (ordered ? 22 : 38) * MiB);
        CHECK(s.device_allocs == (ordered ? 1u : 2u) && s.syncs == 0);
        CHECK(!ordered || z == x3 + b);
        ops->free(m, x1);
        ops->free(m, x3);
        ops->free(m, y);
        ops->free(m, z);
        ops->fini(m);
    }
}

/* gmt-pool:vmm (GPUMEMTRACE_POOL_VMM=1): requests over 1 MiB on virtual
 * memory, physical pages of 2 MiB mapped where blocks need them, one
 * mapping per run of unmapped pages, at most `chunk` MiB each. Four 6 MiB
 * blocks: 24 MiB of pages in four mappings (the plain pool: two segments
 * of 12 MiB, two blocks each). The first and the third freed (ordered:
 * reusable at once), 12 MiB is asked: no free block of 12 MiB exists in
 * the plain pool (a 6 MiB hole in each segment), which takes a third
 * segment: 36 MiB. With pages, new memory would take the pool past the
 * most the program has asked for at once (24 MiB), so the two holes'
 * mappings are undone and their memory serves the request, mapped in one
 * piece: 24 MiB, five mappings made, two undone. */
static void test_gmtpool_vmm(void)
{
    for (int vmm = 0; vmm < 2; vmm++) {
        void *m = make_gmt(vmm ? "ordered,vmm" : "ordered", 0);
        CHECK(m != NULL);
        uint64_t x1 = gp_get(m, 6 * MiB), x2 = gp_get(m, 6 * MiB), x3 = gp_get(m, 6 * MiB),
                 x4 = gp_get(m, 6 * MiB);
        struct wi_stats s = stats(&wi_gmtpool, m);
        CHECK(s.reserved == 24 * MiB && s.device_allocs == (vmm ? 4u : 2u));
        wi_gmtpool.free(m, x1);
        wi_gmtpool.free(m, x3);
        uint64_t y = gp_get(m, 12 * MiB);
        s = stats(&wi_gmtpool, m);
        CHECK(s.peak_reserved == (vmm ? 24 : 36) * MiB && s.allocated == 24 * MiB);
        CHECK(s.syncs == 0 && s.device_allocs == (vmm ? 5u : 3u) &&
              s.device_frees == (vmm ? 2u : 0u));
        wi_gmtpool.free(m, x2);
        wi_gmtpool.free(m, x4);
        wi_gmtpool.free(m, y);
        wi_gmtpool.fini(m);
    }
    /* a 32 MiB block: mappings of at most 16 MiB (the default), 4 MiB or
     * 2 MiB (one per page) */
    static const struct {
        const char *opts;
        unsigned maps;
    } chunks[] = {{"vmm", 2}, {"vmm,chunk=4", 8}, {"ordered,vmm,chunk=2", 16}, {"vmm,chunk=64", 1}};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
        void *m = make_gmt(chunks[i].opts, 0);
        if (m == NULL)
            continue; /* said */
        uint64_t a = gp_get(m, 32 * MiB);
        struct wi_stats s = stats(&wi_gmtpool, m);
        if (s.reserved != 32 * MiB || s.device_allocs != chunks[i].maps) {
            fprintf(stderr, "gmt-pool:%s: %llu MiB, %llu maps\n", chunks[i].opts,
                    (unsigned long long)(s.reserved / MiB), (unsigned long long)s.device_allocs);
            check_failures++;
        }
        wi_gmtpool.free(m, a);
        wi_gmtpool.fini(m);
    }
    /* a 100 MiB card: 60 + 30 MiB fit, 20 more do not - out of memory,
     * nothing served beyond what is held (a refused create once left a
     * handle behind that the pool then mapped: 110 MiB served on 90) */
    void *m = make_gmt("vmm", 100 * MiB);
    if (m != NULL) {
        gp_get(m, 60 * MiB);
        gp_get(m, 30 * MiB);
        uint64_t id;
        CHECK(wi_gmtpool.alloc(m, 20 * MiB, 0, &id) == -1);
        struct wi_stats s = stats(&wi_gmtpool, m);
        CHECK(s.allocated == 90 * MiB && s.reserved <= 100 * MiB && s.reserved >= 90 * MiB);
        wi_gmtpool.fini(m); /* blocks left: kept apart, never reused */
    }
    /* the options as --policy takes them */
    struct wi_gmt g;
    char why[160];
    CHECK(wi_gmt_parse("ordered", &g, why, sizeof why) == 0 && g.ordered && g.vm == WI_GMT_PLAIN);
    CHECK(wi_gmt_parse("vmm,ordered", &g, why, sizeof why) == 0 && g.ordered &&
          g.vm == WI_GMT_PAGES && g.chunk_mb == 16);
    CHECK(wi_gmt_parse("ordered,whole", &g, why, sizeof why) == 0 && g.vm == WI_GMT_WHOLE);
    CHECK(wi_gmt_parse("vmm,chunk=4", &g, why, sizeof why) == 0 && g.chunk_mb == 4);
    static const char *bad[] = {"whole,vmm", "chunk=4",  "vmm,chunk=3", "vmm,chunk=0",
                                "vmm,chunk=", "vmm,chunk=2048", "vmm,", "fast", ",vmm",
                                "vmm,chunk=4x", "", "vmm,chunk=4,chunk=8", "vmm,,ordered"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        if (wi_gmt_parse(bad[i], &g, why, sizeof why) == 0 || why[0] == '\0') {
            fprintf(stderr, "gmt-pool:%s accepted\n", bad[i]);
            check_failures++;
        }
    }
}

/* The driver's stream-ordered pool on streams whose answer was measured
 * on an H200 (tests/gpu/mempool_probe.cu, docs/validation.md). */
static uint64_t as_get(void *m, uint64_t size)
{
    return model_get(&wi_async, m, size, 0);
}

static uint64_t as_reserved(void *m)
{
    return stats(&wi_async, m).reserved;
}

static void test_async(void)
{
    /* one request reserves whole pages of 32 MiB */
    static const struct {
        uint64_t size, reserved;
    } single[] = {{512, 32 * MiB},          {32 * MiB, 32 * MiB},
                  {32 * MiB + 1, 64 * MiB}, {64 * MiB + 1, 96 * MiB},
                  {100 * MiB, 128 * MiB},   {1000 * MiB, 1024 * MiB}};
    for (size_t i = 0; i < sizeof single / sizeof *single; i++) {
        void *m = make(&wi_async, NULL, 0);
        as_get(m, single[i].size);
        CHECK(as_reserved(m) == single[i].reserved);
        wi_async.fini(m);
    }
    /* blocks of 3 MiB packed across pages: a new page at the 11th, 22nd */
    void *m = make(&wi_async, NULL, 0);
    uint64_t at11 = 0, at22 = 0;
    for (int i = 1; i <= 22; i++) {
        as_get(m, 3 * MiB);
        if (i == 10)
            CHECK(as_reserved(m) == 32 * MiB);
        if (i == 11)
            at11 = as_reserved(m);
        if (i == 21)
            CHECK(as_reserved(m) == 64 * MiB);
        if (i == 22)
            at22 = as_reserved(m);
    }
    CHECK(at11 == 64 * MiB && at22 == 96 * MiB && stats(&wi_async, m).device_allocs == 3);
    wi_async.fini(m);
    /* 1 MiB + 512 bytes: 31 to a page */
    m = make(&wi_async, NULL, 0);
    for (int i = 1; i <= 32; i++) {
        as_get(m, MiB + 512);
        if (i == 31)
            CHECK(as_reserved(m) == 32 * MiB);
    }
    CHECK(as_reserved(m) == 64 * MiB);
    wi_async.fini(m);
    /* a hole: 50 + 50 MiB, the first freed, 60 MiB fits in the 128 MiB;
     * all freed, 100 MiB fits; then 10 MiB (a small request) takes a page
     * of its own */
    m = make(&wi_async, NULL, 0);
    uint64_t a = as_get(m, 50 * MiB), b = as_get(m, 50 * MiB);
    CHECK(as_reserved(m) == 128 * MiB);
    wi_async.free(m, a);
    uint64_t c = as_get(m, 60 * MiB);
    CHECK(as_reserved(m) == 128 * MiB);
    wi_async.free(m, b);
    wi_async.free(m, c);
    as_get(m, 100 * MiB);
    CHECK(as_reserved(m) == 128 * MiB);
    as_get(m, 10 * MiB);
    struct wi_stats st = stats(&wi_async, m);
    CHECK(st.reserved == 160 * MiB && st.peak_reserved == 160 * MiB && st.device_frees == 0);
    CHECK(st.allocated == 110 * MiB);
    wi_async.fini(m); /* with live blocks: fini frees them */
    /* a page freed by a large block serves small ones, and back */
    m = make(&wi_async, NULL, 0);
    wi_async.free(m, as_get(m, 64 * MiB));
    uint64_t small[64];
    for (int i = 0; i < 64; i++)
        small[i] = as_get(m, 512 * 1024);
    CHECK(as_reserved(m) == 64 * MiB);
    for (int i = 0; i < 64; i++)
        wi_async.free(m, small[i]);
    as_get(m, 60 * MiB);
    CHECK(as_reserved(m) == 64 * MiB && stats(&wi_async, m).allocated == 60 * MiB);
    wi_async.fini(m);
    /* out of memory on a 96 MiB card: a fourth page is refused */
    m = make(&wi_async, NULL, 96 * MiB);
    uint64_t id;
    CHECK(wi_async.alloc(m, 90 * MiB, 0, &id) == 0);
    CHECK(wi_async.alloc(m, 10 * MiB, 0, &id) != 0);
    wi_async.fini(m);
}

/* ---- the feed ------------------------------------------------------------------ */

/* What a feed left: per device and policy the model's figures and where
 * it ran out of memory, and the answers for a failed request at the end. */
struct fed {
    struct wi_stats st[2][WI_MAX_POLICIES];
    struct wi_oom oom[2][WI_MAX_POLICIES];
    uint64_t requests, frees, outside_n;
    struct wi_try tries[WI_MAX_POLICIES];
    int ntries;
};

/* A pseudo-random run on two devices of 4 GiB: requests of 512 B to 512
 * MiB on three streams and the legacy one, frees, and driver allocations
 * held outside the models (cuMemAlloc beside the runtime's), through
 * six policies, models on `workers` threads. */
static void feed_run(int workers, struct fed *out)
{
    static const char *const pols[] = {"ideal", "pytorch", "pytorch:expandable_segments:True",
                                       "gmt-pool", "cuda-async",
                                       "pytorch:garbage_collection_threshold:0.5"};
    static struct wi_feed w;
    memset(&w, 0, sizeof w);
    char why[160];
    for (size_t i = 0; i < sizeof pols / sizeof *pols; i++)
        CHECK(wi_policy_parse(pols[i], &w.pol[w.npol++], why, sizeof why) == 0);
    w.limit = 4 * 1024 * MiB;
    w.requests_from = WI_REQ_RUNTIME;
    w.workers = workers;
    struct replay *r = calloc(1, sizeof *r);
    enum { LIVE = 3000 };
    static uint64_t live[2][LIVE];
    size_t nlive[2] = {0, 0};
    uint64_t rng = 0x9e3779b97f4a7c15ull, next_addr = 1ull << 32;
    for (int i = 0; i < 200000; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        struct gmt_rec rec = {.seq = (uint64_t)i + 1, .time = (uint64_t)i * 1000,
                              .device = (uint32_t)(rng >> 60) & 1, .stack = (uint32_t)i};
        unsigned d = rec.device, pick = (unsigned)(rng % 100);
        r->records++;
        if (pick < 48 && nlive[d] < LIVE) {
            rec.kind = GMT_K_ALLOC;
            rec.api = pick < 4 ? GMT_API_CU_MEM_ALLOC
                      : pick < 20 ? GMT_API_MALLOC : GMT_API_MALLOC_ASYNC;
            rec.stream = 1 + (rng >> 8) % 3;
            rec.size = 512ull << ((rng >> 16) % 20);
            rec.size += (rng >> 24) % rec.size;
            rec.addr = live[d][nlive[d]++] = next_addr;
            next_addr += rec.size + 4096;
        } else if (nlive[d] > 0) {
            size_t k = (rng >> 32) % nlive[d];
            rec.kind = GMT_K_FREE;
            rec.api = GMT_API_FREE;
            rec.addr = live[d][k];
            live[d][k] = live[d][--nlive[d]];
        }
        wi_feed_event(r, &rec, &w);
    }
    wi_feed_flush(&w);
    memset(out, 0, sizeof *out);
    for (int d = 0; d < 2; d++) {
        for (int p = 0; p < w.npol && w.dev[d]; p++) {
            w.pol[p].ops->stats(w.dev[d]->m[p], &out->st[d][p]);
            out->oom[d][p] = w.dev[d]->oom[p];
        }
    }
    out->requests = w.requests;
    out->frees = w.frees;
    out->outside_n = w.outside_n;
    struct gmt_rec big = {.kind = GMT_K_ALLOC, .api = GMT_API_MALLOC, .result = 2,
                          .size = 3 * 1024 * MiB, .addr = 1, .seq = 200001};
    r->records++;
    out->ntries = wi_feed_try(&w, r, &big, out->tries);
    wi_feed_reset(&w);
    free(r);
}

static bool same_stats(const struct wi_stats *a, const struct wi_stats *b)
{
    return a->reserved == b->reserved && a->allocated == b->allocated &&
           a->peak_reserved == b->peak_reserved && a->peak_free == b->peak_free &&
           a->peak_largest_free == b->peak_largest_free &&
           a->device_allocs == b->device_allocs && a->device_frees == b->device_frees &&
           a->syncs == b->syncs && a->retries == b->retries && a->segments == b->segments &&
           a->peak_segments == b->peak_segments;
}

/* The models run on threads of their own or on the feed's: every model
 * gets its requests in the trace's order either way, so the figures are
 * the same. The run makes some policies run out of memory. */
static void test_feed_workers(void)
{
    static struct fed base, other;
    feed_run(0, &base);
    CHECK(base.requests > 50000 && base.frees > 40000 && base.outside_n > 1000);
    bool some_oom = false;
    for (int p = 0; p < 6; p++)
        some_oom |= base.oom[0][p].hit || base.oom[1][p].hit;
    CHECK(some_oom && !base.oom[0][0].hit); /* ideal fits where the others may not */
    CHECK(base.ntries == 6);
    for (int workers = 1; workers <= 3; workers += 2) {
        feed_run(workers, &other);
        CHECK(other.requests == base.requests && other.frees == base.frees &&
              other.outside_n == base.outside_n && other.ntries == base.ntries);
        for (int d = 0; d < 2; d++) {
            for (int p = 0; p < 6; p++) {
                CHECK(same_stats(&other.st[d][p], &base.st[d][p]));
                CHECK(other.oom[d][p].hit == base.oom[d][p].hit &&
                      other.oom[d][p].seq == base.oom[d][p].seq);
            }
        }
        for (int p = 0; p < base.ntries; p++)
            CHECK(other.tries[p].fits == base.tries[p].fits &&
                  other.tries[p].earlier == base.tries[p].earlier &&
                  other.tries[p].peak_reserved == base.tries[p].peak_reserved);
    }
}

int main(void)
{
    test_split();
    test_max_split();
    test_expandable();
    test_expandable_oom_unmap();
    test_rounding();
    test_oom_retry();
    test_gc();
    test_ideal();
    test_gmtpool();
    test_gmtpool_ordered();
    test_gmtpool_vmm();
    test_async();
    test_feed_workers();
    return CHECK_DONE();
}
