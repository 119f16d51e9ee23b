/* check_baseline.c - the figures `gpumemreport check` compares, and baselines.
 *
 * A trace gives one process's figures (figures_of, load_figures), with its
 * rank when the trace header records one (format 1.2, GMT_DIST_RANK). A
 * baseline gives, per figure, its largest process's value, and - when
 * every one of its processes has a rank - each rank's figures (a rank of
 * several processes: the largest of them), so that check can compare a
 * multi-rank job rank by rank. Baselines come from traces, from a file
 * written with --save (schema gpumemtrace.check-baseline/1) or from
 * `gpumemreport summary --json` output (gpumemtrace.summary/1);
 * save_baseline writes the first of these schemas. The command itself -
 * options, checks, verdicts, output - is cmd_check.c.
 *
 * Ranks in baseline files: each entry of "traces" may carry "rank", a
 * whole number from 0 to 2^32-1 or null (no rank). Files written before
 * ranks existed have none and read as before (the largest process); the
 * schema stays /1, since a reader that knows nothing of "rank" ignores it.
 * The entries' figures are read (and must be valid) only when every entry
 * has a rank: they are then what the ranks are compared with.
 *
 * A trace's figures also say whether it can be judged as it is
 * (figures_damaged): a trace the process never closed, one the reader
 * read only where intact, one shorter than its writer left it, one whose
 * recorder lost events (a full disk) or stacks (a cap), or one it read
 * nothing from gives figures that are low, or sites that are missing,
 * for no fault of the program - a gate passing on them would pass on a
 * broken artifact.
 *
 * Hostile input: the baseline JSON is read by a small strict parser
 * (RFC 8259 grammar, depth, size and value-count limits, valid UTF-8, no
 * duplicate fields we read, whole non-negative numbers for the figures and
 * ranks): anything else is one error line, never a crash.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "check.h"

#define BASELINE_SCHEMA "gpumemtrace.check-baseline/1"
#define SUMMARY_SCHEMA "gpumemtrace.summary/1"

/* ---- figures ---------------------------------------------------------------- */

const struct metric_info metric_info[NMETRICS] = {
    {"peak_requested", "peak requested", "--max-peak"},
    {"peak_reserved", "peak reserved", "--max-reserved"},
    {"leaked", "leaked at exit", "--max-leaked"},
    {"growth", "growth", "--max-growth"},
    {"growth_per_step", "growth per step", "--max-growth"},
    {"ooms", "out of memory", "--max-ooms"},
};

static int cmp_per_step(const void *a, const void *b)
{
    const struct step_site *x = a, *y = b;
    if (x->per_step != y->per_step)
        return x->per_step > y->per_step ? -1 : 1;
    return strcmp(x->label, y->label);
}

static int64_t round_bytes(double v)
{
    return !(v > 0) ? 0 : v >= 9.2e18 ? INT64_MAX : (int64_t)llround(v);
}

/* Growth: the rate per second (the sum of the growing sites', as
 * `growth` prints it) and, when the run has steps, its sites growing step
 * after step. A run judged by steps is one gmt_growth_steps replayed by
 * steps (*stepped), or whose rows say so. -1: out of memory. */
static int growth_of(struct loaded *l, const struct gmt_common *c, struct figures *f)
{
    struct growth_row *rows;
    struct loaded *stepped;
    size_t n = gmt_growth_steps(l, c, &rows, &stepped);
    double total = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        total += rows[i].bytes_per_s;
    f->v[M_GROWTH] = round_bytes(total);
    f->steps_found = stepped != NULL || (n > 0 && rows[0].by_step);
    f->no_steps_why = f->steps_found ? NULL : l->unjudged;
    f->steps = stepped ? stepped->r.step_count : 0;
    if (f->steps_found && n > 0 && (f->grow = calloc(n, sizeof *f->grow)) == NULL)
        rc = -1;
    for (size_t i = 0; f->grow && i < n; i++) {
        if (!rows[i].by_step)
            continue;
        struct step_site *s = &f->grow[f->ngrow++];
        /* the label is the replay's: it goes with it */
        if ((s->label = strdup(rows[i].label)) == NULL)
            rc = -1;
        s->per_step = round_bytes(rows[i].per_step);
        s->first_step = rows[i].first_step;
    }
    if (rc == 0 && f->ngrow > 1)
        qsort(f->grow, f->ngrow, sizeof *f->grow, cmp_per_step);
    f->v[M_STEP_GROWTH] = rc == 0 && f->ngrow ? f->grow[0].per_step : 0;
    free(rows);
    gmt_unload(stepped);
    return rc;
}

