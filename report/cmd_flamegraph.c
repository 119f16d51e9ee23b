/* cmd_flamegraph.c - `gpumemreport flamegraph`: folded stacks.
 *
 * One line per stack, "outermost;...;innermost BYTES", the input format
 * of flamegraph.pl, speedscope and inferno. Bytes live at the peak by
 * default; --total: all bytes ever allocated. Lines in a stable order.
 * --json: the same stacks as lists of frames, outermost first.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { OPT_TOTAL = OPT_CMD_BASE };

static void usage(FILE *f)
{
    fprintf(f, "usage: %s flamegraph [--total] [--depth N] [--no-symbols] [--json] "
               "TRACE|DIR...\n\n"
               "Folded stacks for flamegraph.pl / speedscope / inferno, weighted by\n"
               "the bytes live at the peak (default) or, with --total, by all bytes\n"
               "allocated. --depth N keeps the N innermost user frames. --json: the\n"
               "stacks as lists of frames, outermost first, with their bytes.\n",
            gmt_prog);
    fprintf(f, "\nFolded stacks carry no unit (speedscope calls the bytes samples):\n"
               "'%s export --format speedscope' writes these stacks with unit bytes.\n",
            gmt_prog);
}

struct fold {
    const char *stack;
    int64_t bytes;
};

static int cmp_fold(const void *a, const void *b)
{
    return strcmp(((const struct fold *)a)->stack, ((const struct fold *)b)->stack);
}

/* {"frames":[outermost, ..., innermost],"bytes":N}: the folded line's
 * frames (sym_folded writes no ';' inside a frame) */
static void json_stack(const char *folded, int64_t bytes, size_t index)
{
    printf("%s{\"frames\":[", index ? "," : "");
    for (const char *p = folded; *p;) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *frame = strndup(p, len);
        if (p != folded)
            printf(",");
        gmt_json_str(stdout, frame ? frame : "");
        free(frame);
        p += len + (end != NULL);
    }
    printf("],\"bytes\":%" PRId64 "}", bytes);
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    bool total = *(bool *)ctx;
    struct fold *f = calloc(l->r.nsites ? l->r.nsites : 1, sizeof *f);
    size_t n = 0;
    for (size_t i = 0; f && i < l->r.nsites; i++) {
        const struct site *s = &l->r.sites[i];
        int64_t v = total ? (int64_t)s->total_bytes : s->peak_bytes;
        if (v <= 0)
            continue;
        f[n].stack = sym_folded(l->sym, s->stack, c->depth);
        f[n++].bytes = v;
    }
    if (n)
        qsort(f, n, sizeof *f, cmp_fold);
    if (c->json) {
        gmt_json_trace(l);
        printf(",\"pid\":%u,\"weight\":\"%s\",\"unit\":\"bytes\",\"stacks\":[",
               l->r.hdr.pid, total ? "total" : "peak");
    }
    /* identical folded stacks (after --depth) merge */
    for (size_t i = 0, shown = 0; i < n; shown++) {
        int64_t sum = 0;
        size_t j = i;
        while (j < n && !strcmp(f[j].stack, f[i].stack))
            sum += f[j++].bytes;
        if (c->json)
            json_stack(f[i].stack, sum, shown);
        else
            printf("%s %" PRId64 "\n", f[i].stack, sum);
        i = j;
    }
    if (c->json)
        printf("]}");
    free(f);
}

int cmd_flamegraph(int argc, char **argv)
{
    static const struct option opts[] = {{"total", no_argument, NULL, OPT_TOTAL},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_command cmd = {
        .schema = "gpumemtrace.flamegraph/1",
        .args = {.options = opts, .option = gmt_args_flag, .usage = usage},
        .each = each,
    };
    bool total = false;
    return gmt_run(argc, argv, &cmd, &total);
}
