/* whatif_async.c - a model of the CUDA driver's stream-ordered pool, what
 * PyTorch's backend:cudaMallocAsync allocates from (the device's default
 * pool, its release threshold set to the maximum, so it never shrinks).
 *
 * The driver's rules are not documented; these were measured on an H200
 * (driver 580.159.04) by tests/gpu/mempool_probe.cu
 * (tests/gpu/gpu-whatif-async.sh, docs/validation.md):
 *
 * - Physical memory comes in pages of 32 MiB: one allocation of 512 bytes
 *   or of 32 MiB reserves 32 MiB, 33 MiB reserves 64 MiB, 1000 MiB 1 GiB.
 * - Allocations are packed one after the other in address space, in units
 *   of at most 512 bytes, and span page boundaries: n blocks of 3 MiB
 *   reserve ceil(3n / 32) pages, n of 1 MiB + 512 bytes 31 to a page.
 * - A freed range is reused by smaller and larger requests (100 MiB freed
 *   serves 60 + 40 MiB, then 120 MiB, within 128 MiB), and a page nothing
 *   lives on serves anywhere: 50 + 50 MiB, the first freed, then 60 MiB
 *   fits in the same 128 MiB (the end of the last page and the freed
 *   first page, mapped after it).
 * - Requests up to 32 MiB and larger ones do not share a page: after
 *   100 MiB (4 pages, 28 MiB free at the end), 10 MiB takes a fifth page;
 *   but a page freed by large blocks serves small ones and back.
 *
 * So the model keeps two address spaces, for requests of at most 32 MiB
 * and for larger ones. A request (rounded up to 512 bytes) takes the
 * smallest free range that holds it, the lowest such address first, else
 * the space at the end; a page is in use while a live block overlaps it;
 * the pool's reserved memory is the most pages in use at once, since
 * free pages are kept and mapped wherever they are needed. Device calls:
 * a new page is one allocation; none is ever given back.
 *
 * Simplified or left out: streams (the driver reuses a block freed on
 * another stream only once it knows the free is ordered before: PyTorch
 * runs its models on one stream); the order among equally good ranges
 * and the 512-byte unit are guesses the probe could not tell; other
 * pools, IPC, and trimming (torch.cuda.empty_cache, which PyTorch turns
 * into cudaMemPoolTrimTo) are not modelled. The device limit counts the
 * pages plus what the program holds outside the model.
 */
#include <stdlib.h>
#include <string.h>

#include "whatif.h"

#define AS_PAGE (32ull << 20)
#define AS_UNIT 512ull
#define AS_SMALL_MAX AS_PAGE /* requests up to this share one space */

struct range {
    uint64_t addr, size;
};

/* One address space: free ranges sorted by address (the last one open to
 * the end), and per page the live blocks that overlap it. */
struct space {
    struct range *free;
    size_t nfree, capfree;
    uint32_t *users;
    size_t npages;
};

struct live {
    uint64_t addr, size;
    int space;
    struct live *prev, *next; /* all live blocks, for fini */
};

struct as {
    struct wi_stats st;
    struct space sp[2];
    uint64_t pages_used; /* pages with a live block, both spaces */
    uint64_t pages;      /* pages the pool holds: the most used at once */
    uint64_t limit;
    const uint64_t *outside;
    struct live *live;
};

static void *as_init(const struct wi_opts *o)
{
    struct as *m = wi_model_state(sizeof *m);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < 2; i++) {
        struct space *s = &m->sp[i];
        if ((s->free = malloc(16 * sizeof *s->free)) == NULL) {
            free(m->sp[0].free);
            free(m);
            return NULL;
        }
        s->capfree = 16;
        s->nfree = 1;
        s->free[0] = (struct range){0, 0}; /* the open end: all of it */
    }
    m->limit = o->limit;
    m->outside = o->outside;
    m->st.has_device_calls = true;
    return m;
}

/* Count the blocks on the pages [addr, addr + size) overlaps: +1 or -1.
 * Returns how many pages went from unused to used (or back). */
