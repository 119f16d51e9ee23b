/* cmd_summary.c - `gpumemreport summary`, the default: one trace at a glance.
 *
 * Process, devices, duration and counts; peak requested, allocated and
 * reserved bytes and when; device memory the driver reported beyond what
 * the trace accounts for (CUDA context, library workspaces); what was still
 * allocated at exit; out-of-memory events; the sites holding the most at
 * the peak. Several traces: each in turn, then one row per process.
 *
 * With PyTorch's caching allocator's own events in the trace, also its
 * figures as PyTorch itself counts them (the peaks that
 * torch.cuda.max_memory_allocated/max_memory_reserved report), and the
 * peak of what was allocated outside it. Figures over devices are sums of
 * each device's peak, as peak allocated is.
 *
 * A trace with Python stacks opens with the bytes at the peak by kind
 * (parameters, gradients, optimizer state, activations, ...: kinds.h),
 * from a second replay that follows the blocks live at the peak.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kinds_table.h"
#include "oomexplain.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s summary [options] TRACE|DIR...\n\n"
               "For a program with Python stacks, first the bytes at the peak by\n"
               "kind (parameters, gradients, optimizer state, activations saved\n"
               "for backward, temporaries, workspaces; inferred from stacks and\n"
               "lifetimes: docs/usage.md). Then peak requested/allocated/reserved\n"
               "device memory, memory the driver reports beyond the trace, leaks\n"
               "at exit, out-of-memory events and the top sites at the peak.\n\n"
               "Each of the first %d out-of-memory events is explained: the failed\n"
               "request's site (labelled per --group and --depth); allocated,\n"
               "reserved and free memory on its device then (free: the device's\n"
               "memory less reserved and less what is held beyond the trace), the\n"
               "largest free block inside the reserved memory where the trace\n"
               "shows the pool's blocks; what was live then by kind and by site (up\n"
               "to 5 sites, fewer with --top; peak --at oom:N shows them all); and\n"
               "whether whatif's models (pytorch, pytorch:expandable_segments:True,\n"
               "gmt-pool, cuda-async, ideal), given the same requests up to then\n"
               "on the device less what is beyond the trace, would have served the\n"
               "failed request. The other events are counted.\n\n"
               "  --kinds-at MARK  the bytes by kind at the last mark named MARK\n"
               "                   (gpumemtrace_mark, NVTX), not at the peak\n"
               GMT_COMMON_HELP, gmt_prog, OOMX_FULL);
}

static double at_s(const struct replay *r, uint64_t t);

/* --kinds-at: the mark the kinds are taken at (NULL: the peak), and what
 * the search for it found in the trace at hand. */
static const char *kinds_mark;
static bool kinds_failed;

enum { OPT_KINDS_AT = OPT_CMD_BASE };

static int option(int opt, const char *arg, void *ctx)
{
    (void)ctx;
    if (opt != OPT_KINDS_AT)
        return 0;
    kinds_mark = arg;
    return 1;
}

struct mark_find {
    const char *name;
    uint64_t seq, time, count;
    int64_t requested;
};

static void find_mark(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    if (rec->kind != GMT_K_MARKER)
        return;
    struct mark_find *f = ctx;
    const char *name = gmt_defs_string(&r->defs, rec->value);
    if ((rec->api == GMT_MARK || rec->api == GMT_MARK_PUSH) && name &&
        strcmp(name, f->name) == 0) {
        f->seq = rec->seq;
        f->time = rec->time;
        f->requested = r->requested;
        f->count++;
    }
}

/* The bytes by kind at the peak (or at --kinds-at's mark, *at filled): a
 * second replay with kinds_seq, for a trace with Python stacks (the rules
 * read them). NULL: none. The rows' layer names are the returned
 * replay's: unload it after them. */
static struct loaded *kinds_of(struct loaded *l, const struct gmt_common *c,
                               struct kind_row rows[GMT_KIND_COUNT], struct mark_find *at)
{
    if (!(l->r.hdr.features & GMT_FEAT_PYTHON_STACKS) || l->r.peak_requested_seq == 0)
        return NULL;
    uint64_t seq = l->r.peak_requested_seq;
    *at = (struct mark_find){.name = kinds_mark};
    if (kinds_mark) {
        struct replay_opts m = {.observe = {{.event = find_mark, .ctx = at}}};
        struct loaded *f = gmt_load(l->path, c, &m);
        gmt_unload(f);
        if (at->count == 0) {
            fprintf(stderr, "%s: summary: %s: no mark named \"%s\"\n", gmt_prog, l->path,
                    kinds_mark);
            kinds_failed = true;
            return NULL;
        }
        seq = at->seq;
    }
    return gmt_kinds_at(l, c, seq, rows);
}

