/* reader.h - reading .gmt trace files, one record at a time, in order.
 *
 * The reader merges the per-thread chunk streams of a trace into the one
 * total order the recorder assigned (by sequence number) and decodes each
 * record into a struct gmt_rec. It streams: memory is one chunk buffer per
 * thread that is being read, a few chunks decoded ahead on other threads
 * (GPUMEMREPORT_READ_AHEAD) and a small index of chunk headers, never the
 * length of the trace. Every trace is treated as hostile: any
 * inconsistency ends reading with a message saying where and what, never
 * a crash or a loop.
 */
#ifndef GMT_READER_H
#define GMT_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmt_format.h"

/* One decoded record. Which fields mean something depends on the kind;
 * docs/trace-format.md lists them. */
struct gmt_rec {
    uint8_t kind;      /* GMT_K_* */
    uint8_t api, dir;
    uint32_t ext;      /* GMT_X_* when kind == GMT_K_EXT */
    uint64_t seq, time;
    uint32_t thread;   /* recording thread's index */
    uint32_t device;
    uint64_t stream;
    uint32_t result;   /* cudaError_t; 0 = success */
    uint64_t addr, addr2, size, size2, value, flags;
    uint64_t v[6];     /* SAMPLE and OOM values */
    uint32_t stack;
    int64_t priority;
    const uint8_t *payload; /* EXT payload, valid until the next call */
    size_t len;
};

struct gmt_reader;

/* Open a trace. On failure returns NULL and writes a one-line reason. */
struct gmt_reader *gmt_reader_open(const char *path, char *err, size_t errlen);
/* 1: *rec holds the next record; 0: end of trace; -1: corrupt (see
 * gmt_reader_error). */
int gmt_reader_next(struct gmt_reader *r, struct gmt_rec *rec);
const char *gmt_reader_error(const struct gmt_reader *r);
const struct gmt_file_header *gmt_reader_header(const struct gmt_reader *r);
/* The writer never closed the file: the process died (or is running). */
bool gmt_reader_cut(const struct gmt_reader *r);
/* A damaged or cut trace is read as far as it is intact: a chunk with a
 * bad header is left out, a chunk is read up to a malformed record, a
 * partial chunk at the end of the file is ignored. After reading: true
 * if anything was skipped, with a one-line account in buf. */
bool gmt_reader_damage(const struct gmt_reader *r, char *buf, size_t len);
/* What the recorder could not record (format 1.3 header: a file that
 * could not grow, a stack cap, a cut file): true with a one-line account
 * in buf ("the recorder lost N events ...: why"); false when nothing is
 * known lost (always, for files before 1.3). Works on a replay's copy of
 * the header too. */
bool gmt_lost(const struct gmt_file_header *h, char *buf, size_t len);
uint64_t gmt_reader_file_size(const struct gmt_reader *r);
uint64_t gmt_reader_chunks(const struct gmt_reader *r); /* in use */
const char *gmt_reader_path(const struct gmt_reader *r);
void gmt_reader_close(struct gmt_reader *r);

#endif /* GMT_READER_H */
