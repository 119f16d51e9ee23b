/* cmd_frag.c - `gpumemreport frag`: how fragmented the caching pool was.
 *
 * Memory the pool holds but nobody uses is either pending (freed, waiting
 * for the GPU work issued before the free) or free; free memory in many
 * small pieces cannot serve a large request, so the pool grows or runs out
 * although "enough" is free. This command shows, at the peak of requested
 * memory and at each out-of-memory event: reserved, allocated, idle,
 * pending and free bytes, the largest free block and the number of free
 * blocks, fragmentation (1 - largest free / free), the bytes lost to
 * rounding against those lost in gaps, and the segments with the most
 * free space. Then fragmentation over the run, from the pool's samples.
 *
 * How. The pool's segments and blocks are rebuilt (poolview.h) as the
 * replay that loads the trace goes, and pictured at the peak and at each
 * out-of-memory event (pvfollow.h); the samples are placed in parts of the
 * run by the length a closed trace's header gives. When that could not
 * give the whole answer (a trace cut short, records out of order, the
 * picture at the peak not kept), a second pass over the trace, with the
 * moments and the length known from the replay, does it. Memory: live
 * blocks and segments, plus a fixed number of pictures and sample rows -
 * never the trace's length.
 *
 * A trace recorded with the pool off has no pool state: the driver did
 * the caching, out of sight. For it, the rounding waste at the peak and
 * the samples, if any, are all there is to say - unless PyTorch's caching
 * allocator recorded its own events: then its segments and blocks are the
 * picture, labelled as PyTorch's (poolview.h rebuilds them the same way).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "poolview.h"
#include "pvfollow.h"

#define FRAG_MAX_OOMS 32 /* out-of-memory events pictured; all are counted */
#define FRAG_ROWS 12     /* parts of the run in the over-time table */

static void usage(FILE *f)
{
    fprintf(f, "usage: %s frag [options] TRACE|DIR...\n\n"
               "The caching pool at the peak of requested memory and at each\n"
               "out-of-memory event: reserved, allocated, idle, pending and free\n"
               "bytes, largest free block, free blocks, fragmentation (1 - largest\n"
               "free / free), rounding waste against gaps, and the segments with\n"
               "the most free space (--top of them); then fragmentation over the\n"
               "run from the pool's samples. With PyTorch's caching allocator's\n"
               "events in the trace, the same for PyTorch's segments and blocks.\n\n"
               GMT_COMMON_HELP, gmt_prog);
}

/* A moment to picture: the peak, or an out-of-memory event. */
struct snap {
    const struct oom *oom; /* NULL: the peak */
    uint64_t seq, time;
    int64_t device;        /* -1: every device */
    bool taken;
    struct pv_state st;
};

/* One part of the run: the sample with the most fragmentation in it. */
struct row {
    uint64_t n;            /* samples in this part */
    uint64_t time;         /* of the one kept */
    uint32_t device;
    uint64_t v[4];         /* reserved, allocated, largest free, free blocks */
    uint64_t pending;      /* from the rebuilt pool */
    double frag;
};

struct scan {
    struct snap snaps[1 + FRAG_MAX_OOMS];
    size_t nsnaps;
    struct row rows[FRAG_ROWS];
    uint64_t samples, max_time;
    double max_frag;
    uint64_t odd;
    bool nomem;
};

/* The pass that follows the replay loading a trace (an observer). */
struct follow {
    const struct replay *owner; /* the replay followed; NULL: none */
    uint64_t last_records;
    bool off;                   /* the run's length is not known ahead */
    uint64_t dur;
    struct pv_follow pool;
    struct scan *sc;
};

struct frag_ctx {
    bool failed; /* a second pass failed: exit 2 */
    struct follow fw;
};

static uint64_t rel_ns(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? t - r->hdr.start_monotonic_ns : 0;
}

static double rel_s(const struct replay *r, uint64_t t)
{
    return (double)rel_ns(r, t) / 1e9;
}

/* ---- the second pass ----------------------------------------------------- */

/* Fragmentation at a sample. The sample has reserved, allocated and the
 * largest free block but not the pending bytes, which the rebuilt pool
 * knows: free = reserved - allocated - pending. (Idle memory alone would
 * call a pool whose only idle memory is pending 100% fragmented.) */
