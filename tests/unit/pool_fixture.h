/* pool_fixture.h - what the caching pool's unit tests (test_pool.c,
 * test_pool_vmm.c) share: a host-memory upstream that models the one GPU
 * fact the pool must respect, the fence queues of reclaiming upstreams,
 * and sixteen threads of random allocate/free.
 *
 * Memory freed by the program may still be used by GPU work issued before
 * the free, until a device synchronization. Each freed range is
 * registered as "in use by the GPU" before pool_free, and only a
 * synchronization that starts after that retires it. Every allocation is
 * checked against the ranges still in use: the pool must never hand one
 * out (up.violations counts it when it does).
 *
 * Each test program is one .c file including this once: check.h's
 * failure counter and this state are per translation unit.
 */
#ifndef GMT_POOL_FIXTURE_H
#define GMT_POOL_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pool.h"

/* ---- the upstream: host memory, GPU work that outlives frees ------------- */

#define MAXBUSY 65536

static struct {
    pthread_mutex_t lock;
    size_t capacity, used;      /* upstream bytes */
    unsigned long syncs, allocs, releases;
    int refuse_sync;            /* like a stream capture in progress */
    uintptr_t busy_lo[MAXBUSY], busy_hi[MAXBUSY];
    size_t nbusy;
    size_t ordered_upto; /* busy ranges before this ran before a barrier
                            that all later work waits for */
    unsigned long violations;
    unsigned long completed;    /* free_completed callbacks */
} up = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int up_alloc(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)ctx;
    (void)dev;
    pthread_mutex_lock(&up.lock);
    if (up.used + size > up.capacity) {
        pthread_mutex_unlock(&up.lock);
        return 2;
    }
    up.used += size;
    up.allocs++;
    pthread_mutex_unlock(&up.lock);
    void *p = aligned_alloc(512, size);
    if (p == NULL)
        return 2;
    *out = (uintptr_t)p;
    return 0;
}

static int up_release(void *ctx, int dev, uintptr_t ptr, size_t size)
{
    (void)ctx;
    (void)dev;
    free((void *)ptr);
    pthread_mutex_lock(&up.lock);
    up.used -= size;
    up.releases++;
    pthread_mutex_unlock(&up.lock);
    return 0;
}

static int up_sync(void *ctx, int dev)
{
    (void)ctx;
    (void)dev;
    pthread_mutex_lock(&up.lock);
    if (up.refuse_sync) {
        pthread_mutex_unlock(&up.lock);
        return 900;
    }
    up.syncs++;
    up.nbusy = up.ordered_upto = 0; /* all GPU work issued so far is done */
    pthread_mutex_unlock(&up.lock);
    return 0;
}

static void on_completed(void *ctx, int dev, uintptr_t a, size_t s)
{
    (void)ctx;
    (void)dev;
    (void)a;
    (void)s;
    __atomic_add_fetch(&up.completed, 1, __ATOMIC_RELAXED);
}

static const struct pool_upstream upstream = {up_alloc, up_release, up_sync, NULL, NULL};
static const struct pool_observer observer = {NULL, NULL, on_completed, NULL, NULL};

/* The program frees: GPU work may still use the range until a sync. */
static void gpu_free(struct pool *p, uintptr_t a, size_t size)
{
    pthread_mutex_lock(&up.lock);
    if (up.nbusy < MAXBUSY) {
        up.busy_lo[up.nbusy] = a;
        up.busy_hi[up.nbusy++] = a + size;
    }
    pthread_mutex_unlock(&up.lock);
    int dev;
    if (pool_free(p, a, &dev) != 0)
        __atomic_add_fetch(&up.violations, 1, __ATOMIC_RELAXED);
}

static uintptr_t gpu_alloc(struct pool *p, unsigned arena, size_t size)
{
    uintptr_t a = 0;
    if (pool_alloc(p, 0, arena, size, &a) != 0)
        return 0;
    pthread_mutex_lock(&up.lock);
    for (size_t i = up.ordered_upto; i < up.nbusy; i++)
        if (a < up.busy_hi[i] && a + size > up.busy_lo[i])
            up.violations++; /* may run alongside the new owner's work */
    pthread_mutex_unlock(&up.lock);
    memset((void *)a, 0x5a, size < 4096 ? size : 4096); /* it is ours */
    return a;
}

static void reset(size_t capacity)
{
    up.capacity = capacity;
    up.used = up.syncs = up.allocs = up.releases = up.nbusy = 0;
    up.ordered_upto = 0;
    up.violations = up.completed = 0;
    up.refuse_sync = 0;
}

/* ---- reclaiming upstreams: fences and barriers --------------------------- */

