/* growth.c - finding sites whose live memory rises through the run.
 *
 * The replay keeps, per site, its live bytes at the end of each of up to
 * 32 time buckets. Each site is judged over its own active span - from
 * its first allocation to its last allocation or free - so a program that
 * grows for a while and then does something else still shows it. What is
 * judged is the site's floor: at each bucket, the least it holds from then
 * to the end of its span. A training step allocates and frees the same
 * site many times (activations made in forward, freed in backward), so its
 * live bytes swing by far more than one step's leak; the floor drops the
 * swings and keeps what is never given back. A site grows when, after the
 * first 10% of that span (start-up allocations are not growth): its
 * floor's least-squares slope is
 * positive, the line explains the series well (R^2 >= 0.8), it rose in
 * at least 3 bucket-to-bucket steps with none making half of the rise (a
 * buffer allocated once, late, is not growth), and the net rise is at
 * least 1 MiB. A training loop that keeps each
 * step's autograd graph alive looks exactly like this; a cache that fills
 * once and plateaus does not (its R^2 drops, its late steps are flat).
 *
 * When the program marks its steps (gpumemtrace_mark("step"), an NVTX mark,
 * or a region pushed each step: its start counts), a growing site's rise
 * is also given per step: its live bytes at
 * the last occurrence of the most frequent repeated mark minus those at
 * the first, over the intervals between them - exact, and the same from
 * run to run, unlike a rate per second.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

#define MIN_GROWTH (1u << 20)
#define MIN_STEP_GROWTH (4u << 10) /* by steps: a rise in most steps is no noise */

static int cmp_rate(const void *a, const void *b)
{
    const struct growth_row *x = a, *y = b;
    if (x->bytes_per_s != y->bytes_per_s)
        return x->bytes_per_s > y->bytes_per_s ? -1 : 1;
    return strcmp(x->label, y->label);
}

/* Fit a line to v[from..to) at x = bucket index. */
static void fit(const int64_t *v, int from, int to, double *slope, double *r2)
{
    double n = to - from, sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (int i = from; i < to; i++) {
        double x = i, y = (double)v[i];
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
        syy += y * y;
    }
    double vx = n * sxx - sx * sx, vy = n * syy - sy * sy, c = n * sxy - sx * sy;
    *slope = vx > 0 ? c / vx : 0;
    *r2 = vx > 0 && vy > 0 ? (c * c) / (vx * vy) : 0;
}

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

int gmt_growth_mark(const struct loaded *l)
{
    return gmt_step_mark(l->r.nmarks, replay_mark_name, replay_mark_count, &l->r);
}

/* Steps without markers. A training loop makes the same allocations in
 * the same order every step, so a site allocated once a step recurs at
 * an exact period in the sequence of allocations: its gaps (counted in
 * allocations, the first gap left out - the first step builds optimizer
 * state, caches, workspaces) vary by at most 5% of their mean. The
 * regular sites that recur at least 4 times over at least half of the
 * run's allocations mostly recur once a step; a few recur more often (two
 * layers alike, one op apart, make one stack regular at half the step) or
 * less (logging every tenth step). So the step count is the count most
 * regular sites share (ties: the smaller), and the step begins at the
 * first-beginning site of that count. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

bool gmt_growth_anchor(const struct loaded *l, uint32_t *anchor, uint32_t *count)
{
    uint64_t *counts = malloc((l->r.nsites ? l->r.nsites : 1) * sizeof *counts);
    if (counts == NULL)
        return false;
    size_t nc = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t want = 0;
        if (pass == 1) { /* the count most regular sites share */
            qsort(counts, nc, sizeof *counts, cmp_u64);
            size_t best_run = 0;
            for (size_t i = 0, j; i < nc; i = j) {
                for (j = i; j < nc && counts[j] == counts[i]; j++)
                    ;
                if (j - i > best_run) {
                    best_run = j - i;
                    want = counts[i];
                }
            }
        }
        const struct site *best = NULL;
        for (size_t i = 0; i < l->r.nsites; i++) {
            const struct site *s = &l->r.sites[i];
            const struct site_growth *g = s->growth;
            if (g == NULL || s->total_count < 4 || g->gaps < 2 ||
                s->total_count > UINT32_MAX ||
                (g->ord_last - g->ord_first) * 2 < l->r.allocs)
                continue;
            double mean = g->gap_sum / g->gaps;
            double var = g->gap_sq / g->gaps - mean * mean;
            if (mean < 1 || var > 0.0025 * mean * mean) /* sd <= 5% of the mean */
                continue;
            if (pass == 0) {
                counts[nc++] = s->total_count;
            } else if (s->total_count == want &&
                       (best == NULL || g->ord_first < best->growth->ord_first)) {
                best = s;
            }
        }
        if (pass == 1 && best != NULL) {
            *anchor = best->stack;
            *count = (uint32_t)best->total_count;
        }
        if (nc == 0 || (pass == 1 && best == NULL)) {
            free(counts);
            return false;
        }
    }
    free(counts);
    return true;
}

