/* cmd_timeline.c - `gpumemreport timeline`: device memory over the run.
 *
 * Requested bytes (what the program holds) and reserved bytes (what the
 * process holds from the driver for it: the pool's segments, or the
 * allocations themselves without the pool) over time, as a chart for the
 * terminal; with --csv or --json, the series itself, adding device memory
 * in use per the driver (from the pool's samples) and pinned host memory.
 *
 * The series are the replay's time buckets (REPLAY_BUCKETS over the run):
 * each holds the largest value seen in it, so no peak is lost however long
 * the run. A bucket in which nothing happened holds the level at the end
 * of the bucket before it - what was live then, which after frees is
 * below that bucket's maximum; so this command follows the replay
 * (an observer of the replay) to keep each bucket's closing level beside the
 * replay's maxima. The chart merges buckets into columns, again by
 * maximum, so the chart's highest point is the peak.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { OPT_CSV = OPT_CMD_BASE, OPT_WIDTH, OPT_HEIGHT };

#define TL_WIDTH 64  /* chart columns */
#define TL_HEIGHT 16 /* chart rows */
#define TL_LABEL 10  /* y-axis label width */

/* The levels at the end of each of the replay's buckets: the last event
 * in it left them (set: one was seen). Kept in step with the replay's
 * buckets, which merge in pairs when a trace outlasts them (bucket_ns
 * doubles). */
struct tl_close {
    uint64_t bucket_ns;
    struct tl_level {
        uint64_t requested, reserved, host;
        bool set;
    } at[REPLAY_BUCKETS];
};

struct tl_opts {
    bool csv;
    int width, height;
    struct tl_close close; /* of the trace being replayed */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: %s timeline [options] TRACE|DIR...\n\n"
               "Requested and reserved device memory over the run, as a chart\n"
               "(# requested, : reserved, - device memory in use per the driver).\n\n"
               "  --csv           the series as CSV: time_s,requested,reserved,\n"
               "                  device_used,host (exact bytes, one row per bucket;\n"
               "                  device_used empty before the first sample)\n"
               "  --width N       chart columns (default %d, 16 to 400)\n"
               "  --height N      chart rows (default %d, 4 to 100)\n"
               "  --json          the series as JSON (docs/report-json.md)\n"
               "  --markdown      the chart in a fenced block\n"
               "  --bytes         exact byte counts in the text\n",
            gmt_prog, TL_WIDTH, TL_HEIGHT);
}

static int number(const char *name, const char *arg, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end || v < lo || v > hi) {
        gmt_value_error("--%s needs a number from %d to %d, not '%s'", name, lo, hi, arg);
        return -1;
    }
    *out = (int)v;
    return 1;
}

static int option(int opt, const char *arg, void *ctx)
{
    struct tl_opts *o = ctx;
    switch (opt) {
    case OPT_CSV:
        o->csv = true;
        return 1;
    case OPT_WIDTH:
        return number("width", arg, 16, 400, &o->width);
    case OPT_HEIGHT:
        return number("height", arg, 4, 100, &o->height);
    default:
        return 0;
    }
}

/* ---- the series ---------------------------------------------------------- */

/* The replay merged its buckets in pairs: so do the closing levels (the
 * second of a pair closes the merged bucket when it saw an event). */
static void close_merge(struct tl_close *k)
{
    for (int i = 0; i < REPLAY_BUCKETS / 2; i++)
        k->at[i] = k->at[2 * i + 1].set ? k->at[2 * i + 1] : k->at[2 * i];
    memset(&k->at[REPLAY_BUCKETS / 2], 0, REPLAY_BUCKETS / 2 * sizeof k->at[0]);
    k->bucket_ns *= 2;
}

