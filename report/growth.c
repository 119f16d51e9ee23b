/* growth.c - finding sites whose live memory rises from step to step.
 *
 * The replay keeps, per site, its live bytes at the end of each of up to
 * 64 buckets: steps, where the run has them (steps.c finds them), else
 * spans of time. What is judged is the site's floor: at each bucket, the
 * least it holds from then on. A training step allocates and frees the
 * same site many times (activations made in forward, freed in backward),
 * so its live bytes swing by far more than one step's leak; the floor
 * drops the swings and keeps what is never given back. A training loop
 * that keeps each step's autograd graph alive rises steadily; a cache
 * that fills once and plateaus does not (no line explains it, its late
 * steps are flat); a buffer allocated once, late, is one rise.
 *
 * By steps (judge_steps), a site's rate is exact: what it kept from its
 * first rise to its last, over the steps between, and its first step is
 * the step of its first rise. By time (judge_time), only for programs
 * without Python (steps.c says why): a rate per second.
 *
 * When the program marks its steps (gpumemtrace_mark("step"), an NVTX
 * range named like a step), a growing site's rise is also given per
 * interval of the mark: its live bytes at the last occurrence minus those
 * at the first, over the intervals between them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

#define MIN_GROWTH (1u << 20)
#define MIN_STEP_GROWTH (4u << 10) /* by steps: a rise in most steps is no noise */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_rate(const void *a, const void *b)
{
    const struct growth_row *x = a, *y = b;
    if (x->bytes_per_s != y->bytes_per_s)
        return x->bytes_per_s > y->bytes_per_s ? -1 : 1;
    return strcmp(x->label, y->label);
}

