/* cmd_retention.c - `gpumemreport retention`: which Python objects kept
 * the tensors alive, and how many bytes each holder retained.
 *
 * A traced Python program recorded with GPUMEMTRACE_RETENTION walks its
 * own objects at the moments asked for (preload/retention.c, .py) and
 * writes each capture as GMT_X_RETENTION lines: one `capture` line (the
 * moment's reason, objects walked, storages found, the walk's time and
 * the bound that cut it, if any), a `holder` line per holder (retained
 * bytes, storages, the chain from a root to it) and a `block` line per
 * tensor storage (its address and bytes, its holder, its own shortest
 * chain). The lines are read as the replay goes (an observer), so each
 * storage is matched with the allocation live at its address at that
 * moment - the site that allocated it - and a holder's bytes are shown by
 * the sites they came from.
 *
 * Traces are hostile input: a line that does not parse is counted and
 * skipped; counts are bounded (RET_MAX_CAPTURES captures, RET_MAX_LINES
 * lines in each).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "common.h"

#define RET_MAX_CAPTURES 64
#define RET_MAX_LINES 1000000
#define RET_SITES 4 /* allocation sites kept per holder */
#define RET_SITES_SHOWN 2 /* named per holder in the text */
#define STEP_SEP '\x1f'

static void usage(FILE *f)
{
    fprintf(f, "usage: %s retention [options] TRACE|DIR...\n\n"
               "Which Python objects kept the tensors alive, for a Python program\n"
               "recorded with GPUMEMTRACE_RETENTION=exit (or signal: on SIGUSR2):\n"
               "at each capture, the holders by the bytes they retained (what\n"
               "would be freed if that holder let go), each with the chain of\n"
               "references from a root (a module global, a live frame's local)\n"
               "and the sites that allocated its tensors.\n\n" GMT_COMMON_HELP,
            gmt_prog);
}

struct hsite {
    uint32_t stack;
    uint64_t bytes;
};

struct holder {
    size_t index;                 /* among the capture's holder lines */
    long parent;                  /* a nested holder: the index of the holder it
                                     lies in; -1: a top-level one */
    size_t top;                   /* the top-level holder it is or lies in */
    uint64_t top_retained;        /* that one's retained bytes: the sort key */
    uint64_t retained, storages;
    char *chain;
    struct hsite site[RET_SITES]; /* the largest, by bytes found live */
    size_t nsites;
    uint64_t other;               /* bytes from further sites */
    uint64_t unmatched;           /* bytes of storages no live allocation starts at */
    uint64_t allocated;           /* the blocks behind its storages: the live
                                     allocations' sizes as rounded, where found */
};

struct block {
    uint64_t ptr, bytes;
    long holder;    /* its top-level holder's index; -1: none */
    long nested;    /* the nested holder it lies in, -1: none (nested_in) */
    char *chain;
    bool live;
    uint32_t stack;
    uint64_t block; /* the live allocation's block bytes (rounded) */
};

/* The storages of the captures whose allocation is still live, by
 * address: a framework allocator may say a block's real size after the
 * capture (GMT_FWX_BLOCK_SIZE: PyTorch's bridge learns it at the device's
 * next allocator event), and that size is the block's until it is freed. */
struct bref {
    uint32_t cap, idx;
};

struct since {
    uint64_t addr;
    struct bref *refs;
    uint32_t n;
};

struct since_table {
    struct since *slot;
    size_t cap, n;
};

ADDRMAP_FUNCS(since, struct since_table, struct since, 256)

struct capture {
    unsigned id;
    char *reason, *bound;
    uint64_t objects, storages, holders, time;
    double seconds;
    struct holder *h;
    size_t nh, caph;
    struct block *b;
    size_t nb, capb;
    size_t lines;
};

struct ret {
    const struct replay *owner;
    uint64_t last_records;
    struct capture *caps;
    size_t ncaps, capc;
    char *armed;      /* the moments the program asked for */
    char *note;       /* what the bootstrap said */
    uint64_t skipped; /* lines that did not parse, or past the bounds */
    bool nomem;
    struct since_table live; /* captured storages not freed since */
};

/* ---- reading the lines --------------------------------------------------------- */

