/* export_memviz.c - `export --format memory-viz`: PyTorch's memory snapshot.
 *
 * The pickle torch.cuda.memory._dump_snapshot() writes, which
 * torch.cuda._memory_viz and pytorch.org/memory_viz read: a dict with
 *   "segments": the state at the end, one dict per segment (device,
 *     address, total_size, allocated_size, active_size, requested_size,
 *     stream, segment_type, segment_pool_id, is_expandable, frames,
 *     blocks), whose blocks tile the segment in address order (the viewer
 *     computes each block's address by adding up the sizes before it):
 *     active_allocated and active_pending_free blocks, inactive gaps;
 *   "device_traces": per device ordinal, the events in order, each {action,
 *     addr, size, stream, time_us, frames}, actions alloc, free_requested,
 *     free_completed, segment_alloc, segment_free, segment_map,
 *     segment_unmap, oom (with device_free).
 * The viewer replays device_traces backwards from the segments, so the two
 * must agree: the segments are the state the events leave behind.
 *
 * What maps onto what. Blocks inside segments: PyTorch's caching
 * allocator's blocks (GMT_API_FW_ALLOC, with its GMT_X_FW segments) and,
 * with gpumemtrace's pool on, the pool's blocks (cudaMalloc, with its
 * SEGMENT records); their frees are free_requested, FREE_COMPLETED is
 * free_completed. Every other device allocation (no pool, managed,
 * stream-ordered, ...) is a segment of its own holding one block:
 * segment_alloc + alloc, then free_requested + free_completed +
 * segment_free. The CUDA allocations under PyTorch's segments are not
 * blocks (its segments stand for them); pinned host memory is not device
 * memory. Sizes: events carry the requested size, blocks the block's.
 * Frames: the stack's user frames, innermost first as PyTorch's are, with
 * filename, line and name (a native frame without a line has line 0).
 *
 * Streaming. The events of each device form one list, but a trace
 * interleaves devices, so the trace is read once per device that has
 * events, writing that device's list; each pass rebuilds the whole state
 * (all devices), and the last pass's state gives the segments. Memory:
 * live blocks, segments, and one memo number per distinct stack (a
 * stack's frame list is written once and referred to after that).
 *
 * The pickle is written by hand: protocol 4 opcodes that both Python's
 * unpickler and the viewer's JavaScript one read (no FRAME, which is
 * optional); lists and dicts are filled in batches of 1000 as pickle
 * does, so neither reader's stack grows with the trace.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"

/* ---- pickle opcodes ----------------------------------------------------- */

enum {
    P_PROTO = 0x80, P_STOP = '.', P_MARK = '(', P_EMPTY_DICT = '}',
    P_EMPTY_LIST = ']', P_SETITEMS = 'u', P_APPENDS = 'e', P_BININT = 'J',
    P_BININT1 = 'K', P_BININT2 = 'M', P_LONG1 = 0x8a, P_NONE = 'N',
    P_TRUE = 0x88, P_FALSE = 0x89, P_SHORT_BINUNICODE = 0x8c,
    P_BINUNICODE = 'X', P_LONG_BINPUT = 'r', P_LONG_BINGET = 'j', P_TUPLE2 = 0x86,
};

#define BATCH 1000

static void p_u32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