/* an observer of the replay: after every record, the levels now are those at
 * the end of its bucket so far. A record past the last bucket (one that
 * moves no level: the replay merges when a level is noted there) is left
 * to the next that does. */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct tl_close *k = &((struct tl_opts *)ctx)->close;
    if (r->records == 1) { /* a trace's first record: start afresh */
        memset(k, 0, sizeof *k);
        k->bucket_ns = r->bucket_ns;
    }
    while (k->bucket_ns < r->bucket_ns)
        close_merge(k);
    if (r->bucket_ns == 0)
        return;
    uint64_t t = rec->time > r->t0 ? rec->time : r->t0;
    uint64_t b = (t - r->t0) / r->bucket_ns;
    if (b >= REPLAY_BUCKETS)
        return;
    k->at[b] = (struct tl_level){(uint64_t)(r->requested > 0 ? r->requested : 0),
                                 (uint64_t)(r->reserved > 0 ? r->reserved : 0),
                                 (uint64_t)(r->host > 0 ? r->host : 0), true};
}

/* One point of the series; device_used 0: not known (no sample yet). */
struct point {
    uint64_t requested, reserved, device_used, host;
};

/* Buckets shown: up to the last one holding data, or to the end of the
 * run if that is later (memory held until exit). */
static size_t nbuckets(const struct replay *r)
{
    size_t last = 0;
    for (size_t i = 0; i < REPLAY_BUCKETS; i++)
        if (r->buckets[i].used)
            last = i + 1;
    uint64_t dur = replay_duration(r), w = r->bucket_ns ? r->bucket_ns : 1;
    uint64_t span = dur / w + (dur % w != 0);
    size_t n = span < REPLAY_BUCKETS ? (size_t)span : REPLAY_BUCKETS;
    return n > last ? n : last;
}

/* A bucket that only holds a sample noted none of the other series (the
 * replay fills them at allocations and frees): they carry on as well. */
static bool sample_only(const struct bucket *b)
{
    return b->device_used && !b->requested && !b->reserved && !b->host;
}

/* The buckets as points: a bucket with events its maxima, an empty one
 * the levels the last event before it left (device_used: the last
 * sample's). Returns the number of points (0 with *out NULL: none, or no
 * memory). */
static size_t series(const struct replay *r, const struct tl_close *k, struct point **out)
{
    size_t n = nbuckets(r);
    *out = n ? calloc(n, sizeof **out) : NULL;
    if (*out == NULL)
        return 0;
    struct point level = {0, 0, 0, 0}; /* after the last event so far */
    for (size_t i = 0; i < n; i++) {
        const struct bucket *b = &r->buckets[i];
        struct point p = level;
        if (b->used && !sample_only(b)) {
            p.requested = b->requested;
            p.reserved = b->reserved;
            p.host = b->host;
        }
        if (b->used && b->device_used)
            level.device_used = p.device_used = b->device_used;
        if (k->bucket_ns == r->bucket_ns && k->at[i].set) {
            level.requested = k->at[i].requested;
            level.reserved = k->at[i].reserved;
            level.host = k->at[i].host;
        } else if (b->used && !sample_only(b)) {
            /* not followed (a trace without records): its maxima */
            level.requested = b->requested;
            level.reserved = b->reserved;
            level.host = b->host;
        }
        (*out)[i] = p;
    }
    return n;
}

/* ---- CSV and JSON --------------------------------------------------------- */

static void csv(const struct replay *r, const struct point *p, size_t n)
{
    printf("time_s,requested,reserved,device_used,host\n");
    for (size_t i = 0; i < n; i++) {
        printf("%.6f,%" PRIu64 ",%" PRIu64 ",", (double)i * (double)r->bucket_ns / 1e9,
               p[i].requested, p[i].reserved);
        if (p[i].device_used)
            printf("%" PRIu64, p[i].device_used);
        printf(",%" PRIu64 "\n", p[i].host);
    }
}

static void json(const struct loaded *l, const struct point *p, size_t n)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"duration_ns\":%" PRIu64 ",\"bucket_ns\":%" PRIu64
           ",\"peak_requested\":%" PRIu64 ",\"peak_reserved\":%" PRIu64 ",\"buckets\":[",
           r->hdr.pid, replay_duration(r), r->bucket_ns, r->peak_requested,
           r->peak_reserved);
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"at_ns\":%" PRIu64 ",\"requested\":%" PRIu64 ",\"reserved\":%" PRIu64
               ",\"device_used\":", i ? "," : "", (uint64_t)i * r->bucket_ns,
               p[i].requested, p[i].reserved);
        if (p[i].device_used)
            printf("%" PRIu64, p[i].device_used);
        else
            printf("null");
        printf(",\"host\":%" PRIu64 "}", p[i].host);
    }
    printf("]}");
}

