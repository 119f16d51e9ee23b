/* reader_ahead.c - chunks decoded ahead, on a second thread.
 *
 * Decoding is most of what reading a trace costs, and each chunk decodes
 * on its own (its registers start afresh). The merge of the threads'
 * streams (reader.c) takes chunks in the order of their first sequence
 * numbers: a chunk is loaded when its first record is the next in the
 * trace's order. So a second thread decodes the chunks in that order,
 * ahead of the merge, into a few slots: each holds a chunk's bytes and its
 * records, up to where it is malformed, with what reading it there would
 * have said (reader.c says it when the merge gets there, as it would
 * have). The merge takes each chunk as it needs it; when it asks for one
 * that was not foreseen (a damaged trace whose sequence numbers go back),
 * read-ahead stops and it decodes the rest itself. Memory: a slot per
 * thread of the trace being read plus AHEAD, none of it the trace's
 * length. Traces of fewer than AHEAD_MIN_CHUNKS chunks are read alone;
GPUMEMREPORT_READ_AHEAD=0 turns it off.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "reader_internal.h"

#define AHEAD 4          /* chunks decoded beyond those the merge holds */
#define AHEAD_THREADS 64 /* a trace of more recording threads reads alone */
/* a trace of fewer chunks reads alone: starting a thread costs more than
 * decoding them (a fuzzer's small traces, loaded thousands of times) */
#define AHEAD_MIN_CHUNKS 16

struct ahead {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct chunk_ref **order; /* every chunk, as the merge takes them */
    size_t norder, decoded, taken;
    struct ahead_chunk *slots, *spare; /* spare: slots free to decode into */
    size_t nslots;
    struct ahead_chunk **ready;     /* decoded, in order: a ring */
    size_t rhead, nready;
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

/* Decode chunk pc->ref whole, as reader.c's merge would: a peek at each
 * record's sequence number, then the record. */
static void decode_chunk(const struct gmt_reader *r, struct ahead_chunk *pc)
{
    const struct chunk_ref *ref = pc->ref;
    pc->n = 0;
    pc->damaged = pc->peek_failed = pc->read_failed = pc->no_memory = false;
    if (!gmt_reader_pread(r->fd, pc->buf, ref->used,
                          r->hdr.header_size + ref->index * r->cs)) {
        pc->read_failed = true;
        return;
    }
    struct cursor c = {.buf = pc->buf, .pos = GMT_CHUNK_HEADER_SIZE, .end = ref->used,
                       .seq = ref->first_seq, .time = ref->first_time,
                       .thread = ref->thread};
    pc->end = ref->used;
    while (c.pos < c.end) {
        if (pc->n == pc->cap) {
            size_t cap = pc->cap ? 2 * pc->cap : 1024;
            struct gmt_rec *n = realloc(pc->recs, cap * sizeof *n);
            if (n == NULL) {
                pc->no_memory = true;
                return;
            }
            pc->recs = n;
            pc->cap = cap;
        }
        uint64_t seq = 0;
        bool peeked = gmt_reader_peek(&c, &seq);
        const char *what = gmt_reader_decode(&c, &pc->recs[pc->n]);
        if (what || !peeked) {
            pc->damaged = true;
            pc->peek_failed = !peeked;
            pc->fail_pos = c.pos;
            pc->fail_seq = seq;
            pc->decode_what = what ? what : "malformed event record";
            return;
        }
        pc->n++;
    }
}

static void *run(void *arg)
{
    struct gmt_reader *r = arg;
    struct ahead *a = r->ahead;
    pthread_mutex_lock(&a->mu);
    while (!a->stop && a->decoded < a->norder) {
        if (a->spare == NULL) {
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        struct ahead_chunk *pc = a->spare;
        a->spare = pc->next;
        pc->ref = a->order[a->decoded++];
        pthread_mutex_unlock(&a->mu);
        decode_chunk(r, pc);
        pthread_mutex_lock(&a->mu);
        a->ready[(a->rhead + a->nready++) % a->nslots] = pc;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void ahead_free(struct ahead *a)
{
    for (size_t i = 0; a->slots && i < a->nslots; i++) {
        free(a->slots[i].buf);
        free(a->slots[i].recs);
    }
    free(a->slots);
    free(a->ready);
    free(a->order);
    free(a);
}

void gmt_ahead_start(struct gmt_reader *r)
{
    const char *env = getenv("GPUMEMREPORT_READ_AHEAD");
    if (r->nrefs < AHEAD_MIN_CHUNKS || r->ncur > AHEAD_THREADS || (env && strcmp(env, "0") == 0))
        return;
    struct ahead *a = calloc(1, sizeof *a);
    if (a == NULL)
        return;
    a->nslots = r->ncur + AHEAD;
    a->norder = r->nrefs;
    a->order = malloc(r->nrefs * sizeof *a->order);
    a->slots = calloc(a->nslots, sizeof *a->slots);
    a->ready = calloc(a->nslots, sizeof *a->ready);
    bool ok = a->order && a->slots && a->ready;
    for (size_t i = 0; ok && i < a->nslots; i++) {
        ok = (a->slots[i].buf = malloc(r->cs)) != NULL;
        a->slots[i].next = a->spare;
        a->spare = &a->slots[i];
    }
    if (!ok) {
        ahead_free(a);
        return;
    }
    for (size_t i = 0; i < r->nrefs; i++)
        a->order[i] = &r->refs[i];
    qsort(a->order, a->norder, sizeof *a->order, by_first_seq);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    r->ahead = a;
    /* the decoding thread takes no signal: the program's handling of
     * them (SIGPIPE, a Ctrl-C) stays the main thread's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&a->thread, NULL, run, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        r->ahead = NULL;
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
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

struct ahead_chunk *gmt_ahead_take(struct gmt_reader *r, const struct chunk_ref *ref)
{
    struct ahead *a = r->ahead;
    if (a == NULL)
        return NULL;
    pthread_mutex_lock(&a->mu);
    struct ahead_chunk *pc = NULL;
    if (!a->stop && a->taken < a->norder && a->order[a->taken] == ref) {
        a->taken++;
        while (a->nready == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        pc = a->ready[a->rhead];
        a->rhead = (a->rhead + 1) % a->nslots;
        a->nready--;
    } else {
        a->stop = true; /* not the order foreseen: the merge reads alone */
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return pc;
}

void gmt_ahead_give_back(struct gmt_reader *r, struct ahead_chunk *pc)
{
    struct ahead *a = r->ahead;
    pthread_mutex_lock(&a->mu);
    pc->next = a->spare;
    a->spare = pc;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void gmt_ahead_stop(struct gmt_reader *r)
{
    struct ahead *a = r->ahead;
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    for (size_t i = 0; i < r->ncur; i++)
        r->cur[i].pc = NULL; /* their slots go with the rest */
    r->ahead = NULL;
    ahead_free(a);
}
