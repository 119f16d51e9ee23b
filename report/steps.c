/* steps.c - finding a run's steps: the iterations of the program's loop.
 *
 * Growth is judged per step where the run has steps: a step mark the
 * program made (gpumemtrace_mark("step"), an NVTX range named like a
 * step), or, without marks, the loop found in the allocations
 * themselves (gmt_growth_anchor): a site allocated once an iteration.
 * What recurs is not always the program's loop: the layers of one
 * forward pass recur too, one after the other, as regularly as steps -
 * a script that crashed in its first forward, or ran one inference,
 * has repeated layers and no steps. A second replay (gmt_growth_steps)
 * follows the candidate's recurrences and looks at the Python frames
 * between them (loop_check) to tell the two apart.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

bool gmt_step_like(const char *name)
{
    static const char *const words[] = {"step", "iter", "epoch", "batch"};
    for (const char *p = name; *p; p++)
        for (size_t w = 0; w < sizeof words / sizeof *words; w++)
            if (strncasecmp(p, words[w], strlen(words[w])) == 0)
                return true;
    return false;
}

int gmt_step_mark(int n, const char *(*name)(int i, const void *ctx),
                  uint64_t (*count)(int i, const void *ctx), const void *ctx)
{
    int best = -1, best_like = -1;
    for (int j = 0; j < n; j++) {
        uint64_t c = count(j, ctx);
        if (c < 2)
            continue;
        if (best < 0 || c > count(best, ctx))
            best = j;
        if (gmt_step_like(name(j, ctx)) && (best_like < 0 || c > count(best_like, ctx)))
            best_like = j;
    }
    return best_like >= 0 ? best_like : best;
}

static const char *replay_mark_name(int i, const void *ctx)
{
    return ((const struct replay *)ctx)->mark[i].name;
}

static uint64_t replay_mark_count(int i, const void *ctx)
{
    return ((const struct replay *)ctx)->mark[i].count;
}

/* With steps found, a mark not named like a step is the step's interval
 * only if it recurs once a step: a library's NVTX range (CUB's sort,
 * twice a step) says nothing per interval a user can read. */
int gmt_growth_mark(const struct loaded *l)
{
    int m = gmt_step_mark(l->r.nmarks, replay_mark_name, replay_mark_count, &l->r);
    if (m >= 0 && l->r.by_steps && !gmt_step_like(l->r.mark[m].name) &&
        l->r.mark[m].count != l->r.step_count)
        return -1;
    return m;
}

/* Steps without markers. A training loop makes the same allocations in
 * the same order every step, so a site allocated once a step recurs at
 * a near-constant period in the sequence of allocations: its gaps
 * (counted in allocations, the first gap left out - the first step builds
 * optimizer state, caches, workspaces) vary by at most a quarter of their
 * mean. Not less: with input shapes that change from step to step (text
 * of varying length) the ops pick other kernels and workspaces, and a
 * real step's gaps vary by 5-10%; layers inside a step, or a site that
 * recurs at a step's start and in its middle, vary by 100% and more.
 *
 * Of the regular sites, the loop's are those whose recurrences span the
 * most of the run, their count times their period (within half a period):
 * a site that begins in a later step (a branch taken from step 3 on)
 * spans less by whole steps. Among those, other loops
 * recur regularly too: nested ones at a multiple of the step's count (a
 * token loop inside each generate() call, twelve blocks of a model) and
 * conditional ones at a fraction (a buffer kept every third step). The
 * step's count is the one that divides the counts of the run's recurring
 * sites: the largest count that divides nearly as many of them (80%) as
 * any candidate does - a nested loop's count divides only its own
 * sites', a conditional site's divides the step's sites too but is not
 * the largest. The step begins at the first-beginning site of that
 * count. */
static size_t divided(const struct loaded *l, uint64_t c)
{
    size_t n = 0;
    for (size_t i = 0; i < l->r.nsites; i++) {
        uint64_t k = l->r.sites[i].total_count;
        n += k >= c && k % c == 0;
    }
    return n;
}