static void since_release_all(struct since_table *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i].refs);
    since_release(s);
}

static void ret_reset(struct ret *t)
{
    since_release_all(&t->live);
    for (size_t i = 0; i < t->ncaps; i++) {
        struct capture *c = &t->caps[i];
        free(c->reason);
        free(c->bound);
        for (size_t j = 0; j < c->nh; j++)
            free(c->h[j].chain);
        for (size_t j = 0; j < c->nb; j++)
            free(c->b[j].chain);
        free(c->h);
        free(c->b);
    }
    free(t->caps);
    free(t->armed);
    free(t->note);
    *t = (struct ret){0};
}

/* The TAB-separated fields of a line, in place: at most max. */
static size_t fields(char *s, char **f, size_t max)
{
    size_t n = 0;
    while (n < max) {
        f[n++] = s;
        char *tab = strchr(s, '\t');
        if (tab == NULL)
            break;
        *tab = '\0';
        s = tab + 1;
    }
    return n;
}

/* A count or a byte size: decimal digits, at most INT64_MAX. */
static bool number(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return *end == '\0' && errno == 0 && *out <= INT64_MAX;
}

static struct capture *capture_of(struct ret *t, unsigned id)
{
    for (size_t i = t->ncaps; i-- > 0;)
        if (t->caps[i].id == id)
            return &t->caps[i];
    return NULL;
}

static bool grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? 2 * *cap : 16;
    void *q = realloc(*p, c * size);
    if (q == NULL)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static bool on_capture(struct ret *t, const struct gmt_rec *rec, unsigned id, char **f, size_t n)
{
    uint64_t objects, storages, holders;
    if (n != 7 || id == 0 || capture_of(t, id) || t->ncaps == RET_MAX_CAPTURES ||
        !number(f[2], &objects) || !number(f[3], &storages) || !number(f[4], &holders))
        return false;
    if (!grow((void **)&t->caps, &t->capc, t->ncaps, sizeof *t->caps))
        return t->nomem = true, false;
    struct capture *c = &t->caps[t->ncaps++];
    *c = (struct capture){.id = id, .reason = strdup(f[1]), .bound = strdup(f[6]),
                          .objects = objects, .storages = storages, .holders = holders,
                          .seconds = strtod(f[5], NULL), .time = rec->time};
    t->nomem |= !c->reason || !c->bound;
    return true;
}

/* holder, retained, storages, chain[, the top-level holder it lies in,
 * -1: none - older recorders write no such field] */
static bool on_holder(struct ret *t, struct capture *c, char **f, size_t n)
{
    uint64_t retained, storages;
    long parent = -1;
    char *end = NULL;
    if ((n != 4 && n != 5) || !number(f[1], &retained) || !number(f[2], &storages))
        return false;
    if (n == 5 && ((parent = strtol(f[4], &end, 10)) < -1 || *end != '\0' ||
                   f[4][0] == '\0' || parent >= (long)c->nh ||
                   (parent >= 0 && c->h[parent].parent != -1)))
        return false;
    if (!grow((void **)&c->h, &c->caph, c->nh, sizeof *c->h))
        return t->nomem = true, false;
    size_t top = parent < 0 ? c->nh : (size_t)parent;
    c->h[c->nh] = (struct holder){.index = c->nh, .parent = parent, .top = top,
                                  .top_retained = parent < 0 ? retained : c->h[top].retained,
                                  .retained = retained, .storages = storages,
                                  .chain = strdup(f[3])};
    c->nh++;
    t->nomem |= !c->h[c->nh - 1].chain;
    return true;
}

/* A storage's bytes, under its holder, by the site that allocated it. */
static void count_site(struct holder *h, const struct block *b)
{
    h->allocated += b->live ? b->block : b->bytes;
    if (!b->live) {
        h->unmatched += b->bytes;
        return;
    }
    for (size_t i = 0; i < h->nsites; i++)
        if (h->site[i].stack == b->stack) {
            h->site[i].bytes += b->bytes;
            return;
        }
    if (h->nsites < RET_SITES)
        h->site[h->nsites++] = (struct hsite){b->stack, b->bytes};
    else
        h->other += b->bytes;
}

