/* cmd_growth.c - `gpumemreport growth`: memory that keeps rising.
 *
 * Sites whose live bytes rise steadily through the run (growth.c has the
 * test), with the rate per second and the rise. The classic find: a
 * training loop that keeps a tensor still attached to the autograd graph
 * (appending an un-detached loss or output to a list), so every step's
 * activations stay alive.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"
#include "retention.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s growth [options] TRACE|DIR...\n\n"
               "Sites whose live device memory rises steadily through the run.\n"
               "A run whose allocations repeat step after step (a training or\n"
               "inference loop) is judged by steps, found without markers: a\n"
               "step begins at each allocation of the site allocated once a\n"
               "step; growth is given per step, with the step it began in\n"
               "(rises of 4 KiB and more in most steps). Otherwise by time, with\n"
               "the rate per second; start-up (the first 10%% of the run) is\n"
               "not counted as growth. When the program marks its steps\n"
               "(gpumemtrace_mark, NVTX marks), also the rise per interval of the\n"
               "step mark: the most frequent repeated mark whose name reads like a\n"
               "step (step, iter, epoch, batch), else the most frequent repeated\n"
               "mark (\"+256 KiB per step\").\n\n"
               GMT_COMMON_HELP, gmt_prog);
}

/* The layers inside libraries under a growing site's label, by the bytes
 * its sites hold at the end (sym_layer; what keeps the memory). */
static bool live_at_end(const struct site *s, int64_t v[GROUP_VALUES])
{
    v[0] = s->live_bytes;
    v[1] = s->live_count;
    return s->live_bytes > 0;
}

/* The end of a growing site's JSON object: its fit, its rise per
 * interval of the step mark, its layers by what they hold at the end, and
 * who held its memory at a retention capture (of `whole`, the trace's
 * first replay, where l is the replay by steps). */
static void json_site_tail(struct loaded *l, const struct gmt_common *c,
                           const struct growth_row *g, struct loaded *whole)
{
    printf(",\"bytes_per_s\":%.0f,\"rise\":%" PRId64 ",\"from\":%" PRId64
           ",\"to\":%" PRId64 ",\"r2\":%.3f,\"rising_share\":%.3f",
           g->bytes_per_s, g->net, g->from_bytes, g->to_bytes, g->r2, g->rising);
    if (g->has_interval)
        printf(",\"rise_per_interval\":%" PRId64, g->per_interval);
    else
        printf(",\"rise_per_interval\":null");
    gmt_json_layers(l, c, live_at_end, g->label, "bytes_at_end", true);
    gmt_held_json(stdout, whole, c, g->label, GMT_HELD_SHOWN, false);
    printf("}");
}

/* Under a growing site's row, who held its memory at a capture: the held
 * bytes in the `to` column (at `to_col`, of ncols). */
static void held_rows(struct table *t, int ncols, int to_col, struct loaded *l,
                      const struct gmt_common *c, const char *label)
{
    struct gmt_held held[GMT_HELD_SHOWN];
    size_t n = gmt_held_by(l, c, label, held, GMT_HELD_SHOWN);
    for (size_t j = 0; j < n; j++) {
        char bytes[32], text[RET_CHAIN_SHOWN + 200];
        const char *cell[8] = {"", "", "", "", "", "", "", ""};
        cell[to_col] = gmt_size(c, bytes, (int64_t)held[j].bytes);
        cell[ncols - 1] = gmt_held_row(&held[j], text, sizeof text);
        if (ncols == 8)
            table_row(t, cell[0], cell[1], cell[2], cell[3], cell[4], cell[5], cell[6], cell[7]);
        else if (ncols == 7)
            table_row(t, cell[0], cell[1], cell[2], cell[3], cell[4], cell[5], cell[6]);
        else if (ncols == 6)
            table_row(t, cell[0], cell[1], cell[2], cell[3], cell[4], cell[5]);
        else
            table_row(t, cell[0], cell[1], cell[2], cell[3], cell[4]);
    }
}

