/* export.h - `gpumemreport export`: a trace in another tool's format.
 *
 * cmd_export.c parses the options, loads the trace (replay and
 * symbolizer: common.h) and opens the output; one export_<format>.c per
 * format writes it. Writers stream: what they hold is proportional to the
 * live allocations, segments and distinct stacks, never to the trace's
 * length (a second pass over the trace gives the events in order). Each
 * returns 0, or -1 after writing one line to err; a failed write is found
 * by the caller (ferror on the output).
 *
 * export_common.c holds what several writers share: the user frames of a
 * stack as structured frames, a table of live allocations by address, and
 * the moment of an event on the wall clock.
 */
#ifndef GMT_EXPORT_H
#define GMT_EXPORT_H

#include <stdio.h>

#include "common.h"

int export_memviz(struct loaded *l, FILE *out, char *err, size_t errlen);
int export_perfetto(struct loaded *l, FILE *out, char *err, size_t errlen);
int export_speedscope(struct loaded *l, FILE *out, char *err, size_t errlen);
int export_pprof(struct loaded *l, FILE *out, char *err, size_t errlen);

/* ---- export_common.c --------------------------------------------------- */

#define EXPORT_MAX_FRAMES 512

/* The user frames of stack `stack` (a site's id: a backward pairing is
 * followed, backward.h), innermost first: native frames past the CUDA
 * runtime's and the tracer's own, up to the interpreter when the stack has
 * Python frames, then the Python frames. Strings live as long as the
 * symbolizer. raw (NULL, or room for max): the recorded frame each came
 * from; a function inlined there, after the first, has ip 0 and module -2
 * (it belongs to the frame before it), a Python frame ip 0 and module -1.
 * Returns their number (0: no stack). */
int export_frames(struct loaded *l, uint32_t stack, struct sym *out, struct gmt_frame *raw,
                  int max);
/* The name a frame shows: function, else "module+0xoffset" (in buf of at
 * least 64 bytes when made). */
const char *export_frame_name(const struct sym *f, char *buf, size_t len);

/* Live allocations by address (open addressing, deletion by backward
 * shift: no tombstones, so a churning trace never fills the table). */
struct ex_live {
    uint64_t addr;   /* 0: empty */
    uint64_t size;   /* requested */
    uint64_t block;  /* bytes the block spans */
    uint64_t stream;
    uint32_t stack;
    uint16_t device;
    uint8_t flags;   /* EX_* */
};
enum {
    EX_POOLED = 1,   /* a block inside a segment (the pool's or PyTorch's) */
    EX_PENDING = 2,  /* freed, not yet reusable */
    EX_BACKING = 4,  /* CUDA memory under PyTorch's segments: no block */
    EX_HOST = 8,     /* pinned host memory */
    EX_FW = 16,      /* PyTorch's block */
};
struct ex_table {
    struct ex_live *slot;
    size_t cap, n;
    bool nomem;
};
struct ex_live *ex_find(struct ex_table *t, uint64_t addr);
/* The entry for addr, made empty if new; NULL when memory ran out. */
struct ex_live *ex_put(struct ex_table *t, uint64_t addr);
void ex_del(struct ex_table *t, struct ex_live *e);
void ex_free(struct ex_table *t);

/* Is an allocation of api `api` host memory (pinned, host-located)? */
bool export_host_api(unsigned api);
/* Does the replay count api's allocations inside segments (pooled)? */
bool export_pooled(const struct replay *r, unsigned api);

/* A record's time in ns since the trace began (0 before it). */
uint64_t export_rel_ns(const struct replay *r, uint64_t t);

#endif /* GMT_EXPORT_H */
