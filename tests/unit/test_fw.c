/* test_fw.c - PyTorch's caching allocator's records (format 1.1) through
 * the reader, the replay and the pool view.
 *
 * The recorder writes these records only under a real PyTorch, so this
 * test writes them itself: a small trace writer with the recorder's
 * encoding (one thread, 4 KiB chunks, the registers of gmt_format.h)
 * builds traces of known content, and the checks compare what the replay
 * and the pool view make of them with figures worked out by hand - the
 * figures PyTorch's own counters would show for the same events.
 *
 *   test_fw             run the checks
 *   test_fw --write DIR also write the traces to DIR (fw_basic.gmt,
 *                       fw_oom.gmt, fw_expandable.gmt) for the end-to-end
 *                       tests of the commands (tests/e2e/test_report_fw.py)
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "defs.h"
#include "poolview.h"
#include "replay.h"

#define MiB (1ull << 20)
#define CH GMT_CHUNK_SIZE_MIN /* small: the traces double as fuzz seeds */
#define T0 1000000000ull

/* ---- a trace writer -------------------------------------------------------- */

struct tw {
    uint8_t *data;      /* the chunks written so far */
    size_t len;
    uint8_t chunk[CH];
    uint32_t used, ordinal;
    uint64_t first_seq, first_time, r_seq, r_time, r_a, r_b, r_stream;
    uint32_t r_dev;
    uint64_t seq, time, features;
};

static void tw_init(struct tw *w, uint64_t features)
{
    memset(w, 0, sizeof *w);
    w->used = GMT_CHUNK_HEADER_SIZE;
    w->time = T0;
    w->features = features;
}

static void tw_flush(struct tw *w)
{
    struct gmt_chunk_header h = {GMT_CHUNK_MAGIC, w->used, 1, w->ordinal++,
                                 w->first_seq, w->first_time};
    memcpy(w->chunk, &h, sizeof h);
    memset(w->chunk + w->used, 0, CH - w->used);
    w->data = realloc(w->data, w->len + CH);
    memcpy(w->data + w->len, w->chunk, CH);
    w->len += CH;
    /* a new chunk starts with every register at 0 */
    w->used = GMT_CHUNK_HEADER_SIZE;
    w->first_seq = 0;
    w->r_a = w->r_b = w->r_stream = 0;
    w->r_dev = 0;
}

/* Start a record of `kind` on `dev` and `stream`; the body goes at the
 * returned pointer, then tw_end. */
static uint8_t *tw_begin(struct tw *w, unsigned kind, uint32_t dev, uint64_t stream,
                         uint32_t result)
{
    if (CH - w->used < 128) /* the longest record here is under 100 bytes */
        tw_flush(w);
    uint64_t seq = ++w->seq;
    w->time += 1000;
    if (w->first_seq == 0) {
        w->first_seq = w->r_seq = seq;
        w->first_time = w->r_time = w->time;
    }
    uint8_t tag = (uint8_t)kind;
    tag |= dev != w->r_dev ? GMT_TAG_DEVICE : 0;
    tag |= stream != w->r_stream ? GMT_TAG_STREAM : 0;
    tag |= result ? GMT_TAG_ERR : 0;
    uint8_t *p = w->chunk + w->used;
    *p++ = tag;
    p = gmt_put_varint(p, seq - w->r_seq);
    p = gmt_put_varint(p, w->time - w->r_time);
    w->r_seq = seq;
    w->r_time = w->time;
    if (tag & GMT_TAG_DEVICE)
        p = gmt_put_varint(p, w->r_dev = dev);
    if (tag & GMT_TAG_STREAM)
        p = gmt_put_varint(p, w->r_stream = stream);
    if (tag & GMT_TAG_ERR)
        p = gmt_put_varint(p, result);
    return p;
}

static void tw_end(struct tw *w, uint8_t *p)
{
    w->used = (uint32_t)(p - w->chunk);
}

/* A core record: its body from gmt_format.h's description of its kind.
 * Returns the record's sequence number. */
static uint64_t tw_core(struct tw *w, uint32_t dev, uint64_t stream, uint32_t result,
                        const struct gmt_body *b)
{
    uint8_t *p = tw_begin(w, b->kind, dev, stream, result);
    tw_end(w, gmt_encode_body(p, b, &w->r_a, &w->r_b));
    return w->seq;
}

