/* cmd_phases.c - `gpumemreport phases`: the run sliced by its markers.
 *
 * Two kinds of phase, from the MARKER records the program wrote
 * (gpumemtrace_mark/push/pop, or NVTX ranges):
 *  - a mark: each `mark(name)` starts an occurrence that runs to the next
 *    mark of the same name, or to the end of the trace (`step`, `epoch`);
 *  - a region: push(name) .. pop() on one thread; regions nest, and a
 *    nested one is named by its path, "outer/inner".
 * Per phase, over its occurrences: count, total time, the peak of
 * requested device memory (process-wide) within any occurrence and which
 * one, live bytes at the start of the first and the end of the last, the
 * net change per occurrence (mean, first, last) and the allocations made.
 *
 * Streaming. The replay calls us at every marker with its counters at
 * that moment, and the highest `requested` since the previous marker.
 * The markers cut the run into segments; an occurrence spans whole
 * segments, so its peak is the maximum of a range of segment maxima that
 * ends at the newest one. Those are kept in a stack of decreasing values
 * (a segment dominated by a later, higher one can never be an answer), so
 * each marker costs O(log n) and memory is one entry per marker at most,
 * pruned below the oldest occurrence still open. Per-occurrence rows
 * (--occurrences) are capped at MAX_OCCURRENCES.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_DEPTH 64          /* regions followed per thread; deeper: counted */
#define MAX_PATH 1024         /* bytes of a region's path */
#define MAX_OCCURRENCES 100000

enum { OPT_OCCURRENCES = OPT_CMD_BASE };

struct phase;

struct occ {                  /* an occurrence in progress */
    struct phase *ph;
    uint64_t index;           /* 1-based, within its phase */
    uint64_t seg;             /* the segment it started with */
    uint64_t start_time, start_seq;
    int64_t live;
    uint64_t allocs, alloc_bytes;
    uint32_t thread;
};

struct phase {
    char *name;               /* mark name, or region path */
    bool region;
    int depth;                /* regions: 0 outermost */
    uint64_t order;           /* marker number of its first occurrence */
    uint64_t count, total_ns, at_end;
    uint64_t peak, peak_index;
    int64_t live_start, live_end;
    int64_t net_sum, net_first, net_last;
    uint64_t allocs, alloc_bytes;
    struct occ cur;           /* marks: the occurrence in progress */
    uint64_t open;            /* occurrences in progress (marks: 0 or 1) */
    bool started;
    UT_hash_handle hh;
};

struct tstack {               /* a thread's open regions */
    uint32_t thread;
    struct occ *frames;
    int depth, cap;
    uint64_t deeper;          /* pushes beyond MAX_DEPTH still open */
    UT_hash_handle hh;
};

struct segmax {
    uint64_t seg, max;
};

struct occ_row {              /* a finished occurrence, for --occurrences */
    const struct phase *ph;
    uint64_t index, start_seq, start_time, duration;
    int64_t live_start, live_end;
    uint64_t peak, allocs;
    uint32_t thread;
    bool at_end;
};

struct phases {
    bool list;                /* --occurrences */
    struct phase *marks, *regions; /* uthash by name */
    size_t nphases;
    struct tstack *threads;
    struct segmax *mono;      /* segment maxima, decreasing */
    size_t nmono, cap_mono;
    uint64_t nseg;            /* the segment in progress */
    uint64_t nmarks, npushes, npops, unbalanced, deeper;
    uint64_t regions_at_end;  /* regions never popped, ended at the end */
    struct occ_row *rows;
    size_t nrows, cap_rows;
    uint64_t dropped;
    bool oom;                 /* a table could not grow: figures incomplete */
};

static struct phases g_ph;

/* ---- segments ------------------------------------------------------------ */

/* The oldest segment an open occurrence started with. */
static uint64_t oldest_open(struct phases *p)
{
    uint64_t lo = p->nseg;
    for (struct phase *ph = p->marks; ph; ph = ph->hh.next)
        if (ph->open && ph->cur.seg < lo)
            lo = ph->cur.seg;
    for (struct tstack *t = p->threads; t; t = t->hh.next)
        if (t->depth > 0 && t->frames[0].seg < lo)
            lo = t->frames[0].seg;
    return lo;
}

