/* export_perfetto.c - `export --format perfetto`: Chrome Trace Event JSON.
 *
 * The JSON object format of the Trace Event Format, which ui.perfetto.dev
 * and chrome://tracing open:
 *   - process and thread names ("ph":"M");
 *   - per device, counters ("ph":"C") of requested, allocated and reserved
 *     bytes, and the device memory in use per the driver where the trace
 *     sampled it - one counter event name per series ("GPU 0 requested",
 *     its value in args.bytes), so each series is a track of its own;
 *   - out-of-memory events as instants on the process ("ph":"i", "s":"p"),
 *     markers as instants on their thread ("s":"t");
 *   - ranges (push/pop markers, NVTX) as slices on their thread ("ph":"B"
 *     and "E"; a pop without a push is dropped, ranges still open at the
 *     end close there).
 * Timestamps are microseconds since the trace began (fractions keep the
 * nanoseconds), never decreasing in file order, so every track is sorted.
 *
 * The levels are the replay's own (replay.h: requested, allocated,
 * reserved per device), read after each record of a second replay
 * (an observer of the replay), so the counters' maxima are the peaks the other
 * commands report.
 *
 * Decimation. A long run changes its levels millions of times; drawing
 * needs far fewer points. The run is cut into EXPORT_TE_BUCKETS equal
 * spans; of each span a series keeps its highest point (at the moment it
 * was reached) and the level at the span's end, so every peak is exact and
 * every fall shows. A short trace keeps nearly every change.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "export.h"

#define EXPORT_TE_BUCKETS 20000

enum { S_REQUESTED, S_ALLOCATED, S_RESERVED, S_USED, NSERIES };
static const char *const series_name[NSERIES] = {"requested", "allocated", "reserved",
                                                 "device used (driver)"};

struct series {
    int64_t cur;
    bool open;            /* the span below has changes not written */
    uint64_t span;        /* index of the span of the changes held */
    int64_t max;          /* highest level in the span, and when */
    uint64_t max_t;
    uint64_t last_t;      /* of the latest change */
    int64_t written;      /* last value written */
    bool any_written;
};

struct dev {
    struct series s[NSERIES];
};

#define NAMED_DEPTH 64
struct thread_depth {
    uint32_t thread;
    uint32_t depth;       /* ranges open */
    /* their names, outermost first (the trace's strings), for the "E"
     * events: the format does not need them, viewers (speedscope) match
     * on them */
    const char *names[NAMED_DEPTH];
    UT_hash_handle hh;
};

struct te {
    struct loaded *l;
    FILE *f;
    struct dev dev[REPLAY_MAX_DEVICES];
    struct thread_depth *threads;
    uint64_t span_ns, last_ts, end;
    bool first;
    bool nomem;
};

/* ---- writing ---------------------------------------------------------------- */

static void sep(struct te *t)
{
    fputs(t->first ? "\n" : ",\n", t->f);
    t->first = false;
}

