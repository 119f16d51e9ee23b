/* replay.c - the replay engine behind the report commands (see replay.h).
 *
 * Hot path: one record decoded by the reader, one open-addressing lookup
 * for an allocation or free, a few counters. Sites lie in one array, in
 * the order their stacks were first used, found by stack id through a
 * dense map (a hash for ids beyond it). The picture at the peak: every site changed
 * since the last peak is on the `touched` list; when the live total sets
 * a new peak, those sites copy their live bytes into peak_bytes and the
 * list empties - each event pays for at most one such copy. Sites keep
 * their blocks' bytes (allocated: requested plus rounding) beside the
 * requested ones, and copy them at a peak the same way.
 *
 * A framework allocator's records (replay.h has what they count for) go
 * through the same paths: its blocks through on_alloc/on_free, its
 * segments and corrected block sizes through on_fw; the allocations under
 * its segments through on_backing, into a table of their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "addrmap.h"
#include "backward.h"
#include "replay_internal.h"
#include "gmttrace.h"

#define DENSE_IDS (1u << 20)

struct site_hash {
    uint32_t id, index;
    UT_hash_handle hh;
};

/* ---- live allocations ------------------------------------------------ */

ADDRMAP_FUNCS(live, struct live_table, struct live, 4096)

/* ---- sites ------------------------------------------------------------ */

static struct site *site_new(struct replay *r, uint32_t id, uint32_t *index)
{
    if (r->nsites == r->cap_sites) {
        size_t cap = r->cap_sites ? 2 * r->cap_sites : 256;
        struct site *n = realloc(r->sites, cap * sizeof *n);
        if (n == NULL)
            return NULL;
        r->sites = n;
        r->cap_sites = cap;
    }
    struct site *s = &r->sites[r->nsites];
    memset(s, 0, sizeof *s);
    s->stack = id;
    /* a site's values at marks are made at its first change after a mark
     * (replay_marks_before_change): a trace without marks needs none */
    if (r->want_growth && (s->growth = calloc(1, sizeof *s->growth)) == NULL)
        return NULL;
    *index = (uint32_t)r->nsites++;
    return s;
}

/* The site's rarely needed figures, made on first use; NULL if memory ran
 * out (they go uncounted, as a site would). */
struct site_rare *replay_site_rare(struct site *s)
{
    if (s->rare == NULL)
        s->rare = calloc(1, sizeof *s->rare);
    return s->rare;
}

struct site *replay_site_of(struct replay *r, uint32_t id)
{
    uint32_t index;
    if (id < DENSE_IDS) {
        if (id < r->site_of_cap && r->site_of_id[id])
            return &r->sites[r->site_of_id[id] - 1];
        if (id >= r->site_of_cap) {
            size_t cap = r->site_of_cap ? r->site_of_cap : 1024;
            while (cap <= id)
                cap *= 2;
            uint32_t *n = realloc(r->site_of_id, cap * sizeof *n);
            if (n == NULL)
                return NULL;
            memset(n + r->site_of_cap, 0, (cap - r->site_of_cap) * sizeof *n);
            r->site_of_id = n;
            r->site_of_cap = cap;
        }
        struct site *s = site_new(r, id, &index);
        if (s)
            r->site_of_id[id] = index + 1;
        return s;
    }
    struct site_hash *h;
    HASH_FIND(hh, r->site_big, &id, sizeof id, h);
    if (h)
        return &r->sites[h->index];
    struct site *s = site_new(r, id, &index);
    if (s && (h = calloc(1, sizeof *h)) != NULL) {
        h->id = id;
        h->index = index;
        HASH_ADD(hh, r->site_big, id, sizeof h->id, h);
    }
    return s;
}

/* ---- events --------------------------------------------------------------- */

static int mem_of(unsigned api)
{
    switch (api & ~GMT_API_PTDS) {
    case GMT_API_MALLOC_HOST:
    case GMT_API_HOST_ALLOC:
    case GMT_API_CU_MEM_ALLOC_HOST:
    case GMT_API_CU_MEM_HOST_ALLOC:
    case GMT_API_CU_MEM_CREATE_HOST: /* host-located virtual memory */
        return MEM_HOST;
    case GMT_API_MALLOC_MANAGED:
    case GMT_API_CU_MEM_ALLOC_MANAGED:
        return MEM_MANAGED;
    default:
        return MEM_DEVICE;
    }
}