static int64_t touch(struct space *s, uint64_t addr, uint64_t size, int d, bool *nomem)
{
    uint64_t first = addr / AS_PAGE, last = (addr + size - 1) / AS_PAGE;
    if (last >= s->npages) {
        size_t n = s->npages ? s->npages : 64;
        while (n <= last)
            n *= 2;
        uint32_t *u = realloc(s->users, n * sizeof *u);
        if (u == NULL) {
            *nomem = true;
            return 0;
        }
        memset(u + s->npages, 0, (n - s->npages) * sizeof *u);
        s->users = u;
        s->npages = n;
    }
    int64_t changed = 0;
    for (uint64_t p = first; p <= last; p++) {
        if (d > 0)
            changed += s->users[p]++ == 0;
        else
            changed += --s->users[p] == 0;
    }
    return changed;
}

/* Pages [addr, addr + size) would bring into use. */
static uint64_t pages_needed(const struct space *s, uint64_t addr, uint64_t size)
{
    uint64_t first = addr / AS_PAGE, last = (addr + size - 1) / AS_PAGE, n = 0;
    for (uint64_t p = first; p <= last; p++)
        n += p >= s->npages || s->users[p] == 0;
    return n;
}

/* The longest stretch of the free range [a, e) of s that needs at most
 * `spare` pages no live block is on: the bytes of it on pages in use are
 * held already, and a held page nothing lives on can be mapped under any
 * one page of the range. */
static uint64_t range_servable(const struct space *s, uint64_t a, uint64_t e, uint64_t spare)
{
    uint64_t best = 0, sum = 0, unused = 0;
    uint64_t lo = a / AS_PAGE, hi = (e - 1) / AS_PAGE; /* the window's pages [w, p] */
    for (uint64_t p = lo, w = lo; p <= hi; p++) {
        uint64_t from = p == lo ? a : p * AS_PAGE, to = p == hi ? e : (p + 1) * AS_PAGE;
        bool used = p < s->npages && s->users[p] > 0;
        sum += to - from;
        unused += !used;
        while (unused > spare) { /* drop pages from the window's start */
            uint64_t wf = w == lo ? a : w * AS_PAGE, wt = w == hi ? e : (w + 1) * AS_PAGE;
            sum -= wt - wf;
            unused -= !(w < s->npages && s->users[w] > 0);
            w++;
        }
        if (sum > best)
            best = sum;
    }
    return best;
}

/* The largest request the pool could serve from what it holds, without
 * another page. Not the largest free range of address space: a range
 * spans pages no block is on, which the pool holds only as many of as
 * it holds beyond the pages in use (none at a new peak), so a range can
 * be far larger than the free memory - fragmentation, 1 - largest free /
 * free, went below zero. Counted this way it is at most the free bytes:
 * those of the pages in use not covered by blocks, plus the spare pages. */
static uint64_t largest_free(const struct as *m)
{
    uint64_t best = 0, spare = m->pages - m->pages_used;
    for (int i = 0; i < 2; i++) {
        const struct space *s = &m->sp[i];
        for (size_t k = 0; k < s->nfree; k++) {
            uint64_t a = s->free[k].addr, e;
            if (k + 1 < s->nfree) {
                e = a + s->free[k].size;
            } else { /* the open end: no block lies past its start's page */
                e = (a / AS_PAGE + 1 + spare) * AS_PAGE;
            }
            if (e > a) {
                uint64_t n = range_servable(s, a, e, spare);
                if (n > best)
                    best = n;
            }
        }
    }
    return best;
}