static void kinds_text(struct loaded *l, const struct gmt_common *c)
{
    struct kind_row rows[GMT_KIND_COUNT];
    struct mark_find at;
    struct loaded *k = kinds_of(l, c, rows, &at);
    if (k == NULL)
        return;
    const struct replay *r = &l->r;
    int64_t total = r->peak_requested;
    if (kinds_mark) {
        total = at.requested;
        printf("\nat mark \"%s\" (the last of %" PRIu64 ", at %.3f s), by kind (inferred "
               "from stacks and lifetimes; docs/usage.md, \"Memory by kind\"):\n",
               kinds_mark, at.count, at_s(r, at.time));
    } else {
        printf("\nat the peak, by kind (inferred from stacks and lifetimes; "
               "docs/usage.md, \"Memory by kind\"):\n");
    }
    static const char *const h[] = {"bytes", "share", "blocks", "kind", "known by"};
    static const bool right[] = {true, true, true, false, false};
    struct table *t = table_new(5, h, right);
    for (int i = 0; i < GMT_KIND_COUNT; i++) {
        if (rows[i].bytes == 0)
            continue;
        char a[32], share[16], n[32];
        snprintf(share, sizeof share, "%.1f%%",
                 total > 0 ? 100.0 * (double)rows[i].bytes / (double)total : 0.0);
        snprintf(n, sizeof n, "%" PRIu64, rows[i].blocks);
        table_row(t, gmt_size(c, a, rows[i].bytes), share, n, rows[i].name, rows[i].how);
        for (int j = 0; j < rows[i].nlayers; j++) {
            char text[1024];
            snprintf(n, sizeof n, "%" PRIu64, rows[i].layers[j].blocks);
            snprintf(text, sizeof text, "    %s", rows[i].layers[j].layer);
            table_row(t, gmt_size(c, a, rows[i].layers[j].bytes), "", n, text, "");
        }
    }
    enum beyond_source src;
    int64_t beyond = replay_beyond(r, -1, &src);
    if (src != BEYOND_NONE && beyond > 0) {
        char a[32];
        table_row(t, gmt_size(c, a, beyond), "", "", "beyond the trace: CUDA context, "
                  "libraries", src == BEYOND_PROCESS ? "NVML, this process"
                                                     : "driver, whole device");
    }
    table_print(t, c->markdown);
    table_free(t);
    gmt_unload(k);
}

static void kinds_json(struct loaded *l, const struct gmt_common *c)
{
    struct kind_row rows[GMT_KIND_COUNT];
    struct mark_find at;
    struct loaded *k = kinds_of(l, c, rows, &at);
    if (k == NULL) {
        printf(",\"kinds_at\":null,\"kinds\":null");
        return;
    }
    if (kinds_mark) {
        printf(",\"kinds_at\":{\"mark\":");
        gmt_json_str(stdout, kinds_mark);
        printf(",\"count\":%" PRIu64 ",\"at_ns\":%" PRIu64 ",\"requested\":%" PRId64 "}",
               at.count, at.time > l->r.hdr.start_monotonic_ns
                             ? at.time - l->r.hdr.start_monotonic_ns : 0,
               at.requested);
    } else {
        printf(",\"kinds_at\":\"peak\"");
    }
    printf(",\"kinds\":");
    gmt_kinds_json(stdout, rows, false);
    gmt_unload(k);
}

static double at_s(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? (double)(t - r->hdr.start_monotonic_ns) / 1e9
                                         : 0.0;
}

static const char *const source_json[] = {
    [BEYOND_NONE] = "null", [BEYOND_DEVICE] = "\"device\"",
    [BEYOND_PROCESS] = "\"process\""};

static uint64_t total_allocs(const struct replay *r)
{
    uint64_t n = 0;
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++)
        n += r->dev[d].allocs;
    return n;
}

static uint64_t peak_allocated(const struct replay *r)
{
    uint64_t n = 0; /* sum over devices of each device's peak */
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++)
        n += r->dev[d].peak_allocated;
    return n;
}

/* The framework allocator's figures, summed over devices. */
struct fw_sums {
    uint64_t peak_requested, peak_allocated, peak_reserved, peak_outside;
    uint64_t allocs, frees, free_completed, ooms, segments, segment_frees, maps, unmaps;
    uint64_t block_sizes, backing, backing_failed;
};