static void p_int(FILE *f, int64_t v)
{
    if (v >= 0 && v < 256) {
        putc(P_BININT1, f);
        putc((int)v, f);
    } else if (v >= 0 && v < 65536) {
        putc(P_BININT2, f);
        putc((int)(v & 255), f);
        putc((int)(v >> 8), f);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        putc(P_BININT, f);
        p_u32(f, (uint32_t)v);
    } else { /* LONG1: two's complement, little-endian, as short as it goes */
        unsigned char b[9];
        int n = 0;
        uint64_t u = (uint64_t)v;
        for (; n < 8; n++)
            b[n] = (unsigned char)(u >> (8 * n));
        n = 8;
        while (n > 1 && ((b[n - 1] == 0 && !(b[n - 2] & 0x80)) ||
                         (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
            n--;
        putc(P_LONG1, f);
        putc(n, f);
        fwrite(b, 1, (size_t)n, f);
    }
}

/* Unsigned values above INT64_MAX (addresses of a hostile trace) need a
 * ninth byte to stay positive. */
static void p_uint(FILE *f, uint64_t v)
{
    if (v <= INT64_MAX) {
        p_int(f, (int64_t)v);
        return;
    }
    putc(P_LONG1, f);
    putc(9, f);
    for (int i = 0; i < 8; i++)
        putc((int)(v >> (8 * i)) & 255, f);
    putc(0, f);
}

/* A str: the bytes as UTF-8, each invalid byte (a hostile trace's names)
 * as U+FFFD, so both unpicklers decode it. */
static void p_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t len = 0;
    bool clean = true;
    for (const unsigned char *q = p; *q;) {
        int n = *q < 0x80 ? 1 : gmt_utf8_len(q);
        if (n == 0) {
            clean = false;
            len += 3;
            q++;
        } else {
            len += (size_t)n;
            q += n;
        }
    }
    if (len > UINT32_MAX / 2)
        len = 0, p = (const unsigned char *)"";
    if (len < 256) {
        putc(P_SHORT_BINUNICODE, f);
        putc((int)len, f);
    } else {
        putc(P_BINUNICODE, f);
        p_u32(f, (uint32_t)len);
    }
    if (clean) {
        fwrite(p, 1, len, f);
        return;
    }
    for (const unsigned char *q = p; *q;) {
        int n = *q < 0x80 ? 1 : gmt_utf8_len(q);
        if (n == 0) {
            fwrite("\xef\xbf\xbd", 1, 3, f);
            q++;
        } else {
            fwrite(q, 1, (size_t)n, f);
            q += n;
        }
    }
}

static void p_key_int(FILE *f, const char *k, int64_t v)
{
    p_str(f, k);
    p_int(f, v);
}

static void p_key_uint(FILE *f, const char *k, uint64_t v)
{
    p_str(f, k);
    p_uint(f, v);
}

static void p_key_str(FILE *f, const char *k, const char *v)
{
    p_str(f, k);
    p_str(f, v);
}

/* ---- frames, each stack's list written once ---------------------------------- */

struct memo_slot {
    uint32_t stack; /* stack id + 1; 0: empty */
    uint32_t memo;
};

struct mv {
    struct loaded *l;
    FILE *f;
    struct memo_slot *memo;
    size_t memo_cap, memo_n;
    uint32_t next_memo;
    struct sym *frames; /* EXPORT_MAX_FRAMES */
    /* the state the events build */
    struct ex_table live;
    /* CUDA allocations under PyTorch's segments: apart, because a block
     * at a segment's start has the segment's address */
    struct ex_table backing;
    struct seg *segs;   /* sorted by address, not overlapping */
    size_t nsegs, cap_segs;
    uint64_t oom_free;  /* device free of the latest OOM record */
    bool oom_pending;
    /* the pass */
    int device;         /* whose events are written; -1: none */
    uint64_t in_list;   /* items since the last APPENDS */
    bool nomem;
};

struct seg {
    uint64_t addr, size, stream;
    uint32_t stack;
    uint16_t device;
    bool expandable;
};

static struct memo_slot *memo_slot(struct mv *m, uint32_t stack)
{
    size_t mask = m->memo_cap - 1;
    for (size_t i = (stack * 2654435761u) & mask;; i = (i + 1) & mask)
        if (m->memo[i].stack == stack + 1 || m->memo[i].stack == 0)
            return &m->memo[i];
}

static bool memo_grow(struct mv *m)
{
    size_t cap = m->memo_cap ? 2 * m->memo_cap : 1024;
    struct memo_slot *old = m->memo;
    size_t oldcap = m->memo_cap;
    m->memo = calloc(cap, sizeof *m->memo);
    if (m->memo == NULL) {
        m->memo = old;
        return false;
    }
    m->memo_cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].stack)
            *memo_slot(m, old[i].stack - 1) = old[i];
    free(old);
    return true;
}

/* The frame list of a stack: written and memoized the first time, a
 * reference to the memo after that. */
