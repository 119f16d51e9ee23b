/* html_pass.c - `gpumemreport html`'s timeline by site and its pool
 * pictures, followed as the trace is replayed.
 *
 * An observer of the replay that loads the trace (cmd_html.c): after each
 * record, the levels are the replay's own requested, allocated and
 * reserved bytes, and a site's bytes move with r->change - so the totals
 * here are the replay's, by the replay's rules.
 *
 * Decimation that keeps the peak. The run is cut into HTML_BUCKETS
 * buckets; a bucket keeps the largest requested total reached in it and
 * the bands at that moment (so they add up to it), and the largest
 * allocated, reserved and driver-reported bytes. A bucket starts with the
 * state at its start, so an idle stretch shows the level held through it.
 * The peak's bucket therefore shows the picture at the peak, exactly.
 *
 * The bands are the top sites at the peak, known only once the whole
 * trace is read. So the pass keeps every site's bytes at each bucket's
 * moment, as a log of changes: a site is logged in a bucket only when its
 * bytes at that moment differ from the last logged, and a site changed
 * after its bucket's moment keeps its bytes of that moment aside until
 * the bucket ends. The bands are summed from the log at the end. Memory:
 * at most two entries per bucket and site that changed in it.
 *
 * The buckets' width is the run's length over HTML_BUCKETS: a trace
 * closed normally says its length in its header. The pool's picture at
 * the peak is taken when the peak was last raised, before the next record
 * reaches the poolview (poolview.h), unless such pictures, retaken at
 * each new peak, would cost more than a bounded work per record; a
 * picture at each out-of-memory event when it happens. When the length
 * was not known ahead (a trace cut short), the records came out of order
 * (a damaged trace), or the picture at the peak was not kept, the trace is
 * replayed once more with the moments and the
 * length known: the same pass, with its pictures planned.
 *
 * Marks and phases (gpumemtrace_mark, NVTX) are kept up to HTML_MAX_MARKS.
 *
 * Memory: HTML_BUCKETS x the sites that change, the marks kept, the pool's
 * live blocks and segments - never the trace's length.
 */
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "html.h"
#include "pvfollow.h"

#define OPEN_MAX 256 /* phases open at once, followed */

/* ---- the pass's state ---------------------------------------------------- */

struct open_phase {
    uint32_t thread;
    long mark; /* index into marks; -1: not kept */
};

/* A site's requested bytes as the buckets see them. */
struct band_site {
    uint64_t addr;   /* the stack id + 1 (addrmap.h: 0 is an empty slot) */
    int64_t cur;     /* now */
    int64_t saved;   /* at the bucket's moment, when changed since (moment) */
    int64_t out;     /* last logged */
    uint64_t moment; /* the moment `saved` is of */
    uint64_t bucket; /* 1 + the bucket it was last changed in */
};

struct band_sites {
    struct band_site *slot;
    size_t cap, n;
};

ADDRMAP_FUNCS(bs, struct band_sites, struct band_site, 256)

struct band_log {
    uint32_t bucket, stack;
    int64_t bytes;
};

struct html_pass {
    bool started, off, planned, nomem;
    uint64_t t0, dur, bucket_ns;
    long cur; /* bucket filled last; -1: none */
    int64_t requested, allocated, reserved;
    uint64_t used[REPLAY_MAX_DEVICES];
    int64_t used_sum;
    bool any_used;
    int64_t *lv_requested, *lv_allocated, *lv_reserved, *lv_used; /* [HTML_BUCKETS] */
    /* sites and the log of their bytes at the buckets' moments */
    struct band_sites sites;
    uint64_t moment;
    uint32_t *touched; /* stack ids changed in the current bucket */
    size_t ntouched, cap_touched;
    struct band_log *log;
    size_t nlog, cap_log;
    /* marks: names resolved at the end, from the loaded trace */
    struct html_mark *marks;
    uint64_t *mark_name;
    size_t nmarks, cap_marks;
    uint64_t marks_total;
    struct open_phase open[OPEN_MAX];
    int nopen, deeper;
    struct pv_follow pool; /* its pictures */
};

/* ---- buckets ----------------------------------------------------------------- */

static long bucket_of(const struct html_pass *p, uint64_t t)
{
    if (t <= p->t0)
        return 0;
    uint64_t b = (t - p->t0) / p->bucket_ns;
    return b >= HTML_BUCKETS ? HTML_BUCKETS - 1 : (long)b;
}