static bool on_block(struct ret *t, const struct replay *r, struct capture *c, char **f,
                     size_t n)
{
    uint64_t bytes;
    char *end;
    if (n != 5 || !number(f[2], &bytes) || f[1][0] == '\0')
        return false;
    uint64_t ptr = strtoull(f[1], &end, 16);
    long holder = strtol(f[3], NULL, 10);
    if (*end != '\0' || holder < -1 || holder >= (long)c->nh)
        return false;
    if (!grow((void **)&c->b, &c->capb, c->nb, sizeof *c->b))
        return t->nomem = true, false;
    const struct live *lv = replay_live_at(r, ptr);
    struct block *b = &c->b[c->nb++];
    *b = (struct block){.ptr = ptr, .bytes = bytes, .holder = holder, .nested = -1,
                        .chain = strdup(f[4]),
                        .live = lv != NULL, .stack = lv ? lv->stack : 0,
                        .block = lv ? LIVE_BLOCK(lv) : 0};
    t->nomem |= !b->chain;
    if (lv != NULL) { /* its size may be said later */
        struct since *e = since_find(&t->live, ptr);
        if (e == NULL && (e = since_insert(&t->live, ptr)) == NULL)
            return t->nomem = true, true;
        struct bref *refs = realloc(e->refs, (e->n + 1) * sizeof *refs);
        if (refs == NULL)
            return t->nomem = true, true;
        e->refs = refs;
        e->refs[e->n++] = (struct bref){(uint32_t)(c - t->caps), (uint32_t)(c->nb - 1)};
    }
    return true;
}

/* After the capture: a block's real size said (it applies to every
 * capture that saw the allocation), or the allocation freed (nothing said
 * of that address applies to them from then on). */
static void after_capture(struct ret *t, const struct gmt_rec *rec)
{
    if (t->live.n == 0)
        return;
    struct gmt_fw f;
    uint64_t addr;
    if (rec->kind == GMT_K_FREE && rec->result == 0)
        addr = rec->addr;
    else if (rec->kind == GMT_K_EXT && rec->ext == GMT_X_FW && gmt_fw_decode(rec, &f) == 0 &&
             f.action == GMT_FWX_BLOCK_SIZE)
        addr = f.addr;
    else
        return;
    struct since *e = since_find(&t->live, addr);
    if (e == NULL)
        return;
    if (rec->kind == GMT_K_FREE) {
        free(e->refs);
        since_remove(&t->live, e);
        return;
    }
    for (uint32_t i = 0; i < e->n; i++)
        t->caps[e->refs[i].cap].b[e->refs[i].idx].block = f.size;
}

/* One GMT_X_RETENTION record: capture varint, then the line. */
static void on_line(struct ret *t, const struct replay *r, const struct gmt_rec *rec)
{
    uint64_t id;
    const uint8_t *p = gmt_get_varint(rec->payload, rec->payload + rec->len, &id);
    if (p == NULL || id > UINT32_MAX) {
        t->skipped++;
        return;
    }
    size_t len = (size_t)(rec->payload + rec->len - p);
    char *s = malloc(len + 1);
    if (s == NULL) {
        t->nomem = true;
        return;
    }
    memcpy(s, p, len);
    s[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (s[i] == '\0' || s[i] == '\n')
            s[i] = ' '; /* a line is one line */
    char *f[8];
    size_t n = fields(s, f, 8);
    struct capture *c = capture_of(t, (unsigned)id);
    bool ok = false;
    if (!strcmp(f[0], "capture")) {
        ok = on_capture(t, rec, (unsigned)id, f, n);
    } else if (id == 0 && n == 2 && !strcmp(f[0], "armed")) {
        free(t->armed);
        ok = (t->armed = strdup(f[1])) != NULL;
    } else if (id == 0 && n == 2 && !strcmp(f[0], "note")) {
        free(t->note);
        ok = (t->note = strdup(f[1])) != NULL;
    } else if (c && c->lines < RET_MAX_LINES && !strcmp(f[0], "holder")) {
        ok = on_holder(t, c, f, n);
    } else if (c && c->lines < RET_MAX_LINES && !strcmp(f[0], "block")) {
        ok = on_block(t, r, c, f, n);
    }
    if (c)
        c->lines++;
    t->skipped += !ok;
    free(s);
}

/* an observer of the replay: every record, after the replay applied it */
static void on_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct ret *t = ctx;
    if (t->owner != r || r->records <= t->last_records) { /* a new trace */
        ret_reset(t);
        t->owner = r;
    }
    t->last_records = r->records;
    if (rec->kind == GMT_K_EXT && rec->ext == GMT_X_RETENTION)
        on_line(t, r, rec);
    else
        after_capture(t, rec);
}