/* Is this allocation's memory reserved by something else's record - one
 * of the pool's segments, or the framework allocator's? */
static bool pooled(const struct replay *r, unsigned api)
{
    api &= ~GMT_API_PTDS;
    return (r->pool && api == GMT_API_MALLOC) || api == GMT_API_FW_ALLOC;
}

/* (replay.h) the same rules for the other passes over a trace */
int replay_mem_of(unsigned api)
{
    return mem_of(api);
}

bool replay_pooled(const struct replay *r, unsigned api)
{
    return pooled(r, api);
}

static bool is_fw_block(unsigned api)
{
    return (api & ~GMT_API_PTDS) == GMT_API_FW_ALLOC;
}


static void new_peak_check(struct replay *r, const struct gmt_rec *rec)
{
    if (r->requested > 0 && (uint64_t)r->requested > r->window_peak)
        r->window_peak = (uint64_t)r->requested;
    if ((uint64_t)r->requested > r->peak_requested) {
        r->peak_requested = (uint64_t)r->requested;
        r->peak_requested_time = rec->time;
        r->peak_requested_seq = rec->seq;
        for (size_t i = 0; i < r->ntouched; i++) {
            struct site *s = &r->sites[r->touched[i]];
            s->peak_bytes = s->live_bytes;
            s->peak_count = s->live_count;
            s->peak_alloc_bytes = s->live_alloc_bytes;
            s->dirty = false;
        }
        r->ntouched = 0;
    }
    if ((uint64_t)r->reserved > r->peak_reserved) {
        r->peak_reserved = (uint64_t)r->reserved;
        r->peak_reserved_time = rec->time;
    }
}

/* The framework allocator's peaks: torch.cuda.max_memory_allocated and
 * max_memory_reserved. Negative sums (a hostile trace) set none. */
static void fw_peaks(struct device_state *d, uint64_t time)
{
    if (d->fw_requested > 0 && (uint64_t)d->fw_requested > d->peak_fw_requested)
        d->peak_fw_requested = (uint64_t)d->fw_requested;
    if (d->fw_allocated > 0 && (uint64_t)d->fw_allocated > d->peak_fw_allocated) {
        d->peak_fw_allocated = (uint64_t)d->fw_allocated;
        d->peak_fw_allocated_time = time;
    }
    if (d->fw_reserved > 0 && (uint64_t)d->fw_reserved > d->peak_fw_reserved) {
        d->peak_fw_reserved = (uint64_t)d->fw_reserved;
        d->peak_fw_reserved_time = time;
    }
    if (d->outside > 0 && (uint64_t)d->outside > d->peak_outside)
        d->peak_outside = (uint64_t)d->outside;
}

static void device_peaks(struct device_state *d, const struct gmt_rec *rec)
{
    if ((uint64_t)d->requested > d->peak_requested) {
        d->peak_requested = (uint64_t)d->requested;
        d->peak_requested_time = rec->time;
        d->peak_requested_seq = rec->seq;
    }
    if ((uint64_t)d->allocated > d->peak_allocated) {
        d->peak_allocated = (uint64_t)d->allocated;
        d->peak_allocated_time = rec->time;
    }
    if ((uint64_t)d->reserved > d->peak_reserved) {
        d->peak_reserved = (uint64_t)d->reserved;
        d->peak_reserved_time = rec->time;
    }
    if ((uint64_t)d->host > d->peak_host)
        d->peak_host = (uint64_t)d->host;
}

static void mark_site(struct replay *r, struct site *s)
{
    if (s->dirty)
        return;
    if (r->ntouched == r->cap_touched) {
        size_t cap = r->cap_touched ? 2 * r->cap_touched : 256;
        uint32_t *n = realloc(r->touched, cap * sizeof *n);
        if (n == NULL)
            return;
        r->touched = n;
        r->cap_touched = cap;
    }
    r->touched[r->ntouched++] = (uint32_t)(s - r->sites);
    s->dirty = true;
}

/* For the observers (r->change): device's counters moved; and, with bytes,
 * the live bytes of the site of stack. */
