/* cmd_info.c - `gpumemreport info`: what a trace holds.
 *
 * Header, process, devices, threads, whether the trace was closed or cut
 * short, what its recorder could not record (a file that stopped
 * growing, a stack cap), and how many events of each kind and from each runtime entry
 * point it holds. The counts are what the tests compare with the calls a
 * test program made. PyTorch's caching allocator's block events are not
 * calls of CUDA: they are counted apart (framework), not by entry point.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define NCLASS 32
#define NAPI 256

struct info {
    uint64_t records, events, defs;
    uint64_t by_kind[NCLASS], oom, alloc_failed, failed_calls;
    uint64_t by_api[NAPI], bytes_by_api[NAPI];
    uint64_t pool_syncs, pool_sync_failed, fence_waits;
    /* PyTorch's caching allocator (GMT_FEAT_FW_BLOCKS) */
    bool fw;
    uint64_t fw_blocks, fw_ooms, fw_frees, fw_actions[GMT_FWX_BLOCK_SIZE + 1];
    uint64_t fw_backing, fw_backing_failed;
    uint64_t first_time, last_time;
    struct gmt_defs defs_tab;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: %s info [--json] TRACE...\n\n"
               "Header, process, devices, threads and the number of events of\n"
               "each kind and of each CUDA entry point in each trace.\n\n"
               "  --json   one JSON object per trace, in an array\n",
            gmt_prog);
}

/* Framework records: 1 counted here (not a call of CUDA), 0 a call. */
static int fw_count(struct info *in, const struct gmt_rec *rec)
{
    unsigned api = rec->api & ~GMT_API_PTDS;
    if (rec->kind == GMT_K_EXT) {
        struct gmt_fw f;
        if (rec->ext == GMT_X_FW && gmt_fw_decode(rec, &f) == 0) {
            in->fw = true;
            if (f.action <= GMT_FWX_BLOCK_SIZE)
                in->fw_actions[f.action]++;
        }
        return 1;
    }
    if (rec->kind == GMT_K_ALLOC && api == GMT_API_FW_ALLOC) {
        in->fw = true;
        in->fw_blocks += rec->result == 0;
        in->fw_ooms += rec->result == 2;
        return 1;
    }
    if (rec->kind == GMT_K_FREE && api == GMT_API_FW_FREE) {
        in->fw = true;
        in->fw_frees++;
        return 1;
    }
    if (gmt_is_fw_backing(rec)) {
        in->fw = true;
        in->fw_backing += rec->result == 0;
        in->fw_backing_failed += rec->result != 0;
    }
    return 0;
}

static int scan(const char *path, struct gmt_reader **out, struct info *in)
{
    char err[512];
    struct gmt_reader *r = gmt_reader_open(path, err, sizeof err);
    if (r == NULL) {
        gmt_errorf("%s: %s", path, err);
        return -1;
    }
    struct gmt_rec rec;
    int rc;
    while ((rc = gmt_reader_next(r, &rec)) == 1) {
        in->records++;
        if (rec.kind == GMT_K_EXT) {
            in->defs++;
            gmt_defs_add(&in->defs_tab, &rec);
            fw_count(in, &rec);
            continue;
        }
        in->events++;
        if (in->first_time == 0)
            in->first_time = rec.time;
        in->last_time = rec.time;
        if (rec.kind == GMT_K_SYNC && rec.api == GMT_API_POOL_SYNCHRONIZE) {
            in->pool_syncs++;
            in->pool_sync_failed += rec.result != 0;
            continue; /* the pool's, not a call of the program */
        }
        if (rec.kind == GMT_K_SYNC && rec.api == GMT_API_POOL_FENCE_WAIT) {
            in->fence_waits++;
            continue;
        }
        if (rec.kind == GMT_K_ALLOC && rec.result != 0)
            (*(rec.result == 2 ? &in->oom : &in->alloc_failed))++;
        else
            in->by_kind[rec.kind]++;
        if (fw_count(in, &rec))
            continue; /* no call: not by entry point, never a failed call */
        if (rec.kind == GMT_K_ALLOC || rec.kind == GMT_K_FREE ||
            rec.kind == GMT_K_MEMCPY || rec.kind == GMT_K_MEMSET ||
            rec.kind == GMT_K_SYNC || rec.kind == GMT_K_STREAM_CREATE) {
            in->by_api[rec.api]++;
            if (rec.result == 0)
                in->bytes_by_api[rec.api] += rec.size;
        }
        if (rec.result != 0)
            in->failed_calls++;
    }
    if (rc < 0) {
        gmt_errorf("%s: %s", path, gmt_reader_error(r));
        gmt_reader_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

static void print_time(FILE *f, uint64_t ns)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    char buf[64];
    gmtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
    fputs(buf, f);
}

static const char *features(uint64_t f, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s", f & GMT_FEAT_NATIVE_STACKS ? "native-stacks " : "",
             f & GMT_FEAT_PYTHON_STACKS ? "python-stacks " : "",
             f & GMT_FEAT_POOL ? "pool " : "",
             f & GMT_FEAT_FW_BLOCKS ? "torch-blocks " : "", f ? "" : "none");
    size_t n = strlen(buf);
    if (n && buf[n - 1] == ' ')
        buf[n - 1] = '\0';
    return buf;
}

