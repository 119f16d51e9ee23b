/* test_pool.c - the caching pool against a host-memory upstream.
 *
 * The upstream models the one GPU fact the pool must respect: memory freed
 * by the program may still be used by GPU work issued before the free,
 * until a device synchronization. Each freed range is registered as
 * "in use by the GPU" before pool_free, and only a synchronization that
 * starts after that retires it. Every allocation is checked against the
 * ranges still in use: the pool must never hand one out.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "pool.h"

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
    CHECK(n == 6); /* 2 per 20 MiB segment, 3 segments */
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

/* An upstream with fences: each is a snapshot and the number of busy
 * ranges (GPU work) queued when it was taken; waiting for the oldest
 * "completes" the work queued before it. */
static struct {
    struct pool *p;
    struct pool_snapshot snap[16];
    size_t busy_at[16];
    int head, tail, waits, always; /* always: a broken one, always 1 */
    int issued; /* barriers issued (ordered reuse) */
} fq;

static int up_reclaim(void *ctx, int dev, int wait)
{
    (void)ctx;
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
    return 1;
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

/* ---- virtual memory: memory moved between blocks -----------------------
 *
 * A host upstream with the driver's semantics: a handle is a run of pages
 * of a memfd, an address range is mmap(PROT_NONE), mapping puts the
 * handle's pages there (MAP_SHARED|MAP_FIXED), so that bytes written
 * through one mapping are the bytes the next mapping of that memory shows.
 * It counts pages against up.capacity, refuses to map over a mapping, to
 * unmap anything but one whole mapping or to give back a handle still
 * mapped, and checks at each unmap that no GPU work (up.busy) may still
 * touch it. A handle may be mapped at two addresses at once (as the
 * driver allows) only when the pool is told so (vm.alias).
 */
#define VPAGE (2u << 20)
#define VMAX 4096 /* pages the file can hold, and handles at most */

static struct {
    int fd;
    unsigned char used[VMAX]; /* pages of the file in a handle */
    struct vh {
        unsigned char live, mapped; /* mapped: how many times */
        uint32_t off, n;            /* its pages of the file */
    } h[VMAX];
    struct vmp {
        uintptr_t at; /* 0: a free entry */
        uint32_t h;   /* handle index */
    } m[VMAX];
    unsigned long creates, maps, unmaps; /* pages */
    unsigned long live_unmaps;  /* unmaps of a handle mapped elsewhere too */
    bool alias;                 /* the pool is told it may map twice */
} vm = {.fd = -1};

static int vm_reserve(void *ctx, int dev, size_t size, uintptr_t *out)
{
    (void)ctx;
    (void)dev;
    /* aligned like the driver's reservations: over-reserve and trim */
    void *p = mmap(NULL, size + VPAGE, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return 2;
    uintptr_t a = ((uintptr_t)p + VPAGE - 1) & ~(uintptr_t)(VPAGE - 1);
    if (a > (uintptr_t)p)
        munmap(p, a - (uintptr_t)p);
    munmap((void *)(a + size), (uintptr_t)p + VPAGE - a);
    *out = a;
    return 0;
}

static int vm_unreserve(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    (void)dev;
    return munmap((void *)va, size) == 0 ? 0 : 1;
}

static int vm_create(void *ctx, int dev, size_t size, uint64_t *h)
{
    (void)ctx;
    (void)dev;
    uint32_t n = (uint32_t)(size / VPAGE), off = 0, run = 0;
    if (size % VPAGE || n == 0)
        return 1;
    pthread_mutex_lock(&up.lock);
    int r = 2;
    for (uint32_t i = 0; i < VMAX && run < n; i++) { /* first fit */
        run = vm.used[i] ? 0 : run + 1;
        off = i + 1 - run;
    }
    uint32_t k = 0;
    while (k < VMAX && vm.h[k].live)
        k++;
    if (up.used + size <= up.capacity && run == n && k < VMAX) {
        memset(vm.used + off, 1, n);
        vm.h[k] = (struct vh){.live = 1, .off = off, .n = n};
        up.used += size;
        vm.creates += n;
        *h = k + 1;
        r = 0;
    }
    pthread_mutex_unlock(&up.lock);
    return r;
}

static int vm_destroy(void *ctx, int dev, uint64_t h)
{
    (void)ctx;
    (void)dev;
    pthread_mutex_lock(&up.lock);
    struct vh *v = &vm.h[h - 1];
    if (!v->live || v->mapped)
        up.violations++;
    v->live = 0;
    memset(vm.used + v->off, 0, v->n);
    up.used -= (size_t)v->n * VPAGE;
    pthread_mutex_unlock(&up.lock);
    return 0;
}

static int vm_map(void *ctx, int dev, uintptr_t va, size_t size, uint64_t h)
{
    (void)ctx;
    (void)dev;
    pthread_mutex_lock(&up.lock);
    struct vh *v = &vm.h[h - 1];
    if (!v->live || (v->mapped && !vm.alias) ||
        size != (size_t)v->n * VPAGE)
        up.violations++; /* mapped twice, or not as a whole */
    size_t k = VMAX, e = VMAX;
    for (size_t i = 0; i < VMAX; i++) {
        if (vm.m[i].at == 0 && e == VMAX)
            e = i;
        else if (vm.m[i].at && va < vm.m[i].at + vm.h[vm.m[i].h].n * VPAGE &&
                 vm.m[i].at < va + size)
            k = i;
    }
    if (k != VMAX || e == VMAX)
        up.violations++; /* over a mapping still there */
    else
        vm.m[e] = (struct vmp){va, (uint32_t)(h - 1)};
    v->mapped++;
    vm.maps += v->n;
    if (mmap((void *)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             vm.fd, (off_t)v->off * VPAGE) == MAP_FAILED)
        up.violations++;
    pthread_mutex_unlock(&up.lock);
    return 0;
}

/* Like the driver: exactly what one map put there. */
static int vm_unmap(void *ctx, int dev, uintptr_t va, size_t size)
{
    (void)ctx;
    (void)dev;
    pthread_mutex_lock(&up.lock);
    for (size_t i = 0; i < up.nbusy; i++)
        if (va < up.busy_hi[i] && va + size > up.busy_lo[i])
            up.violations++; /* GPU work may still touch it */
    size_t k = 0;
    while (k < VMAX && vm.m[k].at != va)
        k++;
    struct vh *v = k < VMAX ? &vm.h[vm.m[k].h] : NULL;
    if (v == NULL || size != (size_t)v->n * VPAGE) {
        up.violations++; /* not one whole mapping */
        pthread_mutex_unlock(&up.lock);
        return 1;
    }
    vm.m[k].at = 0;
    vm.live_unmaps += v->mapped > 1;
    v->mapped--;
    vm.unmaps += v->n;
    pthread_mutex_unlock(&up.lock);
    mmap((void *)va, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return 0;
}

/* Mappings of at most 8 MiB; alias set per run (main). */
static struct pool_upstream vm_upstream = {
    .alloc = up_alloc,     .release = up_release, .sync = up_sync,
    .page = VPAGE,         .chunk = 4 * VPAGE,    .reserve = vm_reserve,
    .unreserve = vm_unreserve, .create = vm_create, .destroy = vm_destroy,
    .map = vm_map,         .unmap = vm_unmap};

static void vm_reset(size_t capacity)
{
    reset(capacity);
    if (vm.fd < 0) {
        vm.fd = memfd_create("test_pool_vmm", MFD_CLOEXEC);
        CHECK(vm.fd >= 0 && ftruncate(vm.fd, (off_t)VMAX * VPAGE) == 0);
    }
    /* the mapped flags stay: a test leaves nothing mapped (checked) */
    vm.creates = vm.maps = vm.unmaps = vm.live_unmaps = 0;
}

static void vm_sync(struct pool *p)
{
    struct pool_snapshot snap;
    pool_sync_snapshot(p, 0, &snap);
    up_sync(NULL, 0);
    pool_synced(p, 0, &snap);
}

static void fill(uintptr_t a, size_t size, unsigned char v)
{
    memset((void *)a, v, size);
}

static bool filled(uintptr_t a, size_t size, unsigned char v)
{
    for (size_t i = 0; i < size; i += 4096)
        if (((unsigned char *)a)[i] != v || ((unsigned char *)a)[i + 4095] != v)
            return false;
    return true;
}

static size_t pages_mapped_now(void)
{
    size_t n = 0;
    for (size_t i = 0; i < VMAX; i++)
        n += vm.m[i].at ? vm.h[vm.m[i].h].n : 0;
    return n;
}

/* Freed holes serve a request larger than any of them: their pages move
 * (no new memory), the live blocks keep their bytes, the new block is
 * readable and writable end to end. */
static void vmm_holes_serve_large(void)
{
    vm_reset(80u << 20); /* exactly the five medium segments' used part */
    struct pool *p = pool_create(&vm_upstream, &observer);
    uintptr_t x[10];
    for (int i = 0; i < 10; i++) {
        x[i] = gpu_alloc(p, 0, 8u << 20); /* two per 20 MiB segment */
        CHECK(x[i] != 0);
        fill(x[i], 8u << 20, (unsigned char)(i + 1));
    }
    CHECK(vm.creates == 40 && up.used == 80u << 20);
    struct pool_block_info bi;
    CHECK(pool_lookup(p, x[0], &bi) && bi.mapped);
    for (int i = 0; i < 10; i += 2)
        gpu_free(p, x[i], 8u << 20);
    vm_sync(p);
    /* 24 MiB: larger than any 8 MiB hole; the memory is all in use */
    uintptr_t big = gpu_alloc(p, 0, 24u << 20);
    CHECK(big != 0);
    fill(big, 24u << 20, 0xee);
    for (int i = 1; i < 10; i += 2)
        CHECK(filled(x[i], 8u << 20, (unsigned char)(i + 1)));
    CHECK(filled(big, 24u << 20, 0xee));
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(vm.creates == 40 && st.pages_created == 40);
    CHECK(st.page_unmaps == 12 && st.page_maps == 52);
    CHECK(st.reserved == 80u << 20 && up.used == 80u << 20);
    CHECK(up.violations == 0);
    const char *why = pool_check(p);
    CHECK(why == NULL);
    /* every byte back at the end, nothing left mapped */
    for (int i = 1; i < 10; i += 2)
        gpu_free(p, x[i], 8u << 20);
    gpu_free(p, big, 24u << 20);
    pool_trim(p, 0);
    pool_stats(p, 0, &st);
    CHECK(st.reserved == 0 && up.used == 0 && pages_mapped_now() == 0);
    CHECK(up.violations == 0);
    pool_release_all(p);
}

/* Pages of pending blocks are never taken: without a synchronization
 * (refused, as during a capture) the pool makes new pages; when none can
 * be made, the request fails cleanly, and after a synchronization the
 * pending pages serve it. */
static void vmm_pending_pages_stay(void)
{
    vm_reset(48u << 20);
    struct pool *p = pool_create(&vm_upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 16u << 20), b = gpu_alloc(p, 0, 16u << 20);
    CHECK(a && b && vm.creates == 16);
    gpu_free(p, a, 16u << 20);
    gpu_free(p, b, 16u << 20);
    up.refuse_sync = 1;
    uintptr_t c = gpu_alloc(p, 0, 12u << 20); /* room for 8 new pages */
    CHECK(c != 0 && vm.creates == 22 && up.violations == 0);
    uintptr_t none = 0;
    CHECK(pool_alloc(p, 0, 0, 12u << 20, &none) == 2 && none == 0);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    up.refuse_sync = 0; /* the capture ends */
    uintptr_t e = gpu_alloc(p, 0, 12u << 20); /* after a sync: a's pages */
    CHECK(e != 0 && up.syncs >= 1 && up.violations == 0);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(st.reserved == up.used); /* every page it made, it accounts for */
    fill(e, 12u << 20, 7);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, c, 12u << 20);
    gpu_free(p, e, 12u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* A block longer than a chunk gets a mapping per chunk. A mapping is
 * undone only whole: one a live block covers in part stays (its free
 * part is memory held for nothing), the wholly free ones move - here
 * mapped again as they are, their size being what the runs need. */
static void vmm_whole_mappings_only(void)
{
    vm_reset(30u << 20);
    struct pool *p = pool_create(&vm_upstream, &observer);
    uintptr_t a = gpu_alloc(p, 0, 24u << 20);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(a != 0 && vm.creates == 12 && st.map_calls == 3); /* 3 x 8 MiB */
    gpu_free(p, a, 24u << 20);
    vm_sync(p);
    uintptr_t small = gpu_alloc(p, 0, 4u << 20); /* on a's first mapping */
    CHECK(small == a);
    fill(small, 4u << 20, 2);
    /* 22 MiB fits no free block: a new range, 11 pages in runs of 4, 4, 3 */
    uintptr_t big = gpu_alloc(p, 0, 22u << 20);
    CHECK(big != 0 && (big >= a + (24u << 20) || big + (22u << 20) <= a));
    fill(big, 22u << 20, 3);
    CHECK(filled(small, 4u << 20, 2) && filled(big, 22u << 20, 3));
    pool_stats(p, 0, &st);
    CHECK(st.page_unmaps == 8 && st.unmap_calls == 2); /* not the first */
    CHECK(vm.creates == 15 && up.used == 30u << 20); /* only the 3rd run */
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, small, 4u << 20);
    gpu_free(p, big, 22u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* Four 8 MiB blocks in two 20 MiB segments, the first of each freed and
 * made reusable, then a 16 MiB block that takes their memory: its pages
 * are the holes' handles, mapped at the new address while (with
 * vm.alias) the old mappings are only queued for unmapping. */
static struct pool *holes_moved(uintptr_t x[4], uintptr_t *big)
{
    vm_reset(64u << 20);
    struct pool *p = pool_create(&vm_upstream, &observer);
    for (int i = 0; i < 4; i++) {
        x[i] = gpu_alloc(p, 0, 8u << 20);
        CHECK(x[i] != 0);
    }
    gpu_free(p, x[0], 8u << 20);
    gpu_free(p, x[2], 8u << 20);
    vm_sync(p);
    *big = gpu_alloc(p, 0, 16u << 20);
    fill(*big, 16u << 20, 9);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(*big != 0 && vm.creates == 16 && st.unmap_calls == 2);
    return p;
}

/* The driver maps a handle at a second address while the first mapping
 * stays: the pool moves memory with one call on the requesting thread
 * and makes the old mapping's unmap later - before the next wait for the
 * GPU, or before anything is mapped over it - never over a mapping still
 * there, never giving back a handle still mapped (the upstream counts
 * both as violations). */
static void vmm_deferred_unmaps(void)
{
    uintptr_t x[4], big;
    struct pool *p = holes_moved(x, &big);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    /* the holes' old mappings are still there: 16 + 8 pages mapped */
    CHECK(vm.unmaps == 0 && pages_mapped_now() == 24 && up.used == 32u << 20);
    CHECK(st.deferred_calls == 0);
    /* a hole again: new memory mapped there, its old mapping made first */
    uintptr_t y = gpu_alloc(p, 0, 8u << 20);
    CHECK(y == x[0] || y == x[2]);
    CHECK(vm.live_unmaps == 1 && vm.unmaps == 4 && vm.creates == 20);
    fill(y, 8u << 20, 4);
    CHECK(filled(big, 16u << 20, 9) && up.violations == 0);
    CHECK(pool_check(p) == NULL);
    gpu_free(p, y, 8u << 20);
    /* big pending: a request only it can serve synchronizes, and the
     * unmap still queued is made before that wait */
    gpu_free(p, big, 16u << 20);
    uintptr_t z = gpu_alloc(p, 0, 16u << 20);
    pool_stats(p, 0, &st);
    /* up.syncs: holes_moved's vm_sync, then the pool's */
    CHECK(z == big && up.syncs == 2 && st.deferred_calls == 1);
    CHECK(vm.live_unmaps == 2 && vm.unmaps == 8 && up.violations == 0);
    gpu_free(p, z, 16u << 20);
    gpu_free(p, x[1], 8u << 20);
    gpu_free(p, x[3], 8u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);

    /* Handles given back and address ranges freed with an unmap still
     * queued: the unmap is made first. */
    p = holes_moved(x, &big);
    gpu_free(p, big, 16u << 20);
    gpu_free(p, x[1], 8u << 20);
    gpu_free(p, x[3], 8u << 20);
    vm_sync(p); /* not the pool's: nothing made before it */
    CHECK(vm.unmaps == 0);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* Ordered reuse: asked to make pending memory reusable, this upstream
 * issues a barrier (a fence recorded, not waited for) that all later GPU
 * work waits for; asked for idle memory, it waits for the oldest fence. */
static int ordered_reclaim(void *ctx, int dev, int wait)
{
    if (wait == POOL_REUSE && pool_freed_since_snapshot(fq.p, dev) &&
        fq.tail < 16) {
        pool_sync_snapshot(fq.p, dev, &fq.snap[fq.tail]);
        fq.busy_at[fq.tail] = up.nbusy;
        pool_issued(fq.p, dev, &fq.snap[fq.tail++]);
        up.ordered_upto = up.nbusy; /* later work runs after it */
        fq.issued++;
        return 1;
    }
    return up_reclaim(ctx, dev, wait);
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

/* With virtual memory, memory reused at once may be moved to a new
 * address at once, but its old mapping is unmapped only when the GPU is
 * done with it: here when a block lands on the old address (vm_unmap
 * counts an unmap under GPU work as a violation). */
static void vmm_ordered_reuse(void)
{
    vm_reset(64u << 20);
    struct pool_upstream u = vm_upstream;
    u.reclaim = ordered_reclaim;
    vm.alias = u.alias = true;
    memset(&fq, 0, sizeof fq);
    struct pool *p = fq.p = pool_create(&u, &observer);
    uintptr_t x[4];
    for (int i = 0; i < 4; i++)
        CHECK((x[i] = gpu_alloc(p, 0, 8u << 20)) != 0);
    gpu_free(p, x[0], 8u << 20); /* the GPU is still at them */
    gpu_free(p, x[2], 8u << 20);
    uintptr_t big = gpu_alloc(p, 0, 16u << 20); /* their memory, no wait */
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(big != 0 && fq.issued == 1 && fq.waits == 0 && up.syncs == 0);
    CHECK(vm.creates == 16 && st.unmap_calls == 2 && vm.unmaps == 0);
    CHECK(up.violations == 0 && st.idle_waits == 0);
    fill(big, 16u << 20, 1);
    uintptr_t y = gpu_alloc(p, 0, 8u << 20); /* on a hole: waits, unmaps */
    pool_stats(p, 0, &st);
    CHECK((y == x[0] || y == x[2]) && st.idle_waits == 1 && fq.waits >= 1);
    CHECK(vm.unmaps == 4 && up.violations == 0 && filled(big, 16u << 20, 1));
    CHECK(pool_check(p) == NULL);
    gpu_free(p, y, 8u << 20);
    gpu_free(p, big, 16u << 20);
    gpu_free(p, x[1], 8u << 20);
    gpu_free(p, x[3], 8u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

static void vmm_sixteen_threads(void)
{
    vm_reset(6ull << 30);
    g_pool = pool_create(&vm_upstream, &observer);
    struct pool_stats st;
    run_sixteen(&st);
    CHECK(st.page_maps > 0);
    pool_trim(g_pool, 0);
    pool_stats(g_pool, 0, &st);
    CHECK(st.reserved == 0 && up.used == 0 && pages_mapped_now() == 0);
    pool_release_all(g_pool);
}

int main(void)
{
    no_reuse_before_sync();
    one_sync_per_wave();
    oom_cascade();
    coalescing();
    refused_sync_grows();
    invalid_frees();
    large_blocks();
    fences_before_syncs();
    sixteen_threads();
    for (int alias = 0; alias < 2; alias++) {
        vm.alias = vm_upstream.alias = alias;
        vmm_holes_serve_large();
        vmm_pending_pages_stay();
        vmm_whole_mappings_only();
        vmm_sixteen_threads();
    }
    vmm_deferred_unmaps(); /* alias still set */
    ordered_reuse();
    vmm_ordered_reuse();
    return CHECK_DONE();
}
