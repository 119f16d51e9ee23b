/* cmd_check.c - `gpumemreport check`: the CI memory-regression gate.
 *
 *   gpumemreport check [limits] [--baseline BASE [--tolerance PCT]
 *                      [--metric M]] [--save FILE] TRACE|DIR...
 *
 * A CI job runs its workload under the tracer and then this command; the
 * exit status is the verdict: 0 every check passed, 1 a check failed (a
 * regression), 2 an error - bad arguments, a trace or baseline that cannot
 * be read, or no check asked for at all (a gate that checks nothing must
 * not pass silently).
 *
 * Figures, per process (trace):
 *   peak requested  the most device (and managed) memory the program had
 *                   asked for at once. The default gate: for a
 *                   deterministic program it is the same from run to run,
 *                   unlike what the allocator reserved or what the driver
 *                   reports.
 *   peak reserved   the most the process held from the driver for it (the
 *                   pool's segments, or the allocations themselves).
 *   leaked          device and managed bytes still allocated at exit (as
 *                   `summary` and `leaks` count them; a trace cut short by
 *                   a killed process counts what was live when it died).
 *   growth          bytes per second of steady growth: the sum of the
 *                   rates of the sites growth.c finds growing (as `growth`
 *                   prints it). It depends on timing; gate it with a
 *                   generous limit.
 *   out of memory   allocations that failed for lack of memory.
 *
 * Limits: --max-peak, --max-reserved, --max-leaked SIZE; --max-growth
 * RATE; --max-ooms N. A check passes when its value is at most the limit.
 * Out-of-memory failures are always checked: when --max-ooms is not given
 * the limit is 0 (an OOM is a failure even if the program recovered from
 * it - most don't, and one that does is on the edge).
 *
 * Baseline: --baseline BASE, BASE a trace, a directory of traces, a file
 * this command wrote with --save (schema gpumemtrace.check-baseline/1) or
 * `gpumemreport summary --json` output. Each figure chosen with --metric
 * (peak, reserved, leaked; default all three - growth is too dependent on
 * timing to compare, OOMs have their own limit) fails when it exceeds the
 * baseline's by more than the tolerance: value > baseline * (1 + PCT/100),
 * default 5%. A baseline of several processes gives, per figure, its
 * largest process's value.
 *
 * --save FILE writes this run's figures (every process's, and the largest
 * of each) in the baseline schema, whatever the verdict; with --save alone
 * the command records a baseline and runs only the default OOM check.
 * Everything is read before anything is printed: on an error (exit 2) the
 * output is one line on stderr and nothing on stdout.
 *
 * Several traces (the processes of one run): every process is checked
 * against every limit and against the baseline, one row each, and the
 * worst decides the exit status. Rows follow the trace arguments (a
 * directory's traces sorted by name),
 * then in the order of the figures above, limits before baselines.
 *
 * SIZE: a number of bytes, optionally with a fraction and a unit (case
 * does not matter, spaces between number and unit allowed): B; K, KiB =
 * 1024; KB = 1000; M, MiB = 1024^2; MB = 1000^2; G, GiB; GB; T, TiB; TB
 * (the bare letter is binary, as in SIM_CUDA_MEM and most GPU tools). At
 * most 6 digits after the point, rounded down to whole bytes, at most
 * 2^63-1. RATE is a SIZE optionally followed by "/s" (bytes per second).
 *
 * Hostile input: the baseline JSON is read by a small strict parser
 * (RFC 8259 grammar, depth, size and value-count limits, valid UTF-8, no
 * duplicate fields we read, whole non-negative numbers for the figures):
 * anything else is one error line and exit 2, never a crash.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

#define BASELINE_SCHEMA "gpumemtrace.check-baseline/1"
#define SUMMARY_SCHEMA "gpumemtrace.summary/1"
#define DEFAULT_TOLERANCE 5.0

/* ---- figures ---------------------------------------------------------------- */

enum metric { M_PEAK, M_RESERVED, M_LEAKED, M_GROWTH, M_OOMS, NMETRICS };

