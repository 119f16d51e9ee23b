/* common.c - what every report command does the same way.
 *
 * The command line of every command (gmt_args_parse: the options shared
 * by the table commands, gmt_common_opt, and each command's own), trace
 * arguments (files, directories of *.gmt files, or quoted wildcard
 * patterns, in a stable order), loading a trace (replay + symbolizer)
 * with one error line on failure, and the table printer (aligned text or
 * Markdown). Output order is always
 * deterministic: ties are broken by name, so CI can diff reports.
 */
#include <ctype.h>
#include <dirent.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

int gmt_common_opt(struct gmt_common *c, int opt, const char *arg)
{
    char *end;
    switch (opt) {
    case OPT_JSON:
        c->json = true;
        return 1;
    case OPT_MARKDOWN:
        c->markdown = true;
        return 1;
    case OPT_BYTES:
        c->bytes = true;
        return 1;
    case OPT_NO_SYMBOLS:
        c->no_symbols = true;
        return 1;
    case OPT_TOP:
        c->top = (int)strtol(arg, &end, 10);
        if (*arg == '\0' || *end || c->top < 0) {
            gmt_value_error("--top needs a number, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_DEPTH:
        c->depth = (int)strtol(arg, &end, 10);
        if (*arg == '\0' || *end || c->depth < 0 || c->depth > 255) {
            gmt_value_error("--depth needs a number from 0 to 255, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_GROUP:
        if (!strcmp(arg, "function"))
            c->grain = GRAIN_FUNCTION;
        else if (!strcmp(arg, "line"))
            c->grain = GRAIN_LINE;
        else if (!strcmp(arg, "stack"))
            c->grain = GRAIN_STACK;
        else {
            gmt_value_error("--group is function, line or stack, not '%s'", arg);
            return -1;
        }
        return 1;
    default:
        return 0;
    }
}

void gmt_common_init(struct gmt_common *c)
{
    memset(c, 0, sizeof *c);
    c->top = 10;
    c->grain = GRAIN_LINE;
}

/* ---- the command line ------------------------------------------------------ */

/* getopt_long over a command's argv with the short options `spec`
 * (":h..."): an unknown option or a missing value is reported with
 * gmt_usage_error, and '?' returned. */
static int next_option(int argc, char **argv, const char *spec, const struct option *opts)
{
    opterr = 0;
    int o = getopt_long(argc, argv, spec, opts, NULL);
    if (o == '?' || o == ':') {
        /* the word at fault: the option getopt just stepped over */
        const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
        char shortopt[3] = {'-', (char)optopt, '\0'};
        if (optopt && strncmp(arg, "--", 2) != 0)
            arg = shortopt;
        if (o == ':')
            gmt_usage_error(argv[0], "option '%s' needs a value", arg);
        else
            gmt_usage_error(argv[0], "unknown option '%s'", arg);
        return '?';
    }
    return o;
}

/* The long options a command takes (the common ones or --help alone, then
 * its own) and its short options: ":h" and a->shortopts (the ':' tells a
 * missing value from an unknown option). */
#define MAX_OPTIONS 32
static void option_table(const struct gmt_args *a, struct option opts[MAX_OPTIONS],
                         char spec[16])
{
    static const struct option common[] = {GMT_COMMON_LONGOPTS};
    static const struct option help = {"help", no_argument, NULL, OPT_HELP};
    size_t n = 0;
    if (a->only_own)
        opts[n++] = help;
    else
        for (size_t i = 0; i < sizeof common / sizeof *common; i++)
            opts[n++] = common[i];
    for (const struct option *o = a->options; o && o->name && n < MAX_OPTIONS - 1; o++)
        opts[n++] = *o;
    opts[n] = (struct option){NULL, 0, NULL, 0};
    snprintf(spec, 16, ":h%s", a->shortopts ? a->shortopts : "");
}

static const char *g_parsing = "?"; /* the command gmt_args_parse reads */

int gmt_value_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gmt_usage_error(g_parsing, "%s", msg);
}

int gmt_args_parse(int argc, char **argv, const struct gmt_args *a, struct gmt_common *c,
                   void *ctx)
{
    g_parsing = argv[0];
    struct option opts[MAX_OPTIONS];
    char spec[16];
    option_table(a, opts, spec);
    int o;
    optind = 1;
    while ((o = next_option(argc, argv, spec, opts)) != -1) {
        if (o == '?')
            return EXIT_ERROR;
        if (o == 'h' || o == OPT_HELP) {
            a->usage(stdout);
            return gmt_finish_output(EXIT_OK);
        }
        int k = a->option ? a->option(o, optarg, ctx) : 0;
        if (k == 0)
            k = gmt_common_opt(c, o, optarg);
        if (k < 0)
            return EXIT_ERROR;
        if (k == 0)
            return gmt_usage_error(argv[0], "bad option");
    }
    return GMT_PARSED;
}

bool gmt_args_has(int argc, char **argv, const struct gmt_args *a, int id)
{
    struct option opts[MAX_OPTIONS];
    char spec[16];
    option_table(a, opts, spec);
    bool seen = false;
    int saved = opterr, o;
    opterr = 0;
    optind = 1;
    while ((o = getopt_long(argc, argv, spec, opts, NULL)) != -1)
        seen |= o == id;
    opterr = saved;
    optind = 1;
    return seen;
}

int gmt_args_flag(int opt, const char *arg, void *ctx)
{
    (void)arg;
    if (opt < OPT_CMD_BASE)
        return 0;
    *(bool *)ctx = true;
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool looks_like_trace(const char *name)
{
    const char *p = strstr(name, ".gmt");
    return p && (p[4] == '\0' || p[4] == '.');
}

/* A growable list of paths; false when memory ran out. */
static bool list_add(char ***list, size_t *n, size_t *cap, char *path)
{
    if (path == NULL)
        return false;
    if (*n == *cap) {
        char **nl = realloc(*list, (*cap *= 2) * sizeof **list);
        if (nl == NULL) {
            free(path);
            return false;
        }
        *list = nl;
    }
    (*list)[(*n)++] = path;
    return true;
}

/* The *.gmt files of directory `dir`, sorted. -1 after one error line. */
static int list_dir(const char *dir, char ***list, size_t *n, size_t *cap)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        gmt_errorf("%s: cannot read the directory", dir);
        return -1;
    }
    size_t first = *n;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!looks_like_trace(e->d_name))
            continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (p)
            snprintf(p, len, "%s/%s", dir, e->d_name);
        if (!list_add(list, n, cap, p)) {
            closedir(d);
            gmt_errorf("out of memory");
            return -1;
        }
    }
    closedir(d);
    if (*n == first) {
        gmt_errorf("%s: no traces (*.gmt) in this directory", dir);
        return -1;
    }
    qsort(*list + first, *n - first, sizeof **list, cmp_str);
    return 0;
}

