/* cmd_check.c - `gpumemreport check`: the CI memory-regression gate.
 *
 *   gpumemreport check [limits] [--baseline BASE [--tolerance PCT]
 *                      [--metric M]] [--save FILE] [--allow-damaged]
 *                      TRACE|DIR...
 *
 * A CI job runs its workload under the tracer and then this command; the
 * exit status is the verdict: 0 every check passed, 1 a check failed (a
 * regression), 2 an error - bad arguments, a trace or baseline that cannot
 * be read, a damaged trace, or no check asked for at all (a gate that
 * checks nothing must not pass silently).
 *
 * Damaged traces: a trace the process did not close (killed, crashed),
 * one the reader could read only where intact (a copy cut short, a
 * damaged chunk), one shorter than its writer left it, one whose
 * recorder lost events or stacks (a full disk, a stack cap: the header
 * counts them, format 1.3), or one it read nothing from, gives figures
 * that are low because the artifact is broken, not because the program
 * is good: a gate judging them would pass on a broken artifact. So any
 * such trace, of the run or of a baseline given as traces, is an error
 * (exit 2, one line naming it and what is wrong) - unless
 * --allow-damaged: then it is judged on what was read, and the output
 * says which traces are damaged and how.
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
 *   growth per step bytes per step of each site growing step after step,
 *                   when the run has steps (gmt_growth_steps): the same
 *                   from run to run, unlike a rate. Judged site by site,
 *                   one row for each site above the limit (else one for
 *                   the largest); a run without steps cannot be judged
 *                   per step and fails (a gate must not pass silently).
 *   out of memory   allocations that failed for lack of memory.
 *
 * Limits: --max-peak, --max-reserved, --max-leaked SIZE; --max-growth
 * RATE or SIZE/step; --max-ooms N. A check passes when its value is at most the limit.
 * Each limit option also takes RANK=VALUE: the limit of the processes of
 * that rank in a distributed job, in place of the plain one (rank 0 often
 * holds more); repeat it for other ranks, and for a rank given twice the
 * last wins, as with the plain options. A RANK=VALUE for a rank no trace
 * has applies to nothing: one warning line on stderr says so (a typo or a
 * smaller job than planned should not pass unnoticed, nor fail the gate).
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
 * largest process's value - unless every process of it and of the run
 * has a rank (trace format 1.2): then the run is compared rank by rank,
 * rank r's figure against the baseline's rank r, so that one rank's
 * regression is not hidden under another rank's larger figure. A rank
 * the baseline lacks is compared with its largest process, and its row
 * says so.
 *
 * --save FILE writes this run's figures (every process's with its rank,
 * and the largest of each) in the baseline schema, whatever the verdict; with --save alone
 * the command records a baseline and runs only the default OOM check.
 * Everything is read before anything is printed: on an error (exit 2) the
 * output is one line on stderr and nothing on stdout.
 *
 * Several traces (the processes of one run): every process is checked
 * against every limit and against the baseline, one row each, and the
 * worst decides the exit status. A row names its process by rank when the
 * trace records one ("rank 2 (pid 123)"; JSON "rank", null without).
 * Rows follow the processes' ranks when every trace has one, else the
 * trace arguments (a directory's traces sorted by name), then the order
 * of the figures above, limits before baselines.
 *
 * SIZE: a number of bytes, optionally with a fraction and a unit (case
 * does not matter, spaces between number and unit allowed): B; K, KiB =
 * 1024; KB = 1000; M, MiB = 1024^2; MB = 1000^2; G, GiB; GB; T, TiB; TB
 * (the bare letter is binary, as in SIM_CUDA_MEM and most GPU tools). At
 * most 6 digits after the point, rounded down to whole bytes, at most
 * 2^63-1. RATE is a SIZE optionally followed by "/s" (bytes per second);
 * SIZE/step, a SIZE followed by "/step", is a limit per step instead.
 *
 * Hostile input: the baseline JSON is read by a small strict parser
 * (RFC 8259 grammar, depth, size and value-count limits, valid UTF-8, no
 * duplicate fields we read, whole non-negative numbers for the figures,
 * ranks from 0 to 2^32-1 or null): anything else is one error line and
 * exit 2, never a crash.
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
/* A per-step limit on a run without steps: its row fails, saying this. */
#define NO_STEPS "no steps found: growth per step cannot be judged"

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
    if (!strcmp(p, "/step")) {
        *why = "a size per step (/step) is for --max-growth";
        return -1;
    }
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

/* A limit given as RANK=SIZE: it replaces the option's plain limit for
 * that rank's processes. */
struct rank_limit {
    enum metric m;
    int64_t rank, v;
};