size_t gmt_growth(struct loaded *l, const struct gmt_common *c,
                  struct growth_row **out)
{
    uint64_t width;
    int nb = replay_growth_buckets(&l->r, &width);
    size_t n = 0, cap = 16;
    struct growth_row *rows = calloc(cap, sizeof *rows);
    if (rows == NULL || nb < 4) {
        *out = rows;
        return 0;
    }
    uint64_t t0 = l->r.t0;
    int mark = gmt_growth_mark(l);
    bool by_step = l->r.step_anchor != 0;
    double step_s = 0; /* seconds a step, for the rate per second */
    if (by_step && l->r.last_time > l->r.first_step_time)
        step_s = (double)(l->r.last_time - l->r.first_step_time) / 1e9 / l->r.step_count;
    /* sites grouped by label: sum their series, widen their spans */
    struct series {
        const char *label;
        int64_t v[REPLAY_GROWTH_BUCKETS];
        uint64_t first, last;
        uint32_t first_step;
        int64_t at_first_mark, at_last_mark;
        UT_hash_handle hh;
    } *map = NULL, *e, *tmp;
    for (size_t i = 0; i < l->r.nsites; i++) {
        const struct site *s = &l->r.sites[i];
        if (s->growth == NULL || s->total_count == 0)
            continue;
        const char *label = sym_site(l->sym, s->stack, c->grain, c->depth);
        HASH_FIND_STR(map, label, e);
        if (e == NULL) {
            if ((e = calloc(1, sizeof *e)) == NULL)
                continue;
            e->label = label;
            e->first = UINT64_MAX;
            e->first_step = UINT32_MAX;
            HASH_ADD_KEYPTR(hh, map, e->label, strlen(e->label), e);
        }
        for (int k = 0; k < nb; k++)
            e->v[k] += s->growth->live[k];
        if (s->growth->first_time && s->growth->first_time < e->first)
            e->first = s->growth->first_time;
        if (s->growth->last_time > e->last)
            e->last = s->growth->last_time;
        if (s->growth->first_step < e->first_step)
            e->first_step = s->growth->first_step;
        int64_t mf, ml;
        if (mark >= 0 && replay_site_mark(&l->r, s, mark, &mf, &ml)) {
            e->at_first_mark += mf;
            e->at_last_mark += ml;
        }
    }
    HASH_ITER(hh, map, e, tmp) {
        int lo = e->first > t0 ? (int)((e->first - t0) / width) : 0;
        int hi = e->last > t0 ? (int)((e->last - t0) / width) + 1 : nb;
        if (by_step) { /* from its first step to the end */
            uint32_t fs = e->first_step ? e->first_step - 1 : 0;
            lo = (int)((uint64_t)fs * (uint64_t)nb / l->r.step_count);
            hi = nb;
        }
        if (hi > nb)
            hi = nb;
        if (lo > hi)
            lo = hi;
        int from = lo + (hi - lo) / 10;
        int nb_site = hi;
        for (int k = nb_site - 2; k >= from; k--) /* the floor */
            if (e->v[k + 1] < e->v[k])
                e->v[k] = e->v[k + 1];
        double slope = 0, r2 = 0;
        if (nb_site - from >= 4)
            fit(e->v, from, nb_site, &slope, &r2);
        int ups = 0, steps = 0;
        int64_t biggest_rise = 0;
        for (int k = from + 1; k < nb_site; k++) {
            int64_t d = e->v[k] - e->v[k - 1]; /* >= 0: a floor never falls */
            steps++;
            ups += d > 0;
            if (d > biggest_rise)
                biggest_rise = d;
        }
        int64_t net = nb_site - from >= 4 ? e->v[nb_site - 1] - e->v[from] : 0;
        /* steady: a line explains it, it rose in several steps, and no one
         * step (a buffer allocated once, late) made half of it */
        if (slope > 0 && r2 >= 0.8 && ups >= 3 &&
            net >= (int64_t)(by_step ? MIN_STEP_GROWTH : MIN_GROWTH) &&
            biggest_rise * 2 <= net) {
            if (n == cap) {
                struct growth_row *g = realloc(rows, (cap *= 2) * sizeof *rows);
                if (g == NULL)
                    break;
                rows = g;
            }
            /* per step: the floor's rise over the steps between the ends
             * of the first and last buckets judged (bucket b ends where
             * step ceil((b + 1) * steps / nb) begins) - exact for a
             * steady leak, however the steps fell into buckets */
            double per_step = 0;
            if (by_step) {
                uint64_t k = l->r.step_count;
                uint64_t s0 = ((uint64_t)from + 1) * k / (uint64_t)nb +
                              (((uint64_t)from + 1) * k % (uint64_t)nb != 0);
                uint64_t s1 = (uint64_t)nb_site * k / (uint64_t)nb +
                              ((uint64_t)nb_site * k % (uint64_t)nb != 0);
                per_step = s1 > s0 ? (double)net / (double)(s1 - s0) : 0;
            }
            rows[n++] = (struct growth_row){
                e->label,
                by_step ? (step_s > 0 ? per_step / step_s : 0) : slope * 1e9 / (double)width,
                net, r2, (double)ups / steps, e->v[from], e->v[nb_site - 1], mark >= 0,
                mark >= 0 ? (e->at_last_mark - e->at_first_mark) /
                                (int64_t)(l->r.mark[mark].count - 1)
                          : 0,
                by_step, per_step, e->first_step};
        }
        HASH_DEL(map, e);
        free(e);
    }
    qsort(rows, n, sizeof *rows, cmp_rate);
    *out = rows;
    return n;
}

size_t gmt_growth_steps(struct loaded *l, const struct gmt_common *c,
                        struct growth_row **out, struct loaded **stepped)
{
    uint32_t anchor, count;
    *stepped = NULL;
    if (gmt_growth_anchor(l, &anchor, &count)) {
        struct replay_opts o = {.growth = true, .mark_sites = l->r.want_marks,
                                .step_anchor = anchor, .step_count = count};
        struct loaded *ls = gmt_load(l->path, c, &o);
        if (ls && ls->r.step_anchor) {
            *stepped = ls;
            return gmt_growth(ls, c, out);
        }
        if (ls)
            gmt_unload(ls);
    }
    return gmt_growth(l, c, out);
}
