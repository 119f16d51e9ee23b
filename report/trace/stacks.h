/* stacks.h - the trace's call stacks, each distinct prefix kept once.
 *
 * Stacks repeat their outer frames: every allocation of a training step
 * runs under the same interpreter and framework frames, and a recursion
 * makes stacks by the million that differ in a few frames each (a hostile trace;
 * tests/progs/stackbomb.c). So the table keeps stacks as paths in a tree:
 * a node is one frame (ip and module) under its caller's node, the
 * outermost frames hang from the root, and a stack is its innermost node.
 * A frame costs 16 bytes once for every stack through it, and a stack 16
 * bytes of its own. Python frames (code and offset) make a tree of their
 * own the same way.
 *
 * The frames are copied out on a lookup, innermost first, into a struct
 * gmt_stack_def the caller holds. The module of a frame is the one mapped
 * at the stack's definition (defs.h): it is part of the node, so a frame
 * at the same address in a library loaded later is another node.
 *
 * Ids come from the trace and are hostile: they key open-addressing
 * tables and size nothing, and the tables' hashes are seeded per run, so
 * a trace cannot be made to pile its stacks into one run of slots. Node and entry counts are 32-bit; a table that
 * would pass that, or that memory runs out for, refuses the stack.
 */
#ifndef GMT_STACKS_H
#define GMT_STACKS_H

#include <stdbool.h>
#include <stdint.h>

#include "gmt_format.h"

struct gmt_frame {
    uint64_t ip;
    int32_t module; /* index into gmt_defs.modules, -1 if in none */
};

struct gmt_pyframe {
    uint32_t code;  /* gmt_pycode_def id */
    int64_t offset; /* instruction offset in bytes; < 0: not started */
};

/* One stack as a lookup copies it out (about 8 KiB: a local, not an
 * array element). */
struct gmt_stack_def {
    uint32_t id;
    uint32_t n;   /* native frames */
    uint32_t npy; /* Python frames */
    struct gmt_frame frames[GMT_MAX_STACK_DEPTH]; /* innermost first */
    struct gmt_pyframe py[GMT_MAX_PY_FRAMES];     /* innermost first */
};

/* Frames shared by prefix. Node 0 is the root; a node's number is its
 * index in node[]. */
struct stack_tree {
    struct stack_node *node;
    uint32_t n, cap;
    uint32_t *index;   /* node numbers by (parent, key, tag); 0: empty */
    uint32_t index_cap; /* a power of two */
    uint32_t seed;     /* the root's hash */
};

struct stack_table {
    struct stack_tree native, python;
    struct stack_entry *entry; /* in definition order */
    uint32_t n, cap;
    uint32_t *index;   /* entry number + 1 by id; 0: empty */
    uint32_t index_cap;
    uint64_t seed;
};

/* Keep stack `id` (frames innermost first, as in the record). 0: kept,
 * 1: the id was defined already (the first stays), -1: no room (out of
 * memory, or 2^32 nodes). n <= GMT_MAX_STACK_DEPTH, npy <=
 * GMT_MAX_PY_FRAMES. */
int stacks_add(struct stack_table *t, uint32_t id, const struct gmt_frame *f,
               uint32_t n, const struct gmt_pyframe *py, uint32_t npy);
bool stacks_has(const struct stack_table *t, uint32_t id);
/* Copy stack `id` out; false if the table does not have it. */
bool stacks_get(const struct stack_table *t, uint32_t id, struct gmt_stack_def *out);
/* The i-th stack defined (i < t->n), for walking them all. */
void stacks_at(const struct stack_table *t, uint32_t i, struct gmt_stack_def *out);
void stacks_free(struct stack_table *t);

#endif /* GMT_STACKS_H */
