/* whatif_lanes.h - the feed's requests carried to the models: what
 * whatif_feed.c and whatif_lanes.c share (whatif.h has the feed).
 *
 * The feed turns the trace's records into requests (struct wi_op) and
 * numbers the live ones (wi_req.ref); the lanes take the requests to the
 * models a batch at a time, and keep each policy's side of the live
 * requests: whether its model holds one and the model's id for it.
 */
#ifndef GMT_WHATIF_LANES_H
#define GMT_WHATIF_LANES_H

#include "whatif.h"

/* A request as every model gets it; or, WI_OP_OUTSIDE, what the device
 * holds outside the models from now on (in size). */
enum { WI_OP_ALLOC, WI_OP_FREE, WI_OP_OUTSIDE };
struct wi_op {
    uint8_t kind;
    uint16_t dev;
    uint32_t ref;          /* the live request (wi_req.ref) */
    uint64_t size, stream; /* WI_OP_ALLOC */
};
/* Where a WI_OP_ALLOC was made: read only when a model runs out of
 * memory on it, so kept apart from the requests the models read. */
struct wi_where {
    uint64_t seq, time;
    uint32_t stack;
};

/* Lanes for the feed's policies, with up to w->workers threads to run
 * them (fewer where they cannot be started); NULL when out of host
 * memory. Made once the feed's policies and its first device are. */
struct wi_lanes *wi_lanes_new(struct wi_feed *w);
/* A number for a new live request; false when out of host memory. */
bool wi_lanes_ref(struct wi_lanes *l, uint32_t *ref);
/* ref's request let go (its WI_OP_FREE pushed first): free to be used again. */
void wi_lanes_unref(struct wi_lanes *l, uint32_t ref);
/* A request for the models, in the trace's order (at: a WI_OP_ALLOC's
 * where, else NULL). */
void wi_lanes_push(struct wi_lanes *l, const struct wi_op *op, const struct wi_where *at);
/* Every request pushed so far run by the models, and they idle. */
void wi_lanes_flush(struct wi_lanes *l);
/* Flushed, the workers stopped, and everything let go. */
void wi_lanes_free(struct wi_lanes *l);

#endif /* GMT_WHATIF_LANES_H */