static const struct {
    const char *key;  /* JSON name */
    const char *name; /* for people */
    const char *opt;  /* the limit's option */
} metric_info[NMETRICS] = {
    {"peak_requested", "peak requested", "--max-peak"},
    {"peak_reserved", "peak reserved", "--max-reserved"},
    {"leaked", "leaked at exit", "--max-leaked"},
    {"growth", "growth", "--max-growth"},
    {"ooms", "out of memory", "--max-ooms"},
};

/* One process's figures. Growth is in bytes per second, rounded. */
struct figures {
    char *trace, *command; /* owned */
    uint32_t pid;
    bool closed;
    int64_t v[NMETRICS];
};

static int64_t leaked(const struct replay *r)
{
    uint64_t bytes = 0;
    REPLAY_FOREACH_LIVE(r, l)
        if (l->mem != MEM_HOST)
            bytes += l->size;
    return (int64_t)bytes;
}

/* Fill f from a loaded trace; growth only when asked (it needs the replay
 * with growth series and site labels). -1: out of memory. */
static int figures_of(struct loaded *l, const struct gmt_common *c, bool growth,
                      struct figures *f)
{
    memset(f, 0, sizeof *f);
    const struct replay *r = &l->r;
    f->trace = strdup(l->path);
    f->command = strdup(r->defs.process.present ? r->defs.process.cmdline : "");
    f->pid = r->hdr.pid;
    f->closed = !r->cut;
    f->v[M_PEAK] = (int64_t)r->peak_requested;
    f->v[M_RESERVED] = (int64_t)r->peak_reserved;
    f->v[M_LEAKED] = leaked(r);
    f->v[M_OOMS] = (int64_t)r->ooms_total;
    if (growth) {
        struct growth_row *rows;
        size_t n = gmt_growth(l, c, &rows);
        double total = 0;
        for (size_t i = 0; i < n; i++)
            total += rows[i].bytes_per_s;
        free(rows);
        f->v[M_GROWTH] = !(total > 0) ? 0 : total >= 9.2e18 ? INT64_MAX
                                                             : (int64_t)llround(total);
    }
    return f->trace && f->command ? 0 : -1;
}

static void figures_free(struct figures *f, size_t n)
{
    for (size_t i = 0; f && i < n; i++) {
        free(f[i].trace);
        free(f[i].command);
    }
    free(f);
}

/* Load every trace the arguments name, one at a time (a trace's memory is
 * gone before the next is read), keeping only its figures. 0, or -1 after
 * an error line. */
static int load_figures(int argc, char **argv, const struct gmt_common *c, bool growth,
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

/* ---- SIZE, RATE, counts, percentages ---------------------------------------- */

struct unit {
    const char *name;
    uint64_t mult;
};
static const struct unit units[] = {
    {"", 1}, {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
};

/* Parse SIZE (rate: RATE, "/s" allowed at the end) into bytes. 0, or -1
 * with the reason in why (a static string). */
static int parse_size(const char *arg, bool rate, int64_t *out, const char **why)
{
    static const char *const units_help =
        "a number of bytes, optionally with a unit: B, K, KiB, KB, M, MiB, MB, G, "
        "GiB, GB, T, TiB, TB (e.g. 512MiB, 1.5G)";
    const char *p = arg;
    uint64_t ip = 0, frac = 0, scale = 1;
    int digits = 0, fdigits = 0;
    *why = units_help;
    while (*p >= '0' && *p <= '9') {
        if (ip > (UINT64_MAX - 9) / 10) {
            *why = "too large (at most 2^63-1 bytes)";
            return -1;
        }
        ip = ip * 10 + (uint64_t)(*p++ - '0');
        digits++;
    }
    if (digits == 0) {
        if (*p == '-')
            *why = "a size cannot be negative";
        return -1;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (++fdigits > 6) {
                *why = "at most 6 digits after the point";
                return -1;
            }
            frac = frac * 10 + (uint64_t)(*p++ - '0');
            scale *= 10;
        }
        if (fdigits == 0)
            return -1;
    }
    while (*p == ' ')
        p++;
    char u[8];
    size_t ul = 0;
    while (isalpha((unsigned char)*p) && ul < sizeof u - 1)
        u[ul++] = (char)tolower((unsigned char)*p++);
    u[ul] = '\0';
    if (p[0] == '/' && p[1] == 's' && p[2] == '\0') {
        if (!rate) {
            *why = "a rate (/s) is for --max-growth; a size has no /s";
            return -1;
        }
        p += 2;
    }
    if (*p != '\0')
        return -1;
    const struct unit *un = NULL;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(u, units[i].name))
            un = &units[i];
    if (un == NULL) {
        *why = "unknown unit; the units are B, K, KiB, KB, M, MiB, MB, G, GiB, GB, "
               "T, TiB, TB (K = KiB = 1024, KB = 1000)";
        return -1;
    }
    /* exact: ip*mult + frac*mult/scale, with frac < 10^6 and mult <= 10^12 */
    if (ip > (uint64_t)INT64_MAX / un->mult) {
        *why = "too large (at most 2^63-1 bytes)";
        return -1;
    }
    uint64_t v = ip * un->mult, part = frac * un->mult / scale;
    if (part > (uint64_t)INT64_MAX - v) {
        *why = "too large (at most 2^63-1 bytes)";
        return -1;
    }
    *out = (int64_t)(v + part);
    return 0;
}