/* The segment in progress ends with maximum v. */
static void seg_close(struct phases *p, uint64_t v)
{
    while (p->nmono > 0 && p->mono[p->nmono - 1].max <= v)
        p->nmono--;
    if (p->nmono == p->cap_mono) {
        /* no query reaches below the oldest open occurrence */
        uint64_t lo = oldest_open(p);
        size_t k = 0;
        while (k < p->nmono && p->mono[k].seg < lo)
            k++;
        if (k > 0 && k < p->nmono) /* none of memmove(NULL, NULL, 0) */
            memmove(p->mono, p->mono + k, (p->nmono - k) * sizeof *p->mono);
        p->nmono -= k;
    }
    if (p->nmono == p->cap_mono) {
        size_t cap = p->cap_mono ? 2 * p->cap_mono : 1024;
        struct segmax *m = realloc(p->mono, cap * sizeof *m);
        if (m == NULL) {
            p->oom = true;
            p->nseg++;
            return;
        }
        p->mono = m;
        p->cap_mono = cap;
    }
    p->mono[p->nmono++] = (struct segmax){p->nseg, v};
    p->nseg++;
}

/* Highest maximum of the finished segments from `seg` on. */
static uint64_t seg_max_since(const struct phases *p, uint64_t seg)
{
    size_t lo = 0, hi = p->nmono;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->mono[mid].seg < seg)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nmono ? p->mono[lo].max : 0;
}

/* ---- phases and occurrences ---------------------------------------------- */

static struct phase *phase_get(struct phases *p, bool region, const char *name,
                               int depth, uint64_t order)
{
    struct phase **map = region ? &p->regions : &p->marks, *ph;
    HASH_FIND_STR(*map, name, ph);
    if (ph)
        return ph;
    if ((ph = calloc(1, sizeof *ph)) == NULL || (ph->name = strdup(name)) == NULL) {
        free(ph);
        p->oom = true;
        return NULL;
    }
    ph->region = region;
    ph->depth = depth;
    ph->order = order;
    HASH_ADD_KEYPTR(hh, *map, ph->name, strlen(ph->name), ph);
    p->nphases++;
    return ph;
}

/* Start an occurrence of ph now; its index counts the occurrences
 * started, ended or not. */
static void occ_open(struct occ *o, struct phase *ph, const struct replay *r,
                     const struct gmt_rec *rec, uint64_t seg)
{
    ph->open++;
    *o = (struct occ){ph, ph->count + ph->open, seg, rec->time, rec->seq,
                      r->requested, r->allocs, r->alloc_bytes, rec->thread};
    if (!ph->started) {
        ph->live_start = r->requested;
        ph->started = true;
    }
}

/* End occurrence o now (the replay's state), whose peak is `peak`. */
static void occ_close(struct phases *p, const struct occ *o, const struct replay *r,
                      uint64_t now, uint64_t peak, bool at_end)
{
    struct phase *ph = o->ph;
    int64_t net = r->requested - o->live;
    uint64_t dur = now > o->start_time ? now - o->start_time : 0;
    if (o->index == 1)
        ph->net_first = net;
    ph->open--;
    ph->count++;
    ph->total_ns += dur;
    if (peak > ph->peak || ph->peak_index == 0) {
        ph->peak = peak;
        ph->peak_index = o->index;
    }
    ph->live_end = r->requested;
    ph->net_sum += net;
    ph->net_last = net;
    ph->allocs += r->allocs - o->allocs;
    ph->alloc_bytes += r->alloc_bytes - o->alloc_bytes;
    ph->at_end += at_end;
    p->regions_at_end += at_end && ph->region;
    if (!p->list)
        return;
    if (p->nrows == MAX_OCCURRENCES) {
        p->dropped++;
        return;
    }
    if (p->nrows == p->cap_rows) {
        size_t cap = p->cap_rows ? 2 * p->cap_rows : 256;
        struct occ_row *n = realloc(p->rows, cap * sizeof *n);
        if (n == NULL) {
            p->dropped++;
            return;
        }
        p->rows = n;
        p->cap_rows = cap;
    }
    p->rows[p->nrows++] = (struct occ_row){ph, o->index, o->start_seq, o->start_time, dur,
                                           o->live, r->requested, peak,
                                           r->allocs - o->allocs, o->thread, at_end};
}