static void changed(struct replay *r, uint16_t device, uint32_t stack, int64_t bytes)
{
    struct replay_change *c = &r->change;
    c->device = device;
    if (bytes && c->nsites < 2) {
        c->site[c->nsites].stack = stack;
        c->site[c->nsites++].bytes = bytes;
    }
}

/* A CUDA allocation under the framework's segments: remembered only so
 * that its free is known. */
static void on_backing(struct replay *r, const struct gmt_rec *rec)
{
    struct device_state *d = &r->dev[rec->device % REPLAY_MAX_DEVICES];
    d->seen = true;
    r->fw = true;
    r->oom_state_pending = false; /* a state written for it is its own */
    if (rec->result != 0) {
        d->fw_backing_failed++;
        return;
    }
    if (rec->addr == 0 || rec->size == 0 || rec->size > GMT_SIZE_MAX)
        return;
    d->fw_backing++;
    struct live *l = live_find(&r->backing, rec->addr);
    if (l == NULL && (l = live_insert(&r->backing, rec->addr)) == NULL)
        return;
    l->size = rec->size;
    l->stack = rec->stack;
    l->thread = rec->thread;
    l->device = (uint16_t)(rec->device % REPLAY_MAX_DEVICES);
    l->mem = (uint8_t)mem_of(rec->api);
    l->api = rec->api;
}

/* Live allocation l is gone: freed (the framework's block then waits
 * until it is reusable), or replaced by an allocation at its address
 * whose free the trace missed. */
static void let_go(struct replay *r, struct live *l, uint64_t time, bool freed)
{
    struct device_state *d = &r->dev[l->device];
    d->frees += freed;
    struct site *s = replay_site_of(r, l->stack);
    if (l->mem == MEM_HOST) {
        d->host -= (int64_t)l->size;
        r->host -= (int64_t)l->size;
        if (s && s->rare) /* made by the allocation */
            s->rare->host_live_bytes -= l->size;
    } else {
        d->requested -= (int64_t)l->size;
        d->allocated -= (int64_t)LIVE_BLOCK(l);
        r->requested -= (int64_t)l->size;
        r->allocated -= (int64_t)LIVE_BLOCK(l);
        if (!pooled(r, l->api)) {
            d->reserved -= (int64_t)LIVE_BLOCK(l);
            r->reserved -= (int64_t)LIVE_BLOCK(l);
        }
        if (is_fw_block(l->api)) {
            d->fw_frees += freed;
            d->fw_requested -= (int64_t)l->size;
            d->fw_allocated -= (int64_t)LIVE_BLOCK(l);
            struct live *p = freed ? live_find(&r->fw_pending, l->addr) : NULL;
            if (freed && p == NULL)
                p = live_insert(&r->fw_pending, l->addr);
            if (p) /* l stays put: another table */
                p->device = l->device;
        } else {
            d->outside -= (int64_t)LIVE_BLOCK(l);
        }
        changed(r, l->device, l->stack, -(int64_t)l->size);
        if (s) {
            replay_marks_before_change(r, s);
            if (s->growth)
                s->growth->last_time = time;
            s->live_bytes -= (int64_t)l->size;
            s->live_alloc_bytes -= (int64_t)LIVE_BLOCK(l);
            s->live_count--;
            mark_site(r, s);
        }
    }
    live_remove(&r->live, l);
}

/* Count a device allocation of the recording thread `thread` and return
 * its ordinal among that thread's: a step's period is counted in its own
 * thread's allocations, which another thread's (a data loader's, a
 * second training loop's) do not disturb. */
static uint64_t count_thread_alloc(struct replay *r, uint32_t thread)
{
    uint32_t i = thread < REPLAY_THREADS ? thread : REPLAY_THREADS - 1;
    if (i >= r->nthread_allocs) {
        uint32_t n = r->nthread_allocs ? r->nthread_allocs : 8;
        while (n <= i)
            n *= 2;
        uint64_t *t = realloc(r->thread_allocs, n * sizeof *t);
        if (t == NULL)
            return r->allocs; /* no memory: the process's count */
        memset(t + r->nthread_allocs, 0, (n - r->nthread_allocs) * sizeof *t);
        r->thread_allocs = t;
        r->nthread_allocs = n;
    }
    return ++r->thread_allocs[i];
}