/* A run whose allocations repeat step after step is judged by steps: a
 * second replay with the step's site as the anchor (gmt_growth_anchor). */
static void by_steps(struct loaded *l, const struct gmt_common *c, struct growth_row *rows,
                     size_t n, size_t shown, struct loaded *whole)
{
    const struct replay *r = &l->r;
    char marked[300];
    snprintf(marked, sizeof marked, "mark \"%.256s\"", r->step_mark ? r->step_mark : "");
    const char *step = r->step_mark ? marked : sym_site(l->sym, r->step_anchor, c->grain, c->depth);
    int mark = gmt_growth_mark(l);
    const char *mname = mark >= 0 ? r->mark[mark].name : NULL;
    char a[32], b[32], e[32];
    if (c->json) {
        gmt_json_trace(l);
        double total = 0;
        for (size_t i = 0; i < n; i++)
            total += rows[i].bytes_per_s;
        printf(",\"pid\":%u,\"growing_sites\":%zu,\"total_bytes_per_s\":%.0f,"
               "\"steps\":%u,\"step_site\":", r->hdr.pid, n, total, r->step_count);
        gmt_json_str(stdout, step);
        printf(",\"interval_mark\":");
        if (mname)
            gmt_json_str(stdout, mname);
        else
            printf("null");
        printf(",\"interval_marks\":%u,\"sites\":[", mname ? r->mark[mark].count : 0);
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"site\":", i ? "," : "");
            gmt_json_str(stdout, rows[i].label);
            printf(",\"per_step\":%.0f,\"first_step\":%u", rows[i].per_step,
                   rows[i].first_step);
            json_site_tail(l, c, &rows[i], whole);
        }
        printf("]}");
        return;
    }
    if (n == 0) {
        printf("%s: no site grows step after step (%u steps; a step: %s%s)\n", l->path,
               r->step_count, r->step_mark ? "" : "one allocation at ", step);
        gmt_header_notes(r);
        return;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += rows[i].per_step;
    printf("%s: %zu growing site%s, %s per step in all over %u steps (a step: %s%s)",
           l->path, n, n == 1 ? "" : "s", gmt_size(c, a, (int64_t)total), r->step_count,
           r->step_mark ? "" : "one allocation at ", step);
    /* a step mark of another period gets its own column */
    bool other = mname && r->mark[mark].count != r->step_count;
    if (mname)
        printf("; per interval of mark \"%s\" (%u marks)", mname, r->mark[mark].count);
    printf("\n");
    gmt_header_notes(r);
    char per[48];
    snprintf(per, sizeof per, "per %.40s", mname ? mname : "");
    const char *h[] = {"per step", "rate/s", "rise", "from", "to", "from step", per, "site"};
    static const bool right[] = {true, true, true, true, true, true, true, false};
    if (!other)
        h[6] = "site";
    struct table *t = table_new(other ? 8 : 7, h, right + (other ? 0 : 1));
    for (size_t i = 0; i < shown; i++) {
        char ps[40] = "+", rate[32], rise[32], fs[16];
        gmt_size(c, ps + 1, (int64_t)(rows[i].per_step + 0.5));
        gmt_size(c, rate, (int64_t)rows[i].bytes_per_s);
        gmt_size(c, rise, rows[i].net);
        gmt_size(c, b, rows[i].from_bytes);
        gmt_size(c, e, rows[i].to_bytes);
        if (rows[i].first_step)
            snprintf(fs, sizeof fs, "%u", rows[i].first_step);
        else
            snprintf(fs, sizeof fs, "set-up");
        if (other) {
            char pi[40] = "+";
            gmt_size(c, pi + (rows[i].per_interval > 0), rows[i].per_interval);
            table_row(t, ps, rate, rise, b, e, fs, pi, rows[i].label);
        } else {
            table_row(t, ps, rate, rise, b, e, fs, rows[i].label);
        }
        held_rows(t, other ? 8 : 7, 4, whole, c, rows[i].label);
    }
    table_print(t, c->markdown);
    table_free(t);
}

