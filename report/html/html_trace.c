/* html_trace.c - one trace's data for `gpumemreport html`, as JSON.
 *
 * What the page draws and lists, computed here so the page only lays it
 * out: the summary's figures, the timeline by site (html_pass.c), the
 * folded stacks of the flame graph at the peak and in total, the pool's
 * pictures at the peak and at each out-of-memory event, what summary says
 * of the out-of-memory events (html_oom.c), and the peak, leaks, growth
 * and transfers tables as those commands compute them (gmt_group with
 * the same picks; gmt_growth_steps). Byte figures are exact integers; the
 * page formats them.
 *
 * Bounded output for huge traces: the timeline has HTML_BUCKETS columns;
 * the flame graph keeps the HTML_FOLDS heaviest stacks and sums the rest
 * into one "(other stacks)" entry, so its total stays exact; a pool
 * picture lists HTML_SEGS segments and sums the rest.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "html.h"
#include "kinds_table.h"
#include "retention.h"

#define HTML_MAX_BANDS 30 /* sites drawn as bands, at most */
#define HTML_FOLDS 4000   /* flame graph stacks kept */
#define HTML_ROWS 50      /* rows per table (--top 0) */

static uint64_t rel(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? t - r->hdr.start_monotonic_ns : 0;
}

static size_t top_of(const struct gmt_common *c, size_t n, size_t cap)
{
    size_t k = c->top ? (size_t)c->top : cap;
    k = k < cap ? k : cap;
    return k < n ? k : n;
}

/* ---- summary ---------------------------------------------------------------- */

static void summary(FILE *f, const struct loaded *l)
{
    const struct replay *r = &l->r;
    uint64_t count, host, leaked = replay_leaked(r, &count, &host);
    uint64_t peak_alloc = 0, allocs = 0, frees = 0;
    for (int i = 0; i < REPLAY_MAX_DEVICES; i++) {
        peak_alloc += r->dev[i].peak_allocated;
        allocs += r->dev[i].allocs;
        frees += r->dev[i].frees;
    }
    enum beyond_source src;
    int64_t beyond = replay_beyond(r, -1, &src);
    fprintf(f, ",\"summary\":{\"peak_requested\":%" PRIu64 ",\"peak_requested_at_ns\":%" PRIu64
               ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
               ",\"peak_reserved_at_ns\":%" PRIu64 ",\"allocations\":%" PRIu64
               ",\"frees\":%" PRIu64 ",\"ooms\":%" PRIu64 ",\"leaked\":%" PRIu64
               ",\"leaked_allocations\":%" PRIu64 ",\"leaked_host\":%" PRIu64
               ",\"events\":%" PRIu64 ",\"records\":%" PRIu64 ",\"beyond\":",
            r->peak_requested, rel(r, r->peak_requested_time), peak_alloc, r->peak_reserved,
            rel(r, r->peak_reserved_time), allocs, frees, r->ooms_total, leaked, count, host,
            r->events, r->records);
    if (src == BEYOND_NONE)
        fprintf(f, "null");
    else
        fprintf(f, "%" PRId64, beyond);
    html_kv_str(f, true, "beyond_source",
                src == BEYOND_PROCESS ? "process" : src == BEYOND_DEVICE ? "device" : "");
    fprintf(f, ",\"devices\":[");
    bool first = true;
    for (int i = 0; i < REPLAY_MAX_DEVICES; i++) {
        const struct device_state *d = &r->dev[i];
        if (!d->seen)
            continue;
        const struct gmt_device_def *dd = gmt_defs_device(&r->defs, (uint32_t)i);
        fprintf(f, "%s{\"device\":%d", first ? "" : ",", i);
        html_kv_str(f, true, "name", dd ? dd->name : "");
        fprintf(f, ",\"total\":%" PRIu64 ",\"peak_requested\":%" PRIu64
                   ",\"peak_reserved\":%" PRIu64 ",\"ooms\":%" PRIu64 "}",
                dd ? dd->total_mem : 0, d->peak_requested, d->peak_reserved, d->ooms);
        first = false;
    }
    fprintf(f, "]}");
}