static struct fw_sums fw_sums(const struct replay *r)
{
    struct fw_sums f = {0};
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++) {
        const struct device_state *s = &r->dev[d];
        f.peak_requested += s->peak_fw_requested;
        f.peak_allocated += s->peak_fw_allocated;
        f.peak_reserved += s->peak_fw_reserved;
        f.peak_outside += s->peak_outside;
        f.allocs += s->fw_allocs;
        f.frees += s->fw_frees;
        f.free_completed += s->fw_free_completed;
        f.ooms += s->fw_ooms;
        f.segments += s->fw_segments;
        f.segment_frees += s->fw_segment_frees;
        f.maps += s->fw_maps;
        f.unmaps += s->fw_unmaps;
        f.block_sizes += s->fw_block_sizes;
        f.backing += s->fw_backing;
        f.backing_failed += s->fw_backing_failed;
    }
    return f;
}

static void fw_text(const struct replay *r, const struct gmt_common *c)
{
    struct fw_sums f = fw_sums(r);
    char a[32], b[32];
    printf("PyTorch's caching allocator: peak allocated %s "
           "(torch.cuda.max_memory_allocated), peak reserved %s "
           "(torch.cuda.max_memory_reserved), %" PRIu64 " block%s / %" PRIu64
           " segment%s%s\n",
           gmt_size(c, a, (int64_t)f.peak_allocated), gmt_size(c, b, (int64_t)f.peak_reserved),
           f.allocs, f.allocs == 1 ? "" : "s", f.segments + f.maps,
           f.segments + f.maps == 1 ? "" : "s",
           f.maps ? " (expandable: pieces mapped)" : "");
    printf("outside PyTorch's allocator: peak %s (cuBLAS/cuDNN/NCCL workspaces, "
           "user cudaMalloc)\n", gmt_size(c, a, (int64_t)f.peak_outside));
    if (r->fw_odd)
        printf("note: %" PRIu64 " of PyTorch's records fit no block or segment "
               "known: its figures may be off\n", r->fw_odd);
}

static void fw_json(const struct replay *r)
{
    if (!r->fw) {
        printf(",\"framework\":null");
        return;
    }
    struct fw_sums f = fw_sums(r);
    uint64_t t0 = r->hdr.start_monotonic_ns;
    printf(",\"framework\":{\"name\":\"pytorch\",\"peak_allocated\":%" PRIu64
           ",\"peak_reserved\":%" PRIu64 ",\"peak_requested\":%" PRIu64
           ",\"peak_outside\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64
           ",\"free_completed\":%" PRIu64 ",\"ooms\":%" PRIu64 ",\"segments\":%" PRIu64
           ",\"segment_frees\":%" PRIu64 ",\"maps\":%" PRIu64 ",\"unmaps\":%" PRIu64
           ",\"block_sizes\":%" PRIu64 ",\"backing_allocations\":%" PRIu64
           ",\"backing_failed\":%" PRIu64 ",\"inconsistencies\":%" PRIu64 ",\"devices\":[",
           f.peak_allocated, f.peak_reserved, f.peak_requested, f.peak_outside, f.allocs,
           f.frees, f.free_completed, f.ooms, f.segments, f.segment_frees, f.maps, f.unmaps,
           f.block_sizes, f.backing, f.backing_failed, r->fw_odd);
    bool first = true;
    for (int dv = 0; dv < REPLAY_MAX_DEVICES; dv++) {
        const struct device_state *s = &r->dev[dv];
        if (!s->seen)
            continue;
        printf("%s{\"ordinal\":%d,\"peak_allocated\":%" PRIu64
               ",\"peak_allocated_at_ns\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
               ",\"peak_reserved_at_ns\":%" PRIu64 ",\"peak_requested\":%" PRIu64
               ",\"peak_outside\":%" PRIu64 ",\"allocated\":%" PRId64 ",\"reserved\":%" PRId64
               ",\"allocs\":%" PRIu64 ",\"segments\":%" PRIu64 ",\"ooms\":%" PRIu64 "}",
               first ? "" : ",", dv, s->peak_fw_allocated,
               s->peak_fw_allocated_time > t0 ? s->peak_fw_allocated_time - t0 : 0,
               s->peak_fw_reserved,
               s->peak_fw_reserved_time > t0 ? s->peak_fw_reserved_time - t0 : 0,
               s->peak_fw_requested, s->peak_outside, s->fw_allocated, s->fw_reserved,
               s->fw_allocs, s->fw_segments + s->fw_maps, s->fw_ooms);
        first = false;
    }
    printf("]}");
}

/* ---- out-of-memory events (oomexplain.h) --------------------------------- */