struct options {
    bool has_limit[NMETRICS];
    int64_t limit[NMETRICS];
    struct rank_limit *rl; /* the RANK=SIZE limits, in the order given */
    size_t nrl;
    const char *baseline, *save;
    bool tolerance_given, metric_given;
    double tolerance;
    bool metric[NMETRICS]; /* compared with the baseline */
    bool allow_damaged;    /* judge damaged traces on what was read */
};

struct row {
    enum metric m;
    size_t trace;
    bool from_baseline, implicit;
    bool rank_limit;    /* the limit is the process's rank's (RANK=SIZE) */
    int64_t base_rank;  /* the baseline rank compared with; NO_RANK: the largest */
    bool base_fallback; /* rank by rank, but the baseline lacks this rank */
    int64_t limit, value, base;
    /* growth per step: the site judged (NULL: none grows), or no steps
     * to judge by (unjudged: the row fails) */
    const struct step_site *site;
    bool unjudged;
    bool passed;
};

/* The limit of figure m for a process of rank `rank`: its RANK=SIZE if
 * given (the last one given wins, as with the plain options). */
static const struct rank_limit *rank_limit_of(const struct options *op, enum metric m,
                                              int64_t rank)
{
    for (size_t i = op->nrl; rank != NO_RANK && i-- > 0;)
        if (op->rl[i].m == m && op->rl[i].rank == rank)
            return &op->rl[i];
    return NULL;
}

/* Is figure m limited, plainly or for some rank? */
static bool limited(const struct options *op, enum metric m)
{
    bool any = op->has_limit[m];
    for (size_t i = 0; i < op->nrl; i++)
        any |= op->rl[i].m == m;
    return any;
}

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
    else if (m == M_STEP_GROWTH)
        strcat(buf, "/step");
    return buf;
}

static void limit_fmt(const struct gmt_common *c, const struct options *op,
                      const struct figures *f, const struct row *r, char *buf,
                      size_t len)
{
    char a[48], b[48], who[48] = "";
    if (r->from_baseline) {
        if (r->base_rank != NO_RANK)
            snprintf(who, sizeof who, "rank %" PRId64 "'s ", r->base_rank);
        snprintf(buf, len, "%sbaseline %s +%g%% = %s%s", who,
                 value_fmt(c, a, r->m, r->base), op->tolerance,
                 value_fmt(c, b, r->m, r->limit),
                 r->base_fallback ? " (largest process: no such rank in the baseline)"
                                  : "");
    } else {
        if (r->rank_limit)
            snprintf(who, sizeof who, " (rank %" PRId64 ")", f->rank);
        snprintf(buf, len, "max %s%s%s", value_fmt(c, a, r->m, r->limit),
                 r->implicit ? " (default)" : "", who);
    }
}

/* "rank 2 (pid 123)", or "123" / "pid 123" for a process without a rank. */
static const char *process_fmt(const struct figures *f, bool ranks, char *buf, size_t len)
{
    if (f->rank != NO_RANK)
        snprintf(buf, len, "rank %" PRId64 " (pid %u)", f->rank, f->pid);
    else
        snprintf(buf, len, ranks ? "pid %u" : "%u", f->pid);
    return buf;
}

/* "from step 3", or "from set-up" for a site first allocated before the
 * first step; buf of 32. */
static const char *first_step_fmt(const struct step_site *s, char *buf)
{
    if (s->first_step)
        snprintf(buf, 32, "from step %u", s->first_step);
    else
        snprintf(buf, 32, "from set-up");
    return buf;
}

static void explain(const struct gmt_common *c, const struct options *op,
                    const struct figures *f, const struct row *r, bool md)
{
    char v[48], over[48], lim[200], share[32] = "", who[48];
    limit_fmt(c, op, f, r, lim, sizeof lim);
    if (f->rank != NO_RANK)
        snprintf(who, sizeof who, "rank %" PRId64 ", pid %u", f->rank, f->pid);
    else
        snprintf(who, sizeof who, "pid %u", f->pid);
    value_fmt(c, over, r->m, r->value - r->limit);
    if (r->limit > 0) {
        double pc = 100.0 * (double)(r->value - r->limit) / (double)r->limit;
        snprintf(share, sizeof share, pc < 1 ? " (%.3f%%)" : " (%.1f%%)", pc);
    }
    if (md)
        printf("- **%s** in `%s` (%s): ", metric_info[r->m].name, f->trace, who);
    else
        printf("FAIL %s in %s (%s): ", metric_info[r->m].name, f->trace, who);
    if (r->unjudged) {
        const char *why = f->no_steps_why;
        printf(NO_STEPS "%s%s%s (limit %s)\n", why ? " (" : "", why ? why : "",
               why ? ")" : "", lim);
        return;
    }
    if (r->site) {
        char from[32];
        printf(md ? "`%s` grows %s %s, " : "%s grows %s %s, ", r->site->label,
               value_fmt(c, v, r->m, r->value), first_step_fmt(r->site, from));
        printf("%s%s above %s\n", over, share, lim);
        return;
    }
    printf("%s is %s%s above %s\n", value_fmt(c, v, r->m, r->value), over, share, lim);
}

