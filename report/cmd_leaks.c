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
#include "retention.h"
#include "kinds_table.h"

/* The program's own memory is split three ways: what a site kept step
 * after step (live blocks made in two or more steps, or a site the growth
 * verdict names: one tensor grown by concatenation is one block), what
 * was still in use when the run ended (made in its last step, or before
 * the out-of-memory a run without steps ended in: a step's outputs, what
 * an exception's traceback held), and the rest. */
enum leak_class { LEAK_PROGRAM, LEAK_GREW, LEAK_LAST, LEAK_STATE, LEAK_WORKSPACE, LEAK_CLASSES };

/* What each stack holds at the end, by class. */
struct stack_class {
    uint32_t stack;
    int64_t bytes[LEAK_CLASSES], count[LEAK_CLASSES];
    uint32_t first_step, last_step; /* of its program blocks made in steps */
    UT_hash_handle hh;
};

/* gmt_group's picks take no context: the trace being reported's classes
 * and the class picked, for one call at a time. */
static struct stack_class *classes;
static int picking;

/* picking PICK_OWN: the program's own, all three parts in one */
enum { PICK_OWN = LEAK_CLASSES };

static bool pick_class(const struct site *s, int64_t v[GROUP_VALUES])
{
    struct stack_class *e = NULL;
    if (classes)
        HASH_FIND(hh, classes, &s->stack, sizeof s->stack, e);
    if (picking == LEAK_PROGRAM || picking == PICK_OWN) {
        if (!gmt_pick_live(s, v))
            return false;
        for (int k = picking == PICK_OWN ? LEAK_STATE : LEAK_GREW; e && k < LEAK_CLASSES; k++) {
            v[0] -= e->bytes[k];
            v[1] -= e->count[k];
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
    bool steps;                          /* the run had steps */
    bool oom_end;                        /* no steps; in use at its last OOM */
    int64_t bytes[LEAK_CLASSES], count[LEAK_CLASSES];
    int64_t state[3];                    /* parameters, gradients, optimizer state */
    char **grew;                         /* the growth verdict's site labels */
    size_t ngrew;
};

static struct stack_class *stack_entry(uint32_t stack)
{
    struct stack_class *e;
    HASH_FIND(hh, classes, &stack, sizeof stack, e);
    if (e == NULL && (e = calloc(1, sizeof *e)) != NULL) {
        e->stack = stack;
        HASH_ADD(hh, classes, stack, sizeof e->stack, e);
    }
    return e;
}

/* The growth verdict's sites, by label (the leaks' rows share the
 * grouping), and the replay options that make the same steps. */
static void growth_sites(struct loaded *l, const struct gmt_common *c, struct leak_split *sp,
                         struct replay_opts *o)
{
    struct growth_row *rows;
    struct loaded *ls;
    size_t n = gmt_growth_steps(l, c, &rows, &ls);
    if ((sp->grew = calloc(n ? n : 1, sizeof *sp->grew)) != NULL)
        for (size_t i = 0; i < n; i++)
            if ((sp->grew[sp->ngrew] = strdup(rows[i].label)) != NULL)
                sp->ngrew++;
    if (ls) {
        o->growth = true;
        o->step_anchor = ls->r.step_anchor;
        o->step_mark = ls->r.step_mark; /* a name of l's marks */
        o->step_count = ls->r.step_count;
        sp->steps = true;
        gmt_unload(ls);
    }
    free(rows);
}

static int program_class(const struct leak_split *sp, const struct loaded *k,
                         const struct kept *b, const struct stack_class *e)
{
    if (e && e->first_step && e->last_step != e->first_step)
        return LEAK_GREW;
    if (sp->steps && b->made_step == k->r.step_count)
        return LEAK_LAST;
    if (sp->oom_end && b->made_seq < k->r.ooms[k->r.nooms - 1].seq)
        return LEAK_LAST;
    return LEAK_PROGRAM;
}

static void add(struct leak_split *sp, int cls, const struct kept *b)
{
    struct stack_class *e = stack_entry(b->stack);
    if (e == NULL)
        return;
    e->bytes[cls] += (int64_t)b->size;
    e->count[cls]++;
    sp->bytes[cls] += (int64_t)b->size;
    sp->count[cls]++;
}

/* Classify what is live at the end (known stays false without Python
 * stacks, or when the snapshot could not be taken). */
static struct leak_split classify(struct loaded *l, const struct gmt_common *c)
{
    struct leak_split sp = {0};
    classes = NULL;
    if (!(l->r.hdr.features & GMT_FEAT_PYTHON_STACKS) || l->r.last_seq == 0)
        return sp;
    struct replay_opts o = {.kinds_seq = l->r.last_seq, .observe = {GMT_KINDS_OBSERVER}};
    growth_sites(l, c, &sp, &o);
    struct loaded *k = gmt_load(l->path, c, &o);
    if (k == NULL)
        return sp;
    sp.oom_end = !sp.steps && k->r.nooms > 0;
    const struct kept *kept;
    size_t n = gmt_kinds_kept(k->r.kinds, &kept);
    sp.known = kept != NULL;
    enum gmt_mem_kind *kinds = calloc(n ? n : 1, sizeof *kinds);
    if (kinds == NULL) {
        sp.known = false;
        gmt_unload(k);
        return sp;
    }
    /* the kinds, and the steps each site's program blocks were made in */
    for (size_t i = 0; i < n; i++) {
        const struct kept *b = &kept[i];
        if (b->freed)
            continue;
        kinds[i] = gmt_kind_of(k, b);
        if (kinds[i] == GMT_KIND_PARAMS || kinds[i] == GMT_KIND_GRADS ||
            kinds[i] == GMT_KIND_OPTIM)
            sp.state[kinds[i] == GMT_KIND_PARAMS ? 0 : kinds[i] == GMT_KIND_GRADS ? 1 : 2] +=
                (int64_t)b->size;
        struct stack_class *e;
        if (kinds[i] == GMT_KIND_WORKSPACE || b->made_step == 0 ||
            (e = stack_entry(b->stack)) == NULL)
            continue;
        if (e->first_step == 0 || b->made_step < e->first_step)
            e->first_step = b->made_step;
        if (b->made_step > e->last_step)
            e->last_step = b->made_step;
    }
    for (size_t i = 0; i < n; i++) {
        const struct kept *b = &kept[i];
        if (b->freed)
            continue;
        struct stack_class *e;
        HASH_FIND(hh, classes, &b->stack, sizeof b->stack, e);
        int cls = kinds[i] == GMT_KIND_WORKSPACE ? LEAK_WORKSPACE
                  : kinds[i] == GMT_KIND_PARAMS || kinds[i] == GMT_KIND_GRADS ||
                          kinds[i] == GMT_KIND_OPTIM
                      ? LEAK_STATE
                      : program_class(&sp, k, b, e);
        if (cls != LEAK_PROGRAM) /* the rest: the site's live bytes less the others */
            add(&sp, cls, b);
    }
    free(kinds);
    gmt_unload(k);
    return sp;
}

static void split_free(struct leak_split *sp)
{
    for (size_t i = 0; i < sp->ngrew; i++)
        free(sp->grew[i]);
    free(sp->grew);
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
               "stacks, the tables lead with what the program kept step after step\n"
               "(live blocks made in two or more steps, or a site that grows), then\n"
               "what its own code never gave back; what was in use when the run ended\n"
               "(made in its last step), the model's state (parameters, buffers,\n"
               "gradients, optimizer state) and the libraries' workspaces are one\n"
               "line each, not leaks.\n\n"
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
        gmt_held_json(stdout, l, c, rows[i].label, GMT_HELD_SHOWN, false);
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
        struct gmt_held held[GMT_HELD_SHOWN];
        size_t nh = gmt_held_by(l, c, rows[i].label, held, GMT_HELD_SHOWN);
        for (size_t j = 0; j < nh; j++) {
            char text[RET_CHAIN_SHOWN + 200];
            table_row(t, gmt_size(c, a, (int64_t)held[j].bytes), "", "",
                      gmt_held_row(&held[j], text, sizeof text));
        }
    }
    table_print(t, c->markdown);
    table_free(t);
}

/* One class's rows (gmt_group with its pick), and their sums. */
struct section {
    struct group_row *rows;
    size_t n;
    int64_t bytes, count, host;
};

static void section_sum(struct section *s)
{
    s->bytes = s->count = s->host = 0;
    for (size_t i = 0; i < s->n; i++) {
        s->bytes += s->rows[i].v[0];
        s->count += s->rows[i].v[1];
        s->host += s->rows[i].v[2];
    }
}

static int cmp_rows(const void *a, const void *b)
{
    const struct group_row *x = a, *y = b;
    return x->v[0] != y->v[0] ? (x->v[0] < y->v[0] ? 1 : -1) : strcmp(x->label, y->label);
}

static bool is_grew(const struct leak_split *sp, const char *label)
{
    for (size_t i = 0; i < sp->ngrew; i++)
        if (strcmp(sp->grew[i], label) == 0)
            return true;
    return false;
}

/* A row of `from` at a site the growth verdict names goes to the rows
 * that grew: its device bytes, not the pinned host it also holds. */
static void move_grown(const struct leak_split *sp, struct section *from, struct section *to)
{
    size_t kept = 0;
    for (size_t i = 0; i < from->n; i++) {
        struct group_row *r = &from->rows[i];
        if (r->v[0] <= 0 || !is_grew(sp, r->label)) {
            from->rows[kept++] = *r;
            continue;
        }
        size_t j = 0;
        while (j < to->n && strcmp(to->rows[j].label, r->label) != 0)
            j++;
        if (j == to->n) {
            struct group_row *g = realloc(to->rows, (to->n + 1) * sizeof *g);
            if (g == NULL) {
                from->rows[kept++] = *r;
                continue;
            }
            to->rows = g;
            to->rows[to->n++] = (struct group_row){.label = r->label, .stack = r->stack};
        }
        to->rows[j].v[0] += r->v[0];
        to->rows[j].v[1] += r->v[1];
        if (r->v[2]) { /* its pinned host stays where it was */
            from->rows[kept] = *r;
            from->rows[kept].v[0] = from->rows[kept].v[1] = 0;
            kept++;
        }
    }
    from->n = kept;
    qsort(to->rows, to->n, sizeof *to->rows, cmp_rows);
}

static void json_section(struct loaded *l, const struct gmt_common *c, const char *key,
                         struct section *s)
{
    printf(",\"%s\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 ",\"sites\":[", key,
           s->bytes, s->count);
    json_rows(l, c, s->rows, s->n);
    printf("]}");
}

/* whole: the program's own in one (every row, before the split), summed */
static void json_out(struct loaded *l, const struct gmt_common *c, struct leak_split *sp,
                     struct section *sec, const struct section *whole, size_t shown)
{
    int64_t total = whole->bytes + sp->bytes[LEAK_STATE] + sp->bytes[LEAK_WORKSPACE];
    int64_t count = whole->count + sp->count[LEAK_STATE] + sp->count[LEAK_WORKSPACE];
    int64_t host = whole->host;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"closed\":%s,\"leaked\":%" PRId64 ",\"allocations\":%" PRId64
           ",\"host\":%" PRId64 ",\"sites\":[", l->r.hdr.pid,
           l->r.cut ? "false" : "true", total, count, host);
    json_rows(l, c, whole->rows, shown);
    printf("]");
    if (!sp->known) {
        printf(",\"program\":null,\"grew\":null,\"in_use_at_end\":null,"
               "\"model_state\":null,\"workspaces\":null}");
        return;
    }
    printf(",\"program\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64 "}",
           whole->bytes, whole->count);
    json_section(l, c, "grew", &sec[LEAK_GREW]);
    json_section(l, c, "own", &sec[LEAK_PROGRAM]);
    json_section(l, c, "in_use_at_end", &sec[LEAK_LAST]);
    printf(",\"model_state\":{\"bytes\":%" PRId64 ",\"allocations\":%" PRId64
           ",\"parameters\":%" PRId64 ",\"gradients\":%" PRId64
           ",\"optimizer_state\":%" PRId64 ",\"sites\":[",
           sec[LEAK_STATE].bytes, sec[LEAK_STATE].count, sp->state[0], sp->state[1],
           sp->state[2]);
    json_rows(l, c, sec[LEAK_STATE].rows, sec[LEAK_STATE].n);
    printf("]}");
    json_section(l, c, "workspaces", &sec[LEAK_WORKSPACE]);
    printf("}");
}