#define OOM_TEXT_SITES 5 /* rows of live sites in an event's text block */

static int cmp_kind_bytes(const void *a, const void *b)
{
    const struct kind_row *x = *(const struct kind_row *const *)a,
                          *y = *(const struct kind_row *const *)b;
    return x->bytes != y->bytes ? (x->bytes > y->bytes ? -1 : 1) : strcmp(x->name, y->name);
}

/* A short block per event: the request and its site; the device's memory
 * then; what was live by kind and by site; what the models say. */
static void oom_text(struct loaded *l, const struct gmt_common *c, size_t i)
{
    const struct replay *r = &l->r;
    const struct oom *o = &r->ooms[i];
    char a[32], b[32], e[32];
    printf("  #%zu at %.3f s: %s on device %u%s failed, requested at\n", i + 1,
           at_s(r, o->time), gmt_size(c, a, (int64_t)o->size), o->device,
           o->fw ? " (PyTorch's caching allocator)" : "");
    struct oomx x;
    if (!oomx_explain(l, c, i, &x)) {
        printf("     %s\n", sym_site(l->sym, o->stack, c->grain, c->depth));
        return;
    }
    printf("     %s\n", x.site);
    printf("     device %u: %s allocated, %s reserved", o->device,
           gmt_size(c, a, x.allocated), gmt_size(c, b, x.reserved));
    if (x.largest_known)
        printf(" (largest free block in it %s)", gmt_size(c, e, (int64_t)x.largest_free));
    if (x.beyond_known)
        printf(", %s beyond the trace", gmt_size(c, a, x.beyond));
    if (x.total) {
        printf(", %s free of %s", gmt_size(c, b, x.free), gmt_size(c, e, (int64_t)x.total));
        if (x.free_reported_known)
            printf(" (%s when it failed, as recorded)",
                   gmt_size(c, a, (int64_t)x.free_reported));
    }
    printf("\n");
    if (x.has_kinds) {
        const struct kind_row *k[GMT_KIND_COUNT];
        int n = 0;
        for (int j = 0; j < GMT_KIND_COUNT; j++)
            if (x.kinds[j].bytes)
                k[n++] = &x.kinds[j];
        qsort(k, (size_t)n, sizeof *k, cmp_kind_bytes);
        printf("     live then by kind:");
        for (int j = 0; j < n; j++)
            printf("%s %s %s", j ? ";" : "", gmt_size(c, a, k[j]->bytes), k[j]->name);
        printf("%s\n", n ? "" : " nothing");
    }
    size_t shown = x.nsites < OOM_TEXT_SITES ? x.nsites : OOM_TEXT_SITES;
    if (c->top && (size_t)c->top < shown)
        shown = (size_t)c->top;
    int ndev = 0;
    for (int dv = 0; dv < REPLAY_MAX_DEVICES; dv++)
        ndev += r->dev[dv].seen;
    printf("     live then by site, %s in all%s (peak --at oom:%zu for the table):\n",
           gmt_size(c, a, x.live), ndev > 1 ? " on every device" : "", i + 1);
    for (size_t j = 0; j < shown; j++)
        printf("       %10s  %s\n", gmt_size(c, a, x.sites[j].v[0]), x.sites[j].label);
    if (shown < x.nsites) {
        int64_t rest = 0;
        for (size_t j = shown; j < x.nsites; j++)
            rest += x.sites[j].v[0];
        printf("       %10s  (%zu more sites)\n", gmt_size(c, a, rest), x.nsites - shown);
    }
    if (x.nwhatif && !x.limit) {
        printf("     whatif: the device's size is unknown, so no model can say whether "
               "it would have fit\n");
    } else if (x.nwhatif) {
        printf("     whatif, the same requests with %s for them:",
               gmt_size(c, a, (int64_t)x.limit));
        for (int p = 0; p < x.nwhatif; p++) {
            const struct wi_try *t = &x.whatif[p];
            printf("%s %s ", p ? ";" : "", t->policy);
            if (t->earlier)
                printf("out of memory earlier, at %.3f s", at_s(r, t->earlier_time));
            else
                printf("%s (peak reserved %s)", t->fits ? "fits" : "fails",
                       gmt_size(c, a, (int64_t)t->peak_reserved));
        }
        printf("\n");
    }
    oomx_free(&x);
}

/* "oom_events": the first events in full, the others as the replay kept
 * them. */
