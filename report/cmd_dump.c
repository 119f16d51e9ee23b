/* cmd_dump.c - `gpumemreport dump`: every record, in order, readable.
 *
 * One line per record: sequence number, time since the trace started,
 * thread, device, what happened. Definitions are printed where they occur;
 * stack frames as module+offset (no symbolization here: dump shows what
 * the file says).
 *
 * PyTorch's caching allocator's records have fixed token lists, which
 * tests parse (docs/trace-format.md has the fields):
 *   alloc          torch_block ptr=0x.. size=REQ block=BYTES pool=ID stream=S stack=ID
 *   free_requested torch_block ptr=0x.. stack=ID
 *   fw_segment     action=alloc|free|map|unmap ptr=0x.. size=N stream=S pool=ID stack=ID
 *   fw_block_size  ptr=0x.. size=N
 * (a failed block: class `oom`, the same tokens, then the error). Streams
 * print as everywhere in dump: legacy, per-thread or 0x...; pools as a
 * decimal number. The device column of a fw_ record is its device. A
 * CUDA allocation under PyTorch's segments ends with the token fw_backing.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s dump [--limit N] [--no-stacks] [--json] TRACE\n\n"
               "Print every record of a trace in order, one per line.\n\n"
               "  --limit N     stop after N records\n"
               "  --no-stacks   don't print the frames of stack definitions\n"
               "  --json        one object per record: its fields, and its line as\n"
               "                \"text\" (docs/report-json.md)\n",
            gmt_prog);
}

/* Where a record's text goes: stdout, or with --json a buffer that
 * becomes the record's "text". */
static FILE *out;

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void stream_str(char *buf, size_t n, uint64_t s)
{
    if (s == GMT_STREAM_LEGACY)
        snprintf(buf, n, "legacy");
    else if (s == GMT_STREAM_PER_THREAD)
        snprintf(buf, n, "per-thread");
    else
        snprintf(buf, n, "0x%" PRIx64, s);
}

/* A module's definition: its range, where it was loaded, its build id. */
static void print_module_def(const struct gmt_defs *d)
{
    const struct gmt_module_def *m = &d->modules[d->nmodules - 1];
    fprintf(out, "module         id=%u 0x%" PRIx64 "-0x%" PRIx64 " base=0x%" PRIx64
           " %s build-id=", m->id, m->lo, m->hi, m->base, m->path);
    for (uint32_t i = 0; i < m->build_id_len; i++)
        fprintf(out, "%02x", m->build_id[i]);
}

/* A stack's definition, and with stacks its frames one per line under it:
 * native frames as module+offset, then the Python ones. */
static void print_stack_def(const struct gmt_rec *rec, const struct gmt_defs *d,
                            bool stacks)
{
    /* the id is the payload's first varint */
    uint64_t id = 0;
    gmt_get_varint(rec->payload, rec->payload + rec->len, &id);
    struct gmt_stack_def def;
    const struct gmt_stack_def *st =
        id <= UINT32_MAX && gmt_defs_stack(d, (uint32_t)id, &def) ? &def : NULL;
    fprintf(out, "stack          id=%" PRIu64 " frames=%u", id, st ? st->n : 0);
    if (st && st->npy)
        fprintf(out, " python=%u", st->npy);
    for (uint32_t i = 0; st && stacks && i < st->n; i++) {
        const struct gmt_frame *fr = &st->frames[i];
        if (fr->module >= 0) {
            const struct gmt_module_def *m = &d->modules[fr->module];
            fprintf(out, "\n                                   #%-2u %s+0x%" PRIx64,
                   i, base_name(m->path), fr->ip - m->base);
        } else {
            fprintf(out, "\n                                   #%-2u 0x%" PRIx64, i,
                   fr->ip);
        }
    }
    for (uint32_t i = 0; st && stacks && i < st->npy; i++)
        fprintf(out, "\n                                   py%-2u code=%u offset=%" PRId64,
               i, st->py[i].code, st->py[i].offset);
}

/* A record of PyTorch's segments (alloc, free, map, unmap) or of a block's
 * size; an action from a newer minor version prints as fw_event. */