static struct tstack *thread_stack(struct phases *p, uint32_t thread)
{
    struct tstack *t;
    HASH_FIND(hh, p->threads, &thread, sizeof thread, t);
    if (t == NULL && (t = calloc(1, sizeof *t)) != NULL) {
        t->thread = thread;
        HASH_ADD(hh, p->threads, thread, sizeof t->thread, t);
    }
    if (t == NULL)
        p->oom = true;
    return t;
}

/* parent "/" name, cut whole characters to MAX_PATH bytes */
static void join_path(char *out, const char *parent, const char *name)
{
    size_t n = 0;
    if (parent) {
        n = strlen(parent);
        memcpy(out, parent, n);
        out[n++] = '/';
    }
    size_t k = strlen(name);
    if (n + k >= MAX_PATH) {
        k = MAX_PATH - 1 - n;
        while (k > 0 && ((unsigned char)name[k] & 0xc0) == 0x80)
            k--;
    }
    memcpy(out + n, name, k);
    out[n + k] = '\0';
}

static void release(struct phases *p)
{
    struct phase *ph, *tmp;
    struct phase **maps[] = {&p->marks, &p->regions};
    for (int i = 0; i < 2; i++)
        HASH_ITER(hh, *maps[i], ph, tmp) {
            HASH_DEL(*maps[i], ph);
            free(ph->name);
            free(ph);
        }
    struct tstack *t, *ttmp;
    HASH_ITER(hh, p->threads, t, ttmp) {
        HASH_DEL(p->threads, t);
        free(t->frames);
        free(t);
    }
    free(p->mono);
    free(p->rows);
    bool list = p->list;
    memset(p, 0, sizeof *p);
    p->list = list;
}

static void on_marker(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    if (rec->kind != GMT_K_MARKER)
        return;
    struct phases *p = ctx;
    if (r->markers == 1)
        release(p); /* a new trace: forget what a failed one left */
    seg_close(p, r->window_peak);
    const char *name = gmt_defs_string(&r->defs, rec->value);
    if (name == NULL)
        name = "(undefined)";
    if (rec->api == GMT_MARK) {
        p->nmarks++;
        struct phase *ph = phase_get(p, false, name, 0, r->markers);
        if (ph == NULL)
            return;
        if (ph->open)
            occ_close(p, &ph->cur, r, rec->time, seg_max_since(p, ph->cur.seg), false);
        occ_open(&ph->cur, ph, r, rec, p->nseg);
    } else if (rec->api == GMT_MARK_PUSH) {
        p->npushes++;
        struct tstack *t = thread_stack(p, rec->thread);
        if (t == NULL)
            return;
        if (t->depth == MAX_DEPTH || t->deeper) {
            t->deeper++;
            p->deeper++;
            return;
        }
        if (t->depth == t->cap) {
            int cap = t->cap ? 2 * t->cap : 8;
            struct occ *f = realloc(t->frames, (size_t)cap * sizeof *f);
            if (f == NULL) {
                p->oom = true;
                return;
            }
            t->frames = f;
            t->cap = cap;
        }
        char path[MAX_PATH];
        join_path(path, t->depth ? t->frames[t->depth - 1].ph->name : NULL, name);
        struct phase *ph = phase_get(p, true, path, t->depth, r->markers);
        if (ph == NULL)
            return;
        occ_open(&t->frames[t->depth++], ph, r, rec, p->nseg);
    } else if (rec->api == GMT_MARK_POP) {
        p->npops++;
        struct tstack *t = thread_stack(p, rec->thread);
        if (t == NULL)
            return;
        if (t->deeper) {
            t->deeper--;
        } else if (t->depth == 0) {
            p->unbalanced++;
        } else {
            struct occ *o = &t->frames[--t->depth];
            occ_close(p, o, r, rec->time, seg_max_since(p, o->seg), false);
        }
    }
}

/* Close what is still open at the end of the trace. */
static void finish(struct phases *p, const struct replay *r)
{
    uint64_t end = r->last_time;
    if (!r->cut && r->hdr.end_monotonic_ns > end)
        end = r->hdr.end_monotonic_ns;
    seg_close(p, r->window_peak);
    for (struct tstack *t = p->threads; t; t = t->hh.next)
        while (t->depth > 0) {
            struct occ *o = &t->frames[--t->depth];
            occ_close(p, o, r, end, seg_max_since(p, o->seg), true);
        }
    for (struct phase *ph = p->marks; ph; ph = ph->hh.next)
        if (ph->open)
            occ_close(p, &ph->cur, r, end, seg_max_since(p, ph->cur.seg), true);
}