/* Each storage counted under its top-level holder, and under the nested
 * holder it lies in: a holder dominates what it holds, so every path from
 * a root to such a storage passes through it, the storage's shortest
 * chain too - the holder's chain is where that chain begins. At the end
 * of the trace (a block's size may be said after the capture), before
 * sorting (the lines' indices still name the holders). */
static void nested_in(struct capture *k)
{
    for (size_t j = 0; j < k->nb; j++)
        if (k->b[j].holder >= 0)
            count_site(&k->h[k->b[j].holder], &k->b[j]);
    for (size_t j = 0; j < k->nb; j++) {
        struct block *b = &k->b[j];
        if (b->holder < 0 || !b->chain)
            continue;
        size_t best = 0;
        for (size_t i = (size_t)b->holder + 1; i < k->nh && k->h[i].parent == b->holder; i++) {
            const char *hc = k->h[i].chain;
            size_t n = hc ? strlen(hc) : 0;
            if (n > best && strncmp(b->chain, hc, n) == 0 &&
                (b->chain[n] == STEP_SEP || b->chain[n] == '\0')) {
                best = n;
                b->nested = (long)i;
            }
        }
        if (b->nested >= 0)
            count_site(&k->h[b->nested], b);
    }
}

/* ---- output ------------------------------------------------------------------------ */

/* A chain for reading: attribute and item steps follow the step before
 * them (`__main__.memory[3].grad_fn`); other steps after an arrow. In a
 * table (cut), one longer than CHAIN_SHOWN keeps its start and its end. */
#define CHAIN_SHOWN 100
static char *chain_text(const char *chain, bool cut)
{
    size_t len = strlen(chain);
    char *out = malloc(4 * len + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (const char *s = chain, *e; *s; s = *e ? e + 1 : e) {
        e = strchr(s, STEP_SEP);
        e = e ? e : s + strlen(s);
        if (o != out && *s != '.' && *s != '[' && *s != '{') {
            memcpy(o, " -> ", 4);
            o += 4;
        }
        memcpy(o, s, (size_t)(e - s));
        o += e - s;
    }
    *o = '\0';
    size_t n = (size_t)(o - out);
    if (cut && n > CHAIN_SHOWN) {
        size_t head = CHAIN_SHOWN / 2 - 2, tail = CHAIN_SHOWN - head - 3;
        memcpy(out + head, "...", 3);
        memmove(out + head + 3, out + n - tail, tail + 1);
    }
    return out;
}

static const char *site_text(struct loaded *l, const struct gmt_common *c, const struct holder *h,
                             char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < h->nsites && i < RET_SITES_SHOWN && at + 1 < len; i++) {
        char sz[32];
        at += (size_t)snprintf(buf + at, len - at, "%s%s %s", i ? "; " : "",
                               sym_site(l->sym, h->site[i].stack, c->grain, c->depth),
                               gmt_size(c, sz, (int64_t)h->site[i].bytes));
    }
    if (at + 1 < len && (h->other || h->nsites > RET_SITES_SHOWN))
        at += (size_t)snprintf(buf + at, len - at, "; other sites");
    if (at + 1 < len && h->unmatched)
        snprintf(buf + at, len - at, "%snot in the trace", at ? "; " : "");
    return buf;
}

/* Top-level holders by retained bytes, each followed by the holders
 * nested in it, by theirs. */
static int cmp_holder(const void *a, const void *b)
{
    const struct holder *x = a, *y = b;
    if (x->top_retained != y->top_retained)
        return x->top_retained > y->top_retained ? -1 : 1;
    if (x->top != y->top)
        return x->top < y->top ? -1 : 1;
    if ((x->parent >= 0) != (y->parent >= 0))
        return x->parent >= 0 ? 1 : -1;
    if (x->retained != y->retained)
        return x->retained > y->retained ? -1 : 1;
    return strcmp(x->chain ? x->chain : "", y->chain ? y->chain : "");
}

