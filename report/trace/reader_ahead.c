/* reader_ahead.c - chunks decoded ahead, on other threads.
 *
 * Decoding is most of what reading a trace costs, and each chunk decodes
 * on its own (its registers start afresh). The merge of the threads'
 * streams (reader.c) takes chunks in the order of their first sequence
 * numbers: a chunk is loaded when its first record is the next in the
 * trace's order. So decoding threads take the chunks in that order, each
 * the next one not yet taken, and decode them ahead of the merge into a
 * few slots: each holds a chunk's bytes and its records, packed
 * (reader_internal.h), up to where it is malformed, with what reading it
 * there would have said (reader.c says it when the merge gets there, as
 * it would have). Chunks finish in any order; the merge takes them in
 * the order foreseen, waiting for the one it needs. When it asks for one
 * that was not foreseen (a damaged trace whose sequence numbers go back),
 * read-ahead stops and it decodes the rest itself.
 *
 * Threads: one per CPU this process may run on but one, the merge's (at
 * least one, up to AHEAD_MAX_THREADS); the merge decodes too while it
 * waits for a chunk. GPUMEMREPORT_READ_AHEAD=N asks for N threads, =0
 * turns read-ahead off. Memory: a slot per thread of the trace being
 * read, plus one per decoding thread, plus AHEAD - none of it the trace's
 * length, AHEAD_BYTES of chunks at most. Traces of fewer than
 * AHEAD_MIN_CHUNKS chunks are read alone.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "reader_internal.h"

#define AHEAD 4             /* slots beyond the merge's and the decoders' */
#define AHEAD_THREADS 64    /* a trace of more recording threads reads alone */
#define AHEAD_MAX_THREADS 8 /* decoders beyond the merge's pace wait anyway */
/* a trace of fewer chunks reads alone: starting a thread costs more than
 * decoding them (a fuzzer's small traces, loaded thousands of times) */
#define AHEAD_MIN_CHUNKS 16
/* nor do the slots' chunk bytes exceed this (their records take up to 8
 * bytes per byte, about 3 in practice): a trace of 16 MiB chunks, the
 * format's largest, reads alone */
#define AHEAD_BYTES (64u << 20)

struct ahead {
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t work;  /* a decoder waits for a free slot */
    pthread_cond_t ready; /* the merge waits for the chunk it takes next */
    const struct chunk_ref **order; /* every chunk, as the merge takes them */
    size_t norder;
    size_t claimed;       /* order[0 .. claimed) went to a decoder */
    size_t taken;         /* order[0 .. taken) went to the merge */
    struct dchunk *slots, *spare; /* spare: slots free to decode into */
    size_t nslots;
    /* the slot of order[i] for i in [taken, claimed), at i % nslots: each
     * holds a slot of its own, so they never number more than the slots */
    struct dchunk **ring;
    bool stop;
};

static int by_first_seq(const void *a, const void *b)
{
    const struct chunk_ref *x = *(const struct chunk_ref *const *)a,
                           *y = *(const struct chunk_ref *const *)b;
    if (x->first_seq != y->first_seq)
        return x->first_seq < y->first_seq ? -1 : 1;
    return x->thread < y->thread ? -1 : x->thread > y->thread;
}

/* Decode chunk d->ref whole, as reader.c does reading alone. */
static void decode_chunk(const struct gmt_reader *r, struct dchunk *d)
{
    const struct chunk_ref *ref = d->ref;
    d->n = d->nw = 0;
    d->damaged = d->read_failed = d->no_memory = false;
    if (!gmt_reader_pread(r->fd, d->buf, ref->used,
                          r->hdr.header_size + ref->index * r->cs)) {
        d->read_failed = true;
        return;
    }
    struct dstate s = {d->buf, GMT_CHUNK_HEADER_SIZE, ref->used,
                       ref->first_seq, ref->first_time, 0, 0};
    gmt_decode_records(&s, d, SIZE_MAX);
}

/* With a's lock held and a slot spare: claim the next chunk in order,
 * decode it (unlocked), mark it ready. */
static void decode_next(const struct gmt_reader *r, struct ahead *a)
{
    struct dchunk *d = a->spare;
    a->spare = d->next;
    size_t i = a->claimed++;
    d->ref = a->order[i];
    d->ready = false;
    a->ring[i % a->nslots] = d;
    pthread_mutex_unlock(&a->mu);
    decode_chunk(r, d);
    pthread_mutex_lock(&a->mu);
    d->ready = true;
    if (i == a->taken)
        pthread_cond_signal(&a->ready); /* the merge may wait for it */
}