/* The check column: growth per step names its site. */
static const char *check_fmt(const struct row *r, bool md, char *buf, size_t len)
{
    char from[32];
    if (r->m == M_STEP_GROWTH && r->site)
        snprintf(buf, len, md ? "%s: `%s` (%s)" : "%s: %s (%s)", metric_info[r->m].name,
                 r->site->label, first_step_fmt(r->site, from));
    else
        snprintf(buf, len, "%s", metric_info[r->m].name);
    return buf;
}

/* Which traces are damaged and how: one line each (md: a list item),
 * after the verdict, so that a pass on them is not read as a clean one. */
static void print_damaged(const struct figures *f, size_t nf, const struct baseline *b,
                          bool md)
{
    char how[1024];
    for (size_t i = 0; i < nf; i++)
        if (figures_damaged(&f[i], how, sizeof how))
            printf(md ? "- **damaged trace** `%s`: %s; judged on what was read "
                        "(--allow-damaged)\n"
                      : "damaged trace %s: %s; judged on what was read (--allow-damaged)\n",
                   f[i].trace, how);
    for (size_t i = 0; i < b->ndamaged; i++)
        printf(md ? "- **damaged baseline trace** `%s`: %s; judged on what was read "
                    "(--allow-damaged)\n"
                  : "damaged baseline trace %s: %s; judged on what was read "
                    "(--allow-damaged)\n",
               b->damaged[i].trace, b->damaged[i].how);
}

