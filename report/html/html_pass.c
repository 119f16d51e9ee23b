/* html_pass.c - the second pass behind `gpumemreport html`'s timeline by
 * site and its pool pictures.
 *
 * The replay keeps the sites' picture at the peak and 256 buckets of
 * totals; a chart stacked by site needs each band's bytes over the whole
 * run. So the trace is read again, knowing now which sites are the bands
 * (the top sites at the peak). The second pass is a replay like the
 * first (an observer of the replay): after each record, the levels are the
 * replay's own requested, allocated and reserved bytes, and a band moves
 * with the sites the record changed - so the totals here are the
 * replay's, by the replay's rules.
 *
 * Decimation that keeps the peak. The run is cut into HTML_BUCKETS
 * buckets; a bucket keeps the largest requested total reached in it and
 * the bands at that moment (so they add up to it), and the largest
 * allocated, reserved and driver-reported bytes. A bucket starts with the
 * state at its start, so an idle stretch shows the level held through it.
 * The peak's bucket therefore shows the picture at the peak, exactly.
 *
 * The same pass feeds a poolview (poolview.h) and takes its picture at the
 * peak and at each out-of-memory event, as `frag` does. Marks and phases
 * (gpumemtrace_mark, NVTX) are kept up to HTML_MAX_MARKS.
 *
 * Memory: live allocations, HTML_BUCKETS x bands, the marks kept, the
 * pool's live blocks and segments - never the trace's length.
 */
#include <stdlib.h>
#include <string.h>

#include "html.h"

#define OPEN_MAX 256 /* phases open at once, followed */

/* ---- the pass's state ---------------------------------------------------- */

struct open_phase {
    uint32_t thread;
    long mark; /* index into tl->marks; -1: not kept */
};

struct pass {
    const struct loaded *l;
    struct html_timeline *tl;
    const uint32_t *ids;
    const int *band_of;
    size_t nids;
    int other;              /* the band of every other site */
    uint64_t t0;
    long cur;               /* bucket filled last; -1: none */
    int64_t requested, allocated, reserved, *bands;
    uint64_t used[REPLAY_MAX_DEVICES];
    int64_t used_sum;
    bool any_used;
    struct poolview pv;
    struct html_snap *order[HTML_MAX_SNAPS];
    size_t next_snap;
    struct open_phase open[OPEN_MAX];
    int nopen, deeper;
    size_t cap_marks;
    bool nomem;
};

static int band_of(const struct pass *p, uint32_t stack)
{
    size_t lo = 0, hi = p->nids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->ids[mid] == stack)
            return p->band_of[mid];
        if (p->ids[mid] < stack)
            lo = mid + 1;
        else
            hi = mid;
    }
    return p->other;
}

/* ---- buckets ----------------------------------------------------------------- */

static long bucket_of(const struct pass *p, uint64_t t)
{
    if (t <= p->t0)
        return 0;
    uint64_t b = (t - p->t0) / p->tl->bucket_ns;
    return b >= HTML_BUCKETS ? HTML_BUCKETS - 1 : (long)b;
}

/* Buckets after the current one up to time t start with the state now. */
static void advance(struct pass *p, uint64_t t)
{
    long b = bucket_of(p, t);
    struct html_timeline *tl = p->tl;
    int nb = tl->nbands;
    while (p->cur < b) {
        size_t k = (size_t)++p->cur;
        tl->requested[k] = p->requested;
        tl->allocated[k] = p->allocated;
        tl->reserved[k] = p->reserved;
        tl->device_used[k] = p->any_used ? p->used_sum : -1;
        memcpy(&tl->band[k * (size_t)nb], p->bands, (size_t)nb * sizeof *p->bands);
    }
}

/* The state after an event, into the current bucket. */
static void note(struct pass *p)
{
    struct html_timeline *tl = p->tl;
    size_t k = (size_t)p->cur;
    if (p->requested > tl->requested[k]) {
        tl->requested[k] = p->requested;
        memcpy(&tl->band[k * (size_t)tl->nbands], p->bands,
               (size_t)tl->nbands * sizeof *p->bands);
    }
    if (p->allocated > tl->allocated[k])
        tl->allocated[k] = p->allocated;
    if (p->reserved > tl->reserved[k])
        tl->reserved[k] = p->reserved;
    if (p->any_used && p->used_sum > tl->device_used[k])
        tl->device_used[k] = p->used_sum;
}