static double sample_frag(const uint64_t v[6], uint64_t pending)
{
    uint64_t idle = v[0] > v[1] ? v[0] - v[1] : 0;
    uint64_t free_b = idle > pending ? idle - pending : 0;
    if (free_b < v[2])
        free_b = v[2]; /* samples and the rebuilt pool disagree: trust the sample */
    return free_b ? 1.0 - (double)v[2] / (double)free_b : 0.0;
}

/* A sample, into its part of the run (dur: the run's length). */
static void note_sample(struct scan *sc, const struct replay *r, uint64_t dur,
                        const struct gmt_rec *rec, uint64_t pending)
{
    double f = sample_frag(rec->v, pending);
    double pos = dur ? (double)rel_ns(r, rec->time) / (double)dur * FRAG_ROWS : 0.0;
    size_t k = pos < FRAG_ROWS - 1 ? (size_t)pos : FRAG_ROWS - 1;
    struct row *w = &sc->rows[k];
    if (w->n++ == 0 || f > w->frag) {
        w->time = rec->time;
        w->device = rec->device;
        memcpy(w->v, rec->v, sizeof w->v);
        w->pending = pending;
        w->frag = f;
    }
    if (sc->samples++ == 0 || f > sc->max_frag) {
        sc->max_frag = f;
        sc->max_time = rec->time;
    }
}

/* The pictures, moved from the follower: the peak, then the first
 * out-of-memory events when a pool (ours or PyTorch's) was on. */
static void pictures(struct scan *sc, const struct replay *r, struct pv_follow *f)
{
    pvf_end(f);
    if (r->peak_requested) {
        struct pvf_shot *sh = &f->peak;
        sc->snaps[sc->nsnaps++] = (struct snap){NULL, r->peak_requested_seq,
                                                r->peak_requested_time, -1, sh->ok, sh->st};
        sh->ok = false;
    }
    for (size_t i = 0; (r->pool || r->fw) && i < f->nooms && i < FRAG_MAX_OOMS; i++) {
        struct pvf_shot *sh = &f->ooms[i];
        const struct oom *o = &r->ooms[sh->oom];
        sc->snaps[sc->nsnaps++] = (struct snap){o, o->seq, o->time, o->device, sh->ok, sh->st};
        sh->ok = false;
    }
    for (size_t i = 0; i < sc->nsnaps; i++)
        sc->nomem |= !sc->snaps[i].taken;
    sc->odd = f->pv.odd;
    sc->nomem |= f->pv.nomem;
}

/* Read the trace again, the moments and the run's length known. */
static int rescan(const struct loaded *l, struct scan *sc, char *err, size_t errlen)
{
    struct gmt_reader *rd = gmt_reader_open(l->path, err, errlen);
    if (rd == NULL)
        return -1;
    struct pv_follow f;
    pvf_init(&f, FRAG_MAX_OOMS, NULL, NULL, NULL);
    pvf_plan(&f, &l->r, FRAG_MAX_OOMS);
    uint64_t dur = replay_duration(&l->r);
    struct gmt_rec rec;
    int got;
    while ((got = gmt_reader_next(rd, &rec)) == 1) {
        if (rec.kind == GMT_K_SAMPLE)
            note_sample(sc, &l->r, dur, &rec, pv_pending(&f.pv, rec.device));
        pvf_event(&f, NULL, &rec);
    }
    if (got < 0)
        snprintf(err, errlen, "%s", gmt_reader_error(rd));
    else
        pictures(sc, &l->r, &f);
    pvf_free(&f);
    gmt_reader_close(rd);
    return got < 0 ? -1 : 0;
}

static void scan_free(struct scan *sc)
{
    if (sc == NULL)
        return;
    for (size_t i = 0; i < sc->nsnaps; i++)
        pv_state_free(&sc->snaps[i].st);
    free(sc);
}

/* ---- following the replay ------------------------------------------------------ */

static void follow_reset(struct follow *w)
{
    if (w->owner)
        pvf_free(&w->pool);
    scan_free(w->sc);
    *w = (struct follow){0};
}

/* an observer of the replay that loads a trace: every record, after the
 * replay applied it */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct follow *w = &((struct frag_ctx *)ctx)->fw;
    if (w->owner != r || r->records <= w->last_records) { /* a new trace */
        follow_reset(w);
        w->owner = r;
        w->off = !pvf_ahead(r, &w->dur) || (w->sc = calloc(1, sizeof *w->sc)) == NULL;
        pvf_init(&w->pool, FRAG_MAX_OOMS, NULL, NULL, NULL);
    }
    w->last_records = r->records;
    if (w->off)
        return;
    if (rec->kind == GMT_K_SAMPLE)
        note_sample(w->sc, r, w->dur, rec, pv_pending(&w->pool.pv, rec->device));
    pvf_event(&w->pool, r, rec);
}

