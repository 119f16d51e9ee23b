/* whatif_feed.c - a trace's allocation requests fed to allocator models.
 *
 * The stream is what the program asked for, picked by the replay's own
 * rules: with PyTorch's caching allocator on (a trace with framework
 * blocks), its blocks (GMT_API_FW_ALLOC/FW_FREE) are the requests, the
 * cudaMallocs under its segments (GMT_ALLOC_FW_BACKING) are its own and
 * left out, and the program's other device allocations (libraries'
 * workspaces) are held outside the model: they count against the device's
 * memory but not in a model's reserved bytes. Without framework blocks
 * the runtime's device allocations (cudaMalloc and kin) are the requests
 * (with our pool on, the cudaMallocs are the program's and the pool's
 * segments are apart), and the driver's (cuMemAlloc, cuMemCreate) are
 * held outside: libraries' own memory, which neither PyTorch's allocator
 * nor our pool would have served (a cache-off PyTorch run has 8 of them,
 * cuBLAS and cuDNN workspaces among them, 2% of resnet50's peak). A trace
 * with no runtime allocation at all (a program on the driver API, a
 * statically linked runtime seen by the driver observer) has its driver
 * allocations as the requests; a first pass over the trace tells which,
 * stopping at its first runtime allocation. Pinned host memory is no
 * device memory; failed allocations asked for nothing that was then used,
 * and are left out; sizes the replay skips (0, above 2^48) are skipped
 * here too.
 *
 * The models follow a replay pass (wi_feed_event, an observer of the
 * replay), one instance per policy and device: each record is looked at
 * once, and the requests it makes go to every policy's models
 * (whatif_lanes.c). A policy that runs out of memory stops there, as the
 * real program would have, and its figures are those up to that request.
 * `whatif` feeds a whole trace; `summary` feeds one up to an
 * out-of-memory event and then asks whether the failed request would
 * have fit (wi_feed_try). Memory: one entry per live request, a batch of
 * requests, and the models' blocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "replay.h"
#include "whatif.h"
#include "whatif_lanes.h"

_Static_assert(WI_DEVICES == REPLAY_MAX_DEVICES, "one model set per device the replay knows");

/* A runtime API's device allocation (not pinned host memory)? */
static bool runtime_device_alloc(unsigned api)
{
    switch (api & ~GMT_API_PTDS) {
    case GMT_API_MALLOC:
    case GMT_API_MALLOC_MANAGED:
    case GMT_API_MALLOC_PITCH:
    case GMT_API_MALLOC_3D:
    case GMT_API_MALLOC_ASYNC:
    case GMT_API_MALLOC_FROM_POOL_ASYNC:
        return true;
    default:
        return false;
    }
}

/* Does the trace at path have a successful runtime device allocation? It
 * reads up to the first. A trace that cannot be read says no here; the
 * replay itself reports why. */
static bool has_runtime_allocs(const char *path)
{
    char err[256];
    struct gmt_reader *rd = path ? gmt_reader_open(path, err, sizeof err) : NULL;
    if (rd == NULL)
        return false;
    struct gmt_rec rec;
    bool found = false;
    while (!found && gmt_reader_next(rd, &rec) == 1)
        found = rec.kind == GMT_K_ALLOC && rec.result == 0 && rec.addr != 0 &&
                rec.size != 0 && runtime_device_alloc(rec.api);
    gmt_reader_close(rd);
    return found;
}

int wi_policy_parse(const char *arg, struct wi_policy *p, char *why, size_t whylen)
{
    memset(p, 0, sizeof *p);
    if (strlen(arg) >= sizeof p->label) {
        snprintf(why, whylen, "'%.40s...' is too long", arg);
        return -1;
    }
    if (!strcmp(arg, "ideal")) {
        p->ops = &wi_ideal;
    } else if (!strncmp(arg, "pytorch", 7) && (arg[7] == '\0' || arg[7] == ':')) {
        p->ops = &wi_pytorch;
        if (wi_conf_parse(arg[7] ? arg + 8 : "", &p->conf, why, whylen) != 0)
            return -1;
    } else if (!strncmp(arg, "gmt-pool", 8) && (arg[8] == '\0' || arg[8] == ':')) {
        p->ops = &wi_gmtpool;
        if (arg[8] && wi_gmt_parse(arg + 9, &p->gmt, why, whylen) != 0)
            return -1;
    } else if (!strcmp(arg, "cuda-async")) {
        p->ops = &wi_async;
    } else {
        snprintf(why, whylen, "the policies are ideal, pytorch[:CONF], cuda-async and "
                              "gmt-pool[:OPTIONS]");
        return -2;
    }
    snprintf(p->label, sizeof p->label, "%s", arg);
    return 0;
}

