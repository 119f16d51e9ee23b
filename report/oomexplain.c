/* oomexplain.c - what an out-of-memory event ran into (oomexplain.h).
 *
 * One pass over the trace (gmt_at_load) stops its picture at the event:
 * the sites live then, the memory kinds (replay_opts.kinds_seq: the
 * kinds' rules need the rest of the trace, the blocks' later lives), the
 * device's counters. Along the way, up to the event, the pool picture
 * (poolview.h: segments and blocks, for the largest free block) and the
 * whatif feed (whatif.h: the requests into each model) follow the
 * records; at the event the failed request is put to the models.
 *
 * The models are given the card as the trace knows it: the device's
 * memory less what was held beyond the trace (the CUDA context, the
 * libraries' own), the largest such figure of the run, since a model is
 * made before the pass reaches the event.
 */
#include <stdlib.h>
#include <string.h>

#include "instant.h"
#include "oomexplain.h"
#include "poolview.h"

/* whatif's default policies, and the other models it has */
static const char *const policies[] = {"pytorch", "pytorch:expandable_segments:True",
                                       "gmt-pool", "cuda-async", "ideal"};

struct oomx_pass {
    struct oomx *x;
    struct poolview pv;
    bool pool;  /* the trace has a pool picture (our pool, PyTorch's) */
};

static void each(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct oomx_pass *p = ctx;
    if (p->pool)
        pv_apply(&p->pv, rec);
    wi_feed_event(r, rec, p->x->feed);
}

static void then(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct oomx_pass *p = ctx;
    struct oomx *x = p->x;
    if (p->pool) {
        struct pv_state st;
        if (pv_state(&p->pv, x->oom->device, &st)) {
            /* no segment on the device: no pool there to have a block */
            x->largest_known = !p->pv.nomem && st.nsegs > 0;
            x->largest_free = st.largest_free;
            pv_state_free(&st);
        }
    }
    x->nwhatif = wi_feed_try(x->feed, r, rec, x->whatif);
}

bool oomx_explain(struct loaded *l, const struct gmt_common *c, size_t i, struct oomx *x)
{
    const struct replay *r = &l->r;
    memset(x, 0, sizeof *x);
    if (i >= r->nooms)
        return false;
    const struct oom *o = &r->ooms[i];
    x->oom = o;
    x->site = sym_site(l->sym, o->stack, c->grain, c->depth);
    x->at_ns = o->time > r->hdr.start_monotonic_ns ? o->time - r->hdr.start_monotonic_ns : 0;
    const struct gmt_device_def *def = gmt_defs_device(&r->defs, o->device);
    x->total = def ? def->total_mem : 0;
    if (x->total == 0 && o->has_state)
        x->total = o->state[1]; /* the total the failure recorded, where it did */
    x->free_reported_known = o->has_state;
    x->free_reported = o->state[0];
    enum beyond_source src;
    int64_t beyond_run = replay_beyond(r, (int)o->device, &src);
    if (x->total && (uint64_t)(beyond_run > 0 ? beyond_run : 0) < x->total)
        x->limit = x->total - (uint64_t)(beyond_run > 0 ? beyond_run : 0);
    if ((x->feed = calloc(1, sizeof *x->feed)) == NULL) {
        gmt_errorf("%s: out of memory", l->path);
        return false;
    }
    x->feed->limit = x->limit;
    x->feed->requests_from = WI_REQ_AUTO;
    char why[160];
    for (size_t k = 0; k < sizeof policies / sizeof *policies; k++)
        if (wi_policy_parse(policies[k], &x->feed->pol[x->feed->npol], why, sizeof why) == 0)
            x->feed->npol++;
    struct oomx_pass p = {.x = x, .pool = r->pool || r->fw};
    pv_init(&p.pv);
    struct gmt_instant in = {.at = {.what = GMT_AT_OOM, .n = i + 1},
                             .kinds = true, .each = each, .then = then, .ctx = &p};
    x->at = gmt_at_load(l, c, &in);
    pv_free(&p.pv);
    if (x->at == NULL) {
        if (in.why[0])
            gmt_errorf("%s: out-of-memory #%zu: %s", l->path, i + 1, in.why);
        oomx_free(x);
        return false;
    }
    x->live = in.requested;
    x->requested = in.dev.requested;
    x->allocated = in.dev.allocated;
    x->reserved = in.dev.reserved;
    x->beyond_known = in.beyond_source != BEYOND_NONE;
    x->beyond = x->beyond_known && in.beyond > 0 ? in.beyond : 0;
    if (x->total) {
        int64_t f = (int64_t)x->total - x->reserved - x->beyond;
        x->free = f > 0 ? f : 0;
    }
    x->nsites = gmt_group(x->at, c, gmt_pick_peak, &x->sites);
    x->has_kinds = gmt_kinds(x->at, x->kinds);
    return true;
}

void oomx_free(struct oomx *x)
{
    free(x->sites);
    if (x->feed) {
        wi_feed_reset(x->feed);
        free(x->feed);
    }
    gmt_unload(x->at);
    memset(x, 0, sizeof *x);
}
