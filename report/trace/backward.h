/* backward.h - naming the blocks autograd's engine makes by the line that
 * called backward.
 *
 * PyTorch runs a backward pass whose graph is on a GPU on the engine's own
 * thread for that device ("pt_autograd_0", ...), which runs no Python:
 * the gradients it allocates have native frames only, and the Python line
 * that asked for them - `loss.backward()` - is on another thread, blocked
 * in torch.autograd until the engine is done. That thread's last event
 * inside backward (the seed gradient torch.ones_like makes for a scalar
 * loss, in torch.autograd's _make_grads) carries the line.
 *
 * So the replay follows, in the trace's order: the latest allocation whose
 * Python stack is inside torch.autograd's backward or grad (the call) and
 * its thread, until that thread allocates outside backward again (the
 * call returned). An allocation on an engine thread without Python frames
 * while a call is open is counted under a synthetic stack id that stands
 * for the pair (its own stack, the call's stack); the symbolizer names it
 * "the call's line > the node". With no call open (a backward whose seed
 * was passed in, so nothing was allocated on the calling thread) the
 * block keeps its own stack and is named by its node alone.
 */
#ifndef GMT_BACKWARD_H
#define GMT_BACKWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "defs.h"
#include "reader.h"

/* Synthetic ids are GMT_BW_ID | index; the recorder's ids stay below
 * 2^20 (GPUMEMTRACE_MAX_STACKS), so a trace that uses this range is
 * damaged, and its stacks there are only misnamed. */
#define GMT_BW_ID 0xC0000000u

struct bw_state;

/* The stack id the allocation rec is counted under (see above); follows
 * which call is open. *st is made on first use; rec->stack when memory
 * runs out. */
uint32_t gmt_bw_site(struct bw_state **st, const struct gmt_defs *d,
                     const struct gmt_rec *rec);
/* The pair a synthetic id stands for; false if id is not one. */
bool gmt_bw_pair(const struct bw_state *st, uint32_t id, uint32_t *stack,
                 uint32_t *caller);
void gmt_bw_free(struct bw_state *st);
/* The backward call open now, numbered from 1 in the order calls began;
 * 0 when none is (memory kinds: kinds.c). */
uint32_t gmt_bw_open_call(const struct bw_state *st);
/* Is stack id inside a backward call (one of its Python frames a call
 * frame)? */
bool gmt_bw_call_stack(struct bw_state *st, const struct gmt_defs *d, uint32_t id);
/* Is thread index `thread` one of autograd's engine threads? */
bool gmt_bw_engine_thread(struct bw_state *st, const struct gmt_defs *d, uint32_t thread);
/* Is a Python frame of code `name` in `file` torch.autograd's backward or
 * grad (autograd/__init__.py) or _engine_run_backward (autograd/graph.py,
 * PyTorch 2.2+)? */
bool gmt_bw_call_frame(const char *name, const char *file);

#endif /* GMT_BACKWARD_H */