/* The bytes at the peak by kind (kinds.h), where the trace has the
 * Python stacks to infer them from; null where not. */
static void kinds(FILE *f, struct loaded *l, const struct gmt_common *c)
{
    struct kind_row rows[GMT_KIND_COUNT];
    struct loaded *k = gmt_kinds_at(l, c, l->r.peak_requested_seq, rows);
    fputs(",\"kinds\":", f);
    if (k == NULL) {
        fputs("null", f);
        return;
    }
    gmt_kinds_json(f, rows, true);
    gmt_unload(k);
}

/* ---- timeline by site ---------------------------------------------------------- */

struct idband {
    uint32_t id;
    int band;
};

static int cmp_idband(const void *a, const void *b)
{
    const struct idband *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void series(FILE *f, const char *key, const int64_t *v, size_t n, bool nulls)
{
    fprintf(f, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        if (nulls && v[i] < 0)
            fprintf(f, "%snull", i ? "," : "");
        else
            fprintf(f, "%s%" PRId64, i ? "," : "", v[i] < 0 ? 0 : v[i]);
    }
    fprintf(f, "]");
}

/* ,"stack":[frames, innermost first], each "function (file:line)": the
 * whole-stack label cut at its " <- " joints. */
static void stack_json(FILE *f, struct loaded *l, uint32_t stack)
{
    const char *s = sym_site(l->sym, stack, GRAIN_STACK, 0);
    fprintf(f, ",\"stack\":[");
    for (bool first = true; s && *s; first = false) {
        const char *e = strstr(s, " <- ");
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), s);
        if (!first)
            fputc(',', f);
        html_str(f, buf);
        s = e ? e + 4 : s + len;
    }
    fprintf(f, "]");
}

static void site_obj(FILE *f, struct loaded *l, const struct group_row *row, bool comma)
{
    fprintf(f, "%s{", comma ? "," : "");
    html_kv_str(f, false, "site", row->label);
    stack_json(f, l, row->stack);
}

/* The bands: the top sites at the peak; every site whose label is one of
 * theirs counts in its band, at any time. */