/* One argument: a directory, a file, or - when it names nothing and holds
 * a wildcard - a pattern the shell did not expand (quoted, or from a
 * script), whose matches are taken in glob(3)'s sorted order. */
static int list_arg(const char *arg, char ***list, size_t *n, size_t *cap, bool pattern)
{
    struct stat st;
    bool exists = stat(arg, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return list_dir(arg, list, n, cap);
    if (pattern && !exists && strpbrk(arg, "*?[")) {
        glob_t g;
        int rc = glob(arg, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            gmt_errorf("%s: no file matches this pattern", arg);
            return -1;
        }
        if (rc != 0) {
            gmt_errorf("%s: cannot expand this pattern", arg);
            return -1;
        }
        /* a match is taken as it is: not expanded again */
        for (size_t i = 0; i < g.gl_pathc; i++) {
            if (list_arg(g.gl_pathv[i], list, n, cap, false) != 0) {
                globfree(&g);
                return -1;
            }
        }
        globfree(&g);
        return 0;
    }
    if (!list_add(list, n, cap, strdup(arg))) {
        gmt_errorf("out of memory");
        return -1;
    }
    return 0;
}

int gmt_trace_list(int argc, char **argv, char ***out, size_t *n)
{
    size_t cap = 16;
    char **list = malloc(cap * sizeof *list);
    *n = 0;
    if (list == NULL)
        return -1;
    for (int i = 0; i < argc; i++) {
        if (list_arg(argv[i], &list, n, &cap, true) != 0) {
            gmt_trace_list_free(list, *n);
            return -1;
        }
    }
    *out = list;
    return 0;
}

void gmt_trace_list_free(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

struct loaded *gmt_load(const char *path, const struct gmt_common *c,
                        const struct replay_opts *ro)
{
    struct loaded *l = calloc(1, sizeof *l);
    char err[512];
    if (l == NULL) {
        gmt_errorf("%s: out of memory", path);
        return NULL;
    }
    l->path = path;
    if (replay_trace(path, &l->r, ro, err, sizeof err) != 0) {
        gmt_errorf("%s: %s", path, err);
        replay_free(&l->r);
        free(l);
        return NULL;
    }
    if (l->r.cut)
        gmt_warnf("%s: the process ended without closing the trace (killed or "
                  "crashed?); read up to its last complete event", path);
    if (l->r.damage[0])
        gmt_warnf("%s: damaged trace, read where intact: %s", path, l->r.damage);
    char lost[512];
    if (gmt_lost(&l->r.hdr, lost, sizeof lost))
        gmt_warnf("%s: incomplete trace: %s", path, lost);
    l->sym = sym_new(&l->r.defs, !c->no_symbols);
    sym_set_backward(l->sym, l->r.bw);
    return l;
}

/* PyTorch's bridge. The recorder leaves notes (preload/fw.c): "block
 * events recorded" when the bridge attached (and the trace's feature
 * bit), "no block events (WHY); the trace shows its segments..." when it
 * could not be built or attached, PYTORCH_NO_CUDA_MEMORY_CACHING when
 * PyTorch's cache was off. A trace without any of them (the bridge turned
 * off, GPUMEMTRACE_FRAMEWORK=0, or a recorder older than the bridge)
 * still names libc10_cuda.so among its modules when PyTorch was there. */
const char *gmt_fw_missing(const struct replay *r, char *buf, size_t len)
{
    if (r->fw)
        return NULL;
    const struct gmt_defs *d = &r->defs;
    for (size_t i = 0; i < d->nnotes_kept; i++) {
        const char *n = d->notes[i];
        if (strstr(n, "PYTORCH_NO_CUDA_MEMORY_CACHING") || strstr(n, "backend is cudaMallocAsync"))
            return NULL; /* every tensor an allocation of its own: nothing missing */
        const char *why = strstr(n, "no block events (");
        if (why != NULL) {
            why += strlen("no block events (");
            const char *end = strstr(why, "); the trace shows");
            int w = end ? (int)(end - why) : (int)strlen(why);
            snprintf(buf, len, "%.*s", w, why);
            return buf;
        }
    }
    for (size_t i = 0; i < d->nmodules; i++) {
        const char *path = d->modules[i].path;
        const char *base = path ? strrchr(path, '/') : NULL;
        base = base ? base + 1 : path;
        if (base && strncmp(base, "libc10_cuda.so", 14) == 0) {
            snprintf(buf, len, "its block events were not recorded: GPUMEMTRACE_FRAMEWORK=0, "
                               "or a recorder without the bridge");
            return buf;
        }
    }
    return NULL;
}

void gmt_fw_note_of(const char *who, const char *why)
{
    printf("note: %s%sPyTorch's bridge did not attach (%s):\n"
           "      the figures are PyTorch's segments as it took them from CUDA, not its "
           "tensors\n", who ? who : "", who ? ": " : "", why);
}

void gmt_fw_note(const struct replay *r)
{
    char why[512];
    if (gmt_fw_missing(r, why, sizeof why) != NULL)
        gmt_fw_note_of(NULL, why);
}

void gmt_lost_note_of(const char *who, const char *what)
{
    printf("note: %s%sINCOMPLETE TRACE - %s:\n"
           "      the figures and sites cover only what was recorded\n",
           who ? who : "", who ? ": " : "", what);
}

void gmt_header_notes(const struct replay *r)
{
    char what[512];
    if (gmt_lost(&r->hdr, what, sizeof what))
        gmt_lost_note_of(NULL, what);
    gmt_fw_note(r);
}

void gmt_json_trace(const struct loaded *l)
{
    char what[512];
    printf("{\"trace\":");
    gmt_json_str(stdout, l->path);
    gmt_json_lost(&l->r.hdr, what, sizeof what);
}

void gmt_json_lost(const struct gmt_file_header *h, char *buf, size_t len)
{
    if (!gmt_lost(h, buf, len)) {
        printf(",\"lost\":null");
        return;
    }
    printf(",\"lost\":{\"events\":%llu,\"records\":%llu,\"stacks\":%llu,\"why\":[",
           (unsigned long long)h->lost_events, (unsigned long long)h->lost_records,
           (unsigned long long)h->lost_stacks);
    static const struct {
        uint32_t bit;
        const char *name;
    } why[] = {{GMT_LOST_FILE, "file_full"}, {GMT_LOST_CUT, "file_cut"},
               {GMT_LOST_STACK_CAP, "stack_cap"}, {GMT_LOST_TOO_LARGE, "record_too_large"},
               {GMT_LOST_OTHER, "recorder_failed"}};
    bool first = true;
    for (size_t i = 0; i < sizeof why / sizeof *why; i++) {
        if (h->lost_why & why[i].bit) {
            printf("%s\"%s\"", first ? "" : ",", why[i].name);
            first = false;
        }
    }
    printf("],\"error\":");
    if (h->lost_errno)
        gmt_json_str(stdout, strerror(h->lost_errno));
    else
        printf("null");
    printf(",\"text\":");
    gmt_json_str(stdout, buf);
    printf("}");
}

/* The forward line that made an autograd node's input: the
 * node is named for its op (MulBackward0: mul, NativeLayerNormBackward0:
 * native_layer_norm), and when the program made that op at one line
 * only - outside backward - that line is the node's. Ops are gathered
 * from every site once, on first use. */
struct fwd_op {
    const char *op;   /* "aten::mul" */
    const char *line; /* its one line; NULL: several */
    UT_hash_handle hh;
};

static void fwd_make(struct loaded *l)
{
    l->fwd_made = true;
    for (size_t i = 0; i < l->r.nsites; i++) {
        uint32_t id = l->r.sites[i].stack;
        const char *op, *node, *bw;
        sym_site_parts(l->sym, id, &op, &node, &bw);
        if (op == NULL || node != NULL || bw != NULL)
            continue;
        /* the label's line: what comes before " > op" */
        const char *label = sym_site(l->sym, id, GRAIN_LINE, 0);
        const char *gt = strstr(label, " > ");
        if (gt == NULL)
            continue; /* no Python line */
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(gt - label), label);
        struct fwd_op *e;
        HASH_FIND_STR(l->fwd, op, e);
        if (e == NULL) {
            if ((e = calloc(1, sizeof *e)) == NULL)
                continue;
            e->op = op;
            e->line = strdup(line);
            HASH_ADD_KEYPTR(hh, l->fwd, e->op, strlen(e->op), e);
        } else if (e->line && strcmp(e->line, line) != 0) {
            free((char *)e->line);
            e->line = NULL;
        }
    }
}

const char *gmt_forward_line(struct loaded *l, const char *node)
{
    if (!l->fwd_made)
        fwd_make(l);
    /* MulBackward0 -> aten::mul; NativeLayerNormBackward0 -> aten::native_layer_norm */
    const char *end = strstr(node, "Backward");
    if (end == NULL || end == node)
        return NULL;
    char op[160] = "aten::";
    size_t n = strlen(op);
    for (const char *p = node; p < end && n + 2 < sizeof op; p++) {
        if (isupper((unsigned char)*p)) {
            if (p != node)
                op[n++] = '_';
            op[n++] = (char)tolower((unsigned char)*p);
        } else {
            op[n++] = *p;
        }
    }
    op[n] = '\0';
    /* the op itself, or it under an overload the display kept (mean_dim) */
    const char *found = NULL;
    struct fwd_op *e, *t;
    HASH_ITER(hh, l->fwd, e, t) {
        size_t k = strlen(op);
        if (strncmp(e->op, op, k) != 0 || (e->op[k] != '\0' && e->op[k] != '_'))
            continue;
        if (e->line == NULL || (found && strcmp(found, e->line) != 0))
            return NULL; /* made at several lines */
        found = e->line;
    }
    return found;
}

void gmt_unload(struct loaded *l)
{
    if (l == NULL)
        return;
    struct fwd_op *e, *t;
    HASH_ITER(hh, l->fwd, e, t) {
        HASH_DEL(l->fwd, e);
        free((char *)e->line);
        free(e);
    }
    sym_free(l->sym);
    replay_free(&l->r);
    free(l);
}

const char *gmt_size(const struct gmt_common *c, char *buf, int64_t v)
{
    if (v < 0) {
        buf[0] = '-';
        gmt_fmt_bytes(buf + 1, (uint64_t)-v, c->bytes); /* fits: <= 24 chars */
        return buf;
    }
    return gmt_fmt_bytes(buf, (uint64_t)v, c->bytes);
}

const char *gmt_seconds(char *buf, uint64_t ns)
{
    snprintf(buf, 32, "%.3f s", (double)ns / 1e9);
    return buf;
}

/* ---- tables ---------------------------------------------------------------- */

struct table *table_new(int ncols, const char *const *headers, const bool *right)
{
    struct table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->ncols = ncols < TABLE_MAX_COLS ? ncols : TABLE_MAX_COLS;
    for (int i = 0; i < t->ncols; i++) {
        t->headers[i] = headers[i];
        t->right[i] = right ? right[i] : false;
    }
    return t;
}

void table_row(struct table *t, ...)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 32;
        char **n = realloc(t->cells, cap * TABLE_MAX_COLS * sizeof *n);
        if (n == NULL)
            return;
        t->cells = n;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->ncols; i++) {
        const char *s = va_arg(ap, const char *);
        t->cells[t->nrows * TABLE_MAX_COLS + (size_t)i] = strdup(s ? s : "");
    }
    va_end(ap);
    t->nrows++;
}