/* A regular site, its span over its thread's allocations (count times
 * period, as a share of them) and its period. */
static bool regular(const struct loaded *l, const struct site *s, double *cover, double *period)
{
    const struct site_growth *g = s->growth;
    if (g == NULL || g->mixed || s->total_count < 4 || g->gaps < 2 ||
        s->total_count > UINT32_MAX)
        return false;
    double mean = g->gap_sum / g->gaps;
    double var = g->gap_sq / g->gaps - mean * mean;
    /* sd <= 25% of the mean; and a step does more than one allocation
     * (a loop that fills a list, one tensor an iteration, is set-up) */
    if (mean < 2 || var > 0.0625 * mean * mean)
        return false;
    double all = (double)replay_thread_allocs(&l->r, g->thread);
    if (all < 1)
        return false;
    *period = mean / all;
    *cover = ((double)(g->ord_last - g->ord_first) + mean) / all; /* count periods */
    return *cover * 2 >= 1;
}

/* In a Python program the loop is Python's: a site without Python frames
 * (autograd's engine thread, whose gradients recur once a layer) is no
 * step's. */
static bool loop_thread(const struct loaded *l, const struct site *s, struct gmt_stack_def *def)
{
    return l->r.defs.npycodes == 0 || (gmt_defs_stack(&l->r.defs, s->stack, def) && def->npy > 0);
}

bool gmt_growth_anchor(const struct loaded *l, uint32_t *anchor, uint32_t *count)
{
    double best_cover = 0, cover, period;
    struct gmt_stack_def *def = malloc(sizeof *def);
    if (def == NULL)
        return false;
    /* the regular sites that can be the loop's, marked once */
    bool *cand = calloc(l->r.nsites ? l->r.nsites : 1, sizeof *cand);
    if (cand == NULL) {
        free(def);
        return false;
    }
    for (size_t i = 0; i < l->r.nsites; i++) {
        cand[i] = regular(l, &l->r.sites[i], &cover, &period) &&
                  loop_thread(l, &l->r.sites[i], def);
        if (cand[i] && cover > best_cover)
            best_cover = cover;
    }
    free(def);
    /* the candidates' counts, and how many sites each divides */
    uint64_t counts[64];
    size_t ndiv[64], nc = 0, most = 0;
    for (size_t i = 0; i < l->r.nsites && nc < 64; i++) {
        const struct site *s = &l->r.sites[i];
        if (!cand[i] || !regular(l, s, &cover, &period) || best_cover - cover > period / 2)
            continue;
        size_t k = 0;
        while (k < nc && counts[k] != s->total_count)
            k++;
        if (k < nc)
            continue;
        counts[nc] = s->total_count;
        ndiv[nc] = divided(l, s->total_count);
        if (ndiv[nc] > most)
            most = ndiv[nc];
        nc++;
    }
    uint64_t want = 0;
    for (size_t k = 0; k < nc; k++)
        if (ndiv[k] * 5 >= most * 4 && counts[k] > want)
            want = counts[k];
    const struct site *best = NULL;
    for (size_t i = 0; i < l->r.nsites && want; i++) {
        const struct site *s = &l->r.sites[i];
        if (s->total_count == want && cand[i] && regular(l, s, &cover, &period) &&
            best_cover - cover <= period / 2 &&
            (best == NULL || s->growth->first_time < best->growth->first_time))
            best = s;
    }
    free(cand);
    if (best == NULL)
        return false;
    *anchor = best->stack;
    *count = (uint32_t)best->total_count;
    return true;
}