/* The answer of following l's replay, or NULL: read the trace again. */
static struct scan *followed(struct follow *w, const struct loaded *l)
{
    if (w->owner != &l->r || w->off || !pvf_complete(&w->pool) ||
        w->dur != replay_duration(&l->r))
        return NULL;
    struct scan *sc = w->sc;
    w->sc = NULL;
    pictures(sc, &l->r, &w->pool);
    return sc;
}

/* ---- text -------------------------------------------------------------------- */

static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static void figure(const char *label, const char *value, const char *note)
{
    printf("  %-15s %12s  %s\n", label, value, note);
}

/* Whose segments the picture shows. */
static const char *owner(const struct pv_state *s)
{
    return s->fw_segs == 0 ? "" : s->fw_segs == s->nsegs ? " (PyTorch's)"
                                                         : " (PyTorch's and the pool's)";
}

static void text_figures(const struct gmt_common *c, const struct pv_state *s, bool fw)
{
    char a[32], b[32], note[160];
    snprintf(note, sizeof note, "in %zu segment%s%s", s->nsegs, plural(s->nsegs), owner(s));
    figure("reserved", gmt_size(c, a, (int64_t)s->reserved), note);
    snprintf(note, sizeof note, "in %" PRIu64 " live block%s", s->live_blocks,
             plural(s->live_blocks));
    figure("allocated", gmt_size(c, a, (int64_t)s->allocated), note);
    figure("idle", gmt_size(c, a, (int64_t)(s->reserved - s->allocated)),
           "reserved - allocated");
    figure("pending", gmt_size(c, a, (int64_t)s->pending), "freed, not yet reusable");
    snprintf(note, sizeof note, "in %" PRIu64 " free block%s, largest %s", s->free_blocks,
             plural(s->free_blocks), gmt_size(c, b, (int64_t)s->largest_free));
    figure("free", gmt_size(c, a, (int64_t)s->free), note);
    snprintf(a, sizeof a, "%.1f%%", 100.0 * s->frag);
    figure("fragmentation", a, "1 - largest free / free");
    snprintf(note, sizeof note, "block - requested bytes, against %s free in gaps",
             gmt_size(c, b, (int64_t)s->free));
    figure("rounding waste", gmt_size(c, a, (int64_t)s->waste), note);
    if (s->unpooled_count) {
        snprintf(note, sizeof note, "in %" PRIu64 " allocation%s %s does not serve",
                 s->unpooled_count, plural(s->unpooled_count),
                 fw ? "PyTorch's allocator" : "the pool");
        figure(fw ? "outside PyTorch" : "outside pool",
               gmt_size(c, a, (int64_t)s->unpooled_bytes), note);
    }
}

static void seg_row(struct table *t, const struct gmt_common *c, const char *name,
                    const struct pv_seg_stat *s)
{
    char sz[32], al[32], pe[32], fr[32], lg[32], gaps[24], live[24];
    snprintf(gaps, sizeof gaps, "%" PRIu64, s->gaps);
    snprintf(live, sizeof live, "%" PRIu64, s->live);
    table_row(t, name, gmt_size(c, sz, (int64_t)s->size), gmt_size(c, al, (int64_t)s->allocated),
              gmt_size(c, pe, (int64_t)s->pending), gmt_size(c, fr, (int64_t)s->free),
              gmt_size(c, lg, (int64_t)s->largest_gap), gaps, live);
}

static size_t shown_segs(const struct gmt_common *c, const struct pv_state *s)
{
    return c->top && (size_t)c->top < s->nsegs ? (size_t)c->top : s->nsegs;
}