static int utf8_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

void table_print(struct table *t, bool markdown)
{
    int width[TABLE_MAX_COLS];
    for (int c = 0; c < t->ncols; c++) {
        width[c] = utf8_width(t->headers[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            int w = utf8_width(t->cells[r * TABLE_MAX_COLS + (size_t)c]);
            if (w > width[c])
                width[c] = w;
        }
    }
    for (size_t r = 0; r <= t->nrows + (markdown ? 1 : 0); r++) {
        if (markdown)
            fputs("|", stdout);
        for (int c = 0; c < t->ncols; c++) {
            const char *cell;
            bool sep = markdown && r == 1;
            if (r == 0)
                cell = t->headers[c];
            else if (sep)
                cell = NULL;
            else
                cell = t->cells[(r - 1 - (markdown ? 1 : 0)) * TABLE_MAX_COLS + (size_t)c];
            if (sep) {
                printf(" %s%s |", t->right[c] ? "" : "", t->right[c] ? "---:" : "---");
                continue;
            }
            int pad = width[c] - utf8_width(cell);
            bool last = c == t->ncols - 1;
            if (markdown) {
                fputc(' ', stdout);
                gmt_md_cell(stdout, cell);
                fputs(" |", stdout);
            } else if (t->right[c]) {
                printf("%s%*s%s", c ? "  " : "", pad, "", cell);
            } else {
                printf("%s%s%*s", c ? "  " : "", cell, last ? 0 : pad, "");
            }
        }
        fputs("\n", stdout);
    }
}

void table_free(struct table *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nrows * TABLE_MAX_COLS; i++)
        if (i % TABLE_MAX_COLS < (size_t)t->ncols)
            free(t->cells[i]);
    free(t->cells);
    free(t);
}

