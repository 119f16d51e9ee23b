/* cmd_leaks.c - `gpumemreport leaks`: what was still allocated at exit.
 *
 * Device (and managed) allocations live when the trace ended, grouped by
 * site; pinned host allocations separately. A trace cut short by a killed
 * process says so: "live at the end" is then not a leak of the program.
 *
 * Every PyTorch program ends with its model alive: parameters, buffers,
 * gradients and the optimizer's state are held by design to the end, and
 * cuBLAS's and cuDNN's workspaces stay with their handles until the
 * process exits. Listed as leaks they bury the one a user can act on. So,
 * where the trace has Python stacks, what is live at the end is sorted by
 * its kind (kinds.h: a replay that takes its snapshot at the last event)
 * into the model's state and the libraries' workspaces, each one line, and
 * the rest - what the program's own code allocated and never gave back -
 * which is the table.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "common.h"
#include "kinds.h"

enum leak_class { LEAK_PROGRAM, LEAK_STATE, LEAK_WORKSPACE, LEAK_CLASSES };

/* What each stack holds at the end, by class. */
struct stack_class {
    uint32_t stack;
    int64_t bytes[LEAK_CLASSES], count[LEAK_CLASSES];
    UT_hash_handle hh;
};

/* gmt_group's picks take no context: the trace being reported's classes
 * and the class picked, for one call at a time. */
static struct stack_class *classes;
static int picking;

static bool pick_class(const struct site *s, int64_t v[GROUP_VALUES])
{
    struct stack_class *e = NULL;
    if (classes)
        HASH_FIND(hh, classes, &s->stack, sizeof s->stack, e);
    if (picking == LEAK_PROGRAM) {
        if (!gmt_pick_live(s, v))
            return false;
        if (e) {
            v[0] -= e->bytes[LEAK_STATE] + e->bytes[LEAK_WORKSPACE];
            v[1] -= e->count[LEAK_STATE] + e->count[LEAK_WORKSPACE];
        }
        return v[0] > 0 || v[2] > 0;
    }
    if (e == NULL || e->bytes[picking] <= 0)
        return false;
    v[0] = e->bytes[picking] < s->live_bytes ? e->bytes[picking] : s->live_bytes;
    v[1] = e->count[picking];
    return v[0] > 0;
}

struct leak_split {
    bool known;                          /* kinds were inferred */
    int64_t bytes[LEAK_CLASSES], count[LEAK_CLASSES];
    int64_t state[3];                    /* parameters, gradients, optimizer state */
};

/* Classify what is live at the end (known stays false without Python
 * stacks, or when the snapshot could not be taken). */
static struct leak_split classify(struct loaded *l, const struct gmt_common *c)
{
    struct leak_split sp = {0};
    classes = NULL;
    if (!(l->r.hdr.features & GMT_FEAT_PYTHON_STACKS) || l->r.last_seq == 0)
        return sp;
    struct loaded *k = gmt_load(l->path, c, &(struct replay_opts){.kinds_seq = l->r.last_seq});
    if (k == NULL)
        return sp;
    const struct kept *kept;
    size_t n = gmt_kinds_kept(k->r.kinds, &kept);
    sp.known = kept != NULL;
    for (size_t i = 0; i < n; i++) {
        if (kept[i].freed)
            continue;
        enum gmt_mem_kind kind = gmt_kind_of(k, &kept[i]);
        int cls = kind == GMT_KIND_WORKSPACE ? LEAK_WORKSPACE
                  : kind == GMT_KIND_PARAMS || kind == GMT_KIND_GRADS || kind == GMT_KIND_OPTIM
                      ? LEAK_STATE
                      : LEAK_PROGRAM;
        if (cls == LEAK_STATE)
            sp.state[kind == GMT_KIND_PARAMS ? 0 : kind == GMT_KIND_GRADS ? 1 : 2] +=
                (int64_t)kept[i].size;
        if (cls == LEAK_PROGRAM)
            continue; /* the rest: the site's live bytes less the others */
        struct stack_class *e;
        HASH_FIND(hh, classes, &kept[i].stack, sizeof kept[i].stack, e);
        if (e == NULL) {
            if ((e = calloc(1, sizeof *e)) == NULL)
                continue;
            e->stack = kept[i].stack;
            HASH_ADD(hh, classes, stack, sizeof e->stack, e);
        }
        e->bytes[cls] += (int64_t)kept[i].size;
        e->count[cls]++;
        sp.bytes[cls] += (int64_t)kept[i].size;
        sp.count[cls]++;
    }
    gmt_unload(k);
    return sp;
}

static void classes_free(void)
{
    struct stack_class *e, *t;
    HASH_ITER(hh, classes, e, t) {
        HASH_DEL(classes, e);
        free(e);
    }
}

enum { OPT_LAYERS = OPT_CMD_BASE };

static void usage(FILE *f)
{
    fprintf(f, "usage: %s leaks [options] TRACE|DIR...\n\n"
               "Allocations still live when the trace ended, by site. With Python\n"
               "stacks, the model's state (parameters, buffers, gradients, optimizer\n"
               "state) and the libraries' workspaces are one line each, not leaks, and\n"
               "the table is what the program's own code never gave back.\n\n"
               "      --layers              under each site, the layers inside\n"
               "                            libraries that allocated; always in --json\n"
               GMT_COMMON_HELP, gmt_prog);
}

