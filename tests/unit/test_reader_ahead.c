/* test_reader_ahead.c - chunks decoded ahead on other threads
 * (report/trace/reader_ahead.c), by one, two or three of them, give the
 * records, in the order, and the damage accounts that decoding each chunk
 * as it is reached gives: on a clean multi-thread trace (every chunk taken
 * from the read-ahead), on a one-thread trace (the merge's shortcut), on
 * one with malformed records in some chunks, and on one whose chunk order
 * was not foreseen (read-ahead stops, the rest is read as before). The
 * traces are tests/bench/gen_trace's, next to this binary's folder. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "reader_internal.h"

struct got {
    struct gmt_rec *recs;
    uint8_t *payload; /* each record's payload, one after another */
    size_t n, npay, cap, cap_pay;
    int end;          /* gmt_reader_next's last result */
    char damage[512], error[512];
    size_t taken, chunks;
};

static void append(struct got *g, const struct gmt_rec *rec)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 4096;
        g->recs = realloc(g->recs, g->cap * sizeof *g->recs);
    }
    g->recs[g->n] = *rec;
    g->recs[g->n].payload = NULL;
    if (rec->len) {
        if (g->npay + rec->len > g->cap_pay) {
            g->cap_pay = 2 * (g->npay + rec->len);
            g->payload = realloc(g->payload, g->cap_pay);
        }
        memcpy(g->payload + g->npay, rec->payload, rec->len);
        g->npay += rec->len;
    }
    g->n++;
}

/* Read path with `threads` decoding threads (0: alone; -1: as many as
 * the reader picks). */
static struct got read_all(const char *path, int threads)
{
    struct got g = {0};
    char n[16];
    snprintf(n, sizeof n, "%d", threads);
    if (threads < 0)
        unsetenv("GPUMEMREPORT_READ_AHEAD");
    else
        setenv("GPUMEMREPORT_READ_AHEAD", n, 1);
    char err[256];
    struct gmt_reader *r = gmt_reader_open(path, err, sizeof err);
    CHECK(r != NULL);
    if (r == NULL)
        return g;
    CHECK((r->ahead != NULL) == (threads != 0));
    CHECK(threads < 0 || gmt_ahead_threads(r) == threads);
    struct gmt_rec rec;
    while ((g.end = gmt_reader_next(r, &rec)) == 1)
        append(&g, &rec);
    gmt_reader_damage(r, g.damage, sizeof g.damage);
    snprintf(g.error, sizeof g.error, "%s", gmt_reader_error(r));
    g.taken = gmt_ahead_taken(r);
    g.chunks = r->nrefs;
    gmt_reader_close(r);
    return g;
}

static bool same_rec(const struct gmt_rec *a, const struct gmt_rec *b)
{
    return a->kind == b->kind && a->api == b->api && a->dir == b->dir && a->ext == b->ext &&
           a->seq == b->seq && a->time == b->time && a->thread == b->thread &&
           a->device == b->device && a->stream == b->stream && a->result == b->result &&
           a->addr == b->addr && a->addr2 == b->addr2 && a->size == b->size &&
           a->size2 == b->size2 && a->value == b->value && a->flags == b->flags &&
           !memcmp(a->v, b->v, sizeof a->v) && a->stack == b->stack &&
           a->priority == b->priority && a->len == b->len;
}

/* Reading path with 1, 2 and 3 decoding threads gives what reading it
 * alone gives; returns the one-thread read-ahead's chunks taken ahead,
 * and the record count in *n. */
static size_t both_agree(const char *path, size_t *n)
{
    struct got b = read_all(path, 0);
    size_t taken = 0;
    for (int threads = 1; threads <= 3; threads++) {
        struct got a = read_all(path, threads);
        CHECK(a.n == b.n && a.n > 0);
        CHECK(a.end == b.end);
        CHECK(strcmp(a.damage, b.damage) == 0);
        CHECK(strcmp(a.error, b.error) == 0);
        CHECK(a.npay == b.npay && (a.npay == 0 || !memcmp(a.payload, b.payload, a.npay)));
        size_t differ = 0;
        for (size_t i = 0; i < a.n && i < b.n; i++)
            differ += !same_rec(&a.recs[i], &b.recs[i]);
        CHECK(differ == 0);
        if (differ)
            fprintf(stderr, "%s, %d threads: %zu of %zu records differ\n", path, threads,
                    differ, a.n);
        if (threads == 1)
            taken = a.taken;
        free(a.recs), free(a.payload);
    }
    *n = b.n;
    free(b.recs), free(b.payload);
    return taken;
}

static void poke(const char *path, uint64_t off, const void *bytes, size_t len)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, bytes, len, (off_t)off) == (ssize_t)len);
    close(fd);
}

static struct gmt_file_header header(const char *path)
{
    struct gmt_file_header h = {0};
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h);
    close(fd);
    return h;
}

static void copy(const char *from, const char *to)
{
    char cmd[PATH_MAX * 2 + 16];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    (void)argc;
    char self[PATH_MAX], cmd[PATH_MAX + 64];
    snprintf(self, sizeof self, "%s", argv[0]);
    const char *dir = dirname(self);
    snprintf(cmd, sizeof cmd, "%s/../gen_trace 300000 ahead.gmt 4 >/dev/null", dir);
    unlink("ahead.gmt");
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot run %s\n", cmd);
        return 1;
    }
    size_t n, n_clean;
    size_t taken = both_agree("ahead.gmt", &n_clean);
    struct got g = read_all("ahead.gmt", -1);
    CHECK(g.chunks > 20 && taken == g.chunks); /* every chunk decoded ahead */
    CHECK(g.taken == g.chunks);
    free(g.recs), free(g.payload);

    /* one recording thread: the merge's shortcut, the same records */
    snprintf(cmd, sizeof cmd, "%s/../gen_trace 200000 one.gmt 1 >/dev/null", dir);
    unlink("one.gmt");
    CHECK(system(cmd) == 0);
    taken = both_agree("one.gmt", &n);
    CHECK(n > 200000 && taken > 20);

    /* malformed records in two chunks: read up to them, the same accounts */
    struct gmt_file_header h = header("ahead.gmt");
    copy("ahead.gmt", "damaged.gmt");
    static const uint8_t junk[24] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0xff};
    poke("damaged.gmt", h.header_size + 5ull * h.chunk_size + 300, junk, sizeof junk);
    poke("damaged.gmt", h.header_size + 9ull * h.chunk_size + GMT_CHUNK_HEADER_SIZE, junk, 1);
    /* (a record read wrongly past the junk can carry any sequence number:
     * the merge may then take chunks out of the order foreseen) */
    both_agree("damaged.gmt", &n);
    CHECK(n < n_clean);

    /* a chunk whose first sequence number is below its predecessor's in
     * its thread: the merge takes it later than its number says, read-ahead
     * stops there and the merge reads on alone */
    copy("ahead.gmt", "unforeseen.gmt");
    struct gmt_chunk_header c;
    int fd = open("unforeseen.gmt", O_RDONLY);
    CHECK(fd >= 0 && pread(fd, &c, sizeof c, h.header_size + 12ull * h.chunk_size) ==
                         (ssize_t)sizeof c);
    close(fd);
    c.first_seq = 1;
    poke("unforeseen.gmt", h.header_size + 12ull * h.chunk_size, &c, sizeof c);
    both_agree("unforeseen.gmt", &n);
    g = read_all("unforeseen.gmt", 2);
    CHECK(g.taken < g.chunks); /* stopped */
    free(g.recs), free(g.payload);
    return CHECK_DONE();
}