static uint64_t duration(const struct gmt_reader *r, const struct info *in)
{
    const struct gmt_file_header *h = gmt_reader_header(r);
    uint64_t end = in->last_time;
    if (!gmt_reader_cut(r) && h->end_monotonic_ns > end)
        end = h->end_monotonic_ns;
    return end > h->start_monotonic_ns ? end - h->start_monotonic_ns : 0;
}

/* The text's first lines: the file, its format, the process and its rank,
 * when it ran, and whether the trace was closed and complete. */
static void text_header(const char *path, const struct gmt_reader *r,
                        const struct info *in)
{
    const struct gmt_file_header *h = gmt_reader_header(r);
    const struct gmt_defs *d = &in->defs_tab;
    char b1[32], b2[64];
    printf("trace:      %s (%s, %" PRIu64 " chunks of %s)\n", path,
           gmt_fmt_bytes(b1, gmt_reader_file_size(r), false),
           gmt_reader_chunks(r), gmt_fmt_bytes(b2, h->chunk_size, false));
    printf("format:     %u.%u (readable by %u.%u+), features: %s\n",
           h->version_major, h->version_minor, h->min_reader_major,
           h->min_reader_minor, features(h->features, b2, sizeof b2));
    printf("process:    pid %u, parent %u, session %016" PRIx64 "%s\n", h->pid,
           h->ppid, h->session_id, h->file_index ? " (re-exec)" : "");
    if (h->dist_flags & GMT_DIST_RANK) {
        printf("rank:       %u", h->rank);
        if (h->dist_flags & GMT_DIST_WORLD_SIZE)
            printf(" of %u", h->world_size);
        if (h->dist_flags & GMT_DIST_LOCAL_RANK)
            printf(", local rank %u", h->local_rank);
        if (h->dist_flags & GMT_DIST_LOCAL_WORLD_SIZE)
            printf(" of %u", h->local_world_size);
        printf("%s\n", h->dist_flags & GMT_DIST_LATE
                           ? " (set by the program while it ran)" : "");
    }
    printf("started:    ");
    print_time(stdout, h->start_realtime_ns);
    printf(", ran %.3f s\n", (double)duration(r, in) / 1e9);
    if (d->process.present) {
        printf("command:    %s\n", d->process.cmdline);
        printf("executable: %s\n", d->process.exe);
        printf("host:       %s\n", d->process.host);
    }
    if (gmt_reader_cut(r))
        printf("state:      CUT SHORT - the process ended without closing the "
               "trace (killed, crashed, or _exit); everything up to its last "
               "event is intact\n");
    else
        printf("state:      closed normally\n");
    char lost[512];
    if (gmt_lost(h, lost, sizeof lost))
        printf("lost:       INCOMPLETE - %s\n", lost);
}

/* The text's counts: events by kind, the pool's and PyTorch's records,
 * calls by entry point, failed calls. */