static void print_fw_ext(const struct gmt_rec *rec)
{
    static const char *const actions[] = {
        [GMT_FWX_SEGMENT_ALLOC] = "alloc",
        [GMT_FWX_SEGMENT_FREE] = "free",
        [GMT_FWX_SEGMENT_MAP] = "map",
        [GMT_FWX_SEGMENT_UNMAP] = "unmap",
    };
    struct gmt_fw f;
    char s[32];
    if (gmt_fw_decode(rec, &f) != 0)
        return;
    stream_str(s, sizeof s, f.stream);
    if (f.action == GMT_FWX_BLOCK_SIZE)
        fprintf(out, "fw_block_size  ptr=0x%" PRIx64 " size=%" PRIu64, f.addr, f.size);
    else if (f.action < sizeof actions / sizeof *actions)
        fprintf(out, "fw_segment     action=%s ptr=0x%" PRIx64 " size=%" PRIu64
               " stream=%s pool=%" PRIu64 " stack=%u", actions[f.action], f.addr,
               f.size, s, f.pool, f.stack);
    else /* from a newer minor version */
        fprintf(out, "fw_event       action=%u ptr=0x%" PRIx64 " size=%" PRIu64, f.action,
               f.addr, f.size);
}

/* The extension records that are not definitions but events or samples
 * (VMM calls, pool and process memory, PyTorch's segments), and any kind
 * this build does not know. */
static void print_ext_event(const struct gmt_rec *rec)
{
    switch (rec->ext) {
    case GMT_X_VMM: {
        struct gmt_vmm v;
        if (gmt_vmm_decode(rec, &v) == 0)
            fprintf(out, "%-14s addr=0x%" PRIx64 " size=%" PRIu64 " offset=%" PRIu64
                   " handle=0x%" PRIx64 " device=%u result=%u stack=%u",
                   gmt_api_name(v.api), v.addr, v.size, v.offset, v.handle,
                   v.device, v.result, v.stack);
        break;
    }
    case GMT_X_MEMPOOL: {
        struct gmt_mempool m;
        if (gmt_mempool_decode(rec, &m) == 0)
            fprintf(out, "mempool        pool=0x%" PRIx64 " device=%u reserved=%" PRIu64
                   " reserved_high=%" PRIu64 " used=%" PRIu64 " used_high=%" PRIu64,
                   m.pool, m.device, m.reserved, m.reserved_high, m.used, m.used_high);
        break;
    }
    case GMT_X_PROC_MEM: {
        struct gmt_proc_mem m;
        if (gmt_proc_mem_decode(rec, &m) == 0)
            fprintf(out, "proc_mem       device=%u used=%" PRIu64, m.device, m.used);
        break;
    }
    case GMT_X_FW:
        print_fw_ext(rec);
        break;
    default:
        fprintf(out, "definition     ext-kind=%u bytes=%zu", rec->ext, rec->len);
        break;
    }
}

/* An extension record. A definition (thread, process, module, stack,
 * Python code, string, note, device, symbol) prints from the defs that
 * now hold it; the other kinds through print_ext_event. */