static void log_add(struct html_pass *p, uint32_t bucket, uint32_t stack, int64_t bytes)
{
    if (p->nlog == p->cap_log) {
        size_t cap = p->cap_log ? 2 * p->cap_log : 1024;
        struct band_log *g = realloc(p->log, cap * sizeof *g);
        if (g == NULL) {
            p->nomem = true;
            return;
        }
        p->log = g;
        p->cap_log = cap;
    }
    p->log[p->nlog++] = (struct band_log){bucket, stack, bytes};
}

/* Bucket k ends: each site changed in it is logged with its bytes at the
 * bucket's moment, and at k + 1 with its bytes now (those of the buckets
 * after, up to the next change). */
static void close_bucket(struct html_pass *p, long k)
{
    /* the log stays in bucket order: all of k's entries, then k + 1's */
    for (size_t i = 0; i < p->ntouched; i++) {
        struct band_site *e = bs_find(&p->sites, (uint64_t)p->touched[i] + 1);
        int64_t at = e == NULL ? 0 : e->moment == p->moment ? e->saved : e->cur;
        if (e && at != e->out) {
            log_add(p, (uint32_t)k, p->touched[i], at);
            e->out = at;
        }
    }
    for (size_t i = 0; k + 1 < HTML_BUCKETS && i < p->ntouched; i++) {
        struct band_site *e = bs_find(&p->sites, (uint64_t)p->touched[i] + 1);
        if (e && e->cur != e->out) {
            log_add(p, (uint32_t)(k + 1), p->touched[i], e->cur);
            e->out = e->cur;
        }
    }
    p->ntouched = 0;
}

/* Buckets after the current one up to time t start with the state now. */
static void advance(struct html_pass *p, uint64_t t)
{
    long b = bucket_of(p, t);
    if (p->cur >= b)
        return;
    if (p->cur >= 0)
        close_bucket(p, p->cur);
    while (p->cur < b) {
        size_t k = (size_t)++p->cur;
        p->lv_requested[k] = p->requested;
        p->lv_allocated[k] = p->allocated;
        p->lv_reserved[k] = p->reserved;
        p->lv_used[k] = p->any_used ? p->used_sum : -1;
    }
    p->moment++;
}

/* A site's bytes move by `bytes`. */
static void site_moves(struct html_pass *p, uint32_t stack, int64_t bytes)
{
    struct band_site *e = bs_find(&p->sites, (uint64_t)stack + 1);
    if (e == NULL && (e = bs_insert(&p->sites, (uint64_t)stack + 1)) == NULL) {
        p->nomem = true;
        return;
    }
    if (e->moment != p->moment) {
        e->saved = e->cur;
        e->moment = p->moment;
    }
    if (e->bucket != (uint64_t)p->cur + 1) {
        if (p->ntouched == p->cap_touched) {
            size_t cap = p->cap_touched ? 2 * p->cap_touched : 256;
            uint32_t *t = realloc(p->touched, cap * sizeof *t);
            if (t == NULL) {
                p->nomem = true;
                return;
            }
            p->touched = t;
            p->cap_touched = cap;
        }
        p->touched[p->ntouched++] = stack;
        e->bucket = (uint64_t)p->cur + 1;
    }
    e->cur += bytes;
}

/* The state after an event, into the current bucket: a new largest
 * requested total makes now the bucket's moment. */
static void note(struct html_pass *p)
{
    size_t k = (size_t)p->cur;
    if (p->requested > p->lv_requested[k]) {
        p->lv_requested[k] = p->requested;
        p->moment++;
    }
    if (p->allocated > p->lv_allocated[k])
        p->lv_allocated[k] = p->allocated;
    if (p->reserved > p->lv_reserved[k])
        p->lv_reserved[k] = p->reserved;
    if (p->any_used && p->used_sum > p->lv_used[k])
        p->lv_used[k] = p->used_sum;
}

/* ---- the levels ----------------------------------------------------------------- */

/* A device's driver-reported bytes in use (GMT_K_SAMPLE), summed over
 * devices: the replay keeps each device's latest. */