static void p_frames(struct mv *m, uint32_t stack)
{
    FILE *f = m->f;
    struct memo_slot *s = NULL;
    if ((m->memo_n + 1) * 2 <= m->memo_cap || memo_grow(m)) {
        s = memo_slot(m, stack);
        if (s->stack) {
            putc(P_LONG_BINGET, f);
            p_u32(f, s->memo);
            return;
        }
    }
    int n = export_frames(m->l, stack, m->frames, NULL, EXPORT_MAX_FRAMES);
    putc(P_EMPTY_LIST, f);
    if (s) {
        s->stack = stack + 1;
        s->memo = m->next_memo++;
        m->memo_n++;
        putc(P_LONG_BINPUT, f);
        p_u32(f, s->memo);
    }
    if (n == 0)
        return;
    putc(P_MARK, f);
    for (int i = 0; i < n; i++) {
        const struct sym *y = &m->frames[i];
        char buf[96];
        putc(P_EMPTY_DICT, f);
        putc(P_MARK, f);
        p_key_str(f, "filename", y->file ? y->file : y->module ? y->module : "??");
        p_key_int(f, "line", y->line > 0 ? y->line : 0);
        p_key_str(f, "name", export_frame_name(y, buf, sizeof buf));
        putc(P_SETITEMS, f);
        if ((i + 1) % BATCH == 0 && i + 1 < n) {
            putc(P_APPENDS, f);
            putc(P_MARK, f);
        }
    }
    putc(P_APPENDS, f);
}

/* ---- the events ---------------------------------------------------------- */

/* One trace entry into the open list of the pass's device. */
static void entry(struct mv *m, uint32_t device, const char *action, uint64_t addr,
                  uint64_t size, uint64_t stream, uint64_t time, uint32_t stack,
                  bool oom)
{
    if (m->device < 0 || device != (uint32_t)m->device)
        return;
    FILE *f = m->f;
    const struct replay *r = &m->l->r;
    putc(P_EMPTY_DICT, f);
    putc(P_MARK, f);
    p_key_str(f, "action", action);
    p_key_uint(f, "addr", addr);
    p_key_uint(f, "size", size);
    p_key_uint(f, "stream", stream);
    /* microseconds on the wall clock, as PyTorch's time_us */
    p_key_uint(f, "time_us", (r->hdr.start_realtime_ns + export_rel_ns(r, time)) / 1000);
    if (oom)
        p_key_uint(f, "device_free", m->oom_pending ? m->oom_free : 0);
    p_str(f, "frames");
    p_frames(m, stack);
    putc(P_SETITEMS, f);
    if (++m->in_list % BATCH == 0) {
        putc(P_APPENDS, f);
        putc(P_MARK, f);
    }
}

/* ---- segments ----------------------------------------------------------------- */

