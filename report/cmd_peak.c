/* cmd_peak.c - `gpumemreport peak`: what was on the GPU at the peak.
 *
 * The sites live at the moment of the peak of requested device memory,
 * with their bytes, share of the peak and number of allocations, grouped
 * by function, line or whole stack at a chosen depth. Where rounding made
 * a site's blocks bigger than what it asked for (PyTorch hands out 512
 * bytes for a 4-byte tensor; the pool rounds; pitched rows), an
 * `allocated` column shows the blocks' bytes too. With --at, the same
 * table at another instant (instant.h): an out-of-memory event, a mark,
 * a time.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"
#include "retention.h"
#include "instant.h"

enum { OPT_LAYERS = OPT_CMD_BASE, OPT_AT };

struct peak_opts {
    bool layers;
    bool at_given;   /* --at */
    struct gmt_at at;
    const char *at_arg;
    bool failed;     /* a trace without the instant: exit 2 */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: %s peak [options] TRACE|DIR...\n\n"
               "Sites live at the peak of requested device memory: bytes, share\n"
               "of the peak, allocations; the bytes allocated for them where\n"
               "rounding made that more. A site is the innermost line of your\n"
               "code and what it called: the op (aten::mul), or for a gradient\n"
               "the autograd node (MulBackward0) under the line that called\n"
               "backward.\n\n"
               "      --layers              under each site, the layers inside\n"
               "                            libraries that allocated (a model's\n"
               "                            Attention.forward ...); always in --json\n"
               "      --at INSTANT          the sites live at another instant than\n"
               "                            the peak:\n"
               "          oom[:N]             the Nth out-of-memory event (default\n"
               "                              the first): what was live when the\n"
               "                              request failed, the request not counted\n"
               "          MARK[:N]            the Nth occurrence (default the first)\n"
               "                              of the mark or range named MARK\n"
               "                              (gpumemtrace_mark/push, NVTX)\n"
               "          TIME                seconds from the trace's start, with\n"
               "                              the unit: 1.5s, 250ms\n"
               "                            a trace without that instant is an error\n"
               GMT_COMMON_HELP, gmt_prog);
}

static int option(int opt, const char *arg, void *ctx)
{
    struct peak_opts *o = ctx;
    if (opt == OPT_LAYERS) {
        o->layers = true;
        return 1;
    }
    if (opt != OPT_AT)
        return 0;
    char why[200];
    if (gmt_at_parse(arg, &o->at, why, sizeof why) != 0) {
        gmt_value_error("--at: %s", why);
        return -1;
    }
    o->at_given = true;
    o->at_arg = arg;
    return 1;
}

/* The sites of a table as gmt_group gives them, the first `shown` of the
 * n on rows of their own and the rest summed up, with the times and the
 * total the table states. */
struct peak_sites {
    struct group_row *rows;
    size_t n, shown;
    int64_t rest, rest_count, rest_alloc;
    double t;        /* the peak, seconds from the trace's start */
    double at_t;     /* the instant asked for, the same way */
    uint64_t total;  /* what the shares are of: what was live then */
};

/* The table as JSON: the trace, the peak, the instant asked for, the
 * sites with their parts, the rest. */