/* ---- live requests, by address (addrmap.h) ------------------------------------ */

ADDRMAP_FUNCS(req, struct wi_feed, struct wi_req, 1024)

/* ---- the replay pass ---------------------------------------------------------- */

static struct wi_dev *dev_of(struct wi_feed *w, unsigned d)
{
    d %= WI_DEVICES;
    if (w->dev[d])
        return w->dev[d];
    if (w->lanes == NULL && (w->lanes = wi_lanes_new(w)) == NULL)
        return NULL;
    struct wi_dev *dv = wi_model_state(sizeof *dv);
    if (dv == NULL)
        return NULL;
    for (int p = 0; p < w->npol; p++) {
        struct wi_opts o = {&w->pol[p].conf, w->limit, &dv->seen_outside[p], &w->pol[p].gmt};
        if ((dv->m[p] = w->pol[p].ops->init(&o)) == NULL) {
            for (int q = 0; q < p; q++)
                w->pol[q].ops->fini(dv->m[q]);
            free(dv);
            return NULL;
        }
    }
    return w->dev[d] = dv;
}

/* What device d holds outside the models moved: the models are told, in
 * order with the requests. */
static void outside_moved(struct wi_feed *w, const struct wi_dev *dv, uint16_t d)
{
    struct wi_op op = {.kind = WI_OP_OUTSIDE, .dev = d, .size = dv->outside};
    wi_lanes_push(w->lanes, &op, NULL);
}

static void let_go(struct wi_feed *w, struct wi_req *e)
{
    struct wi_dev *dv = w->dev[e->dev];
    if (dv && e->request) {
        struct wi_op op = {.kind = WI_OP_FREE, .dev = e->dev, .ref = e->ref};
        wi_lanes_push(w->lanes, &op, NULL);
        wi_lanes_unref(w->lanes, e->ref);
        dv->requested -= e->size;
    } else if (dv) {
        dv->outside -= e->size;
        outside_moved(w, dv, e->dev);
    }
    req_remove(w, e);
}

void wi_feed_flush(struct wi_feed *w)
{
    if (w->lanes)
        wi_lanes_flush(w->lanes);
}

void wi_feed_reset(struct wi_feed *w)
{
    for (size_t i = 0; i < w->cap; i++)
        if (w->slot[i].addr)
            let_go(w, &w->slot[i]), i--; /* the slot may hold a moved entry now */
    wi_lanes_free(w->lanes); /* the models run every request first */
    w->lanes = NULL;
    for (int d = 0; d < WI_DEVICES; d++) {
        if (w->dev[d] == NULL)
            continue;
        for (int p = 0; p < w->npol; p++)
            w->pol[p].ops->fini(w->dev[d]->m[p]);
        free(w->dev[d]);
        w->dev[d] = NULL;
    }
    free(w->slot);
    w->slot = NULL;
    w->cap = w->n = 0;
    w->requests = w->frees = w->outside_n = 0;
    w->source = WI_REQ_ALL;
    w->failed = false;
    w->owner = NULL;
    w->last_records = 0;
}

/* Is the allocation rec one of the requests (else held outside)? */
static bool is_request(const struct wi_feed *w, const struct replay *r,
                       const struct gmt_rec *rec)
{
    bool fw_block = (rec->api & ~GMT_API_PTDS) == GMT_API_FW_ALLOC;
    return r->fw ? fw_block
                 : w->source == WI_REQ_ALL ||
                       (w->source == WI_REQ_RUNTIME) == runtime_device_alloc(rec->api);
}

/* A request, counted, numbered and queued for the models. */
static void request(struct wi_feed *w, struct wi_dev *dv, struct wi_req *e,
                    const struct gmt_rec *rec)
{
    /* a request without a stream (cudaMalloc): the legacy stream's pools,
     * not the trace's stream register (resnet50 inference's cache-off
     * trace had a third of its requests on a cuMemset's stream, and the
     * pytorch model held 1.89x the real peak) */
    struct wi_op op = {.kind = WI_OP_ALLOC, .dev = e->dev, .size = rec->size,
                       .stream = gmt_alloc_stream(rec)};
    struct wi_where at = {rec->seq, rec->time, rec->stack};
    if (!wi_lanes_ref(w->lanes, &op.ref)) {
        w->failed = true;
        req_remove(w, e);
        return;
    }
    wi_lanes_push(w->lanes, &op, &at);
    e->ref = op.ref;
    w->requests++;
    dv->requests++;
    dv->requested += rec->size;
    if (dv->requested > dv->peak_requested)
        dv->peak_requested = dv->requested;
}