static uint64_t tw_alloc(struct tw *w, uint32_t dev, uint64_t stream, unsigned api,
                         uint64_t addr, uint64_t size, uint64_t extra, uint64_t flags,
                         uint32_t stack, uint32_t result)
{
    const struct gmt_body b = {.kind = GMT_K_ALLOC, .api = (uint8_t)api, .addr = addr,
                               .size = size, .size2 = extra, .flags = flags,
                               .stack = stack};
    return tw_core(w, dev, stream, result, &b);
}

static uint64_t tw_free(struct tw *w, uint32_t dev, unsigned api, uint64_t addr,
                        uint32_t stack)
{
    const struct gmt_body b = {.kind = GMT_K_FREE, .api = (uint8_t)api, .addr = addr,
                               .stack = stack};
    return tw_core(w, dev, w->r_stream, 0, &b);
}

static void tw_completed(struct tw *w, uint32_t dev, uint64_t addr, uint64_t size)
{
    const struct gmt_body b = {.kind = GMT_K_FREE_COMPLETED, .addr = addr, .size = size};
    tw_core(w, dev, w->r_stream, 0, &b);
}

static void tw_oom_state(struct tw *w, uint32_t dev, uint64_t size, const uint64_t v[5])
{
    struct gmt_body b = {.kind = GMT_K_OOM, .size = size};
    memcpy(b.v, v, 5 * sizeof *v);
    tw_core(w, dev, w->r_stream, 0, &b);
}

static uint64_t tw_ext(struct tw *w, unsigned ext, const uint8_t *payload, size_t len)
{
    uint8_t *p = tw_begin(w, GMT_K_EXT, w->r_dev, w->r_stream, 0);
    p = gmt_put_varint(p, ext);
    p = gmt_put_varint(p, len);
    memcpy(p, payload, len);
    tw_end(w, p + len);
    return w->seq;
}

static uint64_t tw_fw(struct tw *w, unsigned action, uint32_t dev, uint64_t addr,
                      uint64_t size, uint64_t stream, uint64_t pool, uint32_t stack)
{
    uint8_t pl[80], *p = pl;
    const uint64_t v[7] = {action, dev, addr, size, stream, pool, stack};
    for (int i = 0; i < 7; i++)
        p = gmt_put_varint(p, v[i]);
    return tw_ext(w, GMT_X_FW, pl, (size_t)(p - pl));
}

/* A stack of one frame, so that sites are told apart. */
static void tw_stack(struct tw *w, uint32_t id, uint64_t ip)
{
    uint8_t pl[32], *p = pl;
    p = gmt_put_varint(p, id);
    p = gmt_put_varint(p, 1);
    p = gmt_put_svarint(p, (int64_t)ip);
    tw_ext(w, GMT_X_STACK, pl, (size_t)(p - pl));
}

static void tw_start(struct tw *w)
{
    uint8_t pl[16] = {0};
    uint8_t *p = gmt_put_varint(pl, 4242);
    memcpy(p, "fwtest", 6);
    tw_ext(w, GMT_X_THREAD, pl, (size_t)(p - pl) + 6);
    for (uint32_t s = 1; s <= 6; s++)
        tw_stack(w, s, 0x401000 + 0x100 * s);
}

/* Write the file; the writer is done with after this. */
static void tw_save(struct tw *w, const char *path)
{
    if (w->used > GMT_CHUNK_HEADER_SIZE)
        tw_flush(w);
    static uint8_t header[GMT_HEADER_SIZE];
    memset(header, 0, sizeof header);
    struct gmt_file_header *h = (struct gmt_file_header *)header;
    memcpy(h->magic, GMT_MAGIC, 8);
    h->version_major = GMT_VERSION_MAJOR;
    h->version_minor = GMT_VERSION_MINOR;
    h->min_reader_major = 1;
    h->header_size = GMT_HEADER_SIZE;
    h->endian = GMT_ENDIAN_MARK;
    h->features = w->features;
    h->chunk_size = CH;
    h->flags = GMT_FLAG_CLOSED;
    h->session_id = 7;
    h->pid = 4242;
    h->ppid = 1;
    h->start_monotonic_ns = T0;
    h->end_monotonic_ns = w->time + 1000;
    h->data_end = GMT_HEADER_SIZE + w->len;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK(fwrite(header, sizeof header, 1, f) == 1);
        CHECK(w->len == 0 || fwrite(w->data, w->len, 1, f) == 1);
        CHECK(fclose(f) == 0);
    }
    free(w->data);
    w->data = NULL;
}

/* ---- the traces ---------------------------------------------------------- */