static int parse_count(const char *arg, int64_t *out)
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

/* PCT: a non-negative decimal, optionally ending in "%", at most 10000. */
static int parse_pct(const char *arg, double *out)
{
    size_t len = strlen(arg), digits = 0, dots = 0;
    if (len && arg[len - 1] == '%')
        len--;
    for (size_t i = 0; i < len; i++) {
        if (arg[i] == '.')
            dots++;
        else if (arg[i] >= '0' && arg[i] <= '9')
            digits++;
        else
            return -1;
    }
    if (digits == 0 || dots > 1 || len > 32 || arg[0] == '.' || arg[len - 1] == '.')
        return -1;
    char buf[40];
    memcpy(buf, arg, len);
    buf[len] = '\0';
    *out = strtod(buf, NULL);
    return *out <= 10000.0 ? 0 : -1;
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
            if (!jdigit(jp)) {
                jerr(jp, "bad number");
                break;
            }
            while (jdigit(jp))
                jp->p++;
        }
        if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
            jp->p++;
            if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
                jp->p++;
            if (!jdigit(jp)) {
                jerr(jp, "bad number");
                break;
            }
            while (jdigit(jp))
                jp->p++;
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

/* A whole non-negative number that fits int64 ("12", not "12.0", "-1", "1e3"). */
static int jint(const struct jval *v, int64_t *out)
{
    if (v == NULL || v->type != J_NUM)
        return -1;
    return parse_count(v->s, out);
}

/* ---- baselines -------------------------------------------------------------- */

/* Baseline figures: the largest process's value for each figure. */
struct baseline {
    bool have[NMETRICS];
    int64_t v[NMETRICS];
    size_t processes;
    const char *kind; /* "traces", "check baseline", "summary" */
};

static void base_take(struct baseline *b, enum metric m, int64_t v)
{
    if (!b->have[m] || v > b->v[m])
        b->v[m] = v;
    b->have[m] = true;
}

