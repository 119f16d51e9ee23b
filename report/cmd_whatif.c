/* cmd_whatif.c - `gpumemreport whatif`: the trace's allocation stream
 * replayed through allocator models (whatif.h), side by side.
 *
 * The stream is what the program asked for, picked by the replay's own
 * rules: with PyTorch's caching allocator on (a trace with framework
 * blocks), its blocks (GMT_API_FW_ALLOC/FW_FREE) are the requests, the
 * cudaMallocs under its segments (GMT_ALLOC_FW_BACKING) are its own and
 * left out, and the program's other device allocations (libraries'
 * workspaces) are held outside the model: they count against
 * --device-memory but not in a model's reserved bytes. Without framework
 * blocks the runtime's device allocations (cudaMalloc and kin) are the
 * requests (with our pool on, the cudaMallocs are the program's and the
 * pool's segments are apart), and the driver's (cuMemAlloc, cuMemCreate)
 * are held outside: libraries' own memory, which neither PyTorch's
 * allocator nor our pool would have served (a cache-off PyTorch run has
 * 8 of them, cuBLAS and cuDNN workspaces among them, 2% of resnet50's
 * peak). A trace with no runtime allocation at all (a program on the
 * driver API, a statically linked runtime seen by the driver observer)
 * has its driver allocations as the requests; a first pass over the
 * trace tells which, stopping at its first runtime allocation.
 * Pinned host memory is no device memory; failed allocations asked for
 * nothing that was then used, and are left out; sizes the replay skips
 * (0, above 2^48) are skipped here too.
 *
 * The models run during the one replay pass (replay_opts.on_event), one
 * instance per policy and device; a policy that runs out of memory stops
 * there, as the real program would have, and its figures are those up to
 * that request. Memory: one entry per live request, and the models'
 * blocks.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "common.h"
#include "whatif.h"

enum { OPT_POLICY = OPT_CMD_BASE, OPT_DEVICE_MEMORY, OPT_REQUESTS };
/* --requests: which device allocations are the requests without framework
 * blocks (auto: the runtime's if the trace has any, else the driver's) */
enum { REQ_AUTO, REQ_RUNTIME, REQ_DRIVER, REQ_ALL };
#define WI_MAX_POLICIES 8
#define WI_DEVICES REPLAY_MAX_DEVICES

struct policy {
    char label[160];
    const struct wi_model_ops *ops;
    struct wi_conf conf;
    struct wi_gmt gmt;
};

struct wi_oom {
    bool hit;
    uint64_t seq, time, size, stream;
    uint32_t stack;
};

struct wi_dev {
    void *m[WI_MAX_POLICIES];
    struct wi_oom oom[WI_MAX_POLICIES];
    uint64_t outside, requested, peak_requested, requests;
};

struct req { /* a live allocation of the program */
    uint64_t addr, size;
    uint16_t dev;
    bool request;   /* fed to the models; else held outside them */
    uint8_t held;   /* bit p: policy p holds ids[p] */
    uint64_t ids[WI_MAX_POLICIES];
};