static void text_counts(const struct gmt_file_header *h, const struct info *in)
{
    printf("\nevents by kind:\n");
    for (unsigned k = 1; k <= GMT_K_CORE_MAX; k++)
        if (in->by_kind[k])
            printf("  %-24s %12" PRIu64 "\n", gmt_kind_name(k), in->by_kind[k]);
    if (in->oom)
        printf("  %-24s %12" PRIu64 "  (failed allocations: out of memory)\n",
               "oom", in->oom);
    if (in->alloc_failed)
        printf("  %-24s %12" PRIu64 "  (failed allocations: other errors)\n",
               "alloc_failed", in->alloc_failed);
    if (h->features & GMT_FEAT_POOL)
        printf("\npool: %" PRIu64 " segments taken, %" PRIu64 " given back, %" PRIu64
               " blocks made reusable, %" PRIu64 " synchronizations issued%s, %"
               PRIu64 " waits for a fence\n",
               in->by_kind[GMT_K_SEGMENT_ALLOC], in->by_kind[GMT_K_SEGMENT_FREE],
               in->by_kind[GMT_K_FREE_COMPLETED], in->pool_syncs,
               in->pool_sync_failed ? " (some refused: stream capture)" : "",
               in->fence_waits);
    if (in->fw || (h->features & GMT_FEAT_FW_BLOCKS))
        printf("\nPyTorch's caching allocator: block events: %" PRIu64 " blocks handed out"
               " (%" PRIu64 " out of memory), %" PRIu64 " freed, %" PRIu64 " reusable again;"
               " %" PRIu64 " segments taken, %" PRIu64 " given back, %" PRIu64 " mapped, %"
               PRIu64 " unmapped; %" PRIu64 " block sizes corrected; %" PRIu64 " CUDA"
               " allocations under its segments (%" PRIu64 " failed, retried by PyTorch)\n",
               in->fw_blocks, in->fw_ooms, in->fw_frees, in->by_kind[GMT_K_FREE_COMPLETED],
               in->fw_actions[GMT_FWX_SEGMENT_ALLOC], in->fw_actions[GMT_FWX_SEGMENT_FREE],
               in->fw_actions[GMT_FWX_SEGMENT_MAP], in->fw_actions[GMT_FWX_SEGMENT_UNMAP],
               in->fw_actions[GMT_FWX_BLOCK_SIZE], in->fw_backing, in->fw_backing_failed);
    printf("\ncalls by entry point:\n");
    for (unsigned a = 1; a < NAPI; a++) {
        if (!in->by_api[a])
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s", gmt_api_name(a),
                 (a & GMT_API_PTDS) ? "_ptds" : "");
        printf("  %-32s %12" PRIu64 "\n", name, in->by_api[a]);
    }
    if (in->failed_calls)
        printf("\nfailed calls: %" PRIu64 "\n", in->failed_calls);
}

static void text(const char *path, const struct gmt_reader *r,
                 const struct info *in)
{
    const struct gmt_defs *d = &in->defs_tab;
    char b1[32];
    text_header(path, r, in);
    for (size_t i = 0; i < d->ndevices; i++) {
        const struct gmt_device_def *dv = &d->devices[i];
        printf("device %u:   %s, %s, sm_%u%u, PCI %04x:%02x:%02x\n", dv->ordinal,
               dv->name, gmt_fmt_bytes(b1, dv->total_mem, false), dv->cc_major,
               dv->cc_minor, dv->pci_domain, dv->pci_bus, dv->pci_device);
    }
    printf("threads:    %zu\n", d->nthreads);
    printf("records:    %" PRIu64 " (%" PRIu64 " events, %" PRIu64
           " definitions: %zu stacks, %zu modules, %zu Python code objects)\n",
           in->records, in->events, in->defs, d->nstacks, d->nmodules,
           d->npycodes);
    for (size_t i = 0; i < d->nnotes_kept; i++)
        printf("note:       %s\n", d->notes[i]);
    text_counts(gmt_reader_header(r), in);
}

/* The JSON object's header fields: the file, the process and its rank,
 * when it ran, whether it was closed, what was lost, the command. */