uint64_t replay_thread_allocs(const struct replay *r, uint32_t thread)
{
    uint32_t i = thread < REPLAY_THREADS ? thread : REPLAY_THREADS - 1;
    return i < r->nthread_allocs ? r->thread_allocs[i] : 0;
}

static void on_alloc(struct replay *r, const struct gmt_rec *rec)
{
    if (gmt_is_fw_backing(rec)) {
        on_backing(r, rec);
        return;
    }
    struct device_state *d = &r->dev[rec->device % REPLAY_MAX_DEVICES];
    bool fw = is_fw_block(rec->api);
    d->seen = true;
    r->fw |= fw;
    if (rec->result != 0) {
        d->failed_allocs++;
        if (rec->result == 2) { /* cudaErrorMemoryAllocation */
            d->ooms++;
            d->fw_ooms += fw;
            r->ooms_total++;
            if (r->nooms < REPLAY_MAX_OOMS) {
                struct oom *o = &r->ooms[r->nooms++];
                *o = (struct oom){rec->time, rec->seq, rec->size, rec->device,
                                  rec->thread, rec->stack, rec->result, fw, false,
                                  {0}};
                if (r->oom_state_pending) {
                    o->has_state = true;
                    memcpy(o->state, r->oom_state, sizeof o->state);
                }
            }
        }
        r->oom_state_pending = false;
        return;
    }
    r->oom_state_pending = false;
    /* No memory is 2^48 bytes: such a record is corrupt, and skipping it
     * keeps the sums meaningful (report/ is built with -fwrapv, so even
     * crafted sums are defined behaviour). */
    if (rec->addr == 0 || rec->size == 0 || rec->size > GMT_SIZE_MAX ||
        rec->size2 > GMT_SIZE_MAX)
        return;
    struct live *l = live_find(&r->live, rec->addr);
    if (l) /* allocated twice without a free we saw: the old one is gone */
        let_go(r, l, rec->time, false);
    if ((l = live_insert(&r->live, rec->addr)) == NULL)
        return;
    int mem = mem_of(rec->api);
    if ((rec->api & ~GMT_API_PTDS) >= GMT_API_CU_MEM_ALLOC)
        r->driver_allocs++;
    l->size = rec->size;
    l->extra = rec->size2 > UINT32_MAX ? UINT32_MAX : (uint32_t)rec->size2;
    l->stack = rec->stack;
    l->thread = rec->thread;
    l->device = (uint16_t)(rec->device % REPLAY_MAX_DEVICES);
    l->mem = (uint8_t)mem;
    l->api = rec->api;
    d->allocs++;
    struct site *s = replay_site_of(r, rec->stack);
    if (mem == MEM_HOST) {
        d->host += (int64_t)rec->size;
        r->host += (int64_t)rec->size;
        struct site_rare *sr = s ? replay_site_rare(s) : NULL;
        if (sr) {
            sr->host_live_bytes += rec->size;
            sr->host_total_bytes += rec->size;
        }
    } else {
        d->requested += (int64_t)l->size;
        d->allocated += (int64_t)LIVE_BLOCK(l);
        r->requested += (int64_t)l->size;
        r->allocated += (int64_t)LIVE_BLOCK(l);
        if (!pooled(r, rec->api)) {
            d->reserved += (int64_t)LIVE_BLOCK(l);
            r->reserved += (int64_t)LIVE_BLOCK(l);
        }
        if (fw) {
            d->fw_allocs++;
            d->fw_requested += (int64_t)l->size;
            d->fw_allocated += (int64_t)LIVE_BLOCK(l);
        } else {
            d->outside += (int64_t)LIVE_BLOCK(l);
        }
        fw_peaks(d, rec->time);
        r->allocs++;
        uint64_t ord = count_thread_alloc(r, rec->thread);
        r->alloc_bytes += l->size;
        changed(r, l->device, l->stack, (int64_t)l->size);
        if (s) {
            replay_marks_before_change(r, s);
            if (s->growth) {
                struct site_growth *g = s->growth;
                if (g->first_time == 0)
                    g->first_time = rec->time;
                g->last_time = rec->time;
                if (g->ord_first == 0) {
                    g->ord_first = ord;
                    g->thread = rec->thread;
                    g->first_step = r->steps_begun;
                } else if (rec->thread != g->thread) {
                    g->mixed = true;
                } else if (g->ord_last != g->ord_first) { /* not the first gap */
                    double gap = (double)(ord - g->ord_last);
                    g->gaps++;
                    g->gap_sum += gap;
                    g->gap_sq += gap * gap;
                }
                if (rec->thread == g->thread)
                    g->ord_last = ord;
            }
            s->live_bytes += (int64_t)rec->size;
            s->live_alloc_bytes += (int64_t)LIVE_BLOCK(l);
            s->live_count++;
            s->total_bytes += rec->size;
            s->total_count++;
            mark_site(r, s);
        }
    }
    device_peaks(d, rec);
    new_peak_check(r, rec);
}