static void json_rows(struct loaded *l, const struct gmt_common *c, struct group_row *rows,
                      size_t shown)
{
    for (size_t i = 0; i < shown; i++) {
        printf("%s{\"site\":", i ? "," : "");
        gmt_json_str(stdout, rows[i].label);
        printf(",\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 ",\"host\":%" PRId64,
               rows[i].v[0], rows[i].v[1], rows[i].v[2]);
        gmt_json_site_parts(l, c, pick_class, &rows[i]);
        printf("}");
    }
}

static void text_rows(struct loaded *l, const struct gmt_common *c, bool layers,
                      struct group_row *rows, size_t shown)
{
    char a[32], b[32];
    static const char *const h[] = {"bytes", "allocations", "pinned host", "site"};
    static const bool right[] = {true, true, true, false};
    struct table *t = table_new(4, h, right);
    for (size_t i = 0; i < shown; i++) {
        char k[32];
        snprintf(k, sizeof k, "%" PRId64, rows[i].v[1]);
        table_row(t, gmt_size(c, a, rows[i].v[0]), k,
                  rows[i].v[2] ? gmt_size(c, b, rows[i].v[2]) : "", rows[i].label);
        struct group_row *lr = NULL;
        size_t nl = layers ? gmt_group_layers(l, c, pick_class, rows[i].label, &lr) : 0;
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

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    bool layers = *(bool *)ctx;
    struct leak_split sp = classify(l, c);
    struct group_row *rows, *other[LEAK_CLASSES] = {0};
    size_t nother[LEAK_CLASSES] = {0};
    picking = LEAK_PROGRAM;
    size_t n = gmt_group(l, c, pick_class, &rows);
    int64_t total = 0, count = 0, host = 0, own = 0, own_count = 0;
    for (size_t i = 0; i < n; i++) {
        own += rows[i].v[0];
        own_count += rows[i].v[1];
        host += rows[i].v[2];
    }
    total = own + sp.bytes[LEAK_STATE] + sp.bytes[LEAK_WORKSPACE];
    count = own_count + sp.count[LEAK_STATE] + sp.count[LEAK_WORKSPACE];
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    char a[32], b[32], d[32], e[32];
    if (c->json) {
        printf("{\"trace\":");
        gmt_json_str(stdout, l->path);
        printf(",\"pid\":%u,\"closed\":%s,\"leaked\":%" PRId64 ",\"allocations\":%" PRId64
               ",\"host\":%" PRId64 ",\"sites\":[", l->r.hdr.pid,
               l->r.cut ? "false" : "true", total, count, host);
        json_rows(l, c, rows, shown);
        printf("]");
        if (sp.known) {
            printf(",\"program\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 "}"
                   ",\"model_state\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64
                   ",\"parameters\":%" PRId64 ",\"gradients\":%" PRId64
                   ",\"optimizer_state\":%" PRId64 ",\"sites\":[",
                   own, own_count, sp.bytes[LEAK_STATE], sp.count[LEAK_STATE], sp.state[0],
                   sp.state[1], sp.state[2]);
            picking = LEAK_STATE;
            nother[LEAK_STATE] = gmt_group(l, c, pick_class, &other[LEAK_STATE]);
            json_rows(l, c, other[LEAK_STATE], nother[LEAK_STATE]);
            printf("]},\"workspaces\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64
                   ",\"sites\":[", sp.bytes[LEAK_WORKSPACE], sp.count[LEAK_WORKSPACE]);
            picking = LEAK_WORKSPACE;
            nother[LEAK_WORKSPACE] = gmt_group(l, c, pick_class, &other[LEAK_WORKSPACE]);
            json_rows(l, c, other[LEAK_WORKSPACE], nother[LEAK_WORKSPACE]);
            printf("]}");
        } else {
            printf(",\"program\":null,\"model_state\":null,\"workspaces\":null");
        }
        printf("}");
    } else {
        printf("%s: %s in %" PRId64 " allocations live at exit%s%s%s\n", l->path,
               gmt_size(c, a, total), count, host ? ", pinned host " : "",
               host ? gmt_size(c, b, host) : "",
               l->r.cut ? " (the trace was cut short: the process did not exit)" : "");
        gmt_fw_note(&l->r);
        if (sp.known) {
            printf("  model state, alive by design (not leaks): %s in %" PRId64
                   " allocations (parameters and buffers %s, gradients %s, optimizer state %s)\n",
                   gmt_size(c, a, sp.bytes[LEAK_STATE]), sp.count[LEAK_STATE],
                   gmt_size(c, b, sp.state[0]), gmt_size(c, d, sp.state[1]),
                   gmt_size(c, e, sp.state[2]));
            printf("  library workspaces and caches: %s in %" PRId64 " allocations\n",
                   gmt_size(c, a, sp.bytes[LEAK_WORKSPACE]), sp.count[LEAK_WORKSPACE]);
            printf("  the program's own, never given back: %s in %" PRId64 " allocations%s\n",
                   gmt_size(c, a, own), own_count, n ? ":" : "");
        }
        if (n)
            text_rows(l, c, layers, rows, shown);
    }
    free(rows);
    for (int k = 0; k < LEAK_CLASSES; k++)
        free(other[k]);
    classes_free();
    picking = LEAK_PROGRAM;
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