static int as_alloc(void *p, uint64_t size, uint64_t stream, uint64_t *id)
{
    (void)stream;
    struct as *m = p;
    uint64_t n = size < AS_UNIT ? AS_UNIT : (size + AS_UNIT - 1) / AS_UNIT * AS_UNIT;
    int which = n > AS_SMALL_MAX;
    struct space *s = &m->sp[which];
    size_t k = s->nfree - 1; /* the open end */
    for (size_t i = 0; i + 1 < s->nfree; i++)
        if (s->free[i].size >= n &&
            (k == s->nfree - 1 || s->free[i].size < s->free[k].size))
            k = i;
    uint64_t addr = s->free[k].addr;
    uint64_t more = m->pages_used + pages_needed(s, addr, n);
    if (more > m->pages) { /* a new page from the device */
        uint64_t out = m->outside ? *m->outside : 0;
        if (m->limit && (out > m->limit || more > (m->limit - out) / AS_PAGE))
            return -1;
    }
    struct live *l = malloc(sizeof *l);
    if (l == NULL)
        return -1;
    bool nomem = false;
    int64_t up = touch(s, addr, n, +1, &nomem);
    if (nomem) {
        free(l);
        return -1;
    }
    *l = (struct live){addr, n, which, NULL, m->live};
    if (m->live)
        m->live->prev = l;
    m->live = l;
    s->free[k].addr += n;
    if (k != s->nfree - 1 && (s->free[k].size -= n) == 0) {
        memmove(&s->free[k], &s->free[k + 1], (s->nfree - k - 1) * sizeof *s->free);
        s->nfree--;
    }
    m->pages_used += (uint64_t)up;
    m->st.allocated += n;
    if (m->pages_used > m->pages) {
        m->st.device_allocs += m->pages_used - m->pages;
        m->pages = m->pages_used;
        m->st.segments = m->st.peak_segments = m->pages;
        m->st.reserved = m->pages * AS_PAGE;
    }
    if (m->st.reserved > m->st.peak_reserved ||
        (m->st.reserved == m->st.peak_reserved && m->st.peak_free == 0 &&
         m->st.allocated < m->st.reserved)) {
        m->st.peak_reserved = m->st.reserved;
        m->st.peak_free = m->st.reserved - m->st.allocated;
        m->st.peak_largest_free = largest_free(m);
    }
    *id = (uint64_t)(uintptr_t)l;
    return 0;
}

/* Put [addr, addr + size) back among the free ranges, merged with its
 * neighbours (the last range is the open end: its size means nothing).
 * false: out of host memory (the range is lost to the model, which then
 * only holds more). */
static bool give_back(struct space *s, uint64_t addr, uint64_t size)
{
    size_t i = 0;
    while (i < s->nfree && s->free[i].addr < addr)
        i++;
    bool last = i == s->nfree - 1;
    bool left = i > 0 && s->free[i - 1].addr + s->free[i - 1].size == addr;
    bool right = addr + size == s->free[i].addr;
    if (left && right) {
        s->free[i - 1].size += size + s->free[i].size; /* meaningless if last */
        memmove(&s->free[i], &s->free[i + 1], (s->nfree - i - 1) * sizeof *s->free);
        s->nfree--;
    } else if (left) {
        s->free[i - 1].size += size;
    } else if (right) {
        s->free[i].addr = addr;
        if (!last)
            s->free[i].size += size;
    } else {
        if (s->nfree == s->capfree) {
            struct range *r = realloc(s->free, 2 * s->capfree * sizeof *r);
            if (r == NULL)
                return false;
            s->free = r;
            s->capfree *= 2;
        }
        memmove(&s->free[i + 1], &s->free[i], (s->nfree - i) * sizeof *s->free);
        s->free[i] = (struct range){addr, size};
        s->nfree++;
    }
    return true;
}

static void as_free(void *p, uint64_t id)
{
    struct as *m = p;
    struct live *l = (struct live *)(uintptr_t)id;
    struct space *s = &m->sp[l->space];
    bool nomem = false;
    m->pages_used -= (uint64_t)touch(s, l->addr, l->size, -1, &nomem);
    give_back(s, l->addr, l->size);
    m->st.allocated -= l->size;
    if (l->prev)
        l->prev->next = l->next;
    else
        m->live = l->next;
    if (l->next)
        l->next->prev = l->prev;
    free(l);
}

static void as_stats(void *p, struct wi_stats *s)
{
    *s = ((struct as *)p)->st;
}

static void as_fini(void *p)
{
    struct as *m = p;
    while (m->live) {
        struct live *l = m->live;
        m->live = l->next;
        free(l);
    }
    for (int i = 0; i < 2; i++) {
        free(m->sp[i].free);
        free(m->sp[i].users);
    }
    free(m);
}

const struct wi_model_ops wi_async = {
    .name = "cuda-async",
    .init = as_init,
    .alloc = as_alloc,
    .free = as_free,
    .stats = as_stats,
    .fini = as_fini,
};
