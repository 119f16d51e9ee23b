/* backward.c - naming the blocks autograd's engine makes by the line that
 * called backward (backward.h). */
#include <stdlib.h>
#include <string.h>

#include "backward.h"
#include "pyclass.h"
#include "uthash.h"

enum { C_KNOWN = 1, C_CALL = 2, C_PYTHON = 4, C_USER = 8 };

struct cls { /* what a thread is, found once */
    uint32_t key;
    uint8_t flags;
    UT_hash_handle hh;
};

struct pair {
    uint64_t key; /* stack << 32 | caller */
    uint32_t index;
    UT_hash_handle hh;
};

struct bw_state {
    struct pyclass *stacks;
    struct cls *threads;
    struct pair *pairs;   /* by key */
    uint64_t *by_index;   /* index -> key */
    size_t n, cap;
    uint32_t call;        /* the open call's stack, 0: none */
    uint32_t call_thread;
    uint32_t calls;       /* calls opened so far */
};

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

bool gmt_bw_call_frame(const char *name, const char *file)
{
    return name && file &&
           (strcmp(name, "_engine_run_backward") == 0 ||
            ((strcmp(name, "backward") == 0 || strcmp(name, "grad") == 0) &&
             ends_with(file, "/autograd/__init__.py")));
}

static uint8_t call_frame(const char *name, const char *file)
{
    return (uint8_t)((gmt_bw_call_frame(name, file) ? C_CALL : 0) |
                     (gmt_library_file(file) ? 0 : C_USER));
}

/* C_CALL: a stack inside torch.autograd.backward / grad (one of its
 * Python frames is a call frame); C_PYTHON: it has Python frames; C_USER:
 * one of them is the user's own code (gmt_library_file). */
static uint8_t stack_flags(struct bw_state *st, const struct gmt_defs *d, uint32_t id)
{
    uint8_t f = gmt_pyclass(&st->stacks, d, id, call_frame);
    return (uint8_t)((f & (C_CALL | C_USER)) | (f & PYCLASS_PYTHON ? C_PYTHON : 0));
}

/* An engine thread: PyTorch names its device threads pt_autograd_N. */
static bool engine_thread(struct bw_state *st, const struct gmt_defs *d, uint32_t index)
{
    struct cls *c;
    HASH_FIND(hh, st->threads, &index, sizeof index, c);
    if (c)
        return c->flags & C_CALL;
    const struct gmt_thread_def *t = gmt_defs_thread(d, index);
    if (t == NULL) /* not defined yet: ask again next time */
        return false;
    bool engine = strncmp(t->name, "pt_autograd_", 12) == 0;
    if ((c = calloc(1, sizeof *c)) != NULL) {
        c->key = index;
        c->flags = engine ? C_CALL : C_KNOWN;
        HASH_ADD(hh, st->threads, key, sizeof c->key, c);
    }
    return engine;
}

static uint32_t pair_id(struct bw_state *st, uint32_t stack, uint32_t caller)
{
    uint64_t key = (uint64_t)stack << 32 | caller;
    struct pair *p;
    HASH_FIND(hh, st->pairs, &key, sizeof key, p);
    if (p)
        return GMT_BW_ID | p->index;
    if (st->n >= (~GMT_BW_ID)) /* the synthetic range is full */
        return stack;
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        uint64_t *n = realloc(st->by_index, cap * sizeof *n);
        if (n == NULL)
            return stack;
        st->by_index = n;
        st->cap = cap;
    }
    if ((p = calloc(1, sizeof *p)) == NULL)
        return stack;
    p->key = key;
    p->index = (uint32_t)st->n;
    st->by_index[st->n++] = key;
    HASH_ADD(hh, st->pairs, key, sizeof p->key, p);
    return GMT_BW_ID | p->index;
}

uint32_t gmt_bw_site(struct bw_state **stp, const struct gmt_defs *d,
                     const struct gmt_rec *rec)
{
    if (rec->stack == 0)
        return 0;
    if (*stp == NULL && (*stp = calloc(1, sizeof **stp)) == NULL)
        return rec->stack;
    struct bw_state *st = *stp;
    uint8_t f = stack_flags(st, d, rec->stack);
    /* Python on the engine's thread: a hook or a custom Function's backward
     * in the user's code names its own blocks; a framework's own Python
     * there (a dispatch mode such as MemTracker, torch.ops) is the
     * engine's work, named as the rest of it */
    if ((f & (C_PYTHON | C_USER | C_CALL)) == C_PYTHON && st->call &&
        engine_thread(st, d, rec->thread))
        return pair_id(st, rec->stack, st->call);
    if (f & C_PYTHON) {
        if (f & C_CALL) {
            if (st->call == 0)
                st->calls++;
            st->call = rec->stack;
            st->call_thread = rec->thread;
        } else if (st->call && rec->thread == st->call_thread) {
            st->call = 0; /* the call returned */
        }
        return rec->stack;
    }
    if (st->call && engine_thread(st, d, rec->thread))
        return pair_id(st, rec->stack, st->call);
    return rec->stack;
}

bool gmt_bw_pair(const struct bw_state *st, uint32_t id, uint32_t *stack,
                 uint32_t *caller)
{
    if (st == NULL || (id & GMT_BW_ID) != GMT_BW_ID || (id & ~GMT_BW_ID) >= st->n)
        return false;
    uint64_t key = st->by_index[id & ~GMT_BW_ID];
    *stack = (uint32_t)(key >> 32);
    *caller = (uint32_t)key;
    return true;
}

void gmt_bw_free(struct bw_state *st)
{
    if (st == NULL)
        return;
    struct cls *c, *ct;
    gmt_pyclass_free(st->stacks);
    HASH_ITER(hh, st->threads, c, ct) {
        HASH_DEL(st->threads, c);
        free(c);
    }
    struct pair *p, *pt;
    HASH_ITER(hh, st->pairs, p, pt) {
        HASH_DEL(st->pairs, p);
        free(p);
    }
    free(st->by_index);
    free(st);
}

uint32_t gmt_bw_open_call(const struct bw_state *st)
{
    return st && st->call ? st->calls : 0;
}

bool gmt_bw_engine_thread(struct bw_state *st, const struct gmt_defs *d, uint32_t thread)
{
    return st && engine_thread(st, d, thread);
}

bool gmt_bw_call_stack(struct bw_state *st, const struct gmt_defs *d, uint32_t id)
{
    return st && id && (stack_flags(st, d, id) & C_CALL);
}
