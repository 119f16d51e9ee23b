/* whatif_lanes.c - the feed's requests carried to the models
 * (whatif_lanes.h).
 *
 * The requests go to the models a batch at a time, each policy's models
 * through the whole batch in turn: one model's blocks stay in the cache
 * while it runs, where a request to every model in turn had them evict
 * each other's (and the replay's, and the reader's).
 *
 * With workers, threads run the models beside the feed: worker k runs
 * the lanes of policies k, k + workers, ...; the feed fills one batch
 * while they run the other. Every model still gets its requests one at a
 * time in the trace's order, and a model is only ever run by one thread,
 * so the figures are the same with any number of workers. The feed waits
 * for the workers before it reads or lets go of the models
 * (wi_feed_flush, wi_feed_reset) and before it moves the lanes' arrays
 * (a new live request past their room).
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "whatif_lanes.h"

#define BATCH 4096 /* requests; 96 KiB, and their where */

/* A policy's side of the live requests, by wi_req.ref. */
struct wi_lane {
    uint64_t *ids; /* the model's id */
    uint8_t *held; /* 1: the model holds it (it had not run out of memory) */
};

struct wi_lanes {
    struct wi_feed *w;
    struct wi_lane lane[WI_MAX_POLICIES];
    uint32_t *free_refs; /* refs let go, to be used again */
    size_t nfree;
    uint32_t nrefs, cap;
    /* the batch being filled, and the one the workers run */
    struct wi_op *buf[2];
    struct wi_where *where[2];
    int fill;
    size_t nfill;
    /* the workers */
    int nworkers;
    pthread_t threads[WI_MAX_POLICIES];
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    const struct wi_op *run; /* the batch handed to them, */
    const struct wi_where *run_where;
    size_t nrun;
    uint64_t gen;            /* how many were handed */
    int busy;                /* workers still running it */
    bool stop;
};

/* Policy p's models through n requests, in order. A policy that ran out
 * of memory on a device stops there; it lets go only of what it holds.
 * The feed's own fields (the devices among them) are read once a device
 * changes: the feed writes beside them at every record. */
static void run_lane(struct wi_lanes *l, int p, const struct wi_op *ops_in,
                     const struct wi_where *where, size_t n)
{
    struct wi_feed *w = l->w;
    const struct wi_model_ops *ops = w->pol[p].ops;
    uint64_t *ids = l->lane[p].ids;
    uint8_t *held = l->lane[p].held;
    struct wi_dev *dv = NULL;
    unsigned d = WI_DEVICES;
    for (size_t i = 0; i < n; i++) {
        const struct wi_op *op = &ops_in[i];
        if (op->dev != d)
            dv = w->dev[d = op->dev];
        if (op->kind == WI_OP_OUTSIDE) {
            dv->seen_outside[p] = op->size;
        } else if (op->kind == WI_OP_FREE) {
            if (held[op->ref])
                ops->free(dv->m[p], ids[op->ref]);
            held[op->ref] = 0;
        } else if (!dv->oom[p].hit) {
            if (ops->alloc(dv->m[p], op->size, op->stream, &ids[op->ref]) == 0)
                held[op->ref] = 1;
            else
                dv->oom[p] = (struct wi_oom){true, where[i].seq, where[i].time, op->size,
                                             op->stream, where[i].stack};
        }
    }
}

/* ---- the workers --------------------------------------------------------------- */

struct worker {
    struct wi_lanes *l;
    int k;
};