/* A time as microseconds, never before the last one written. */
static void ts(struct te *t, uint64_t time)
{
    uint64_t ns = export_rel_ns(&t->l->r, time);
    if (ns < t->last_ts)
        ns = t->last_ts;
    t->last_ts = ns;
    fprintf(t->f, "\"ts\":%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static uint32_t pid(const struct te *t)
{
    return t->l->r.hdr.pid;
}

static uint64_t tid(const struct te *t, uint32_t thread)
{
    const struct gmt_thread_def *d = gmt_defs_thread(&t->l->r.defs, thread);
    return d && d->tid ? d->tid : thread;
}

static void counter(struct te *t, int device, int s, uint64_t time, int64_t v)
{
    sep(t);
    fprintf(t->f, "{\"ph\":\"C\",\"pid\":%u,\"tid\":0,\"name\":\"GPU %d %s\",", pid(t), device,
            series_name[s]);
    ts(t, time);
    fprintf(t->f, ",\"args\":{\"bytes\":%" PRId64 "}}", v);
}

/* ---- decimated counters ----------------------------------------------------- */

static void flush(struct te *t, int device, int s)
{
    struct series *x = &t->dev[device].s[s];
    if (!x->open)
        return;
    if (!x->any_written || x->max != x->written) {
        counter(t, device, s, x->max_t, x->max);
        x->written = x->max;
        x->any_written = true;
    }
    if (x->cur != x->written) {
        counter(t, device, s, x->last_t, x->cur);
        x->written = x->cur;
    }
    x->open = false;
}

/* Everything held, before an event at a moment of its own (a marker, an
 * OOM) is written. */
static void flush_all(struct te *t)
{
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++)
        for (int k = 0; k < NSERIES; k++)
            flush(t, d, k);
}

/* Series s of a device changed to v at time; earlier spans are written
 * first (for every series, so file order stays time order). */
static void level(struct te *t, int device, int s, uint64_t time, int64_t v)
{
    uint64_t span = export_rel_ns(&t->l->r, time) / t->span_ns;
    struct series *x = &t->dev[device].s[s];
    if (x->open && span != x->span) {
        for (int d = 0; d < REPLAY_MAX_DEVICES; d++)
            for (int k = 0; k < NSERIES; k++)
                if (t->dev[d].s[k].open && t->dev[d].s[k].span != span)
                    flush(t, d, k);
    }
    if (!x->open) {
        x->open = true;
        x->span = span;
        x->max = v;
        x->max_t = time;
    } else if (v > x->max) {
        x->max = v;
        x->max_t = time;
    }
    x->cur = v;
    x->last_t = time;
}

/* ---- the levels ------------------------------------------------------------------ */

static void on_oom(struct te *t, const struct gmt_rec *rec)
{
    char label[64];
    flush_all(t);
    snprintf(label, sizeof label, "OOM: %" PRIu64 " bytes on GPU %u", rec->size, rec->device);
    sep(t);
    fprintf(t->f, "{\"ph\":\"i\",\"s\":\"p\",\"pid\":%u,\"tid\":%" PRIu64
                  ",\"name\":\"%s\",\"cat\":\"oom\",",
            pid(t), tid(t, rec->thread), label);
    ts(t, rec->time);
    fprintf(t->f, ",\"args\":{\"size\":%" PRIu64 ",\"device\":%u,\"site\":", rec->size,
            rec->device);
    gmt_json_str(t->f, sym_site(t->l->sym, rec->stack, GRAIN_LINE, 0));
    fputs("}}", t->f);
}

/* ---- markers ----------------------------------------------------------------- */

static struct thread_depth *depth_of(struct te *t, uint32_t thread)
{
    struct thread_depth *d;
    HASH_FIND(hh, t->threads, &thread, sizeof thread, d);
    if (d == NULL && (d = calloc(1, sizeof *d)) != NULL) {
        d->thread = thread;
        HASH_ADD(hh, t->threads, thread, sizeof d->thread, d);
    }
    if (d == NULL)
        t->nomem = true;
    return d;
}

static void on_marker(struct te *t, const struct gmt_rec *rec)
{
    const char *name = gmt_defs_string(&t->l->r.defs, rec->value);
    struct thread_depth *d = depth_of(t, rec->thread);
    if (d == NULL)
        return;
    const char *ph;
    flush_all(t);
    if (rec->api == GMT_MARK_PUSH) {
        ph = "B";
        if (d->depth < NAMED_DEPTH)
            d->names[d->depth] = name;
        d->depth++;
    } else if (rec->api == GMT_MARK_POP) {
        if (d->depth == 0)
            return; /* nothing open on this thread */
        d->depth--;
        ph = "E";
        name = d->depth < NAMED_DEPTH ? d->names[d->depth] : NULL;
    } else {
        ph = "i";
    }
    sep(t);
    fprintf(t->f, "{\"ph\":\"%s\",\"pid\":%u,\"tid\":%" PRIu64 ",\"cat\":\"marker\",", ph,
            pid(t), tid(t, rec->thread));
    if (*ph == 'i')
        fputs("\"s\":\"t\",", t->f);
    fputs("\"name\":", t->f);
    gmt_json_str(t->f, name ? name : "(marker)");
    fputc(',', t->f);
    ts(t, rec->time);
    fputc('}', t->f);
}

/* an observer of the replay: every record, after the replay applied it. */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct te *t = ctx;
    if (rec->kind != GMT_K_EXT && rec->time > t->end)
        t->end = rec->time;
    int d = r->change.device;
    if (d >= 0) {
        const struct device_state *ds = &r->dev[d];
        level(t, d, S_REQUESTED, rec->time, ds->requested);
        level(t, d, S_ALLOCATED, rec->time, ds->allocated);
        level(t, d, S_RESERVED, rec->time, ds->reserved);
    }
    if (rec->kind == GMT_K_SAMPLE && rec->v[4])
        level(t, (int)(rec->device % REPLAY_MAX_DEVICES), S_USED, rec->time,
              (int64_t)rec->v[4]);
    else if (rec->kind == GMT_K_MARKER)
        on_marker(t, rec);
    else if (rec->kind == GMT_K_ALLOC && rec->result == 2 && !gmt_is_fw_backing(rec))
        on_oom(t, rec);
}

