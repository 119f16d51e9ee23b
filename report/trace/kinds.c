/* kinds.c - what kind of memory the bytes at the peak are (kinds.h). */
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "backward.h"
#include "kinds.h"
#include "pyclass.h"
#include "replay.h"

/* What a stack says (KEPT_OPTIM, KEPT_PARAMS: kinds.h), found once per
 * stack id. */
enum { S_KNOWN = 1, S_PYTHON = 2 };

/* The context a live block was made in: the backward call and optimizer
 * step open then (numbered from 1; 0: none), by address (addrmap.h). */
struct ctx {
    uint64_t addr; /* 0: empty */
    uint32_t call, step;
    uint32_t begun; /* backward calls begun when it was made */
    uint32_t made_step; /* steps begun then (a replay by steps) */
    uint64_t made_seq;
    uint8_t flags;  /* KEPT_* */
};


struct kinds_state {
    struct pyclass *stacks;
    struct ctx *slot;
    size_t cap, n;
    uint32_t step, steps, step_thread; /* the optimizer step open now */
    uint32_t open, begun, ended;       /* backward calls: open now, begun, ended */
    struct kept *kept;                 /* by address, after the snapshot */
    size_t nkept;
    bool snapped;
};

ADDRMAP_FUNCS(ctx, struct kinds_state, struct ctx, 1024)

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Parameters and buffers are made where torch.nn puts a module on the
 * device (Module.to / cuda / _apply / to_empty), loads a state dict, or
 * builds a module (a torch.nn module's __init__ or reset_parameters, with
 * device="cuda"). */
static bool params_frame(const char *qualname, const char *file)
{
    static const char *const apply[] = {"_apply", "to", "cuda", "to_empty",
                                        "_load_from_state_dict", "load_state_dict", NULL};
    const char *dot = strrchr(qualname, '.'), *name = dot ? dot + 1 : qualname;
    if (ends_with(file, "torch/nn/modules/module.py"))
        for (int i = 0; apply[i]; i++)
            if (strcmp(name, apply[i]) == 0)
                return true;
    return strstr(file, "-packages/torch/nn/") &&
           (ends_with(name, "__init__") || ends_with(name, "reset_parameters"));
}

static uint8_t frame_kind(const char *name, const char *file)
{
    return (uint8_t)((strstr(file, "-packages/torch/optim/") ? KEPT_OPTIM : 0) |
                     (params_frame(name, file) ? KEPT_PARAMS : 0));
}

static uint8_t stack_flags(struct kinds_state *st, const struct gmt_defs *d, uint32_t id)
{
    uint8_t f = gmt_pyclass(&st->stacks, d, id, frame_kind);
    return (uint8_t)((f & (KEPT_OPTIM | KEPT_PARAMS)) | (f & PYCLASS_PYTHON ? S_PYTHON : 0));
}

/* Backward calls begin and end in turn: a call that is no longer the
 * open one has ended. */
static void follow_calls(struct kinds_state *st, const struct bw_state *bw)
{
    uint32_t now = gmt_bw_open_call(bw);
    if (st->open && now != st->open && st->open > st->ended)
        st->ended = st->open;
    if (now > st->begun)
        st->begun = now;
    st->open = now;
}

static void kinds_alloc(struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0 || rec->addr == 0)
        return;
    if (r->kinds == NULL && (r->kinds = calloc(1, sizeof *r->kinds)) == NULL)
        return;
    struct kinds_state *st = r->kinds;
    follow_calls(st, r->bw);
    uint32_t real = rec->stack, caller;
    bool synthetic = gmt_bw_pair(r->bw, rec->stack, &real, &caller);
    uint8_t f = synthetic ? S_KNOWN : stack_flags(st, &r->defs, real);
    /* the optimizer's step: open from its first allocation to its
     * thread's next allocation outside torch.optim */
    if (f & KEPT_OPTIM) {
        if (st->step == 0) {
            st->step = ++st->steps;
            st->step_thread = rec->thread;
        }
    } else if ((f & S_PYTHON) && st->step && rec->thread == st->step_thread) {
        st->step = 0;
    }
    if (st->snapped)
        return;
    bool engine = gmt_bw_engine_thread(r->bw, &r->defs, rec->thread);
    struct ctx *c = ctx_find(st, rec->addr);
    if (c == NULL && (c = ctx_insert(st, rec->addr)) == NULL)
        return;
    /* the backward call's: made on the engine's thread while it was open,
     * or inside the call's own frames (the seed gradient) */
    bool in_call = engine || synthetic || gmt_bw_call_stack(r->bw, &r->defs, real);
    c->call = in_call ? gmt_bw_open_call(r->bw) : 0;
    c->step = (f & KEPT_OPTIM) ? st->step : 0;
    c->begun = st->begun;
    c->made_step = r->by_steps ? r->steps_begun : 0;
    c->made_seq = rec->seq;
    c->flags = (uint8_t)((f & (KEPT_PARAMS | KEPT_OPTIM)) | (engine ? KEPT_ENGINE : 0));
}

