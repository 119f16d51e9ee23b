/* cmd_peak.c - `gpumemreport peak`: what was on the GPU at the peak.
 *
 * The sites live at the moment of the peak of requested device memory,
 * with their bytes, share of the peak and number of allocations, grouped
 * by function, line or whole stack at a chosen depth. Where rounding made
 * a site's blocks bigger than what it asked for (PyTorch hands out 512
 * bytes for a 4-byte tensor; the pool rounds; pitched rows), an
 * `allocated` column shows the blocks' bytes too.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"

enum { OPT_LAYERS = OPT_CMD_BASE };

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
               GMT_COMMON_HELP, gmt_prog);
}

static void one(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    bool layers = *(bool *)ctx;
    const struct replay *r = &l->r;
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_peak, &rows);
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    int64_t rest = 0, rest_count = 0, rest_alloc = 0;
    for (size_t i = shown; i < n; i++) {
        rest += rows[i].v[0];
        rest_count += rows[i].v[1];
        rest_alloc += rows[i].v[2];
    }
    double t = r->peak_requested_time > r->hdr.start_monotonic_ns
                   ? (double)(r->peak_requested_time - r->hdr.start_monotonic_ns) / 1e9
                   : 0;
    if (c->json) {
        printf("{\"trace\":");
        gmt_json_str(stdout, l->path);
        printf(",\"pid\":%u,\"peak_requested\":%" PRIu64 ",\"peak_at_ns\":%" PRIu64
               ",\"group\":\"%s\",\"sites\":[",
               r->hdr.pid, r->peak_requested, (uint64_t)(t * 1e9),
               c->grain == GRAIN_FUNCTION ? "function"
               : c->grain == GRAIN_LINE   ? "line" : "stack");
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"site\":", i ? "," : "");
            gmt_json_str(stdout, rows[i].label);
            printf(",\"bytes\":%" PRId64 ",\"allocated\":%" PRId64
                   ",\"allocations\":%" PRId64, rows[i].v[0], rows[i].v[2],
                   rows[i].v[1]);
            gmt_json_site_parts(l, c, gmt_pick_peak, &rows[i]);
            printf("}");
        }
        printf("],\"other_bytes\":%" PRId64 ",\"other_allocated\":%" PRId64
               ",\"other_allocations\":%" PRId64 "}", rest, rest_alloc, rest_count);
    } else {
        char a[32], b[32], al[32];
        printf("%s: peak %s requested at %.3f s (pid %u)\n", l->path, gmt_size(c, a, (int64_t)r->peak_requested), t, r->hdr.pid);
        size_t nrows = shown + (rest ? 1 : 0);
        bool rounded = rest != rest_alloc || gmt_group_differ(rows, shown, 0, 2);
        struct table *tb = gmt_sites_table(rounded);
        for (size_t i = 0; i < nrows; i++) {
            int64_t v = i < shown ? rows[i].v[0] : rest;
            int64_t k = i < shown ? rows[i].v[1] : rest_count;
            int64_t va = i < shown ? rows[i].v[2] : rest_alloc;
            char share[16], cnt[32];
            snprintf(share, sizeof share, "%.1f%%",
                     r->peak_requested ? 100.0 * (double)v / (double)r->peak_requested : 0);
            snprintf(cnt, sizeof cnt, "%" PRId64, k);
            char label[64];
            snprintf(label, sizeof label, "(%zu more sites)", n - shown);
            const char *site = i < shown ? rows[i].label : label;
            if (rounded)
                table_row(tb, gmt_size(c, b, v), gmt_size(c, al, va), share, cnt, site);
            else
                table_row(tb, gmt_size(c, b, v), share, cnt, site);
            struct group_row *lr = NULL;
            size_t nl = layers && i < shown ? gmt_group_layers(l, c, gmt_pick_peak, site, &lr) : 0;
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
        table_print(tb, c->markdown);
        table_free(tb);
    }
    free(rows);
}

int cmd_peak(int argc, char **argv)
{
    static const struct option opts[] = {{"layers", no_argument, NULL, OPT_LAYERS},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.peak/1",
        .args = {.options = opts, .option = gmt_args_flag, .usage = usage},
        .each = one,
        .default_top = 10,
    };
    bool layers = false;
    return gmt_run(argc, argv, &cmd, &layers);
}