/* The segments with the most free space; the rest summed in one row. */
static void text_segments(const struct gmt_common *c, const struct pv_state *s)
{
    if (s->nsegs == 0)
        return;
    static const char *const h[] = {"segment", "size", "allocated", "pending",
                                    "free", "largest gap", "gaps", "live blocks"};
    static const char *const hfw[] = {"PyTorch's segment", "size", "allocated", "pending",
                                      "free", "largest gap", "gaps", "live blocks"};
    static const bool right[] = {false, true, true, true, true, true, true, true};
    struct table *t = table_new(8, s->fw_segs == s->nsegs ? hfw : h, right);
    if (t == NULL)
        return;
    size_t shown = shown_segs(c, s);
    struct pv_seg_stat rest = {0};
    for (size_t i = 0; i < s->nsegs; i++) {
        const struct pv_seg_stat *g = &s->segs[i];
        if (i < shown) {
            char name[40];
            /* mixed owners (the pool and PyTorch both on): say whose */
            snprintf(name, sizeof name, "0x%" PRIx64 "%s", g->addr,
                     s->fw_segs && s->fw_segs < s->nsegs ? (g->fw ? " (PyTorch)" : " (pool)")
                                                        : "");
            seg_row(t, c, name, g);
            continue;
        }
        rest.size += g->size;
        rest.allocated += g->allocated;
        rest.pending += g->pending;
        rest.free += g->free;
        rest.gaps += g->gaps;
        rest.live += g->live;
        if (g->largest_gap > rest.largest_gap)
            rest.largest_gap = g->largest_gap;
    }
    if (shown < s->nsegs) {
        char name[48];
        snprintf(name, sizeof name, "(%zu more segments)", s->nsegs - shown);
        seg_row(t, c, name, &rest);
    }
    table_print(t, c->markdown);
    table_free(t);
}

static void text_oom_title(const struct gmt_common *c, const struct replay *r,
                           const struct snap *s, size_t n)
{
    char a[32], b[32], e[32];
    const struct oom *o = s->oom;
    printf("\nat out-of-memory #%zu: %s requested on device %u at %.3f s\n", n,
           gmt_size(c, a, (int64_t)o->size), o->device, rel_s(r, o->time));
    if (o->has_state && o->fw) /* PyTorch knows no largest free block */
        printf("  PyTorch recorded reserved %s, allocated %s\n",
               gmt_size(c, a, (int64_t)o->state[2]), gmt_size(c, b, (int64_t)o->state[3]));
    else if (o->has_state)
        printf("  the pool recorded reserved %s, allocated %s, largest free %s\n",
               gmt_size(c, a, (int64_t)o->state[2]), gmt_size(c, b, (int64_t)o->state[3]),
               gmt_size(c, e, (int64_t)o->state[4]));
}

static void text_snap(const struct gmt_common *c, const struct replay *r,
                      const struct snap *s, size_t n)
{
    char a[32];
    if (s->oom)
        text_oom_title(c, r, s, n);
    else
        printf("\nat the peak of requested memory: %s at %.3f s\n",
               gmt_size(c, a, (int64_t)r->peak_requested), rel_s(r, s->time));
    if (!s->taken) {
        printf("  (not enough host memory to picture it)\n");
        return;
    }
    text_figures(c, &s->st, r->fw);
    text_segments(c, &s->st);
}

static void text_rows(const struct gmt_common *c, const struct replay *r,
                      const struct scan *sc)
{
    if (sc->samples == 0 && r->fw && !r->pool) {
        printf("\nfragmentation over time: no samples in this trace (PyTorch's\n"
               "allocator is not sampled; the pictures above are rebuilt from its events)\n");
        return;
    }
    if (sc->samples == 0) {
        printf("\nfragmentation over time: no samples in this trace (the pool takes\n"
               "them at its allocations and frees, every GPUMEMTRACE_SAMPLE_MS)\n");
        return;
    }
    printf("\nfragmentation over time: %" PRIu64 " sample%s, highest %.1f%% at %.3f s\n"
           "(per twelfth of the run, the sample with the most; pending bytes\n"
           "from the rebuilt pool, the rest from the samples)\n",
           sc->samples, plural(sc->samples), 100.0 * sc->max_frag, rel_s(r, sc->max_time));
    static const char *const h[] = {"time", "reserved", "allocated", "pending",
                                    "largest free", "free blocks", "frag"};
    static const bool right[] = {true, true, true, true, true, true, true};
    struct table *t = table_new(7, h, right);
    if (t == NULL)
        return;
    for (size_t k = 0; k < FRAG_ROWS; k++) {
        const struct row *w = &sc->rows[k];
        if (w->n == 0)
            continue;
        char tm[32], a[32], b[32], p[32], e[32], n[24], f[16];
        snprintf(n, sizeof n, "%" PRIu64, w->v[3]);
        snprintf(f, sizeof f, "%.1f%%", 100.0 * w->frag);
        table_row(t, gmt_seconds(tm, rel_ns(r, w->time)), gmt_size(c, a, (int64_t)w->v[0]),
                  gmt_size(c, b, (int64_t)w->v[1]), gmt_size(c, p, (int64_t)w->pending),
                  gmt_size(c, e, (int64_t)w->v[2]), n, f);
    }
    table_print(t, c->markdown);
    table_free(t);
}