static int timeline(FILE *f, struct loaded *l, const struct gmt_common *c,
                    const struct group_row *rows, size_t nrows, struct html_pass *p,
                    struct html_timeline *tl, char *err, size_t errlen)
{
    const struct replay *r = &l->r;
    size_t k = top_of(c, nrows, HTML_MAX_BANDS);
    struct idband *ib = calloc(r->nsites ? r->nsites : 1, sizeof *ib);
    uint32_t *ids = calloc(r->nsites ? r->nsites : 1, sizeof *ids);
    int *band = calloc(r->nsites ? r->nsites : 1, sizeof *band);
    size_t n = 0;
    for (size_t i = 0; ib && k && i < r->nsites; i++) {
        const struct site *s = &r->sites[i];
        if (s->total_count == 0)
            continue;
        const char *label = sym_site(l->sym, s->stack, c->grain, c->depth);
        for (size_t j = 0; j < k; j++)
            if (strcmp(label, rows[j].label) == 0) {
                ib[n++] = (struct idband){s->stack, (int)j};
                break;
            }
    }
    if (ib == NULL || ids == NULL || band == NULL) {
        free(ib);
        free(ids);
        free(band);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    qsort(ib, n, sizeof *ib, cmp_idband);
    for (size_t i = 0; i < n; i++) {
        ids[i] = ib[i].id;
        band[i] = ib[i].band;
    }
    free(ib);
    int rc = html_pass_finish(p, l, ids, band, n, (int)k, tl, err, errlen);
    free(ids);
    free(band);
    if (rc != 0)
        return -1;
    fprintf(f, ",\"timeline\":{\"bucket_ns\":%" PRIu64 ",\"buckets\":%zu", tl->bucket_ns, tl->n);
    series(f, "requested", tl->requested, tl->n, false);
    series(f, "allocated", tl->allocated, tl->n, false);
    series(f, "reserved", tl->reserved, tl->n, false);
    series(f, "device_used", tl->device_used, tl->n, true);
    fprintf(f, ",\"sites\":[");
    for (size_t j = 0; j < k; j++) {
        site_obj(f, l, &rows[j], j > 0);
        fprintf(f, ",\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 "}", rows[j].v[0],
                rows[j].v[1]);
    }
    fprintf(f, "],\"bands\":[");
    for (int b = 0; b < tl->nbands; b++) {
        fprintf(f, "%s[", b ? "," : "");
        for (size_t i = 0; i < tl->n; i++) {
            int64_t v = tl->band[i * (size_t)tl->nbands + (size_t)b];
            fprintf(f, "%s%" PRId64, i ? "," : "", v < 0 ? 0 : v);
        }
        fprintf(f, "]");
    }
    fprintf(f, "],\"marks\":[");
    for (size_t i = 0; i < tl->nmarks; i++) {
        const struct html_mark *m = &tl->marks[i];
        fprintf(f, "%s{\"at\":%" PRIu64 ",\"end\":%" PRIu64 ",\"phase\":%s,\"depth\":%d",
                i ? "," : "", m->at, m->end, m->type == GMT_MARK_PUSH ? "true" : "false",
                m->depth);
        html_kv_str(f, true, "name", m->name);
        fprintf(f, "}");
    }
    fprintf(f, "],\"marks_total\":%" PRIu64 ",\"ooms\":[", tl->marks_total);
    for (size_t i = 0; i < r->nooms; i++) {
        const struct oom *o = &r->ooms[i];
        fprintf(f, "%s{\"at\":%" PRIu64 ",\"size\":%" PRIu64 ",\"device\":%u,\"by\":\"%s\"",
                i ? "," : "", rel(r, o->time), o->size, o->device, o->fw ? "pytorch" : "cuda");
        html_kv_str(f, true, "site", sym_site(l->sym, o->stack, c->grain, c->depth));
        stack_json(f, l, o->stack);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    return 0;
}

/* ---- flame graph -------------------------------------------------------------- */

struct fold {
    const char *stack;
    int64_t bytes;
};

static int cmp_fold_name(const void *a, const void *b)
{
    return strcmp(((const struct fold *)a)->stack, ((const struct fold *)b)->stack);
}

static int cmp_fold_bytes(const void *a, const void *b)
{
    const struct fold *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return strcmp(x->stack, y->stack);
}

static void folds(FILE *f, struct loaded *l, const struct gmt_common *c, bool total)
{
    const struct replay *r = &l->r;
    struct fold *fo = calloc(r->nsites ? r->nsites : 1, sizeof *fo);
    size_t n = 0;
    for (size_t i = 0; fo && i < r->nsites; i++) {
        const struct site *s = &r->sites[i];
        int64_t v = total ? (int64_t)s->total_bytes : s->peak_bytes;
        if (v <= 0)
            continue;
        fo[n].stack = sym_folded(l->sym, s->stack, c->depth);
        fo[n++].bytes = v;
    }
    if (n)
        qsort(fo, n, sizeof *fo, cmp_fold_name);
    size_t m = 0; /* identical folded stacks merge */
    for (size_t i = 0; i < n;) {
        struct fold acc = fo[i++];
        while (i < n && strcmp(fo[i].stack, acc.stack) == 0)
            acc.bytes += fo[i++].bytes;
        fo[m++] = acc;
    }
    if (m)
        qsort(fo, m, sizeof *fo, cmp_fold_bytes);
    size_t kept = m < HTML_FOLDS ? m : HTML_FOLDS;
    int64_t rest = 0;
    for (size_t i = kept; i < m; i++)
        rest += fo[i].bytes;
    fprintf(f, "%s\"%s\":[", total ? "," : "", total ? "total" : "peak");
    for (size_t i = 0; i < kept; i++) {
        fprintf(f, "%s[", i ? "," : "");
        html_str(f, fo[i].stack);
        fprintf(f, ",%" PRId64 "]", fo[i].bytes);
    }
    if (rest)
        fprintf(f, "%s[\"(%zu other stacks)\",%" PRId64 "]", kept ? "," : "", m - kept, rest);
    fprintf(f, "]");
    free(fo);
}

/* ---- pool pictures --------------------------------------------------------------- */

#define HTML_BLOCK_SITES 4000 /* sites named on the pool's maps */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The stacks that name pieces of the maps, sorted and unique, at most
 * HTML_BLOCK_SITES (pieces of others are drawn unnamed). */
static size_t block_stacks(const struct html_timeline *tl, uint32_t **out)
{
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < tl->nsnaps; i++)
        for (size_t j = 0; tl->snaps[i].npieces && j < tl->snaps[i].st.nsegs && j < HTML_SEGS; j++)
            cap += tl->snaps[i].npieces[j];
    uint32_t *ids = malloc((cap ? cap : 1) * sizeof *ids);
    *out = ids;
    if (ids == NULL)
        return 0;
    for (size_t i = 0; i < tl->nsnaps; i++) {
        const struct html_snap *s = &tl->snaps[i];
        size_t at = 0;
        for (size_t j = 0; s->npieces && j < s->st.nsegs && j < HTML_SEGS; j++)
            for (uint32_t k = 0; k < s->npieces[j]; k++, at++)
                if (s->pieces[at].named)
                    ids[n++] = s->pieces[at].stack;
    }
    if (n)
        qsort(ids, n, sizeof *ids, cmp_u32);
    size_t m = 0;
    for (size_t i = 0; i < n && m < HTML_BLOCK_SITES; i++)
        if (m == 0 || ids[m - 1] != ids[i])
            ids[m++] = ids[i];
    return m;
}