/* ---- the levels ----------------------------------------------------------------- */

/* A device's driver-reported bytes in use (GMT_K_SAMPLE), summed over
 * devices: the replay keeps each device's latest. */
static void on_sample(struct pass *p, const struct replay *r, const struct gmt_rec *rec)
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
static void levels(struct pass *p, const struct replay *r, const struct gmt_rec *rec)
{
    advance(p, rec->time);
    p->requested = r->requested;
    p->allocated = r->allocated;
    p->reserved = r->reserved;
    for (int i = 0; i < r->change.nsites; i++)
        p->bands[band_of(p, r->change.site[i].stack)] += r->change.site[i].bytes;
    if (rec->kind == GMT_K_SAMPLE)
        on_sample(p, r, rec);
    note(p);
}

/* ---- marks and phases ----------------------------------------------------------- */

static long add_mark(struct pass *p, const struct gmt_rec *rec, const char *name)
{
    struct html_timeline *tl = p->tl;
    if (tl->nmarks == HTML_MAX_MARKS)
        return -1;
    if (tl->nmarks == p->cap_marks) {
        size_t cap = p->cap_marks ? 2 * p->cap_marks : 64;
        struct html_mark *m = realloc(tl->marks, cap * sizeof *m);
        if (m == NULL) {
            p->nomem = true;
            return -1;
        }
        tl->marks = m;
        p->cap_marks = cap;
    }
    uint64_t at = rec->time > p->t0 ? rec->time - p->t0 : 0;
    tl->marks[tl->nmarks] = (struct html_mark){at, at, name, rec->api, p->nopen};
    return (long)tl->nmarks++;
}

static void on_marker(struct pass *p, const struct gmt_rec *rec)
{
    const char *name = gmt_defs_string(&p->l->r.defs, rec->value);
    if (name == NULL)
        name = "(undefined)";
    p->tl->marks_total++;
    if (rec->api == GMT_MARK) {
        add_mark(p, rec, name);
    } else if (rec->api == GMT_MARK_PUSH) {
        if (p->nopen == OPEN_MAX) {
            p->deeper++;
            return;
        }
        long m = add_mark(p, rec, name);
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
                struct html_mark *m = &p->tl->marks[p->open[i].mark];
                m->end = at > m->at ? at : m->at;
            }
            memmove(&p->open[i], &p->open[i + 1], (size_t)(p->nopen - i - 1) * sizeof *p->open);
            p->nopen--;
            break;
        }
    }
}

/* ---- pool pictures ---------------------------------------------------------------- */

static void plan(struct html_timeline *tl, const struct replay *r, struct html_snap **order)
{
    if (r->peak_requested)
        tl->snaps[tl->nsnaps++] = (struct html_snap){NULL, r->peak_requested_seq,
                                                     r->peak_requested_time, -1, false, {0}};
    for (size_t i = 0; (r->pool || r->fw) && i < r->nooms && tl->nsnaps < HTML_MAX_SNAPS; i++)
        tl->snaps[tl->nsnaps++] = (struct html_snap){&r->ooms[i], r->ooms[i].seq,
                                                     r->ooms[i].time, r->ooms[i].device,
                                                     false, {0}};
    for (size_t i = 0; i < tl->nsnaps; i++) {
        struct html_snap *s = &tl->snaps[i];
        s->at = s->at > r->hdr.start_monotonic_ns ? s->at - r->hdr.start_monotonic_ns : 0;
        size_t j = i; /* insertion by seq; the peak before an OOM of the same seq */
        while (j > 0 && order[j - 1]->seq > s->seq) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = s;
    }
}

/* The pool's picture now, and the maps of the segments the page lists:
 * each gets an equal share of the pieces, so a pool of few segments
 * shows every block of each. */