static void *worker(void *arg)
{
    struct worker me = *(struct worker *)arg;
    struct wi_lanes *l = me.l;
    free(arg);
    uint64_t seen = 0;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (l->gen == seen && !l->stop)
            pthread_cond_wait(&l->go, &l->mu);
        if (l->stop)
            break;
        seen = l->gen;
        const struct wi_op *ops = l->run;
        const struct wi_where *where = l->run_where;
        size_t n = l->nrun;
        pthread_mutex_unlock(&l->mu);
        for (int p = me.k; p < l->w->npol; p += l->nworkers)
            run_lane(l, p, ops, where, n);
        pthread_mutex_lock(&l->mu);
        if (--l->busy == 0)
            pthread_cond_signal(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Until the workers are done with the batch they run. */
static void wait_idle(struct wi_lanes *l)
{
    if (l->nworkers == 0)
        return;
    pthread_mutex_lock(&l->mu);
    while (l->busy)
        pthread_cond_wait(&l->done, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

/* The batch filled so far to the models: to the workers, once they are
 * done with the last (then the feed fills the other), or run here. */
static void hand_off(struct wi_lanes *l)
{
    if (l->nfill == 0)
        return;
    if (l->nworkers == 0) {
        for (int p = 0; p < l->w->npol; p++)
            run_lane(l, p, l->buf[l->fill], l->where[l->fill], l->nfill);
        l->nfill = 0;
        return;
    }
    pthread_mutex_lock(&l->mu);
    while (l->busy)
        pthread_cond_wait(&l->done, &l->mu);
    l->run = l->buf[l->fill];
    l->run_where = l->where[l->fill];
    l->nrun = l->nfill;
    l->busy = l->nworkers;
    l->gen++;
    pthread_cond_broadcast(&l->go);
    pthread_mutex_unlock(&l->mu);
    l->fill ^= 1;
    l->nfill = 0;
}

/* Up to `want` workers; none when one cannot be started. */
static void start_workers(struct wi_lanes *l, int want)
{
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->go, NULL);
    pthread_cond_init(&l->done, NULL);
    /* the workers take no signal: the program's handling of them
     * (SIGPIPE, a Ctrl-C) stays the main thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int k = 0; k < want; k++) {
        struct worker *arg = malloc(sizeof *arg);
        if (arg == NULL)
            break;
        *arg = (struct worker){l, k};
        if (pthread_create(&l->threads[k], NULL, worker, arg) != 0) {
            free(arg);
            break;
        }
        l->nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* fewer than wanted: each takes its share of the lanes by the number
     * actually started, which the workers read only once a batch is theirs;
     * none: the feed's thread runs the lanes */
    if (l->nworkers == 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->go);
        pthread_cond_destroy(&l->done);
    }
}

static void stop_workers(struct wi_lanes *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->go);
    pthread_mutex_unlock(&l->mu);
    for (int k = 0; k < l->nworkers; k++)
        pthread_join(l->threads[k], NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->go);
    pthread_cond_destroy(&l->done);
}

/* ---- the feed's side ------------------------------------------------------------ */

struct wi_lanes *wi_lanes_new(struct wi_feed *w)
{
    struct wi_lanes *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->w = w;
    for (int i = 0; i < (w->workers > 0 ? 2 : 1); i++) {
        l->buf[i] = malloc(BATCH * sizeof *l->buf[i]);
        l->where[i] = malloc(BATCH * sizeof *l->where[i]);
        if (l->buf[i] == NULL || l->where[i] == NULL) {
            wi_lanes_free(l);
            return NULL;
        }
    }
    int want = w->workers < w->npol ? w->workers : w->npol;
    if (want > 0)
        start_workers(l, want);
    return l;
}

bool wi_lanes_ref(struct wi_lanes *l, uint32_t *ref)
{
    if (l->nfree) {
        *ref = l->free_refs[--l->nfree];
        return true;
    }
    if (l->nrefs == l->cap) {
        wait_idle(l); /* the arrays move: no worker may be reading them */
        uint32_t cap = l->cap ? 2 * l->cap : 1024;
        uint32_t *fr = realloc(l->free_refs, cap * sizeof *fr);
        if (fr == NULL)
            return false;
        l->free_refs = fr;
        for (int p = 0; p < l->w->npol; p++) {
            struct wi_lane *ln = &l->lane[p];
            uint64_t *ids = realloc(ln->ids, cap * sizeof *ids);
            if (ids)
                ln->ids = ids;
            uint8_t *held = realloc(ln->held, cap);
            if (held)
                ln->held = held;
            if (ids == NULL || held == NULL)
                return false;
            memset(held + l->cap, 0, cap - l->cap);
        }
        l->cap = cap;
    }
    *ref = l->nrefs++;
    return true;
}

void wi_lanes_unref(struct wi_lanes *l, uint32_t ref)
{
    l->free_refs[l->nfree++] = ref; /* room: every ref was made with one */
}

void wi_lanes_push(struct wi_lanes *l, const struct wi_op *op, const struct wi_where *at)
{
    l->buf[l->fill][l->nfill] = *op;
    if (at)
        l->where[l->fill][l->nfill] = *at;
    if (++l->nfill == BATCH)
        hand_off(l);
}

void wi_lanes_flush(struct wi_lanes *l)
{
    hand_off(l);
    wait_idle(l);
}

void wi_lanes_free(struct wi_lanes *l)
{
    if (l == NULL)
        return;
    wi_lanes_flush(l);
    if (l->nworkers)
        stop_workers(l);
    for (int p = 0; p < WI_MAX_POLICIES; p++) {
        free(l->lane[p].ids);
        free(l->lane[p].held);
    }
    free(l->free_refs);
    for (int i = 0; i < 2; i++) {
        free(l->buf[i]);
        free(l->where[i]);
    }
    free(l);
}