static void print_def(const struct gmt_rec *rec, const struct gmt_defs *d,
                      bool stacks)
{
    switch (rec->ext) {
    case GMT_X_THREAD: {
        const struct gmt_thread_def *t = gmt_defs_thread(d, rec->thread);
        fprintf(out, "thread         index=%u tid=%" PRIu64 " name=\"%s\"", rec->thread,
               t ? t->tid : 0, t ? t->name : "");
        break;
    }
    case GMT_X_PROCESS:
        fprintf(out, "process        pid=%" PRIu64 " ppid=%" PRIu64 " cmd=\"%s\"",
               d->process.pid, d->process.ppid,
               d->process.cmdline ? d->process.cmdline : "");
        break;
    case GMT_X_MODULE:
        print_module_def(d);
        break;
    case GMT_X_STACK:
        print_stack_def(rec, d, stacks);
        break;
    case GMT_X_PYCODE: {
        uint64_t id = 0;
        gmt_get_varint(rec->payload, rec->payload + rec->len, &id);
        const struct gmt_pycode_def *pc = gmt_defs_pycode(d, (uint32_t)id);
        if (pc)
            fprintf(out, "pycode         id=%u %s (%s:%d) table=%u", pc->id, pc->name,
                   pc->file, pc->firstlineno, pc->table_len);
        break;
    }
    case GMT_X_STRING: {
        uint64_t id = 0;
        gmt_get_varint(rec->payload, rec->payload + rec->len, &id);
        const char *text = gmt_defs_string(d, id);
        fprintf(out, "string         id=%" PRIu64 " \"%s\"", id, text ? text : "");
        break;
    }
    case GMT_X_NOTE:
        if (d->nnotes_kept)
            fprintf(out, "note           %s", d->notes[d->nnotes_kept - 1]);
        break;
    case GMT_X_DEVICE: {
        uint64_t ord = 0;
        gmt_get_varint(rec->payload, rec->payload + rec->len, &ord);
        const struct gmt_device_def *dv = gmt_defs_device(d, (uint32_t)ord);
        if (dv)
            fprintf(out, "device         ordinal=%u name=\"%s\" total=%" PRIu64,
                   dv->ordinal, dv->name, dv->total_mem);
        break;
    }
    case GMT_X_SYMBOL: {
        uint64_t ip = 0;
        gmt_get_varint(rec->payload, rec->payload + rec->len, &ip);
        const struct gmt_symbol_def *sy = gmt_defs_symbol(d, ip);
        fprintf(out, "symbol         ip=0x%" PRIx64 " %s", ip, sy ? sy->name : "?");
        break;
    }
    default:
        print_ext_event(rec);
        break;
    }
}

/* A block of PyTorch's caching allocator handed out or freed: every token
 * always, stack included. */
static void print_fw_block(const struct gmt_rec *rec)
{
    char s[32];
    fprintf(out, "%s ptr=0x%" PRIx64, gmt_api_name(rec->api), rec->addr);
    if (rec->kind == GMT_K_ALLOC) {
        stream_str(s, sizeof s, rec->stream);
        fprintf(out, " size=%" PRIu64 " block=%" PRIu64 " pool=%" PRIu64 " stream=%s",
               rec->size, rec->size + rec->size2, rec->flags, s);
    }
    fprintf(out, " stack=%u", rec->stack);
}

/* A call that allocates or frees (the fields but stack and result), with
 * its stream where the call is stream-ordered. */
static void print_alloc_free(const struct gmt_rec *rec, const char *api, const char *ptds)
{
    char s[32];
    if (rec->kind == GMT_K_ALLOC) {
        fprintf(out, "%s%s ptr=0x%" PRIx64 " size=%" PRIu64, api, ptds, rec->addr,
               rec->size);
        if (rec->size2)
            fprintf(out, " block=%" PRIu64, rec->size + rec->size2);
        if (rec->flags)
            fprintf(out, " flags=0x%" PRIx64, rec->flags);
        if (gmt_is_fw_backing(rec))
            fprintf(out, " fw_backing");
        if (rec->api == GMT_API_MALLOC_ASYNC ||
            (rec->api & ~GMT_API_PTDS) == GMT_API_MALLOC_ASYNC ||
            (rec->api & ~GMT_API_PTDS) == GMT_API_MALLOC_FROM_POOL_ASYNC) {
            stream_str(s, sizeof s, rec->stream);
            fprintf(out, " stream=%s", s);
        }
    } else {
        fprintf(out, "%s%s ptr=0x%" PRIx64, api, ptds, rec->addr);
        if ((rec->api & ~GMT_API_PTDS) == GMT_API_FREE_ASYNC) {
            stream_str(s, sizeof s, rec->stream);
            fprintf(out, " stream=%s", s);
        }
    }
}

/* A copy, a set, a synchronization, a stream made or destroyed: the
 * fields but stack and result. */
