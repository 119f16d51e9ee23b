/* reader_internal.h - the reader's state, shared by reader.c (opening,
 * the merge of the threads' streams, decoding) and reader_ahead.c (chunks
 * decoded ahead on a second thread). Nothing outside those two includes
 * it. */
#ifndef GMT_READER_INTERNAL_H
#define GMT_READER_INTERNAL_H

#include "reader.h"

#define MAX_DEVICE 0xffffu

struct chunk_ref {
    uint64_t index;
    uint64_t first_seq, first_time;
    uint32_t thread, ordinal, used;
};

/* A chunk decoded ahead (reader_ahead.c): its records up to its end, or
 * up to where it is malformed, and what reading it whole would have said
 * there. */
struct ahead_chunk {
    const struct chunk_ref *ref;
    uint8_t *buf;            /* its bytes: the records' payloads point here */
    struct gmt_rec *recs;
    size_t n, cap;
    bool read_failed;        /* pread failed */
    bool no_memory;          /* its records did not fit in memory */
    /* where decoding stopped short (damaged): the record's offset, the
     * sequence number its header gives (when that much is readable), and
     * what a peek at it and decoding it say */
    bool damaged, peek_failed;
    size_t fail_pos, end;
    uint64_t fail_seq;
    const char *decode_what;
    struct ahead_chunk *next; /* on the free list */
};

struct cursor {
    struct chunk_ref *chunks; /* this thread's chunks, in ordinal order */
    size_t nchunks, next;     /* next: the chunk to load next */
    uint8_t *buf;
    size_t pos, end;
    uint64_t chunk_index;     /* for messages */
    uint64_t seq, time, addr, addr2, stream;
    uint32_t device;
    bool loaded;              /* else: keyed by chunks[next].first_seq */
    uint32_t thread;
    /* the loaded chunk, when it was decoded ahead: its records from i on
     * (pc_done: its damage was said, nothing more in it) */
    struct ahead_chunk *pc;
    size_t i;
    bool pc_done;
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
    uint8_t *scratch;
    char err[512];
    bool failed;
    /* salvage: what a damaged or cut trace lost (gmt_reader_damage) */
    uint64_t bad_chunks;     /* chunks skipped whole (bad header, duplicate) */
    uint64_t damaged_chunks; /* chunks read up to a malformed record */
    uint64_t damaged_bytes;  /* bytes skipped in them */
    uint64_t tail_bytes;     /* a partial chunk at the end of the file */
    char first_damage[160];  /* where the first damage was */
    struct ahead *ahead;     /* NULL: every chunk decoded as it is reached */
};

/* reader.c: the record at c's position decoded into *rec and c moved past
 * it; NULL, or what is wrong with it (c not moved). Touches only c. */
const char *gmt_reader_decode(struct cursor *c, struct gmt_rec *rec);
/* The sequence number of the record at c's position; false: unreadable. */
bool gmt_reader_peek(const struct cursor *c, uint64_t *seq);
bool gmt_reader_pread(int fd, void *buf, size_t len, uint64_t off);

/* reader_ahead.c */
void gmt_ahead_start(struct gmt_reader *r);
/* The chunk `ref` decoded ahead, or NULL: decode it here (read-ahead is
 * off, or the chunks were not asked for in the order foreseen - from then
 * on it is off). */
struct ahead_chunk *gmt_ahead_take(struct gmt_reader *r, const struct chunk_ref *ref);
void gmt_ahead_give_back(struct gmt_reader *r, struct ahead_chunk *pc);
void gmt_ahead_stop(struct gmt_reader *r);
/* Chunks handed to the merge decoded ahead so far (the unit test's);
 * fewer than the trace's once read-ahead stopped. */
size_t gmt_ahead_taken(const struct gmt_reader *r);

#endif /* GMT_READER_INTERNAL_H */