struct wi {
    struct policy pol[WI_MAX_POLICIES];
    int npol;
    bool policy_given;
    uint64_t limit;
    /* the replay in progress */
    const struct replay *owner;
    uint64_t last_records;
    struct wi_dev *dev[WI_DEVICES];
    struct req *slot;
    size_t cap, n;
    uint64_t requests, frees;
    uint64_t outside_n; /* device allocations held outside the models (no framework blocks) */
    int requests_from;  /* REQ_*: --requests */
    int source;         /* this trace's: REQ_RUNTIME, _DRIVER or _ALL (auto resolved) */
    bool failed; /* out of host memory: the figures would be wrong */
};

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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: %s whatif [options] TRACE|DIR...\n\n"
            "Replays the trace's allocation requests (sizes, streams, the order of\n"
            "allocations and frees) through allocator models and prints, per policy:\n"
            "peak reserved, peak requested, fragmentation at the reserved peak\n"
            "(1 - largest free block / free reserved bytes), the largest free block\n"
            "then, device calls (cudaMalloc/cudaFree, or map/unmap), times the\n"
            "allocator would wait for the GPU, and with --device-memory where it\n"
            "would have run out of memory (event, time, site).\n\n"
            "With PyTorch's caching allocator on in the trace, its blocks are the\n"
            "requests; the program's other device allocations count against\n"
            "--device-memory only. Streams are the recorded ones; a cudaMalloc,\n"
            "which has none, is on the legacy stream.\n\n"
            "  --policy P          a policy to model (repeatable, up to %d; default:\n"
            "                      ideal, pytorch, pytorch:expandable_segments:True):\n"
            "        ideal             reserved = requested: the lower bound\n"
            "        pytorch[:CONF]    PyTorch's CUDA caching allocator with a\n"
            "                          PYTORCH_CUDA_ALLOC_CONF (max_split_size_mb,\n"
            "                          max_non_split_rounding_mb,\n"
            "                          roundup_power2_divisions,\n"
            "                          garbage_collection_threshold,\n"
            "                          expandable_segments), its rules as of\n"
            "                          pytorch commit 001074d2. Not modelled: the\n"
            "                          CUDA context and other processes on the card,\n"
            "                          recordStream (a free is reusable at once),\n"
            "                          CUDA graph pools. garbage_collection_threshold\n"
            "                          acts only with --device-memory (PyTorch runs it\n"
            "                          only under a memory fraction).\n"
            "        gmt-pool          gpumemtrace's own caching pool (preload/pool*.c,\n"
            "                          the real code) as the library runs it by default:\n"
            "                          512-byte rounding; segments of 2 MiB for requests\n"
            "                          up to 1 MiB; up to 10 MiB, of 12-24 MiB holding a\n"
            "                          whole number of them with the least left over;\n"
            "                          else the request rounded to 2 MiB. A free is\n"
            "                          pending until the pool's next synchronization,\n"
            "                          modelled as free and immediate (an idle GPU): the\n"
            "                          pool synchronizes when nothing reusable fits and\n"
            "                          4 MiB and the request are pending, or before it\n"
            "                          would run out of memory. Not modelled: its fences,\n"
            "                          the program's own synchronizations, arenas per\n"
            "                          thread (one serves all, as the library's threads\n"
            "                          share one until they contend for it), the\n"
            "                          pool's other options.\n"
            "        gmt-pool:OPTIONS  the same with options, comma-separated:\n"
            "          ordered           ordered reuse (GPUMEMTRACE_POOL_ORDERED=1):\n"
            "                            every free is reusable at once, an estimate\n"
            "                            of that mode (it reuses a block once a\n"
            "                            barrier is recorded after its free)\n"
            "          whole             GPUMEMTRACE_POOL_VMM_WHOLE=1: segments over\n"
            "                            1 MiB are given back without a\n"
            "                            synchronization, and a free one of 256 MiB\n"
            "                            or more is given back rather than cut for a\n"
            "                            request of half its size or less; device\n"
            "                            calls count its creates and releases\n"
            "          vmm               GPUMEMTRACE_POOL_VMM=1: blocks over 1 MiB on\n"
            "                            virtual memory, 2 MiB pages mapped where\n"
            "                            blocks need them and moved between free\n"
            "                            blocks; reserved is the pages held, device\n"
            "                            calls count mappings made and undone; a\n"
            "                            request over 1 TiB runs out of memory\n"
            "          chunk=MB          with vmm: the most one mapping covers\n"
            "                            (GPUMEMTRACE_POOL_VMM_CHUNK_MB, default 16;\n"
            "                            smaller holds less, with more mappings)\n"
            "                          e.g. gmt-pool:ordered,vmm,chunk=4\n"
            "        cuda-async        the CUDA driver's stream-ordered pool\n"
            "                          (cudaMallocAsync; PyTorch's\n"
            "                          backend:cudaMallocAsync), never shrinking, by\n"
            "                          rules measured on an H200 (the driver documents\n"
            "                          none): memory in pages of 32 MiB; requests up to\n"
            "                          32 MiB and larger ones in two address spaces,\n"
            "                          packed, best fit, across page boundaries; a free\n"
            "                          page serves either. Not modelled: streams (a free\n"
            "                          is reusable at once), trimming. No configuration.\n"
            "  --requests R    without PyTorch's blocks in the trace, which device\n"
            "                  allocations are the requests; the others count\n"
            "                  against --device-memory only: auto (default: the\n"
            "                  runtime's - cudaMalloc and kin - if the trace has any,\n"
            "                  else the driver's), runtime, driver (cuMemAlloc,\n"
            "                  cuMemCreate) or all\n"
            "  --device-memory SIZE  the card's memory (512MiB, 80G, ...): report\n"
            "                      where each policy would have run out of it\n"
            "  --json          machine-readable output (docs/usage.md, whatif)\n"
            "  --markdown      the table in Markdown\n"
            "  --bytes         exact byte counts instead of KiB/MiB/GiB\n"
            "  --group G       name the failing site by function, line (default) or stack\n"
            "  --depth N       frames per site (stack grouping)\n"
            "  --no-symbols    don't read binaries: frames as module+offset\n",
            gmt_prog, WI_MAX_POLICIES);
}