static void on_sample(struct html_pass *p, const struct replay *r, const struct gmt_rec *rec)
{
    uint32_t d = rec->device % REPLAY_MAX_DEVICES;
    uint64_t used = r->dev[d].last_device_used;
    if (used == 0 || used == p->used[d])
        return;
    p->used_sum += (int64_t)used - (int64_t)p->used[d];
    p->used[d] = used;
    p->any_used = true;
}

/* The levels after a record that moved them. */
static void levels(struct html_pass *p, const struct replay *r, const struct gmt_rec *rec)
{
    advance(p, rec->time);
    p->requested = r->requested;
    p->allocated = r->allocated;
    p->reserved = r->reserved;
    for (int i = 0; i < r->change.nsites; i++)
        site_moves(p, r->change.site[i].stack, r->change.site[i].bytes);
    if (rec->kind == GMT_K_SAMPLE)
        on_sample(p, r, rec);
    note(p);
}

/* ---- marks and phases ----------------------------------------------------------- */

static long add_mark(struct html_pass *p, const struct gmt_rec *rec)
{
    if (p->nmarks == HTML_MAX_MARKS)
        return -1;
    if (p->nmarks == p->cap_marks) {
        size_t cap = p->cap_marks ? 2 * p->cap_marks : 64;
        struct html_mark *m = realloc(p->marks, cap * sizeof *m);
        if (m)
            p->marks = m;
        uint64_t *n = m ? realloc(p->mark_name, cap * sizeof *n) : NULL;
        if (n == NULL) {
            p->nomem = true;
            return -1;
        }
        p->mark_name = n;
        p->cap_marks = cap;
    }
    uint64_t at = rec->time > p->t0 ? rec->time - p->t0 : 0;
    p->marks[p->nmarks] = (struct html_mark){at, at, NULL, rec->api, p->nopen};
    p->mark_name[p->nmarks] = rec->value;
    return (long)p->nmarks++;
}

static void on_marker(struct html_pass *p, const struct gmt_rec *rec)
{
    p->marks_total++;
    if (rec->api == GMT_MARK) {
        add_mark(p, rec);
    } else if (rec->api == GMT_MARK_PUSH) {
        if (p->nopen == OPEN_MAX) {
            p->deeper++;
            return;
        }
        long m = add_mark(p, rec);
        p->open[p->nopen++] = (struct open_phase){rec->thread, m};
    } else if (rec->api == GMT_MARK_POP) {
        if (p->deeper) {
            p->deeper--;
            return;
        }
        for (int i = p->nopen - 1; i >= 0; i--) {
            if (p->open[i].thread != rec->thread)
                continue;
            if (p->open[i].mark >= 0) {
                uint64_t at = rec->time > p->t0 ? rec->time - p->t0 : 0;
                struct html_mark *m = &p->marks[p->open[i].mark];
                m->end = at > m->at ? at : m->at;
            }
            memmove(&p->open[i], &p->open[i + 1], (size_t)(p->nopen - i - 1) * sizeof *p->open);
            p->nopen--;
            break;
        }
    }
}

/* ---- pool pictures ---------------------------------------------------------------- */

/* Beside a picture just taken: the maps of the segments the page lists.
 * Each gets an equal share of the pieces, so a pool of few segments shows
 * every block of each. */
static void maps(void *ctx, const struct poolview *v, struct pvf_shot *sh)
{
    struct html_pass *p = ctx;
    p->nomem |= !sh->ok;
    size_t shown = sh->ok && sh->st.nsegs < HTML_SEGS ? sh->st.nsegs : sh->ok ? HTML_SEGS : 0;
    if (shown == 0)
        return;
    size_t budget = sh->oom >= 0 ? HTML_PIECES / 4 : HTML_PIECES, each = budget / shown;
    each = each < 4 ? 4 : each;
    struct pv_piece *pieces = malloc(shown * each * sizeof *pieces);
    uint32_t *npieces = calloc(shown, sizeof *npieces);
    if (pieces == NULL || npieces == NULL) {
        free(pieces);
        free(npieces);
        p->nomem = true;
        return;
    }
    size_t used = 0;
    for (size_t i = 0; i < shown; i++) {
        npieces[i] = (uint32_t)pv_pieces(v, sh->st.segs[i].addr, pieces + used, each);
        used += npieces[i];
    }
    sh->data[0] = pieces;
    sh->data[1] = npieces;
}

