/* kinds.h - the blocks live at the peak, and what became of each: what
 * kinds_table.c classifies into kinds of memory.
 *
 * The first question about a training step is what its memory is:
 * parameters, gradients, the optimizer's state, activations saved for
 * backward, temporaries, library workspaces - and what lies beyond the
 * trace (the CUDA context, libraries). PyTorch's MemTracker answers it
 * from inside the program; here it is inferred from what the trace
 * already has, with no change to the program:
 *
 *   - where a block was made: its Python stack (torch.nn's Module.to /
 *     cuda / _apply / load_state_dict and module construction: parameters
 *     and buffers; torch.optim: the optimizer), its thread (autograd's
 *     engine: backward), its native frames (a "workspace" function:
 *     cuBLAS's and cuDNN's workspaces);
 *   - when it was given back, relative to the call it was made in: a
 *     block made in a backward call and kept past it is a gradient, one
 *     given back within it a temporary; a block made in an optimizer step
 *     and kept past it is the optimizer's state; a block made outside
 *     both and given back during a backward call is an activation saved
 *     for it; one never given back is held to the end.
 *
 * The replay (replay_opts.kinds_seq: the event of the peak, from a first
 * replay) follows the calls and each live block's context, takes the
 * blocks live at that event, and then watches when each is given back;
 * gmt_kinds() (kinds_table.h, the commands' side) classifies them.
 * docs/usage.md states the rules.
 */
#ifndef GMT_KINDS_H
#define GMT_KINDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "reader.h"

struct replay;
struct kinds_state;

/* A block live at the peak, and what became of it. */
enum { KEPT_OPTIM = 4, KEPT_PARAMS = 8, KEPT_ENGINE = 16 };
struct kept {
    uint64_t addr, size;
    uint32_t stack;      /* its site's stack id */
    uint32_t call, step; /* backward call, optimizer step it was made in
                            (numbered from 1; 0: none) */
    uint8_t flags;       /* KEPT_*: its stack's, and its thread's */
    bool freed;
    uint32_t free_call, free_step; /* open when it was given back */
    uint32_t begun;    /* backward calls begun when it was made */
    uint32_t ended;    /* backward calls ended when it was given back */
    uint32_t made_step; /* replayed by steps: steps begun when it was made */
    uint64_t made_seq;  /* the event that made it */
};

/* An observer of the replay (replay.h), with replay_opts.kinds_seq set:
 * follows every allocation's context and takes the blocks live at
 * kinds_seq; its state is r->kinds, given back by replay_free. Put it
 * before observers that read r->kinds. */
void gmt_kinds_observe(struct replay *r, const struct gmt_rec *rec, void *ctx);
void gmt_kinds_release(struct replay *r, void *ctx);
#define GMT_KINDS_OBSERVER {.event = gmt_kinds_observe, .release = gmt_kinds_release}
/* Backward calls begun so far (by the end of the replay: in all). */
uint32_t gmt_kinds_calls_begun(const struct kinds_state *st);
/* The blocks kept at the snapshot, by address; 0 and NULL before it. */
size_t gmt_kinds_kept(const struct kinds_state *st, const struct kept **out);

#endif /* GMT_KINDS_H */