#define FW_FEATURES (GMT_FEAT_NATIVE_STACKS | GMT_FEAT_FW_BLOCKS)
#define S1 0x7f0000000000ull  /* a small segment, 2 MiB */
#define S2 0x7f0000200000ull  /* a large one, 20 MiB: its block unsplit */
#define S3 0x7f0001600000ull  /* a large one, 20 MiB: its block split */
#define U 0x7f1000000000ull   /* the program's own cudaMalloc */
#define BIG (19 * MiB + MiB / 2) /* 19.5 MiB */

/* Moments of the basic trace the pool view is checked at. */
struct moments {
    uint64_t all_live;   /* every block handed out, BLOCK_SIZE applied */
    uint64_t end;
};

/* What PyTorch does for: x = 4 bytes; y = 1000 bytes; z = 19.5 MiB - 100
 * (20 MiB segment kept whole: 0.5 MiB left is under its 1 MiB split
 * minimum, so BLOCK_SIZE says 20 MiB); w = 19.5 MiB in another segment,
 * split (no BLOCK_SIZE); the program's own 1 MiB cudaMalloc beside it.
 * Then x, z, w and the program's buffer are freed, z's segment given
 * back; y stays (live at exit), and so does the 2 MiB segment (cached). */
static struct moments write_basic(const char *path)
{
    struct tw w;
    struct moments m = {0};
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    /* x: the small pool's first segment, then its first block */
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, S1, 2 * MiB, 0, GMT_ALLOC_FW_BACKING, 1, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S1, 2 * MiB, 0, 0, 1);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S1, 4, 508, 0, 1, 0);
    /* y: after x in the same segment */
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S1 + 512, 1000, 24, 0, 2, 0);
    /* z: a large segment, the block unsplit */
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, S2, 20 * MiB, 0, GMT_ALLOC_FW_BACKING, 3, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S2, 20 * MiB, 0, 0, 3);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S2, BIG - 100, 100, 0, 3, 0);
    tw_fw(&w, GMT_FWX_BLOCK_SIZE, 0, S2, 20 * MiB, 0, 0, 0);
    /* w: another, split (a CUDA graph's private pool, on stream 0x55) */
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, S3, 20 * MiB, 0, GMT_ALLOC_FW_BACKING, 4, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S3, 20 * MiB, 0x55, 1ull << 32, 4);
    tw_alloc(&w, 0, 0x55, GMT_API_FW_ALLOC, S3, BIG, 0, 1ull << 32, 4, 0);
    /* the program's own */
    m.all_live = tw_alloc(&w, 0, 0, GMT_API_MALLOC, U, MiB, 0, 0, 5, 0);
    /* frees */
    tw_free(&w, 0, GMT_API_FW_FREE, S1, 1);
    tw_completed(&w, 0, S1, 4);
    tw_free(&w, 0, GMT_API_FW_FREE, S2, 3);
    tw_completed(&w, 0, S2, BIG - 100);
    tw_free(&w, 0, GMT_API_FW_FREE, S3, 4);
    tw_completed(&w, 0, S3, BIG);
    tw_free(&w, 0, GMT_API_FREE, U, 5);
    /* empty_cache: z's segment back to CUDA */
    tw_fw(&w, GMT_FWX_SEGMENT_FREE, 0, S2, 20 * MiB, 0, 0, 0);
    m.end = tw_free(&w, 0, GMT_API_FREE, S2, 0);
    tw_save(&w, path);
    return m;
}

/* Out of memory: PyTorch's cudaMalloc fails (it frees its cache and
 * tries again: no out-of-memory of the program), then PyTorch raises;
 * then the program's own cudaMalloc fails too, on device 1. */
static void write_oom(const char *path)
{
    struct tw w;
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, S1, 2 * MiB, 0, GMT_ALLOC_FW_BACKING, 1, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S1, 2 * MiB, 0, 0, 1);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S1, 512, 0, 0, 1, 0);
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, 0, 40ull << 30, 0, GMT_ALLOC_FW_BACKING, 2, 2);
    static const uint64_t st[5] = {1 * MiB, 0, 2 * MiB, 512, 0};
    tw_oom_state(&w, 0, 40ull << 30, st);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, 0, 40ull << 30, 0, 0, 2, 2);
    tw_alloc(&w, 1, 0, GMT_API_MALLOC, 0, 50ull << 30, 0, 0, 3, 2);
    tw_save(&w, path);
}

/* Expandable segments: a 20 MiB piece mapped, a block in it, another 20
 * MiB mapped right after (one segment of 40 MiB), a block across the two;
 * then the first block freed and the second piece unmapped after the
 * second block is freed. The memory is cuMemCreate handles (backing). */