static void table_json(struct loaded *l, const struct gmt_common *c,
                       const struct gmt_instant *in, const struct peak_sites *p,
                       struct loaded *whole)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"peak_requested\":%" PRIu64 ",\"peak_at_ns\":%" PRIu64,
           r->hdr.pid, r->peak_requested, (uint64_t)(p->t * 1e9));
    if (in) {
        printf(",\"at\":{\"instant\":\"%s\"",
               in->at.what == GMT_AT_OOM ? "oom" : in->at.what == GMT_AT_MARK ? "mark"
                                                                             : "time");
        if (in->at.what == GMT_AT_MARK) {
            printf(",\"mark\":");
            gmt_json_str(stdout, in->at.mark);
        }
        if (in->at.what != GMT_AT_TIME)
            printf(",\"n\":%" PRIu64, in->at.n);
        printf(",\"at_ns\":%" PRIu64 ",\"requested\":%" PRId64, (uint64_t)(p->at_t * 1e9),
               in->requested);
        if (in->oom)
            printf(",\"device\":%u,\"size\":%" PRIu64, in->oom->device, in->oom->size);
        printf("}");
    }
    printf(",\"group\":\"%s\",\"sites\":[",
           c->grain == GRAIN_FUNCTION ? "function"
           : c->grain == GRAIN_LINE   ? "line" : "stack");
    for (size_t i = 0; i < p->shown; i++) {
        const struct group_row *row = &p->rows[i];
        printf("%s{\"site\":", i ? "," : "");
        gmt_json_str(stdout, row->label);
        printf(",\"bytes\":%" PRId64 ",\"allocated\":%" PRId64
               ",\"allocations\":%" PRId64, row->v[0], row->v[2], row->v[1]);
        gmt_json_site_parts(l, c, gmt_pick_peak, row);
        gmt_held_json(stdout, whole, c, row->label, GMT_HELD_SHOWN, false);
        printf("}");
    }
    printf("],\"other_bytes\":%" PRId64 ",\"other_allocated\":%" PRId64
           ",\"other_allocations\":%" PRId64 "}", p->rest, p->rest_alloc, p->rest_count);
}

/* The text's first line: the peak, or the instant asked for and what was
 * live then. */
static void text_title(struct loaded *l, const struct gmt_common *c,
                       const struct gmt_instant *in, const struct peak_sites *p)
{
    const struct replay *r = &l->r;
    char a[32], b[32];
    if (in == NULL) {
        printf("%s: peak %s requested at %.3f s (pid %u)\n", l->path,
               gmt_size(c, a, (int64_t)r->peak_requested), p->t, r->hdr.pid);
        return;
    }
    char what[300], e[32];
    gmt_at_name(&in->at, what, sizeof what);
    printf("%s: at %s", l->path, what);
    if (in->oom)
        printf(" (%s requested on device %u)", gmt_size(c, e, (int64_t)in->oom->size),
               in->oom->device);
    printf(": %s requested live at %.3f s (pid %u; the peak: %s at %.3f s)\n",
           gmt_size(c, a, in->requested), p->at_t, r->hdr.pid,
           gmt_size(c, b, (int64_t)r->peak_requested), p->t);
}

/* With --layers: the rows under a site, one per layer inside libraries
 * that allocated for it, indented. */
static void layer_rows(struct table *tb, struct loaded *l, const struct gmt_common *c,
                       const char *site, bool rounded)
{
    struct group_row *lr = NULL;
    size_t nl = gmt_group_layers(l, c, gmt_pick_peak, site, &lr);
    for (size_t j = 0; j < nl; j++) {
        char lb[32], la[32], lc[32], text[1024];
        snprintf(lc, sizeof lc, "%" PRId64, lr[j].v[1]);
        snprintf(text, sizeof text, "    %s", lr[j].label);
        if (rounded)
            table_row(tb, gmt_size(c, lb, lr[j].v[0]), gmt_size(c, la, lr[j].v[2]), "",
                      lc, text);
        else
            table_row(tb, gmt_size(c, lb, lr[j].v[0]), "", lc, text);
    }
    free(lr);
}

/* The table as text: the title, the header's notes, a row per site shown
 * (the allocated column where rounding made blocks bigger), under it who
 * held its memory at a retention capture (of the whole trace, `whole`,
 * where l is the replay up to an instant), and a row for the rest. */