static void print_stream_call(const struct gmt_rec *rec, const char *api, const char *ptds)
{
    char s[32];
    switch (rec->kind) {
    case GMT_K_MEMCPY:
        stream_str(s, sizeof s, rec->stream);
        fprintf(out, "%s%s %s%s%s dst=0x%" PRIx64 " src=0x%" PRIx64 " bytes=%" PRIu64
               " stream=%s", api, ptds, gmt_dir_name(rec->dir),
               *gmt_hostmem_name(rec->dir) ? " " : "", gmt_hostmem_name(rec->dir),
               rec->addr, rec->addr2, rec->size, s);
        break;
    case GMT_K_MEMSET:
        stream_str(s, sizeof s, rec->stream);
        fprintf(out, "%s%s ptr=0x%" PRIx64 " bytes=%" PRIu64 " value=%" PRIu64
               " stream=%s", api, ptds, rec->addr, rec->size, rec->value, s);
        break;
    case GMT_K_SYNC:
        fprintf(out, "%s%s", api, ptds);
        if ((rec->api & ~GMT_API_PTDS) == GMT_API_STREAM_SYNCHRONIZE) {
            stream_str(s, sizeof s, rec->stream);
            fprintf(out, " stream=%s", s);
        }
        break;
    case GMT_K_STREAM_CREATE:
        fprintf(out, "%s stream=0x%" PRIx64 " flags=%" PRIu64 " priority=%" PRId64, api,
               rec->addr, rec->flags, rec->priority);
        break;
    case GMT_K_STREAM_DESTROY:
        fprintf(out, "stream=0x%" PRIx64, rec->addr);
        break;
    }
}

/* A marker: mark, push or pop, and its name. */
static void print_marker(const struct gmt_rec *rec, const struct gmt_defs *d)
{
    fprintf(out, "%s", rec->api == GMT_MARK ? "mark" : rec->api == GMT_MARK_PUSH ? "push"
                 : rec->api == GMT_MARK_POP ? "pop" : "type=?");
    if (rec->value) {
        const char *name = gmt_defs_string(d, rec->value);
        fprintf(out, " \"%s\"", name ? name : "(undefined)");
    }
}

/* An event record: its class, its fields, then its stack and error. */
static void print_event(const struct gmt_rec *rec, const struct gmt_defs *d)
{
    const char *api = gmt_api_name(rec->api);
    const char *ptds = (rec->api & GMT_API_PTDS) ? "_ptds" : "";
    unsigned base = rec->api & ~GMT_API_PTDS;
    fprintf(out, "%-14s ", gmt_event_class(rec));
    if ((rec->kind == GMT_K_ALLOC && base == GMT_API_FW_ALLOC) ||
        (rec->kind == GMT_K_FREE && base == GMT_API_FW_FREE)) {
        print_fw_block(rec);
        if (rec->result)
            fprintf(out, " -> %s (%u)", gmt_cuda_error_name(rec->result), rec->result);
        return;
    }
    switch (rec->kind) {
    case GMT_K_ALLOC:
    case GMT_K_FREE:
        print_alloc_free(rec, api, ptds);
        break;
    case GMT_K_FREE_COMPLETED:
    case GMT_K_SEGMENT_FREE:
        fprintf(out, "ptr=0x%" PRIx64 " size=%" PRIu64, rec->addr, rec->size);
        break;
    case GMT_K_SEGMENT_ALLOC:
        fprintf(out, "ptr=0x%" PRIx64 " size=%" PRIu64, rec->addr, rec->size);
        break;
    case GMT_K_MEMCPY:
    case GMT_K_MEMSET:
    case GMT_K_SYNC:
    case GMT_K_STREAM_CREATE:
    case GMT_K_STREAM_DESTROY:
        print_stream_call(rec, api, ptds);
        break;
    case GMT_K_SET_DEVICE:
        fprintf(out, "device=%" PRIu64, rec->value);
        break;
    case GMT_K_MEMGETINFO:
        fprintf(out, "free=%" PRIu64 " total=%" PRIu64, rec->size, rec->size2);
        break;
    case GMT_K_SAMPLE:
        fprintf(out, "reserved=%" PRIu64 " allocated=%" PRIu64 " largest_free=%" PRIu64
               " free_blocks=%" PRIu64 " device_used=%" PRIu64 " host_rss=%" PRIu64,
               rec->v[0], rec->v[1], rec->v[2], rec->v[3], rec->v[4], rec->v[5]);
        break;
    case GMT_K_OOM:
        fprintf(out, "size=%" PRIu64 " device_free=%" PRIu64 " device_total=%" PRIu64
               " reserved=%" PRIu64 " allocated=%" PRIu64 " largest_free=%" PRIu64,
               rec->size, rec->v[0], rec->v[1], rec->v[2], rec->v[3], rec->v[4]);
        break;
    case GMT_K_MARKER:
        print_marker(rec, d);
        break;
    }
    if (rec->stack)
        fprintf(out, " stack=%u", rec->stack);
    if (rec->result)
        fprintf(out, " -> %s (%u)", gmt_cuda_error_name(rec->result), rec->result);
}

