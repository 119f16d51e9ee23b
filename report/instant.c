/* instant.c - a trace's state at one chosen instant (instant.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "instant.h"
#include "kinds.h"

int gmt_at_parse(const char *arg, struct gmt_at *at, char *why, size_t whylen)
{
    memset(at, 0, sizeof *at);
    size_t len = strlen(arg);
    if (len == 0) {
        snprintf(why, whylen, "an instant is oom[:N], MARK[:N] or a time such as 1.5s");
        return -1;
    }
    /* a time: digits with at most one point, then s or ms */
    size_t digits = strspn(arg, "0123456789.");
    const char *unit = arg + digits;
    if (digits && (!strcmp(unit, "s") || !strcmp(unit, "ms"))) {
        const char *dot = strchr(arg, '.');
        char *end;
        double v = strtod(arg, &end);
        if ((dot && strchr(dot + 1, '.')) || end != unit || !isfinite(v) || v < 0 ||
            v > 1e9) {
            snprintf(why, whylen, "'%s' is no time: seconds from the trace's start, "
                                  "such as 1.5s or 250ms", arg);
            return -1;
        }
        at->what = GMT_AT_TIME;
        at->ns = (uint64_t)llround(v * (unit[0] == 'm' ? 1e6 : 1e9));
        return 0;
    }
    /* a number without its unit, or a negative time: no mark is named so */
    if ((digits == len && strchr("0123456789", arg[0])) ||
        (arg[0] == '-' && strchr("0123456789.", arg[1] ? arg[1] : 'x'))) {
        snprintf(why, whylen, "'%s' is no time: seconds from the trace's start with the "
                              "unit, such as 1.5s or 250ms", arg);
        return -1;
    }
    /* oom or MARK, then :N */
    const char *colon = strrchr(arg, ':');
    size_t name_len = len;
    at->n = 1;
    if (colon) {
        const char *num = colon + 1;
        bool all_digits = *num && strspn(num, "0123456789") == strlen(num);
        if (all_digits || !strncmp(arg, "oom:", 4) || *num == '\0') {
            char *end;
            unsigned long long n = all_digits ? strtoull(num, &end, 10) : 0;
            if (!all_digits || n == 0 || strlen(num) > 12) {
                snprintf(why, whylen, "in '%s', N is a number from 1 (the Nth)", arg);
                return -1;
            }
            at->n = n;
            name_len = (size_t)(colon - arg);
        }
    }
    if (name_len == 3 && !strncmp(arg, "oom", 3)) {
        at->what = GMT_AT_OOM;
        return 0;
    }
    if (name_len == 0 || name_len >= sizeof at->mark) {
        snprintf(why, whylen, "'%.40s%s' is no mark name", arg, len > 40 ? "..." : "");
        return -1;
    }
    at->what = GMT_AT_MARK;
    memcpy(at->mark, arg, name_len);
    at->mark[name_len] = '\0';
    return 0;
}

const char *gmt_at_name(const struct gmt_at *at, char *buf, size_t len)
{
    switch (at->what) {
    case GMT_AT_OOM:
        snprintf(buf, len, "out-of-memory #%" PRIu64, at->n);
        break;
    case GMT_AT_MARK:
        snprintf(buf, len, "mark \"%s\" #%" PRIu64, at->mark, at->n);
        break;
    default:
        snprintf(buf, len, "%.3f s", (double)at->ns / 1e9);
        break;
    }
    return buf;
}

/* ---- the pass ----------------------------------------------------------------- */

struct site_now {
    int64_t bytes, count, alloc;
};

struct pass {
    struct gmt_instant *in;
    uint64_t oom_seq;    /* GMT_AT_OOM */
    uint64_t target;     /* GMT_AT_TIME: the record to stop after (count from 1) */
    uint64_t marks_seen; /* GMT_AT_MARK */
    bool snapped;
    struct site_now *sites;
    size_t nsites;
    bool nomem;
};

static bool is_mark(const struct replay *r, const struct gmt_rec *rec, const char *name)
{
    if (rec->kind != GMT_K_MARKER || (rec->api != GMT_MARK && rec->api != GMT_MARK_PUSH))
        return false;
    const char *s = gmt_defs_string(&r->defs, rec->value);
    return s && strcmp(s, name) == 0;
}

static void snap(struct pass *p, struct replay *r, const struct gmt_rec *rec)
{
    struct gmt_instant *in = p->in;
    p->snapped = true;
    in->seq = rec ? rec->seq : 0;
    if (in->at.what == GMT_AT_TIME)
        in->time = r->hdr.start_monotonic_ns + in->at.ns;
    else
        in->time = rec ? rec->time : 0;
    in->requested = r->requested;
    in->allocated = r->allocated;
    in->reserved = r->reserved;
    if (in->device >= 0)
        in->dev = r->dev[in->device % REPLAY_MAX_DEVICES];
    in->beyond = replay_beyond(r, in->device, &in->beyond_source);
    p->nsites = r->nsites;
    p->sites = calloc(p->nsites ? p->nsites : 1, sizeof *p->sites);
    if (p->sites == NULL) {
        p->nomem = true;
        return;
    }
    for (size_t i = 0; i < p->nsites; i++)
        p->sites[i] = (struct site_now){r->sites[i].live_bytes, r->sites[i].live_count,
                                        r->sites[i].live_alloc_bytes};
}