/* ---- grouping sites by label ------------------------------------------- */

struct gentry {
    const char *label;
    uint32_t stack;
    int64_t v[GROUP_VALUES];
    UT_hash_handle hh;
};

static int cmp_group(const void *a, const void *b)
{
    const struct group_row *x = a, *y = b;
    if (x->v[0] != y->v[0])
        return x->v[0] > y->v[0] ? -1 : 1;
    return strcmp(x->label, y->label); /* stable for CI diffs */
}

/* Group the picked sites by label (or, with `within`, only those
 * labelled `within`, by their layer). */
static size_t group(struct loaded *l, const struct gmt_common *c,
                    bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                    const char *within, struct group_row **out)
{
    struct gentry *map = NULL, *e, *tmp;
    size_t n = 0;
    for (size_t i = 0; i < l->r.nsites; i++) {
        const struct site *s = &l->r.sites[i];
        int64_t v[GROUP_VALUES] = {0};
        if (!pick(s, v))
            continue;
        const char *label = sym_site(l->sym, s->stack, c->grain, c->depth);
        if (within) {
            if (strcmp(label, within) != 0 || (label = sym_layer(l->sym, s->stack)) == NULL)
                continue;
        }
        HASH_FIND_STR(map, label, e);
        if (e == NULL) {
            if ((e = calloc(1, sizeof *e)) == NULL)
                continue;
            e->label = label;
            e->stack = s->stack;
            HASH_ADD_KEYPTR(hh, map, e->label, strlen(e->label), e);
            n++;
        }
        for (int k = 0; k < GROUP_VALUES; k++)
            e->v[k] += v[k];
    }
    struct group_row *rows = calloc(n ? n : 1, sizeof *rows);
    size_t i = 0;
    HASH_ITER(hh, map, e, tmp) {
        if (rows) {
            rows[i].label = e->label;
            rows[i].stack = e->stack;
            memcpy(rows[i].v, e->v, sizeof e->v);
            i++;
        }
        HASH_DEL(map, e);
        free(e);
    }
    if (rows)
        qsort(rows, n, sizeof *rows, cmp_group);
    *out = rows;
    return rows ? n : 0;
}