#define V 0x7f2000000000ull
#define H1 0x1001ull
#define H2 0x1002ull
static void write_expandable(const char *path)
{
    struct tw w;
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    tw_alloc(&w, 0, 0, GMT_API_CU_MEM_CREATE, H1, 20 * MiB, 0, GMT_ALLOC_FW_BACKING, 1, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_MAP, 0, V, 20 * MiB, 0, 0, 1);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, V, 10 * MiB, 0, 0, 1, 0);
    tw_alloc(&w, 0, 0, GMT_API_CU_MEM_CREATE, H2, 20 * MiB, 0, GMT_ALLOC_FW_BACKING, 2, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_MAP, 0, V + 20 * MiB, 20 * MiB, 0, 0, 2);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, V + 10 * MiB, 25 * MiB, 0, 0, 2, 0);
    tw_free(&w, 0, GMT_API_FW_FREE, V + 10 * MiB, 2);
    tw_completed(&w, 0, V + 10 * MiB, 25 * MiB);
    tw_fw(&w, GMT_FWX_SEGMENT_UNMAP, 0, V + 20 * MiB, 20 * MiB, 0, 0, 0);
    tw_free(&w, 0, GMT_API_CU_MEM_RELEASE, H2, 0);
    tw_save(&w, path);
}

/* ---- checks -------------------------------------------------------------- */

static int replay_file(const char *path, struct replay *r, char *err, size_t n)
{
    struct replay_opts o = {.growth = true};
    return replay_trace(path, r, &o, err, n);
}

/* The pool view after every record up to `seq` (all: UINT64_MAX). */
static bool view_at(const char *path, uint64_t seq, struct poolview *v)
{
    char err[256];
    struct gmt_reader *rd = gmt_reader_open(path, err, sizeof err);
    if (rd == NULL)
        return false;
    pv_init(v);
    struct gmt_rec rec;
    while (gmt_reader_next(rd, &rec) == 1 && rec.seq <= seq)
        pv_apply(v, &rec);
    gmt_reader_close(rd);
    return true;
}

static const struct site *site_by_stack(const struct replay *r, uint32_t stack)
{
    for (size_t i = 0; i < r->nsites; i++)
        if (r->sites[i].stack == stack)
            return &r->sites[i];
    return NULL;
}

