/* cmd_whatif.c - `gpumemreport whatif`: the trace's allocation stream
 * replayed through allocator models (whatif.h), side by side.
 *
 * The stream is what the program asked for (whatif_feed.c says which
 * allocations are the requests and which are held outside the models).
 *
 * One replay pass feeds every policy's models (an observer of the
 * replay), one instance per policy and device, on threads of their own
 * where the machine has CPUs to spare; a policy that runs out of memory
 * stops there, as the real program would have, and its figures are those
 * up to that request. Memory: one entry per live request, and the
 * models' blocks.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "whatif.h"

enum { OPT_POLICY = OPT_CMD_BASE, OPT_DEVICE_MEMORY, OPT_REQUESTS };

struct wi {
    struct wi_feed feed;
    bool policy_given;
};

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
    struct wi_feed *f = &w->feed;
    if (!w->policy_given) {
        f->npol = 0;
        w->policy_given = true;
    }
    if (f->npol >= WI_MAX_POLICIES) {
        gmt_value_error("at most %d --policy options", WI_MAX_POLICIES);
        return -1;
    }
    char why[160];
    if (strlen(arg) >= sizeof f->pol[0].label) {
        gmt_value_error("--policy: '%.40s...' is too long", arg);
        return -1;
    }
    int rc = wi_policy_parse(arg, &f->pol[f->npol], why, sizeof why);
    if (rc == -2) {
        gmt_value_error("--policy '%s': %s", arg, why);
        return -1;
    } else if (rc != 0) {
        gmt_value_error("--policy %s: %s", arg, why);
        return -1;
    }
    f->npol++;
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
        if (parse_memory(arg, &w->feed.limit) != 0) {
            gmt_value_error("--device-memory needs a size such as 80G or 512MiB, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_REQUESTS:
        if (!strcmp(arg, "auto"))
            w->feed.requests_from = WI_REQ_AUTO;
        else if (!strcmp(arg, "runtime"))
            w->feed.requests_from = WI_REQ_RUNTIME;
        else if (!strcmp(arg, "driver"))
            w->feed.requests_from = WI_REQ_DRIVER;
        else if (!strcmp(arg, "all"))
            w->feed.requests_from = WI_REQ_ALL;
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

/* ---- output ------------------------------------------------------------------- */

static double frag_of(const struct wi_stats *s)
{
    return s->peak_free ? 1.0 - (double)s->peak_largest_free / (double)s->peak_free : 0;
}

static double at_s(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? (double)(t - r->hdr.start_monotonic_ns) / 1e9 : 0;
}

/* Where the requests came from (WI_REQ_*), -1: PyTorch's blocks; a trace
 * with none at all is said as the runtime's. */
static int source_of(const struct wi_feed *w, const struct replay *r)
{
    return r->fw ? -1 : w->source == WI_REQ_DRIVER && w->requests == 0 ? WI_REQ_RUNTIME
                                                                        : w->source;
}

/* The trace's first line and notes, or its JSON object up to the
 * policies' list. */
static void head(const struct loaded *l, const struct gmt_common *c, const struct wi_feed *w)
{
    static const char *const what_of[] = {[WI_REQ_RUNTIME] = "CUDA runtime allocations",
                                          [WI_REQ_DRIVER] = "CUDA driver allocations",
                                          [WI_REQ_ALL] = "CUDA runtime and driver allocations"};
    static const char *const from_of[] = {[WI_REQ_RUNTIME] = "cuda_allocations",
                                          [WI_REQ_DRIVER] = "driver_allocations",
                                          [WI_REQ_ALL] = "all_allocations"};
    const struct replay *r = &l->r;
    int src = source_of(w, r);
    if (c->json) {
        gmt_json_trace(l);
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
        return;
    }
    uint64_t peak_req = 0;
    for (int d = 0; d < WI_DEVICES; d++)
        if (w->dev[d] && w->dev[d]->peak_requested > peak_req)
            peak_req = w->dev[d]->peak_requested;
    char a[32], b[32];
    printf("%s: %" PRIu64 " requests (%s), peak requested %s", l->path, w->requests,
           src < 0 ? "PyTorch's blocks" : what_of[src], gmt_size(c, a, (int64_t)peak_req));
    if (w->limit)
        printf(", card of %s", gmt_size(c, b, (int64_t)w->limit));
    if (w->outside_n)
        printf("; %" PRIu64 " %s allocation%s held outside the models", w->outside_n,
               w->source == WI_REQ_RUNTIME ? "driver" : "runtime", w->outside_n == 1 ? "" : "s");
    printf("\n");
    gmt_header_notes(r);
}