static void json_header(const char *path, const struct gmt_reader *r,
                        const struct info *in)
{
    const struct gmt_file_header *h = gmt_reader_header(r);
    const struct gmt_defs *d = &in->defs_tab;
    printf("{\"trace\":");
    gmt_json_str(stdout, path);
    printf(",\"file_bytes\":%" PRIu64 ",\"chunks\":%" PRIu64
           ",\"format\":\"%u.%u\",\"features\":%" PRIu64
           ",\"pid\":%u,\"ppid\":%u,\"session\":\"%016" PRIx64
           "\",\"file_index\":%u,\"start_realtime_ns\":%" PRIu64
           ",\"duration_ns\":%" PRIu64 ",\"closed\":%s",
           gmt_reader_file_size(r), gmt_reader_chunks(r), h->version_major,
           h->version_minor, h->features, h->pid, h->ppid, h->session_id,
           h->file_index, h->start_realtime_ns, duration(r, in),
           gmt_reader_cut(r) ? "false" : "true");
    char lost[512];
    gmt_json_lost(h, lost, sizeof lost);
    static const struct {
        uint32_t bit;
        const char *key;
    } dist[] = {{GMT_DIST_RANK, "rank"}, {GMT_DIST_LOCAL_RANK, "local_rank"},
                {GMT_DIST_WORLD_SIZE, "world_size"},
                {GMT_DIST_LOCAL_WORLD_SIZE, "local_world_size"}};
    const uint32_t val[] = {h->rank, h->local_rank, h->world_size,
                            h->local_world_size};
    for (size_t i = 0; i < sizeof dist / sizeof *dist; i++)
        if (h->dist_flags & dist[i].bit)
            printf(",\"%s\":%u", dist[i].key, val[i]);
    if (d->process.present) {
        printf(",\"command\":");
        gmt_json_str(stdout, d->process.cmdline);
        printf(",\"executable\":");
        gmt_json_str(stdout, d->process.exe);
        printf(",\"host\":");
        gmt_json_str(stdout, d->process.host);
    }
}

/* The members of an object by entry point: v[a] for each entry point a
 * that was called. */
static void json_by_api(const struct info *in, const uint64_t *v)
{
    bool first = true;
    for (unsigned a = 1; a < NAPI; a++) {
        if (!in->by_api[a])
            continue;
        printf("%s\"%s%s\":%" PRIu64, first ? "" : ",", gmt_api_name(a),
               (a & GMT_API_PTDS) ? "_ptds" : "", v[a]);
        first = false;
    }
}

/* The JSON counts: by kind, by entry point (calls and bytes), the pool's
 * and PyTorch's records, failed calls; the object's end. */
static void json_counts(const struct gmt_file_header *h, const struct info *in)
{
    printf(",\"by_kind\":{");
    bool first = true;
    for (unsigned k = 1; k <= GMT_K_CORE_MAX; k++) {
        if (!in->by_kind[k])
            continue;
        printf("%s\"%s\":%" PRIu64, first ? "" : ",", gmt_kind_name(k),
               in->by_kind[k]);
        first = false;
    }
    printf("%s\"oom\":%" PRIu64 ",\"alloc_failed\":%" PRIu64 "}", first ? "" : ",",
           in->oom, in->alloc_failed);
    printf(",\"by_api\":{");
    json_by_api(in, in->by_api);
    printf("},\"bytes_by_api\":{");
    json_by_api(in, in->bytes_by_api);
    printf("},\"pool\":{\"segments_allocated\":%" PRIu64 ",\"segments_freed\":%" PRIu64
           ",\"free_completed\":%" PRIu64 ",\"syncs\":%" PRIu64 ",\"fence_waits\":%" PRIu64
           ",\"samples\":%" PRIu64 ",\"oom_states\":%" PRIu64 "}",
           in->by_kind[GMT_K_SEGMENT_ALLOC], in->by_kind[GMT_K_SEGMENT_FREE],
           in->by_kind[GMT_K_FREE_COMPLETED], in->pool_syncs, in->fence_waits,
           in->by_kind[GMT_K_SAMPLE], in->by_kind[GMT_K_OOM]);
    if (in->fw || (h->features & GMT_FEAT_FW_BLOCKS))
        printf(",\"framework\":{\"name\":\"pytorch\",\"blocks\":%" PRIu64 ",\"ooms\":%" PRIu64
               ",\"frees\":%" PRIu64 ",\"free_completed\":%" PRIu64 ",\"segments\":%" PRIu64
               ",\"segment_frees\":%" PRIu64 ",\"maps\":%" PRIu64 ",\"unmaps\":%" PRIu64
               ",\"block_sizes\":%" PRIu64 ",\"backing_allocations\":%" PRIu64
               ",\"backing_failed\":%" PRIu64 "}",
               in->fw_blocks, in->fw_ooms, in->fw_frees, in->by_kind[GMT_K_FREE_COMPLETED],
               in->fw_actions[GMT_FWX_SEGMENT_ALLOC], in->fw_actions[GMT_FWX_SEGMENT_FREE],
               in->fw_actions[GMT_FWX_SEGMENT_MAP], in->fw_actions[GMT_FWX_SEGMENT_UNMAP],
               in->fw_actions[GMT_FWX_BLOCK_SIZE], in->fw_backing, in->fw_backing_failed);
    else
        printf(",\"framework\":null");
    printf(",\"failed_calls\":%" PRIu64 "}", in->failed_calls);
}