/* Fit a line to v[from..to) at x[i] (NULL: the index i). */
static void fit(const int64_t *v, const double *xs, int from, int to, double *slope,
                double *r2)
{
    double n = to - from, sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (int i = from; i < to; i++) {
        double x = xs ? xs[i] : i, y = (double)v[i];
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

/* A site label's live bytes at the end of each bucket, summed over its
 * sites, and their span. */
struct growth_series {
    const char *label;
    int64_t v[REPLAY_GROWTH_BUCKETS];
    int64_t start; /* by steps: as the first step began */
    uint64_t first, last;
    int64_t at_first_mark, at_last_mark;
    UT_hash_handle hh;
};

/* Judged by time (no steps): over the site's own active span, from its
 * first allocation to its last allocation or free, after the first 10%
 * of it (start-up allocations are not growth), its floor rises steadily:
 * a positive least-squares slope, R^2 >= 0.8, at least 3 rises with none
 * making half of the total, and at least 1 MiB. */
static bool judge_time(const struct growth_series *e, uint64_t t0, uint64_t width, int nb,
                       struct growth_row *row)
{
    int64_t v[REPLAY_GROWTH_BUCKETS];
    memcpy(v, e->v, sizeof v);
    int lo = e->first > t0 ? (int)((e->first - t0) / width) : 0;
    int hi = e->last > t0 ? (int)((e->last - t0) / width) + 1 : nb;
    if (hi > nb)
        hi = nb;
    if (lo > hi)
        lo = hi;
    int from = lo + (hi - lo) / 10;
    for (int k = hi - 2; k >= from; k--) /* the floor */
        if (v[k + 1] < v[k])
            v[k] = v[k + 1];
    if (hi - from < 4)
        return false;
    double slope, r2;
    fit(v, NULL, from, hi, &slope, &r2);
    int ups = 0;
    int64_t biggest = 0;
    for (int k = from + 1; k < hi; k++) {
        int64_t d = v[k] - v[k - 1]; /* >= 0: a floor never falls */
        ups += d > 0;
        if (d > biggest)
            biggest = d;
    }
    int64_t net = v[hi - 1] - v[from];
    if (!(slope > 0 && r2 >= 0.8 && ups >= 3 && net >= (int64_t)MIN_GROWTH &&
          biggest * 2 <= net))
        return false;
    *row = (struct growth_row){.bytes_per_s = slope * 1e9 / (double)width,
                               .net = net, .r2 = r2,
                               .rising = (double)ups / (hi - 1 - from),
                               .from_bytes = v[from], .to_bytes = v[hi - 1]};
    return true;
}

/* Steps completed at the end of step bucket b (replay_step_begins: bucket
 * b ends where step ceil((b + 1) * count / nb) begins, 0-based). */
static uint64_t bucket_end_step(uint64_t count, int nb, int b)
{
    uint64_t x = ((uint64_t)b + 1) * count;
    return x / (uint64_t)nb + (x % (uint64_t)nb != 0);
}

/* Judged by steps: the site's live bytes at the end of each step (or of
 * each bucket of steps), up to the start of the last step - the time
 * after it holds the last step's own work and whatever the program frees
 * at its end, neither of which says what a step keeps. Its floor (the
 * least it holds from then on: the swings of activations made in
 * forward and freed in backward dropped) grows when, from the last value
 * before its first rise: it rose at least 3 times, no rise made half of
 * the total (a buffer allocated once, late), a line in the step explains
 * it (R^2 >= 0.8: a cache that fills in a few steps and plateaus does
 * not), and it kept at least 4 KiB. Its rate is what it kept from its
 * first rise to its last over the steps between: exact for a fault that
 * keeps the same every step or every n steps, whatever the phase at
 * which the run ends. Its first step is the step of the first rise. */
static bool judge_steps(const struct loaded *l, int64_t start, const int64_t *series, int nb,
                        struct growth_row *row)
{
    uint64_t count = l->r.step_count;
    /* samples [0, end): the start of the first step, then the end of each
     * bucket but the last, which ends with the trace */
    int end = nb;
    if (end < 5)
        return false;
    int64_t v[REPLAY_GROWTH_BUCKETS + 1];
    double x[REPLAY_GROWTH_BUCKETS + 1];
    v[0] = start;
    x[0] = 0;
    for (int k = 1; k < end; k++) {
        v[k] = series[k - 1];
        x[k] = (double)bucket_end_step(count, nb, k - 1);
    }
    for (int k = end - 2; k >= 0; k--)
        if (v[k + 1] < v[k])
            v[k] = v[k + 1];
    /* the rises; a lone early one (the step's output still held as the
     * next step begins, state made in the first steps) is set-up, not the
     * growth: the growth begins at the first rise followed by the next
     * within the median gap between rises */
    int rise[REPLAY_GROWTH_BUCKETS + 1], nr = 0;
    for (int k = 1; k < end; k++)
        if (v[k] > v[k - 1])
            rise[nr++] = k;
    if (nr < 3)
        return false;
    double gaps[REPLAY_GROWTH_BUCKETS + 1];
    for (int i = 0; i + 1 < nr; i++)
        gaps[i] = x[rise[i + 1]] - x[rise[i]];
    qsort(gaps, (size_t)nr - 1, sizeof *gaps, cmp_double);
    double median = gaps[(nr - 2) / 2];
    int i0 = 0;
    while (i0 + 1 < nr && x[rise[i0 + 1]] - x[rise[i0]] > median)
        i0++;
    int b0 = rise[i0] - 1, first = rise[i0], last = rise[nr - 1];
    int ups = nr - i0;
    int64_t biggest = 0;
    for (int i = i0; i < nr; i++)
        if (v[rise[i]] - v[rise[i] - 1] > biggest)
            biggest = v[rise[i]] - v[rise[i] - 1];
    if (end - b0 < 4)
        return false;
    int64_t net = v[end - 1] - v[b0];
    double slope, r2;
    fit(v, x, b0, end, &slope, &r2);
    if (!(ups >= 3 && slope > 0 && r2 >= 0.8 && net >= (int64_t)MIN_STEP_GROWTH &&
          biggest * 2 <= net))
        return false;
    double per_step = (double)(v[last] - v[first]) / (x[last] - x[first]);
    *row = (struct growth_row){.net = net, .r2 = r2,
                               .rising = (double)ups / (end - 1 - b0),
                               .from_bytes = v[b0], .to_bytes = v[end - 1],
                               .by_step = true, .per_step = per_step,
                               .first_step = (uint32_t)x[b0] + 1};
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
    bool by_step = l->r.by_steps;
    double step_s = 0; /* seconds a step, for the rate per second */
    if (by_step && l->r.last_time > l->r.first_step_time)
        step_s = (double)(l->r.last_time - l->r.first_step_time) / 1e9 / l->r.step_count;
    /* sites grouped by label: sum their series, widen their spans */
    struct growth_series *map = NULL, *e, *tmp;
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
            HASH_ADD_KEYPTR(hh, map, e->label, strlen(e->label), e);
        }
        int64_t live[REPLAY_GROWTH_BUCKETS];
        replay_site_series(s->growth, live, nb);
        for (int k = 0; k < nb; k++)
            e->v[k] += live[k];
        e->start += s->growth->at_first_step;
        if (s->growth->first_time && s->growth->first_time < e->first)
            e->first = s->growth->first_time;
        if (s->growth->last_time > e->last)
            e->last = s->growth->last_time;
        int64_t mf, ml;
        if (mark >= 0 && replay_site_mark(&l->r, s, mark, &mf, &ml)) {
            e->at_first_mark += mf;
            e->at_last_mark += ml;
        }
    }
    HASH_ITER(hh, map, e, tmp) {
        struct growth_row row;
        bool grows = by_step ? judge_steps(l, e->start, e->v, nb, &row) : judge_time(e, t0, width, nb, &row);
        if (grows) {
            if (n == cap) {
                struct growth_row *g = realloc(rows, (cap *= 2) * sizeof *rows);
                if (g == NULL)
                    break;
                rows = g;
            }
            row.label = e->label;
            if (by_step)
                row.bytes_per_s = step_s > 0 ? row.per_step / step_s : 0;
            row.has_interval = mark >= 0;
            row.per_interval = mark >= 0 ? (e->at_last_mark - e->at_first_mark) /
                                           (int64_t)(l->r.mark[mark].count - 1)
                                     : 0;
            rows[n++] = row;
        }
        HASH_DEL(map, e);
        free(e);
    }
    qsort(rows, n, sizeof *rows, cmp_rate);
    *out = rows;
    return n;
}