/* Sorted holders to show: the first `top` top-level ones (0: all) and
 * those nested in them. The top-level holders in all, in *ntop. */
static size_t holders_shown(const struct capture *k, int top, size_t *ntop)
{
    size_t shown = k->nh, tops = 0;
    for (size_t j = 0; j < k->nh; j++) {
        if (k->h[j].parent >= 0)
            continue;
        if (top && tops == (size_t)top && shown == k->nh)
            shown = j;
        tops++;
    }
    *ntop = tops;
    return shown;
}

static double at_s(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? (double)(t - r->hdr.start_monotonic_ns) / 1e9 : 0;
}

/* Why there is no capture to show. */
static const char *why_none(const struct ret *t, const struct replay *r)
{
    if (t->note)
        return t->note;
    if (t->armed)
        return r->cut ? "asked for, but the process ended before a capture (killed or crashed?)"
                      : "asked for, but no capture was taken";
    if (!(r->hdr.features & GMT_FEAT_PYTHON_STACKS))
        return "a program without Python: nothing to capture";
    return "none recorded: record with GPUMEMTRACE_RETENTION=exit (or signal, then "
           "kill -USR2 the process)";
}

static void text(struct loaded *l, const struct gmt_common *c, struct ret *t)
{
    const struct replay *r = &l->r;
    printf("trace:     %s\n", l->path);
    const char *cmd = r->defs.process.cmdline;
    printf("process:   pid %u, %s\n", r->hdr.pid, cmd && *cmd ? cmd : "?");
    if (t->ncaps == 0) {
        printf("retention: %s\n", why_none(t, r));
        return;
    }
    static const char *const hdr[] = {"retained", "storages", "held by", "allocated at"};
    static const bool right[] = {true, true, false, false};
    for (size_t i = 0; i < t->ncaps; i++) {
        struct capture *k = &t->caps[i];
        qsort(k->h, k->nh, sizeof *k->h, cmp_holder);
        size_t ntop, shown = holders_shown(k, c->top, &ntop), tops = 0;
        printf("\ncapture %u at %s, %.3f s: %" PRIu64 " tensor storage%s, %zu holder%s; %" PRIu64
               " objects walked in %.3f s%s%s\n", k->id, k->reason, at_s(r, k->time),
               k->storages, k->storages == 1 ? "" : "s", ntop, ntop == 1 ? "" : "s", k->objects,
               k->seconds, k->bound[0] ? "; cut short: " : "", k->bound);
        struct table *tb = table_new(4, hdr, right);
        for (size_t j = 0; tb && j < shown; j++) {
            const struct holder *h = &k->h[j];
            char a[32], n[32], sites[512] = "", held[CHAIN_SHOWN + 16];
            char *ch = chain_text(h->chain, true);
            snprintf(n, sizeof n, "%" PRIu64, h->storages);
            /* a nested holder: inside the row above it */
            snprintf(held, sizeof held, "%s%s", h->parent >= 0 ? "  in it: " : "", ch ? ch : "?");
            tops += h->parent < 0;
            table_row(tb, gmt_size(c, a, (int64_t)h->retained), n, held,
                      site_text(l, c, h, sites, sizeof sites));
            free(ch);
        }
        if (tb) {
            table_print(tb, c->markdown);
            table_free(tb);
        }
        if (tops < ntop)
            printf("(%zu more holders: --top 0)\n", ntop - tops);
    }
}

static void json_chain(const char *chain)
{
    printf("[");
    for (const char *s = chain, *e; *s; s = *e ? e + 1 : e) {
        e = strchr(s, STEP_SEP);
        e = e ? e : s + strlen(s);
        char *step = strndup(s, (size_t)(e - s));
        printf("%s", s == chain ? "" : ",");
        gmt_json_str(stdout, step ? step : "");
        free(step);
    }
    printf("]");
}