/* ---- the chart ------------------------------------------------------------- */

/* Columns: bucket maxima over each column's share of the buckets (a
 * bucket spans several columns when there are fewer buckets). */
static void columns(const struct point *p, size_t n, struct point *col, int width)
{
    for (int c = 0; c < width; c++) {
        size_t lo = (size_t)c * n / (size_t)width;
        size_t hi = (size_t)(c + 1) * n / (size_t)width;
        if (hi <= lo)
            hi = lo + 1;
        struct point m = {0, 0, 0, 0};
        for (size_t i = lo; i < hi && i < n; i++) {
            if (p[i].requested > m.requested)
                m.requested = p[i].requested;
            if (p[i].reserved > m.reserved)
                m.reserved = p[i].reserved;
            if (p[i].device_used > m.device_used)
                m.device_used = p[i].device_used;
        }
        col[c] = m;
    }
}

/* The unit for the axis, and the top of the axis: the largest value
 * rounded up to 1, 2, 2.5, 4, 5 or 8 times a power of ten of that unit, so
 * that the quarter marks read well. */
static double axis_top(uint64_t max, const char **unit, double *scale)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    *scale = 1;
    while (u < 4 && (double)max >= *scale * 1024) {
        *scale *= 1024;
        u++;
    }
    *unit = units[u];
    double v = (double)max / *scale, p = 1;
    if (v <= 0)
        return 1;
    while (p * 10 < v)
        p *= 10;
    while (p > v)
        p /= 10;
    static const double steps[] = {1, 2, 2.5, 4, 5, 8, 10};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
        if (steps[i] * p >= v)
            return steps[i] * p;
    return 10 * p;
}

/* Cells from the bottom a value fills (any value above 0 fills one). */
static int level(uint64_t v, double top_bytes, int height)
{
    double h = ceil((double)v / top_bytes * height - 1e-9);
    return h < 0 ? 0 : h > height ? height : (int)h;
}

static char cell(const struct point *col, double top, int height, int y)
{
    if (y <= level(col->requested, top, height))
        return '#';
    if (y <= level(col->reserved, top, height))
        return ':';
    if (col->device_used && y == level(col->device_used, top, height))
        return '-';
    return ' ';
}

static void y_label(char *buf, size_t len, double v, const char *unit)
{
    snprintf(buf, len, "%.4g %s", v, unit);
}

static void plot(const struct point *col, const struct tl_opts *o, uint64_t max)
{
    const char *unit;
    double scale, top = axis_top(max, &unit, &scale);
    char *line = malloc((size_t)o->width + 1);
    if (line == NULL)
        return;
    for (int y = o->height; y >= 1; y--) {
        char label[32] = "";
        if (y * 4 % o->height == 0) /* the quarters that fall on a row */
            y_label(label, sizeof label, top * y / o->height, unit);
        for (int c = 0; c < o->width; c++)
            line[c] = cell(&col[c], top * scale, o->height, y);
        line[o->width] = '\0';
        printf("%*s |%s\n", TL_LABEL, label, line);
    }
    char zero[32];
    y_label(zero, sizeof zero, 0, unit);
    printf("%*s +", TL_LABEL, zero);
    for (int c = 0; c < o->width; c++)
        putchar('-');
    putchar('\n');
    free(line);
}

/* ns as a double, back to an integer: a hostile trace's time span can
 * exceed what 64 bits hold (the conversion is undefined there). */
static uint64_t ns_of(double ns)
{
    return ns >= 18446744073709549568.0 ? UINT64_MAX : ns <= 0 ? 0 : (uint64_t)ns;
}