/* What the reader skipped (r->damage) and what it could not see: a
 * closed trace whose file is shorter than the data its writer counted at
 * close (header data_end) lost whole chunks - a copy cut at a chunk's
 * edge, which leaves no partial chunk behind. NULL: nothing, or out of
 * memory (*oom). */
static char *damage_of(const struct loaded *l, bool *oom)
{
    const struct replay *r = &l->r;
    char buf[sizeof r->damage + 160];
    size_t n = 0;
    struct stat st;
    buf[0] = '\0';
    if (r->damage[0])
        n += (size_t)snprintf(buf, sizeof buf, "%s", r->damage);
    if (!r->cut && r->hdr.data_end && stat(l->path, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size < r->hdr.data_end && n < sizeof buf)
        snprintf(buf + n, sizeof buf - n,
                 "%sthe file has %llu of the %llu bytes its writer left%s", n ? "; " : "",
                 (unsigned long long)st.st_size, (unsigned long long)r->hdr.data_end,
                 n ? "" : " (cut while copying?)");
    if (buf[0] == '\0')
        return NULL;
    char *s = strdup(buf);
    *oom = s == NULL;
    return s;
}

/* Fill f from a loaded trace; growth only when asked (it needs the replay
 * with growth series and site labels). -1: out of memory. */
static int figures_of(struct loaded *l, const struct gmt_common *c, bool growth,
                      struct figures *f)
{
    memset(f, 0, sizeof *f);
    const struct replay *r = &l->r;
    bool oom = false;
    f->trace = strdup(l->path);
    f->command = strdup(r->defs.process.present ? r->defs.process.cmdline : "");
    f->pid = r->hdr.pid;
    f->rank = r->hdr.dist_flags & GMT_DIST_RANK ? (int64_t)r->hdr.rank : NO_RANK;
    f->closed = !r->cut;
    f->events = r->events;
    f->damage = damage_of(l, &oom);
    char lost[512];
    if (gmt_lost(&r->hdr, lost, sizeof lost) && (f->lost = strdup(lost)) == NULL)
        oom = true;
    f->v[M_PEAK] = (int64_t)r->peak_requested;
    f->v[M_RESERVED] = (int64_t)r->peak_reserved;
    f->v[M_LEAKED] = (int64_t)replay_leaked(r, NULL, NULL);
    f->v[M_OOMS] = (int64_t)r->ooms_total;
    if (growth && growth_of(l, c, f) != 0)
        oom = true;
    return f->trace && f->command && !oom ? 0 : -1;
}

bool figures_damaged(const struct figures *f, char *buf, size_t len)
{
    if (f->closed && f->damage == NULL && f->lost == NULL)
        return false;
    size_t n = 0;
    const char *sep = "";
#define ADD(...)                                                              \
    do {                                                                      \
        int k_ = snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__);      \
        n += k_ > 0 ? (size_t)k_ : 0;                                         \
        sep = "; ";                                                           \
    } while (0)
    if (len)
        buf[0] = '\0';
    if (f->events == 0)
        ADD("%snothing could be read from it (0 events)", sep);
    if (!f->closed)
        ADD("%snot closed normally (the process was killed or crashed, or is still "
            "running)", sep);
    if (f->damage)
        ADD("%scut short or damaged, read where intact: %s", sep, f->damage);
    if (f->lost)
        ADD("%sincomplete: %s", sep, f->lost);
#undef ADD
    return true;
}

void figures_free(struct figures *f, size_t n)
{
    for (size_t i = 0; f && i < n; i++) {
        free(f[i].trace);
        free(f[i].command);
        free(f[i].damage);
        free(f[i].lost);
        for (size_t k = 0; k < f[i].ngrow; k++)
            free(f[i].grow[k].label);
        free(f[i].grow);
    }
    free(f);
}

/* Load every trace the arguments name, one at a time (a trace's memory is
 * gone before the next is read), keeping only its figures. 0, or -1 after
 * an error line. */