static void take(struct pass *p, struct html_snap *s)
{
    s->taken = pv_state(&p->pv, s->device, &s->st);
    p->nomem |= !s->taken;
    size_t shown = s->taken && s->st.nsegs < HTML_SEGS ? s->st.nsegs : s->taken ? HTML_SEGS : 0;
    if (shown == 0)
        return;
    size_t budget = s->oom ? HTML_PIECES / 4 : HTML_PIECES, each = budget / shown;
    each = each < 4 ? 4 : each;
    s->pieces = malloc(shown * each * sizeof *s->pieces);
    s->npieces = calloc(shown, sizeof *s->npieces);
    if (s->pieces == NULL || s->npieces == NULL) {
        free(s->pieces);
        free(s->npieces);
        s->pieces = NULL;
        s->npieces = NULL;
        p->nomem = true;
        return;
    }
    size_t used = 0;
    for (size_t i = 0; i < shown; i++) {
        s->npieces[i] = (uint32_t)pv_pieces(&p->pv, s->st.segs[i].addr, s->pieces + used, each);
        used += s->npieces[i];
    }
}

/* ---- the pass ------------------------------------------------------------------------ */

/* an observer of the replay: every record, after the replay applied it. A
 * picture of the pool is of the moment after its event: taken before the
 * first record past it reaches the poolview. */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct pass *p = ctx;
    while (p->next_snap < p->tl->nsnaps && rec->seq > p->order[p->next_snap]->seq)
        take(p, p->order[p->next_snap++]);
    pv_apply(&p->pv, rec);
    if (rec->kind == GMT_K_MARKER)
        on_marker(p, rec);
    else if (r->change.device >= 0 || rec->kind == GMT_K_SAMPLE)
        levels(p, r, rec);
}

int html_pass(const struct loaded *l, const uint32_t *ids, const int *band, size_t nids,
              int nsites, struct html_timeline *tl, char *err, size_t errlen)
{
    const struct replay *r = &l->r;
    memset(tl, 0, sizeof *tl);
    tl->nbands = nsites + 1;
    uint64_t dur = replay_duration(r);
    tl->bucket_ns = dur / HTML_BUCKETS + 1;
    size_t nb = HTML_BUCKETS, w = (size_t)tl->nbands;
    tl->requested = calloc(nb, sizeof *tl->requested);
    tl->allocated = calloc(nb, sizeof *tl->allocated);
    tl->reserved = calloc(nb, sizeof *tl->reserved);
    tl->device_used = calloc(nb, sizeof *tl->device_used);
    tl->band = calloc(nb * w, sizeof *tl->band);
    struct pass *p = calloc(1, sizeof *p);
    struct replay *again = malloc(sizeof *again);
    if (p)
        p->bands = calloc(w, sizeof *p->bands);
    if (!tl->requested || !tl->allocated || !tl->reserved || !tl->device_used ||
        !tl->band || !p || !p->bands || !again) {
        snprintf(err, errlen, "out of memory");
        if (p)
            free(p->bands);
        free(p);
        free(again);
        return -1;
    }
    *p = (struct pass){.l = l, .tl = tl, .ids = ids, .band_of = band, .nids = nids,
                       .other = nsites, .t0 = r->hdr.start_monotonic_ns, .cur = -1,
                       .bands = p->bands};
    plan(tl, r, p->order);
    pv_init(&p->pv);
    struct replay_opts o = {.observe = {{.event = on_event, .ctx = p}}};
    int rc = replay_trace(l->path, again, &o, err, errlen);
    while (p->next_snap < tl->nsnaps)
        take(p, p->order[p->next_snap++]);
    advance(p, p->t0 + dur);
    tl->n = (size_t)(p->cur + 1);
    for (int i = 0; i < p->nopen; i++) /* phases open at the end run to it */
        if (p->open[i].mark >= 0)
            tl->marks[p->open[i].mark].end = dur;
    tl->pool_odd = p->pv.odd;
    if (p->nomem || p->pv.nomem)
        gmt_warnf("%s: not enough host memory for the whole picture", l->path);
    pv_free(&p->pv);
    replay_free(again);
    free(again);
    free(p->bands);
    free(p);
    return rc;
}

void html_timeline_free(struct html_timeline *tl)
{
    free(tl->requested);
    free(tl->allocated);
    free(tl->reserved);
    free(tl->device_used);
    free(tl->band);
    free(tl->marks);
    for (size_t i = 0; i < tl->nsnaps; i++) {
        if (tl->snaps[i].taken)
            pv_state_free(&tl->snaps[i].st);
        free(tl->snaps[i].pieces);
        free(tl->snaps[i].npieces);
    }
    memset(tl, 0, sizeof *tl);
}
