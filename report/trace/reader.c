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
 * A chunk's records are decoded into packed words (reader_internal.h),
 * by decoding threads ahead of the merge (reader_ahead.c) or, reading
 * alone, by the merge a batch at a time; the merge unpacks each into the
 * caller's struct gmt_rec. A one-thread trace, or what is left of a trace
 * once one thread remains, skips the merge.
 *
 * Everything read from the file is checked before it is used: lengths
 * against the chunk, varints against their bounds, kinds against the
 * version. A bad byte ends reading with a message naming the chunk and the
 * offset; it can never make the reader loop, over-read or over-allocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
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

static inline void sift_down(struct gmt_reader *r, size_t i)
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
    if (!r->cur || !r->heap) {
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

/* Decoding runs on the decoding threads (reader_ahead.c) or, reading
 * alone, on the merge's; either way a chunk at a time, into the packed
 * records of reader_internal.h. The registers live in locals while a
 * chunk decodes: stored through s, the compiler would reload them after
 * every word written. */

/* A varint of up to 8 bytes (56-bit values: nearly every field) from
 * one 8-byte load: the first byte without the continuation bit ends it,
 * and three steps of shifts pack its 7-bit groups. Inline at every field:
 * as a call (gmt_get_varint, which this falls back on near the end of
 * the chunk and for longer ones) it cost a third of decoding. */
static inline __attribute__((always_inline)) const uint8_t *
get_varint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    if (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t stop = ~x & 0x8080808080808080ull;
        if (stop) {
            uint64_t m = x & (stop ^ (stop - 1)) & 0x7f7f7f7f7f7f7f7full;
            m = (m & 0x007f007f007f007full) | ((m & 0x7f007f007f007f00ull) >> 1);
            m = (m & 0x00003fff00003fffull) | ((m & 0x3fff00003fff0000ull) >> 2);
            m = (m & 0x000000000fffffffull) | ((m & 0x0fffffff00000000ull) >> 4);
            *out = m;
            return p + ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
        }
    }
    return gmt_get_varint(p, end, out);
}

#define GET(var)                                                              \
    do {                                                                      \
        if (p < end && *p < 0x80) { /* most fields fit one byte */            \
            (var) = *p++;                                                     \
        } else if ((p = get_varint(p, end, &(var))) == NULL) {                \
            goto bad;                                                         \
        }                                                                     \
    } while (0)
/* An address field: a delta against register A or B, as gmt_addr_reg
 * says for this record (its kind, api and dir are decoded before). */
#define GET_ADDR(which)                                                       \
    do {                                                                      \
        uint64_t z_;                                                          \
        GET(z_);                                                              \
        uint64_t *reg_ = &reg[gmt_addr_reg(kind, api, dir, which)];           \
        *reg_ += (uint64_t)gmt_unzigzag(z_);                                  \
        *w++ = *reg_;                                                         \
    } while (0)
/* The decoder of each field encoding of GMT_RECORD_BODIES (gmt_format.h):
 * bytes (api, dir) and the stack go to word 0, the rest a word each. */
#define DEC_BYTE(f)                                                           \
    do {                                                                      \
        if (p >= end)                                                         \
            goto bad;                                                         \
        f = *p++;                                                             \
    } while (0);
#define DEC_ADDR(f) GET_ADDR(0);
#define DEC_ADDR2(f) GET_ADDR(1);
#define DEC_VARINT(f) GET(*w); w++;
#define DEC_SVARINT(f) GET(*w); *w = (uint64_t)gmt_unzigzag(*w); w++;
#define DEC_STACK(f)                                                          \
    do {                                                                      \
        GET(high);                                                            \
        if (high > UINT32_MAX)                                                \
            goto bad;                                                         \
    } while (0);
#define DEC_FIELD(enc, evf, recf) DEC_##enc(recf)
#define DEC_KIND(k, fields)                                                   \
    case GMT_K_##k:                                                           \
        fields break;

/* The sequence number that the header of the record at p gives, for a
 * record that does not decode: the merge keys its cursor by it. */
