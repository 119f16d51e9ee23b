/* gen_trace.c - write a large synthetic trace, fast.
 *
 * usage: gen_trace EVENTS OUT [THREADS [STACKS]]
 * Writes a valid .gmt file (format 1.0) the way the recorder lays one out:
 * a header, per-thread 64 KiB chunks interleaved in the file, a process,
 * module and stack definitions, then EVENTS events from THREADS threads
 * (default 4) in one global sequence: allocations from STACKS call stacks
 * (default 200; more share their outer frames as a program's do, and
 * their two innermost frames tell them apart, so up to 16 M are distinct)
 * of 8 frames (512 B .. 64 MiB, each thread holding up to 4096 live
 * blocks), frees,
 * host-to-device and device-to-host copies (pinned and pageable), sets,
 * device synchronizations, and a pool sample every 10,000 events. Sizes
 * and sites are pseudo-random with a fixed seed: the same command writes
 * the same bytes. Used to measure gpumemreport's speed on a 100M-event
 * trace (scripts/bench-report.sh); refuses to overwrite OUT.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gmt_format.h"

#define CHUNK (64u * 1024u)
#define SITES 200
#define MAX_STACKS (1u << 24)
#define MAXT 16
#define LIVE 4096

struct thr {
    uint8_t buf[CHUNK];
    uint32_t used, ordinal, index;
    uint64_t first_seq, first_time, r_seq, r_time, r_a, r_b;
    uint32_t r_dev;
    uint64_t live[LIVE], live_size[LIVE];
    uint32_t nlive;
};

static FILE *out;
static uint64_t chunks_written;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void flush(struct thr *t)
{
    struct gmt_chunk_header h = {GMT_CHUNK_MAGIC, t->used, t->index, t->ordinal++,
                                 t->first_seq, t->first_time};
    memcpy(t->buf, &h, sizeof h);
    memset(t->buf + t->used, 0, CHUNK - t->used);
    if (fwrite(t->buf, CHUNK, 1, out) != 1) {
        perror("gen_trace: write");
        exit(2);
    }
    chunks_written++;
    t->used = GMT_CHUNK_HEADER_SIZE;
    t->first_seq = 0;
    t->r_a = t->r_b = 0;
    t->r_dev = 0;
}

/* Start a record; the caller appends the body at *p. */
static uint8_t *begin(struct thr *t, unsigned tag, uint64_t seq, uint64_t time)
{
    if (CHUNK - t->used < 512)
        flush(t);
    if (t->first_seq == 0) {
        t->first_seq = t->r_seq = seq;
        t->first_time = t->r_time = time;
    }
    uint8_t *p = t->buf + t->used;
    *p++ = (uint8_t)tag;
    p = gmt_put_varint(p, seq - t->r_seq);
    p = gmt_put_varint(p, time - t->r_time);
    t->r_seq = seq;
    t->r_time = time;
    return p;
}

static void end(struct thr *t, uint8_t *p)
{
    t->used = (uint32_t)(p - t->buf);
}

/* A core record: the body from gmt_format.h's description of its kind. */
static void core(struct thr *t, uint64_t seq, uint64_t time, const struct gmt_body *b)
{
    uint8_t *p = begin(t, b->kind, seq, time);
    end(t, gmt_encode_body(p, b, &t->r_a, &t->r_b));
}