/* Whether the recurrences of the step's site are the program's loop or a
 * loop inside one call of a model's forward (layers alike, one after
 * another). The frames every allocation between two recurrences shares
 * with the site's stack, from the outermost (same code, same line), are
 * the calls that span that interval: for a training or inference loop
 * they end above the model (the loop's own frame runs other lines:
 * forward, backward, the optimizer; or the model's forward begins anew,
 * at its first lines); between two layers they include the forward that
 * loops over them, at one line. A forward at one line over an interval
 * may also be a new call each time (a wrapper whose forward is one line,
 * called from the loop), so it counts only where its call is seen to be
 * under way before the first recurrence: the allocation before it, on
 * the same thread, ran another line of the same call. An interval is
 * nested when a forward so placed spans it; the recurrences are the
 * loop's when at most half of the intervals are nested. Allocations of
 * other threads (the backward pass) and without Python frames say
 * nothing and are skipped. */
struct loop_check {
    uint32_t anchor, thread;
    uint32_t occurrences;
    bool have_frames;             /* the site's frames below are read */
    int npy;                      /* its Python frames, outermost first */
    uint32_t code[GMT_MAX_PY_FRAMES];
    int line[GMT_MAX_PY_FRAMES];
    bool forward[GMT_MAX_PY_FRAMES];
    uint32_t before[64];          /* each thread's last allocation before the first */
    int under_way;                /* deepest frame under way at the first; -1 */
    int pending;                  /* frames shared over the open interval; -1 */
    uint32_t intervals, nested;
    struct shared_frames {        /* frames a stack shares with the site's */
        uint32_t stack;
        int n;                    /* -1: no Python frames */
        bool same_code_next;      /* the next frame is the same code */
        UT_hash_handle hh;
    } *cache;
    struct gmt_stack_def def;     /* scratch: 8 KiB, not on the stack */
};

static bool forward_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n >= 8 && strcmp(name + n - 8, ".forward") == 0;
}

static int py_line(const struct gmt_defs *d, const struct gmt_pyframe *f)
{
    const struct gmt_pycode_def *c = gmt_defs_pycode(d, f->code);
    return c ? gmt_pycode_line(c, f->offset) : -1;
}

static bool read_site(struct loop_check *k, const struct gmt_defs *d)
{
    if (!gmt_defs_stack(d, k->anchor, &k->def) || k->def.npy == 0)
        return false;
    k->npy = (int)k->def.npy;
    for (int i = 0; i < k->npy; i++) {
        const struct gmt_pyframe *f = &k->def.py[k->npy - 1 - i];
        const struct gmt_pycode_def *c = gmt_defs_pycode(d, f->code);
        k->code[i] = f->code;
        k->line[i] = py_line(d, f);
        k->forward[i] = c && forward_name(c->name);
    }
    return true;
}

static const struct shared_frames *shared(struct loop_check *k, const struct gmt_defs *d,
                                          uint32_t stack)
{
    struct shared_frames *e;
    HASH_FIND(hh, k->cache, &stack, sizeof stack, e);
    if (e)
        return e;
    if ((e = calloc(1, sizeof *e)) == NULL)
        return NULL;
    e->stack = stack;
    e->n = -1;
    if (gmt_defs_stack(d, stack, &k->def) && k->def.npy > 0) {
        int n = (int)k->def.npy, i = 0;
        while (i < n && i < k->npy && k->def.py[n - 1 - i].code == k->code[i] &&
               py_line(d, &k->def.py[n - 1 - i]) == k->line[i])
            i++;
        e->n = i;
        e->same_code_next = i < n && i < k->npy && k->def.py[n - 1 - i].code == k->code[i];
    }
    HASH_ADD(hh, k->cache, stack, sizeof e->stack, e);
    return e;
}

static void close_interval(struct loop_check *k)
{
    if (k->pending < 0)
        return;
    k->intervals++;
    for (int i = 0; i < k->pending && i <= k->under_way; i++)
        if (k->forward[i]) {
            k->nested++;
            break;
        }
}