static void table_text(struct loaded *l, const struct gmt_common *c, bool layers,
                       const struct gmt_instant *in, const struct peak_sites *p,
                       struct loaded *whole)
{
    char b[32], al[32];
    text_title(l, c, in, p);
    gmt_header_notes(&l->r);
    size_t nrows = p->shown + (p->rest ? 1 : 0);
    bool rounded = p->rest != p->rest_alloc || gmt_group_differ(p->rows, p->shown, 0, 2);
    struct table *tb = gmt_sites_table(rounded);
    for (size_t i = 0; i < nrows; i++) {
        int64_t v = i < p->shown ? p->rows[i].v[0] : p->rest;
        int64_t k = i < p->shown ? p->rows[i].v[1] : p->rest_count;
        int64_t va = i < p->shown ? p->rows[i].v[2] : p->rest_alloc;
        char share[16], cnt[32];
        snprintf(share, sizeof share, "%.1f%%",
                 p->total ? 100.0 * (double)v / (double)p->total : 0);
        snprintf(cnt, sizeof cnt, "%" PRId64, k);
        char label[64];
        snprintf(label, sizeof label, "(%zu more sites)", p->n - p->shown);
        const char *site = i < p->shown ? p->rows[i].label : label;
        if (rounded)
            table_row(tb, gmt_size(c, b, v), gmt_size(c, al, va), share, cnt, site);
        else
            table_row(tb, gmt_size(c, b, v), share, cnt, site);
        if (layers && i < p->shown)
            layer_rows(tb, l, c, site, rounded);
        struct gmt_held held[GMT_HELD_SHOWN];
        size_t nh = i < p->shown ? gmt_held_by(whole, c, site, held, GMT_HELD_SHOWN) : 0;
        for (size_t j = 0; j < nh; j++) {
            char hb[32], text[RET_CHAIN_SHOWN + 200];
            gmt_size(c, hb, (int64_t)held[j].bytes);
            gmt_held_row(&held[j], text, sizeof text);
            if (rounded)
                table_row(tb, hb, "", "", "", text);
            else
                table_row(tb, hb, "", "", text);
        }
    }
    table_print(tb, c->markdown);
    table_free(tb);
}

/* The table of l's sites as gmt_pick_peak gives them: at the peak, or
 * at the instant `in` (l is then gmt_at_load's replay). */
static void table(struct loaded *l, const struct gmt_common *c, bool layers,
                  const struct gmt_instant *in, struct loaded *whole)
{
    const struct replay *r = &l->r;
    struct peak_sites p = {0};
    p.n = gmt_group(l, c, gmt_pick_peak, &p.rows);
    p.shown = c->top && (size_t)c->top < p.n ? (size_t)c->top : p.n;
    for (size_t i = p.shown; i < p.n; i++) {
        p.rest += p.rows[i].v[0];
        p.rest_count += p.rows[i].v[1];
        p.rest_alloc += p.rows[i].v[2];
    }
    p.t = r->peak_requested_time > r->hdr.start_monotonic_ns
              ? (double)(r->peak_requested_time - r->hdr.start_monotonic_ns) / 1e9
              : 0;
    p.at_t = in && in->time > r->hdr.start_monotonic_ns
                 ? (double)(in->time - r->hdr.start_monotonic_ns) / 1e9 : 0;
    /* shares are of what was live then */
    p.total = in ? (uint64_t)(in->requested > 0 ? in->requested : 0) : r->peak_requested;
    if (c->json)
        table_json(l, c, in, &p, whole);
    else
        table_text(l, c, layers, in, &p, whole);
    free(p.rows);
}

static void one(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct peak_opts *o = ctx;
    if (!o->at_given) {
        table(l, c, o->layers, NULL, l);
        return;
    }
    struct gmt_instant in = {.at = o->at};
    struct loaded *k = gmt_at_load(l, c, &in);
    if (k == NULL) {
        if (in.why[0])
            gmt_errorf("peak: %s: --at %s: %s", l->path, o->at_arg, in.why);
        o->failed = true;
        if (c->json) { /* the list stays one object per trace */
            gmt_json_trace(l);
            printf(",\"pid\":%u,\"at\":null,\"sites\":[]}", l->r.hdr.pid);
        }
        return;
    }
    table(k, c, o->layers, &in, l);
    gmt_unload(k);
}

int cmd_peak(int argc, char **argv)
{
    static const struct option opts[] = {{"layers", no_argument, NULL, OPT_LAYERS},
                                         {"at", required_argument, NULL, OPT_AT},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.peak/1",
        .args = {.options = opts, .option = option, .usage = usage},
        .each = one,
        .replay = {.observe = {GMT_RETENTION_OBSERVER}},
        .default_top = 10,
    };
    struct peak_opts o = {0};
    int rc = gmt_run(argc, argv, &cmd, &o);
    return rc == EXIT_OK && o.failed ? EXIT_ERROR : rc;
}