static void each(struct loaded *l0, const struct gmt_common *c, void *ctx)
{
    (void)ctx;
    struct growth_row *rows;
    struct loaded *ls;
    size_t n = gmt_growth_steps(l0, c, &rows, &ls);
    if (ls) {
        by_steps(ls, c, rows, n, c->top && (size_t)c->top < n ? (size_t)c->top : n, l0);
        free(rows);
        gmt_unload(ls);
        return;
    }
    struct loaded *l = l0;
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += rows[i].bytes_per_s;
    char a[32], b[32], e[32];
    int mark = gmt_growth_mark(l);
    const char *mname = mark >= 0 ? l->r.mark[mark].name : NULL;
    if (c->json) {
        gmt_json_trace(l);
        printf(",\"pid\":%u,\"growing_sites\":%zu,\"total_bytes_per_s\":%.0f,"
               "\"interval_mark\":", l->r.hdr.pid, n, total);
        if (mname)
            gmt_json_str(stdout, mname);
        else
            printf("null");
        printf(",\"interval_marks\":%u,\"unjudged\":", mname ? l->r.mark[mark].count : 0);
        if (l->unjudged)
            gmt_json_str(stdout, l->unjudged);
        else
            printf("null");
        printf(",\"sites\":[");
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"site\":", i ? "," : "");
            gmt_json_str(stdout, rows[i].label);
            json_site_tail(l, c, &rows[i], l);
        }
        printf("]}");
    } else if (n == 0 && l->unjudged) {
        printf("%s: growth not judged: no steps (%s); a Python program's growth is judged "
               "step to step\n", l->path, l->unjudged);
        gmt_header_notes(&l->r);
    } else if (n == 0) {
        printf("%s: no site grows steadily\n", l->path);
        gmt_header_notes(&l->r);
    } else {
        printf("%s: %zu growing site%s, %s/s in all", l->path, n, n == 1 ? "" : "s",
               gmt_size(c, a, (int64_t)total));
        if (mname)
            printf("; per interval of mark \"%s\" (%u marks)", mname,
                   l->r.mark[mark].count);
        printf("\n");
        gmt_header_notes(&l->r);
        /* the per-interval column is named after the mark: "per step" */
        char per[48];
        snprintf(per, sizeof per, "per %.40s", mname ? mname : "");
        static const char *const h5[] = {"rate/s", "rise", "from", "to", "site"};
        const char *h6[] = {"rate/s", "rise", "from", "to", per, "site"};
        static const bool right[] = {true, true, true, true, true, false};
        struct table *t = mname ? table_new(6, h6, right) : table_new(5, h5, right + 1);
        for (size_t i = 0; i < shown; i++) {
            char rate[32], rise[32], pi[40] = "+";
            gmt_size(c, rate, (int64_t)rows[i].bytes_per_s);
            gmt_size(c, rise, rows[i].net);
            gmt_size(c, b, rows[i].from_bytes);
            gmt_size(c, e, rows[i].to_bytes);
            if (mname) {
                gmt_size(c, pi + (rows[i].per_interval > 0), rows[i].per_interval);
                table_row(t, rate, rise, b, e, pi, rows[i].label);
            } else {
                table_row(t, rate, rise, b, e, rows[i].label);
            }
            held_rows(t, mname ? 6 : 5, 3, l, c, rows[i].label);
        }
        table_print(t, c->markdown);
        table_free(t);
    }
    free(rows);
}

int cmd_growth(int argc, char **argv)
{
    static const struct gmt_command cmd = {.schema = "gpumemtrace.growth/1",
                                           .args = {.usage = usage},
                                           .each = each,
                                           .replay = {.growth = true,
                                                      .mark_sites = true,
                                                      .observe = {GMT_RETENTION_OBSERVER}},
                                           .default_top = 10};
    return gmt_run(argc, argv, &cmd, NULL);
}