/* Read this object's figures into b. 0, or -1 with a reason. */
static int base_object(const struct jval *o, struct baseline *b, char *why, size_t len)
{
    static const enum metric need[] = {M_PEAK, M_RESERVED, M_LEAKED, M_OOMS};
    if (o->type != J_OBJ) {
        snprintf(why, len, "a process entry is not an object");
        return -1;
    }
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        bool dup = false;
        const char *key = metric_info[need[i]].key;
        const struct jval *v = jget(o, key, &dup);
        int64_t x;
        if (v == NULL || dup || jint(v, &x) != 0) {
            snprintf(why, len, "\"%s\" is %s", key,
                     v == NULL ? "missing" : dup ? "given twice"
                                 : "not a whole number of bytes from 0 to 2^63-1");
            return -1;
        }
        base_take(b, need[i], x);
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
        if (why[0] == '\0' && base_object(doc, b, why, sizeof why) == 0)
            rc = 0;
    } else if (!strcmp(schema->s, SUMMARY_SCHEMA)) {
        b->kind = "summary";
        const struct jval *tr = jget(doc, "traces", &dup);
        if (tr == NULL || dup || tr->type != J_ARR || tr->n == 0) {
            snprintf(why, sizeof why, "\"traces\" is missing or empty");
        } else {
            rc = 0;
            for (size_t i = 0; i < tr->n && rc == 0; i++)
                rc = base_object(tr->items[i], b, why, sizeof why);
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
    if (rc != 0)
        gmt_errorf("%s: not a usable baseline: %s", path, why);
    jfree(doc);
    return rc;
}

/* BASE: a directory (traces), a JSON file (first character '{' or '['),
 * or a trace. 0, or -1 after an error line. */
static int load_baseline(const char *path, const struct gmt_common *c, struct baseline *b)
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
        unsigned char head[4096]; /* enough to see past leading white space */
        size_t got = fread(head, 1, sizeof head, f);
        size_t i = got >= 3 && !memcmp(head, "\xef\xbb\xbf", 3) ? 3 : 0;
        while (i < got && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' ||
                           head[i] == '\n'))
            i++;
        if (i < got && (head[i] == '{' || head[i] == '[')) {
            /* JSON: read it whole (its size as stat saw it; a file that
             * changes meanwhile is read up to that size and then parsed) */
            if (st.st_size > (off_t)JSON_MAX_BYTES) {
                fclose(f);
                gmt_errorf("%s: baseline larger than %u MiB", path, JSON_MAX_BYTES >> 20);
                return -1;
            }
            size_t cap = (size_t)st.st_size, len = 0;
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
        fclose(f);
    }
    /* traces: the largest process's figures */
    struct figures *f;
    size_t n;
    char *arg = (char *)path;
    if (load_figures(1, &arg, c, false, &f, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        for (int m = 0; m < NMETRICS; m++)
            if (m != M_GROWTH)
                base_take(b, (enum metric)m, f[i].v[m]);
    b->processes = n;
    b->kind = "traces";
    figures_free(f, n);
    return 0;
}

/* --save FILE: this run's figures, in the schema load_baseline reads.
 * The top-level figures are the largest process's, as a baseline made
 * from the traces themselves would give. 0, or -1 after an error line. */
static int save_baseline(const char *path, const struct figures *f, size_t n)
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
    static const enum metric keep[] = {M_PEAK, M_RESERVED, M_LEAKED, M_OOMS};
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++)
        fprintf(o, ",\"%s\":%" PRId64, metric_info[keep[k]].key, top[keep[k]]);
    fprintf(o, ",\"traces\":[");
    for (size_t i = 0; i < n; i++) {
        fprintf(o, "%s{\"trace\":", i ? "," : "");
        gmt_json_str(o, f[i].trace);
        fprintf(o, ",\"pid\":%u,\"command\":", f[i].pid);
        gmt_json_str(o, f[i].command);
        fprintf(o, ",\"closed\":%s", f[i].closed ? "true" : "false");
        for (size_t k = 0; k < sizeof keep / sizeof *keep; k++)
            fprintf(o, ",\"%s\":%" PRId64, metric_info[keep[k]].key, f[i].v[keep[k]]);
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

/* ---- checks ----------------------------------------------------------------- */

struct options {
    bool has_limit[NMETRICS];
    int64_t limit[NMETRICS];
    const char *baseline, *save;
    bool tolerance_given, metric_given;
    double tolerance;
    bool metric[NMETRICS]; /* compared with the baseline */
};

struct row {
    enum metric m;
    size_t trace;
    bool from_baseline, implicit;
    int64_t limit, value, base;
    bool passed;
};

/* The baseline's value plus the tolerance, rounded down: value passes
 * when value <= this (for whole numbers the same as value <= base*(1+t)). */
static int64_t allowed(int64_t base, double tolerance)
{
    long double x = (long double)base * (100.0L + (long double)tolerance) / 100.0L;
    x = floorl(x);
    return x >= (long double)INT64_MAX ? INT64_MAX : (int64_t)x;
}

static const char *value_fmt(const struct gmt_common *c, char *buf, enum metric m,
                             int64_t v)
{
    if (m == M_OOMS) {
        snprintf(buf, 48, "%" PRId64, v);
        return buf;
    }
    gmt_size(c, buf, v);
    if (m == M_GROWTH)
        strcat(buf, "/s"); /* buf has 48 bytes, sizes at most 25 */
    return buf;
}

static void limit_fmt(const struct gmt_common *c, const struct options *op,
                      const struct row *r, char *buf, size_t len)
{
    char a[48], b[48];
    if (r->from_baseline)
        snprintf(buf, len, "baseline %s +%g%% = %s", value_fmt(c, a, r->m, r->base),
                 op->tolerance, value_fmt(c, b, r->m, r->limit));
    else
        snprintf(buf, len, "max %s%s", value_fmt(c, a, r->m, r->limit),
                 r->implicit ? " (default)" : "");
}

static void explain(const struct gmt_common *c, const struct options *op,
                    const struct figures *f, const struct row *r, bool md)
{
    char v[48], over[48], lim[160], share[32] = "";
    limit_fmt(c, op, r, lim, sizeof lim);
    value_fmt(c, over, r->m, r->value - r->limit);
    if (r->limit > 0) {
        double pc = 100.0 * (double)(r->value - r->limit) / (double)r->limit;
        snprintf(share, sizeof share, pc < 1 ? " (%.3f%%)" : " (%.1f%%)", pc);
    }
    if (md)
        printf("- **%s** in `%s` (pid %u): %s is %s%s above %s\n", metric_info[r->m].name,
               f->trace, f->pid, value_fmt(c, v, r->m, r->value), over, share, lim);
    else
        printf("FAIL %s in %s (pid %u): %s is %s%s above %s\n", metric_info[r->m].name,
               f->trace, f->pid, value_fmt(c, v, r->m, r->value), over, share, lim);
}

static void print_text(const struct gmt_common *c, const struct options *op,
                       const struct figures *f, size_t nf, const struct row *rows,
                       size_t nrows, size_t failed, const struct baseline *b)
{
    bool md = c->markdown;
    if (md)
        printf("## gpumemtrace check: %s\n\n", failed ? "FAIL" : "PASS");
    else
        printf("gpumemtrace check: %s\n", failed ? "FAIL" : "PASS");
    if (failed)
        printf("%zu of %zu checks failed", failed, nrows);
    else
        printf("all %zu checks passed", nrows);
    printf(", %zu trace%s", nf, nf == 1 ? "" : "s");
    if (op->baseline)
        printf(", baseline %s%s%s (%s, %zu process%s)", md ? "`" : "", op->baseline,
               md ? "`" : "", b->kind, b->processes, b->processes == 1 ? "" : "es");
    printf(".\n\n");
    static const char *const h[] = {"check", "trace", "pid", "limit or baseline", "value",
                                    "verdict"};
    static const bool right[] = {false, false, true, false, true, false};
    struct table *t = table_new(6, h, right);
    for (size_t i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        char pid[16], lim[160], v[48];
        snprintf(pid, sizeof pid, "%u", f[r->trace].pid);
        limit_fmt(c, op, r, lim, sizeof lim);
        table_row(t, metric_info[r->m].name, f[r->trace].trace, pid, lim,
                  value_fmt(c, v, r->m, r->value),
                  r->passed ? "PASS" : md ? "**FAIL**" : "FAIL");
    }
    table_print(t, md);
    table_free(t);
    if (failed) {
        printf("\n");
        for (size_t i = 0; i < nrows; i++)
            if (!rows[i].passed)
                explain(c, op, &f[rows[i].trace], &rows[i], md);
    }
    if (md)
        printf("\nA check fails when its value is above its limit, or above its "
               "baseline by more than the tolerance. Peak requested: the most device "
               "memory the program asked for at once; peak reserved: what the process "
               "held from the driver; leaked: device memory still allocated at exit; "
               "growth: steady rise in bytes per second; out of memory: failed "
               "allocations.\n");
}

static void print_json(const struct options *op, const struct figures *f, size_t nf,
                       const struct row *rows, size_t nrows, size_t failed,
                       const struct baseline *b)
{
    printf("{\"schema\":\"gpumemtrace.check/1\",\"passed\":%s,\"checks_run\":%zu"
           ",\"checks_failed\":%zu,\"baseline\":",
           failed ? "false" : "true", nrows, failed);
    if (op->baseline) {
        printf("{\"source\":");
        gmt_json_str(stdout, op->baseline);
        printf(",\"kind\":\"%s\",\"processes\":%zu,\"tolerance_pct\":%.10g",
               b->kind, b->processes, op->tolerance);
        for (int m = 0; m < NMETRICS; m++)
            if (b->have[m])
                printf(",\"%s\":%" PRId64, metric_info[m].key, b->v[m]);
        printf("}");
    } else {
        printf("null");
    }
    printf(",\"saved\":");
    if (op->save)
        gmt_json_str(stdout, op->save);
    else
        printf("null");
    printf(",\"traces\":[");
    for (size_t i = 0; i < nf; i++) {
        printf("%s{\"trace\":", i ? "," : "");
        gmt_json_str(stdout, f[i].trace);
        printf(",\"pid\":%u,\"command\":", f[i].pid);
        gmt_json_str(stdout, f[i].command);
        printf(",\"closed\":%s", f[i].closed ? "true" : "false");
        for (int m = 0; m < NMETRICS; m++)
            if (m != M_GROWTH || op->has_limit[M_GROWTH])
                printf(",\"%s\":%" PRId64, m == M_GROWTH ? "growth_bytes_per_s"
                                                         : metric_info[m].key, f[i].v[m]);
        printf("}");
    }
    printf("],\"checks\":[");
    for (size_t i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        printf("%s{\"check\":\"%s\",\"trace\":", i ? "," : "", metric_info[r->m].key);
        gmt_json_str(stdout, f[r->trace].trace);
        printf(",\"pid\":%u,\"source\":\"%s\",\"limit\":%" PRId64 ",\"value\":%" PRId64,
               f[r->trace].pid,
               r->from_baseline ? "baseline" : r->implicit ? "default" : "limit",
               r->limit, r->value);
        if (r->from_baseline)
            printf(",\"baseline\":%" PRId64 ",\"tolerance_pct\":%.10g", r->base,
                   op->tolerance);
        printf(",\"passed\":%s}", r->passed ? "true" : "false");
    }
    printf("]}\n");
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s check [limits] [--baseline BASE [--tolerance PCT] [--metric M]]\n"
            "                [--save FILE] [options] TRACE|DIR...\n\n"
            "The CI memory gate. Exit status 0: every check passed; 1: a check\n"
            "failed; 2: error (bad arguments, unreadable trace or baseline, no check).\n\n"
            "limits (a check passes when the value is at most the limit):\n"
            "  --max-peak SIZE      peak requested device memory\n"
            "  --max-reserved SIZE  peak reserved device memory\n"
            "  --max-leaked SIZE    device memory still allocated at exit\n"
            "  --max-growth RATE    steady growth, bytes per second (e.g. 10MiB/s)\n"
            "  --max-ooms N         out-of-memory failures (default 0: any OOM fails)\n"
            "baseline:\n"
            "  --baseline BASE      a trace, a directory of traces, a --save file or\n"
            "                       'summary --json' output; a figure fails when above\n"
            "                       the baseline's (largest process's) by more than PCT\n"
            "  --tolerance PCT      allowed rise in percent (default 5)\n"
            "  --metric M           peak, reserved, leaked or all (default), or a\n"
            "                       comma-separated list\n"
            "  --save FILE          write this run's figures as a baseline (JSON)\n\n"
            "SIZE: bytes, or a number with B, K/KiB (1024), KB (1000), M/MiB, MB,\n"
            "G/GiB, GB, T/TiB, TB; RATE: a SIZE, optionally ending in /s.\n"
            "Several traces: every process is checked; the worst decides.\n\n"
            "  --json          machine-readable output\n"
            "  --markdown      Markdown (a CI job summary)\n"
            "  --bytes         exact byte counts instead of KiB/MiB/GiB\n"
            "  --group G, --depth N, --no-symbols  site grouping for growth\n",
            gmt_prog);
}