static void oom_json(struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    printf(",\"oom_events\":[");
    for (size_t i = 0; i < r->nooms; i++) {
        const struct oom *o = &r->ooms[i];
        struct oomx x;
        bool full = i < OOMX_FULL && oomx_explain(l, c, i, &x);
        printf("%s{\"time_ns\":%" PRIu64 ",\"device\":%u,\"size\":%" PRIu64
               ",\"framework\":%s,\"site\":", i ? "," : "",
               o->time > r->hdr.start_monotonic_ns ? o->time - r->hdr.start_monotonic_ns : 0,
               o->device, o->size, o->fw ? "true" : "false");
        gmt_json_str(stdout, sym_site(l->sym, o->stack, c->grain, c->depth));
        printf(",\"explained\":%s", full ? "true" : "false");
        if (!full) {
            printf("}");
            continue;
        }
        printf(",\"requested\":%" PRId64 ",\"allocated\":%" PRId64 ",\"reserved\":%" PRId64
               ",\"live_requested\":%" PRId64, x.requested, x.allocated, x.reserved, x.live);
        if (x.total)
            printf(",\"device_total\":%" PRIu64 ",\"free\":%" PRId64, x.total, x.free);
        else
            printf(",\"device_total\":null,\"free\":null");
        if (x.beyond_known)
            printf(",\"beyond_trace\":%" PRId64, x.beyond);
        else
            printf(",\"beyond_trace\":null");
        if (x.free_reported_known)
            printf(",\"free_reported\":%" PRIu64, x.free_reported);
        else
            printf(",\"free_reported\":null");
        if (x.largest_known)
            printf(",\"largest_free_block\":%" PRIu64, x.largest_free);
        else
            printf(",\"largest_free_block\":null");
        printf(",\"live_by_site\":[");
        size_t shown = c->top && (size_t)c->top < x.nsites ? (size_t)c->top : x.nsites;
        int64_t rest = 0;
        for (size_t j = 0; j < x.nsites; j++) {
            if (j >= shown) {
                rest += x.sites[j].v[0];
                continue;
            }
            printf("%s{\"site\":", j ? "," : "");
            gmt_json_str(stdout, x.sites[j].label);
            printf(",\"bytes\":%" PRId64 ",\"allocated\":%" PRId64 ",\"allocations\":%" PRId64
                   "}", x.sites[j].v[0], x.sites[j].v[2], x.sites[j].v[1]);
        }
        printf("],\"live_other_bytes\":%" PRId64 ",\"live_by_kind\":", rest);
        if (x.has_kinds)
            gmt_kinds_json(stdout, x.kinds, false);
        else
            printf("null");
        if (x.limit)
            printf(",\"whatif_device_memory\":%" PRIu64, x.limit);
        else
            printf(",\"whatif_device_memory\":null");
        printf(",\"whatif\":[");
        for (int p = 0; p < x.nwhatif; p++) {
            const struct wi_try *t = &x.whatif[p];
            printf("%s{\"policy\":", p ? "," : "");
            gmt_json_str(stdout, t->policy);
            printf(",\"peak_reserved\":%" PRIu64 ",\"fits\":%s,\"earlier\":%s}",
                   t->peak_reserved, !x.limit ? "null" : t->fits ? "true" : "false",
                   t->earlier ? "true" : "false");
        }
        printf("]}");
        oomx_free(&x);
    }
    printf("]");
}

/* One allocation holding most of a device is a framework's arena, not
 * data: say so, and how to see what is in it. */
static void arena_hint(const struct gmt_defs *d, const struct group_row *top,
                       const struct gmt_common *c)
{
    uint64_t total = 0;
    for (size_t i = 0; i < d->ndevices; i++)
        if (d->devices[i].total_mem > total)
            total = d->devices[i].total_mem;
    if (total == 0 || top->v[1] != 1 || top->v[0] < 0 ||
        (uint64_t)top->v[0] < total / 2)
        return;
    char a[32];
    printf("\nnote: one allocation holds %s (%.0f%% of the device): most "
           "likely a framework's own memory arena, whose contents the trace "
           "cannot see (JAX preallocates 75%% of the GPU: "
           "XLA_PYTHON_CLIENT_ALLOCATOR=platform, which the gpumemtrace "
           "launcher sets, records each buffer)\n",
           gmt_size(c, a, top->v[0]), 100.0 * (double)top->v[0] / (double)total);
}

/* The text's first lines: the trace, the process, its devices, how long
 * it ran and what it did, the header's notes. */
