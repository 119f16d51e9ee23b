/* cmd_leaks.c - `gpumemreport leaks`: what was still allocated at exit.
 *
 * Device (and managed) allocations live when the trace ended, grouped by
 * site; pinned host allocations separately. A trace cut short by a killed
 * process says so: "live at the end" is then not a leak of the program.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"

enum { OPT_LAYERS = OPT_CMD_BASE };

static void usage(FILE *f)
{
    fprintf(f, "usage: %s leaks [options] TRACE|DIR...\n\n"
               "Allocations still live when the trace ended, by site.\n\n"
               "      --layers              under each site, the layers inside\n"
               "                            libraries that allocated; always in --json\n"
               GMT_COMMON_HELP, gmt_prog);
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    bool layers = *(bool *)ctx;
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_live, &rows);
    int64_t total = 0, count = 0, host = 0;
    for (size_t i = 0; i < n; i++) {
        total += rows[i].v[0];
        count += rows[i].v[1];
        host += rows[i].v[2];
    }
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    char a[32], b[32];
    if (c->json) {
        printf("{\"trace\":");
        gmt_json_str(stdout, l->path);
        printf(",\"pid\":%u,\"closed\":%s,\"leaked\":%" PRId64 ",\"allocations\":%" PRId64
               ",\"host\":%" PRId64 ",\"sites\":[", l->r.hdr.pid,
               l->r.cut ? "false" : "true", total, count, host);
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"site\":", i ? "," : "");
            gmt_json_str(stdout, rows[i].label);
            printf(",\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 ",\"host\":%" PRId64,
                   rows[i].v[0], rows[i].v[1], rows[i].v[2]);
            gmt_json_site_parts(l, c, gmt_pick_live, &rows[i]);
            printf("}");
        }
        printf("]}");
    } else {
        printf("%s: %s in %" PRId64 " allocations live at exit%s%s%s\n", l->path,
               gmt_size(c, a, total), count, host ? ", pinned host " : "",
               host ? gmt_size(c, b, host) : "",
               l->r.cut ? " (the trace was cut short: the process did not exit)" : "");
        if (n) {
            static const char *const h[] = {"bytes", "allocations", "pinned host", "site"};
            static const bool right[] = {true, true, true, false};
            struct table *t = table_new(4, h, right);
            for (size_t i = 0; i < shown; i++) {
                char k[32];
                snprintf(k, sizeof k, "%" PRId64, rows[i].v[1]);
                table_row(t, gmt_size(c, a, rows[i].v[0]), k,
                          rows[i].v[2] ? gmt_size(c, b, rows[i].v[2]) : "",
                          rows[i].label);
                struct group_row *lr = NULL;
                size_t nl = layers ? gmt_group_layers(l, c, gmt_pick_live, rows[i].label, &lr) : 0;
                for (size_t j = 0; j < nl; j++) {
                    char lk[32], text[1024];
                    snprintf(lk, sizeof lk, "%" PRId64, lr[j].v[1]);
                    snprintf(text, sizeof text, "    %s", lr[j].label);
                    table_row(t, gmt_size(c, a, lr[j].v[0]), lk, "", text);
                }
                free(lr);
            }
            table_print(t, c->markdown);
            table_free(t);
        }
    }
    free(rows);
}

int cmd_leaks(int argc, char **argv)
{
    static const struct option opts[] = {{"layers", no_argument, NULL, OPT_LAYERS},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.leaks/1",
        .args = {.options = opts, .option = gmt_args_flag, .usage = usage},
        .each = each,
        .default_top = 20,
    };
    bool layers = false;
    return gmt_run(argc, argv, &cmd, &layers);
}