/* ---- the file -------------------------------------------------------------------- */

static void metadata(struct te *t)
{
    const struct replay *r = &t->l->r;
    const struct gmt_defs *d = &r->defs;
    char name[512];
    const char *cmd = d->process.cmdline ? d->process.cmdline : "";
    snprintf(name, sizeof name, "gpumemtrace: %.400s", *cmd ? cmd : t->l->path);
    sep(t);
    fprintf(t->f, "{\"ph\":\"M\",\"pid\":%u,\"tid\":0,\"name\":\"process_name\",\"args\":"
                  "{\"name\":", pid(t));
    gmt_json_str(t->f, name);
    fputs("}}", t->f);
    for (const struct gmt_thread_def *th = d->threads; th; th = th->hh.next) {
        sep(t);
        fprintf(t->f, "{\"ph\":\"M\",\"pid\":%u,\"tid\":%" PRIu64
                      ",\"name\":\"thread_name\",\"args\":{\"name\":",
                pid(t), th->tid ? th->tid : th->index);
        char tn[48];
        snprintf(tn, sizeof tn, "%s", th->name[0] ? th->name : "thread");
        gmt_json_str(t->f, tn);
        fputs("}}", t->f);
    }
}

int export_perfetto(struct loaded *l, FILE *out, char *err, size_t errlen)
{
    struct te *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->l = l;
    t->f = out;
    t->first = true;
    uint64_t dur = replay_duration(&l->r);
    t->span_ns = dur / EXPORT_TE_BUCKETS + 1;
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"gpumemreport export\","
          "\"trace\":", out);
    gmt_json_str(out, l->path);
    fputs("},\"traceEvents\":[", out);
    metadata(t);
    struct replay *again = malloc(sizeof *again);
    int rc = -1;
    if (again == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    struct replay_opts o = {.observe = {{.event = on_event, .ctx = t}}};
    if (replay_trace(l->path, again, &o, err, errlen) != 0)
        goto out;
    flush_all(t);
    /* ranges still open end with the trace */
    for (struct thread_depth *d = t->threads; d; d = d->hh.next) {
        for (; d->depth; d->depth--) {
            const char *name = d->depth <= NAMED_DEPTH ? d->names[d->depth - 1] : NULL;
            sep(t);
            fprintf(out, "{\"ph\":\"E\",\"pid\":%u,\"tid\":%" PRIu64 ",\"name\":", pid(t),
                    tid(t, d->thread));
            gmt_json_str(out, name ? name : "(marker)");
            fputc(',', out);
            ts(t, t->end);
            fputc('}', out);
        }
    }
    fputs("\n]}\n", out);
    if (t->nomem) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    if (again)
        replay_free(again);
    free(again);
    struct thread_depth *d, *tmp;
    HASH_ITER(hh, t->threads, d, tmp) {
        HASH_DEL(t->threads, d);
        free(d);
    }
    free(t);
    return rc;
}