/* ---- options ---------------------------------------------------------------- */

static int add_policy(struct wi *w, const char *arg)
{
    if (!w->policy_given) {
        w->npol = 0;
        w->policy_given = true;
    }
    if (w->npol >= WI_MAX_POLICIES) {
        gmt_value_error("at most %d --policy options", WI_MAX_POLICIES);
        return -1;
    }
    struct policy *p = &w->pol[w->npol];
    char why[160];
    if (strlen(arg) >= sizeof p->label) {
        gmt_value_error("--policy: '%.40s...' is too long", arg);
        return -1;
    }
    if (!strcmp(arg, "ideal")) {
        p->ops = &wi_ideal;
    } else if (!strncmp(arg, "pytorch", 7) && (arg[7] == '\0' || arg[7] == ':')) {
        p->ops = &wi_pytorch;
        if (wi_conf_parse(arg[7] ? arg + 8 : "", &p->conf, why, sizeof why) != 0) {
            gmt_value_error("--policy %s: %s", arg, why);
            return -1;
        }
    } else if (!strncmp(arg, "gmt-pool", 8) && (arg[8] == '\0' || arg[8] == ':')) {
        p->ops = &wi_gmtpool;
        if (arg[8] && wi_gmt_parse(arg + 9, &p->gmt, why, sizeof why) != 0) {
            gmt_value_error("--policy %s: %s", arg, why);
            return -1;
        }
    } else if (!strcmp(arg, "cuda-async")) {
        p->ops = &wi_async;
    } else {
        gmt_value_error("--policy '%s': the policies are ideal, pytorch[:CONF], "
                        "cuda-async and gmt-pool[:OPTIONS]",
                        arg);
        return -1;
    }
    snprintf(p->label, sizeof p->label, "%s", arg);
    w->npol++;
    return 1;
}

static int parse_memory(const char *arg, uint64_t *out)
{
    static const struct { const char *u; uint64_t m; } units[] = {
        {"", 1}, {"b", 1}, {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000},
        {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000},
        {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
        {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull}};
    char *end;
    if (arg[0] < '0' || arg[0] > '9')
        return -1;
    double v = strtod(arg, &end);
    char u[8];
    size_t n = 0;
    while (*end && n < sizeof u - 1)
        u[n++] = (char)((*end >= 'A' && *end <= 'Z') ? *end++ - 'A' + 'a' : *end++);
    u[n] = '\0';
    if (*end)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (!strcmp(u, units[i].u)) {
            double b = v * (double)units[i].m;
            if (!(b >= 1) || b > 1e18)
                return -1;
            *out = (uint64_t)b;
            return 0;
        }
    }
    return -1;
}