static long block_site(const uint32_t *ids, size_t n, const struct pv_piece *q)
{
    if (!q->named || n == 0)
        return -1;
    const uint32_t *hit = bsearch(&q->stack, ids, n, sizeof *ids, cmp_u32);
    return hit ? (long)(hit - ids) : -1;
}

/* Each segment: [address, device, size, allocated, pending, free, largest
 * free, free blocks, live blocks, PyTorch's, map], the map flat: size,
 * allocated, pending, site (an index into block_sites, -1: none) per
 * piece, in address order. */
static void pools(FILE *f, struct loaded *l, const struct gmt_common *c,
                  const struct html_timeline *tl)
{
    uint32_t *ids;
    size_t nids = block_stacks(tl, &ids);
    fprintf(f, ",\"pool_odd\":%" PRIu64 ",\"pools\":[", tl->pool_odd);
    for (size_t i = 0; i < tl->nsnaps; i++) {
        const struct html_snap *s = &tl->snaps[i];
        fprintf(f, "%s{\"what\":\"%s\",\"at\":%" PRIu64, i ? "," : "", s->oom ? "oom" : "peak",
                s->at);
        if (s->oom)
            fprintf(f, ",\"size\":%" PRIu64 ",\"device\":%u", s->oom->size, s->oom->device);
        if (!s->taken) {
            fprintf(f, ",\"taken\":false}");
            continue;
        }
        const struct pv_state *st = &s->st;
        fprintf(f, ",\"taken\":true,\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64
                   ",\"pending\":%" PRIu64 ",\"free\":%" PRIu64 ",\"largest_free\":%" PRIu64
                   ",\"free_blocks\":%" PRIu64 ",\"live_blocks\":%" PRIu64
                   ",\"fragmentation\":%.6f,\"requested\":%" PRIu64 ",\"waste\":%" PRIu64
                   ",\"unpooled\":%" PRIu64 ",\"unpooled_count\":%" PRIu64 ",\"segments\":[",
                st->reserved, st->allocated, st->pending, st->free, st->largest_free,
                st->free_blocks, st->live_blocks, st->frag, st->requested, st->waste,
                st->unpooled_bytes, st->unpooled_count);
        size_t shown = st->nsegs < HTML_SEGS ? st->nsegs : HTML_SEGS, at = 0;
        for (size_t j = 0; j < shown; j++) {
            const struct pv_seg_stat *g = &st->segs[j];
            fprintf(f, "%s[\"0x%" PRIx64 "\",%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                       ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s,[", j ? "," : "", g->addr,
                    g->device, g->size, g->allocated, g->pending, g->free, g->largest_gap,
                    g->gaps, g->live, g->fw ? "true" : "false");
            for (uint32_t k = 0; s->npieces && k < s->npieces[j]; k++, at++) {
                const struct pv_piece *q = &s->pieces[at];
                fprintf(f, "%s%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%ld", k ? "," : "", q->size,
                        q->allocated, q->pending, block_site(ids, nids, q));
            }
            fprintf(f, "]]");
        }
        fprintf(f, "],\"segments_omitted\":%zu}", st->nsegs - shown);
    }
    fprintf(f, "],\"block_sites\":[");
    for (size_t i = 0; i < nids; i++) {
        fprintf(f, "%s{", i ? "," : "");
        const char *label = sym_site(l->sym, ids[i], c->grain, c->depth);
        html_kv_str(f, false, "site", label);
        stack_json(f, l, ids[i]);
        gmt_held_json(f, l, c, label, GMT_HELD_SHOWN, true);
        fprintf(f, "}");
    }
    fprintf(f, "]");
    free(ids);
}