static void text_head(struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    const struct gmt_defs *d = &r->defs;
    char a[32];
    printf("trace:     %s\n", l->path);
    printf("process:   pid %u", r->hdr.pid);
    if (d->process.present)
        printf(", %s", d->process.cmdline);
    printf("\n");
    for (size_t i = 0; i < d->ndevices; i++)
        printf("device %u:  %s, %s\n", d->devices[i].ordinal, d->devices[i].name,
               gmt_size(c, a, (int64_t)d->devices[i].total_mem));
    printf("ran:       %s, %" PRIu64 " events, %" PRIu64 " allocations%s%s\n",
           gmt_seconds(a, replay_duration(r)), r->events, total_allocs(r),
           r->pool && r->segments_taken ? ", gpumemtrace pool on" : "",
           r->cut ? ", CUT SHORT" : "");
    gmt_header_notes(r);
}

/* The peaks of requested, allocated and reserved memory, and PyTorch's
 * own figures where its allocator's events are in the trace. */
static void text_peaks(const struct replay *r, const struct gmt_common *c)
{
    char a[32], b[32], e[32];
    printf("\npeak requested:  %-12s at %.3f s (what the program asked for)\n",
           gmt_size(c, a, (int64_t)r->peak_requested), at_s(r, r->peak_requested_time));
    printf("peak allocated:  %-12s (blocks behind the requests, rounded)\n",
           gmt_size(c, b, (int64_t)peak_allocated(r)));
    printf("peak reserved:   %-12s at %.3f s (%s)\n",
           gmt_size(c, e, (int64_t)r->peak_reserved), at_s(r, r->peak_reserved_time),
           r->fw ? "PyTorch's segments and allocations outside it"
           : !r->pool || !r->segments_taken ? "allocations held from the driver"
           : r->driver_allocs ? "the pool's segments and allocations outside it"
                              : "the pool's segments");
    if (r->fw)
        fw_text(r, c);
}

/* The memory the peaks above do not show: held beyond the trace (the
 * driver's figures), pinned host memory, virtual memory, the stream-ordered
 * pools' own figures; and how many allocations were seen at the driver. */
static void text_beyond(const struct replay *r, const struct gmt_common *c)
{
    char a[32], b[32];
    enum beyond_source src;
    int64_t beyond = replay_beyond(r, -1, &src);
    if (src == BEYOND_PROCESS)
        printf("beyond trace:    %-12s device memory this process held beyond "
               "what is reserved here (CUDA context, libraries; NVML's "
               "per-process figure)\n", gmt_size(c, a, beyond));
    else if (src == BEYOND_DEVICE)
        printf("beyond trace:    %-12s device memory the driver reported in use "
               "beyond what is reserved here (CUDA context, libraries; "
               "device-wide: other processes on the card count too)\n",
               gmt_size(c, a, beyond));
    else
        printf("beyond trace:    unknown (no driver samples in this trace)\n");
    uint64_t host = 0;
    for (int dv = 0; dv < REPLAY_MAX_DEVICES; dv++)
        host += r->dev[dv].peak_host;
    if (host)
        printf("pinned host:     %-12s peak\n", gmt_size(c, a, (int64_t)host));
    if (r->vmm_ops)
        printf("virtual memory:  %-12s peak mapped, %s peak address space "
               "reserved (physical memory is in the peaks above)\n",
               gmt_size(c, a, (int64_t)r->peak_mapped),
               gmt_size(c, b, (int64_t)r->peak_va_reserved));
    uint64_t pres = 0, pused = 0;
    for (int i = 0; i < r->nmempools; i++) {
        pres += r->mempools[i].reserved_high;
        pused += r->mempools[i].used_high;
    }
    if (r->nmempools)
        printf("stream-ordered:  %-12s peak reserved by %d pool%s, %s peak used "
               "(the driver's figures)\n", gmt_size(c, a, (int64_t)pres),
               r->nmempools, r->nmempools == 1 ? "" : "s",
               gmt_size(c, b, (int64_t)pused));
    if (r->driver_allocs)
        printf("driver level:    %" PRIu64 " of the allocations were seen "
               "at the CUDA driver (cuMem*), not the runtime\n",
               r->driver_allocs);
}

/* What was still allocated at exit, and the out-of-memory events: the
 * first OOMX_FULL explained, the others counted. */
static void text_leaks_ooms(struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    char a[32], b[32];
    uint64_t nleak, hleak, leak = replay_leaked(r, &nleak, &hleak);
    printf("leaked at exit:  %-12s in %" PRIu64 " allocations%s%s\n",
           gmt_size(c, a, (int64_t)leak), nleak,
           hleak ? ", pinned host " : "", hleak ? gmt_size(c, b, (int64_t)hleak) : "");
    printf("out of memory:   %" PRIu64 "\n", r->ooms_total);
    for (size_t i = 0; i < r->nooms && i < OOMX_FULL; i++)
        oom_text(l, c, i);
    if (r->ooms_total > OOMX_FULL)
        printf("  and %" PRIu64 " more (peak --at oom:N shows what was live at the "
               "Nth)\n", r->ooms_total - OOMX_FULL);
}