enum {
    OPT_MAX_PEAK = OPT_CMD_BASE,
    OPT_MAX_RESERVED,
    OPT_MAX_LEAKED,
    OPT_MAX_GROWTH,
    OPT_MAX_OOMS,
    OPT_BASELINE,
    OPT_TOLERANCE,
    OPT_METRIC,
    OPT_SAVE,
};

static int parse_metrics(const char *arg, bool metric[NMETRICS])
{
    memset(metric, 0, NMETRICS * sizeof *metric);
    const char *p = arg;
    do {
        size_t len = strcspn(p, ",");
        if (len == 3 && !strncmp(p, "all", 3)) {
            metric[M_PEAK] = metric[M_RESERVED] = metric[M_LEAKED] = true;
        } else if (len == 4 && !strncmp(p, "peak", 4)) {
            metric[M_PEAK] = true;
        } else if (len == 8 && !strncmp(p, "reserved", 8)) {
            metric[M_RESERVED] = true;
        } else if (len == 6 && !strncmp(p, "leaked", 6)) {
            metric[M_LEAKED] = true;
        } else {
            gmt_errorf("--metric is peak, reserved, leaked or all (or a comma-separated "
                       "list), not '%s'", arg);
            return -1;
        }
        p += len;
    } while (*p++ == ',');
    return 0;
}