static void x_axis(const struct replay *r, size_t n, int width)
{
    char a[32], b[32], e[32];
    double end = (double)n * (double)r->bucket_ns;
    gmt_seconds(a, 0);
    gmt_seconds(b, ns_of(end / 2));
    gmt_seconds(e, ns_of(end));
    int half = width / 2, lb = (int)strlen(b), le = (int)strlen(e);
    int gap1 = half - (int)strlen(a) - lb / 2, gap2 = width - half - (lb - lb / 2) - le;
    printf("%*s  %s%*s%s%*s%s\n", TL_LABEL, "", a, gap1 > 1 ? gap1 : 1, "", b,
           gap2 > 1 ? gap2 : 1, "", e);
}

static uint64_t max_of(const struct point *col, int width, bool *drv)
{
    uint64_t m = 0;
    *drv = false;
    for (int c = 0; c < width; c++) {
        uint64_t v = col[c].reserved > col[c].requested ? col[c].reserved : col[c].requested;
        if (col[c].device_used > v)
            v = col[c].device_used;
        if (v > m)
            m = v;
        *drv |= col[c].device_used != 0;
    }
    return m;
}

static uint64_t max_host(const struct point *p, size_t n)
{
    uint64_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].host > m)
            m = p[i].host;
    return m;
}

static void legend(const struct gmt_common *c, const struct replay *r, bool drv,
                   uint64_t host)
{
    char a[32], b[32];
    printf("%*s  # requested (peak %s)  : reserved (peak %s)%s\n", TL_LABEL, "",
           gmt_size(c, a, (int64_t)r->peak_requested), gmt_size(c, b, (int64_t)r->peak_reserved),
           drv ? "  - device used (driver)" : "");
    if (host)
        printf("%*s  pinned host memory: peak %s (not drawn)\n", TL_LABEL, "",
               gmt_size(c, a, (int64_t)host));
}

static void chart(const struct loaded *l, const struct gmt_common *c,
                  const struct tl_opts *o, const struct point *p, size_t n)
{
    const struct replay *r = &l->r;
    char a[32];
    printf("%s (pid %u): device memory over %s\n", l->path, r->hdr.pid,
           gmt_seconds(a, replay_duration(r)));
    gmt_header_notes(r);
    struct point *col = calloc((size_t)o->width, sizeof *col);
    if (n == 0 || col == NULL) {
        printf("no device memory events\n");
        free(col);
        return;
    }
    columns(p, n, col, o->width);
    bool drv;
    uint64_t max = max_of(col, o->width, &drv);
    if (max == 0) {
        printf("no device memory held at any time\n");
        free(col);
        return;
    }
    if (c->markdown)
        printf("```\n");
    plot(col, o, max);
    x_axis(r, n, o->width);
    legend(c, r, drv, max_host(p, n));
    if (c->markdown)
        printf("```\n");
    free(col);
}

/* ---- driver ------------------------------------------------------------------ */

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct tl_opts *o = ctx;
    struct point *p;
    size_t n = series(&l->r, &o->close, &p);
    o->close.bucket_ns = 0; /* a next trace without records was not followed */
    if (c->json)
        json(l, p, n);
    else if (o->csv)
        csv(&l->r, p, n);
    else
        chart(l, c, o, p, n);
    free(p);
}

int cmd_timeline(int argc, char **argv)
{
    static const struct option opts[] = {
        {"csv", no_argument, NULL, OPT_CSV},
        {"width", required_argument, NULL, OPT_WIDTH},
        {"height", required_argument, NULL, OPT_HEIGHT},
        {NULL, 0, NULL, 0},
    };
    struct tl_opts o = {false, TL_WIDTH, TL_HEIGHT, {0, {{0, 0, 0, false}}}};
    const struct gmt_command cmd = {
        .schema = "gpumemtrace.timeline/1",
        .args = {.options = opts, .option = option, .usage = usage},
        .each = each,
        .replay = {.observe = {{.event = on_event, .ctx = &o}}},
    };
    /* --csv and --json both write the series: refuse the pair before any
     * output starts (gmt_run opens the JSON document at once) */
    if (gmt_args_has(argc, argv, &cmd.args, OPT_CSV) &&
        gmt_args_has(argc, argv, &cmd.args, OPT_JSON)) {
        gmt_errorf("timeline: --csv and --json exclude each other");
        return EXIT_ERROR;
    }
    return gmt_run(argc, argv, &cmd, &o);
}