static void print_text(const struct gmt_common *c, const struct options *op,
                       const struct figures *f, size_t nf, const struct row *rows,
                       size_t nrows, size_t failed, const struct baseline *b,
                       bool by_rank, size_t damaged)
{
    bool md = c->markdown;
    char on[64] = "";
    if (damaged)
        snprintf(on, sizeof on, " (judged on %zu damaged trace%s)", damaged,
                 damaged == 1 ? "" : "s");
    if (md)
        printf("## gpumemtrace check: %s%s\n\n", failed ? "FAIL" : "PASS", on);
    else
        printf("gpumemtrace check: %s%s\n", failed ? "FAIL" : "PASS", on);
    if (failed)
        printf("%zu of %zu checks failed", failed, nrows);
    else
        printf("all %zu checks passed", nrows);
    printf(", %zu trace%s", nf, nf == 1 ? "" : "s");
    if (op->baseline)
        printf(", baseline %s%s%s (%s, %zu process%s%s)", md ? "`" : "", op->baseline,
               md ? "`" : "", b->kind, b->processes, b->processes == 1 ? "" : "es",
               by_rank ? ", rank by rank" : "");
    printf(".\n\n");
    if (damaged) {
        print_damaged(f, nf, b, md);
        printf("\n");
    }
    bool ranks = false; /* a process has a rank: the column names processes */
    for (size_t i = 0; i < nf; i++)
        ranks |= f[i].rank != NO_RANK;
    const char *h[] = {"check", "trace", ranks ? "process" : "pid", "limit or baseline",
                       "value", "verdict"};
    static const bool right[] = {false, false, true, false, true, false};
    struct table *t = table_new(6, h, right);
    for (size_t i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        char who[48], lim[200], v[48], what[1200];
        process_fmt(&f[r->trace], ranks, who, sizeof who);
        limit_fmt(c, op, &f[r->trace], r, lim, sizeof lim);
        table_row(t, check_fmt(r, md, what, sizeof what), f[r->trace].trace, who, lim,
                  r->unjudged ? "no steps found" : value_fmt(c, v, r->m, r->value),
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
               "growth: steady rise in bytes per second; growth per step: the rise of "
               "a site step after step (a run without steps cannot be judged, and "
               "fails); out of memory: failed allocations.\n");
}

static void json_rank(int64_t rank)
{
    if (rank == NO_RANK)
        printf("null");
    else
        printf("%" PRId64, rank);
}

/* The "damaged" list: the traces judged although damaged, the run's then
 * the baseline's (only with --allow-damaged: without it a damaged trace
 * is an error and there is no JSON). */
static void json_damaged(const struct figures *f, size_t nf, const struct baseline *b)
{
    char how[1024];
    bool first = true;
    for (size_t i = 0; i < nf; i++) {
        if (!figures_damaged(&f[i], how, sizeof how))
            continue;
        printf("%s{\"trace\":", first ? "" : ",");
        gmt_json_str(stdout, f[i].trace);
        printf(",\"baseline\":false,\"damage\":");
        gmt_json_str(stdout, how);
        printf("}");
        first = false;
    }
    for (size_t i = 0; i < b->ndamaged; i++) {
        printf("%s{\"trace\":", first ? "" : ",");
        gmt_json_str(stdout, b->damaged[i].trace);
        printf(",\"baseline\":true,\"damage\":");
        gmt_json_str(stdout, b->damaged[i].how);
        printf("}");
        first = false;
    }
}

/* The "baseline" object (its source, kind, tolerance and figures; null
 * without one) and "saved", the --save file or null. */
static void json_baseline(const struct options *op, const struct baseline *b, bool by_rank)
{
    printf(",\"baseline\":");
    if (op->baseline) {
        printf("{\"source\":");
        gmt_json_str(stdout, op->baseline);
        printf(",\"kind\":\"%s\",\"processes\":%zu,\"tolerance_pct\":%.10g"
               ",\"by_rank\":%s",
               b->kind, b->processes, op->tolerance, by_rank ? "true" : "false");
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
}

/* One trace's object: the process, what is wrong with the trace, its
 * figures (growth only when it is limited). */
static void json_trace(const struct options *op, const struct figures *f)
{
    char how[1024];
    printf("{\"trace\":");
    gmt_json_str(stdout, f->trace);
    printf(",\"pid\":%u,\"rank\":", f->pid);
    json_rank(f->rank);
    printf(",\"command\":");
    gmt_json_str(stdout, f->command);
    printf(",\"closed\":%s,\"events\":%" PRIu64 ",\"lost\":",
           f->closed ? "true" : "false", f->events);
    if (f->lost)
        gmt_json_str(stdout, f->lost);
    else
        printf("null");
    printf(",\"damage\":");
    if (figures_damaged(f, how, sizeof how))
        gmt_json_str(stdout, how);
    else
        printf("null");
    for (int m = 0; m < NMETRICS; m++)
        if ((m != M_GROWTH && m != M_STEP_GROWTH) || limited(op, (enum metric)m))
            printf(",\"%s\":%" PRId64, m == M_GROWTH ? "growth_bytes_per_s"
                                                     : metric_info[m].key, f->v[m]);
    if (limited(op, M_STEP_GROWTH)) {
        printf(",\"steps\":");
        if (f->steps_found)
            printf("%u", f->steps);
        else
            printf("null");
    }
    printf("}");
}

/* A growth-per-step check's own fields: the site judged and the step it
 * grows from, and whether the run could be judged (it has steps). */
static void json_step_fields(const struct figures *f, const struct row *r)
{
    printf(",\"site\":");
    if (r->site)
        gmt_json_str(stdout, r->site->label);
    else
        printf("null");
    printf(",\"first_step\":");
    if (r->site)
        printf("%u", r->site->first_step);
    else
        printf("null");
    printf(",\"judged\":%s,\"reason\":", r->unjudged ? "false" : "true");
    if (r->unjudged)
        printf("\"" NO_STEPS "\"");
    else
        printf("null");
    printf(",\"no_steps_why\":");
    if (r->unjudged && f->no_steps_why)
        gmt_json_str(stdout, f->no_steps_why);
    else
        printf("null");
}

/* One check's object: the figure, the process, the limit or baseline it
 * was held to, the value, the verdict. */
static void json_check(const struct options *op, const struct figures *f, const struct row *r)
{
    printf("{\"check\":\"%s\",\"trace\":", metric_info[r->m].key);
    gmt_json_str(stdout, f->trace);
    printf(",\"pid\":%u,\"rank\":", f->pid);
    json_rank(f->rank);
    printf(",\"source\":\"%s\",\"limit\":%" PRId64 ",\"value\":",
           r->from_baseline ? "baseline" : r->implicit ? "default" : "limit",
           r->limit);
    if (r->unjudged)
        printf("null");
    else
        printf("%" PRId64, r->value);
    if (r->m == M_STEP_GROWTH)
        json_step_fields(f, r);
    if (r->from_baseline) {
        printf(",\"baseline\":%" PRId64 ",\"tolerance_pct\":%.10g,\"baseline_rank\":",
               r->base, op->tolerance);
        json_rank(r->base_rank);
    } else {
        printf(",\"rank_limit\":%s", r->rank_limit ? "true" : "false");
    }
    printf(",\"passed\":%s}", r->passed ? "true" : "false");
}

static void print_json(const struct options *op, const struct figures *f, size_t nf,
                       const struct row *rows, size_t nrows, size_t failed,
                       const struct baseline *b, bool by_rank)
{
    printf("{\"schema\":\"gpumemtrace.check/1\",\"passed\":%s,\"checks_run\":%zu"
           ",\"checks_failed\":%zu,\"allow_damaged\":%s,\"damaged\":[",
           failed ? "false" : "true", nrows, failed, op->allow_damaged ? "true" : "false");
    json_damaged(f, nf, b);
    printf("]");
    json_baseline(op, b, by_rank);
    printf(",\"traces\":[");
    for (size_t i = 0; i < nf; i++) {
        printf("%s", i ? "," : "");
        json_trace(op, &f[i]);
    }
    printf("],\"checks\":[");
    for (size_t i = 0; i < nrows; i++) {
        printf("%s", i ? "," : "");
        json_check(op, &f[rows[i].trace], &rows[i]);
    }
    printf("]}\n");
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s check [limits] [--baseline BASE [--tolerance PCT] [--metric M]]\n"
            "                [--save FILE] [--allow-damaged] [options] TRACE|DIR...\n\n"
            "The CI memory gate. Exit status 0: every check passed; 1: a check\n"
            "failed; 2: error (bad arguments, unreadable trace or baseline, a damaged\n"
            "trace, no check).\n\n"
            "limits (a check passes when the value is at most the limit):\n"
            "  --max-peak SIZE      peak requested device memory\n"
            "  --max-reserved SIZE  peak reserved device memory\n"
            "  --max-leaked SIZE    device memory still allocated at exit\n"
            "  --max-growth RATE    steady growth, bytes per second (e.g. 10MiB/s)\n"
            "  --max-growth SIZE/step  growth of each site per step, when the run\n"
            "                       has steps (e.g. 512KiB/step): a site growing\n"
            "                       more fails; a run without steps fails too\n"
            "  --max-ooms N         out-of-memory failures (default 0: any OOM fails)\n"
            "  each also as RANK=SIZE (RANK=N): the limit of that rank's processes,\n"
            "  e.g. --max-peak 10GiB --max-peak 0=20GiB (repeat for other ranks)\n"
            "baseline:\n"
            "  --baseline BASE      a trace, a directory of traces, a --save file or\n"
            "                       'summary --json' output; a figure fails when above\n"
            "                       the baseline's (largest process's) by more than PCT;\n"
            "                       when both sides have ranks, rank by rank\n"
            "  --tolerance PCT      allowed rise in percent (default 5)\n"
            "  --metric M           peak, reserved, leaked or all (default), or a\n"
            "                       comma-separated list\n"
            "  --save FILE          write this run's figures as a baseline (JSON)\n"
            "damaged traces (not closed: killed or crashed; cut short or damaged;\n"
            "incomplete: the recorder lost events, e.g. on a full disk; nothing\n"
            "read), of the run or a baseline, are an error, unless:\n"
            "  --allow-damaged      judge them on what was read; the output says\n"
            "                       which are damaged and how\n\n"
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
    OPT_ALLOW_DAMAGED,
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
            gmt_value_error("--metric is peak, reserved, leaked or all (or a comma-separated "
                       "list), not '%s'", arg);
            return -1;
        }
        p += len;
    } while (*p++ == ',');
    return 0;
}