static void check_basic(const char *path, struct moments m)
{
    struct replay r;
    char err[256] = "";
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    const struct device_state *d = &r.dev[0];
    CHECK(r.fw);
    /* torch.cuda.max_memory_allocated: the blocks, z at its real size */
    CHECK(d->peak_fw_allocated == 512 + 1024 + 20 * MiB + BIG);
    /* torch.cuda.max_memory_reserved: three segments */
    CHECK(d->peak_fw_reserved == 42 * MiB);
    CHECK(d->peak_fw_requested == 4 + 1000 + (BIG - 100) + BIG);
    CHECK(d->fw_allocs == 4 && d->fw_frees == 3 && d->fw_free_completed == 3);
    CHECK(d->fw_segments == 3 && d->fw_segment_frees == 1 && d->fw_block_sizes == 1);
    CHECK(d->fw_backing == 3 && d->fw_backing_failed == 0);
    CHECK(d->fw_reserved == 22 * MiB && d->fw_allocated == 1024 && d->fw_requested == 1000);
    /* the process: blocks and the program's own allocation, the segments
     * reserved once (not again for their cudaMalloc) */
    CHECK(r.peak_requested == 4 + 1000 + (BIG - 100) + BIG + MiB);
    CHECK(d->peak_allocated == 512 + 1024 + 20 * MiB + BIG + MiB);
    CHECK(r.peak_reserved == 42 * MiB + MiB && d->peak_reserved == 42 * MiB + MiB);
    CHECK(d->peak_outside == MiB && d->outside == 0);
    CHECK(r.reserved == 22 * MiB);
    /* at exit: y is live; the cached segment and its cudaMalloc are not */
    uint64_t n = 0, host = 0;
    CHECK(replay_leaked(&r, &n, &host) == 1000 && n == 1 && host == 0);
    CHECK(r.backing.n == 2); /* S1's and S3's cudaMalloc, still cached */
    CHECK(r.unknown_frees == 0 && r.driver_allocs == 0 && r.fw_odd == 0);
    CHECK(r.ooms_total == 0 && d->failed_allocs == 0);
    CHECK(d->allocs == 5 && d->frees == 4);
    /* per site at the peak (all live): requested and block bytes - x's 4
     * bytes are a 512-byte block, z's block is 20 MiB by its BLOCK_SIZE
     * (after z's own peak, before the next); at exit only y's */
    static const struct {
        uint32_t stack;
        int64_t bytes, alloc;
    } at_peak[] = {
        {1, 4, 512}, {2, 1000, 1024}, {3, BIG - 100, 20 * MiB}, {4, BIG, BIG}, {5, MiB, MiB},
    };
    for (size_t k = 0; k < sizeof at_peak / sizeof *at_peak; k++) {
        const struct site *st = site_by_stack(&r, at_peak[k].stack);
        CHECK(st != NULL);
        if (st == NULL)
            continue;
        CHECK(st->peak_bytes == at_peak[k].bytes && st->peak_count == 1);
        CHECK(st->peak_alloc_bytes == at_peak[k].alloc);
        CHECK(st->live_alloc_bytes == (at_peak[k].stack == 2 ? 1024 : 0));
    }
    replay_free(&r);

    /* The pool view with everything live: PyTorch's three segments, z
     * as big as BLOCK_SIZE said, w as the record said (the pool's rule
     * would have taken the 0.5 MiB after it too), the program's own
     * buffer outside them. */
    struct poolview v;
    struct pv_state s;
    CHECK(view_at(path, m.all_live, &v));
    CHECK(pv_state(&v, -1, &s));
    CHECK(s.nsegs == 3 && s.fw_segs == 3);
    CHECK(s.reserved == 42 * MiB);
    CHECK(s.allocated == 512 + 1024 + 20 * MiB + BIG);
    CHECK(s.live_blocks == 4);
    CHECK(s.free == 2 * MiB - 1536 + MiB / 2);
    CHECK(s.largest_free == 2 * MiB - 1536);
    CHECK(s.requested == 4 + 1000 + (BIG - 100) + BIG + MiB);
    CHECK(s.waste == 508 + 24 + (20 * MiB - (BIG - 100)));
    CHECK(s.unpooled_count == 1 && s.unpooled_bytes == MiB);
    CHECK(v.odd == 0);
    /* most free first: S1 (2 MiB - 1.5 KiB), S3 (0.5 MiB), S2 (none) */
    CHECK(s.segs[0].addr == S1 && s.segs[1].addr == S3 && s.segs[2].addr == S2);
    CHECK(s.segs[0].fw && s.segs[2].free == 0 && s.segs[2].allocated == 20 * MiB);
    pv_state_free(&s);
    pv_free(&v);
    /* at the end: two segments cached, y in one; every record fitted
     * (the completed records carry the requested size; the cudaFree of
     * the segment given back is no free of an unknown block) */
    CHECK(view_at(path, UINT64_MAX, &v));
    CHECK(pv_state(&v, -1, &s));
    CHECK(s.nsegs == 2 && s.reserved == 22 * MiB && s.allocated == 1024);
    CHECK(s.pending == 0 && s.live_blocks == 1);
    CHECK(v.odd == 0 && v.nbacking == 2);
    pv_state_free(&s);
    pv_free(&v);
}

static void check_oom(const char *path)
{
    struct replay r;
    char err[256] = "";
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    /* PyTorch's failed cudaMalloc is no out-of-memory; its raising is,
     * with the state recorded before it; the program's own failure too */
    CHECK(r.ooms_total == 2 && r.nooms == 2);
    CHECK(r.dev[0].ooms == 1 && r.dev[0].fw_ooms == 1 && r.dev[0].fw_backing_failed == 1);
    CHECK(r.dev[0].failed_allocs == 1);
    CHECK(r.ooms[0].fw && r.ooms[0].size == 40ull << 30 && r.ooms[0].device == 0);
    CHECK(r.ooms[0].has_state && r.ooms[0].state[2] == 2 * MiB && r.ooms[0].state[3] == 512);
    CHECK(!r.ooms[1].fw && r.ooms[1].device == 1 && !r.ooms[1].has_state);
    CHECK(r.dev[1].ooms == 1 && r.dev[1].fw_ooms == 0);
    CHECK(r.dev[0].peak_fw_allocated == 512 && r.dev[0].peak_fw_reserved == 2 * MiB);
    replay_free(&r);
}