/* ---- output -------------------------------------------------------------- */

static int cmp_order(const void *a, const void *b)
{
    const struct phase *x = *(const struct phase *const *)a;
    const struct phase *y = *(const struct phase *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_row(const void *a, const void *b)
{
    const struct occ_row *x = a, *y = b;
    return x->start_seq < y->start_seq ? -1 : x->start_seq > y->start_seq;
}

/* The phases of one kind in order of first occurrence. */
static size_t sorted(struct phase *map, struct phase ***out)
{
    size_t n = HASH_COUNT(map), i = 0;
    struct phase **v = calloc(n ? n : 1, sizeof *v);
    for (struct phase *ph = map; v && ph; ph = ph->hh.next)
        v[i++] = ph;
    if (v && n > 1)
        qsort(v, n, sizeof *v, cmp_order);
    *out = v;
    return v ? n : 0;
}

static int64_t net_mean(const struct phase *ph)
{
    if (ph->count == 0)
        return 0;
    double m = (double)ph->net_sum / (double)ph->count;
    return (int64_t)(m < 0 ? m - 0.5 : m + 0.5);
}

static const char *signed_size(const struct gmt_common *c, char *buf, int64_t v)
{
    if (v <= 0)
        return gmt_size(c, buf, v);
    buf[0] = '+';
    gmt_size(c, buf + 1, v);
    return buf;
}

static const char *duration(char *buf, uint64_t ns)
{
    if (ns < 1000000)
        snprintf(buf, 32, "%.0f us", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, 32, "%.2f ms", (double)ns / 1e6);
    else
        snprintf(buf, 32, "%.3f s", (double)ns / 1e9);
    return buf;
}

static void json_phase(const struct phase *ph, bool first)
{
    printf("%s{\"name\":", first ? "" : ",");
    gmt_json_str(stdout, ph->name);
    printf(",\"kind\":\"%s\",\"depth\":%d,\"count\":%" PRIu64 ",\"total_ns\":%" PRIu64
           ",\"peak_requested\":%" PRIu64 ",\"peak_occurrence\":%" PRIu64
           ",\"live_at_start\":%" PRId64 ",\"live_at_end\":%" PRId64 ",\"net_mean\":%" PRId64
           ",\"net_first\":%" PRId64 ",\"net_last\":%" PRId64 ",\"allocations\":%" PRIu64
           ",\"allocated_bytes\":%" PRIu64 ",\"to_end\":%" PRIu64 "}",
           ph->region ? "region" : "mark", ph->depth, ph->count, ph->total_ns, ph->peak,
           ph->peak_index, ph->live_start, ph->live_end, net_mean(ph), ph->net_first,
           ph->net_last, ph->allocs, ph->alloc_bytes, ph->at_end);
}

static void text_table(const struct gmt_common *c, struct phase **v, size_t n,
                       size_t shown)
{
    static const char *const h[] = {"count", "time", "peak", "in", "live start",
                                    "live end", "net/occ", "first", "last",
                                    "allocs", "phase"};
    static const bool right[] = {true, true, true, true, true, true, true, true, true,
                                 true, false};
    struct table *t = table_new(11, h, right);
    for (size_t i = 0; i < shown && i < n; i++) {
        const struct phase *ph = v[i];
        char cnt[32], tm[32], pk[32], in[32], ls[32], le[32], nm[32], nf[32], nl[32],
            al[32];
        snprintf(cnt, sizeof cnt, "%" PRIu64, ph->count);
        snprintf(in, sizeof in, "#%" PRIu64, ph->peak_index);
        snprintf(al, sizeof al, "%" PRIu64, ph->allocs);
        table_row(t, cnt, duration(tm, ph->total_ns), gmt_size(c, pk, (int64_t)ph->peak),
                  in, gmt_size(c, ls, ph->live_start), gmt_size(c, le, ph->live_end),
                  signed_size(c, nm, net_mean(ph)), signed_size(c, nf, ph->net_first),
                  signed_size(c, nl, ph->net_last), al, ph->name);
    }
    table_print(t, c->markdown);
    table_free(t);
    if (shown < n)
        printf("(%zu more)\n", n - shown);
}

static void occurrences_table(const struct gmt_common *c, const struct phases *p,
                              uint64_t t0)
{
    static const char *const h[] = {"#", "thread", "start", "time", "peak",
                                    "live start", "live end", "net", "allocs",
                                    "phase"};
    static const bool right[] = {true, true, true, true, true, true, true, true, true,
                                 false};
    struct table *t = table_new(10, h, right);
    for (size_t i = 0; i < p->nrows; i++) {
        const struct occ_row *o = &p->rows[i];
        char ix[32], th[32], st[32], tm[32], pk[32], ls[32], le[32], ne[32], al[32];
        snprintf(ix, sizeof ix, "%" PRIu64, o->index);
        snprintf(th, sizeof th, "%u", o->thread);
        snprintf(st, sizeof st, "%.6f s",
                 o->start_time > t0 ? (double)(o->start_time - t0) / 1e9 : 0.0);
        snprintf(al, sizeof al, "%" PRIu64, o->allocs);
        table_row(t, ix, th, st, duration(tm, o->duration), gmt_size(c, pk, (int64_t)o->peak),
                  gmt_size(c, ls, o->live_start), gmt_size(c, le, o->live_end),
                  signed_size(c, ne, o->live_end - o->live_start), al, o->ph->name);
    }
    table_print(t, c->markdown);
    table_free(t);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: %s phases [options] TRACE|DIR...\n\n"
               "The run sliced by its markers (gpumemtrace_mark/push/pop, NVTX\n"
               "ranges). Marks: each runs to the next mark of the same name, or to\n"
               "the end. Regions: push..pop on one thread, nested ones as outer/inner.\n"
               "Per phase: occurrences, total time, peak of requested device memory\n"
               "within any occurrence (and which one), live bytes at the start of the\n"
               "first and the end of the last, net change per occurrence (mean, first,\n"
               "last), allocations made.\n\n"
               "  --occurrences   also list every occurrence (at most %d); --all too\n"
               GMT_COMMON_HELP, gmt_prog, MAX_OCCURRENCES);
}

static int option(int opt, const char *arg, void *ctx)
{
    (void)arg;
    if (opt != OPT_OCCURRENCES)
        return 0;
    ((struct phases *)ctx)->list = true;
    return 1;
}

/* A trace's phases sorted for printing: marks and regions, how many of
 * each, and how many of each are shown (--top). */
struct sorted_phases {
    struct phase **mv, **rv;
    size_t nm, nr, sm, sr;
};

/* With --occurrences, the JSON list of them, then how many were not kept. */
static void json_occurrences(const struct phases *p, uint64_t t0)
{
    printf(",\"occurrences\":[");
    for (size_t i = 0; i < p->nrows; i++) {
        const struct occ_row *o = &p->rows[i];
        printf("%s{\"name\":", i ? "," : "");
        gmt_json_str(stdout, o->ph->name);
        printf(",\"kind\":\"%s\",\"index\":%" PRIu64 ",\"thread\":%u,\"start_ns\":%" PRIu64
               ",\"duration_ns\":%" PRIu64 ",\"peak_requested\":%" PRIu64
               ",\"live_at_start\":%" PRId64 ",\"live_at_end\":%" PRId64
               ",\"allocations\":%" PRIu64 ",\"to_end\":%s}",
               o->ph->region ? "region" : "mark", o->index, o->thread,
               o->start_time > t0 ? o->start_time - t0 : 0, o->duration,
               o->peak, o->live_start, o->live_end, o->allocs,
               o->at_end ? "true" : "false");
    }
    printf("],\"occurrences_dropped\":%" PRIu64, p->dropped);
}

/* A trace's object: its marker counts, its phases (marks, then regions)
 * and with --occurrences each occurrence. */
static void each_json(struct loaded *l, const struct phases *p,
                      const struct sorted_phases *s)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"markers\":%" PRIu64 ",\"marks\":%" PRIu64 ",\"pushes\":%" PRIu64
           ",\"pops\":%" PRIu64 ",\"unbalanced_pops\":%" PRIu64
           ",\"deeper_than_followed\":%" PRIu64 ",\"regions_open_at_end\":%" PRIu64
           ",\"phases\":[", r->hdr.pid, r->markers, p->nmarks, p->npushes, p->npops,
           p->unbalanced, p->deeper, p->regions_at_end);
    for (size_t i = 0; i < s->sm; i++)
        json_phase(s->mv[i], i == 0);
    for (size_t i = 0; i < s->sr; i++)
        json_phase(s->rv[i], s->sm == 0 && i == 0);
    printf("]");
    if (p->list)
        json_occurrences(p, r->t0);
    printf("}");
}