size_t gmt_group(struct loaded *l, const struct gmt_common *c,
                 bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                 struct group_row **out)
{
    return group(l, c, pick, NULL, out);
}

size_t gmt_group_layers(struct loaded *l, const struct gmt_common *c,
                        bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                        const char *label, struct group_row **out)
{
    return group(l, c, pick, label, out);
}

void gmt_json_site_parts(struct loaded *l, const struct gmt_common *c,
                         bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                         const struct group_row *row)
{
    const char *op, *node, *bw;
    sym_site_parts(l->sym, row->stack, &op, &node, &bw);
    const char *fwd = node ? gmt_forward_line(l, node) : NULL;
    const char *names[] = {"op", "node", "backward_of", "forward_line"},
               *vals[] = {op, node, bw, fwd};
    for (int i = 0; i < 4; i++)
        if (vals[i]) {
            printf(",\"%s\":", names[i]);
            gmt_json_str(stdout, vals[i]);
        }
    gmt_json_layers(l, c, pick, row->label, "bytes", false);
}

void gmt_json_layers(struct loaded *l, const struct gmt_common *c,
                     bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                     const char *label, const char *bytes_key, bool always)
{
    struct group_row *layers;
    size_t n = gmt_group_layers(l, c, pick, label, &layers);
    if (n || always) {
        printf(",\"layers\":[");
        for (size_t i = 0; i < n; i++) {
            printf("%s{\"layer\":", i ? "," : "");
            gmt_json_str(stdout, layers[i].label);
            printf(",\"%s\":%" PRId64 ",\"allocations\":%" PRId64 "}", bytes_key,
                   layers[i].v[0], layers[i].v[1]);
        }
        printf("]");
    }
    free(layers);
}

