/* html_pass.c - the second pass behind `gpumemreport html`'s timeline by
 * site and its pool pictures.
 *
 * The replay keeps the sites' picture at the peak and 256 buckets of
 * totals; a chart stacked by site needs each band's bytes over the whole
 * run. So the trace is read again, knowing now which sites are the bands
 * (the top sites at the peak). Device memory is counted as the replay
 * counts it (replay.c: on_alloc, on_free, on_segment, fw_reserve,
 * fw_block_size; the same backward attribution of autograd's blocks), so
 * the totals here are the replay's: requested, allocated, reserved.
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

#include "addrmap.h"
#include "backward.h"
#include "html.h"

#define OPEN_MAX 256 /* phases open at once, followed */

/* ---- live allocations, by address (open addressing, as replay.c) ------ */

struct hlive {
    uint64_t addr; /* 0: empty */
    uint64_t size;
    uint32_t extra;
    int32_t band;
    uint16_t device;
    uint8_t mem, api;
};

struct htab {
    struct hlive *slot;
    size_t cap, n;
};

ADDRMAP_FUNCS(htab, struct htab, struct hlive, 4096)

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
    struct htab live, backing;
    int64_t requested, allocated, reserved, *bands;
    int64_t fw_reserved[REPLAY_MAX_DEVICES];
    uint64_t used[REPLAY_MAX_DEVICES];
    int64_t used_sum;
    bool any_used;
    struct bw_state *bw;
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

/* ---- events (mirroring replay.c) ---------------------------------------------- */

static void on_alloc(struct pass *p, const struct gmt_rec *rec)
{
    if (gmt_is_fw_backing(rec)) {
        if (rec->result == 0 && rec->addr && rec->size && rec->size <= GMT_SIZE_MAX &&
            htab_find(&p->backing, rec->addr) == NULL &&
            htab_insert(&p->backing, rec->addr) == NULL)
            p->nomem = true;
        return;
    }
    if (rec->result != 0 || rec->addr == 0 || rec->size == 0 || rec->size > GMT_SIZE_MAX ||
        rec->size2 > GMT_SIZE_MAX)
        return;
    struct hlive *l = htab_find(&p->live, rec->addr);
    if (l) /* allocated twice without a free: the replay forgets the old one */
        htab_remove(&p->live, l);
    if ((l = htab_insert(&p->live, rec->addr)) == NULL) {
        p->nomem = true;
        return;
    }
    l->size = rec->size;
    l->extra = rec->size2 > UINT32_MAX ? UINT32_MAX : (uint32_t)rec->size2;
    l->mem = (uint8_t)replay_mem_of(rec->api);
    l->api = rec->api;
    l->device = (uint16_t)(rec->device % REPLAY_MAX_DEVICES);
    l->band = band_of(p, rec->stack);
    if (l->mem == MEM_HOST)
        return;
    int64_t block = (int64_t)(l->size + l->extra);
    p->requested += (int64_t)l->size;
    p->allocated += block;
    if (!replay_pooled(&p->l->r, rec->api))
        p->reserved += block;
    p->bands[l->band] += (int64_t)l->size;
}

static void on_free(struct pass *p, const struct gmt_rec *rec)
{
    if (rec->result != 0 || rec->addr == 0)
        return;
    struct hlive *l;
    if ((rec->api & ~GMT_API_PTDS) != GMT_API_FW_FREE &&
        (l = htab_find(&p->backing, rec->addr)) != NULL) {
        htab_remove(&p->backing, l);
        return;
    }
    if ((l = htab_find(&p->live, rec->addr)) == NULL)
        return;
    if (l->mem != MEM_HOST) {
        int64_t block = (int64_t)(l->size + l->extra);
        p->requested -= (int64_t)l->size;
        p->allocated -= block;
        if (!replay_pooled(&p->l->r, l->api))
            p->reserved -= block;
        p->bands[l->band] -= (int64_t)l->size;
    }
    htab_remove(&p->live, l);
}