static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct pass *p = ctx;
    struct gmt_instant *in = p->in;
    bool mark = in->at.what == GMT_AT_MARK && is_mark(r, rec, in->at.mark);
    p->marks_seen += mark;
    if (p->snapped)
        return;
    bool now;
    switch (in->at.what) {
    case GMT_AT_OOM:
        now = rec->kind == GMT_K_ALLOC && rec->result != 0 && rec->seq == p->oom_seq;
        break;
    case GMT_AT_MARK:
        now = mark && p->marks_seen == in->at.n;
        break;
    default:
        now = r->records == p->target;
        break;
    }
    if (in->each)
        in->each(r, rec, in->ctx);
    if (now) {
        snap(p, r, rec);
        if (in->then)
            in->then(r, rec, in->ctx);
    }
}

/* GMT_AT_TIME: how many records come before the first one later than the
 * instant (extension records, which define things, have no say). */
static int time_target(struct loaded *l, struct pass *p, char *why, size_t whylen)
{
    uint64_t t0 = l->r.hdr.start_monotonic_ns, at = t0 + p->in->at.ns;
    uint64_t dur = replay_duration(&l->r);
    if (p->in->at.ns > dur) {
        snprintf(why, whylen, "the trace spans %.3f s, not %.3f s", (double)dur / 1e9,
                 (double)p->in->at.ns / 1e9);
        return -1;
    }
    char err[256];
    struct gmt_reader *rd = gmt_reader_open(l->path, err, sizeof err);
    if (rd == NULL) {
        gmt_errorf("%s: %s", l->path, err);
        return -2;
    }
    struct gmt_rec rec;
    uint64_t n = 0;
    while (gmt_reader_next(rd, &rec) == 1) {
        if (rec.kind != GMT_K_EXT && rec.time > at)
            break;
        n++;
    }
    gmt_reader_close(rd);
    p->target = n;
    return 0;
}

struct loaded *gmt_at_load(struct loaded *l, const struct gmt_common *c,
                           struct gmt_instant *in)
{
    struct pass p = {.in = in};
    const struct replay *r0 = &l->r;
    in->why[0] = '\0';
    in->device = -1;
    in->oom = NULL;
    struct replay_opts o = {.observe = {{.event = on_event, .ctx = &p}}};
    switch (in->at.what) {
    case GMT_AT_OOM:
        if (in->at.n > r0->nooms) {
            if (r0->ooms_total == 0)
                snprintf(in->why, sizeof in->why, "no out-of-memory event in the trace");
            else if (in->at.n <= r0->ooms_total)
                snprintf(in->why, sizeof in->why, "only the first %zu out-of-memory "
                         "events are kept", r0->nooms);
            else
                snprintf(in->why, sizeof in->why, "the trace has %" PRIu64
                         " out-of-memory event%s, not %" PRIu64, r0->ooms_total,
                         r0->ooms_total == 1 ? "" : "s", in->at.n);
            return NULL;
        }
        in->oom = &r0->ooms[in->at.n - 1];
        in->device = (int)(in->oom->device % REPLAY_MAX_DEVICES);
        p.oom_seq = in->oom->seq;
        /* the kinds first: they are the replay's state at the event */
        if (in->kinds && (r0->hdr.features & GMT_FEAT_PYTHON_STACKS))
            o = (struct replay_opts){.kinds_seq = p.oom_seq,
                                     .observe = {GMT_KINDS_OBSERVER,
                                                 {.event = on_event, .ctx = &p}}};
        break;
    case GMT_AT_TIME: {
        int rc = time_target(l, &p, in->why, sizeof in->why);
        if (rc != 0)
            return NULL;
        break;
    }
    default:
        break;
    }
    struct loaded *k = gmt_load(l->path, c, &o);
    if (k == NULL)
        return NULL;
    if (in->at.what == GMT_AT_TIME && p.target == 0 && !p.snapped)
        snap(&p, &k->r, NULL); /* before the first record: nothing live */
    in->occurrences = p.marks_seen;
    if (!p.snapped) {
        if (in->at.what == GMT_AT_MARK && p.marks_seen == 0)
            snprintf(in->why, sizeof in->why, "no mark named \"%s\" in the trace",
                     in->at.mark);
        else if (in->at.what == GMT_AT_MARK)
            snprintf(in->why, sizeof in->why, "mark \"%s\" occurs %" PRIu64 " time%s, "
                     "not %" PRIu64, in->at.mark, p.marks_seen, p.marks_seen == 1 ? "" : "s",
                     in->at.n);
        else /* the trace changed under us, or a damaged one read otherwise */
            snprintf(in->why, sizeof in->why, "the second reading of the trace did not "
                     "reach the instant");
        gmt_unload(k);
        return NULL;
    }
    if (p.nomem) {
        gmt_errorf("%s: out of memory", l->path);
        gmt_unload(k);
        return NULL;
    }
    for (size_t i = 0; i < k->r.nsites; i++) {
        struct site *s = &k->r.sites[i];
        struct site_now v = i < p.nsites ? p.sites[i] : (struct site_now){0, 0, 0};
        s->peak_bytes = v.bytes;
        s->peak_count = v.count;
        s->peak_alloc_bytes = v.alloc;
    }
    free(p.sites);
    return k;
}