static int option(struct options *op, int o, const char *arg)
{
    const char *why;
    int64_t v;
    switch (o) {
    case OPT_MAX_PEAK:
    case OPT_MAX_RESERVED:
    case OPT_MAX_LEAKED:
    case OPT_MAX_GROWTH: {
        enum metric m = o == OPT_MAX_PEAK       ? M_PEAK
                        : o == OPT_MAX_RESERVED ? M_RESERVED
                        : o == OPT_MAX_LEAKED   ? M_LEAKED
                                                : M_GROWTH;
        if (parse_size(arg, m == M_GROWTH, &v, &why) != 0) {
            gmt_errorf("%s: '%s' is not a %s: %s", metric_info[m].opt, arg,
                       m == M_GROWTH ? "rate" : "size", why);
            return -1;
        }
        op->has_limit[m] = true;
        op->limit[m] = v;
        return 1;
    }
    case OPT_MAX_OOMS:
        if (parse_count(arg, &v) != 0) {
            gmt_errorf("--max-ooms needs a count (0, 1, ...), not '%s'", arg);
            return -1;
        }
        op->has_limit[M_OOMS] = true;
        op->limit[M_OOMS] = v;
        return 1;
    case OPT_BASELINE:
        op->baseline = arg;
        return 1;
    case OPT_SAVE:
        op->save = arg;
        return 1;
    case OPT_TOLERANCE:
        if (parse_pct(arg, &op->tolerance) != 0) {
            gmt_errorf("--tolerance needs a percentage from 0 to 10000 (e.g. 5 or 2.5), "
                       "not '%s'", arg);
            return -1;
        }
        op->tolerance_given = true;
        return 1;
    case OPT_METRIC:
        op->metric_given = true;
        return parse_metrics(arg, op->metric) == 0 ? 1 : -1;
    default:
        return 0;
    }
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {
        GMT_COMMON_LONGOPTS,
        {"max-peak", required_argument, NULL, OPT_MAX_PEAK},
        {"max-reserved", required_argument, NULL, OPT_MAX_RESERVED},
        {"max-leaked", required_argument, NULL, OPT_MAX_LEAKED},
        {"max-growth", required_argument, NULL, OPT_MAX_GROWTH},
        {"max-ooms", required_argument, NULL, OPT_MAX_OOMS},
        {"baseline", required_argument, NULL, OPT_BASELINE},
        {"tolerance", required_argument, NULL, OPT_TOLERANCE},
        {"metric", required_argument, NULL, OPT_METRIC},
        {"save", required_argument, NULL, OPT_SAVE},
        {NULL, 0, NULL, 0},
    };
    struct gmt_common c;
    struct options op = {.tolerance = DEFAULT_TOLERANCE};
    op.metric[M_PEAK] = op.metric[M_RESERVED] = op.metric[M_LEAKED] = true;
    gmt_common_init(&c);
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int k = gmt_common_opt(&c, o, optarg);
        if (k == 0)
            k = option(&op, o, optarg);
        if (k < 0)
            return EXIT_ERROR;
        if (k == 0) {
            bool help = o == 'h' || o == OPT_HELP;
            usage(help ? stdout : stderr);
            return help ? gmt_finish_output(EXIT_OK) : EXIT_ERROR;
        }
    }
    if (optind >= argc) {
        gmt_errorf("check needs a trace or a directory of traces");
        usage(stderr);
        return EXIT_ERROR;
    }
    if ((op.tolerance_given || op.metric_given) && op.baseline == NULL) {
        gmt_errorf("--tolerance and --metric apply to a baseline: give --baseline BASE");
        return EXIT_ERROR;
    }
    bool any = op.baseline != NULL || op.save != NULL;
    for (int m = 0; m < NMETRICS; m++)
        any |= op.has_limit[m];
    if (!any) {
        gmt_errorf("nothing to check: give a limit (--max-peak, --max-reserved, "
                   "--max-leaked, --max-growth, --max-ooms) or --baseline BASE");
        return EXIT_ERROR;
    }
    struct baseline b = {0};
    if (op.baseline && load_baseline(op.baseline, &c, &b) != 0)
        return EXIT_ERROR;
    struct figures *f;
    size_t nf;
    if (load_figures(argc - optind, argv + optind, &c, op.has_limit[M_GROWTH], &f, &nf) != 0)
        return EXIT_ERROR;
    /* rows: per trace, per figure, the limit then the baseline */
    size_t cap = nf * 2 * NMETRICS, nrows = 0, failed = 0;
    struct row *rows = calloc(cap ? cap : 1, sizeof *rows);
    if (rows == NULL) {
        gmt_errorf("out of memory");
        figures_free(f, nf);
        return EXIT_ERROR;
    }
    for (size_t i = 0; i < nf; i++) {
        for (int m = 0; m < NMETRICS; m++) {
            bool implicit = m == M_OOMS && !op.has_limit[M_OOMS];
            if (op.has_limit[m] || implicit)
                rows[nrows++] = (struct row){(enum metric)m, i, false, implicit,
                                             op.limit[m], f[i].v[m], 0, false};
            if (op.baseline && op.metric[m] && b.have[m])
                rows[nrows++] = (struct row){(enum metric)m, i, true, false,
                                             allowed(b.v[m], op.tolerance), f[i].v[m],
                                             b.v[m], false};
        }
    }
    for (size_t i = 0; i < nrows; i++) {
        rows[i].passed = rows[i].value <= rows[i].limit;
        failed += !rows[i].passed;
    }
    int rc = EXIT_OK;
    if (op.save && save_baseline(op.save, f, nf) != 0)
        rc = EXIT_ERROR;
    if (rc == EXIT_OK) {
        if (c.json)
            print_json(&op, f, nf, rows, nrows, failed, &b);
        else
            print_text(&c, &op, f, nf, rows, nrows, failed, &b);
        if (op.save && !c.json)
            printf("\nsaved this run's figures as a baseline: %s\n", op.save);
        rc = gmt_finish_output(failed ? EXIT_CHECK_FAILED : EXIT_OK);
    }
    free(rows);
    figures_free(f, nf);
    return rc;
}