static bool peek_at(const uint8_t *p, const uint8_t *end, uint64_t seq, uint64_t *out)
{
    uint64_t d;
    p++;
    if (p < end && *p < 0x80) {
        *out = seq + *p;
        return true;
    }
    if (p > end || gmt_get_varint(p, end, &d) == NULL)
        return false;
    *out = seq + d;
    return true;
}

static bool room(struct dchunk *d)
{
    if (d->cap - d->nw >= REC_WORDS)
        return true;
    size_t cap = d->cap ? 2 * d->cap : 4096;
    uint64_t *w = realloc(d->w, cap * sizeof *w);
    if (w == NULL) {
        d->no_memory = true;
        return false;
    }
    d->w = w;
    d->cap = cap;
    return true;
}

/* Where decoding stopped: at the record at start, malformed. */
static void stopped(struct dchunk *d, const struct dstate *s, const uint8_t *start,
                    uint64_t seq, const char *what)
{
    d->damaged = true;
    d->fail_pos = (size_t)(start - s->buf);
    d->peek_failed = !peek_at(start, s->buf + s->end, seq, &d->fail_seq);
    d->decode_what = what;
}

bool gmt_decode_records(struct dstate *s, struct dchunk *d, size_t max)
{
    const uint8_t *const buf = s->buf, *end = buf + s->end, *p = buf + s->pos;
    uint64_t seq = s->seq, time = s->time, reg[2] = {s->addr, s->addr2};
    d->n = d->nw = 0;
    d->damaged = d->peek_failed = false;
    d->end = s->end;
    bool ok = true;
    while (p < end && d->n < max) {
        if (!(ok = room(d)))
            break;
        const uint8_t *start = p;
        uint64_t *w0 = d->w + d->nw, *w = w0 + 3, v, dseq, dtime, high = 0;
        unsigned tag = *p++, kind = tag & GMT_TAG_KIND_MASK, api = 0, dir = 0;
        const char *what = "unknown record kind";
        if (kind == GMT_K_INVALID || (kind > GMT_K_CORE_MAX && kind != GMT_K_EXT))
            goto bad;
        what = kind == GMT_K_EXT ? "malformed extension record" : "malformed event record";
        GET(dseq);
        GET(dtime);
        if (tag & GMT_TAG_DEVICE) {
            GET(v);
            if (v > MAX_DEVICE)
                goto bad;
            *w++ = v;
        }
        if (tag & GMT_TAG_STREAM)
            GET(*w++);
        if (tag & GMT_TAG_ERR) {
            GET(v);
            if (v > UINT32_MAX)
                goto bad;
            *w++ = v;
        }
        switch (kind) {
            GMT_RECORD_BODIES(DEC_KIND, DEC_FIELD)
        case GMT_K_EXT:
            GET(high);
            if (high > UINT32_MAX)
                goto bad;
            GET(v);
            if (v > (uint64_t)(end - p))
                goto bad;
            *w++ = (uint64_t)(p - buf) | v << 32;
            p += v;
            break;
        }
        seq += dseq;
        time += dtime;
        w0[0] = tag | api << 8 | dir << 16 | high << 32;
        w0[1] = seq;
        w0[2] = time;
        d->nw = (size_t)(w - d->w);
        d->n++;
        continue;
    bad:
        stopped(d, s, start, seq, what);
        p = end; /* nothing after it can be found again */
        break;
    }
    /* the padding unpack reads past the last record */
    if (ok && (ok = room(d)))
        memset(d->w + d->nw, 0, BODY_MAX * sizeof *d->w);
    s->pos = (size_t)(p - buf);
    s->seq = seq;
    s->time = time;
    s->addr = reg[0];
    s->addr2 = reg[1];
    return ok;
}

/* ---- the merge ------------------------------------------------------- */

/* Where each kind's body words go in a struct gmt_rec, and how many
 * there are: a table, not a switch on the kind. The kinds come in no
 * order the processor can guess, and a switch's mispredicted jump cost
 * more than the rest of the record; the decoder pays it once, the merge
 * need not again. Every such member is 64 bits wide. */