static int cmp_kept(const void *a, const void *b)
{
    uint64_t x = ((const struct kept *)a)->addr, y = ((const struct kept *)b)->addr;
    return x < y ? -1 : x > y;
}

static void kinds_free(struct replay *r, const struct gmt_rec *rec)
{
    struct kinds_state *st = r->kinds;
    if (st == NULL || rec->result != 0 || rec->addr == 0)
        return;
    follow_calls(st, r->bw);
    if (!st->snapped) {
        struct ctx *c = ctx_find(st, rec->addr);
        if (c)
            ctx_remove(st, c);
        return;
    }
    size_t lo = 0, hi = st->nkept;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->kept[mid].addr < rec->addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < st->nkept && st->kept[lo].addr == rec->addr && !st->kept[lo].freed) {
        struct kept *k = &st->kept[lo];
        k->freed = true;
        k->free_call = gmt_bw_open_call(r->bw);
        k->free_step = st->step;
        k->ended = st->ended;
    }
}

static void kinds_snapshot(struct replay *r)
{
    if (r->kinds == NULL && (r->kinds = calloc(1, sizeof *r->kinds)) == NULL)
        return;
    struct kinds_state *st = r->kinds;
    /* once: a damaged trace may repeat the peak's sequence number */
    if (st->snapped || st->kept)
        return;
    size_t n = 0;
    REPLAY_FOREACH_LIVE(r, l) {
        if (l->mem != MEM_HOST)
            n++;
    }
    st->kept = calloc(n ? n : 1, sizeof *st->kept);
    if (st->kept == NULL)
        return;
    REPLAY_FOREACH_LIVE(r, l) {
        if (l->mem == MEM_HOST)
            continue;
        struct kept *k = &st->kept[st->nkept++];
        struct ctx *c = ctx_find(st, l->addr);
        k->addr = l->addr;
        k->size = l->size;
        k->stack = l->stack;
        if (c) {
            k->call = c->call;
            k->step = c->step;
            k->begun = c->begun;
            k->made_step = c->made_step;
            k->made_seq = c->made_seq;
            k->flags = c->flags;
        }
    }
    qsort(st->kept, st->nkept, sizeof *st->kept, cmp_kept);
    ctx_release(st); /* only the kept blocks matter from here */
    st->snapped = true;
}

void gmt_kinds_observe(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    (void)ctx;
    if (rec->kind == GMT_K_ALLOC)
        kinds_alloc(r, rec);
    else if (rec->kind == GMT_K_FREE)
        kinds_free(r, rec);
    else if (rec->kind == GMT_K_EXT)
        return;
    if (rec->seq == r->kinds_seq)
        kinds_snapshot(r);
}

void gmt_kinds_release(struct replay *r, void *ctx)
{
    (void)ctx;
    struct kinds_state *st = r->kinds;
    r->kinds = NULL;
    if (st == NULL)
        return;
    gmt_pyclass_free(st->stacks);
    free(st->slot);
    free(st->kept);
    free(st);
}

uint32_t gmt_kinds_calls_begun(const struct kinds_state *st)
{
    return st ? st->begun : 0;
}

size_t gmt_kinds_kept(const struct kinds_state *st, const struct kept **out)
{
    *out = st && st->snapped ? st->kept : NULL;
    return st && st->snapped ? st->nkept : 0;
}
