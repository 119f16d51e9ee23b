/* test_pool_vmm.c - the caching pool with virtual memory, against a host
 * upstream with the driver's semantics (below) on top of the GPU model of
 * pool_fixture.h: freed holes serving larger requests, pending pages,
 * whole mappings, deferred unmaps, ordered reuse, sixteen threads; each
 * with and without aliased mappings where the case allows both.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "pool_fixture.h"

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

/* With virtual memory, memory reused at once may be moved to a new
 * address at once, but its old mapping is unmapped only when the GPU is
 * done with it: here when a block lands on the old address (vm_unmap
 * counts an unmap under GPU work as a violation). */
/* A device reset frees cudaMalloc memory, not virtual memory: the pool
 * lists its mappings - current ones, moved ones whose unmap is queued -
 * its handles, parked ones too, and its address ranges, and gives them
 * back after the reset: nothing stays mapped, every page goes back, and
 * no handle is given back while mapped (the upstream counts it). */
static void vmm_reset_gives_back(void)
{
    uintptr_t x[4], big;
    struct pool *p = holes_moved(x, &big); /* alias: 2 unmaps queued */
    gpu_free(p, x[1], 8u << 20);
    vm_sync(p);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(up.used == 32u << 20 && pages_mapped_now() > 0);
    struct pool_leftover left;
    pool_forget_device(p, 0, &left);
    /* x[3] and big's two runs and x[0] and x[2]'s old places; 3 ranges */
    CHECK(left.nunmap == 5 + 1 && left.ndestroy == 4 && left.nunreserve == 3);
    pool_leftover_release(p, 0, &left);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

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

/* ---- whole-mapped segments (pool_upstream.whole) ------------------------ */

static struct pool_upstream whole_upstream(void)
{
    struct pool_upstream u = vm_upstream;
    u.page = u.chunk = 0;
    u.alias = vm.alias = false;
    u.whole = true;
    return u;
}

/* Each large segment is one mapping. A free one of 256 MiB or more is cut
 * for a request over half its size, and not for one of half or less: it
 * goes back - unmapped, its handle and range given back, with no
 * synchronization - and one of the request's size is made. */
static void whole_segments_go_back_unsynced(void)
{
    vm_reset(1u << 30);
    struct pool_upstream u = whole_upstream();
    struct pool *p = pool_create(&u, &observer);
    uintptr_t a = gpu_alloc(p, 0, 300u << 20);
    struct pool_block_info bi;
    CHECK(a != 0 && vm.creates == 150 && up.allocs == 0);
    CHECK(pool_lookup(p, a, &bi) && bi.mapped && bi.seg_size == 300u << 20);
    fill(a, 300u << 20, 7);
    gpu_free(p, a, 300u << 20);
    vm_sync(p);
    uintptr_t b = gpu_alloc(p, 0, 200u << 20); /* over half: cut */
    CHECK(b == a && vm.unmaps == 0 && vm.creates == 150);
    gpu_free(p, b, 200u << 20);
    vm_sync(p);
    unsigned long syncs = up.syncs;
    uintptr_t c = gpu_alloc(p, 0, 100u << 20); /* half or less: not cut */
    CHECK(c != 0 && vm.unmaps == 150 && vm.creates == 200);
    CHECK(up.used == 100u << 20 && up.syncs == syncs && up.allocs == 0);
    fill(c, 100u << 20, 3);
    CHECK(filled(c, 100u << 20, 3));
    /* small requests keep plain segments */
    uintptr_t d = gpu_alloc(p, 0, 4096);
    CHECK(d != 0 && up.allocs == 1);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, c, 100u << 20);
    gpu_free(p, d, 4096);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* A refused segment is passed over, not the request: a larger free block
 * in a segment in use serves it (found in review: the pool gave the
 * refused one back and grew). And after a device reset the driver keeps
 * virtual memory: the pool hands its whole segments to the caller. */
static void whole_refusal_passes_over(void)
{
    vm_reset(1u << 30);
    struct pool_upstream u = whole_upstream();
    struct pool *p = pool_create(&u, &observer);
    uintptr_t s = gpu_alloc(p, 0, 256u << 20), big = gpu_alloc(p, 0, 600u << 20);
    CHECK(s != 0 && big != 0 && vm.creates == 428);
    gpu_free(p, s, 256u << 20);
    gpu_free(p, big, 600u << 20);
    vm_sync(p);
    uintptr_t cut = gpu_alloc(p, 0, 310u << 20); /* over half of 600: cut */
    CHECK(cut == big);
    uintptr_t r = gpu_alloc(p, 0, 100u << 20); /* 256 refused; 290 fits */
    CHECK(r == big + (310u << 20) && vm.creates == 428 && vm.unmaps == 0);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    struct pool_leftover left;
    pool_forget_device(p, 0, &left);
    CHECK(left.nunmap == 2 && left.ndestroy == 2 && left.nunreserve == 2);
    pool_leftover_release(p, 0, &left);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* A whole-segment pool with ordered reuse through `reclaim`, holding a
 * free 300 MiB segment at *a that queued GPU work may still touch. */
static struct pool *whole_busy_300(int (*reclaim)(void *, int, int), uintptr_t *a)
{
    vm_reset(1u << 30);
    struct pool_upstream u = whole_upstream();
    u.reclaim = reclaim;
    memset(&fq, 0, sizeof fq);
    struct pool *p = fq.p = pool_create(&u, &observer);
    *a = gpu_alloc(p, 0, 300u << 20);
    CHECK(*a != 0);
    gpu_free(p, *a, 300u << 20); /* the GPU is still at it */
    return p;
}

/* With ordered reuse a free segment may still be in use by GPU work
 * queued before its free: it is unmapped only once a fence shows the GPU
 * past it (the upstream counts an unmap of memory still in use). */
static void whole_ordered_waits_for_the_gpu(void)
{
    uintptr_t a;
    struct pool *p = whole_busy_300(ordered_reclaim, &a);
    uintptr_t c = gpu_alloc(p, 0, 100u << 20);
    struct pool_stats st;
    pool_stats(p, 0, &st);
    CHECK(c != 0 && fq.issued >= 1 && st.idle_waits == 1 && fq.waits >= 1);
    CHECK(vm.unmaps == 150 && up.used == 100u << 20 && up.syncs == 0);
    CHECK(up.violations == 0 && pool_check(p) == NULL);
    gpu_free(p, c, 100u << 20);
    pool_trim(p, 0);
    CHECK(up.used == 0 && pages_mapped_now() == 0 && up.violations == 0);
    pool_release_all(p);
}

/* A reclaim whose fences the GPU never reaches: it issues barriers
 * (ordered reuse) but nothing ever becomes idle through it. */
static int stuck_reclaim(void *ctx, int dev, int wait)
{
    if (wait == POOL_IDLE || wait == POOL_POLL)
        return 0;
    return ordered_reclaim(ctx, dev, wait);
}

/* The same as above, but neither a fence nor a synchronization can show
 * the GPU past the free (a capture, a broken context): the segment given
 * back is not unmapped under the GPU - it stays mapped, lost - and the
 * request is served all the same, without a hang. */
static void whole_ordered_stays_when_no_wait_can_be_had(void)
{
    uintptr_t a;
    struct pool *p = whole_busy_300(stuck_reclaim, &a);
    up.refuse_sync = 1;
    uintptr_t c = gpu_alloc(p, 0, 100u << 20);
    up.refuse_sync = 0;
    CHECK(c != 0 && fq.issued >= 1);
    CHECK(vm.unmaps == 0 && up.violations == 0); /* a's stays mapped */
    CHECK(pool_check(p) == NULL);
    gpu_free(p, c, 100u << 20);
    pool_trim(p, 0);
    CHECK(up.violations == 0);
    pool_release_all(p);
    /* what the pool could not give back, by hand: the GPU is done now */
    up_sync(NULL, 0);
    unsigned long before = up.violations;
    for (size_t k = 0; k < VMAX; k++)
        if (vm.m[k].at == a) {
            uint64_t h = vm.m[k].h + 1;
            CHECK(vm_unmap(NULL, 0, a, 300u << 20) == 0);
            vm_destroy(NULL, 0, h);
            vm_unreserve(NULL, 0, a, 300u << 20);
        }
    CHECK(pages_mapped_now() == 0 && up.violations == before);
}

int main(void)
{
    for (int alias = 0; alias < 2; alias++) {
        vm.alias = vm_upstream.alias = alias;
        vmm_holes_serve_large();
        vmm_pending_pages_stay();
        vmm_whole_mappings_only();
        vmm_sixteen_threads();
    }
    vmm_deferred_unmaps(); /* alias still set */
    vmm_reset_gives_back();
    vmm_ordered_reuse();
    whole_segments_go_back_unsynced();
    whole_refusal_passes_over();
    whole_ordered_waits_for_the_gpu();
    whole_ordered_stays_when_no_wait_can_be_had();
    return CHECK_DONE();
}