#define OFF_BYTE(f)
#define OFF_STACK(f)
#define OFF_ADDR(f) offsetof(struct gmt_rec, f),
#define OFF_ADDR2(f) OFF_ADDR(f)
#define OFF_VARINT(f) OFF_ADDR(f)
#define OFF_SVARINT(f) OFF_ADDR(f)
#define OFF_FIELD(enc, evf, recf) OFF_##enc(recf)
/* Words read past a body's own go to `len`, which is set after them. A
 * row is the body's offsets and then BODY_MAX of PAST, of which those
 * up to BODY_MAX are read. */
#define PAST offsetof(struct gmt_rec, len)
#define OFF_KIND(k, fields) [GMT_K_##k] = {fields PAST, PAST, PAST, PAST, PAST, PAST},
static const uint8_t body_off[GMT_K_EXT + 1][2 * BODY_MAX] = {
    GMT_RECORD_BODIES(OFF_KIND, OFF_FIELD)[GMT_K_EXT] = {PAST, PAST, PAST, PAST, PAST, PAST}};
#define CNT_BYTE(f)
#define CNT_STACK(f)
#define CNT_ADDR(f) +1
#define CNT_ADDR2(f) +1
#define CNT_VARINT(f) +1
#define CNT_SVARINT(f) +1
#define CNT_FIELD(enc, evf, recf) CNT_##enc(recf)
#define CNT_KIND(k, fields) [GMT_K_##k] = 0 fields,
static const uint8_t body_words[GMT_K_EXT + 1] = {
    GMT_RECORD_BODIES(CNT_KIND, CNT_FIELD)};
#define WIDE_BYTE(f)
#define WIDE_STACK(f)
#define WIDE_ADDR(f) _Static_assert(sizeof ((struct gmt_rec *)0)->f == 8, #f " is 64 bits");
#define WIDE_ADDR2(f) WIDE_ADDR(f)
#define WIDE_VARINT(f) WIDE_ADDR(f)
#define WIDE_SVARINT(f) WIDE_ADDR(f)
#define WIDE_FIELD(enc, evf, recf) WIDE_##enc(recf)
#define WIDE_KIND(k, fields) fields
GMT_RECORD_BODIES(WIDE_KIND, WIDE_FIELD)
_Static_assert(sizeof ((struct gmt_rec *)0)->len == 8, "len is 64 bits");

/* The cursor's next record, unpacked into *rec: nothing of the record
 * before it stays. */