bool gmt_group_differ(const struct group_row *rows, size_t n, int a, int b)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].v[a] != rows[i].v[b])
            return true;
    return false;
}

struct table *gmt_sites_table(bool allocated)
{
    static const char *const h[] = {"bytes", "share", "allocations", "site"};
    static const char *const ha[] = {"bytes", "allocated", "share", "allocations", "site"};
    static const bool right[] = {true, true, true, true, false};
    return allocated ? table_new(5, ha, right) : table_new(4, h, right + 1);
}

/* ---- the per-trace command driver ---------------------------------------- */

int gmt_run(int argc, char **argv, const struct gmt_command *cmd, void *ctx)
{
    struct gmt_common c;
    gmt_common_init(&c);
    c.top = cmd->default_top;
    int parsed = gmt_args_parse(argc, argv, &cmd->args, &c, ctx);
    if (parsed != GMT_PARSED)
        return parsed;
    if (optind >= argc)
        return gmt_usage_error(argv[0], "no trace given");
    char **paths;
    size_t np;
    if (gmt_trace_list(argc - optind, argv + optind, &paths, &np) != 0)
        return EXIT_ERROR;
    int rc = EXIT_OK;
    bool wrap = c.json && !cmd->whole; /* the traces list is gmt_run's */
    if (wrap)
        printf("{\"schema\":\"%s\",\"traces\":[", cmd->schema);
    size_t shown = 0;
    for (size_t i = 0; i < np; i++) {
        struct loaded *l = gmt_load(paths[i], &c, &cmd->replay);
        if (l == NULL) {
            rc = EXIT_ERROR;
            continue;
        }
        if (shown && wrap)
            printf(",");
        else if (shown && !cmd->whole)
            printf("\n");
        cmd->each(l, &c, ctx);
        shown++;
        gmt_unload(l);
    }
    if (cmd->done)
        cmd->done(&c, ctx, shown);
    if (wrap)
        printf("]}\n");
    gmt_trace_list_free(paths, np);
    return gmt_finish_output(rc);
}