/* A record as JSON: where and when, what it is, its fields, and its line
 * as the text dump prints it (made in *buf through out). */
static void json_record(const struct gmt_rec *rec, uint64_t start, int dev, bool comma,
                        FILE *text, char **buf, size_t *len)
{
    fflush(text);
    long used = ftell(text);
    if (used >= 0 && (size_t)used <= *len)
        (*buf)[used] = '\0';
    printf("%s{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"thread\":%u,\"device\":",
           comma ? "," : "", rec->seq, rec->time >= start ? rec->time - start : 0,
           rec->thread);
    dev >= 0 ? printf("%d", dev) : printf("null");
    if (rec->kind == GMT_K_EXT) {
        printf(",\"definition\":%u", rec->ext);
    } else {
        printf(",\"class\":");
        gmt_json_str(stdout, gmt_event_class(rec));
        printf(",\"api\":");
        gmt_json_str(stdout, gmt_api_name(rec->api));
        printf(",\"ptds\":%s,\"addr\":%" PRIu64 ",\"addr2\":%" PRIu64 ",\"size\":%" PRIu64
               ",\"size2\":%" PRIu64 ",\"stream\":%" PRIu64 ",\"value\":%" PRIu64
               ",\"flags\":%" PRIu64 ",\"result\":%u,\"stack\":%u",
               rec->api & GMT_API_PTDS ? "true" : "false", rec->addr, rec->addr2, rec->size,
               rec->size2, rec->stream, rec->value, rec->flags, rec->result, rec->stack);
        if (rec->kind == GMT_K_SAMPLE || rec->kind == GMT_K_OOM) {
            printf(",\"v\":[");
            for (int i = 0; i < 6; i++)
                printf("%s%" PRIu64, i ? "," : "", rec->v[i]);
            printf("]");
        }
    }
    printf(",\"text\":");
    gmt_json_str(stdout, *buf ? *buf : "");
    printf("}");
}

enum { OPT_LIMIT = OPT_CMD_BASE, OPT_NO_STACKS };

struct dump_opts {
    uint64_t limit;
    bool stacks;
};

static int option(int opt, const char *arg, void *ctx)
{
    struct dump_opts *o = ctx;
    char *end;
    switch (opt) {
    case OPT_LIMIT:
        o->limit = strtoull(arg, &end, 10);
        if (*arg == '\0' || *end != '\0') {
            gmt_value_error("--limit needs a number, not '%s'", arg);
            return -1;
        }
        return 1;
    case OPT_NO_STACKS:
        o->stacks = false;
        return 1;
    default:
        return 0;
    }
}

/* The --json document's opening, or the text's column heads. */
static void print_head(const char *path, bool json)
{
    if (json) {
        printf("{\"schema\":\"gpumemtrace.dump/1\",\"trace\":");
        gmt_json_str(stdout, path);
        printf(",\"records\":[");
    } else {
        printf("#%-9s %12s %4s %3s  %s\n", "seq", "time(ms)", "thr", "dev", "record");
    }
}

/* One record after its seq, time and thread: the device column (text
 * only) and what the record says; a definition is added to d first, so
 * that it prints as the defs hold it. Returns the record's device, -1
 * where it has none. */