/* ---- tables ----------------------------------------------------------------------- */

/* A table's rows: each site with its values (vkeys) and, with `held`,
 * who held its memory at a retention capture. */
static void rows_json(FILE *f, struct loaded *l, const struct gmt_common *c, const char *key,
                      const struct group_row *rows, size_t n, const char *const *vkeys,
                      int nv, bool comma, bool held)
{
    size_t shown = top_of(c, n, HTML_ROWS);
    fprintf(f, "%s\"%s\":[", comma ? "," : "", key);
    for (size_t i = 0; i < shown; i++) {
        site_obj(f, l, &rows[i], i > 0);
        for (int k = 0; k < nv; k++)
            fprintf(f, ",\"%s\":%" PRId64, vkeys[k], rows[i].v[k]);
        if (held)
            gmt_held_json(f, l, c, rows[i].label, GMT_HELD_SHOWN, true);
        fprintf(f, "}");
    }
    int64_t rest[GROUP_VALUES] = {0};
    for (size_t i = shown; i < n; i++)
        for (int k = 0; k < nv; k++)
            rest[k] += rows[i].v[k];
    fprintf(f, "],\"%s_more\":{\"sites\":%zu", key, n - shown);
    for (int k = 0; k < nv; k++)
        fprintf(f, ",\"%s\":%" PRId64, vkeys[k], rest[k]);
    fprintf(f, "}");
}

static void growth(FILE *f, struct loaded *l, const struct gmt_common *c)
{
    struct growth_row *g;
    struct loaded *ls;
    size_t n = gmt_growth_steps(l, c, &g, &ls);
    struct loaded *lg = ls ? ls : l;
    size_t shown = top_of(c, n, HTML_ROWS);
    fprintf(f, ",\"growth\":{\"by\":\"%s\",\"steps\":%u,\"sites\":%zu", ls ? "steps" : "time",
            ls ? ls->r.step_count : 0, n);
    char marked[300];
    snprintf(marked, sizeof marked, "mark \"%.256s\"", ls && ls->r.step_mark ? ls->r.step_mark : "");
    html_kv_str(f, true, "step_site",
                !ls ? "" : ls->r.step_mark ? marked
                                           : sym_site(ls->sym, ls->r.step_anchor, c->grain, c->depth));
    fprintf(f, ",\"rows\":[");
    for (size_t i = 0; i < shown; i++) {
        fprintf(f, "%s{", i ? "," : "");
        html_kv_str(f, false, "site", g[i].label);
        fprintf(f, ",\"bytes_per_s\":%.0f,\"per_step\":%.0f,\"rise\":%" PRId64 ",\"from\":%" PRId64
                   ",\"to\":%" PRId64 ",\"first_step\":%u,\"r2\":%.3f",
                g[i].bytes_per_s, g[i].by_step ? g[i].per_step : 0.0, g[i].net, g[i].from_bytes,
                g[i].to_bytes, g[i].first_step, g[i].r2);
        gmt_held_json(f, l, c, g[i].label, GMT_HELD_SHOWN, true);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    free(g);
    (void)lg;
    if (ls)
        gmt_unload(ls);
}

static void transfers(FILE *f, struct loaded *l, const struct gmt_common *c)
{
    static const char *const mem[] = {"unknown", "pageable", "pinned"};
    const struct replay *r = &l->r;
    fprintf(f, ",\"transfers\":{\"directions\":[");
    bool first = true;
    for (int d = 0; d < 5; d++)
        for (int m = 0; m < 3; m++) {
            if (!r->copy_count[d][m])
                continue;
            fprintf(f, "%s{\"direction\":\"%s\",\"host_memory\":\"%s\",\"bytes\":%" PRIu64
                       ",\"count\":%" PRIu64 "}", first ? "" : ",", gmt_dir_name((unsigned)d),
                    d == GMT_DIR_H2D || d == GMT_DIR_D2H ? mem[m] : "", r->copy_bytes[d][m],
                    r->copy_count[d][m]);
            first = false;
        }
    fprintf(f, "],\"sets\":{\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 "},", r->set_bytes,
            r->set_count);
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_transfers, &rows);
    static const char *const keys[] = {"copy_bytes", "copies", "h2d_bytes", "d2h_bytes",
                                       "set_bytes", "sets"};
    rows_json(f, l, c, "sites", rows, n, keys, 6, false, false);
    fprintf(f, "}");
    free(rows);
}