static void text_no_pool(const struct gmt_common *c, const struct replay *r,
                         const struct scan *sc)
{
    char a[32];
    printf("recorded without gpumemtrace's pool (GPUMEMTRACE_POOL=0)\n");
    gmt_header_notes(r);
    printf("no pool state to report: the driver does the caching, out of the trace's sight\n");
    if (sc->nsnaps == 0 || !sc->snaps[0].taken) {
        printf("no device allocations\n");
        return;
    }
    const struct pv_state *s = &sc->snaps[0].st;
    printf("\nat the peak of requested memory: %s at %.3f s\n",
           gmt_size(c, a, (int64_t)r->peak_requested), rel_s(r, sc->snaps[0].time));
    char note[96];
    snprintf(note, sizeof note, "block - requested bytes of %" PRIu64 " live allocation%s",
             s->allocations, plural(s->allocations));
    figure("rounding waste", gmt_size(c, a, (int64_t)s->waste), note);
}

static void text(const struct loaded *l, const struct gmt_common *c, const struct scan *sc)
{
    const struct replay *r = &l->r;
    printf("%s (pid %u): ", l->path, r->hdr.pid);
    if (!r->pool && !r->fw) {
        text_no_pool(c, r, sc);
    } else {
        printf("%s; out-of-memory events: %" PRIu64 "\n",
               r->fw && r->pool ? "gpumemtrace's pool on, and PyTorch's caching allocator's events"
               : r->fw          ? "PyTorch's caching allocator (its block and segment events)"
                                : "gpumemtrace's pool on",
               r->ooms_total);
        gmt_header_notes(r);
        if (sc->nsnaps == 0)
            printf("no device allocations\n");
        for (size_t i = 0, n = 0; i < sc->nsnaps; i++)
            text_snap(c, r, &sc->snaps[i], sc->snaps[i].oom ? ++n : 0);
        if (r->ooms_total > (uint64_t)(sc->nsnaps - (r->peak_requested ? 1 : 0)))
            printf("\n(only the first %d out-of-memory events are pictured)\n",
                   FRAG_MAX_OOMS);
    }
    text_rows(c, r, sc);
    if (sc->odd)
        printf("\nnote: %" PRIu64 " records did not fit the rebuilt %s (frees of unknown\n"
               "blocks, overlapping segments, ...): the figures may be off\n", sc->odd,
               r->fw ? "allocator" : "pool");
}

/* ---- JSON --------------------------------------------------------------------- */

static void json_segments(const struct gmt_common *c, const struct pv_state *s)
{
    size_t shown = shown_segs(c, s);
    printf(",\"segment_table\":[");
    for (size_t i = 0; i < shown; i++) {
        const struct pv_seg_stat *g = &s->segs[i];
        printf("%s{\"address\":\"0x%" PRIx64 "\",\"owner\":\"%s\",\"device\":%u,\"size\":%" PRIu64
               ",\"allocated\":%" PRIu64 ",\"pending\":%" PRIu64 ",\"free\":%" PRIu64
               ",\"largest_gap\":%" PRIu64 ",\"gaps\":%" PRIu64 ",\"live_blocks\":%" PRIu64 "}",
               i ? "," : "", g->addr, g->fw ? "pytorch" : "pool", g->device, g->size,
               g->allocated, g->pending, g->free,
               g->largest_gap, g->gaps, g->live);
    }
    printf("],\"segments_omitted\":%zu", s->nsegs - shown);
}

static void json_pool_figures(const struct pv_state *s)
{
    printf(",\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64 ",\"idle\":%" PRIu64
           ",\"pending\":%" PRIu64 ",\"free\":%" PRIu64 ",\"largest_free\":%" PRIu64
           ",\"free_blocks\":%" PRIu64 ",\"fragmentation\":%.6f,\"segments\":%zu"
           ",\"live_blocks\":%" PRIu64 ",\"unpooled_allocated\":%" PRIu64
           ",\"unpooled_allocations\":%" PRIu64,
           s->reserved, s->allocated, s->reserved - s->allocated, s->pending, s->free,
           s->largest_free, s->free_blocks, s->frag, s->nsegs, s->live_blocks,
           s->unpooled_bytes, s->unpooled_count);
}