/* The table's nine columns, less the device's with one device and the
 * out-of-memory one without --device-memory. */
enum { COLS = 9 };
static bool col_shown(int i, int ndev, const struct wi_feed *w)
{
    return !(i == 1 && ndev < 2) && !(i == 8 && !w->limit);
}

static struct table *table_of(int ndev, const struct wi_feed *w)
{
    static const char *const hd[COLS] = {"policy", "device", "peak reserved",
                                         "peak requested", "frag at peak", "largest free",
                                         "device calls", "syncs", "out of memory"};
    static const bool right[COLS] = {false, true, true, true, true, true, true, true, false};
    const char *h[COLS];
    bool rt[COLS];
    int k = 0;
    for (int i = 0; i < COLS; i++) {
        if (col_shown(i, ndev, w)) {
            h[k] = hd[i];
            rt[k++] = right[i];
        }
    }
    return table_new(k, h, rt);
}

/* Policy p's figures on device d, one per row of the list. */
struct row {
    const char *label;
    int d;
    const struct wi_stats *s;
    const struct wi_dev *dv;
    const struct wi_oom *o;
    const char *site; /* where it ran out of memory */
};

static void json_row(const struct row *x, const struct replay *r, bool first)
{
    const struct wi_stats *s = x->s;
    const struct wi_oom *o = x->o;
    printf("%s{\"policy\":", first ? "" : ",");
    gmt_json_str(stdout, x->label);
    printf(",\"device\":%d,\"peak_reserved\":%" PRIu64 ",\"peak_requested\":%" PRIu64
           ",\"fragmentation\":%.4f,\"largest_free\":%" PRIu64 ",\"segments\":%" PRIu64,
           x->d, s->peak_reserved, x->dv->peak_requested, frag_of(s), s->peak_largest_free,
           s->peak_segments);
    if (s->has_device_calls)
        printf(",\"device_allocs\":%" PRIu64 ",\"device_frees\":%" PRIu64 ",\"syncs\":%" PRIu64
               ",\"retries\":%" PRIu64,
               s->device_allocs, s->device_frees, s->syncs, s->retries);
    else
        printf(",\"device_allocs\":null,\"device_frees\":null,\"syncs\":null,"
               "\"retries\":null");
    printf(",\"oom\":");
    if (o->hit) {
        printf("{\"seq\":%" PRIu64 ",\"at_ns\":%" PRIu64 ",\"size\":%" PRIu64
               ",\"stream\":%" PRIu64 ",\"site\":",
               o->seq, (uint64_t)(at_s(r, o->time) * 1e9), o->size, o->stream);
        gmt_json_str(stdout, x->site);
        printf("}");
    } else {
        printf("null");
    }
    printf("}");
}