static void on_free(struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0 || rec->addr == 0)
        return;
    /* CUDA's free of a segment's memory (a block of the framework at the
     * same address is the framework's to free, never CUDA's) */
    struct live *l;
    if ((rec->api & ~GMT_API_PTDS) != GMT_API_FW_FREE &&
        (l = live_find(&r->backing, rec->addr)) != NULL) {
        live_remove(&r->backing, l);
        return;
    }
    l = live_find(&r->live, rec->addr);
    if (l == NULL) {
        r->unknown_frees++;
        return;
    }
    let_go(r, l, rec->time, true);
}

/* A block reusable again: the framework's when it freed one there (the
 * pool's blocks lie in the pool's segments, never at the same address). */
static void on_completed(struct replay *r, const struct gmt_rec *rec)
{
    struct live *p = live_find(&r->fw_pending, rec->addr);
    if (p == NULL)
        return;
    r->dev[p->device].fw_free_completed++;
    live_remove(&r->fw_pending, p);
}

static void on_segment(struct replay *r, const struct gmt_rec *rec, bool alloc)
{
    struct device_state *d = &r->dev[rec->device % REPLAY_MAX_DEVICES];
    d->seen = true;
    int64_t n = alloc ? (int64_t)rec->size : -(int64_t)rec->size;
    r->segments_taken += alloc;
    changed(r, (uint16_t)(rec->device % REPLAY_MAX_DEVICES), 0, 0);
    d->segments += n;
    d->reserved += n;
    r->reserved += n;
    device_peaks(d, rec);
    if ((uint64_t)r->reserved > r->peak_reserved) {
        r->peak_reserved = (uint64_t)r->reserved;
        r->peak_reserved_time = rec->time;
    }
}

/* The framework's reserved memory changed by n bytes on d: a segment
 * taken or given back, or pages of an expandable one mapped or unmapped.
 * Memory given back never takes more than the device has reserved (a
 * hostile trace cannot drive the sums negative). Counted whether or not
 * gpumemtrace's pool was on: the framework's own CUDA calls bypass it. */
static void fw_reserve(struct replay *r, struct device_state *d,
                       const struct gmt_rec *rec, int64_t n)
{
    if (n < 0 && -n > d->fw_reserved) {
        r->fw_odd++;
        n = d->fw_reserved > 0 ? -d->fw_reserved : 0;
    }
    d->fw_reserved += n;
    d->reserved += n;
    r->reserved += n;
    changed(r, (uint16_t)(d - r->dev), 0, 0);
    fw_peaks(d, rec->time);
    device_peaks(d, rec);
    if ((uint64_t)r->reserved > r->peak_reserved) {
        r->peak_reserved = (uint64_t)r->reserved;
        r->peak_reserved_time = rec->time;
    }
}

/* The block at addr is `size` bytes, not the 512-byte rounding its ALLOC
 * record said (the allocator kept a free block whole, or rounds finer).
 * Its site's allocated bytes change with it; so do those of the picture
 * at the peak when the site is unchanged since the last peak (then the
 * block was live at it: its real size was this all along; the record
 * comes right after the block's ALLOC, which usually set that peak). A
 * site changed since holds the correction until the next peak copies it. */