/* A limit, "VALUE" or "RANK=VALUE": the plain limit, or rank RANK's
 * (op->rl has room for one per option: cmd_check sizes it by argc). */
static int limit_option(struct options *op, enum metric m, const char *arg)
{
    const char *why, *eq = strchr(arg, '='), *val = eq ? eq + 1 : arg;
    int64_t v, rank = NO_RANK;
    if (eq) {
        char digits[24];
        size_t len = (size_t)(eq - arg);
        if (len >= sizeof digits)
            len = sizeof digits - 1; /* too long for a rank: refused below */
        memcpy(digits, arg, len);
        digits[len] = '\0';
        if ((size_t)(eq - arg) >= sizeof digits || parse_count(digits, &rank) != 0 ||
            rank > (int64_t)UINT32_MAX) {
            gmt_value_error("%s: in '%s', the rank before '=' is not a whole number from 0 "
                       "to 4294967295", metric_info[m].opt, arg);
            return -1;
        }
    }
    size_t vlen = strlen(val);
    if (m == M_GROWTH && vlen >= 5 && !strcmp(val + vlen - 5, "/step")) {
        /* SIZE/step: a limit per step, a figure of its own */
        char size[64];
        if (vlen - 5 >= sizeof size) {
            gmt_value_error("--max-growth: '%s' is not a size per step: too long", val);
            return -1;
        }
        memcpy(size, val, vlen - 5);
        size[vlen - 5] = '\0';
        if (parse_size(size, false, &v, &why) != 0) {
            gmt_value_error("--max-growth: '%s' is not a size per step (SIZE/step): %s",
                            val, why);
            return -1;
        }
        m = M_STEP_GROWTH;
    } else if (m == M_OOMS) {
        if (parse_count(val, &v) != 0) {
            gmt_value_error("--max-ooms needs a count (0, 1, ...) or RANK=COUNT, not '%s'", arg);
            return -1;
        }
    } else if (parse_size(val, m == M_GROWTH, &v, &why) != 0) {
        gmt_value_error("%s: '%s' is not a %s: %s", metric_info[m].opt, val,
                   m == M_GROWTH ? "rate (SIZE or SIZE/s) or a size per step (SIZE/step)"
                                 : "size", why);
        return -1;
    }
    if (rank == NO_RANK) {
        op->has_limit[m] = true;
        op->limit[m] = v;
    } else {
        op->rl[op->nrl++] = (struct rank_limit){m, rank, v};
    }
    return 1;
}