/* The markers the phases could not follow: pops without a push, regions
 * never popped, regions nested too deep. */
static void text_unfollowed(const struct phases *p)
{
    if (p->unbalanced)
        printf("\n%" PRIu64 " pop%s without a push (ignored)\n", p->unbalanced,
               p->unbalanced == 1 ? "" : "s");
    if (p->regions_at_end)
        printf("%s%" PRIu64 " region%s never popped: ended at the end of the trace\n",
               p->unbalanced ? "" : "\n", p->regions_at_end,
               p->regions_at_end == 1 ? "" : "s");
    if (p->deeper)
        printf("%" PRIu64 " regions nested deeper than %d levels: counted in their "
               "outer region\n", p->deeper, MAX_DEPTH);
}

/* A trace as text: how to add markers where it has none; else the
 * tables of marks and regions, what could not be followed, and with
 * --occurrences each occurrence. */
static void each_text(struct loaded *l, const struct gmt_common *c, const struct phases *p,
                      const struct sorted_phases *s)
{
    const struct replay *r = &l->r;
    if (r->markers == 0) {
        printf("%s: no markers in this trace (pid %u). Add them with\n"
               "gpumemtrace_mark/push/pop (preload/gpumemtrace.h), from Python through\n"
               "ctypes (preload/gpumemtrace_markers.py), or as NVTX ranges with\n"
               "NVTX_INJECTION64_PATH=libgpumemtrace.so; see docs/usage.md.\n",
               l->path, r->hdr.pid);
        gmt_header_notes(r);
        return;
    }
    printf("%s: %" PRIu64 " markers (pid %u): %zu mark name%s, %zu region%s\n", l->path,
           r->markers, r->hdr.pid, s->nm, s->nm == 1 ? "" : "s", s->nr,
           s->nr == 1 ? "" : "s");
    gmt_header_notes(r);
    if (s->nm) {
        printf("\nmarks (each runs to the next mark of the same name, or to the end):\n");
        text_table(c, s->mv, s->nm, s->sm);
    }
    if (s->nr) {
        printf("\nregions (push..pop per thread, nested ones as outer/inner):\n");
        text_table(c, s->rv, s->nr, s->sr);
    }
    text_unfollowed(p);
    if (p->list) {
        printf("\noccurrences:\n");
        occurrences_table(c, p, r->t0);
        if (p->dropped)
            printf("(%" PRIu64 " more not listed: at most %d are kept)\n", p->dropped,
                   MAX_OCCURRENCES);
    }
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct phases *p = ctx;
    const struct replay *r = &l->r;
    if (r->markers == 0)
        release(p); /* whatever a trace that failed to load left */
    else
        finish(p, r);
    struct sorted_phases s;
    s.nm = sorted(p->marks, &s.mv);
    s.nr = sorted(p->regions, &s.rv);
    size_t top = c->top ? (size_t)c->top : SIZE_MAX;
    s.sm = s.nm < top ? s.nm : top;
    s.sr = s.nr < top ? s.nr : top;
    if (p->list && p->nrows > 1) /* rows may be NULL when there are none */
        qsort(p->rows, p->nrows, sizeof *p->rows, cmp_row);
    if (c->json)
        each_json(l, p, &s);
    else
        each_text(l, c, p, &s);
    if (p->oom)
        gmt_warnf("%s: out of memory: the phase figures are incomplete", l->path);
    free(s.mv);
    free(s.rv);
    release(p);
}

int cmd_phases(int argc, char **argv)
{
    static const struct option opts[] = {
        {"occurrences", no_argument, NULL, OPT_OCCURRENCES},
        {"all", no_argument, NULL, OPT_OCCURRENCES},
        {NULL, 0, NULL, 0},
    };
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.phases/1",
        .args = {.options = opts, .option = option, .usage = usage},
        .each = each,
        .replay = {.observe = {{.event = on_marker, .ctx = &g_ph}}},
        .default_top = 0,
    };
    return gmt_run(argc, argv, &cmd, &g_ph);
}