static void check_expandable(const char *path)
{
    struct replay r;
    char err[256] = "";
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    const struct device_state *d = &r.dev[0];
    CHECK(d->peak_fw_reserved == 40 * MiB && d->fw_reserved == 20 * MiB);
    CHECK(d->peak_fw_allocated == 35 * MiB && d->fw_allocated == 10 * MiB);
    CHECK(d->fw_maps == 2 && d->fw_unmaps == 1 && d->fw_backing == 2);
    /* the handles are not device memory a second time */
    CHECK(r.peak_reserved == 40 * MiB && r.peak_requested == 35 * MiB);
    CHECK(r.driver_allocs == 0 && r.unknown_frees == 0 && r.backing.n == 1);
    replay_free(&r);

    /* one segment of two mapped pieces; the unmapped half is gone */
    struct poolview v;
    struct pv_state s;
    CHECK(view_at(path, 6 + 1 + 6, &v)); /* thread, 6 stacks, then 6 records */
    CHECK(pv_state(&v, -1, &s));
    CHECK(s.nsegs == 1 && s.reserved == 40 * MiB && s.allocated == 35 * MiB);
    CHECK(s.free == 5 * MiB && s.free_blocks == 1);
    pv_state_free(&s);
    pv_free(&v);
    CHECK(view_at(path, UINT64_MAX, &v));
    CHECK(pv_state(&v, -1, &s));
    CHECK(s.nsegs == 1 && s.reserved == 20 * MiB && s.allocated == 10 * MiB);
    CHECK(v.odd == 0);
    pv_state_free(&s);
    pv_free(&v);
}

/* A hole in the middle of an expandable segment: two segments remain. */
static void check_unmap_middle(const char *path)
{
    struct tw w;
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    tw_fw(&w, GMT_FWX_SEGMENT_MAP, 0, V, 60 * MiB, 0, 0, 1);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, V, MiB, 0, 0, 1, 0);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, V + 50 * MiB, MiB, 0, 0, 1, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_UNMAP, 0, V + 20 * MiB, 20 * MiB, 0, 0, 0);
    tw_save(&w, path);
    struct poolview v;
    struct pv_state s;
    CHECK(view_at(path, UINT64_MAX, &v));
    CHECK(pv_state(&v, -1, &s));
    CHECK(s.nsegs == 2 && s.reserved == 40 * MiB && s.allocated == 2 * MiB);
    CHECK(s.live_blocks == 2 && v.odd == 0);
    pv_state_free(&s);
    pv_free(&v);
    struct replay r;
    char err[256];
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    CHECK(r.dev[0].fw_reserved == 40 * MiB && r.dev[0].peak_fw_reserved == 60 * MiB);
    replay_free(&r);
}

/* Per site, block bytes at the peak beside the requested ones. a: a
 * 4-byte tensor (a 512-byte block). b: 1 MiB whose block is 2 MiB whole
 * (BLOCK_SIZE right after its ALLOC, which set the peak: the picture at
 * the peak takes it). Then b freed, and c: 100 bytes at the same site,
 * under the peak, its block 1 KiB by BLOCK_SIZE: the site's live blocks
 * follow, the picture at the peak does not (c was not live then) - until
 * d, 4 MiB at a third site, sets a new peak with c in it. */
static void check_site_blocks(const char *path)
{
    for (int with_d = 0; with_d < 2; with_d++) {
        struct tw w;
        tw_init(&w, FW_FEATURES);
        tw_start(&w);
        tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S1, 2 * MiB, 0, 0, 1);
        tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S1, 4, 508, 0, 1, 0);
        tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S2, 20 * MiB, 0, 0, 2);
        tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S2, MiB, 0, 0, 2, 0);
        tw_fw(&w, GMT_FWX_BLOCK_SIZE, 0, S2, 2 * MiB, 0, 0, 0);
        tw_free(&w, 0, GMT_API_FW_FREE, S2, 2);
        tw_completed(&w, 0, S2, MiB);
        tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S2, 100, 412, 0, 2, 0);
        tw_fw(&w, GMT_FWX_BLOCK_SIZE, 0, S2, 1024, 0, 0, 0);
        if (with_d)
            tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S2 + 2 * MiB, 4 * MiB, 0, 0, 3, 0);
        tw_save(&w, path);
        struct replay r;
        char err[256] = "";
        CHECK(replay_file(path, &r, err, sizeof err) == 0);
        CHECK(r.fw_odd == 0 && r.dev[0].fw_block_sizes == 2);
        const struct site *a = site_by_stack(&r, 1), *b = site_by_stack(&r, 2),
                          *d = site_by_stack(&r, 3);
        CHECK(a != NULL && b != NULL && (d != NULL) == with_d);
        if (a == NULL || b == NULL || (d == NULL && with_d)) {
            replay_free(&r);
            continue;
        }
        CHECK(a->peak_bytes == 4 && a->peak_alloc_bytes == 512);
        CHECK(a->live_bytes == 4 && a->live_alloc_bytes == 512);
        CHECK(b->live_bytes == 100 && b->live_alloc_bytes == 1024 && b->live_count == 1);
        if (!with_d) {
            CHECK(r.peak_requested == MiB + 4);
            CHECK(b->peak_bytes == (int64_t)MiB && b->peak_alloc_bytes == 2 * (int64_t)MiB);
        } else {
            CHECK(r.peak_requested == 4 * MiB + 100 + 4);
            CHECK(b->peak_bytes == 100 && b->peak_alloc_bytes == 1024);
            CHECK(d->peak_bytes == 4 * (int64_t)MiB && d->peak_alloc_bytes == 4 * (int64_t)MiB);
        }
        replay_free(&r);
    }
}