static int print_record(const struct gmt_rec *rec, struct gmt_defs *d, bool stacks,
                        bool json)
{
    int dev = -1;
    if (rec->kind == GMT_K_EXT) {
        size_t malformed = d->malformed;
        gmt_defs_add(d, rec);
        struct gmt_fw f;
        if (rec->ext == GMT_X_FW && gmt_fw_decode(rec, &f) == 0)
            dev = (int)f.device;
        if (!json)
            dev >= 0 ? printf("%3d  ", dev) : printf("%3s  ", "-");
        if (d->malformed != malformed) /* skipped: nothing to show */
            fprintf(out, "malformed      extension %u, %zu bytes: skipped", rec->ext,
                    rec->len);
        else
            print_def(rec, d, stacks);
    } else {
        dev = (int)rec->device;
        if (!json)
            printf("%3u  ", rec->device);
        print_event(rec, d);
    }
    return dev;
}

/* After the last record printed: the reader's error where it stopped on
 * one (at_end: not stopped by --limit), else the warnings about a trace
 * cut short, damaged or incomplete. Returns the exit status. */
static int end_of_trace(struct gmt_reader *r, const struct gmt_defs *d, const char *path,
                        int got, bool at_end)
{
    int rc = EXIT_OK;
    if (at_end && got < 0) {
        gmt_errorf("%s: %s", path, gmt_reader_error(r));
        rc = EXIT_ERROR;
    }
    if (rc == EXIT_OK && gmt_reader_cut(r))
        gmt_warnf("%s: the process ended without closing the trace (killed or "
                  "crashed?); read up to its last complete event", path);
    char damage[640];
    if (rc == EXIT_OK && got >= 0 && gmt_damage(r, d, damage, sizeof damage))
        gmt_warnf("%s: damaged trace, read where intact: %s", path, damage);
    if (rc == EXIT_OK && gmt_lost(gmt_reader_header(r), damage, sizeof damage))
        gmt_warnf("%s: incomplete trace: %s", path, damage);
    return rc;
}

int cmd_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        {"limit", required_argument, NULL, OPT_LIMIT},
        {"no-stacks", no_argument, NULL, OPT_NO_STACKS},
        {"json", no_argument, NULL, OPT_JSON},
        {NULL, 0, NULL, 0},
    };
    static const struct gmt_args args = {
        .options = opts, .option = option, .usage = usage, .only_own = true};
    struct dump_opts o = {UINT64_MAX, true};
    struct gmt_common c;
    gmt_common_init(&c);
    int parsed = gmt_args_parse(argc, argv, &args, &c, &o);
    if (parsed != GMT_PARSED)
        return parsed;
    uint64_t limit = o.limit;
    bool stacks = o.stacks, json = c.json;
    if (optind != argc - 1)
        return gmt_usage_error(argv[0], optind >= argc ? "no trace given"
                                                       : "dump reads one trace");
    const char *path = argv[optind];
    char err[512];
    struct gmt_reader *r = gmt_reader_open(path, err, sizeof err);
    if (r == NULL) {
        gmt_errorf("%s: %s", path, err);
        return EXIT_ERROR;
    }
    struct gmt_defs d = {0};
    struct gmt_rec rec;
    uint64_t start = gmt_reader_header(r)->start_monotonic_ns, n = 0;
    int got = 0;
    /* --json: each record's line is made in buf, then written as "text" */
    char *buf = NULL;
    size_t buflen = 0;
    out = json ? open_memstream(&buf, &buflen) : stdout;
    if (out == NULL) {
        gmt_errorf("out of memory");
        gmt_reader_close(r);
        return EXIT_ERROR;
    }
    print_head(path, json);
    while (n < limit && (got = gmt_reader_next(r, &rec)) == 1) {
        n++;
        double ms = rec.time >= start ? (double)(rec.time - start) / 1e6 : 0.0;
        if (json)
            rewind(out);
        else
            printf("%-10" PRIu64 " %12.6f %4u ", rec.seq, ms, rec.thread);
        int dev = print_record(&rec, &d, stacks, json);
        if (json)
            json_record(&rec, start, dev, n > 1, out, &buf, &buflen);
        else
            printf("\n");
    }
    if (json) {
        printf("]}\n");
        fclose(out);
        free(buf);
    }
    int rc = end_of_trace(r, &d, path, got, n < limit);
    gmt_defs_free(&d);
    gmt_reader_close(r);
    return gmt_finish_output(rc);
}