int load_figures(int argc, char **argv, const struct gmt_common *c, bool growth,
                 struct figures **out, size_t *nout)
{
    char **paths;
    size_t np;
    *out = NULL;
    *nout = 0;
    if (gmt_trace_list(argc, argv, &paths, &np) != 0)
        return -1;
    struct figures *f = calloc(np ? np : 1, sizeof *f);
    int rc = f ? 0 : -1;
    if (f == NULL)
        gmt_errorf("out of memory");
    struct replay_opts ro = {.growth = growth};
    size_t n = 0;
    for (size_t i = 0; i < np && rc == 0; i++) {
        struct loaded *l = gmt_load(paths[i], c, &ro);
        if (l == NULL) {
            rc = -1;
            break;
        }
        if (figures_of(l, c, growth, &f[n++]) != 0) {
            gmt_errorf("%s: out of memory", paths[i]);
            rc = -1;
        }
        gmt_unload(l);
    }
    gmt_trace_list_free(paths, np);
    if (rc != 0) {
        figures_free(f, n);
        return -1;
    }
    *out = f;
    *nout = n;
    return 0;
}

/* ---- a small strict JSON reader (baselines) --------------------------------- */

#define JSON_MAX_BYTES (16u << 20)
#define JSON_MAX_DEPTH 64
#define JSON_MAX_VALUES 1000000

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
    enum jtype type;
    bool b;
    char *s;              /* J_STR: decoded UTF-8; J_NUM: the number's text */
    size_t n;             /* J_ARR, J_OBJ: members */
    char **keys;          /* J_OBJ */
    struct jval **items;  /* J_ARR, J_OBJ */
};

struct jparse {
    const unsigned char *p, *end, *start;
    int depth;
    size_t values;
    char err[160];
};

static void jfree(struct jval *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->n; i++) {
        if (v->keys)
            free(v->keys[i]);
        jfree(v->items[i]);
    }
    free(v->keys);
    free(v->items);
    free(v->s);
    free(v);
}

static struct jval *jerr(struct jparse *jp, const char *what)
{
    if (jp->err[0] == '\0')
        snprintf(jp->err, sizeof jp->err, "%s at byte %zu", what,
                 (size_t)(jp->p - jp->start));
    return NULL;
}