static void ext(struct thr *t, uint64_t seq, uint64_t time, unsigned kind,
                const uint8_t *payload, size_t len)
{
    uint8_t *p = begin(t, GMT_K_EXT, seq, time);
    p = gmt_put_varint(p, kind);
    p = gmt_put_varint(p, len);
    memcpy(p, payload, len);
    end(t, p + len);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: gen_trace EVENTS OUT [THREADS [STACKS]]\n");
        return 2;
    }
    uint64_t events = strtoull(argv[1], NULL, 10);
    int nt = argc > 3 ? atoi(argv[3]) : 4;
    uint64_t nstacks = argc > 4 ? strtoull(argv[4], NULL, 10) : SITES;
    if (nt < 1 || nt > MAXT || nstacks < 1 || nstacks > MAX_STACKS)
        return 2;
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || (out = fdopen(fd, "wb")) == NULL) {
        perror(argv[2]);
        return 2;
    }
    static uint8_t header[GMT_HEADER_SIZE];
    struct gmt_file_header *h = (struct gmt_file_header *)header;
    memcpy(h->magic, GMT_MAGIC, 8);
    h->version_major = GMT_VERSION_MAJOR;
    h->version_minor = GMT_VERSION_MINOR;
    h->min_reader_major = 1;
    h->header_size = GMT_HEADER_SIZE;
    h->endian = GMT_ENDIAN_MARK;
    h->features = GMT_FEAT_NATIVE_STACKS | GMT_FEAT_POOL;
    h->chunk_size = CHUNK;
    h->flags = GMT_FLAG_CLOSED;
    h->session_id = 42;
    h->pid = 4242;
    h->ppid = 1;
    h->start_monotonic_ns = 1000000000ull;
    fwrite(header, sizeof header, 1, out);

    struct thr *th = calloc((size_t)nt, sizeof *th);
    for (int i = 0; i < nt; i++) {
        th[i].index = (uint32_t)i + 1;
        th[i].used = GMT_CHUNK_HEADER_SIZE;
    }
    uint64_t seq = 1, time = h->start_monotonic_ns + 1000;
    uint8_t pl[512], *p;
    /* definitions: process, one module, the sites' stacks */
    const char cmd[] = "gen_trace\0synthetic";
    p = gmt_put_varint(pl, 4242);
    p = gmt_put_varint(p, 1);
    p = gmt_put_varint(p, 42);
    p = gmt_put_varint(p, 0);
    p = gmt_put_varint(p, 0);
    p = gmt_put_varint(p, sizeof cmd);
    memcpy(p, cmd, sizeof cmd);
    p += sizeof cmd;
    p = gmt_put_varint(p, 3);
    memcpy(p, "gen", 3);
    p += 3;
    p = gmt_put_varint(p, 0);
    ext(&th[0], seq++, time, GMT_X_PROCESS, pl, (size_t)(p - pl));
    p = gmt_put_varint(pl, 1);
    p = gmt_put_varint(p, 0x400000);
    p = gmt_put_varint(p, 0x400000);
    p = gmt_put_varint(p, nstacks <= SITES ? 0x800000 : 0x400000 + 0x10000000);
    p = gmt_put_varint(p, 0);
    p = gmt_put_varint(p, 14);
    memcpy(p, "/gen/synthetic", 14);
    p += 14;
    ext(&th[0], seq++, time, GMT_X_MODULE, pl, (size_t)(p - pl));
    for (uint64_t s = 1; s <= nstacks; s++) {
        p = gmt_put_varint(pl, s);
        p = gmt_put_varint(p, 8);
        uint64_t prev = 0;
        for (unsigned f = 0; f < 8; f++) {
            /* the default's 200 as before; beyond that, frames 0 and 1 are
             * s's two base-4096 digits (in their own 1 MiB of the module),
             * the outer six one of 64 call paths */
            uint64_t ip = nstacks <= SITES ? 0x401000 + s * 64 + f * 0x1000
                          : f < 2 ? 0x401000 + f * 0x100000 + (s >> (12 * f) & 4095) * 16
                                  : 0x601000 + f * 0x100000 + (s % 64) * 16;
            p = gmt_put_svarint(p, (int64_t)(ip - prev));
            prev = ip;
        }
        ext(&th[0], seq++, time, GMT_X_STACK, pl, (size_t)(p - pl));
    }
    uint64_t next_addr = 0x7f0000000000ull, n = 0;
    while (n < events) {
        struct thr *t = &th[next() % (uint64_t)nt];
        time += 200 + next() % 2000;
        uint64_t r = next() % 100;
        /* the fields in the order they draw their random numbers: the
         * same command writes the same bytes */
        if (n % 10000 == 9999) {
            struct gmt_body b = {.kind = GMT_K_SAMPLE};
            for (int i = 0; i < 6; i++)
                b.v[i] = next() % (1ull << 32);
            core(t, seq++, time, &b);
        } else if (r < 35 && t->nlive < LIVE) {
            uint64_t size = 512ull << (next() % 18); /* 512 B .. 64 MiB */
            uint64_t a = next_addr;
            next_addr += (size + 4095) & ~4095ull;
            struct gmt_body b = {.kind = GMT_K_ALLOC, .api = GMT_API_MALLOC,
                                 .addr = a, .size = size};
            b.stack = (uint32_t)(1 + next() % nstacks);
            core(t, seq++, time, &b);
            t->live[t->nlive] = a;
            t->live_size[t->nlive++] = size;
        } else if (r < 70 && t->nlive > 0) {
            uint32_t k = (uint32_t)(next() % t->nlive);
            struct gmt_body b = {.kind = GMT_K_FREE, .api = GMT_API_FREE,
                                 .addr = t->live[k]};
            b.stack = (uint32_t)(1 + next() % nstacks);
            core(t, seq++, time, &b);
            t->live[k] = t->live[--t->nlive];
            t->live_size[k] = t->live_size[t->nlive];
        } else if (r < 90 && t->nlive > 0) {
            uint64_t a = t->live[next() % t->nlive];
            bool h2d = next() & 1;
            struct gmt_body b = {.kind = GMT_K_MEMCPY, .api = GMT_API_MEMCPY_ASYNC};
            b.dir = (uint8_t)((h2d ? GMT_DIR_H2D : GMT_DIR_D2H) |
                              (1 + next() % 2) << GMT_HOSTMEM_SHIFT);
            uint64_t host = 0x5500000000ull + (next() % 1024) * 4096;
            b.addr = h2d ? a : host; /* dst */
            b.addr2 = h2d ? host : a;
            b.size = 4096 + next() % 65536;
            b.stack = (uint32_t)(1 + next() % nstacks);
            core(t, seq++, time, &b);
        } else if (t->nlive > 0) {
            struct gmt_body b = {.kind = GMT_K_MEMSET, .api = GMT_API_MEMSET_ASYNC,
                                 .size = 65536};
            b.addr = t->live[next() % t->nlive];
            b.stack = (uint32_t)(1 + next() % nstacks);
            core(t, seq++, time, &b);
        } else {
            continue;
        }
        n++;
    }
    for (int i = 0; i < nt; i++)
        if (th[i].used > GMT_CHUNK_HEADER_SIZE)
            flush(&th[i]);
    /* the header learns the end */
    h->end_monotonic_ns = time;
    h->data_end = GMT_HEADER_SIZE + chunks_written * CHUNK;
    fseek(out, 0, SEEK_SET);
    fwrite(header, sizeof header, 1, out);
    if (fclose(out) != 0) {
        perror("gen_trace");
        return 2;
    }
    printf("%llu events, %llu chunks, %llu bytes\n", (unsigned long long)n,
           (unsigned long long)chunks_written,
           (unsigned long long)(GMT_HEADER_SIZE + chunks_written * CHUNK));
    return 0;
}