static void maps_free(void *ctx, struct pvf_shot *sh)
{
    (void)ctx;
    free(sh->data[0]);
    free(sh->data[1]);
    sh->data[0] = sh->data[1] = NULL;
}

/* A picture, moved from the follower into the page's. */
static void snap_of(struct html_snap *s, struct pvf_shot *sh, const struct oom *o,
                    uint64_t seq, uint64_t at)
{
    *s = (struct html_snap){.oom = o, .seq = seq, .at = at, .device = sh->device,
                            .taken = sh->ok, .st = sh->st, .pieces = sh->data[0],
                            .npieces = sh->data[1]};
    sh->ok = sh->taken = false;
    sh->data[0] = sh->data[1] = NULL;
}

static void snap_free(struct html_snap *s)
{
    if (s->taken)
        pv_state_free(&s->st);
    free(s->pieces);
    free(s->npieces);
    s->taken = false;
    s->pieces = NULL;
    s->npieces = NULL;
}

/* ---- the pass ------------------------------------------------------------------------ */

static bool start(struct html_pass *p, const struct replay *r, uint64_t dur)
{
    p->started = true;
    p->t0 = r->hdr.start_monotonic_ns;
    p->dur = dur;
    p->bucket_ns = dur / HTML_BUCKETS + 1;
    p->cur = -1;
    p->lv_requested = calloc(HTML_BUCKETS, sizeof *p->lv_requested);
    p->lv_allocated = calloc(HTML_BUCKETS, sizeof *p->lv_allocated);
    p->lv_reserved = calloc(HTML_BUCKETS, sizeof *p->lv_reserved);
    p->lv_used = calloc(HTML_BUCKETS, sizeof *p->lv_used);
    pvf_init(&p->pool, HTML_MAX_SNAPS, maps, maps_free, p);
    if (!p->lv_requested || !p->lv_allocated || !p->lv_reserved || !p->lv_used)
        p->nomem = true;
    return !p->nomem;
}

/* an observer of the replay: every record, after the replay applied it */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct html_pass *p = ctx;
    if (p->off)
        return;
    if (!p->started) {
        /* unplanned: a closed trace's header says how long it ran */
        uint64_t dur;
        if (!pvf_ahead(r, &dur) || !start(p, r, dur)) {
            p->off = true;
            return;
        }
    }
    pvf_event(&p->pool, p->planned ? NULL : r, rec);
    if (rec->kind == GMT_K_MARKER)
        on_marker(p, rec);
    else if (r->change.device >= 0 || rec->kind == GMT_K_SAMPLE)
        levels(p, r, rec);
}

struct html_pass *html_pass_new(void)
{
    return calloc(1, sizeof(struct html_pass));
}

struct replay_observer html_pass_observer(struct html_pass *p)
{
    return (struct replay_observer){.event = p ? on_event : NULL, .ctx = p};
}

void html_pass_free(struct html_pass *p)
{
    if (p == NULL)
        return;
    if (p->started)
        pvf_free(&p->pool);
    bs_release(&p->sites);
    free(p->touched);
    free(p->log);
    free(p->marks);
    free(p->mark_name);
    free(p->lv_requested);
    free(p->lv_allocated);
    free(p->lv_reserved);
    free(p->lv_used);
    free(p);
}

/* The pass again, planned: the length and the pictures' moments known
 * from the loaded replay. */