static void on_fw(struct pass *p, const struct gmt_rec *rec)
{
    struct gmt_fw f;
    if (gmt_fw_decode(rec, &f) != 0)
        return;
    int64_t *fr = &p->fw_reserved[f.device % REPLAY_MAX_DEVICES];
    int64_t n = 0;
    switch (f.action) {
    case GMT_FWX_SEGMENT_ALLOC:
    case GMT_FWX_SEGMENT_MAP:
        n = (int64_t)f.size;
        break;
    case GMT_FWX_SEGMENT_FREE:
    case GMT_FWX_SEGMENT_UNMAP:
        n = -(int64_t)f.size;
        if (-n > *fr)
            n = *fr > 0 ? -*fr : 0;
        break;
    case GMT_FWX_BLOCK_SIZE: {
        struct hlive *l = htab_find(&p->live, f.addr);
        if (l == NULL || (l->api & ~GMT_API_PTDS) != GMT_API_FW_ALLOC || f.size < l->size)
            return;
        uint64_t extra = f.size - l->size;
        uint32_t e32 = extra > UINT32_MAX ? UINT32_MAX : (uint32_t)extra;
        p->allocated += (int64_t)e32 - (int64_t)l->extra;
        l->extra = e32;
        return;
    }
    default:
        return;
    }
    *fr += n;
    p->reserved += n;
}

static void on_sample(struct pass *p, const struct gmt_rec *rec)
{
    uint64_t used = rec->v[4];
    if (used == 0)
        return;
    uint64_t *u = &p->used[rec->device % REPLAY_MAX_DEVICES];
    p->used_sum += (int64_t)used - (int64_t)*u;
    *u = used;
    p->any_used = true;
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

static void take(struct pass *p, const struct poolview *v, struct html_snap *s)
{
    s->taken = pv_state(v, s->device, &s->st);
    p->nomem |= !s->taken;
}

/* ---- the pass ------------------------------------------------------------------------ */

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
    struct pass p = {.l = l, .tl = tl, .ids = ids, .band_of = band, .nids = nids,
                     .other = nsites, .t0 = r->hdr.start_monotonic_ns, .cur = -1};
    p.bands = calloc(w, sizeof *p.bands);
    if (!tl->requested || !tl->allocated || !tl->reserved || !tl->device_used ||
        !tl->band || !p.bands) {
        snprintf(err, errlen, "out of memory");
        free(p.bands);
        return -1;
    }
    struct html_snap *order[HTML_MAX_SNAPS];
    plan(tl, r, order);
    struct gmt_reader *rd = gmt_reader_open(l->path, err, errlen);
    if (rd == NULL) {
        free(p.bands);
        return -1;
    }
    struct poolview v;
    pv_init(&v);
    struct gmt_rec rec;
    size_t k = 0;
    int got;
    while ((got = gmt_reader_next(rd, &rec)) == 1) {
        while (k < tl->nsnaps && rec.seq > order[k]->seq)
            take(&p, &v, order[k++]);
        pv_apply(&v, &rec);
        if (rec.kind == GMT_K_EXT) {
            if (rec.ext == GMT_X_FW) {
                advance(&p, rec.time);
                on_fw(&p, &rec);
                note(&p);
            }
            continue;
        }
        switch (rec.kind) {
        case GMT_K_ALLOC:
            rec.stack = gmt_bw_site(&p.bw, &r->defs, &rec);
            advance(&p, rec.time);
            on_alloc(&p, &rec);
            note(&p);
            break;
        case GMT_K_FREE:
            advance(&p, rec.time);
            on_free(&p, &rec);
            note(&p);
            break;
        case GMT_K_SEGMENT_ALLOC:
        case GMT_K_SEGMENT_FREE:
            advance(&p, rec.time);
            p.reserved += rec.kind == GMT_K_SEGMENT_ALLOC ? (int64_t)rec.size : -(int64_t)rec.size;
            note(&p);
            break;
        case GMT_K_SAMPLE:
            advance(&p, rec.time);
            on_sample(&p, &rec);
            note(&p);
            break;
        case GMT_K_MARKER:
            on_marker(&p, &rec);
            break;
        default:
            break;
        }
    }
    while (k < tl->nsnaps)
        take(&p, &v, order[k++]);
    advance(&p, p.t0 + dur);
    tl->n = (size_t)(p.cur + 1);
    for (int i = 0; i < p.nopen; i++) /* phases open at the end run to it */
        if (p.open[i].mark >= 0)
            tl->marks[p.open[i].mark].end = dur;
    if (got < 0)
        snprintf(err, errlen, "%s", gmt_reader_error(rd));
    tl->pool_odd = v.odd;
    if (p.nomem || v.nomem)
        gmt_warnf("%s: not enough host memory for the whole picture", l->path);
    pv_free(&v);
    gmt_reader_close(rd);
    gmt_bw_free(p.bw);
    free(p.live.slot);
    free(p.backing.slot);
    free(p.bands);
    return got < 0 ? -1 : 0;
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
        if (tl->snaps[i].taken)
            pv_state_free(&tl->snaps[i].st);
    memset(tl, 0, sizeof *tl);
}