static void fw_block_size(struct replay *r, const struct gmt_rec *rec,
                          const struct gmt_fw *f)
{
    struct live *l = live_find(&r->live, f->addr);
    if (l == NULL || !is_fw_block(l->api) || f->size < l->size) {
        r->fw_odd++;
        return;
    }
    struct device_state *d = &r->dev[l->device];
    uint64_t extra = f->size - l->size;
    uint32_t e32 = extra > UINT32_MAX ? UINT32_MAX : (uint32_t)extra;
    int64_t delta = (int64_t)e32 - (int64_t)l->extra;
    l->extra = e32;
    d->fw_block_sizes++;
    changed(r, l->device, 0, 0);
    d->allocated += delta;
    r->allocated += delta;
    d->fw_allocated += delta;
    struct site *s = replay_site_of(r, l->stack);
    if (s) {
        s->live_alloc_bytes += delta;
        if (!s->dirty)
            s->peak_alloc_bytes += delta;
    }
    fw_peaks(d, rec->time);
    device_peaks(d, rec);
}

static void on_fw(struct replay *r, const struct gmt_rec *rec)
{
    struct gmt_fw f;
    if (gmt_fw_decode(rec, &f) != 0)
        return;
    r->fw = true;
    struct device_state *d = &r->dev[f.device % REPLAY_MAX_DEVICES];
    d->seen = true;
    switch (f.action) {
    case GMT_FWX_SEGMENT_ALLOC:
        d->fw_segments++;
        fw_reserve(r, d, rec, (int64_t)f.size);
        break;
    case GMT_FWX_SEGMENT_FREE:
        d->fw_segment_frees++;
        fw_reserve(r, d, rec, -(int64_t)f.size);
        break;
    case GMT_FWX_SEGMENT_MAP:
        d->fw_maps++;
        fw_reserve(r, d, rec, (int64_t)f.size);
        break;
    case GMT_FWX_SEGMENT_UNMAP:
        d->fw_unmaps++;
        fw_reserve(r, d, rec, -(int64_t)f.size);
        break;
    case GMT_FWX_BLOCK_SIZE:
        fw_block_size(r, rec, &f);
        break;
    default: /* an action of a newer minor version */
        break;
    }
}

/* ---- progress ------------------------------------------------------------ */

/* A replay that has run 2 s says how far it is, on stderr when that is a
 * terminal: "gpumemreport: reading t.gmt: 45%" (by the events' time
 * against the trace's span), rewritten in place and cleared at the end.
 * GPUMEMREPORT_PROGRESS=0: never; =1: from the start. */
