/* replay_series.c - the replay's time series: the timeline's buckets,
 * the per-site growth series (by time, or by steps), and the per-site
 * values at the followed marks.
 *
 * Memory stays fixed however long the run: REPLAY_BUCKETS timeline
 * buckets and REPLAY_GROWTH_BUCKETS growth buckets, which merge in pairs
 * when the run outlasts them. The hot part - finding the bucket of an
 * event, which is nearly always the last one found - is inline in
 * replay_internal.h; this file has the rest.
 */
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"

static void merge_buckets(struct replay *r)
{
    for (int i = 0; i < REPLAY_BUCKETS / 2; i++) {
        struct bucket *a = &r->buckets[2 * i], *b = &r->buckets[2 * i + 1];
        struct bucket m = *a;
        if (b->used) {
            if (!m.used)
                m = *b;
            if (b->requested > m.requested)
                m.requested = b->requested;
            if (b->reserved > m.reserved)
                m.reserved = b->reserved;
            if (b->host > m.host)
                m.host = b->host;
            m.device_used = b->device_used ? b->device_used : m.device_used;
            m.used = true;
        }
        r->buckets[i] = m;
    }
    memset(&r->buckets[REPLAY_BUCKETS / 2], 0,
           REPLAY_BUCKETS / 2 * sizeof r->buckets[0]);
    r->bucket_ns *= 2;
    r->cur_bucket = NULL; /* ranges changed */
}

/* ---- a site's growth series: points, or every bucket -------------------- */

void replay_site_series(const struct site_growth *g, int64_t *out, int n)
{
    if (g->dense) {
        memcpy(out, g->dense, (size_t)n * sizeof *out);
        return;
    }
    int64_t v = 0;
    for (int b = 0, i = 0; b < n; b++) {
        while (i < g->npoints && g->at[i] <= b)
            v = g->value[i++];
        out[b] = v;
    }
}

/* Bucket b (the buckets are written in order) holds v. */
static void series_put(struct site_growth *g, int b, int64_t v)
{
    if (g->dense) {
        g->dense[b] = v;
        return;
    }
    int64_t now = g->npoints ? g->value[g->npoints - 1] : 0;
    if (v == now)
        return;
    if (g->npoints && g->at[g->npoints - 1] == b) {
        g->value[g->npoints - 1] = v;
        return;
    }
    if (g->npoints < GROWTH_POINTS) {
        g->at[g->npoints] = (uint8_t)b;
        g->value[g->npoints++] = v;
        return;
    }
    /* one change too many: every bucket from here on (out of memory:
     * the change is lost, as a site's would be) */
    int64_t *d = malloc(REPLAY_GROWTH_BUCKETS * sizeof *d);
    if (d == NULL)
        return;
    replay_site_series(g, d, REPLAY_GROWTH_BUCKETS);
    for (int i = b; i < REPLAY_GROWTH_BUCKETS; i++)
        d[i] = v;
    g->dense = d;
}

static void merge_growth(struct replay *r)
{
    for (size_t k = 0; k < r->nsites; k++) {
        struct site_growth *s = r->sites[k].growth;
        if (s == NULL)
            continue;
        if (s->dense) {
            int64_t *g = s->dense;
            for (int i = 0; i < REPLAY_GROWTH_BUCKETS / 2; i++)
                g[i] = g[2 * i + 1]; /* the value at the end of the merged pair */
            for (int i = REPLAY_GROWTH_BUCKETS / 2; i < REPLAY_GROWTH_BUCKETS; i++)
                g[i] = g[REPLAY_GROWTH_BUCKETS / 2 - 1];
            continue;
        }
        /* a change at bucket p shows in merged bucket p / 2 (which takes
         * the value of old bucket 2i + 1); of two that land together the
         * later holds, and one that restores the value before it goes */
        int m = 0;
        for (int i = 0; i < s->npoints; i++) {
            uint8_t at = (uint8_t)(s->at[i] / 2);
            if (m && s->at[m - 1] == at)
                m--;
            if ((m ? s->value[m - 1] : 0) == s->value[i])
                continue;
            s->at[m] = at;
            s->value[m++] = s->value[i];
        }
        s->npoints = (uint8_t)m;
    }
    r->g_bucket_ns *= 2;
    r->g_last /= 2;
}

/* Growth series hold, per site, the live bytes at the end of each bucket:
 * every bucket from the last one written up to `b` gets the current value
 * of every site (carried forward), so a site untouched in a bucket keeps
 * its value there. */
void replay_growth_fill_to(struct replay *r, int b)
{
    while (r->g_last < b) {
        r->g_last++;
        for (size_t k = 0; k < r->nsites; k++)
            if (r->sites[k].growth)
                series_put(r->sites[k].growth, r->g_last, r->sites[k].live_bytes);
    }
}