/* The sites holding the most at the peak (--top of them), and the hint
 * when the first is one allocation as big as a framework's arena. */
static void text_top_sites(struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    char a[32], b[32];
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_peak, &rows);
    if (n) {
        printf("\ntop sites at the peak:\n");
        size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
        bool rounded = gmt_group_differ(rows, shown, 0, 2);
        struct table *t = gmt_sites_table(rounded);
        for (size_t i = 0; i < shown; i++) {
            char share[16], cnt[32];
            snprintf(share, sizeof share, "%.1f%%",
                     r->peak_requested ? 100.0 * (double)rows[i].v[0] /
                                             (double)r->peak_requested : 0.0);
            snprintf(cnt, sizeof cnt, "%" PRId64, rows[i].v[1]);
            if (rounded)
                table_row(t, gmt_size(c, a, rows[i].v[0]), gmt_size(c, b, rows[i].v[2]),
                          share, cnt, rows[i].label);
            else
                table_row(t, gmt_size(c, a, rows[i].v[0]), share, cnt, rows[i].label);
        }
        table_print(t, c->markdown);
        table_free(t);
        arena_hint(&r->defs, &rows[0], c);
    }
    free(rows);
}

static void text(struct loaded *l, const struct gmt_common *c)
{
    text_head(l, c);
    kinds_text(l, c);
    text_peaks(&l->r, c);
    text_beyond(&l->r, c);
    text_leaks_ooms(l, c);
    text_top_sites(l, c);
}

static void json(struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    const struct gmt_defs *d = &r->defs;
    uint64_t nleak, hleak, leak = replay_leaked(r, &nleak, &hleak);
    enum beyond_source src;
    int64_t beyond = replay_beyond(r, -1, &src);
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"command\":", r->hdr.pid);
    gmt_json_str(stdout, d->process.present ? d->process.cmdline : "");
    printf(",\"closed\":%s,\"pool\":%s,\"duration_ns\":%" PRIu64
           ",\"events\":%" PRIu64 ",\"allocations\":%" PRIu64,
           r->cut ? "false" : "true", r->pool ? "true" : "false",
           replay_duration(r), r->events, total_allocs(r));
    printf(",\"peak_requested\":%" PRIu64 ",\"peak_requested_at_ns\":%" PRIu64
           ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
           ",\"peak_reserved_at_ns\":%" PRIu64 ",\"beyond_trace\":%" PRId64
           ",\"beyond_trace_source\":%s,\"leaked\":%" PRIu64 ",\"leaked_allocations\":%" PRIu64
           ",\"leaked_host\":%" PRIu64 ",\"ooms\":%" PRIu64,
           r->peak_requested,
           r->peak_requested_time > r->hdr.start_monotonic_ns
               ? r->peak_requested_time - r->hdr.start_monotonic_ns : 0,
           peak_allocated(r), r->peak_reserved,
           r->peak_reserved_time > r->hdr.start_monotonic_ns
               ? r->peak_reserved_time - r->hdr.start_monotonic_ns : 0,
           beyond, source_json[src], leak, nleak, hleak,
           r->ooms_total);
    printf(",\"driver_allocations\":%" PRIu64 ",\"peak_mapped\":%" PRIu64
           ",\"peak_address_reserved\":%" PRIu64,
           r->driver_allocs, r->peak_mapped, r->peak_va_reserved);
    uint64_t pres = 0, pused = 0;
    for (int i = 0; i < r->nmempools; i++) {
        pres += r->mempools[i].reserved_high;
        pused += r->mempools[i].used_high;
    }
    printf(",\"stream_ordered_pools\":%d,\"pools_peak_reserved\":%" PRIu64
           ",\"pools_peak_used\":%" PRIu64, r->nmempools, pres, pused);
    fw_json(r);
    printf(",\"devices\":[");
    bool first = true;
    for (int dv = 0; dv < REPLAY_MAX_DEVICES; dv++) {
        const struct device_state *s = &r->dev[dv];
        if (!s->seen)
            continue;
        const struct gmt_device_def *def = gmt_defs_device(d, (uint32_t)dv);
        printf("%s{\"ordinal\":%d,\"name\":", first ? "" : ",", dv);
        gmt_json_str(stdout, def ? def->name : "");
        printf(",\"total_bytes\":%" PRIu64 ",\"peak_requested\":%" PRIu64
               ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
               ",\"beyond_trace\":%" PRId64 ",\"ooms\":%" PRIu64 "}",
               def ? def->total_mem : 0, s->peak_requested, s->peak_allocated,
               s->peak_reserved, replay_beyond(r, dv, NULL), s->ooms);
        first = false;
    }
    printf("],\"top_sites\":[");
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_peak, &rows);
    for (size_t i = 0; i < n && (c->top == 0 || i < (size_t)c->top); i++) {
        printf("%s{\"site\":", i ? "," : "");
        gmt_json_str(stdout, rows[i].label);
        printf(",\"bytes\":%" PRId64 ",\"allocated\":%" PRId64
               ",\"allocations\":%" PRId64 "}", rows[i].v[0], rows[i].v[2], rows[i].v[1]);
    }
    free(rows);
    printf("]");
    kinds_json(l, c);
    oom_json(l, c);
    printf("}");
}