struct progress {
    const char *path;
    uint64_t started_ns, t0, span;
    int shown; /* the percent on screen; -1: nothing shown */
    int mode;  /* 0 off, 1 after 2 s, 2 at once */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void progress_start(struct progress *p, const char *path, const struct replay *r)
{
    const char *e = getenv("GPUMEMREPORT_PROGRESS");
    *p = (struct progress){.path = path, .shown = -1, .t0 = r->t0, .mode = 1};
    if (e && (!strcmp(e, "0") || !strcmp(e, "1")))
        p->mode = e[0] == '0' ? 0 : 2;
    if (p->mode && !isatty(STDERR_FILENO))
        p->mode = 0;
    if (p->mode) {
        p->started_ns = mono_ns();
        p->span = r->hdr.end_monotonic_ns > r->t0 && !r->cut ? r->hdr.end_monotonic_ns - r->t0
                                                            : 0;
    }
}

/* Every 64 Ki records: cheap enough to call from the loop. */
static void progress_at(struct progress *p, uint64_t t)
{
    if (!p->mode || (p->mode == 1 && mono_ns() - p->started_ns < 2000000000ull))
        return;
    int pct = p->span && t > p->t0 ? (int)((t - p->t0) * 100.0 / (double)p->span) : 0;
    pct = pct > 99 ? 99 : pct;
    if (pct == p->shown)
        return;
    p->shown = pct;
    const char *base = strrchr(p->path, '/');
    fprintf(stderr, "\r%s: reading %s: %d%%", gmt_prog, base ? base + 1 : p->path, pct);
    fflush(stderr);
}

static void progress_end(struct progress *p)
{
    if (p->shown >= 0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

/* One record, in order. */
static void apply(struct replay *r, struct gmt_rec *rec)
{
    if (rec->kind == GMT_K_EXT) {
        gmt_defs_add(&r->defs, rec);
        if (rec->ext == GMT_X_VMM) {
            replay_on_vmm(r, rec);
        } else if (rec->ext == GMT_X_MEMPOOL) {
            replay_on_mempool(r, rec);
        } else if (rec->ext == GMT_X_PROC_MEM) {
            replay_on_proc_mem(r, rec);
        } else if (rec->ext == GMT_X_FW) {
            on_fw(r, rec);
            replay_note_series(r, rec->time);
        }
        return;
    }
    r->events++;
    r->last_seq = rec->seq;
    if (r->first_time == 0)
        r->first_time = rec->time;
    r->last_time = rec->time;
    if (r->want_growth && !r->by_steps)
        replay_growth_advance(r, rec->time);
    switch (rec->kind) {
    case GMT_K_ALLOC:
        for (int i = 0; i < r->nobs; i++)
            if (r->obs[i].site)
                rec->stack = r->obs[i].site(r, rec, r->obs[i].ctx);
        if (r->step_anchor && rec->stack == r->step_anchor && rec->result == 0)
            replay_step_begins(r, rec->time);
        on_alloc(r, rec);
        replay_note_series(r, rec->time);
        break;
    case GMT_K_FREE:
        on_free(r, rec);
        replay_note_series(r, rec->time);
        break;
    case GMT_K_FREE_COMPLETED:
        on_completed(r, rec);
        break;
    case GMT_K_SEGMENT_ALLOC:
    case GMT_K_SEGMENT_FREE:
        on_segment(r, rec, rec->kind == GMT_K_SEGMENT_ALLOC);
        replay_note_series(r, rec->time);
        break;
    case GMT_K_MEMCPY:
        replay_on_copy(r, rec);
        break;
    case GMT_K_MEMSET:
        replay_on_memset(r, rec);
        break;
    case GMT_K_SAMPLE:
        replay_on_sample(r, rec);
        break;
    case GMT_K_OOM:
        r->oom_state_pending = true;
        memcpy(r->oom_state, rec->v, sizeof r->oom_state);
        break;
    case GMT_K_MARKER:
        replay_on_marker(r, rec);
        break;
    default:
        break;
    }
}

/* The replay's own observer: autograd's blocks named by the backward
 * call, always. */
static uint32_t bw_site(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    (void)ctx;
    return gmt_bw_site(&r->bw, &r->defs, rec);
}

static void bw_release(struct replay *r, void *ctx)
{
    (void)ctx;
    gmt_bw_free(r->bw);
    r->bw = NULL;
}

static void observers_set(struct replay *r, const struct replay_opts *opts)
{
    r->obs[r->nobs++] = (struct replay_observer){.site = bw_site, .release = bw_release};
    for (int i = 0; opts && i < REPLAY_OPT_OBSERVERS; i++) {
        const struct replay_observer *o = &opts->observe[i];
        if (!o->site && !o->event && !o->release)
            break;
        r->obs[r->nobs++] = *o;
    }
}

int replay_trace(const char *path, struct replay *r,
                 const struct replay_opts *opts, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->want_growth = opts && opts->growth;
    r->kinds_seq = opts ? opts->kinds_seq : 0;
    if (r->want_growth && (opts->step_anchor || opts->step_mark) && opts->step_count >= 2) {
        r->step_anchor = opts->step_mark ? 0 : opts->step_anchor;
        r->step_mark = opts->step_mark;
        r->step_count = opts->step_count;
        r->by_steps = true;
    }
    r->want_marks = opts && opts->mark_sites;
    observers_set(r, opts);
    r->path = path;
    struct gmt_reader *rd = gmt_reader_open(path, err, errlen);
    if (rd == NULL)
        return -1;
    r->hdr = *gmt_reader_header(rd);
    r->cut = gmt_reader_cut(rd);
    r->pool = (r->hdr.features & GMT_FEAT_POOL) != 0;
    r->fw = (r->hdr.features & GMT_FEAT_FW_BLOCKS) != 0;
    r->t0 = r->hdr.start_monotonic_ns;
    /* a closed trace says how long it ran: size the buckets to fit */
    uint64_t span = r->hdr.end_monotonic_ns > r->t0 && !r->cut
                        ? r->hdr.end_monotonic_ns - r->t0 : 1000000000ull;
    r->bucket_ns = span / REPLAY_BUCKETS + 1;
    r->g_bucket_ns = span / REPLAY_GROWTH_BUCKETS + 1;
    r->g_last = -1;
    struct gmt_rec rec;
    int got;
    struct progress prog;
    progress_start(&prog, path, r);
    while ((got = gmt_reader_next(rd, &rec)) == 1) {
        if ((++r->records & 0xffff) == 0)
            progress_at(&prog, rec.time);
        r->change.device = -1;
        r->change.nsites = 0;
        apply(r, &rec);
        for (int i = 0; i < r->nobs; i++)
            if (r->obs[i].event)
                r->obs[i].event(r, &rec, r->obs[i].ctx);
        /* a marker closes the window its observers were shown */
        if (rec.kind == GMT_K_MARKER)
            r->window_peak = (uint64_t)(r->requested > 0 ? r->requested : 0);
    }
    progress_end(&prog);
    if (got < 0) {
        snprintf(err, errlen, "%s", gmt_reader_error(rd));
        gmt_reader_close(rd);
        return -1;
    }
    if (r->want_growth && r->by_steps)
        replay_growth_fill_to(r, replay_step_buckets(r) - 1);
    else if (r->want_growth)
        replay_growth_advance(r, r->last_time);
    gmt_damage(rd, &r->defs, r->damage, sizeof r->damage);
    gmt_reader_close(rd);
    return 0;
}

int64_t replay_beyond(const struct replay *r, int dev, enum beyond_source *source)
{
    bool own = true, any = false;
    int64_t dw = 0, pp = 0;
    for (int i = 0; i < REPLAY_MAX_DEVICES; i++) {
        const struct device_state *d = &r->dev[i];
        if ((dev >= 0 && i != dev) || d->samples == 0)
            continue;
        any = true;
        own = own && d->proc_samples > 0;
        dw = d->max_untracked > dw ? d->max_untracked : dw;
        pp = d->max_proc_untracked > pp ? d->max_proc_untracked : pp;
    }
    if (source)
        *source = !any ? BEYOND_NONE : own ? BEYOND_PROCESS : BEYOND_DEVICE;
    return !any ? 0 : own ? pp : dw;
}

const struct live *replay_live_at(const struct replay *r, uint64_t addr)
{
    return live_find((struct live_table *)&r->live, addr);
}

uint64_t replay_duration(const struct replay *r)
{
    uint64_t end = r->last_time;
    if (!r->cut && r->hdr.end_monotonic_ns > end)
        end = r->hdr.end_monotonic_ns;
    return end > r->hdr.start_monotonic_ns ? end - r->hdr.start_monotonic_ns : 0;
}

int replay_growth_buckets(const struct replay *r, uint64_t *width_ns)
{
    *width_ns = r->g_bucket_ns;
    return r->g_last + 1;
}

uint64_t replay_leaked(const struct replay *r, uint64_t *count, uint64_t *host)
{
    uint64_t bytes = 0, n = 0, h = 0;
    REPLAY_FOREACH_LIVE(r, l) {
        if (l->mem == MEM_HOST) {
            h += l->size;
        } else {
            bytes += l->size;
            n++;
        }
    }
    if (count)
        *count = n;
    if (host)
        *host = h;
    return bytes;
}

void replay_free(struct replay *r)
{
    free(r->thread_allocs);
    for (size_t i = 0; i < r->nsites; i++) {
        free(r->sites[i].rare);
        if (r->sites[i].growth)
            free(r->sites[i].growth->dense);
        free(r->sites[i].growth);
        free(r->sites[i].marks);
    }
    for (int j = 0; j < r->nmarks; j++)
        free(r->mark[j].name);
    struct site_hash *h, *tmp;
    HASH_ITER(hh, r->site_big, h, tmp) {
        HASH_DEL(r->site_big, h);
        free(h);
    }
    free(r->sites);
    free(r->site_of_id);
    free(r->touched);
    free(r->live.slot);
    free(r->backing.slot);
    free(r->fw_pending.slot);
    for (int i = 0; i < r->nobs; i++)
        if (r->obs[i].release)
            r->obs[i].release(r, r->obs[i].ctx);
    gmt_bw_free(r->bw); /* a replay that failed before its observers were set */
    gmt_defs_free(&r->defs);
    memset(r, 0, sizeof *r);
}
