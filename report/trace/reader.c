/* reader.c - streaming, validating reader of .gmt traces.
 *
 * Opening a trace reads the header and the 32-byte header of every chunk
 * (one pread each; a 1 GiB trace has 16k chunks), groups chunks by thread
 * and orders each thread's chunks by ordinal. Reading then merges the
 * threads: a min-heap of per-thread cursors keyed by the sequence number
 * of each cursor's next record. A cursor whose next chunk is not loaded
 * yet is keyed by that chunk's first_seq, so only chunks whose records are
 * due are in memory.
 *
 * Everything read from the file is checked before it is used: lengths
 * against the chunk, varints against their bounds, kinds against the
 * version. A bad byte ends reading with a message naming the chunk and the
 * offset; it can never make the reader loop, over-read or over-allocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader_internal.h"

/* Remember where the first damage was, for the warning. */
static void note_damage(struct gmt_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note_damage(struct gmt_reader *r, const char *fmt, ...)
{
    if (r->first_damage[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->first_damage, sizeof r->first_damage, fmt, ap);
    va_end(ap);
}

static void fail(struct gmt_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail(struct gmt_reader *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    r->failed = true;
}

bool gmt_reader_pread(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return true;
}

static int cmp_ref(const void *a, const void *b)
{
    const struct chunk_ref *x = a, *y = b;
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    if (x->ordinal != y->ordinal)
        return x->ordinal < y->ordinal ? -1 : 1;
    return 0;
}

/* ---- heap of cursors ------------------------------------------------ */

static bool before(const struct hent *a, const struct hent *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    return a->c->thread < b->c->thread; /* only in corrupt files: stay stable */
}

static void sift_down(struct gmt_reader *r, size_t i)
{
    size_t n = r->nheap;
    struct hent *h = r->heap;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && before(&h[l], &h[m]))
            m = l;
        if (l + 1 < n && before(&h[l + 1], &h[m]))
            m = l + 1;
        if (m == i)
            return;
        struct hent t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_pop_top(struct gmt_reader *r)
{
    r->heap[0] = r->heap[--r->nheap];
    if (r->nheap)
        sift_down(r, 0);
}

/* ---- opening -------------------------------------------------------- */

static bool check_header(struct gmt_reader *r)
{
    struct gmt_file_header *h = &r->hdr;
    /* hostile input: the host name is a C string from here on, and bits
     * this reader does not know are dropped */
    h->host[sizeof h->host - 1] = '\0';
    h->dist_flags &= GMT_DIST_RANK | GMT_DIST_LOCAL_RANK | GMT_DIST_WORLD_SIZE |
                     GMT_DIST_LOCAL_WORLD_SIZE | GMT_DIST_LATE;
    /* the loss counters are 1.3's: in older files those bytes were never
     * written, and nothing is known lost */
    if (h->version_major == 1 && h->version_minor < 3) {
        h->lost_events = h->lost_records = h->lost_stacks = 0;
        h->lost_why = 0;
        h->lost_errno = 0;
    }
    h->lost_why &= GMT_LOST_ALL;
    if (h->lost_errno < 0 || h->lost_errno > 4095)
        h->lost_errno = 0;
    if (memcmp(h->magic, GMT_MAGIC, 8) != 0) {
        fail(r, "not a gpumemtrace trace (bad magic)");
        return false;
    }
    if (h->endian != GMT_ENDIAN_MARK) {
        fail(r, "trace written with a different byte order; not supported");
        return false;
    }
    if (h->min_reader_major > GMT_VERSION_MAJOR ||
        (h->min_reader_major == GMT_VERSION_MAJOR &&
         h->min_reader_minor > GMT_VERSION_MINOR) ||
        h->version_major < 1) {
        fail(r, "trace format %u.%u needs a reader of version %u.%u or newer;"
             " this gpumemreport reads %u.%u",
             h->version_major, h->version_minor, h->min_reader_major,
             h->min_reader_minor, GMT_VERSION_MAJOR, GMT_VERSION_MINOR);
        return false;
    }
    if (h->header_size < sizeof *h || h->header_size > (1u << 20)) {
        fail(r, "corrupt header (header size %u)", h->header_size);
        return false;
    }
    if (h->chunk_size < GMT_CHUNK_SIZE_MIN || h->chunk_size > GMT_CHUNK_SIZE_MAX ||
        h->chunk_size % 4096) {
        fail(r, "corrupt header (chunk size %u)", h->chunk_size);
        return false;
    }
    return true;
}

static bool index_chunks(struct gmt_reader *r)
{
    uint64_t data = r->size - r->hdr.header_size;
    /* a file cut mid-chunk (an interrupted copy): its whole chunks are
     * intact, the partial one is left out */
    r->tail_bytes = data % r->cs;
    if (r->tail_bytes)
        note_damage(r, "the file ends %llu bytes into a chunk (cut while "
                    "copying?)", (unsigned long long)r->tail_bytes);
    uint64_t n = data / r->cs;
    size_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gmt_chunk_header c;
        uint64_t off = r->hdr.header_size + i * r->cs;
        /* A sparse file (only a crafted one is: traces are fallocated)
         * reads as zeros in its holes: jump over them. */
        off_t data_at = lseek(r->fd, (off_t)off, SEEK_DATA);
        if (data_at < 0)
            break; /* no data after off: every further chunk is unused */
        if ((uint64_t)data_at >= off + r->cs) {
            i = ((uint64_t)data_at - r->hdr.header_size) / r->cs - 1;
            continue;
        }
        if (!gmt_reader_pread(r->fd, &c, sizeof c, off)) {
            fail(r, "cannot read chunk %llu: %s", (unsigned long long)i,
                 errno ? strerror(errno) : "short read");
            return false;
        }
        /* magic is stored last when a chunk is taken: without it the chunk
         * holds nothing (a process killed while taking it leaves this) */
        if (c.magic == 0)
            continue;
        if (c.magic != GMT_CHUNK_MAGIC || c.used < GMT_CHUNK_HEADER_SIZE ||
            c.used > r->cs || c.thread == 0 ||
            (c.used > GMT_CHUNK_HEADER_SIZE && c.first_seq == 0)) {
            /* one chunk's damage costs that chunk, not the trace */
            r->bad_chunks++;
            note_damage(r, "chunk %llu at offset %llu has a %s",
                        (unsigned long long)i, (unsigned long long)off,
                        c.magic != GMT_CHUNK_MAGIC ? "bad magic" : "invalid header");
            continue;
        }
        if (c.used == GMT_CHUNK_HEADER_SIZE)
            continue; /* acquired, nothing committed */
        if (r->nrefs == cap) {
            cap = cap ? 2 * cap : 256;
            struct chunk_ref *nr = realloc(r->refs, cap * sizeof *nr);
            if (nr == NULL) {
                fail(r, "out of memory indexing chunks");
                return false;
            }
            r->refs = nr;
        }
        r->refs[r->nrefs++] = (struct chunk_ref){
            i, c.first_seq, c.first_time, c.thread, c.ordinal, c.used};
    }
    if (r->nrefs)
        qsort(r->refs, r->nrefs, sizeof *r->refs, cmp_ref);
    /* two chunks claiming one place in a thread's stream: one of them is
     * damaged, and which cannot be told; the first is kept */
    size_t kept = 0;
    for (size_t i = 0; i < r->nrefs; i++) {
        if (kept > 0 && r->refs[i].thread == r->refs[kept - 1].thread &&
            r->refs[i].ordinal == r->refs[kept - 1].ordinal) {
            r->bad_chunks++;
            note_damage(r, "thread %u has two chunks numbered %u",
                        r->refs[i].thread, r->refs[i].ordinal);
            continue;
        }
        r->refs[kept++] = r->refs[i];
    }
    r->nrefs = kept;
    size_t threads = 0;
    for (size_t i = 0; i < r->nrefs; i++)
        if (i == 0 || r->refs[i].thread != r->refs[i - 1].thread)
            threads++;
    r->cur = calloc(threads ? threads : 1, sizeof *r->cur);
    r->heap = calloc(threads ? threads : 1, sizeof *r->heap);
    r->scratch = malloc(r->cs);
    if (!r->cur || !r->heap || !r->scratch) {
        fail(r, "out of memory");
        return false;
    }
    for (size_t i = 0; i < r->nrefs;) {
        size_t j = i;
        while (j < r->nrefs && r->refs[j].thread == r->refs[i].thread)
            j++;
        struct cursor *c = &r->cur[r->ncur++];
        c->chunks = &r->refs[i];
        c->nchunks = j - i;
        c->thread = r->refs[i].thread;
        r->heap[r->nheap++] = (struct hent){c->chunks[0].first_seq, c};
        i = j;
    }
    for (size_t i = r->nheap / 2 + 1; i-- > 0;)
        if (i < r->nheap)
            sift_down(r, i);
    return true;
}

struct gmt_reader *gmt_reader_open(const char *path, char *err, size_t errlen)
{
    struct gmt_reader *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->fd = -1;
    r->path = strdup(path);
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (r->fd < 0) {
        fail(r, "cannot open: %s", strerror(errno));
    } else if (fstat(r->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(r, "not a regular file");
    } else if ((r->size = (uint64_t)st.st_size) < sizeof r->hdr) {
        fail(r, r->size == 0 ? "empty file" : "file too short for a trace "
                                              "header (truncated?)");
    } else if (!gmt_reader_pread(r->fd, &r->hdr, sizeof r->hdr, 0)) {
        fail(r, "cannot read the header");
    } else if (check_header(r)) {
        r->cs = r->hdr.chunk_size;
        if (r->size < r->hdr.header_size)
            fail(r, "trace is truncated inside its header");
        else if (index_chunks(r))
            gmt_ahead_start(r);
    }
    if (r->failed) {
        snprintf(err, errlen, "%s", r->err);
        gmt_reader_close(r);
        return NULL;
    }
    return r;
}

/* ---- decoding -------------------------------------------------------- */

#define GET(var)                                                              \
    do {                                                                      \
        if (p < end && *p < 0x80) { /* most fields fit one byte */            \
            (var) = *p++;                                                     \
        } else if ((p = gmt_get_varint(p, end, &(var))) == NULL) {            \
            goto bad;                                                         \
        }                                                                     \
    } while (0)
/* An address field: a delta against register A or B, as gmt_addr_reg
 * says for this record (rec->kind, api and dir are decoded before). */
#define GET_ADDR(which, out)                                                  \
    do {                                                                      \
        int64_t d_;                                                           \
        uint64_t *reg_ = gmt_addr_reg(kind, rec->api, rec->dir, which)        \
                             ? &c->addr2 : &c->addr;                          \
        if ((p = gmt_get_svarint(p, end, &d_)) == NULL)                       \
            goto bad;                                                         \
        *reg_ += (uint64_t)d_;                                                \
        (out) = *reg_;                                                        \
    } while (0)
#define GET_BYTE(var)                                                         \
    do {                                                                      \
        if (p >= end)                                                         \
            goto bad;                                                         \
        (var) = *p++;                                                         \
    } while (0)
/* The decoder of each field encoding of GMT_RECORD_BODIES (gmt_format.h),
 * into the record's member `f`. */
#define DEC_BYTE(f) GET_BYTE(rec->f);
#define DEC_ADDR(f) GET_ADDR(0, rec->f);
#define DEC_ADDR2(f) GET_ADDR(1, rec->f);
#define DEC_VARINT(f) GET(rec->f);
#define DEC_SVARINT(f)                                                        \
    do {                                                                      \
        int64_t s_;                                                           \
        if ((p = gmt_get_svarint(p, end, &s_)) == NULL)                       \
            goto bad;                                                         \
        rec->f = s_;                                                          \
    } while (0);
#define DEC_STACK(f)                                                          \
    do {                                                                      \
        GET(v);                                                               \
        rec->f = (uint32_t)v;                                                 \
        if (v > UINT32_MAX)                                                   \
            goto bad;                                                         \
    } while (0);
#define DEC_FIELD(enc, evf, recf) DEC_##enc(recf)
#define DEC_KIND(k, fields)                                                   \
    case GMT_K_##k:                                                           \
        fields break;

static bool load(struct gmt_reader *r, struct cursor *c)
{
    const struct chunk_ref *ref = &c->chunks[c->next++];
    c->chunk_index = ref->index;
    if ((c->pc = gmt_ahead_take(r, ref)) != NULL) {
        c->i = 0;
        c->pc_done = false;
        if (c->pc->read_failed || c->pc->no_memory) {
            if (c->pc->no_memory)
                fail(r, "out of memory");
            else
                fail(r, "cannot read chunk %llu", (unsigned long long)ref->index);
            return false;
        }
        return true;
    }
    if (c->buf == NULL && (c->buf = malloc(r->cs)) == NULL) {
        fail(r, "out of memory");
        return false;
    }
    uint64_t off = r->hdr.header_size + ref->index * r->cs;
    if (!gmt_reader_pread(r->fd, c->buf, ref->used, off)) {
        fail(r, "cannot read chunk %llu", (unsigned long long)ref->index);
        return false;
    }
    c->pos = GMT_CHUNK_HEADER_SIZE;
    c->end = ref->used;
    c->seq = ref->first_seq;
    c->time = ref->first_time;
    c->addr = c->addr2 = c->stream = 0;
    c->device = 0;
    return true;
}

/* A malformed record: nothing after it in its chunk can be found again
 * (records have no markers), the rest of the chunk is skipped, and the
 * stream goes on with the thread's next chunk (each chunk starts its
 * registers afresh). */
static void damaged(struct gmt_reader *r, struct cursor *c, const char *what)
{
    r->damaged_chunks++;
    r->damaged_bytes += c->end - c->pos;
    note_damage(r, "chunk %llu, byte %zu: %s", (unsigned long long)c->chunk_index,
                c->pos, what);
    c->pos = c->end;
}

bool gmt_reader_peek(const struct cursor *c, uint64_t *seq)
{
    const uint8_t *p = c->buf + c->pos + 1, *end = c->buf + c->end;
    uint64_t d;
    if (p < end && *p < 0x80) {
        *seq = c->seq + *p;
        return true;
    }
    if (p > end || gmt_get_varint(p, end, &d) == NULL)
        return false;
    *seq = c->seq + d;
    return true;
}

/* A decoded-ahead chunk's damage, said as reading it here would have:
 * at the record where it stopped. */
static void ahead_damaged(struct gmt_reader *r, struct cursor *c, const char *what)
{
    c->pos = c->pc->fail_pos;
    c->end = c->pc->end;
    damaged(r, c, what);
    c->pc_done = true;
}

/* Peek at the next record's sequence number (the cursor's heap key)
 * without consuming it. false: malformed (the rest of the chunk is
 * skipped: damaged), or a fatal error (r->failed). */
static bool peek_seq(struct gmt_reader *r, struct cursor *c, uint64_t *seq)
{
    struct ahead_chunk *pc = c->pc;
    if (pc) {
        if (c->i < pc->n) {
            *seq = pc->recs[c->i].seq;
            return true;
        }
        if (pc->damaged && !pc->peek_failed) {
            *seq = pc->fail_seq;
            return true;
        }
        ahead_damaged(r, c, "malformed record");
        return false;
    }
    if (gmt_reader_peek(c, seq))
        return true;
    damaged(r, c, "malformed record");
    return false;
}

/* Records left in the cursor's chunk. */
static bool more(const struct cursor *c)
{
    if (c->pc)
        return !c->pc_done && (c->i < c->pc->n || c->pc->damaged);
    return c->pos < c->end;
}

const char *gmt_reader_decode(struct cursor *c, struct gmt_rec *rec)
{
    const uint8_t *start = c->buf + c->pos, *p = start;
    const uint8_t *end = c->buf + c->end;
    uint64_t v, dseq, dtime;
    rec->api = rec->dir = 0;
    rec->ext = 0;
    rec->result = 0;
    rec->stack = 0;
    rec->addr = rec->addr2 = rec->size = rec->size2 = rec->value = rec->flags = 0;
    memset(rec->v, 0, sizeof rec->v); /* nothing of the record before it stays */
    rec->priority = 0;
    rec->payload = NULL;
    rec->len = 0;
    uint8_t tag = *p++;
    unsigned kind = tag & GMT_TAG_KIND_MASK;
    if (kind == GMT_K_INVALID || (kind > GMT_K_CORE_MAX && kind != GMT_K_EXT))
        return "unknown record kind";
    GET(dseq);
    GET(dtime);
    c->seq += dseq;
    c->time += dtime;
    if (tag & GMT_TAG_DEVICE) {
        GET(v);
        if (v > MAX_DEVICE)
            goto bad;
        c->device = (uint32_t)v;
    }
    if (tag & GMT_TAG_STREAM)
        GET(c->stream);
    if (tag & GMT_TAG_ERR) {
        GET(v);
        if (v > UINT32_MAX)
            goto bad;
        rec->result = (uint32_t)v;
    }
    rec->kind = (uint8_t)kind;
    rec->seq = c->seq;
    rec->time = c->time;
    rec->thread = c->thread;
    rec->device = c->device;
    rec->stream = c->stream;
    switch (kind) {
        GMT_RECORD_BODIES(DEC_KIND, DEC_FIELD)
    case GMT_K_EXT:
        GET(v);
        if (v > UINT32_MAX)
            goto bad;
        rec->ext = (uint32_t)v;
        GET(v);
        if (v > (uint64_t)(end - p))
            goto bad;
        rec->payload = p;
        rec->len = (size_t)v;
        p += v;
        break;
    }
    c->pos += (size_t)(p - start);
    return NULL;
bad:
    return kind == GMT_K_EXT ? "malformed extension record" : "malformed event record";
}

/* The cursor's next record into *rec. false: malformed (the rest of the
 * chunk is skipped: damaged). */
static bool decode(struct gmt_reader *r, struct cursor *c, struct gmt_rec *rec)
{
    struct ahead_chunk *pc = c->pc;
    if (pc) {
        if (c->i < pc->n) {
            *rec = pc->recs[c->i++];
            return true;
        }
        ahead_damaged(r, c, pc->decode_what);
        return false;
    }
    const char *what = gmt_reader_decode(c, rec);
    if (what)
        damaged(r, c, what);
    return what == NULL;
}

/* After a record was taken from the top cursor: key it by its next
 * record, or by its next chunk, or take it off the heap. */
static bool rekey_top(struct gmt_reader *r, struct cursor *c)
{
    if (more(c)) {
        /* one cursor left (the heap only shrinks): its order is its own */
        if (r->nheap == 1)
            return true;
        if (peek_seq(r, c, &r->heap[0].key)) {
            sift_down(r, 0);
            return true;
        }
        if (r->failed)
            return false;
        /* damaged: the chunk is done */
    }
    if (c->pc) {
        gmt_ahead_give_back(r, c->pc);
        c->pc = NULL;
    }
    if (c->next < c->nchunks) {
        c->loaded = false;
        r->heap[0].key = c->chunks[c->next].first_seq;
    } else {
        free(c->buf);
        c->buf = NULL;
        heap_pop_top(r);
        return true;
    }
    sift_down(r, 0);
    return true;
}

int gmt_reader_next(struct gmt_reader *r, struct gmt_rec *rec)
{
    while (!r->failed && r->nheap > 0) {
        struct cursor *c = r->heap[0].c;
        if (!c->loaded) {
            if (!load(r, c))
                return -1;
            c->loaded = true;
            if (!peek_seq(r, c, &r->heap[0].key)) {
                if (r->failed || !rekey_top(r, c))
                    return -1;
                continue;
            }
            sift_down(r, 0);
            continue;
        }
        if (!decode(r, c, rec)) {
            if (r->failed || !rekey_top(r, c))
                return -1;
            continue;
        }
        if (rec->payload) {
            memcpy(r->scratch, rec->payload, rec->len);
            rec->payload = r->scratch;
        }
        if (!rekey_top(r, c))
            return -1;
        return 1;
    }
    return r->failed ? -1 : 0;
}

bool gmt_reader_damage(const struct gmt_reader *r, char *buf, size_t len)
{
    if (!r->bad_chunks && !r->damaged_chunks && !r->tail_bytes)
        return false;
    size_t n = 0;
    const char *sep = "";
#define ADD(...)                                                              \
    do {                                                                      \
        int k_ = snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__);      \
        n += k_ > 0 ? (size_t)k_ : 0;                                         \
        sep = "; ";                                                           \
    } while (0)
    if (r->bad_chunks)
        ADD("%s%llu damaged chunk%s left out", sep, (unsigned long long)r->bad_chunks,
            r->bad_chunks == 1 ? "" : "s");
    if (r->damaged_chunks)
        ADD("%sthe rest of %llu chunk%s after a malformed record (%llu bytes)", sep,
            (unsigned long long)r->damaged_chunks, r->damaged_chunks == 1 ? "" : "s",
            (unsigned long long)r->damaged_bytes);
    if (r->tail_bytes)
        ADD("%sa partial chunk at the end (%llu bytes)", sep,
            (unsigned long long)r->tail_bytes);
    ADD("; first: %s", r->first_damage);
#undef ADD
    return true;
}

const char *gmt_reader_error(const struct gmt_reader *r)
{
    return r->err;
}

const struct gmt_file_header *gmt_reader_header(const struct gmt_reader *r)
{
    return &r->hdr;
}

bool gmt_lost(const struct gmt_file_header *h, char *buf, size_t len)
{
    if (!h->lost_events && !h->lost_records && !h->lost_stacks)
        return false;
    size_t n = 0;
#define ADD(...)                                                              \
    do {                                                                      \
        int k_ = snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__);      \
        n += k_ > 0 ? (size_t)k_ : 0;                                         \
    } while (0)
    /* what: "N events, M other records and the stacks of S events" */
    uint64_t what[3] = {h->lost_events, h->lost_records, h->lost_stacks};
    int parts = (what[0] > 0) + (what[1] > 0) + (what[2] > 0), done = 0;
    ADD("the recorder lost ");
    for (int i = 0; i < 3; i++) {
        if (!what[i])
            continue;
        if (done)
            ADD(done == parts - 1 ? " and " : ", ");
        unsigned long long v = (unsigned long long)what[i];
        if (i == 0)
            ADD("%llu event%s", v, v == 1 ? "" : "s");
        else if (i == 1)
            ADD("%llu %srecord%s", v, what[0] ? "other " : "", v == 1 ? "" : "s");
        else
            ADD("the stack%s of %llu event%s", v == 1 ? "" : "s", v, v == 1 ? "" : "s");
        done++;
    }
    /* why: every cause the recorder saw */
    const char *sep = ": ";
    if (h->lost_why & GMT_LOST_FILE) {
        if (h->lost_errno)
            ADD("%sthe trace file could not grow (%s)", sep, strerror(h->lost_errno));
        else
            ADD("%sthe trace file could not grow", sep);
        sep = "; ";
    }
    if (h->lost_why & GMT_LOST_CUT) {
        ADD("%sanother process truncated the trace file", sep);
        sep = "; ";
    }
    if (h->lost_why & GMT_LOST_STACK_CAP) {
        ADD("%sGPUMEMTRACE_MAX_STACKS distinct stacks were reached", sep);
        sep = "; ";
    }
    if (h->lost_why & GMT_LOST_TOO_LARGE) {
        ADD("%sa record was larger than a chunk (GPUMEMTRACE_CHUNK_KB)", sep);
        sep = "; ";
    }
    if (h->lost_why & GMT_LOST_OTHER) {
        ADD("%sthe recorder failed (out of memory; said on the program's stderr)", sep);
        sep = "; ";
    }
#undef ADD
    return true;
}

bool gmt_reader_cut(const struct gmt_reader *r)
{
    return !(r->hdr.flags & GMT_FLAG_CLOSED);
}

uint64_t gmt_reader_file_size(const struct gmt_reader *r)
{
    return r->size;
}

uint64_t gmt_reader_chunks(const struct gmt_reader *r)
{
    return r->nrefs;
}

const char *gmt_reader_path(const struct gmt_reader *r)
{
    return r->path;
}

void gmt_reader_close(struct gmt_reader *r)
{
    if (r == NULL)
        return;
    gmt_ahead_stop(r); /* and every chunk decoded ahead, the cursors' too */
    for (size_t i = 0; i < r->ncur; i++)
        free(r->cur[i].buf);
    if (r->fd >= 0)
        close(r->fd);
    free(r->cur);
    free(r->heap);
    free(r->refs);
    free(r->scratch);
    free(r->path);
    free(r);
}