static void loop_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct loop_check *k = ctx;
    /* a framework's segment is made for the block that follows it, with
     * that block's stack: not an allocation of its own */
    if (rec->kind != GMT_K_ALLOC || rec->result != 0 || gmt_is_fw_backing(rec))
        return;
    bool at_site = rec->stack == k->anchor;
    if (at_site && k->occurrences++ == 0) {
        k->thread = rec->thread;
        k->have_frames = read_site(k, &r->defs);
        k->under_way = -1;
        uint32_t prev = rec->thread < 64 ? k->before[rec->thread] : 0;
        if (k->have_frames && prev) {
            const struct shared_frames *b = shared(k, &r->defs, prev);
            if (b && b->n >= 0)
                k->under_way = b->same_code_next ? b->n : b->n - 1;
        }
        k->pending = -1;
        return;
    }
    if (k->occurrences == 0) {
        if (rec->thread < 64)
            k->before[rec->thread] = rec->stack;
        return;
    }
    if (rec->thread != k->thread)
        return;
    if (!k->have_frames)
        return;
    if (at_site) {
        close_interval(k);
        k->pending = k->npy;
        return;
    }
    const struct shared_frames *s = shared(k, &r->defs, rec->stack);
    if (s == NULL || s->n < 0)
        return;
    if (k->pending < 0 || s->n < k->pending)
        k->pending = s->n;
}

/* True when the recurrences are the loop's (or nothing can tell). */
static bool loop_verdict(const struct loop_check *k)
{
    return !k->have_frames || k->intervals == 0 || k->nested * 2 <= k->intervals;
}

static void loop_free(struct loop_check *k)
{
    struct shared_frames *e, *t;
    HASH_ITER(hh, k->cache, e, t) {
        HASH_DEL(k->cache, e);
        free(e);
    }
    free(k);
}

/* Without steps, growth is judged over time only in a program without
 * Python: a Python program's work is a loop of steps, and one that shows
 * none ran a single pass (one forward, an out-of-memory in the first
 * step), whose activations pile up until it ends - the shape of growth,
 * not growth. Then no site is said to grow, and l->unjudged says why. */
size_t gmt_growth_steps(struct loaded *l, const struct gmt_common *c,
                        struct growth_row **out, struct loaded **stepped)
{
    uint32_t anchor, count;
    *stepped = NULL;
    l->unjudged = NULL;
    const char *why = "no loop found in its allocations";
    /* the program's own steps: a mark named like a step, at least 4 times */
    int m = gmt_step_mark(l->r.nmarks, replay_mark_name, replay_mark_count, &l->r);
    if (m >= 0 && gmt_step_like(l->r.mark[m].name) && l->r.mark[m].count >= 4) {
        struct replay_opts o = {.growth = true, .mark_sites = l->r.want_marks,
                                .step_mark = l->r.mark[m].name,
                                .step_count = l->r.mark[m].count};
        struct loaded *ls = gmt_load(l->path, c, &o);
        if (ls && ls->r.by_steps) {
            *stepped = ls;
            return gmt_growth(ls, c, out);
        }
        if (ls)
            gmt_unload(ls);
    }
    struct loop_check *k;
    if (gmt_growth_anchor(l, &anchor, &count) && (k = calloc(1, sizeof *k)) != NULL) {
        k->anchor = anchor;
        k->pending = -1;
        struct replay_opts o = {.growth = true, .mark_sites = l->r.want_marks,
                                .step_anchor = anchor, .step_count = count,
                                .observe = {{.event = loop_event, .ctx = k}}};
        struct loaded *ls = gmt_load(l->path, c, &o);
        bool loop = loop_verdict(k);
        loop_free(k);
        if (ls && ls->r.by_steps && loop) {
            *stepped = ls;
            return gmt_growth(ls, c, out);
        }
        if (ls)
            gmt_unload(ls);
        if (!loop)
            why = "what recurs is layers inside one forward pass, not a loop";
    }
    if (l->r.defs.npycodes > 0 && !l->r.by_steps) {
        l->unjudged = why;
        *out = calloc(1, sizeof **out);
        return 0;
    }
    return gmt_growth(l, c, out);
}
