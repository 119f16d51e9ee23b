/* pvfollow.c - the pool's pictures at the peak and at out-of-memory
 * events, taken as the trace is read (pvfollow.h). */
#include <stdlib.h>
#include <string.h>

#include "pvfollow.h"

/* Work allowed for retaking the picture at each new peak: blocks and
 * segments copied, per record read, and at any time. A run whose peak
 * rises event after event (a model's first step) retakes it until the
 * allowance runs out; then the picture at the final peak may be missing,
 * and the caller reads the trace again. */
#define PEAK_WORK_PER_RECORD 16
#define PEAK_WORK_FREE (1u << 22)

bool pvf_wanted(void)
{
    const char *e = getenv("GPUMEMREPORT_FOLLOW");
    return !(e && strcmp(e, "0") == 0);
}

bool pvf_ahead(const struct replay *r, uint64_t *dur)
{
    uint64_t end = r->hdr.end_monotonic_ns, t0 = r->hdr.start_monotonic_ns;
    *dur = end > t0 ? end - t0 : 0;
    return pvf_wanted() && !r->cut && end > t0;
}

void pvf_init(struct pv_follow *f, size_t max_ooms, pvf_taken_fn taken, pvf_drop_fn drop,
              void *ctx)
{
    memset(f, 0, sizeof *f);
    pv_init(&f->pv);
    f->max_ooms = max_ooms < PVF_MAX_SHOTS ? max_ooms : PVF_MAX_SHOTS;
    f->taken = taken;
    f->drop = drop;
    f->ctx = ctx;
}

void pvf_plan(struct pv_follow *f, const struct replay *r, size_t max_ooms)
{
    f->planned = true;
    if (r->peak_requested)
        f->peak = (struct pvf_shot){.oom = -1, .seq = r->peak_requested_seq, .device = -1,
                                    .due = true};
    for (size_t i = 0; (r->pool || r->fw) && i < r->nooms && f->nooms < max_ooms &&
                       f->nooms < PVF_MAX_SHOTS; i++)
        f->ooms[f->nooms++] = (struct pvf_shot){.oom = (long)i, .seq = r->ooms[i].seq,
                                                .device = r->ooms[i].device, .due = true};
}

static void shot_free(struct pv_follow *f, struct pvf_shot *s)
{
    if (s->taken && f->drop)
        f->drop(f->ctx, s);
    if (s->ok)
        pv_state_free(&s->st);
    s->ok = s->taken = false;
}

static void take(struct pv_follow *f, struct pvf_shot *s)
{
    s->due = false;
    s->taken = true;
    s->ok = pv_state(&f->pv, s->device, &s->st);
    if (f->taken)
        f->taken(f->ctx, &f->pv, s);
}

/* The picture at the peak, now; unplanned and before the end, while the
 * work stays bounded. */
static void take_peak(struct pv_follow *f, bool bounded, uint64_t records)
{
    if (bounded && !f->planned) {
        uint64_t cost = f->pv.blocks.n + f->pv.nsegs + 64;
        if (f->work + cost > PEAK_WORK_FREE + PEAK_WORK_PER_RECORD * records) {
            f->peak.due = false;
            f->peak_stale = true;
            return;
        }
        f->work += cost;
    }
    f->peak_stale = false;
    take(f, &f->peak);
}

/* Pictures whose moment the record at seq is past. */
static void due(struct pv_follow *f, uint64_t seq, bool bounded, uint64_t records)
{
    if (f->peak.due && seq > f->peak.seq)
        take_peak(f, bounded, records);
    while (f->next_oom < f->nooms && seq > f->ooms[f->next_oom].seq)
        take(f, &f->ooms[f->next_oom++]);
}

/* Unplanned: an out-of-memory event or a new peak, just applied. Every
 * out-of-memory event is pictured (whether a pool was on is known at the
 * end: pvf_plan's rule is the caller's to apply). */
static void watch(struct pv_follow *f, const struct replay *r)
{
    for (; f->ooms_seen < r->nooms; f->ooms_seen++) {
        if (f->nooms == f->max_ooms)
            continue;
        const struct oom *o = &r->ooms[f->ooms_seen];
        f->ooms[f->nooms++] = (struct pvf_shot){.oom = (long)f->ooms_seen, .seq = o->seq,
                                                .device = o->device, .due = true};
    }
    if (r->peak_requested && (!f->peak_seen || r->peak_requested_seq != f->peak.seq)) {
        shot_free(f, &f->peak);
        f->peak = (struct pvf_shot){.oom = -1, .seq = r->peak_requested_seq, .device = -1,
                                    .due = true};
        f->peak_seen = true;
    }
}

void pvf_event(struct pv_follow *f, const struct replay *r, const struct gmt_rec *rec)
{
    if (!f->planned) {
        if (f->out_of_order)
            return;
        if (rec->seq < f->last_seq) {
            f->out_of_order = true;
            return;
        }
        f->last_seq = rec->seq;
    }
    due(f, rec->seq, true, r ? r->records : 0);
    pv_apply(&f->pv, rec);
    if (!f->planned && r)
        watch(f, r);
}

void pvf_end(struct pv_follow *f)
{
    if (!f->out_of_order)
        due(f, UINT64_MAX, false, 0);
}

bool pvf_complete(const struct pv_follow *f)
{
    return f->planned || (!f->out_of_order && !f->peak_stale);
}

void pvf_free(struct pv_follow *f)
{
    shot_free(f, &f->peak);
    for (size_t i = 0; i < f->nooms; i++)
        shot_free(f, &f->ooms[i]);
    pv_free(&f->pv);
    memset(f, 0, sizeof *f);
}
