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
 *
 * This file: the options, the checks and their verdicts, the output.
 * check_baseline.c: the figures of a trace, baselines (read from traces or
 * JSON, the strict parser) and --save; check.h: what the two share.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define DEFAULT_TOLERANCE 5.0

/* ---- SIZE, RATE, percentages (counts: parse_count, check_baseline.c) --------- */

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