static inline void unpack(struct cursor *c, struct gmt_rec *rec)
{
    const uint64_t *p = c->p;
    uint64_t w0 = p[0];
    unsigned tag = REC_TAG(w0), kind = tag & GMT_TAG_KIND_MASK;
    bool ext = kind == GMT_K_EXT;
    /* field by field: a compound literal zeroes the whole struct with
     * `rep stos`, whose start-up costs more than the record */
    rec->kind = (uint8_t)kind;
    rec->api = REC_API(w0);
    rec->dir = REC_DIR(w0);
    rec->ext = ext ? REC_HIGH(w0) : 0;
    rec->stack = ext ? 0 : REC_HIGH(w0);
    rec->seq = p[1];
    rec->time = p[2];
    rec->thread = c->thread;
    rec->addr = rec->addr2 = rec->size = rec->size2 = rec->value = rec->flags = 0;
    rec->v[0] = rec->v[1] = rec->v[2] = rec->v[3] = rec->v[4] = rec->v[5] = 0;
    rec->priority = 0;
    p += 3;
    if (tag & GMT_TAG_DEVICE)
        c->device = *p++;
    if (tag & GMT_TAG_STREAM)
        c->stream = *p++;
    rec->result = tag & GMT_TAG_ERR ? (uint32_t)*p++ : 0;
    rec->device = (uint32_t)c->device;
    rec->stream = c->stream;
    /* BODY_MAX words whatever the kind, without a branch (the records
     * are followed by as many words of padding): those past its body go
     * to len, set after them */
    uint64_t off;
    memcpy(&off, body_off[kind], sizeof off); /* the row's first 8 */
    /* all read, into registers, before any is stored (not through an
     * array: the compiler copied it to the stack with 16-byte stores and
     * read it back 8 bytes at a time, which stalls the load) */
    uint64_t b0 = p[0], b1 = p[1], b2 = p[2], b3 = p[3], b4 = p[4], b5 = p[5];
    char *to = (char *)rec;
    memcpy(to + (uint8_t)off, &b0, sizeof b0);
    memcpy(to + (uint8_t)(off >> 8), &b1, sizeof b1);
    memcpy(to + (uint8_t)(off >> 16), &b2, sizeof b2);
    memcpy(to + (uint8_t)(off >> 24), &b3, sizeof b3);
    memcpy(to + (uint8_t)(off >> 32), &b4, sizeof b4);
    memcpy(to + (uint8_t)(off >> 40), &b5, sizeof b5);
    _Static_assert(BODY_MAX == 6, "six words stored");
    /* EXT: its one word, the payload's offset and length */
    rec->payload = ext ? c->dc->buf + (uint32_t)p[0] : NULL;
    rec->len = ext ? REC_HIGH(p[0]) : 0;
    c->p = p + body_words[kind] + ext;
}

/* Reading alone: the cursor's next batch of records. */
#define BATCH 256

static bool next_batch(struct gmt_reader *r, struct cursor *c)
{
    bool ok = gmt_decode_records(&c->raw, &c->own, BATCH);
    c->p = c->own.w;
    c->left = c->own.n;
    if (!ok)
        fail(r, "out of memory");
    return ok;
}

static bool load(struct gmt_reader *r, struct cursor *c)
{
    const struct chunk_ref *ref = &c->chunks[c->next++];
    c->chunk_index = ref->index;
    c->device = c->stream = 0;
    c->done = false;
    struct dchunk *d = gmt_ahead_take(r, ref);
    if (d != NULL) {
        c->dc = d;
        c->ahead = true;
        c->p = d->w;
        c->left = d->n;
        if (d->no_memory)
            fail(r, "out of memory");
        else if (d->read_failed)
            fail(r, "cannot read chunk %llu", (unsigned long long)ref->index);
        return !r->failed;
    }
    c->dc = &c->own;
    c->ahead = false;
    if (c->own.buf == NULL && (c->own.buf = malloc(r->cs)) == NULL) {
        fail(r, "out of memory");
        return false;
    }
    uint64_t off = r->hdr.header_size + ref->index * r->cs;
    if (!gmt_reader_pread(r->fd, c->own.buf, ref->used, off)) {
        fail(r, "cannot read chunk %llu", (unsigned long long)ref->index);
        return false;
    }
    c->raw = (struct dstate){c->own.buf, GMT_CHUNK_HEADER_SIZE, ref->used,
                             ref->first_seq, ref->first_time, 0, 0};
    return next_batch(r, c);
}

/* A malformed record: nothing after it in its chunk can be found again
 * (records have no markers), the rest of the chunk is skipped, and the
 * stream goes on with the thread's next chunk (each chunk starts its
 * registers afresh). Said when the merge reaches the record, wherever it
 * was decoded. */
static void damaged(struct gmt_reader *r, struct cursor *c, const char *what)
{
    const struct dchunk *d = c->dc;
    c->done = true;
    if (!d->damaged)
        return; /* cannot happen: a chunk's records end at its end or here */
    r->damaged_chunks++;
    r->damaged_bytes += d->end - d->fail_pos;
    note_damage(r, "chunk %llu, byte %zu: %s", (unsigned long long)c->chunk_index,
                d->fail_pos, what);
}

/* The sequence number of the cursor's next record (its heap key), which
 * stays next. false: malformed (the rest of the chunk is skipped:
 * damaged). */