static void json(struct loaded *l, const struct gmt_common *c, struct ret *t)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"captures\":[", r->hdr.pid);
    for (size_t i = 0; i < t->ncaps; i++) {
        struct capture *k = &t->caps[i];
        qsort(k->h, k->nh, sizeof *k->h, cmp_holder);
        printf("%s{\"id\":%u,\"reason\":", i ? "," : "", k->id);
        gmt_json_str(stdout, k->reason);
        printf(",\"at_ns\":%" PRIu64 ",\"objects\":%" PRIu64 ",\"seconds\":%.3f,\"storages\":%"
               PRIu64 ",\"bound\":", k->time > r->hdr.start_monotonic_ns ?
               k->time - r->hdr.start_monotonic_ns : 0, k->objects, k->seconds, k->storages);
        gmt_json_str(stdout, k->bound);
        printf(",\"holders\":[");
        size_t ntop, shown = holders_shown(k, c->top, &ntop);
        /* holders and storages name a holder by its place in this list */
        size_t *rank = malloc((k->nh ? k->nh : 1) * sizeof *rank);
        for (size_t j = 0; rank && j < k->nh; j++)
            rank[k->h[j].index] = j;
        for (size_t j = 0; rank && j < shown; j++) {
            const struct holder *h = &k->h[j];
            printf("%s{\"retained\":%" PRIu64 ",\"storages\":%" PRIu64 ",\"parent\":%ld,"
                   "\"chain\":", j ? "," : "", h->retained, h->storages,
                   h->parent < 0 ? -1L : (long)rank[h->parent]);
            json_chain(h->chain);
            printf(",\"sites\":[");
            for (size_t s = 0; s < h->nsites; s++) {
                printf("%s{\"site\":", s ? "," : "");
                gmt_json_str(stdout, sym_site(l->sym, h->site[s].stack, c->grain, c->depth));
                printf(",\"bytes\":%" PRIu64 "}", h->site[s].bytes);
            }
            printf("],\"other_sites_bytes\":%" PRIu64 ",\"not_in_trace_bytes\":%" PRIu64
                   ",\"allocated\":%" PRIu64 "}", h->other, h->unmatched, h->allocated);
        }
        printf("],\"holders_total\":%zu,\"blocks\":[", ntop);
        for (size_t j = 0; rank && j < k->nb; j++) {
            const struct block *b = &k->b[j];
            printf("%s{\"address\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"holder\":%ld,"
                   "\"nested\":%ld,\"chain\":", j ? "," : "", b->ptr, b->bytes,
                   b->holder < 0 ? -1L : (long)rank[b->holder],
                   b->nested < 0 ? -1L : (long)rank[b->nested]);
            json_chain(b->chain);
            if (b->live) {
                printf(",\"allocated\":%" PRIu64 ",\"site\":", b->block);
                gmt_json_str(stdout, sym_site(l->sym, b->stack, c->grain, c->depth));
            }
            printf("}");
        }
        free(rank);
        printf("]}");
    }
    printf("]");
    if (t->ncaps == 0) {
        printf(",\"why\":");
        gmt_json_str(stdout, why_none(t, r));
    }
    printf(",\"skipped_lines\":%" PRIu64 "}", t->skipped);
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct ret *t = ctx;
    if (t->owner != &l->r)
        ret_reset(t);
    for (size_t i = 0; i < t->ncaps; i++)
        nested_in(&t->caps[i]);
    if (t->nomem)
        gmt_warnf("%s: not enough host memory for every retention line", l->path);
    if (t->skipped)
        gmt_warnf("%s: %" PRIu64 " retention lines did not parse (damaged?); skipped",
                  l->path, t->skipped);
    if (c->json)
        json(l, c, t);
    else
        text(l, c, t);
    ret_reset(t);
}

int cmd_retention(int argc, char **argv)
{
    static struct ret t;
    const struct gmt_command cmd = {
        .schema = "gpumemtrace.retention/1",
        .args = {.usage = usage},
        .each = each,
        .replay = {.observe = {{.event = on_event, .ctx = &t}}},
        .default_top = 10,
    };
    memset(&t, 0, sizeof t);
    int rc = gmt_run(argc, argv, &cmd, &t);
    ret_reset(&t);
    return rc;
}