int cmd_summary(int argc, char **argv)
{
    static const struct option opts[] = {
        {"kinds-at", required_argument, NULL, OPT_KINDS_AT}, {NULL, 0, NULL, 0}};
    static const struct gmt_args args = {.options = opts, .option = option, .usage = usage};
    struct gmt_common c;
    gmt_common_init(&c);
    kinds_mark = NULL;
    kinds_failed = false;
    int parsed = gmt_args_parse(argc, argv, &args, &c, NULL);
    if (parsed != GMT_PARSED)
        return parsed;
    char **paths;
    size_t n;
    if (optind >= argc)
        return gmt_usage_error(argv[0], "no trace given");
    if (gmt_trace_list(argc - optind, argv + optind, &paths, &n) != 0)
        return EXIT_ERROR;
    int rc = EXIT_OK;
    uint64_t sum_peak = 0, sum_reserved = 0, sum_leak = 0, sum_oom = 0;
    struct table *procs = NULL;
    if (n > 1 && !c.json) {
        static const char *const h[] = {"pid", "peak requested", "peak reserved",
                                        "leaked", "ooms", "command"};
        static const bool right[] = {true, true, true, true, true, false};
        procs = table_new(6, h, right);
    }
    if (c.json)
        printf("{\"schema\":\"gpumemtrace.summary/1\",\"traces\":[");
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        struct loaded *l = gmt_load(paths[i], &c, NULL);
        if (l == NULL) {
            rc = EXIT_ERROR;
            continue;
        }
        if (c.json) {
            if (shown)
                printf(",");
            json(l, &c);
        } else {
            if (shown)
                printf("\n");
            text(l, &c);
        }
        shown++;
        uint64_t nl, hl, leak = replay_leaked(&l->r, &nl, &hl);
        sum_peak += l->r.peak_requested;
        sum_reserved += l->r.peak_reserved;
        sum_leak += leak;
        sum_oom += l->r.ooms_total;
        if (procs) {
            char pid[16], a[32], b[32], e[32], oo[24];
            snprintf(pid, sizeof pid, "%u", l->r.hdr.pid);
            snprintf(oo, sizeof oo, "%" PRIu64, l->r.ooms_total);
            table_row(procs, pid, gmt_size(&c, a, (int64_t)l->r.peak_requested),
                      gmt_size(&c, b, (int64_t)l->r.peak_reserved),
                      gmt_size(&c, e, (int64_t)leak), oo,
                      l->r.defs.process.present ? l->r.defs.process.cmdline : "");
        }
        gmt_unload(l);
    }
    if (c.json) {
        printf("],\"combined\":{\"processes\":%zu,\"sum_peak_requested\":%" PRIu64
               ",\"sum_peak_reserved\":%" PRIu64 ",\"leaked\":%" PRIu64
               ",\"ooms\":%" PRIu64 "}}\n", shown, sum_peak, sum_reserved, sum_leak,
               sum_oom);
    } else if (procs) {
        char a[32], b[32], e[32], oo[24];
        snprintf(oo, sizeof oo, "%" PRIu64, sum_oom);
        table_row(procs, "all", gmt_size(&c, a, (int64_t)sum_peak),
                  gmt_size(&c, b, (int64_t)sum_reserved), gmt_size(&c, e, (int64_t)sum_leak),
                  oo, "(sums of each process's peaks: an upper bound)");
        printf("\nper process:\n");
        table_print(procs, c.markdown);
    }
    table_free(procs);
    gmt_trace_list_free(paths, n);
    return gmt_finish_output(kinds_failed ? EXIT_ERROR : rc);
}