static bool peek_seq(struct gmt_reader *r, struct cursor *c, uint64_t *seq)
{
    if (c->left) {
        *seq = c->p[1];
        return true;
    }
    if (c->dc->damaged && !c->dc->peek_failed) {
        *seq = c->dc->fail_seq;
        return true;
    }
    damaged(r, c, "malformed record");
    return false;
}

/* Records left in the cursor's chunk. */
static bool more(const struct cursor *c)
{
    return c->left > 0 || (c->dc->damaged && !c->done);
}

/* The cursor's next record into *rec. false: malformed (the rest of the
 * chunk is skipped: damaged). */
static bool take(struct gmt_reader *r, struct cursor *c, struct gmt_rec *rec)
{
    if (c->left == 0) {
        damaged(r, c, c->dc->decode_what);
        return false;
    }
    unpack(c, rec);
    /* reading alone: the next batch, from the chunk's bytes (rec's
     * payload points into them; they stay) */
    if (--c->left == 0 && !c->ahead && !c->own.damaged && c->raw.pos < c->raw.end)
        next_batch(r, c);
    return true;
}

/* What the merge is done with goes when the next record is asked for:
 * the record last returned may point into it. One of each kind waits at
 * a time: one found done before it was returned no record. */
static void free_own(struct cursor *c)
{
    free(c->own.buf);
    free(c->own.w);
    c->own.buf = NULL;
    c->own.w = NULL;
    c->own.cap = c->own.nw = c->own.n = 0;
}

static void retire_chunk(struct gmt_reader *r, struct dchunk *d)
{
    if (r->retired)
        gmt_ahead_give_back(r, r->retired);
    r->retired = d;
}

static void retire_own(struct gmt_reader *r, struct cursor *c)
{
    if (r->retired_own)
        free_own(r->retired_own);
    r->retired_own = c;
}

static void release(struct gmt_reader *r)
{
    if (r->retired)
        gmt_ahead_give_back(r, r->retired);
    if (r->retired_own)
        free_own(r->retired_own);
    r->retired = NULL;
    r->retired_own = NULL;
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
    if (c->ahead)
        retire_chunk(r, c->dc);
    c->ahead = false;
    c->dc = NULL;
    c->loaded = false;
    if (c->next < c->nchunks) {
        r->heap[0].key = c->chunks[c->next].first_seq;
        sift_down(r, 0);
    } else {
        retire_own(r, c); /* its buffers: it reads no more */
        heap_pop_top(r);
    }
    return true;
}

/* The merge: the top cursor's record, then the cursor keyed again; a
 * chunk loaded when the cursor reaches it; damage said where it is met. */
static __attribute__((noinline)) int next_merged(struct gmt_reader *r, struct gmt_rec *rec)
{
    release(r);
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
        if (!take(r, c, rec)) {
            if (r->failed || !rekey_top(r, c))
                return -1;
            continue;
        }
        if (!rekey_top(r, c) || r->failed)
            return -1;
        return 1;
    }
    return r->failed ? -1 : 0;
}

int gmt_reader_next(struct gmt_reader *r, struct gmt_rec *rec)
{
    /* The top cursor amid its chunk, more records after this one in it:
     * the record is the trace's next, and the cursor is keyed by the one
     * after it - nothing to load, let go or say. A one-thread trace (or
     * what is left once one thread remains) has nothing to key either.
     * (left > 0 only while the cursor's chunk is loaded.) */
    struct cursor *c = r->heap[0].c;
    if (r->nheap > 0 && c->left > 1 && !r->retired && !r->retired_own && !r->failed) {
        unpack(c, rec);
        c->left--;
        if (r->nheap > 1) {
            r->heap[0].key = c->p[1];
            sift_down(r, 0);
        }
        return 1;
    }
    return next_merged(r, rec);
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
        free_own(&r->cur[i]);
    if (r->fd >= 0)
        close(r->fd);
    free(r->cur);
    free(r->heap);
    free(r->refs);
    free(r->path);
    free(r);
}