static void text_out(struct loaded *l, const struct gmt_common *c, bool layers,
                     struct leak_split *sp, struct section *sec, const struct section *whole)
{
    char a[32], b[32], d[32], e[32];
    int64_t total = whole->bytes + sp->bytes[LEAK_STATE] + sp->bytes[LEAK_WORKSPACE];
    int64_t count = whole->count + sp->count[LEAK_STATE] + sp->count[LEAK_WORKSPACE];
    int64_t host = whole->host;
    printf("%s: %s in %" PRId64 " allocations live at exit%s%s%s\n", l->path,
           gmt_size(c, a, total), count, host ? ", pinned host " : "",
           host ? gmt_size(c, b, host) : "",
           l->r.cut ? " (the trace was cut short: the process did not exit)" : "");
    gmt_header_notes(&l->r);
    size_t top = c->top ? (size_t)c->top : SIZE_MAX;
    if (!sp->known) {
        if (whole->n)
            text_rows(l, c, layers, whole->rows, whole->n < top ? whole->n : top);
        return;
    }
    struct section *g = &sec[LEAK_GREW], *own = &sec[LEAK_PROGRAM], *last = &sec[LEAK_LAST];
    if (g->n) {
        printf("  kept step after step (made in several steps and still alive, or at a "
               "site that grows): %s in %" PRId64 " allocations:\n",
               gmt_size(c, a, g->bytes), g->count);
        text_rows(l, c, layers, g->rows, g->n < top ? g->n : top);
    }
    /* device memory in the table; pinned host alone, one line */
    size_t dev = 0, pinned = 0;
    for (size_t i = 0; i < own->n; i++) {
        if (own->rows[i].v[0] == 0 && own->rows[i].v[1] == 0) {
            pinned++;
            continue;
        }
        own->rows[dev++] = own->rows[i];
    }
    printf("  the program's own, never given back%s: %s in %" PRId64 " allocations%s\n",
           sp->steps || sp->oom_end ? "" : " (no steps found: what was in use when the run "
                                            "ended is among it)",
           gmt_size(c, a, own->bytes), own->count, dev ? ":" : "");
    if (dev)
        text_rows(l, c, layers, own->rows, dev < top ? dev : top);
    if (pinned)
        printf("  pinned host memory: %s at %zu site%s (--json lists them)\n",
               gmt_size(c, a, own->host), pinned, pinned == 1 ? "" : "s");
    if (last->count)
        printf("  in use when the run ended (not leaks: %s): %s in %" PRId64
               " allocations\n",
               sp->steps ? "made in its last step - the step's results, or what an "
                           "exception held"
                         : "made before the out-of-memory it ended with",
               gmt_size(c, a, last->bytes), last->count);
    printf("  model state, alive by design (not leaks): %s in %" PRId64
           " allocations (parameters and buffers %s, gradients %s, optimizer state %s)\n",
           gmt_size(c, a, sec[LEAK_STATE].bytes), sec[LEAK_STATE].count,
           gmt_size(c, b, sp->state[0]), gmt_size(c, d, sp->state[1]),
           gmt_size(c, e, sp->state[2]));
    printf("  library workspaces and caches: %s in %" PRId64 " allocations\n",
           gmt_size(c, a, sec[LEAK_WORKSPACE].bytes), sec[LEAK_WORKSPACE].count);
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    bool layers = *(bool *)ctx;
    struct leak_split sp = classify(l, c);
    struct section sec[LEAK_CLASSES] = {0};
    for (int k = 0; k < LEAK_CLASSES; k++) {
        picking = k;
        sec[k].n = gmt_group(l, c, pick_class, &sec[k].rows);
    }
    /* the program's own in one, before the split: --json's "sites" */
    struct section whole = {0};
    picking = PICK_OWN;
    whole.n = gmt_group(l, c, pick_class, &whole.rows);
    section_sum(&whole);
    move_grown(&sp, &sec[LEAK_PROGRAM], &sec[LEAK_GREW]);
    move_grown(&sp, &sec[LEAK_LAST], &sec[LEAK_GREW]);
    for (int k = 0; k < LEAK_CLASSES; k++)
        section_sum(&sec[k]);
    size_t shown = c->top && (size_t)c->top < whole.n ? (size_t)c->top : whole.n;
    if (c->json)
        json_out(l, c, &sp, sec, &whole, shown);
    else
        text_out(l, c, layers, &sp, sec, &whole);
    free(whole.rows);
    for (int k = 0; k < LEAK_CLASSES; k++)
        free(sec[k].rows);
    split_free(&sp);
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
        /* the growth verdict's sites and the run's steps (classify) */
        .replay = {.growth = true, .mark_sites = true, .observe = {GMT_RETENTION_OBSERVER}},
        .default_top = 20,
    };
    bool layers = false;
    return gmt_run(argc, argv, &cmd, &layers);
}