static void json(const char *path, const struct gmt_reader *r,
                 const struct info *in)
{
    const struct gmt_defs *d = &in->defs_tab;
    json_header(path, r, in);
    printf(",\"devices\":[");
    for (size_t i = 0; i < d->ndevices; i++) {
        const struct gmt_device_def *dv = &d->devices[i];
        printf("%s{\"ordinal\":%u,\"name\":", i ? "," : "", dv->ordinal);
        gmt_json_str(stdout, dv->name);
        printf(",\"total_bytes\":%" PRIu64 "}", dv->total_mem);
    }
    printf("],\"threads\":%zu,\"records\":%" PRIu64 ",\"events\":%" PRIu64
           ",\"definitions\":%" PRIu64 ",\"stacks\":%zu,\"modules\":%zu"
           ",\"python_code_objects\":%zu",
           d->nthreads, in->records, in->events, in->defs, d->nstacks,
           d->nmodules, d->npycodes);
    printf(",\"notes\":[");
    for (size_t i = 0; i < d->nnotes_kept; i++) {
        printf("%s", i ? "," : "");
        gmt_json_str(stdout, d->notes[i]);
    }
    printf("]");
    json_counts(gmt_reader_header(r), in);
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, NULL, OPT_JSON},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_args args = {.options = opts, .usage = usage, .only_own = true};
    struct gmt_common c;
    gmt_common_init(&c);
    int parsed = gmt_args_parse(argc, argv, &args, &c, NULL);
    if (parsed != GMT_PARSED)
        return parsed;
    bool as_json = c.json;
    if (optind >= argc)
        return gmt_usage_error(argv[0], "no trace given");
    int rc = EXIT_OK;
    if (as_json)
        printf("[");
    for (int i = optind; i < argc; i++) {
        struct info *in = calloc(1, sizeof *in);
        struct gmt_reader *r = NULL;
        if (in == NULL || scan(argv[i], &r, in) != 0) {
            rc = EXIT_ERROR;
        } else {
            if (gmt_reader_cut(r))
                gmt_warnf("%s: the process ended without closing the trace "
                          "(killed or crashed?); it is read up to its last "
                          "complete event", argv[i]);
            char damage[640];
            if (gmt_damage(r, &in->defs_tab, damage, sizeof damage))
                gmt_warnf("%s: damaged trace, read where intact: %s", argv[i], damage);
            if (gmt_lost(gmt_reader_header(r), damage, sizeof damage))
                gmt_warnf("%s: incomplete trace: %s", argv[i], damage);
            if (as_json) {
                if (i > optind)
                    printf(",");
                json(argv[i], r, in);
            } else {
                if (i > optind)
                    printf("\n");
                text(argv[i], r, in);
            }
        }
        gmt_reader_close(r);
        if (in)
            gmt_defs_free(&in->defs_tab);
        free(in);
    }
    if (as_json)
        printf("]\n");
    return gmt_finish_output(rc);
}
