/* reader_internal.h - the reader's state, shared by reader.c (opening,
 * decoding, the merge of the threads' streams) and reader_ahead.c (chunks
 * decoded ahead on other threads). Nothing outside those two and the
 * reader's unit test includes it. */
#ifndef GMT_READER_INTERNAL_H
#define GMT_READER_INTERNAL_H

#include "reader.h"

#define MAX_DEVICE 0xffffu

struct chunk_ref {
    uint64_t index;
    uint64_t first_seq, first_time;
    uint32_t thread, ordinal, used;
};

/* Records decoded, packed for the hand-over to the merge: each is a few
 * 64-bit words, not a struct gmt_rec (176 bytes) - decoding threads write
 * them and the merge reads them, and at tens of millions of records the
 * bytes that cross between the two are what costs.
 *
 *   word 0   bits 0-7 the record's tag (kind and the ERR, STREAM and
 *            DEVICE bits), 8-15 api, 16-23 dir, 32-63 stack id (EXT: the
 *            extension kind)
 *   word 1   sequence number
 *   word 2   time
 *   then     the device (tag DEVICE), the stream (STREAM), the result
 *            (ERR), in that order: the device and stream registers as
 *            they change, the merge keeps them
 *   then     the body's fields that are not bytes or a stack, in the
 *            order of GMT_RECORD_BODIES; EXT: its payload's offset in the
 *            chunk (bits 0-31) and length (32-63)
 *
 * A record is at most REC_WORDS words; no field is longer in words than
 * it was in bytes, so a chunk's records take at most 8 bytes per byte of
 * it. */
#define REC_WORDS 12
/* Body words at most (SAMPLE's six). Unpacking reads this many whatever
 * the kind: the last record is followed by as many words of padding. */
#define BODY_MAX 6
#define REC_TAG(w0) ((unsigned)(w0) & 0xffu)
#define REC_API(w0) ((uint8_t)((w0) >> 8))
#define REC_DIR(w0) ((uint8_t)((w0) >> 16))
#define REC_HIGH(w0) ((uint32_t)((w0) >> 32))

/* Where decoding is in one chunk's bytes: its registers. */
struct dstate {
    const uint8_t *buf;
    size_t pos, end;
    uint64_t seq, time, addr, addr2;
};

/* A chunk's records decoded: all of them when a decoding thread did it,
 * a batch at a time when the merge reads alone. Decoding stops at the
 * first malformed record; what reading it there says is kept, and the
 * merge says it when it gets there, as it would have. */
struct dchunk {
    const struct chunk_ref *ref;
    uint8_t *buf;            /* the chunk's bytes: payloads point here */
    uint64_t *w;             /* its records, packed */
    size_t nw, cap;          /* words in use, allocated */
    size_t n;                /* records */
    bool read_failed;        /* pread failed */
    bool no_memory;          /* its records did not fit in memory */
    /* where decoding stopped short (damaged): the record's offset, the
     * chunk's end, the sequence number the record's header gives (when
     * that much is readable: peek_failed otherwise), what decoding it
     * says */
    bool damaged, peek_failed;
    size_t fail_pos, end;
    uint64_t fail_seq;
    const char *decode_what;
    /* reader_ahead.c's, under its lock */
    bool ready;              /* decoded */
    struct dchunk *next;     /* on the free list */
};

struct cursor {
    struct chunk_ref *chunks; /* this thread's chunks, in ordinal order */
    size_t nchunks, next;     /* next: the chunk to load next */
    uint64_t chunk_index;     /* for messages */
    uint32_t thread;
    bool loaded;              /* else: keyed by chunks[next].first_seq */
    /* the loaded chunk's records: the next at p, `left` of them in dc
     * (done: its damage was said, nothing more in it) */
    struct dchunk *dc;
    const uint64_t *p;
    size_t left;
    bool done;
    bool ahead;               /* dc was decoded ahead: give it back */
    uint64_t device, stream;  /* the registers, as the records change them */
    /* reading alone: the chunk's bytes and where decoding is in them,
     * its records a batch at a time into own */
    struct dstate raw;
    struct dchunk own;
};

/* Heap entries carry their key, so ordering never chases a pointer. */
struct hent {
    uint64_t key; /* seq of the cursor's next record */
    struct cursor *c;
};

struct ahead;

struct gmt_reader {
    int fd;
    char *path;
    struct gmt_file_header hdr;
    uint64_t size;
    uint32_t cs;
    struct chunk_ref *refs;
    size_t nrefs;
    struct cursor *cur;
    size_t ncur;
    struct hent *heap;
    size_t nheap;
    char err[512];
    bool failed;
    /* salvage: what a damaged or cut trace lost (gmt_reader_damage) */
    uint64_t bad_chunks;     /* chunks skipped whole (bad header, duplicate) */
    uint64_t damaged_chunks; /* chunks read up to a malformed record */
    uint64_t damaged_bytes;  /* bytes skipped in them */
    uint64_t tail_bytes;     /* a partial chunk at the end of the file */
    char first_damage[160];  /* where the first damage was */
    struct ahead *ahead;     /* NULL: every chunk decoded as it is reached */
    /* what the merge is done with, let go on the next call (the record
     * last returned may point into it): a chunk decoded ahead, and the
     * buffers of a cursor at the end of its thread's stream */
    struct dchunk *retired;
    struct cursor *retired_own;
};

/* reader.c: decode the records of s's chunk into d (d->n, d->nw from 0),
 * up to max records, the chunk's end, or a malformed record (d->damaged
 * and what reading there says). false: out of memory. Touches only s and
 * d. */
bool gmt_decode_records(struct dstate *s, struct dchunk *d, size_t max);
bool gmt_reader_pread(int fd, void *buf, size_t len, uint64_t off);

/* reader_ahead.c */
void gmt_ahead_start(struct gmt_reader *r);
/* The chunk `ref` decoded ahead, or NULL: decode it here (read-ahead is
 * off, or the chunks were not asked for in the order foreseen - from then
 * on it is off). */
struct dchunk *gmt_ahead_take(struct gmt_reader *r, const struct chunk_ref *ref);
void gmt_ahead_give_back(struct gmt_reader *r, struct dchunk *dc);
void gmt_ahead_stop(struct gmt_reader *r);
/* Chunks handed to the merge decoded ahead so far (the unit test's);
 * fewer than the trace's once read-ahead stopped. */
size_t gmt_ahead_taken(const struct gmt_reader *r);
/* Threads decoding ahead (0: none). */
int gmt_ahead_threads(const struct gmt_reader *r);

#endif /* GMT_READER_INTERNAL_H */
