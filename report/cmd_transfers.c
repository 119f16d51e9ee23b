/* cmd_transfers.c - `gpumemreport transfers`: copies and sets.
 *
 * Bytes and counts by direction, host-to-device and device-to-host split
 * by whether the host memory was pinned or pageable (pageable copies are
 * staged through a driver buffer and do not overlap with compute), and
 * the sites that copy the most.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s transfers [options] TRACE|DIR...\n\n"
               "Copies and sets by direction, pinned or pageable host memory,\n"
               "bytes, count and site.\n\n" GMT_COMMON_HELP, gmt_prog);
}

static const char *const dir_names[] = {"unknown", "host to host", "host to device",
                                        "device to host", "device to device"};
static const char *const mem_names[] = {"", "pageable", "pinned"};

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    (void)ctx;
    const struct replay *r = &l->r;
    char a[32], b[32], e[32];
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_transfers, &rows);
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    if (c->json) {
        gmt_json_trace(l);
        printf(",\"pid\":%u,\"directions\":[", r->hdr.pid);
        bool first = true;
        for (int d = 0; d < 5; d++)
            for (int m = 0; m < 3; m++) {
                if (!r->copy_count[d][m])
                    continue;
                printf("%s{\"direction\":\"%s\",\"host_memory\":\"%s\",\"bytes\":%" PRIu64
                       ",\"count\":%" PRIu64 "}", first ? "" : ",",
                       gmt_dir_name((unsigned)d), m ? mem_names[m] : "unknown",
                       r->copy_bytes[d][m], r->copy_count[d][m]);
                first = false;
            }
        printf("],\"sets\":{\"bytes\":%" PRIu64 ",\"count\":%" PRIu64 "},\"sites\":[",
               r->set_bytes, r->set_count);
        for (size_t i = 0; i < shown; i++) {
            printf("%s{\"site\":", i ? "," : "");
            gmt_json_str(stdout, rows[i].label);
            printf(",\"copy_bytes\":%" PRId64 ",\"copies\":%" PRId64 ",\"h2d_bytes\":%" PRId64
                   ",\"d2h_bytes\":%" PRId64 ",\"set_bytes\":%" PRId64 ",\"sets\":%" PRId64
                   "}", rows[i].v[0], rows[i].v[1], rows[i].v[2], rows[i].v[3],
                   rows[i].v[4], rows[i].v[5]);
        }
        printf("]}");
        free(rows);
        return;
    }
    printf("%s (pid %u)\n", l->path, r->hdr.pid);
    gmt_header_notes(r);
    static const char *const h[] = {"direction", "host memory", "bytes", "count", "average"};
    static const bool right[] = {false, false, true, true, true};
    struct table *t = table_new(5, h, right);
    for (int d = 0; d < 5; d++)
        for (int m = 0; m < 3; m++) {
            if (!r->copy_count[d][m])
                continue;
            char cnt[32];
            snprintf(cnt, sizeof cnt, "%" PRIu64, r->copy_count[d][m]);
            table_row(t, dir_names[d], d == GMT_DIR_H2D || d == GMT_DIR_D2H ? (m ? mem_names[m] : "unknown") : "",
                      gmt_size(c, a, (int64_t)r->copy_bytes[d][m]), cnt,
                      gmt_size(c, b, (int64_t)(r->copy_bytes[d][m] / r->copy_count[d][m])));
        }
    if (r->set_count) {
        char cnt[32];
        snprintf(cnt, sizeof cnt, "%" PRIu64, r->set_count);
        table_row(t, "memset", "", gmt_size(c, a, (int64_t)r->set_bytes), cnt,
                  gmt_size(c, b, (int64_t)(r->set_bytes / r->set_count)));
    }
    table_print(t, c->markdown);
    table_free(t);
    if (shown) {
        printf("\nby site:\n");
        static const char *const hs[] = {"copied", "copies", "H2D", "D2H", "set", "site"};
        static const bool rs[] = {true, true, true, true, true, false};
        struct table *ts = table_new(6, hs, rs);
        for (size_t i = 0; i < shown; i++) {
            char cnt[32], s[32];
            snprintf(cnt, sizeof cnt, "%" PRId64, rows[i].v[1]);
            table_row(ts, gmt_size(c, a, rows[i].v[0]), cnt, gmt_size(c, b, rows[i].v[2]),
                      gmt_size(c, e, rows[i].v[3]), gmt_size(c, s, rows[i].v[4]), rows[i].label);
        }
        table_print(ts, c->markdown);
        table_free(ts);
    }
    free(rows);
}

int cmd_transfers(int argc, char **argv)
{
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.transfers/1",
        .args = {.usage = usage},
        .each = each,
        .default_top = 10};
    return gmt_run(argc, argv, &cmd, NULL);
}