static int option(int o, const char *arg, void *ctx)
{
    struct options *op = ctx;
    switch (o) {
    case OPT_MAX_PEAK:
        return limit_option(op, M_PEAK, arg);
    case OPT_MAX_RESERVED:
        return limit_option(op, M_RESERVED, arg);
    case OPT_MAX_LEAKED:
        return limit_option(op, M_LEAKED, arg);
    case OPT_MAX_GROWTH:
        return limit_option(op, M_GROWTH, arg);
    case OPT_MAX_OOMS:
        return limit_option(op, M_OOMS, arg);
    case OPT_BASELINE:
        op->baseline = arg;
        return 1;
    case OPT_SAVE:
        op->save = arg;
        return 1;
    case OPT_ALLOW_DAMAGED:
        op->allow_damaged = true;
        return 1;
    case OPT_TOLERANCE:
        if (parse_pct(arg, &op->tolerance) != 0) {
            gmt_value_error("--tolerance needs a percentage from 0 to 10000 (e.g. 5 or 2.5), "
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

/* Figures in rank order, when every process has a rank (ties: in the
 * order of the trace arguments). */
struct by_rank_key {
    int64_t rank;
    size_t i;
};

static int cmp_by_rank(const void *a, const void *b)
{
    const struct by_rank_key *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int sort_by_rank(struct figures *f, size_t nf)
{
    for (size_t i = 0; i < nf; i++)
        if (f[i].rank == NO_RANK)
            return 0;
    struct by_rank_key *k = malloc((nf ? nf : 1) * sizeof *k);
    struct figures *tmp = malloc((nf ? nf : 1) * sizeof *tmp);
    if (k == NULL || tmp == NULL) {
        free(k);
        free(tmp);
        return -1;
    }
    for (size_t i = 0; i < nf; i++)
        k[i] = (struct by_rank_key){f[i].rank, i};
    qsort(k, nf, sizeof *k, cmp_by_rank);
    for (size_t i = 0; i < nf; i++)
        tmp[i] = f[k[i].i];
    memcpy(f, tmp, nf * sizeof *f);
    free(k);
    free(tmp);
    return 0;
}

/* Growth per step of process f (rows[trace]) against limit: a row for
 * each site growing by more than the limit, else one for the site growing
 * most (value 0 and no site: none grows); a run without steps, one row
 * that fails, saying so - a per-step limit cannot pass on a run it cannot
 * judge. Returns the new row count (the caller sized rows for
 * f->ngrow + 1). */
static size_t step_rows(struct row *rows, size_t n, const struct figures *f, size_t trace,
                        int64_t limit, bool rank_limit)
{
    struct row r = {.m = M_STEP_GROWTH, .trace = trace, .rank_limit = rank_limit,
                    .base_rank = NO_RANK, .limit = limit};
    if (!f->steps_found) {
        r.unjudged = true;
        rows[n++] = r;
        return n;
    }
    size_t over = 0;
    for (size_t k = 0; k < f->ngrow; k++) {
        if (f->grow[k].per_step <= limit)
            continue;
        r.site = &f->grow[k];
        r.value = r.site->per_step;
        rows[n++] = r;
        over++;
    }
    if (over == 0) {
        r.site = f->ngrow ? &f->grow[0] : NULL;
        r.value = r.site ? r.site->per_step : 0;
        rows[n++] = r;
    }
    return n;
}

/* The damaged traces of the run and of a baseline read from traces. With
 * refuse, the first is an error: one line naming it and what is wrong,
 * with how many others there are (gmt_load has warned of each already). */
static size_t count_damaged(const struct figures *f, size_t nf, const struct baseline *b,
                            bool refuse)
{
    char how[1024], first[1024];
    const char *trace = NULL, *what = NULL, *role = "";
    size_t n = 0;
    for (size_t i = 0; i < nf; i++) {
        if (!figures_damaged(&f[i], how, sizeof how))
            continue;
        if (n++ == 0) {
            trace = f[i].trace;
            what = memcpy(first, how, sizeof first);
        }
    }
    for (size_t i = 0; i < b->ndamaged; i++) {
        if (n++ == 0) {
            trace = b->damaged[i].trace;
            what = b->damaged[i].how;
            role = "baseline ";
        }
    }
    if (n && refuse) {
        char more[64] = "";
        if (n > 1)
            snprintf(more, sizeof more, " (and %zu other damaged trace%s)", n - 1,
                     n == 2 ? "" : "s");
        gmt_errorf("%s%s: damaged trace, not judged: %s; --allow-damaged judges what was "
                   "read%s", role, trace, what, more);
    }
    return n;
}

/* One warning line naming the RANK=SIZE limits no process has the rank
 * of: they apply to nothing (a typo, or a job smaller than planned). */
static void warn_unused_rank_limits(const struct options *op, const struct figures *f,
                                    size_t nf)
{
    char line[512];
    size_t len = 0, unused = 0;
    line[0] = '\0';
    for (size_t i = 0; i < op->nrl; i++) {
        bool found = false;
        for (size_t j = 0; j < nf && !found; j++)
            found = f[j].rank == op->rl[i].rank;
        if (found)
            continue;
        if (len < sizeof line) {
            int w = snprintf(line + len, sizeof line - len, "%srank %" PRId64 " (%s)",
                             unused ? ", " : "", op->rl[i].rank,
                             metric_info[op->rl[i].m].opt);
            len += w > 0 ? (size_t)w : 0;
        }
        unused++;
    }
    if (unused == 0)
        return;
    if (len >= sizeof line) /* cut: end on a whole mark */
        memcpy(line + sizeof line - 5, " ...", 5);
    gmt_warnf("no trace has %s: %s to nothing", line,
              unused == 1 ? "that limit applies" : "those limits apply");
}

/* Whether the command line asks for a check of something: a trace, a
 * baseline for --tolerance and --metric, some limit, baseline or --save.
 * False after an error line. */
static bool options_usable(int argc, char **argv, const struct options *op)
{
    if (optind >= argc) {
        gmt_usage_error(argv[0], "check needs a trace or a directory of traces");
        return false;
    }
    if ((op->tolerance_given || op->metric_given) && op->baseline == NULL) {
        gmt_errorf("--tolerance and --metric apply to a baseline: give --baseline BASE");
        return false;
    }
    bool any = op->baseline != NULL || op->save != NULL || op->nrl > 0;
    for (int m = 0; m < NMETRICS; m++)
        any |= op->has_limit[m];
    if (!any) {
        gmt_errorf("nothing to check: give a limit (--max-peak, --max-reserved, "
                   "--max-leaked, --max-growth, --max-ooms) or --baseline BASE");
        return false;
    }
    return true;
}

/* Process i's rows, appended at rows[n]: per figure, its limit (its
 * rank's, the plain one, or the default of no OOM) then the baseline's.
 * Returns the new row count. */
static size_t process_rows(struct row *rows, size_t n, const struct options *op,
                           const struct figures *f, size_t i, const struct baseline *b,
                           bool by_rank)
{
    for (int m = 0; m < NMETRICS; m++) {
        const struct rank_limit *rl = rank_limit_of(op, (enum metric)m, f->rank);
        if (m == M_STEP_GROWTH) {
            if (rl || op->has_limit[m])
                n = step_rows(rows, n, f, i, rl ? rl->v : op->limit[m], rl != NULL);
            continue;
        }
        bool implicit = m == M_OOMS && !op->has_limit[M_OOMS] && rl == NULL;
        if (rl || op->has_limit[m] || implicit)
            rows[n++] = (struct row){.m = (enum metric)m, .trace = i,
                                     .implicit = implicit, .rank_limit = rl != NULL,
                                     .base_rank = NO_RANK,
                                     .limit = rl ? rl->v : op->limit[m],
                                     .value = f->v[m]};
        if (op->baseline && op->metric[m] && b->have[m]) {
            const struct base_rank *br = by_rank ? baseline_rank(b, f->rank) : NULL;
            int64_t base = br ? br->v[m] : b->v[m];
            rows[n++] = (struct row){.m = (enum metric)m, .trace = i,
                                     .from_baseline = true,
                                     .base_rank = br ? br->rank : NO_RANK,
                                     .base_fallback = by_rank && br == NULL,
                                     .limit = allowed(base, op->tolerance),
                                     .value = f->v[m], .base = base};
        }
    }
    return n;
}

/* Every check's row, judged: per trace, per figure, the limit then the
 * baseline; *failed counts those that failed. NULL: out of memory. */
static struct row *judge(const struct options *op, const struct figures *f, size_t nf,
                         const struct baseline *b, bool by_rank, size_t *nrows,
                         size_t *failed)
{
    size_t cap = nf * 2 * NMETRICS;
    for (size_t i = 0; i < nf; i++)
        cap += f[i].ngrow; /* growth per step: a row per site at most */
    struct row *rows = calloc(cap ? cap : 1, sizeof *rows);
    if (rows == NULL)
        return NULL;
    for (size_t i = 0; i < nf; i++)
        *nrows = process_rows(rows, *nrows, op, &f[i], i, b, by_rank);
    for (size_t i = 0; i < *nrows; i++) {
        rows[i].passed = !rows[i].unjudged && rows[i].value <= rows[i].limit;
        *failed += !rows[i].passed;
    }
    return rows;
}

int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"max-peak", required_argument, NULL, OPT_MAX_PEAK},
        {"max-reserved", required_argument, NULL, OPT_MAX_RESERVED},
        {"max-leaked", required_argument, NULL, OPT_MAX_LEAKED},
        {"max-growth", required_argument, NULL, OPT_MAX_GROWTH},
        {"max-ooms", required_argument, NULL, OPT_MAX_OOMS},
        {"baseline", required_argument, NULL, OPT_BASELINE},
        {"tolerance", required_argument, NULL, OPT_TOLERANCE},
        {"metric", required_argument, NULL, OPT_METRIC},
        {"save", required_argument, NULL, OPT_SAVE},
        {"allow-damaged", no_argument, NULL, OPT_ALLOW_DAMAGED},
        {NULL, 0, NULL, 0},
    };
    static const struct gmt_args args = {.options = opts, .option = option, .usage = usage};
    struct gmt_common c;
    struct options op = {.tolerance = DEFAULT_TOLERANCE};
    struct baseline b = {0};
    struct figures *f = NULL;
    struct row *rows = NULL;
    size_t nf = 0;
    int rc = EXIT_ERROR;
    op.metric[M_PEAK] = op.metric[M_RESERVED] = op.metric[M_LEAKED] = true;
    /* every limit option takes one argument at least: argc bounds them */
    if ((op.rl = calloc((size_t)(argc > 0 ? argc : 1), sizeof *op.rl)) == NULL) {
        gmt_errorf("out of memory");
        return EXIT_ERROR;
    }
    gmt_common_init(&c);
    int parsed = gmt_args_parse(argc, argv, &args, &c, &op);
    if (parsed != GMT_PARSED) {
        rc = parsed;
        goto out;
    }
    if (!options_usable(argc, argv, &op))
        goto out;
    if (op.baseline && load_baseline(op.baseline, &c, &b) != 0)
        goto out;
    bool growth = limited(&op, M_GROWTH) || limited(&op, M_STEP_GROWTH);
    if (load_figures(argc - optind, argv + optind, &c, growth, &f, &nf) != 0)
        goto out;
    size_t damaged = count_damaged(f, nf, &b, !op.allow_damaged);
    if (damaged && !op.allow_damaged)
        goto out;
    if (sort_by_rank(f, nf) != 0) {
        gmt_errorf("out of memory");
        goto out;
    }
    /* rank by rank when both the run and the baseline have ranks */
    bool by_rank = op.baseline && b.ranked && nf > 0;
    for (size_t i = 0; i < nf; i++)
        by_rank &= f[i].rank != NO_RANK;
    size_t nrows = 0, failed = 0;
    if ((rows = judge(&op, f, nf, &b, by_rank, &nrows, &failed)) == NULL) {
        gmt_errorf("out of memory");
        goto out;
    }
    if (op.save && save_baseline(op.save, f, nf) != 0)
        goto out;
    warn_unused_rank_limits(&op, f, nf);
    if (c.json)
        print_json(&op, f, nf, rows, nrows, failed, &b, by_rank);
    else
        print_text(&c, &op, f, nf, rows, nrows, failed, &b, by_rank, damaged);
    if (op.save && !c.json)
        printf("\nsaved this run's figures as a baseline: %s\n", op.save);
    rc = gmt_finish_output(failed ? EXIT_CHECK_FAILED : EXIT_OK);
out:
    free(rows);
    figures_free(f, nf);
    baseline_free(&b);
    free(op.rl);
    return rc;
}
