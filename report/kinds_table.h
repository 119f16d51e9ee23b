/* kinds_table.h - the bytes live at the peak by kind of memory: the rules
 * of trace/kinds.h's header applied to the blocks its replay kept
 * (kinds_table.c), as rows for the commands' tables and JSON.
 */
#ifndef GMT_KINDS_TABLE_H
#define GMT_KINDS_TABLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kinds.h"

struct loaded;

enum gmt_mem_kind {
    GMT_KIND_PARAMS,
    GMT_KIND_GRADS,
    GMT_KIND_OPTIM,
    GMT_KIND_ACTS,
    GMT_KIND_TEMPS,
    GMT_KIND_WORKSPACE,
    GMT_KIND_HELD,
    GMT_KIND_OTHER,
    GMT_KIND_COUNT
};

#define KIND_LAYERS 3
struct kind_row {
    const char *name;  /* "parameters and buffers", ... */
    const char *key;   /* JSON: "parameters", ... */
    const char *basis; /* how it is known */
    const char *how;   /* the same in a word or two */
    int64_t bytes;
    uint64_t blocks;
    /* the layers inside libraries that hold most of it (sym_layer), by
     * bytes; blocks made under no layer are not among them */
    struct kind_layer {
        const char *layer;
        int64_t bytes;
        uint64_t blocks;
    } layers[KIND_LAYERS];
    int nlayers;
};

/* The kind of block k of l's snapshot (the rules above). */
enum gmt_mem_kind gmt_kind_of(struct loaded *l, const struct kept *k);

/* The bytes live at the peak by kind (rows in enum order, all of them);
 * false when the replay took no snapshot (no kinds_seq, or no Python
 * stacks to infer from). */
bool gmt_kinds(struct loaded *l, struct kind_row rows[GMT_KIND_COUNT]);

/* The bytes by kind at the event seq (the peak: l->r.peak_requested_seq),
 * from a second replay of l's trace, which is returned: the rows' layer
 * names are its strings, so unload it after them. NULL: no kinds (no
 * Python stacks to infer from, no such event, or an error said). */
struct gmt_common;
struct loaded *gmt_kinds_at(struct loaded *l, const struct gmt_common *c, uint64_t seq,
                            struct kind_row rows[GMT_KIND_COUNT]);
/* The rows as a JSON array, strings safe inside an HTML <script> when
 * html (gmt_json_str_to). */
void gmt_kinds_json(FILE *f, const struct kind_row rows[GMT_KIND_COUNT], bool html);

#endif /* GMT_KINDS_TABLE_H */