static void json_oom(const struct oom *o)
{
    printf(",\"size\":%" PRIu64 ",\"device\":%u,\"by\":\"%s\",\"recorded\":", o->size,
           o->device, o->fw ? "pytorch" : "cuda");
    if (o->has_state)
        printf("{\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64
               ",\"largest_free\":%" PRIu64 "}", o->state[2], o->state[3], o->state[4]);
    else
        printf("null");
}

static void json_snap(const struct gmt_common *c, const struct replay *r,
                      const struct snap *s)
{
    printf("{\"seq\":%" PRIu64 ",\"at_ns\":%" PRIu64, s->seq, rel_ns(r, s->time));
    if (s->oom)
        json_oom(s->oom);
    if (s->taken) {
        printf(",\"requested\":%" PRIu64 ",\"allocations\":%" PRIu64
               ",\"rounding_waste\":%" PRIu64, s->st.requested, s->st.allocations,
               s->st.waste);
        if (r->pool || r->fw) {
            json_pool_figures(&s->st);
            json_segments(c, &s->st);
        }
    }
    printf("}");
}

static void json_rows(const struct replay *r, const struct scan *sc)
{
    printf(",\"samples\":%" PRIu64 ",\"max_sample_fragmentation\":%.6f"
           ",\"max_sample_fragmentation_at_ns\":%" PRIu64 ",\"over_time\":[",
           sc->samples, sc->max_frag, sc->samples ? rel_ns(r, sc->max_time) : 0);
    bool first = true;
    for (size_t k = 0; k < FRAG_ROWS; k++) {
        const struct row *w = &sc->rows[k];
        if (w->n == 0)
            continue;
        printf("%s{\"at_ns\":%" PRIu64 ",\"device\":%u,\"reserved\":%" PRIu64
               ",\"allocated\":%" PRIu64 ",\"pending\":%" PRIu64 ",\"largest_free\":%" PRIu64
               ",\"free_blocks\":%" PRIu64 ",\"fragmentation\":%.6f,\"samples\":%" PRIu64 "}",
               first ? "" : ",", rel_ns(r, w->time), w->device, w->v[0], w->v[1], w->pending,
               w->v[2], w->v[3], w->frag, w->n);
        first = false;
    }
    printf("]");
}

static void json(const struct loaded *l, const struct gmt_common *c, const struct scan *sc)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"pool\":%s,\"framework\":%s,\"inconsistencies\":%" PRIu64
           ",\"peak\":", r->hdr.pid, r->pool ? "true" : "false",
           r->fw ? "\"pytorch\"" : "null", sc->odd);
    size_t i = 0;
    if (sc->nsnaps && !sc->snaps[0].oom)
        json_snap(c, r, &sc->snaps[i++]);
    else
        printf("null");
    printf(",\"ooms_total\":%" PRIu64 ",\"ooms\":[", r->ooms_total);
    for (size_t first = i; i < sc->nsnaps; i++) {
        printf("%s", i > first ? "," : "");
        json_snap(c, r, &sc->snaps[i]);
    }
    printf("]");
    json_rows(r, sc);
    printf("}");
}

/* ---- driver -------------------------------------------------------------------- */

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct frag_ctx *fc = ctx;
    char err[512] = "out of memory";
    struct scan *sc = followed(&fc->fw, l);
    follow_reset(&fc->fw);
    if (sc == NULL && ((sc = calloc(1, sizeof *sc)) == NULL ||
                       rescan(l, sc, err, sizeof err) != 0)) {
        gmt_errorf("%s: %s", l->path, err);
        fc->failed = true;
        if (c->json) { /* keep the document well-formed */
            gmt_json_trace(l);
            printf(",\"pid\":%u,\"error\":", l->r.hdr.pid);
            gmt_json_str(stdout, err);
            printf("}");
        }
        scan_free(sc);
        return;
    }
    if (sc->nomem)
        gmt_warnf("%s: not enough host memory for the whole pool picture", l->path);
    if (c->json)
        json(l, c, sc);
    else
        text(l, c, sc);
    scan_free(sc);
}

int cmd_frag(int argc, char **argv)
{
    static struct frag_ctx fc;
    const struct gmt_command cmd = {
        .schema = "gpumemtrace.frag/1",
        .args = {.usage = usage},
        .each = each,
        .replay = {.observe = {{.event = on_event, .ctx = &fc}}},
        .default_top = 10,
    };
    memset(&fc, 0, sizeof fc);
    int rc = gmt_run(argc, argv, &cmd, &fc);
    follow_reset(&fc.fw);
    return fc.failed ? EXIT_ERROR : rc;
}