/* An upstream with fences: each is a snapshot and the number of busy
 * ranges (GPU work) queued when it was taken; waiting for the oldest
 * "completes" the work queued before it. */
static struct {
    struct pool *p;
    struct pool_snapshot snap[16];
    size_t busy_at[16];
    int head, tail, waits, always; /* always: a broken one, always 1 */
    int reuse_waits; /* of waits: asked for reusable memory (POOL_REUSE) */
    int issued; /* barriers issued (ordered reuse) */
} fq;

static int up_reclaim(void *ctx, int dev, int wait)
{
    (void)ctx;
    if (wait == POOL_ISSUE)
        return 0; /* no ordered reuse here */
    if (fq.always)
        return 1;
    if (!wait)
        return 0;
    if (pool_freed_since_snapshot(fq.p, dev) && fq.tail < 16) {
        pool_sync_snapshot(fq.p, dev, &fq.snap[fq.tail]);
        fq.busy_at[fq.tail++] = up.nbusy;
    }
    if (fq.head == fq.tail)
        return 0;
    /* the GPU passes the oldest fence: the work queued before it is done */
    size_t done = fq.busy_at[fq.head];
    memmove(up.busy_lo, up.busy_lo + done, (up.nbusy - done) * sizeof *up.busy_lo);
    memmove(up.busy_hi, up.busy_hi + done, (up.nbusy - done) * sizeof *up.busy_hi);
    up.nbusy -= done;
    up.ordered_upto = up.ordered_upto > done ? up.ordered_upto - done : 0;
    for (int i = fq.head + 1; i < fq.tail; i++)
        fq.busy_at[i] -= done;
    pool_synced(fq.p, dev, &fq.snap[fq.head++]);
    fq.waits++;
    fq.reuse_waits += wait == POOL_REUSE;
    return 1;
}

/* Ordered reuse: asked to make pending memory reusable, this upstream
 * issues a barrier (a fence recorded, not waited for) that all later GPU
 * work waits for; asked for idle memory, it waits for the oldest fence. */
static int ordered_reclaim(void *ctx, int dev, int wait)
{
    if ((wait == POOL_REUSE || wait == POOL_ISSUE) &&
        pool_freed_since_snapshot(fq.p, dev) && fq.tail < 16) {
        pool_sync_snapshot(fq.p, dev, &fq.snap[fq.tail]);
        fq.busy_at[fq.tail] = up.nbusy;
        pool_issued(fq.p, dev, &fq.snap[fq.tail++]);
        up.ordered_upto = up.nbusy; /* later work runs after it */
        fq.issued++;
        return 1;
    }
    return up_reclaim(ctx, dev, wait);
}

/* ---- 16 threads of random allocate/free ---------------------------------- */

static struct pool *g_pool;
static unsigned long check_fail;

static void *stress(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
    enum { LIVE = 64 };
    uintptr_t live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = (int)(rand_r(&seed) % LIVE);
        if (live[k]) {
            gpu_free(g_pool, live[k], sizes[k]);
            live[k] = 0;
        } else {
            unsigned r = (unsigned)rand_r(&seed);
            size_t size = r % 8 == 0 ? (size_t)(r % (24u << 20)) + 1
                          : r % 4 == 0 ? (size_t)(r % (4u << 20)) + 1
                                       : (size_t)(r % 65536) + 1;
            live[k] = gpu_alloc(g_pool, (unsigned)(uintptr_t)arg, size);
            sizes[k] = size;
        }
        if (i % 5000 == 0) {
            struct pool_snapshot snap;
            pool_sync_snapshot(g_pool, 0, &snap);
            if (up_sync(NULL, 0) == 0)
                pool_synced(g_pool, 0, &snap);
        }
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k])
            gpu_free(g_pool, live[k], sizes[k]);
    return NULL;
}

static void *checker(void *arg)
{
    int *stop = arg;
    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE))
        if (pool_check(g_pool) != NULL)
            __atomic_add_fetch(&check_fail, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* 16 stress threads on g_pool, a checker thread beside them; then every
 * invariant holds and nothing is allocated. */
static void run_sixteen(struct pool_stats *st)
{
    pthread_t t[16], c;
    int stop = 0;
    check_fail = 0;
    pthread_create(&c, NULL, checker, (void *)&stop);
    for (int i = 0; i < 16; i++)
        pthread_create(&t[i], NULL, stress, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 16; i++)
        pthread_join(t[i], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(c, NULL);
    const char *why = pool_check(g_pool);
    if (why)
        fprintf(stderr, "pool_check: %s\n", why);
    CHECK(why == NULL && check_fail == 0);
    CHECK(up.violations == 0);
    pool_stats(g_pool, 0, st);
    CHECK(st->allocated == 0 && st->requested == 0);
}

#endif