/* The buckets of steps (replay_opts.step_anchor): buckets in use, and the
 * bucket of step j. */
int replay_step_buckets(const struct replay *r)
{
    return r->step_count < REPLAY_GROWTH_BUCKETS ? (int)r->step_count
                                                 : REPLAY_GROWTH_BUCKETS;
}

static int step_bucket(const struct replay *r, uint64_t j)
{
    return (int)(j * (uint64_t)replay_step_buckets(r) / r->step_count);
}

/* A step begins (before the anchor's allocation is applied): the buckets
 * of the steps that ended get their end values. Occurrences beyond the
 * count the first replay saw (none, for the same file) are ignored. */
void replay_step_begins(struct replay *r, uint64_t t)
{
    uint64_t j = r->steps_begun++;
    if (j == 0) {
        r->first_step_time = t;
        for (size_t k = 0; k < r->nsites; k++)
            if (r->sites[k].growth)
                r->sites[k].growth->at_first_step = r->sites[k].live_bytes;
    }
    if (j == 0 || j >= r->step_count)
        return;
    int b = step_bucket(r, j);
    if (b > step_bucket(r, j - 1))
        replay_growth_fill_to(r, b - 1);
}

void replay_growth_advance(struct replay *r, uint64_t t)
{
    if (t < r->t0)
        return;
    uint64_t b = (t - r->t0) / r->g_bucket_ns;
    while (b >= REPLAY_GROWTH_BUCKETS) {
        merge_growth(r);
        b = (t - r->t0) / r->g_bucket_ns;
    }
    replay_growth_fill_to(r, (int)b);
}

/* The bucket of time t, when it is not the last one found (the inline
 * replay_bucket_at's fast path): buckets merge in pairs when t is past
 * the last one. */
struct bucket *replay_bucket_find(struct replay *r, uint64_t t)
{
    if (t < r->t0)
        t = r->t0;
    uint64_t b = (t - r->t0) / r->bucket_ns;
    while (b >= REPLAY_BUCKETS) {
        merge_buckets(r);
        b = (t - r->t0) / r->bucket_ns;
    }
    r->cur_lo = r->t0 + b * r->bucket_ns;
    r->cur_hi = r->cur_lo + r->bucket_ns;
    r->cur_bucket = &r->buckets[b];
    return r->cur_bucket;
}

/* ---- markers --------------------------------------------------------------- */

/* The loop behind replay_marks_before_change (replay_internal.h says
 * how the values are kept lazily). */
void replay_marks_update(const struct replay *r, struct site *s)
{
    if (s->marks == NULL && (s->marks = calloc(1, sizeof *s->marks)) == NULL)
        return; /* out of memory: its values stay its live bytes */
    struct site_marks *m = s->marks;
    for (int j = 0; j < r->nmarks; j++) {
        if (r->mark[j].count > m->stamp[j]) {
            if (m->stamp[j] == 0)
                m->first[j] = s->live_bytes;
            m->last[j] = s->live_bytes;
            m->stamp[j] = r->mark[j].count;
        }
    }
}

bool replay_site_mark(const struct replay *r, const struct site *s, int slot,
                      int64_t *first, int64_t *last)
{
    if (slot < 0 || slot >= r->nmarks || r->mark[slot].count == 0 || !r->want_marks)
        return false;
    static const struct site_marks unchanged; /* no change since the marks began */
    const struct site_marks *m = s->marks ? s->marks : &unchanged;
    bool since = r->mark[slot].count > m->stamp[slot]; /* unchanged since */
    *first = m->stamp[slot] == 0 ? s->live_bytes : m->first[slot];
    *last = since ? s->live_bytes : m->last[slot];
    return true;
}

void replay_on_marker(struct replay *r, const struct gmt_rec *rec)
{
    r->markers++;
    if (r->step_mark && (rec->api == GMT_MARK || rec->api == GMT_MARK_PUSH)) {
        const char *name = gmt_defs_string(&r->defs, rec->value);
        if (name && strcmp(name, r->step_mark) == 0)
            replay_step_begins(r, rec->time);
    }
    /* a region's start counts as an occurrence of its name too: NVTX
     * users mark steps with ranges */
    if (r->want_marks && (rec->api == GMT_MARK || rec->api == GMT_MARK_PUSH)) {
        const char *name = gmt_defs_string(&r->defs, rec->value);
        int j = 0;
        while (j < r->nmarks && (name == NULL || strcmp(r->mark[j].name, name)))
            j++;
        if (j == r->nmarks && name != NULL && j < REPLAY_MARK_SLOTS &&
            (r->mark[j].name = strdup(name)) != NULL)
            r->nmarks++;
        if (j < r->nmarks)
            r->mark[j].count++;
    }
}