static int option(int opt, const char *arg, void *ctx)
{
    struct wi *w = ctx;
    switch (opt) {
    case OPT_POLICY:
        return add_policy(w, arg);
    case OPT_DEVICE_MEMORY:
        if (parse_memory(arg, &w->limit) != 0) {
            gmt_value_error("--device-memory needs a size such as 80G or 512MiB, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_REQUESTS:
        if (!strcmp(arg, "auto"))
            w->requests_from = REQ_AUTO;
        else if (!strcmp(arg, "runtime"))
            w->requests_from = REQ_RUNTIME;
        else if (!strcmp(arg, "driver"))
            w->requests_from = REQ_DRIVER;
        else if (!strcmp(arg, "all"))
            w->requests_from = REQ_ALL;
        else {
            gmt_value_error("--requests is auto, runtime, driver or all, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_TOP:
        gmt_value_error("whatif has no --top: every policy is shown");
        return -1;
    default:
        return 0;
    }
}

/* ---- live requests, by address (addrmap.h) ------------------------------------ */

ADDRMAP_FUNCS(req, struct wi, struct req, 1024)

/* ---- the replay pass ---------------------------------------------------------- */

static struct wi_dev *dev_of(struct wi *w, unsigned d)
{
    d %= WI_DEVICES;
    if (w->dev[d])
        return w->dev[d];
    struct wi_dev *dv = calloc(1, sizeof *dv);
    if (dv == NULL)
        return NULL;
    for (int p = 0; p < w->npol; p++) {
        struct wi_opts o = {&w->pol[p].conf, w->limit, &dv->outside, &w->pol[p].gmt};
        if ((dv->m[p] = w->pol[p].ops->init(&o)) == NULL) {
            for (int q = 0; q < p; q++)
                w->pol[q].ops->fini(dv->m[q]);
            free(dv);
            return NULL;
        }
    }
    return w->dev[d] = dv;
}

static void let_go(struct wi *w, struct req *e)
{
    struct wi_dev *dv = w->dev[e->dev];
    if (dv && e->request) {
        for (int p = 0; p < w->npol; p++)
            if (e->held & (1u << p))
                w->pol[p].ops->free(dv->m[p], e->ids[p]);
        dv->requested -= e->size;
    } else if (dv) {
        dv->outside -= e->size;
    }
    req_remove(w, e);
}

static void reset(struct wi *w)
{
    for (size_t i = 0; i < w->cap; i++)
        if (w->slot[i].addr)
            let_go(w, &w->slot[i]), i--; /* the slot may hold a moved entry now */
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
    w->source = REQ_ALL;
    w->failed = false;
    w->owner = NULL;
    w->last_records = 0;
}

static void on_alloc(struct wi *w, const struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0 || gmt_is_fw_backing(rec) || rec->addr == 0 || rec->size == 0 ||
        rec->size > GMT_SIZE_MAX || rec->size2 > GMT_SIZE_MAX ||
        replay_mem_of(rec->api) == MEM_HOST)
        return;
    bool fw_block = (rec->api & ~GMT_API_PTDS) == GMT_API_FW_ALLOC;
    struct req *e = req_find(w, rec->addr);
    if (e) /* allocated again without a free the trace has: the old one is gone */
        let_go(w, e);
    struct wi_dev *dv = dev_of(w, rec->device);
    if (dv == NULL || (e = req_insert(w, rec->addr)) == NULL) {
        w->failed = true;
        return;
    }
    e->size = rec->size;
    e->dev = (uint16_t)(rec->device % WI_DEVICES);
    e->request = r->fw ? fw_block
                 : w->source == REQ_ALL || (w->source == REQ_RUNTIME) == runtime_device_alloc(rec->api);
    if (!e->request) {
        dv->outside += rec->size;
        w->outside_n += !r->fw;
        return;
    }
    /* a request without a stream (cudaMalloc): the legacy stream's pools,
     * not the trace's stream register (resnet50 inference's cache-off
     * trace had a third of its requests on a cuMemset's stream, and the
     * pytorch model held 1.89x the real peak) */
    uint64_t stream = gmt_alloc_stream(rec);
    w->requests++;
    dv->requests++;
    dv->requested += rec->size;
    if (dv->requested > dv->peak_requested)
        dv->peak_requested = dv->requested;
    for (int p = 0; p < w->npol; p++) {
        if (dv->oom[p].hit)
            continue;
        if (w->pol[p].ops->alloc(dv->m[p], rec->size, stream, &e->ids[p]) == 0) {
            e->held |= (uint8_t)(1u << p);
        } else {
            dv->oom[p] = (struct wi_oom){true, rec->seq, rec->time, rec->size, stream,
                                         rec->stack};
        }
    }
}

static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct wi *w = ctx;
    if (w->owner != r || r->records <= w->last_records) {
        reset(w); /* a new trace (or one after a trace that failed) */
        w->owner = r;
        w->source = w->requests_from != REQ_AUTO ? w->requests_from
                    : r->fw || has_runtime_allocs(r->path) ? REQ_RUNTIME : REQ_DRIVER;
    }
    w->last_records = r->records;
    if (rec->kind == GMT_K_ALLOC) {
        on_alloc(w, r, rec);
    } else if (rec->kind == GMT_K_FREE && rec->result == 0 && rec->addr) {
        struct req *e = req_find(w, rec->addr);
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

/* ---- output ------------------------------------------------------------------- */

static double frag_of(const struct wi_stats *s)
{
    return s->peak_free ? 1.0 - (double)s->peak_largest_free / (double)s->peak_free : 0;
}

static double at_s(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? (double)(t - r->hdr.start_monotonic_ns) / 1e9 : 0;
}

static void one(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct wi *w = ctx;
    const struct replay *r = &l->r;
    if (w->owner != r) /* no event reached the models: an empty trace */
        reset(w);
    int ndev = 0;
    uint64_t peak_req = 0;
    for (int d = 0; d < WI_DEVICES; d++) {
        if (w->dev[d]) {
            ndev++;
            if (w->dev[d]->peak_requested > peak_req)
                peak_req = w->dev[d]->peak_requested;
        }
    }
    /* where the requests came from; a trace with none at all is said as
     * the runtime's */
    int src = r->fw ? -1 : w->source == REQ_DRIVER && w->requests == 0 ? REQ_RUNTIME : w->source;
    static const char *const what_of[] = {[REQ_RUNTIME] = "CUDA runtime allocations",
                                          [REQ_DRIVER] = "CUDA driver allocations",
                                          [REQ_ALL] = "CUDA runtime and driver allocations"};
    static const char *const from_of[] = {[REQ_RUNTIME] = "cuda_allocations",
                                          [REQ_DRIVER] = "driver_allocations",
                                          [REQ_ALL] = "all_allocations"};
    const char *what = src < 0 ? "PyTorch's blocks" : what_of[src];
    char a[32], b[32], cc[32], d2[32];
    if (w->failed)
        gmt_warnf("%s: out of host memory during the what-if replay; figures are partial",
                  l->path);
    if (c->json) {
        printf("{\"trace\":");
        gmt_json_str(stdout, l->path);
        printf(",\"pid\":%u,\"requests_from\":\"%s\",\"requests\":%" PRIu64
               ",\"frees\":%" PRIu64 ",\"allocations_outside\":%" PRIu64
               ",\"device_memory\":",
               r->hdr.pid, src < 0 ? "framework_blocks" : from_of[src], w->requests,
               w->frees, w->outside_n);
        if (w->limit)
            printf("%" PRIu64, w->limit);
        else
            printf("null");
        printf(",\"policies\":[");
    } else {
        printf("%s: %" PRIu64 " requests (%s), peak requested %s", l->path, w->requests,
               what, gmt_size(c, a, (int64_t)peak_req));
        if (w->limit)
            printf(", card of %s", gmt_size(c, b, (int64_t)w->limit));
        if (w->outside_n)
            printf("; %" PRIu64 " %s allocation%s held outside the models", w->outside_n,
                   w->source == REQ_RUNTIME ? "driver" : "runtime", w->outside_n == 1 ? "" : "s");
        printf("\n");
    }
    static const char *const hd[] = {"policy", "device", "peak reserved", "peak requested",
                                     "frag at peak", "largest free", "device calls",
                                     "syncs", "out of memory"};
    static const bool right[] = {false, true, true, true, true, true, true, true, false};
    struct table *tb = NULL;
    if (!c->json) {
        const char *h[9];
        bool rt[9];
        int k = 0;
        for (int i = 0; i < 9; i++) {
            if (i == 1 && ndev < 2)
                continue;
            if (i == 8 && !w->limit)
                continue;
            h[k] = hd[i];
            rt[k++] = right[i];
        }
        tb = table_new(k, h, rt);
    }
    bool first = true;
    for (int p = 0; p < w->npol; p++) {
        for (int d = 0; d < WI_DEVICES; d++) {
            struct wi_dev *dv = w->dev[d];
            if (dv == NULL)
                continue;
            struct wi_stats s;
            w->pol[p].ops->stats(dv->m[p], &s);
            const struct wi_oom *o = &dv->oom[p];
            const char *site = o->hit ? sym_site(l->sym, o->stack, c->grain, c->depth) : NULL;
            if (c->json) {
                printf("%s{\"policy\":", first ? "" : ",");
                gmt_json_str(stdout, w->pol[p].label);
                printf(",\"device\":%d,\"peak_reserved\":%" PRIu64 ",\"peak_requested\":%" PRIu64
                       ",\"fragmentation\":%.4f,\"largest_free\":%" PRIu64
                       ",\"segments\":%" PRIu64,
                       d, s.peak_reserved, dv->peak_requested, frag_of(&s),
                       s.peak_largest_free, s.peak_segments);
                if (s.has_device_calls)
                    printf(",\"device_allocs\":%" PRIu64 ",\"device_frees\":%" PRIu64
                           ",\"syncs\":%" PRIu64 ",\"retries\":%" PRIu64,
                           s.device_allocs, s.device_frees, s.syncs, s.retries);
                else
                    printf(",\"device_allocs\":null,\"device_frees\":null,\"syncs\":null,"
                           "\"retries\":null");
                printf(",\"oom\":");
                if (o->hit) {
                    printf("{\"seq\":%" PRIu64 ",\"at_ns\":%" PRIu64 ",\"size\":%" PRIu64
                           ",\"stream\":%" PRIu64 ",\"site\":",
                           o->seq, (uint64_t)(at_s(r, o->time) * 1e9), o->size, o->stream);
                    gmt_json_str(stdout, site);
                    printf("}");
                } else {
                    printf("null");
                }
                printf("}");
            } else {
                char dev[16], frag[16], calls[48], syncs[24], oom[64];
                snprintf(dev, sizeof dev, "%d", d);
                snprintf(frag, sizeof frag, "%.1f%%", 100 * frag_of(&s));
                if (s.has_device_calls) {
                    snprintf(calls, sizeof calls, "%" PRIu64 " / %" PRIu64, s.device_allocs,
                             s.device_frees);
                    snprintf(syncs, sizeof syncs, "%" PRIu64, s.syncs);
                } else {
                    snprintf(calls, sizeof calls, "-");
                    snprintf(syncs, sizeof syncs, "-");
                }
                if (o->hit)
                    snprintf(oom, sizeof oom, "at %.3f s (event %" PRIu64 ")",
                             at_s(r, o->time), o->seq);
                else
                    snprintf(oom, sizeof oom, "no");
                const char *cells[9] = {w->pol[p].label, dev,
                                        gmt_size(c, a, (int64_t)s.peak_reserved),
                                        gmt_size(c, b, (int64_t)dv->peak_requested), frag,
                                        gmt_size(c, cc, (int64_t)s.peak_largest_free), calls,
                                        syncs, oom};
                const char *row[9];
                int k = 0;
                for (int i = 0; i < 9; i++) {
                    if ((i == 1 && ndev < 2) || (i == 8 && !w->limit))
                        continue;
                    row[k++] = cells[i];
                }
                /* table_row takes ncols strings: pass all nine, extras unused */
                table_row(tb, row[0], row[1], row[2], row[3], row[4], row[5], row[6],
                          k > 7 ? row[7] : "", k > 8 ? row[8] : "");
            }
            first = false;
        }
    }
    if (c->json) {
        printf("]}");
    } else {
        table_print(tb, c->markdown);
        table_free(tb);
        for (int p = 0; p < w->npol; p++) {
            for (int d = 0; d < WI_DEVICES; d++) {
                struct wi_dev *dv = w->dev[d];
                if (dv == NULL || !dv->oom[p].hit)
                    continue;
                const struct wi_oom *o = &dv->oom[p];
                printf("%s: out of memory on device %d at %.3f s (event %" PRIu64
                       "): %s requested at %s\n",
                       w->pol[p].label, d, at_s(r, o->time), o->seq,
                       gmt_size(c, d2, (int64_t)o->size),
                       sym_site(l->sym, o->stack, c->grain, c->depth));
            }
        }
        printf("device calls: allocations / frees (cudaMalloc/cudaFree, or map/unmap "
               "with expandable segments)\n");
    }
    reset(w);
}

int cmd_whatif(int argc, char **argv)
{
    static const struct option opts[] = {
        {"policy", required_argument, NULL, OPT_POLICY},
        {"device-memory", required_argument, NULL, OPT_DEVICE_MEMORY},
        {"requests", required_argument, NULL, OPT_REQUESTS},
        {NULL, 0, NULL, 0}};
    static struct wi w; /* large; one per process */
    memset(&w, 0, sizeof w);
    const char *defaults[] = {"ideal", "pytorch", "pytorch:expandable_segments:True"};
    for (int i = 0; i < 3; i++)
        add_policy(&w, defaults[i]);
    w.policy_given = false; /* the first --policy replaces the defaults */
    struct gmt_command cmd = {
        .schema = "gpumemtrace.whatif/1",
        .args = {.options = opts, .option = option, .usage = usage},
        .each = one,
        .replay = {.on_event = on_event, .event_ctx = &w},
        .default_top = 0,
    };
    int rc = gmt_run(argc, argv, &cmd, &w);
    reset(&w);
    return rc;
}