static void *run(void *arg)
{
    struct gmt_reader *r = arg;
    struct ahead *a = r->ahead;
    pthread_mutex_lock(&a->mu);
    while (!a->stop && a->claimed < a->norder) {
        if (a->spare == NULL)
            pthread_cond_wait(&a->work, &a->mu);
        else
            decode_next(r, a);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void ahead_free(struct ahead *a)
{
    for (size_t i = 0; a->slots && i < a->nslots; i++) {
        free(a->slots[i].buf);
        free(a->slots[i].w);
    }
    free(a->slots);
    free(a->ring);
    free(a->order);
    free(a->threads);
    free(a);
}

/* How many decoding threads: GPUMEMREPORT_READ_AHEAD, else one per CPU
 * this process may run on but one, the merge's (at least one); 0: none.
 * A decoder more than that would take the merge's CPU from it at times,
 * and the merge, which replays the records too, is the slower. */
static int threads_wanted(void)
{
    const char *env = getenv("GPUMEMREPORT_READ_AHEAD");
    if (env && *env) {
        char *e;
        long n = strtol(env, &e, 10);
        if (*e == '\0' && n >= 0)
            return n < AHEAD_MAX_THREADS ? (int)n : AHEAD_MAX_THREADS;
    }
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) - 1 : 1;
    return n < 1 ? 1 : n < AHEAD_MAX_THREADS ? n : AHEAD_MAX_THREADS;
}

static struct ahead *ahead_new(const struct gmt_reader *r, int nthreads)
{
    struct ahead *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->nslots = r->ncur + (size_t)nthreads + AHEAD;
    a->norder = r->nrefs;
    a->order = malloc(r->nrefs * sizeof *a->order);
    a->slots = calloc(a->nslots, sizeof *a->slots);
    a->ring = calloc(a->nslots, sizeof *a->ring);
    a->threads = calloc((size_t)nthreads, sizeof *a->threads);
    bool ok = a->order && a->slots && a->ring && a->threads;
    for (size_t i = 0; ok && i < a->nslots; i++) {
        ok = (a->slots[i].buf = malloc(r->cs)) != NULL;
        a->slots[i].next = a->spare;
        a->spare = &a->slots[i];
    }
    if (!ok) {
        ahead_free(a);
        return NULL;
    }
    for (size_t i = 0; i < r->nrefs; i++)
        a->order[i] = &r->refs[i];
    qsort(a->order, a->norder, sizeof *a->order, by_first_seq);
    return a;
}

void gmt_ahead_start(struct gmt_reader *r)
{
    int want = threads_wanted();
    if (r->nrefs < AHEAD_MIN_CHUNKS || r->ncur > AHEAD_THREADS || want == 0 ||
        (r->ncur + (size_t)want + AHEAD) * r->cs > AHEAD_BYTES)
        return;
    struct ahead *a = ahead_new(r, want);
    if (a == NULL)
        return;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->ready, NULL);
    r->ahead = a;
    /* the decoding threads take no signal: the program's handling of
     * them (SIGPIPE, a Ctrl-C) stays the main thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    while (a->nthreads < want &&
           pthread_create(&a->threads[a->nthreads], NULL, run, r) == 0)
        a->nthreads++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (a->nthreads == 0) {
        r->ahead = NULL;
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->work);
        pthread_cond_destroy(&a->ready);
        ahead_free(a);
    }
}

size_t gmt_ahead_taken(const struct gmt_reader *r)
{
    struct ahead *a = r->ahead;
    if (a == NULL)
        return 0;
    pthread_mutex_lock(&a->mu);
    size_t n = a->taken;
    pthread_mutex_unlock(&a->mu);
    return n;
}

int gmt_ahead_threads(const struct gmt_reader *r)
{
    return r->ahead ? r->ahead->nthreads : 0;
}

struct dchunk *gmt_ahead_take(struct gmt_reader *r, const struct chunk_ref *ref)
{
    struct ahead *a = r->ahead;
    if (a == NULL)
        return NULL;
    pthread_mutex_lock(&a->mu);
    struct dchunk *d = NULL;
    if (!a->stop && a->taken < a->norder && a->order[a->taken] == ref) {
        size_t i = a->taken;
        /* waiting, the merge decodes too: the next chunk no decoder took
         * (this one, or one after it), so that a thread per CPU but the
         * merge's keeps every CPU busy whether or not the merge has
         * records to work on */
        while (a->claimed <= i || !a->ring[i % a->nslots]->ready) {
            if (a->spare && a->claimed < a->norder)
                decode_next(r, a);
            else
                pthread_cond_wait(&a->ready, &a->mu);
        }
        d = a->ring[i % a->nslots];
        a->taken++;
    } else {
        a->stop = true; /* not the order foreseen: the merge reads alone */
        pthread_cond_broadcast(&a->work);
    }
    pthread_mutex_unlock(&a->mu);
    return d;
}

void gmt_ahead_give_back(struct gmt_reader *r, struct dchunk *d)
{
    struct ahead *a = r->ahead;
    pthread_mutex_lock(&a->mu);
    d->next = a->spare;
    a->spare = d;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
}

void gmt_ahead_stop(struct gmt_reader *r)
{
    struct ahead *a = r->ahead;
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->nthreads; i++)
        pthread_join(a->threads[i], NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->ready);
    for (size_t i = 0; i < r->ncur; i++) {
        if (r->cur[i].ahead) { /* their slots go with the rest */
            r->cur[i].dc = NULL;
            r->cur[i].ahead = false;
        }
    }
    r->retired = NULL;
    r->ahead = NULL;
    ahead_free(a);
}