/* One GMT_X_FW record with payload `pl` after a valid start. */
static void write_one(const char *path, const uint8_t *pl, size_t len)
{
    struct tw w;
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    tw_ext(&w, GMT_X_FW, pl, len);
    tw_save(&w, path);
}

static void check_hostile(const char *path)
{
    struct replay r;
    char err[256];
    uint8_t pl[80], *p;
    /* truncated: three fields of seven */
    p = gmt_put_varint(pl, GMT_FWX_SEGMENT_ALLOC);
    p = gmt_put_varint(p, 0);
    p = gmt_put_varint(p, S1);
    write_one(path, pl, (size_t)(p - pl));
    /* a malformed record is skipped and said; the rest of the trace is still read */
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    CHECK(strstr(r.damage, "malformed framework allocator") != NULL);
    CHECK(r.dev[0].fw_segments == 0 && r.dev[0].fw_reserved == 0);
    replay_free(&r);
    /* a size no memory has; a device beyond the reader's; a wrapping range */
    static const uint64_t bad[][7] = {
        {GMT_FWX_SEGMENT_ALLOC, 0, S1, 1ull << 50, 0, 0, 0},
        {GMT_FWX_SEGMENT_MAP, 70000, S1, MiB, 0, 0, 0},
        {GMT_FWX_SEGMENT_ALLOC, 0, UINT64_MAX - 10, MiB, 0, 0, 0},
        {GMT_FWX_BLOCK_SIZE, 0, S1, MiB, 0, 0, 1ull << 33},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        p = pl;
        for (int i = 0; i < 7; i++)
            p = gmt_put_varint(p, bad[k][i]);
        write_one(path, pl, (size_t)(p - pl));
        CHECK(replay_file(path, &r, err, sizeof err) == 0);
        CHECK(strstr(r.damage, "1 malformed definition skipped") != NULL);
        CHECK(r.dev[0].fw_segments == 0 && r.dev[0].fw_maps == 0);
        replay_free(&r);
    }
    /* an action of a newer version, and appended fields: read, ignored */
    p = pl;
    static const uint64_t later[8] = {77, 0, S1, MiB, 0, 0, 0, 12345};
    for (int i = 0; i < 8; i++)
        p = gmt_put_varint(p, later[i]);
    write_one(path, pl, (size_t)(p - pl));
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    CHECK(r.fw && r.reserved == 0 && r.fw_odd == 0);
    replay_free(&r);

    /* records that fit nothing: a block size for no block, a segment
     * given back that was never taken, a block smaller than requested;
     * sums stay >= 0. A block whose pool id has bit 40 set is a block,
     * and an allocation from a stream-ordered pool whose handle has it is
     * an allocation: neither is backing memory. */
    struct tw w;
    tw_init(&w, FW_FEATURES);
    tw_start(&w);
    tw_fw(&w, GMT_FWX_BLOCK_SIZE, 0, S1, 4096, 0, 0, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_FREE, 0, S2, 20 * MiB, 0, 0, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_ALLOC, 0, S1, 2 * MiB, 0, 300ull << 32, 0);
    tw_alloc(&w, 0, 0, GMT_API_FW_ALLOC, S1, 4096, 0, 300ull << 32, 1, 0);
    tw_fw(&w, GMT_FWX_BLOCK_SIZE, 0, S1, 1024, 0, 0, 0);
    tw_fw(&w, GMT_FWX_SEGMENT_UNMAP, 0, S1, 8 * MiB, 0, 0, 0);
    tw_alloc(&w, 0, 0, GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC, U, MiB, 0, 0x7f5500001000ull, 2,
             0);
    tw_save(&w, path);
    CHECK(replay_file(path, &r, err, sizeof err) == 0);
    CHECK(r.fw_odd == 4);
    CHECK(r.dev[0].fw_reserved == 0 && r.reserved == (int64_t)MiB); /* the pool's one */
    CHECK(r.dev[0].peak_fw_reserved == 2 * MiB && r.peak_reserved == 2 * MiB);
    CHECK(r.dev[0].fw_allocated == 4096 && r.dev[0].fw_allocs == 1);
    CHECK(r.backing.n == 0 && r.driver_allocs == 1 && r.dev[0].outside == (int64_t)MiB);
    CHECK(r.dev[0].fw_backing == 0 && r.requested == (int64_t)(4096 + MiB));
    replay_free(&r);
    struct poolview v;
    CHECK(view_at(path, UINT64_MAX, &v));
    CHECK(v.odd >= 3 && v.nsegs == 0 && v.nbacking == 0);
    pv_free(&v);
}