bool gmt_pick_peak(const struct site *s, int64_t v[GROUP_VALUES])
{
    v[0] = s->peak_bytes;
    v[1] = s->peak_count;
    v[2] = s->peak_alloc_bytes;
    return s->peak_bytes > 0;
}

bool gmt_pick_live(const struct site *s, int64_t v[GROUP_VALUES])
{
    v[0] = s->live_bytes;
    v[1] = s->live_count;
    uint64_t host = s->rare ? s->rare->host_live_bytes : 0;
    v[2] = (int64_t)host;
    return s->live_bytes > 0 || host > 0;
}

bool gmt_pick_transfers(const struct site *site, int64_t v[GROUP_VALUES])
{
    const struct site_rare *s = site->rare; /* NULL: none */
    if (s == NULL)
        return false;
    for (int d = 0; d < 5; d++) {
        v[0] += (int64_t)s->copy_bytes[d];
        v[1] += (int64_t)s->copy_count[d];
    }
    v[2] = (int64_t)s->copy_bytes[GMT_DIR_H2D];
    v[3] = (int64_t)s->copy_bytes[GMT_DIR_D2H];
    v[4] = (int64_t)s->set_bytes;
    v[5] = (int64_t)s->set_count;
    return v[1] > 0 || v[5] > 0;
}