static void text_row(struct table *tb, const struct row *x, const struct replay *r,
                     const struct gmt_common *c, int ndev, const struct wi_feed *w)
{
    const struct wi_stats *s = x->s;
    char a[32], b[32], cc[32], dev[16], frag[16], calls[48], syncs[24], oom[64];
    snprintf(dev, sizeof dev, "%d", x->d);
    snprintf(frag, sizeof frag, "%.1f%%", 100 * frag_of(s));
    if (s->has_device_calls) {
        snprintf(calls, sizeof calls, "%" PRIu64 " / %" PRIu64, s->device_allocs,
                 s->device_frees);
        snprintf(syncs, sizeof syncs, "%" PRIu64, s->syncs);
    } else {
        snprintf(calls, sizeof calls, "-");
        snprintf(syncs, sizeof syncs, "-");
    }
    if (x->o->hit)
        snprintf(oom, sizeof oom, "at %.3f s (event %" PRIu64 ")", at_s(r, x->o->time),
                 x->o->seq);
    else
        snprintf(oom, sizeof oom, "no");
    const char *cells[COLS] = {x->label, dev, gmt_size(c, a, (int64_t)s->peak_reserved),
                               gmt_size(c, b, (int64_t)x->dv->peak_requested), frag,
                               gmt_size(c, cc, (int64_t)s->peak_largest_free), calls, syncs,
                               oom};
    const char *row[COLS];
    int k = 0;
    for (int i = 0; i < COLS; i++)
        if (col_shown(i, ndev, w))
            row[k++] = cells[i];
    /* table_row takes ncols strings: pass all nine, extras unused */
    table_row(tb, row[0], row[1], row[2], row[3], row[4], row[5], row[6], k > 7 ? row[7] : "",
              k > 8 ? row[8] : "");
}

/* Under the table: where each policy ran out of memory. */
static void oom_lines(const struct loaded *l, const struct gmt_common *c,
                      const struct wi_feed *w)
{
    char sz[32];
    for (int p = 0; p < w->npol; p++) {
        for (int d = 0; d < WI_DEVICES; d++) {
            const struct wi_dev *dv = w->dev[d];
            if (dv == NULL || !dv->oom[p].hit)
                continue;
            const struct wi_oom *o = &dv->oom[p];
            printf("%s: out of memory on device %d at %.3f s (event %" PRIu64
                   "): %s requested at %s\n",
                   w->pol[p].label, d, at_s(&l->r, o->time), o->seq,
                   gmt_size(c, sz, (int64_t)o->size),
                   sym_site(l->sym, o->stack, c->grain, c->depth));
        }
    }
}

static void one(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct wi_feed *w = &((struct wi *)ctx)->feed;
    const struct replay *r = &l->r;
    if (w->owner != r) /* no event reached the models: an empty trace */
        wi_feed_reset(w);
    wi_feed_flush(w);
    int ndev = 0;
    for (int d = 0; d < WI_DEVICES; d++)
        ndev += w->dev[d] != NULL;
    if (w->failed)
        gmt_warnf("%s: out of host memory during the what-if replay; figures are partial",
                  l->path);
    head(l, c, w);
    struct table *tb = c->json ? NULL : table_of(ndev, w);
    bool first = true;
    for (int p = 0; p < w->npol; p++) {
        for (int d = 0; d < WI_DEVICES; d++) {
            struct wi_dev *dv = w->dev[d];
            if (dv == NULL)
                continue;
            struct wi_stats s;
            w->pol[p].ops->stats(dv->m[p], &s);
            const struct wi_oom *o = &dv->oom[p];
            struct row x = {w->pol[p].label, d, &s, dv, o,
                            o->hit ? sym_site(l->sym, o->stack, c->grain, c->depth) : NULL};
            if (c->json)
                json_row(&x, r, first);
            else
                text_row(tb, &x, r, c, ndev, w);
            first = false;
        }
    }
    if (c->json) {
        printf("]}");
    } else {
        table_print(tb, c->markdown);
        table_free(tb);
        oom_lines(l, c, w);
        printf("device calls: allocations / frees (cudaMalloc/cudaFree, or map/unmap "
               "with expandable segments)\n");
    }
    wi_feed_reset(w);
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
    /* the models beside the replay, a thread per CPU (and policy): they
     * are most of the work, and the replay and the reader's decoding
     * share the CPUs with them; one CPU runs them all on its one thread */
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    w.feed.workers = cpus > 1 ? cpus : 0;
    struct gmt_command cmd = {
        .schema = "gpumemtrace.whatif/1",
        .args = {.options = opts, .option = option, .usage = usage},
        .each = one,
        .replay = {.observe = {{.event = wi_feed_event, .ctx = &w.feed}}},
        .default_top = 0,
    };
    int rc = gmt_run(argc, argv, &cmd, &w);
    wi_feed_reset(&w.feed);
    return rc;
}