/* replay_opts.on_event: what each record changed, summed over the run -
 * a pass that follows the levels this way ends where the replay does. */
struct followed {
    int64_t site[8];   /* live bytes by stack id (< 8) */
    int64_t requested; /* the replay's, after the last change */
    int events, changes;
};

static void follow(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct followed *f = ctx;
    (void)rec;
    f->events++;
    if (r->change.device < 0)
        return;
    f->changes++;
    f->requested = r->requested;
    for (int i = 0; i < r->change.nsites; i++)
        if (r->change.site[i].stack < 8)
            f->site[r->change.site[i].stack] += r->change.site[i].bytes;
}

/* An allocation at an address still live: the trace missed a free. The
 * old allocation is gone, its bytes let go as a free would - requested
 * does not drift up by the bytes of every missed free. */
static void check_missed_free(const char *path)
{
    struct tw w;
    tw_init(&w, 0);
    tw_start(&w);
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, U, 4 * MiB, 0, 0, 1, 0);
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, U, MiB, 0, 0, 2, 0); /* no free of 4 MiB seen */
    tw_alloc(&w, 0, 0, GMT_API_MALLOC, U + 8 * MiB, 2 * MiB, 0, 0, 3, 0);
    tw_free(&w, 0, GMT_API_FREE, U, 2);
    tw_save(&w, path);
    struct replay r;
    char err[256];
    struct followed f = {0};
    struct replay_opts o = {.observe = {{.event = follow, .ctx = &f}}};
    CHECK(replay_trace(path, &r, &o, err, sizeof err) == 0);
    CHECK(r.requested == (int64_t)(2 * MiB) && r.reserved == (int64_t)(2 * MiB));
    CHECK(r.peak_requested == 4 * MiB);
    CHECK(r.dev[0].frees == 1 && r.dev[0].allocs == 3 && r.unknown_frees == 0);
    const struct site *s1 = site_by_stack(&r, 1), *s2 = site_by_stack(&r, 2);
    CHECK(s1 && s1->live_bytes == 0 && s1->live_count == 0);
    CHECK(s2 && s2->live_bytes == 0 && s2->total_bytes == MiB);
    CHECK(f.events == (int)r.records && f.changes == 4);
    CHECK(f.requested == r.requested);
    CHECK(f.site[1] == 0 && f.site[2] == 0 && f.site[3] == (int64_t)(2 * MiB));
    replay_free(&r);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/gmt-fw-XXXXXX", path[4200];
    const char *out = argc == 3 && strcmp(argv[1], "--write") == 0 ? argv[2] : NULL;
    if (out == NULL && mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    const char *base = out ? out : dir;
    snprintf(path, sizeof path, "%s/fw_basic.gmt", base);
    check_basic(path, write_basic(path));
    snprintf(path, sizeof path, "%s/fw_oom.gmt", base);
    write_oom(path);
    check_oom(path);
    snprintf(path, sizeof path, "%s/fw_expandable.gmt", base);
    write_expandable(path);
    check_expandable(path);
    if (out == NULL) {
        static const char *const names[] = {"fw_basic", "fw_oom", "fw_expandable"};
        snprintf(path, sizeof path, "%s/hole.gmt", base);
        check_unmap_middle(path);
        unlink(path);
        snprintf(path, sizeof path, "%s/site_blocks.gmt", base);
        check_site_blocks(path);
        unlink(path);
        snprintf(path, sizeof path, "%s/hostile.gmt", base);
        check_hostile(path);
        unlink(path);
        snprintf(path, sizeof path, "%s/missed_free.gmt", base);
        check_missed_free(path);
        unlink(path);
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            snprintf(path, sizeof path, "%s/%s.gmt", base, names[i]);
            unlink(path);
        }
        rmdir(dir);
    }
    return CHECK_DONE();
}