static void on_alloc(struct wi_feed *w, const struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0 || gmt_is_fw_backing(rec) || rec->addr == 0 || rec->size == 0 ||
        rec->size > GMT_SIZE_MAX || rec->size2 > GMT_SIZE_MAX ||
        replay_mem_of(rec->api) == MEM_HOST)
        return;
    struct wi_req *e = req_find(w, rec->addr);
    if (e) /* allocated again without a free the trace has: the old one is gone */
        let_go(w, e);
    struct wi_dev *dv = dev_of(w, rec->device);
    if (dv == NULL || (e = req_insert(w, rec->addr)) == NULL) {
        w->failed = true;
        return;
    }
    e->size = rec->size;
    e->dev = (uint16_t)(rec->device % WI_DEVICES);
    e->request = is_request(w, r, rec);
    if (e->request) {
        request(w, dv, e, rec);
    } else {
        dv->outside += rec->size;
        outside_moved(w, dv, e->dev);
        w->outside_n += !r->fw;
    }
}

/* A new trace begins (or one after a trace that failed): start afresh and
 * resolve where its requests come from. `again`: the record fed last may
 * come again (wi_feed_try after wi_feed_event of the failed request). */
static void begin(struct wi_feed *w, const struct replay *r, bool again)
{
    if (w->owner == r && (r->records > w->last_records ||
                          (again && r->records == w->last_records)))
        return;
    wi_feed_reset(w);
    w->owner = r;
    w->source = w->requests_from != WI_REQ_AUTO ? w->requests_from
                : r->fw || has_runtime_allocs(r->path) ? WI_REQ_RUNTIME : WI_REQ_DRIVER;
}

void wi_feed_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct wi_feed *w = ctx;
    begin(w, r, false);
    w->last_records = r->records;
    if (rec->kind == GMT_K_ALLOC) {
        on_alloc(w, r, rec);
    } else if (rec->kind == GMT_K_FREE && rec->result == 0 && rec->addr) {
        struct wi_req *e = req_find(w, rec->addr);
        if (e == NULL)
            return;
        bool fw_free = (rec->api & ~GMT_API_PTDS) == GMT_API_FW_FREE;
        /* a plain free at a block's address is its segment's, and a
         * block's free never frees the program's own allocation */
        if (r->fw && e->request != fw_free)
            return;
        w->frees += e->request;
        let_go(w, e);
    }
}

int wi_feed_try(struct wi_feed *w, const struct replay *r, const struct gmt_rec *rec,
                struct wi_try out[WI_MAX_POLICIES])
{
    begin(w, r, true);
    w->last_records = r->records;
    if (rec->kind != GMT_K_ALLOC || gmt_is_fw_backing(rec) || rec->size == 0 ||
        rec->size > GMT_SIZE_MAX || replay_mem_of(rec->api) == MEM_HOST ||
        !is_request(w, r, rec))
        return 0;
    struct wi_dev *dv = dev_of(w, rec->device);
    if (dv == NULL) {
        w->failed = true;
        return 0;
    }
    wi_feed_flush(w);
    uint64_t stream = gmt_alloc_stream(rec);
    for (int p = 0; p < w->npol; p++) {
        struct wi_try *t = &out[p];
        uint64_t id = 0;
        *t = (struct wi_try){.policy = w->pol[p].label};
        if (dv->oom[p].hit) { /* ran out before: never reached this request */
            t->earlier = true;
            t->earlier_time = dv->oom[p].time;
        } else {
            t->fits = w->pol[p].ops->alloc(dv->m[p], rec->size, stream, &id) == 0;
            if (!t->fits)
                dv->oom[p] = (struct wi_oom){true, rec->seq, rec->time, rec->size, stream,
                                             rec->stack};
        }
        struct wi_stats s;
        w->pol[p].ops->stats(dv->m[p], &s);
        t->peak_reserved = s.peak_reserved;
        /* no live request holds it: given back at once, as the models let
         * go only of blocks they are told about */
        if (t->fits)
            w->pol[p].ops->free(dv->m[p], id);
    }
    return w->npol;
}