static void jws(struct jparse *jp)
{
    while (jp->p < jp->end &&
           (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
        jp->p++;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out)
{
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A string at jp->p (on the opening quote), decoded; NULL on error. The
 * decoded text is never longer than the source. NUL (\u0000) is refused:
 * our strings are C strings. */
static char *jstring(struct jparse *jp)
{
    const unsigned char *q = ++jp->p;
    while (q < jp->end && *q != '"')
        q += *q == '\\' && q + 1 < jp->end ? 2 : 1;
    if (q >= jp->end)
        return (char *)jerr(jp, "unterminated string");
    char *out = malloc((size_t)(q - jp->p) + 1), *o = out;
    if (out == NULL)
        return (char *)jerr(jp, "out of memory");
    while (*jp->p != '"') {
        unsigned c = *jp->p;
        if (c < 0x20) {
            free(out);
            return (char *)jerr(jp, "control character in a string");
        }
        if (c >= 0x80) {
            int len = gmt_utf8_len(jp->p);
            if (len == 0 || jp->p + len > q) {
                free(out);
                return (char *)jerr(jp, "invalid UTF-8 in a string");
            }
            memcpy(o, jp->p, (size_t)len);
            o += len;
            jp->p += len;
            continue;
        }
        if (c != '\\') {
            *o++ = (char)c;
            jp->p++;
            continue;
        }
        c = jp->p[1];
        jp->p += 2;
        const char *simple = strchr("\"\\/bfnrt", (int)c);
        if (c && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            *o++ = map[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp, lo;
        if (c != 'u' || hex4(jp->p, q, &cp) != 0) {
            free(out);
            return (char *)jerr(jp, "bad escape in a string");
        }
        jp->p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair: 12 source bytes */
            if (q - jp->p < 6 || jp->p[0] != '\\' || jp->p[1] != 'u' ||
                hex4(jp->p + 2, q, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff) {
                free(out);
                return (char *)jerr(jp, "lone surrogate in a string");
            }
            jp->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(out);
            return (char *)jerr(jp, "lone surrogate in a string");
        } else if (cp == 0) {
            free(out);
            return (char *)jerr(jp, "NUL in a string");
        }
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else if (cp < 0x800) {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            *o++ = (char)(0xe0 | cp >> 12);
            *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
            *o++ = (char)(0x80 | (cp & 0x3f));
        } else {
            *o++ = (char)(0xf0 | cp >> 18);
            *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
            *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    jp->p++; /* the closing quote */
    *o = '\0';
    return out;
}

static bool jdigit(struct jparse *jp)
{
    return jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9';
}

/* One or more digits, consumed; false if there is none. */
static bool jdigits(struct jparse *jp)
{
    if (!jdigit(jp))
        return false;
    while (jdigit(jp))
        jp->p++;
    return true;
}

static struct jval *jvalue(struct jparse *jp);

/* Append (key, item) to an array or object. */
static int jpush(struct jval *v, char *key, struct jval *item, size_t *cap)
{
    if (v->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        struct jval **ni = realloc(v->items, nc * sizeof *ni);
        if (ni == NULL)
            return -1;
        v->items = ni;
        if (v->type == J_OBJ) {
            char **nk = realloc(v->keys, nc * sizeof *nk);
            if (nk == NULL)
                return -1;
            v->keys = nk;
        }
        *cap = nc;
    }
    if (v->type == J_OBJ)
        v->keys[v->n] = key;
    v->items[v->n++] = item;
    return 0;
}

static struct jval *jcontainer(struct jparse *jp, struct jval *v)
{
    bool obj = v->type == J_OBJ;
    char close = obj ? '}' : ']';
    size_t cap = 0;
    if (++jp->depth > JSON_MAX_DEPTH)
        return jerr(jp, "nested too deeply");
    jp->p++;
    jws(jp);
    if (jp->p < jp->end && *jp->p == close) {
        jp->p++;
        jp->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        jws(jp);
        if (obj) {
            if (jp->p >= jp->end || *jp->p != '"')
                return jerr(jp, "expected a field name");
            if ((key = jstring(jp)) == NULL)
                return NULL;
            jws(jp);
            if (jp->p >= jp->end || *jp->p != ':') {
                free(key);
                return jerr(jp, "expected ':'");
            }
            jp->p++;
        }
        struct jval *item = jvalue(jp);
        if (item == NULL || jpush(v, key, item, &cap) != 0) {
            free(key);
            jfree(item);
            return jerr(jp, "out of memory");
        }
        jws(jp);
        if (jp->p < jp->end && *jp->p == ',') {
            jp->p++;
            continue;
        }
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            jp->depth--;
            return v;
        }
        return jerr(jp, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static struct jval *jvalue(struct jparse *jp)
{
    jws(jp);
    if (jp->p >= jp->end)
        return jerr(jp, "unexpected end");
    if (++jp->values > JSON_MAX_VALUES)
        return jerr(jp, "too many values");
    struct jval *v = calloc(1, sizeof *v);
    if (v == NULL)
        return jerr(jp, "out of memory");
    const unsigned char *at = jp->p;
    size_t left = (size_t)(jp->end - at);
    switch (*at) {
    case '{':
    case '[':
        v->type = *at == '{' ? J_OBJ : J_ARR;
        if (jcontainer(jp, v) == NULL)
            break;
        return v;
    case '"':
        v->type = J_STR;
        if ((v->s = jstring(jp)) == NULL)
            break;
        return v;
    case 't':
    case 'f':
    case 'n': {
        static const char *const words[] = {"true", "false", "null"};
        for (int i = 0; i < 3; i++) {
            size_t wl = strlen(words[i]);
            if (left >= wl && !memcmp(at, words[i], wl)) {
                jp->p += wl;
                v->type = i == 2 ? J_NULL : J_BOOL;
                v->b = i == 0;
                return v;
            }
        }
        jerr(jp, "unknown word");
        break;
    }
    default:
        /* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
        if (*jp->p == '-')
            jp->p++;
        if (!jdigit(jp)) {
            jerr(jp, "unexpected character");
            break;
        }
        if (*jp->p == '0')
            jp->p++;
        else
            while (jdigit(jp))
                jp->p++;
        if (jp->p < jp->end && *jp->p == '.') {
            jp->p++;
            if (!jdigits(jp)) {
                jerr(jp, "bad number");
                break;
            }
        }
        if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
            jp->p++;
            if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
                jp->p++;
            if (!jdigits(jp)) {
                jerr(jp, "bad number");
                break;
            }
        }
        v->type = J_NUM;
        if ((v->s = strndup((const char *)at, (size_t)(jp->p - at))) == NULL) {
            jerr(jp, "out of memory");
            break;
        }
        return v;
    }
    jfree(v);
    return NULL;
}

/* Parse a whole document; NULL with jp->err set. */
static struct jval *jparse(const unsigned char *buf, size_t len, struct jparse *jp)
{
    memset(jp, 0, sizeof *jp);
    jp->p = jp->start = buf;
    jp->end = buf + len;
    if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3)) /* a UTF-8 byte order mark */
        jp->p += 3;
    struct jval *v = jvalue(jp);
    if (v == NULL)
        return NULL;
    jws(jp);
    if (jp->p != jp->end) {
        jfree(v);
        return jerr(jp, "trailing data after the JSON value");
    }
    return v;
}

/* The member `key` of an object: NULL if absent; *dup set when it occurs
 * more than once (which one would be meant?). */
static const struct jval *jget(const struct jval *obj, const char *key, bool *dup)
{
    const struct jval *found = NULL;
    for (size_t i = 0; i < obj->n; i++) {
        if (strcmp(obj->keys[i], key))
            continue;
        if (found)
            *dup = true;
        found = obj->items[i];
    }
    return found;
}

/* Decimal digits only, at most 2^63-1: jint's figures, and --max-ooms's
 * count (cmd_check.c). 0, or -1. */
int parse_count(const char *arg, int64_t *out)
{
    uint64_t v = 0;
    if (*arg == '\0')
        return -1;
    for (const char *p = arg; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return -1; /* above 2^63-1 */
        v = v * 10 + d;
    }
    *out = (int64_t)v;
    return 0;
}

/* A whole non-negative number that fits int64 ("12", not "12.0", "-1", "1e3"). */
static int jint(const struct jval *v, int64_t *out)
{
    if (v == NULL || v->type != J_NUM)
        return -1;
    return parse_count(v->s, out);
}

/* ---- baselines -------------------------------------------------------------- */

static void base_take(struct baseline *b, enum metric m, int64_t v)
{
    if (!b->have[m] || v > b->v[m])
        b->v[m] = v;
    b->have[m] = true;
}

/* The figures a baseline keeps (growth depends on timing: never). */
static const enum metric kept[] = {M_PEAK, M_RESERVED, M_LEAKED, M_OOMS};
#define NKEPT (sizeof kept / sizeof *kept)

/* Processes with ranks, gathered while a baseline is read; rank_finish
 * turns them into b->ranks. `all` stays true while every process seen had
 * a rank. */
struct rank_set {
    struct base_rank *e;
    size_t n, cap;
    bool all;
};

static int rank_add(struct rank_set *rs, int64_t rank, const int64_t v[NMETRICS])
{
    if (rank == NO_RANK) {
        rs->all = false;
        return 0;
    }
    if (rs->n == rs->cap) {
        size_t nc = rs->cap ? 2 * rs->cap : 16;
        struct base_rank *ne = realloc(rs->e, nc * sizeof *ne);
        if (ne == NULL)
            return -1;
        rs->e = ne;
        rs->cap = nc;
    }
    rs->e[rs->n].rank = rank;
    memcpy(rs->e[rs->n].v, v, sizeof rs->e[rs->n].v);
    rs->n++;
    return 0;
}

static int cmp_base_rank(const void *a, const void *b)
{
    int64_t x = ((const struct base_rank *)a)->rank, y = ((const struct base_rank *)b)->rank;
    return (x > y) - (x < y);
}

/* Sort by rank and merge a rank's processes (the largest of each figure).
 * The baseline is ranked only when every process had a rank. */
static void rank_finish(struct rank_set *rs, struct baseline *b)
{
    if (!rs->all || rs->n == 0) {
        free(rs->e);
        return;
    }
    qsort(rs->e, rs->n, sizeof *rs->e, cmp_base_rank);
    size_t w = 0;
    for (size_t i = 0; i < rs->n; i++) {
        if (w > 0 && rs->e[w - 1].rank == rs->e[i].rank) {
            for (int m = 0; m < NMETRICS; m++)
                if (rs->e[i].v[m] > rs->e[w - 1].v[m])
                    rs->e[w - 1].v[m] = rs->e[i].v[m];
        } else {
            rs->e[w++] = rs->e[i];
        }
    }
    b->ranks = rs->e;
    b->nranks = w;
    b->ranked = true;
}

void baseline_free(struct baseline *b)
{
    for (size_t i = 0; i < b->ndamaged; i++) {
        free(b->damaged[i].trace);
        free(b->damaged[i].how);
    }
    free(b->damaged);
    b->damaged = NULL;
    b->ndamaged = 0;
    free(b->ranks);
    b->ranks = NULL;
    b->nranks = 0;
    b->ranked = false;
}

const struct base_rank *baseline_rank(const struct baseline *b, int64_t r)
{
    if (!b->ranked || r == NO_RANK)
        return NULL;
    struct base_rank key = {.rank = r};
    return bsearch(&key, b->ranks, b->nranks, sizeof *b->ranks, cmp_base_rank);
}

/* Read this object's figures into v (the kept ones; the others 0). 0, or
 * -1 with a reason. */
static int base_object(const struct jval *o, int64_t v[NMETRICS], char *why, size_t len)
{
    memset(v, 0, NMETRICS * sizeof *v);
    if (o->type != J_OBJ) {
        snprintf(why, len, "a process entry is not an object");
        return -1;
    }
    for (size_t i = 0; i < NKEPT; i++) {
        bool dup = false;
        const char *key = metric_info[kept[i]].key;
        const struct jval *x = jget(o, key, &dup);
        if (x == NULL || dup || jint(x, &v[kept[i]]) != 0) {
            snprintf(why, len, "\"%s\" is %s", key,
                     x == NULL ? "missing" : dup ? "given twice"
                                 : "not a whole number of bytes from 0 to 2^63-1");
            return -1;
        }
    }
    return 0;
}

/* The "rank" of process entry i (an object): NO_RANK when absent or null.
 * 0, or -1 with a reason. */
static int base_rank_of(const struct jval *o, size_t i, int64_t *rank, char *why,
                        size_t len)
{
    bool dup = false;
    const struct jval *x = jget(o, "rank", &dup);
    int64_t r;
    *rank = NO_RANK;
    if (x == NULL || (x->type == J_NULL && !dup))
        return 0;
    if (dup || jint(x, &r) != 0 || r > (int64_t)UINT32_MAX) {
        snprintf(why, len, "process %zu: \"rank\" is %s", i + 1,
                 dup ? "given twice" : "not a whole number from 0 to 4294967295 (or null)");
        return -1;
    }
    *rank = r;
    return 0;
}

/* A check baseline's "traces" (optional): each entry's rank, and, when
 * every entry has one, each entry's figures for rank-by-rank comparison.
 * 0, or -1 with a reason. */
static int base_entries(const struct jval *tr, struct rank_set *rs, char *why, size_t len)
{
    if (tr->type != J_ARR) {
        snprintf(why, len, "\"traces\" is not a list");
        return -1;
    }
    for (size_t i = 0; i < tr->n; i++) {
        int64_t rank;
        if (tr->items[i]->type != J_OBJ) {
            snprintf(why, len, "a process entry is not an object");
            return -1;
        }
        if (base_rank_of(tr->items[i], i, &rank, why, len) != 0)
            return -1;
        if (rank == NO_RANK)
            rs->all = false;
    }
    for (size_t i = 0; rs->all && i < tr->n; i++) {
        int64_t rank, v[NMETRICS];
        base_rank_of(tr->items[i], i, &rank, why, len);
        if (base_object(tr->items[i], v, why, len) != 0)
            return -1;
        if (rank_add(rs, rank, v) != 0) {
            snprintf(why, len, "out of memory");
            return -1;
        }
    }
    return 0;
}

static int base_json(const char *path, const unsigned char *buf, size_t len,
                     struct baseline *b)
{
    struct jparse jp;
    char why[200] = "";
    struct jval *doc = jparse(buf, len, &jp);
    if (doc == NULL) {
        gmt_errorf("%s: not a valid JSON baseline: %s", path, jp.err);
        return -1;
    }
    int rc = -1;
    bool dup = false;
    struct rank_set rs = {.all = true};
    int64_t v[NMETRICS];
    const struct jval *schema = doc->type == J_OBJ ? jget(doc, "schema", &dup) : NULL;
    if (schema == NULL || schema->type != J_STR || dup) {
        snprintf(why, sizeof why, "no \"schema\" (want %s or %s)", BASELINE_SCHEMA,
                 SUMMARY_SCHEMA);
    } else if (!strcmp(schema->s, BASELINE_SCHEMA)) {
        b->kind = "check baseline";
        b->processes = 1;
        const struct jval *pr = jget(doc, "processes", &dup);
        int64_t np;
        if (pr && !dup && jint(pr, &np) == 0 && np > 0)
            b->processes = (size_t)np;
        else
            snprintf(why, sizeof why, "\"processes\" is missing or not a positive count");
        if (why[0] == '\0' && base_object(doc, v, why, sizeof why) == 0) {
            for (size_t k = 0; k < NKEPT; k++)
                base_take(b, kept[k], v[kept[k]]);
            rc = 0;
        }
        bool tdup = false;
        const struct jval *tr = rc == 0 ? jget(doc, "traces", &tdup) : NULL;
        if (tdup) {
            snprintf(why, sizeof why, "\"traces\" is given twice");
            rc = -1;
        } else if (tr && base_entries(tr, &rs, why, sizeof why) != 0) {
            rc = -1;
        }
    } else if (!strcmp(schema->s, SUMMARY_SCHEMA)) {
        b->kind = "summary";
        const struct jval *tr = jget(doc, "traces", &dup);
        if (tr == NULL || dup || tr->type != J_ARR || tr->n == 0) {
            snprintf(why, sizeof why, "\"traces\" is missing or empty");
        } else {
            rc = 0;
            for (size_t i = 0; i < tr->n && rc == 0; i++) {
                int64_t rank;
                rc = base_object(tr->items[i], v, why, sizeof why);
                if (rc == 0)
                    rc = base_rank_of(tr->items[i], i, &rank, why, sizeof why);
                if (rc == 0 && rank_add(&rs, rank, v) != 0) {
                    snprintf(why, sizeof why, "out of memory");
                    rc = -1;
                }
                for (size_t k = 0; rc == 0 && k < NKEPT; k++)
                    base_take(b, kept[k], v[kept[k]]);
            }
            b->processes = tr->n;
        }
    } else {
        char shown[64];
        snprintf(shown, sizeof shown, "%s", schema->s);
        for (char *p = shown; *p; p++) /* keep the error line one clean line */
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
        snprintf(why, sizeof why, "schema \"%s\" is not a baseline (want %s or %s)",
                 shown, BASELINE_SCHEMA, SUMMARY_SCHEMA);
    }
    if (rc == 0)
        rank_finish(&rs, b);
    else
        free(rs.e);
    if (rc != 0)
        gmt_errorf("%s: not a usable baseline: %s", path, why);
    jfree(doc);
    return rc;
}

/* Does the open file f start, past a UTF-8 byte order mark and white
 * space, with '{' or '[': is it a JSON baseline rather than a trace? */
static bool starts_as_json(FILE *f)
{
    unsigned char head[4096]; /* enough to see past leading white space */
    size_t got = fread(head, 1, sizeof head, f);
    size_t i = got >= 3 && !memcmp(head, "\xef\xbb\xbf", 3) ? 3 : 0;
    while (i < got && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' ||
                       head[i] == '\n'))
        i++;
    return i < got && (head[i] == '{' || head[i] == '[');
}

/* A JSON baseline open as f, read whole (its size as stat saw it; a file
 * that changes meanwhile is read up to that size and then parsed); f is
 * closed. 0, or -1 after an error line. */
static int base_json_file(const char *path, FILE *f, off_t size, struct baseline *b)
{
    if (size > (off_t)JSON_MAX_BYTES) {
        fclose(f);
        gmt_errorf("%s: baseline larger than %u MiB", path, JSON_MAX_BYTES >> 20);
        return -1;
    }
    size_t cap = (size_t)size, len = 0;
    unsigned char *buf = malloc(cap + 1);
    if (buf == NULL) {
        fclose(f);
        gmt_errorf("%s: out of memory", path);
        return -1;
    }
    rewind(f);
    while (len < cap) {
        size_t r = fread(buf + len, 1, cap - len, f);
        if (r == 0)
            break;
        len += r;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    buf[len] = '\0'; /* not needed by the parser, which is bounded by len */
    int rc = -1;
    if (bad)
        gmt_errorf("%s: cannot read the baseline", path);
    else
        rc = base_json(path, buf, len, b);
    free(buf);
    return rc;
}

/* A baseline of traces (one, or a directory of them): the largest
 * process's figures, each rank's, and which traces are damaged. 0, or -1
 * after an error line. */
static int base_traces(const char *path, const struct gmt_common *c, struct baseline *b)
{
    struct figures *f;
    size_t n;
    char *arg = (char *)path;
    if (load_figures(1, &arg, c, false, &f, &n) != 0)
        return -1;
    struct rank_set rs = {.all = true};
    int rc = (b->damaged = calloc(n ? n : 1, sizeof *b->damaged)) ? 0 : -1;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < NKEPT; k++)
            base_take(b, kept[k], f[i].v[kept[k]]);
        if (rank_add(&rs, f[i].rank, f[i].v) != 0)
            rc = -1;
        /* the command refuses a damaged baseline as it does a damaged run */
        char how[1024];
        if (rc == 0 && figures_damaged(&f[i], how, sizeof how)) {
            struct base_damage *d = &b->damaged[b->ndamaged++];
            d->trace = strdup(f[i].trace);
            d->how = strdup(how);
            if (d->trace == NULL || d->how == NULL)
                rc = -1;
        }
    }
    b->processes = n;
    b->kind = "traces";
    figures_free(f, n);
    if (rc != 0) {
        free(rs.e);
        gmt_errorf("%s: out of memory", path);
        return -1;
    }
    rank_finish(&rs, b);
    return 0;
}

/* BASE: a directory (traces), a JSON file (first character '{' or '['),
 * or a trace. 0, or -1 after an error line. */
int load_baseline(const char *path, const struct gmt_common *c, struct baseline *b)
{
    memset(b, 0, sizeof *b);
    struct stat st;
    if (stat(path, &st) != 0) {
        gmt_errorf("%s: cannot read the baseline: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISREG(st.st_mode)) {
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            gmt_errorf("%s: cannot read the baseline: %s", path, strerror(errno));
            return -1;
        }
        if (starts_as_json(f))
            return base_json_file(path, f, st.st_size, b);
        fclose(f);
    }
    /* traces: the largest process's figures, and each rank's */
    return base_traces(path, c, b);
}

/* --save FILE: this run's figures, in the schema load_baseline reads.
 * The top-level figures are the largest process's, as a baseline made
 * from the traces themselves would give; each process's entry has its
 * rank (null: none), which makes the file a rank-by-rank baseline when
 * every process has one. 0, or -1 after an error line. */
int save_baseline(const char *path, const struct figures *f, size_t n)
{
    FILE *o = fopen(path, "w");
    if (o == NULL) {
        gmt_errorf("%s: cannot write the baseline: %s", path, strerror(errno));
        return -1;
    }
    int64_t top[NMETRICS] = {0};
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < NMETRICS; m++)
            if (f[i].v[m] > top[m])
                top[m] = f[i].v[m];
    fprintf(o, "{\"schema\":\"%s\",\"processes\":%zu", BASELINE_SCHEMA, n);
    for (size_t k = 0; k < NKEPT; k++)
        fprintf(o, ",\"%s\":%" PRId64, metric_info[kept[k]].key, top[kept[k]]);
    fprintf(o, ",\"traces\":[");
    for (size_t i = 0; i < n; i++) {
        fprintf(o, "%s{\"trace\":", i ? "," : "");
        gmt_json_str(o, f[i].trace);
        fprintf(o, ",\"pid\":%u", f[i].pid);
        if (f[i].rank == NO_RANK)
            fprintf(o, ",\"rank\":null");
        else
            fprintf(o, ",\"rank\":%" PRId64, f[i].rank);
        fprintf(o, ",\"command\":");
        gmt_json_str(o, f[i].command);
        fprintf(o, ",\"closed\":%s,\"damage\":", f[i].closed ? "true" : "false");
        char how[1024];
        if (figures_damaged(&f[i], how, sizeof how))
            gmt_json_str(o, how);
        else
            fprintf(o, "null");
        for (size_t k = 0; k < NKEPT; k++)
            fprintf(o, ",\"%s\":%" PRId64, metric_info[kept[k]].key, f[i].v[kept[k]]);
        fprintf(o, "}");
    }
    fprintf(o, "]}\n");
    bool bad = ferror(o) != 0;
    if (fclose(o) != 0 || bad) {
        gmt_errorf("%s: cannot write the baseline: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