/* ---- the trace --------------------------------------------------------------------- */

int html_trace(FILE *f, struct loaded *l, const struct gmt_common *c, struct html_pass *p)
{
    const struct replay *r = &l->r;
    char err[512] = "out of memory";
    struct group_row *peak;
    size_t npeak = gmt_group(l, c, gmt_pick_peak, &peak);
    fprintf(f, "{");
    html_kv_str(f, false, "path", l->path);
    fprintf(f, ",\"pid\":%u", r->hdr.pid);
    html_kv_str(f, true, "cmdline", r->defs.process.cmdline);
    html_kv_str(f, true, "host", r->defs.process.host);
    fprintf(f, ",\"duration_ns\":%" PRIu64 ",\"pool\":%s,\"framework\":%s,\"cut\":%s",
            replay_duration(r), r->pool ? "true" : "false", r->fw ? "true" : "false",
            r->cut ? "true" : "false");
    html_kv_str(f, true, "damage", r->damage);
    /* a PyTorch process whose bridge did not attach: why ("" for others) */
    char why[512];
    html_kv_str(f, true, "fw_missing", gmt_fw_missing(r, why, sizeof why) ? why : "");
    /* what the recorder lost (a full disk, a stack cap): "" when nothing */
    html_kv_str(f, true, "lost", gmt_lost(&r->hdr, why, sizeof why) ? why : "");
    summary(f, l);
    kinds(f, l, c);
    html_oom(f, l, c, top_of(c, SIZE_MAX, HTML_ROWS));
    struct html_timeline tl;
    if (timeline(f, l, c, peak, npeak, p, &tl, err, sizeof err) != 0) {
        gmt_errorf("%s: %s", l->path, err);
        html_timeline_free(&tl);
        free(peak);
        return -1;
    }
    fprintf(f, ",\"flame\":{");
    folds(f, l, c, false);
    folds(f, l, c, true);
    fprintf(f, "}");
    pools(f, l, c, &tl);
    html_timeline_free(&tl);
    fprintf(f, ",\"tables\":{");
    static const char *const pk[] = {"bytes", "allocations", "allocated"};
    rows_json(f, l, c, "peak", peak, npeak, pk, 3, false, true);
    free(peak);
    struct group_row *lk;
    size_t nl = gmt_group(l, c, gmt_pick_live, &lk);
    static const char *const lkeys[] = {"bytes", "allocations", "host"};
    rows_json(f, l, c, "leaks", lk, nl, lkeys, 3, true, true);
    free(lk);
    growth(f, l, c);
    transfers(f, l, c);
    fprintf(f, "}}");
    return 0;
}