static struct html_pass *again(const struct loaded *l, char *err, size_t errlen)
{
    const struct replay *r = &l->r;
    struct html_pass *p = html_pass_new();
    struct replay *rr = malloc(sizeof *rr);
    if (p == NULL || rr == NULL || !start(p, r, replay_duration(r))) {
        html_pass_free(p);
        free(rr);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->planned = true;
    pvf_plan(&p->pool, r, r->peak_requested ? HTML_MAX_SNAPS - 1 : HTML_MAX_SNAPS);
    struct replay_opts o = {.observe = {html_pass_observer(p)}};
    int rc = replay_trace(l->path, rr, &o, err, errlen);
    replay_free(rr);
    free(rr);
    if (rc != 0) {
        html_pass_free(p);
        return NULL;
    }
    return p;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The bands from the log: every site's bytes at each bucket's moment,
 * summed by band. */
static bool bands(struct html_pass *p, const uint32_t *ids, const int *band_of, size_t nids,
                  int other, struct html_timeline *tl)
{
    size_t w = (size_t)tl->nbands;
    tl->band = calloc((tl->n ? tl->n : 1) * w, sizeof *tl->band);
    int64_t *sum = calloc(w, sizeof *sum);
    if (tl->band == NULL || sum == NULL) {
        free(sum);
        return false;
    }
    for (size_t i = 0; i < p->sites.cap; i++)
        p->sites.slot[i].saved = 0;
    size_t g = 0;
    for (size_t k = 0; k < tl->n; k++) {
        for (; g < p->nlog && p->log[g].bucket == k; g++) {
            struct band_site *e = bs_find(&p->sites, (uint64_t)p->log[g].stack + 1);
            if (e == NULL)
                continue;
            const uint32_t *hit = bsearch(&p->log[g].stack, ids, nids, sizeof *ids, cmp_u32);
            int b = hit ? band_of[hit - ids] : other;
            sum[b] += p->log[g].bytes - e->saved;
            e->saved = p->log[g].bytes;
        }
        memcpy(&tl->band[k * w], sum, w * sizeof *sum);
    }
    free(sum);
    return true;
}

int html_pass_finish(struct html_pass *p, const struct loaded *l, const uint32_t *ids,
                     const int *band, size_t nids, int nsites, struct html_timeline *tl,
                     char *err, size_t errlen)
{
    const struct replay *r = &l->r;
    memset(tl, 0, sizeof *tl);
    struct html_pass *q = NULL;
    if (p == NULL || p->off || !p->started || p->nomem || !pvf_complete(&p->pool) ||
        p->dur != replay_duration(r)) {
        if ((q = again(l, err, errlen)) == NULL)
            return -1;
        p = q;
    }
    pvf_end(&p->pool);
    advance(p, p->t0 + p->dur);
    close_bucket(p, p->cur);
    tl->nbands = nsites + 1;
    tl->bucket_ns = p->bucket_ns;
    tl->n = (size_t)(p->cur + 1);
    tl->requested = p->lv_requested;
    tl->allocated = p->lv_allocated;
    tl->reserved = p->lv_reserved;
    tl->device_used = p->lv_used;
    p->lv_requested = p->lv_allocated = p->lv_reserved = p->lv_used = NULL;
    if (!bands(p, ids, band, nids, nsites, tl))
        p->nomem = true;
    for (size_t i = 0; i < p->nmarks; i++) {
        const char *name = gmt_defs_string(&r->defs, p->mark_name[i]);
        p->marks[i].name = name ? name : "(undefined)";
    }
    for (int i = 0; i < p->nopen; i++) /* phases open at the end run to it */
        if (p->open[i].mark >= 0)
            p->marks[p->open[i].mark].end = p->dur;
    tl->marks = p->marks;
    tl->nmarks = p->nmarks;
    tl->marks_total = p->marks_total;
    p->marks = NULL;
    p->nmarks = 0;
    /* the pictures: the peak, then the out-of-memory events when a pool
     * (ours or the framework's) was on */
    uint64_t start = r->hdr.start_monotonic_ns;
    struct pv_follow *f = &p->pool;
    if (r->peak_requested)
        snap_of(&tl->snaps[tl->nsnaps++], &f->peak, NULL, r->peak_requested_seq,
                r->peak_requested_time);
    for (size_t i = 0; (r->pool || r->fw) && i < f->nooms && tl->nsnaps < HTML_MAX_SNAPS; i++) {
        const struct oom *o = &r->ooms[f->ooms[i].oom];
        snap_of(&tl->snaps[tl->nsnaps++], &f->ooms[i], o, o->seq, o->time);
    }
    for (size_t i = 0; i < tl->nsnaps; i++)
        tl->snaps[i].at = tl->snaps[i].at > start ? tl->snaps[i].at - start : 0;
    tl->pool_odd = f->pv.odd;
    if (p->nomem || p->pool.pv.nomem)
        gmt_warnf("%s: not enough host memory for the whole picture", l->path);
    html_pass_free(q);
    return 0;
}

void html_timeline_free(struct html_timeline *tl)
{
    free(tl->requested);
    free(tl->allocated);
    free(tl->reserved);
    free(tl->device_used);
    free(tl->band);
    free(tl->marks);
    for (size_t i = 0; i < tl->nsnaps; i++)
        snap_free(&tl->snaps[i]);
    memset(tl, 0, sizeof *tl);
}