/* Index of the first segment ending after addr. */
static size_t seg_lower(const struct mv *m, uint64_t addr)
{
    size_t lo = 0, hi = m->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->segs[mid].addr + m->segs[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Take [addr, addr+size) out of every segment: whole segments go, a
 * segment it cuts keeps its parts outside. */
static void seg_cut(struct mv *m, uint64_t addr, uint64_t size)
{
    uint64_t end = addr + size;
    size_t i = seg_lower(m, addr);
    while (i < m->nsegs && m->segs[i].addr < end) {
        struct seg *s = &m->segs[i];
        uint64_t s_end = s->addr + s->size;
        if (s->addr < addr && s_end > end) { /* a hole in the middle */
            if (m->nsegs == m->cap_segs) {
                size_t cap = m->cap_segs ? 2 * m->cap_segs : 64;
                struct seg *n = realloc(m->segs, cap * sizeof *n);
                if (n == NULL) {
                    m->nomem = true;
                    return;
                }
                m->segs = n;
                m->cap_segs = cap;
                s = &m->segs[i];
            }
            memmove(&m->segs[i + 2], &m->segs[i + 1], (m->nsegs - i - 1) * sizeof *s);
            m->nsegs++;
            m->segs[i + 1] = *s;
            m->segs[i + 1].addr = end;
            m->segs[i + 1].size = s_end - end;
            s->size = addr - s->addr;
            return;
        }
        if (s->addr < addr) { /* its tail */
            s->size = addr - s->addr;
            i++;
        } else if (s_end > end) { /* its head */
            s->size = s_end - end;
            s->addr = end;
            return;
        } else { /* all of it */
            memmove(s, s + 1, (m->nsegs - i - 1) * sizeof *s);
            m->nsegs--;
        }
    }
}

/* Add a segment (whatever it overlaps is taken out first); an expandable
 * one joins the mapped pieces it touches, as PyTorch shows one segment. */
static void seg_add(struct mv *m, struct seg s)
{
    if (s.size == 0 || s.addr + s.size < s.addr)
        return;
    seg_cut(m, s.addr, s.size);
    if (m->nsegs == m->cap_segs) {
        size_t cap = m->cap_segs ? 2 * m->cap_segs : 64;
        struct seg *n = realloc(m->segs, cap * sizeof *n);
        if (n == NULL) {
            m->nomem = true;
            return;
        }
        m->segs = n;
        m->cap_segs = cap;
    }
    size_t i = seg_lower(m, s.addr);
    memmove(&m->segs[i + 1], &m->segs[i], (m->nsegs - i) * sizeof s);
    m->segs[i] = s;
    m->nsegs++;
    if (!s.expandable)
        return;
    if (i + 1 < m->nsegs && m->segs[i + 1].expandable &&
        m->segs[i + 1].addr == s.addr + s.size && m->segs[i + 1].device == s.device) {
        m->segs[i].size += m->segs[i + 1].size;
        memmove(&m->segs[i + 1], &m->segs[i + 2], (m->nsegs - i - 2) * sizeof s);
        m->nsegs--;
    }
    if (i > 0 && m->segs[i - 1].expandable && m->segs[i - 1].device == s.device &&
        m->segs[i - 1].addr + m->segs[i - 1].size == s.addr) {
        m->segs[i - 1].size += m->segs[i].size;
        memmove(&m->segs[i], &m->segs[i + 1], (m->nsegs - i - 1) * sizeof s);
        m->nsegs--;
    }
}

/* Does a segment of device hold all of [addr, addr+size)? */
static bool seg_holds(const struct mv *m, uint64_t addr, uint64_t size, uint32_t device)
{
    size_t i = seg_lower(m, addr);
    return i < m->nsegs && m->segs[i].addr <= addr && m->segs[i].device == device &&
           size <= m->segs[i].addr + m->segs[i].size - addr;
}

/* ---- one pass ------------------------------------------------------------------ */

static void on_alloc(struct mv *m, const struct gmt_rec *rec)
{
    const struct replay *r = &m->l->r;
    unsigned api = rec->api & ~GMT_API_PTDS;
    if (rec->result != 0) {
        /* out of memory: what the program saw fail (a failed CUDA call
         * under PyTorch's segments is retried by PyTorch, no OOM) */
        if (rec->result == 2 && !gmt_is_fw_backing(rec) && !export_host_api(api))
            entry(m, rec->device, "oom", 0, rec->size, gmt_alloc_stream(rec), rec->time, rec->stack,
                  true);
        m->oom_pending = false;
        return;
    }
    m->oom_pending = false;
    if (rec->addr == 0 || rec->size == 0 || rec->size > GMT_SIZE_MAX ||
        rec->size2 > GMT_SIZE_MAX || rec->device >= REPLAY_MAX_DEVICES)
        return;
    if (gmt_is_fw_backing(rec)) {
        struct ex_live *b = ex_put(&m->backing, rec->addr);
        if (b)
            b->flags = EX_BACKING;
        return;
    }
    struct ex_live *e = ex_put(&m->live, rec->addr);
    if (e == NULL)
        return;
    e->size = rec->size;
    e->block = rec->size + rec->size2;
    e->stream = gmt_alloc_stream(rec);
    e->stack = rec->stack;
    e->device = (uint16_t)rec->device;
    if (export_host_api(api)) {
        e->flags = EX_HOST;
        return;
    }
    /* a block of the pool or PyTorch's inside a segment the trace has;
     * one outside every segment (its segment was not recorded) stands
     * alone like any other allocation, so the viewer can place it - and
     * its free completes it, even where no completion is recorded */
    if (export_pooled(r, api) && seg_holds(m, rec->addr, e->block, rec->device)) {
        e->flags = EX_POOLED;
    } else {
        seg_add(m, (struct seg){rec->addr, e->block, e->stream, rec->stack,
                                (uint16_t)rec->device, false});
        entry(m, rec->device, "segment_alloc", rec->addr, e->block, e->stream, rec->time,
              rec->stack, false);
    }
    entry(m, rec->device, "alloc", rec->addr, rec->size, e->stream, rec->time, rec->stack,
          false);
}

static void on_free(struct mv *m, const struct gmt_rec *rec)
{
    if (rec->result != 0)
        return;
    struct ex_live *e;
    if ((rec->api & ~GMT_API_PTDS) != GMT_API_FW_FREE &&
        (e = ex_find(&m->backing, rec->addr)) != NULL) {
        ex_del(&m->backing, e);
        return;
    }
    if ((e = ex_find(&m->live, rec->addr)) == NULL)
        return;
    if (e->flags & EX_HOST) {
        ex_del(&m->live, e);
        return;
    }
    if (e->flags & EX_PENDING)
        return; /* freed twice */
    uint32_t stack = rec->stack ? rec->stack : e->stack;
    entry(m, e->device, "free_requested", e->addr, e->size, e->stream, rec->time, stack, false);
    if (e->flags & EX_POOLED) {
        e->flags |= EX_PENDING;
        return;
    }
    entry(m, e->device, "free_completed", e->addr, e->size, e->stream, rec->time, stack, false);
    entry(m, e->device, "segment_free", e->addr, e->block, e->stream, rec->time, stack, false);
    seg_cut(m, e->addr, e->block);
    ex_del(&m->live, e);
}

static void on_completed(struct mv *m, const struct gmt_rec *rec)
{
    struct ex_live *e = ex_find(&m->live, rec->addr);
    if (e == NULL || !(e->flags & EX_PENDING))
        return;
    entry(m, e->device, "free_completed", e->addr, e->size, e->stream, rec->time, e->stack,
          false);
    ex_del(&m->live, e);
}

/* A pool segment has no stream (the record's is the thread's register):
 * the legacy stream, 0. */
static void on_segment(struct mv *m, const struct gmt_rec *rec, bool alloc)
{
    if (rec->device >= REPLAY_MAX_DEVICES || rec->size == 0 || rec->size > GMT_SIZE_MAX)
        return;
    if (alloc)
        seg_add(m, (struct seg){rec->addr, rec->size, 0, rec->stack,
                                (uint16_t)rec->device, false});
    else
        seg_cut(m, rec->addr, rec->size);
    entry(m, rec->device, alloc ? "segment_alloc" : "segment_free", rec->addr, rec->size,
          0, rec->time, rec->stack, false);
}

static void on_fw(struct mv *m, const struct gmt_rec *rec)
{
    struct gmt_fw fw;
    if (gmt_fw_decode(rec, &fw) != 0 || fw.device >= REPLAY_MAX_DEVICES)
        return;
    const char *action = NULL;
    switch (fw.action) {
    case GMT_FWX_SEGMENT_ALLOC:
    case GMT_FWX_SEGMENT_MAP:
        seg_add(m, (struct seg){fw.addr, fw.size, fw.stream, fw.stack, (uint16_t)fw.device,
                                fw.action == GMT_FWX_SEGMENT_MAP});
        action = fw.action == GMT_FWX_SEGMENT_MAP ? "segment_map" : "segment_alloc";
        break;
    case GMT_FWX_SEGMENT_FREE:
    case GMT_FWX_SEGMENT_UNMAP:
        seg_cut(m, fw.addr, fw.size);
        action = fw.action == GMT_FWX_SEGMENT_UNMAP ? "segment_unmap" : "segment_free";
        break;
    case GMT_FWX_BLOCK_SIZE: {
        struct ex_live *e = ex_find(&m->live, fw.addr);
        if (e && (e->flags & EX_POOLED) && fw.size >= e->size)
            e->block = fw.size;
        return;
    }
    default:
        return;
    }
    entry(m, fw.device, action, fw.addr, fw.size, fw.stream, rec->time, fw.stack, false);
}

static int pass(struct mv *m, char *err, size_t errlen)
{
    struct gmt_reader *rd = gmt_reader_open(m->l->path, err, errlen);
    if (rd == NULL)
        return -1;
    ex_free(&m->live);
    ex_free(&m->backing);
    m->nsegs = 0;
    m->oom_pending = false;
    struct gmt_rec rec;
    int got;
    while ((got = gmt_reader_next(rd, &rec)) == 1) {
        switch (rec.kind) {
        case GMT_K_ALLOC:
            on_alloc(m, &rec);
            break;
        case GMT_K_FREE:
            on_free(m, &rec);
            break;
        case GMT_K_FREE_COMPLETED:
            on_completed(m, &rec);
            break;
        case GMT_K_SEGMENT_ALLOC:
        case GMT_K_SEGMENT_FREE:
            on_segment(m, &rec, rec.kind == GMT_K_SEGMENT_ALLOC);
            break;
        case GMT_K_OOM:
            m->oom_pending = true;
            m->oom_free = rec.v[0];
            break;
        case GMT_K_EXT:
            if (rec.ext == GMT_X_FW)
                on_fw(m, &rec);
            break;
        default:
            break;
        }
    }
    if (got < 0)
        snprintf(err, errlen, "%s", gmt_reader_error(rd));
    gmt_reader_close(rd);
    if (got == 0 && (m->nomem || m->live.nomem || m->backing.nomem)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return got < 0 ? -1 : 0;
}

/* ---- the segments at the end ------------------------------------------------- */

static int cmp_live(const void *a, const void *b)
{
    const struct ex_live *x = *(struct ex_live *const *)a, *y = *(struct ex_live *const *)b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void p_block(struct mv *m, uint64_t addr, uint64_t size, uint64_t requested,
                    const char *state, uint32_t stack)
{
    FILE *f = m->f;
    putc(P_EMPTY_DICT, f);
    putc(P_MARK, f);
    p_key_uint(f, "address", addr);
    p_key_uint(f, "size", size);
    p_key_uint(f, "requested_size", requested);
    p_key_str(f, "state", state);
    p_str(f, "frames");
    p_frames(m, stack);
    putc(P_SETITEMS, f);
}

/* One segment and its blocks b[0..n) (sorted, inside it, not overlapping),
 * the gaps between them inactive blocks. */
static void p_segment(struct mv *m, const struct seg *s, struct ex_live **b, size_t n)
{
    FILE *f = m->f;
    uint64_t allocated = 0, active = 0, requested = 0;
    for (size_t i = 0; i < n; i++) {
        active += b[i]->block;
        if (!(b[i]->flags & EX_PENDING)) {
            allocated += b[i]->block;
            requested += b[i]->size;
        }
    }
    putc(P_EMPTY_DICT, f);
    putc(P_MARK, f);
    p_key_int(f, "device", s->device);
    p_key_uint(f, "address", s->addr);
    p_key_uint(f, "total_size", s->size);
    p_key_uint(f, "allocated_size", allocated);
    p_key_uint(f, "active_size", active);
    p_key_uint(f, "requested_size", requested);
    p_key_uint(f, "stream", s->stream);
    /* PyTorch's small pool holds blocks up to 1 MiB in 2 MiB segments */
    p_key_str(f, "segment_type", s->size <= (2u << 20) ? "small" : "large");
    p_str(f, "segment_pool_id");
    p_int(f, 0);
    p_int(f, 0);
    putc(P_TUPLE2, f);
    p_str(f, "is_expandable");
    putc(s->expandable ? P_TRUE : P_FALSE, f);
    p_str(f, "frames");
    p_frames(m, s->stack);
    p_str(f, "blocks");
    putc(P_EMPTY_LIST, f);
    putc(P_MARK, f);
    uint64_t at = s->addr, items = 0;
    for (size_t i = 0; i <= n; i++) {
        uint64_t next = i < n ? b[i]->addr : s->addr + s->size;
        if (next > at) {
            p_block(m, at, next - at, 0, "inactive", 0);
            items++;
        }
        if (i < n) {
            p_block(m, b[i]->addr, b[i]->block, b[i]->size,
                    b[i]->flags & EX_PENDING ? "active_pending_free" : "active_allocated",
                    b[i]->stack);
            at = b[i]->addr + b[i]->block;
            items++;
        }
        if (items >= BATCH) {
            putc(P_APPENDS, f);
            putc(P_MARK, f);
            items = 0;
        }
    }
    putc(P_APPENDS, f);
    putc(P_SETITEMS, f);
}

/* The list of segments: each with the live blocks inside it; a block in
 * no segment (its segment was never recorded, or a damaged trace) is
 * shown as a segment of its own, so every live byte is somewhere. */
static int p_segments(struct mv *m)
{
    FILE *f = m->f;
    size_t n = 0;
    struct ex_live **b = malloc((m->live.n ? m->live.n : 1) * sizeof *b);
    if (b == NULL)
        return -1;
    for (size_t i = 0; i < m->live.cap; i++) {
        struct ex_live *e = &m->live.slot[i];
        if (e->addr && !(e->flags & (EX_BACKING | EX_HOST)) && e->block)
            b[n++] = e;
    }
    qsort(b, n, sizeof *b, cmp_live);
    putc(P_EMPTY_LIST, f);
    putc(P_MARK, f);
    size_t j = 0, items = 0;
    for (size_t i = 0; i <= m->nsegs; i++) {
        const struct seg *s = i < m->nsegs ? &m->segs[i] : NULL;
        /* blocks before this segment: orphans */
        while (j < n && (s == NULL || b[j]->addr < s->addr)) {
            struct seg own = {b[j]->addr, b[j]->block, b[j]->stream, b[j]->stack,
                              b[j]->device, false};
            if (own.addr + own.size < own.addr)
                own.size = UINT64_MAX - own.addr;
            p_segment(m, &own, &b[j], 1);
            j++;
            items++;
        }
        if (s == NULL)
            break;
        size_t k = j;
        uint64_t end = s->addr + s->size, at = s->addr;
        /* the blocks that fit in it, in order; one that sticks out or
         * overlaps the one before (a damaged trace) is an orphan */
        struct ex_live **in = b + j;
        size_t nin = 0;
        while (k < n && b[k]->addr < end) {
            if (b[k]->addr >= at && b[k]->block <= end - b[k]->addr &&
                b[k]->device == s->device) {
                in[nin++] = b[k];
                at = b[k]->addr + b[k]->block;
            } else {
                struct seg own = {b[k]->addr, b[k]->block, b[k]->stream, b[k]->stack,
                                  b[k]->device, false};
                p_segment(m, &own, &b[k], 1);
                items++;
            }
            k++;
        }
        p_segment(m, s, in, nin);
        items++;
        j = k;
        if (items >= BATCH) {
            putc(P_APPENDS, f);
            putc(P_MARK, f);
            items = 0;
        }
    }
    putc(P_APPENDS, f);
    free(b);
    return 0;
}

int export_memviz(struct loaded *l, FILE *out, char *err, size_t errlen)
{
    struct mv m = {.l = l, .f = out, .device = -1};
    m.frames = malloc(EXPORT_MAX_FRAMES * sizeof *m.frames);
    int rc = -1;
    if (m.frames == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    int ndev = 0;
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++)
        if (l->r.dev[d].seen)
            ndev = d + 1;
    putc(P_PROTO, out);
    putc(4, out);
    putc(P_EMPTY_DICT, out);
    putc(P_MARK, out);
    p_str(out, "device_traces");
    putc(P_EMPTY_LIST, out);
    putc(P_MARK, out);
    for (int d = 0; d < ndev; d++) {
        putc(P_EMPTY_LIST, out);
        if (!l->r.dev[d].seen)
            continue;
        putc(P_MARK, out);
        m.device = d;
        m.in_list = 0;
        if (pass(&m, err, errlen) != 0)
            goto out;
        putc(P_APPENDS, out);
    }
    putc(P_APPENDS, out);
    m.device = -1;
    if (ndev == 0 && pass(&m, err, errlen) != 0)
        goto out;
    p_str(out, "segments");
    if (p_segments(&m) != 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    p_str(out, "allocator_settings");
    putc(P_EMPTY_DICT, out);
    putc(P_SETITEMS, out);
    putc(P_STOP, out);
    rc = 0;
out:
    ex_free(&m.live);
    ex_free(&m.backing);
    free(m.segs);
    free(m.memo);
    free(m.frames);
    return rc;
}
