/* retention.c - the retention captures of a trace, read as the replay
 * goes (retention.h), and who holds a site's memory.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "retention.h"

ADDRMAP_FUNCS(since, struct ret_since_table, struct ret_since, 256)

struct gmt_ret gmt_retention;

/* ---- reading the lines --------------------------------------------------------- */

static void since_release_all(struct ret_since_table *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i].refs);
    since_release(s);
}

void gmt_ret_reset(struct gmt_ret *t)
{
    since_release_all(&t->live);
    for (size_t i = 0; i < t->ncaps; i++) {
        struct ret_capture *c = &t->caps[i];
        free(c->reason);
        free(c->bound);
        for (size_t j = 0; j < c->nh; j++)
            free(c->h[j].chain);
        for (size_t j = 0; j < c->nb; j++)
            free(c->b[j].chain);
        free(c->h);
        free(c->b);
        free(c->rank);
    }
    free(t->caps);
    free(t->armed);
    free(t->note);
    *t = (struct gmt_ret){0};
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

static struct ret_capture *capture_of(struct gmt_ret *t, unsigned id)
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

static bool on_capture(struct gmt_ret *t, const struct gmt_rec *rec, unsigned id, char **f, size_t n)
{
    uint64_t objects, storages, holders;
    if (n != 7 || id == 0 || capture_of(t, id) || t->ncaps == RET_MAX_CAPTURES ||
        !number(f[2], &objects) || !number(f[3], &storages) || !number(f[4], &holders))
        return false;
    if (!grow((void **)&t->caps, &t->capc, t->ncaps, sizeof *t->caps))
        return t->nomem = true, false;
    struct ret_capture *c = &t->caps[t->ncaps++];
    *c = (struct ret_capture){.id = id, .reason = strdup(f[1]), .bound = strdup(f[6]),
                          .objects = objects, .storages = storages, .holders = holders,
                          .seconds = strtod(f[5], NULL), .time = rec->time};
    t->nomem |= !c->reason || !c->bound;
    return true;
}

/* holder, retained, storages, chain[, the top-level holder it lies in,
 * -1: none - older recorders write no such field] */
static bool on_holder(struct gmt_ret *t, struct ret_capture *c, char **f, size_t n)
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
    c->h[c->nh] = (struct ret_holder){.index = c->nh, .parent = parent, .top = top,
                                  .top_retained = parent < 0 ? retained : c->h[top].retained,
                                  .retained = retained, .storages = storages,
                                  .chain = strdup(f[3])};
    c->nh++;
    t->nomem |= !c->h[c->nh - 1].chain;
    return true;
}

/* A storage's bytes, under its holder, by the site that allocated it. */
static void count_site(struct ret_holder *h, const struct ret_block *b)
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
        h->site[h->nsites++] = (struct ret_site){b->stack, b->bytes};
    else
        h->other += b->bytes;
}

static bool on_block(struct gmt_ret *t, const struct replay *r, struct ret_capture *c, char **f,
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
    struct ret_block *b = &c->b[c->nb++];
    *b = (struct ret_block){.ptr = ptr, .bytes = bytes, .holder = holder, .nested = -1,
                        .chain = strdup(f[4]),
                        .live = lv != NULL, .stack = lv ? lv->stack : 0,
                        .block = lv ? LIVE_BLOCK(lv) : 0};
    t->nomem |= !b->chain;
    if (lv != NULL) { /* its size may be said later */
        struct ret_since *e = since_find(&t->live, ptr);
        if (e == NULL && (e = since_insert(&t->live, ptr)) == NULL)
            return t->nomem = true, true;
        struct ret_bref *refs = realloc(e->refs, (e->n + 1) * sizeof *refs);
        if (refs == NULL)
            return t->nomem = true, true;
        e->refs = refs;
        e->refs[e->n++] = (struct ret_bref){(uint32_t)(c - t->caps), (uint32_t)(c->nb - 1)};
    }
    return true;
}

/* After the capture: a block's real size said (it applies to every
 * capture that saw the allocation), or the allocation freed (nothing said
 * of that address applies to them from then on). */
static void after_capture(struct gmt_ret *t, const struct gmt_rec *rec)
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
    struct ret_since *e = since_find(&t->live, addr);
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
static void on_line(struct gmt_ret *t, const struct replay *r, const struct gmt_rec *rec)
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
    struct ret_capture *c = capture_of(t, (unsigned)id);
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
void gmt_ret_event(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    struct gmt_ret *t = ctx;
    /* most records say nothing of the captures: out before anything else
     * (this runs at every record of leaks, peak, growth and html) */
    if (__builtin_expect(rec->kind != GMT_K_EXT, 1) && (t->live.n == 0 || rec->kind != GMT_K_FREE))
        return;
    if (t->owner != r) { /* a new trace (the last one's replay let go: gmt_ret_release) */
        gmt_ret_reset(t);
        t->owner = r;
    }
    if (rec->kind == GMT_K_EXT && rec->ext == GMT_X_RETENTION)
        on_line(t, r, rec);
    else
        after_capture(t, rec);
}

void gmt_ret_release(struct replay *r, void *ctx)
{
    struct gmt_ret *t = ctx;
    if (t->owner == r)
        gmt_ret_reset(t);
}

/* Each storage counted under its top-level holder, and under the nested
 * holder it lies in: a holder dominates what it holds, so every path from
 * a root to such a storage passes through it, the storage's shortest
 * chain too - the holder's chain is where that chain begins. At the end
 * of the trace (a block's size may be said after the capture), before
 * sorting (the lines' indices still name the holders). */
static void nested_in(struct ret_capture *k)
{
    for (size_t j = 0; j < k->nb; j++)
        if (k->b[j].holder >= 0)
            count_site(&k->h[k->b[j].holder], &k->b[j]);
    for (size_t j = 0; j < k->nb; j++) {
        struct ret_block *b = &k->b[j];
        if (b->holder < 0 || !b->chain)
            continue;
        size_t best = 0;
        for (size_t i = (size_t)b->holder + 1; i < k->nh && k->h[i].parent == b->holder; i++) {
            const char *hc = k->h[i].chain;
            size_t n = hc ? strlen(hc) : 0;
            if (n > best && strncmp(b->chain, hc, n) == 0 &&
                (b->chain[n] == RET_STEP_SEP || b->chain[n] == '\0')) {
                best = n;
                b->nested = (long)i;
            }
        }
        if (b->nested >= 0)
            count_site(&k->h[b->nested], b);
    }
}

/* A chain for reading: attribute and item steps follow the step before
 * them (`__main__.memory[3].grad_fn`); other steps after an arrow. In a
 * table (cut), one longer than RET_CHAIN_SHOWN keeps its start and its end. */
#define RET_CHAIN_SHOWN 100
char *gmt_ret_chain_text(const char *chain, bool cut)
{
    size_t len = strlen(chain);
    char *out = malloc(4 * len + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (const char *s = chain, *e; *s; s = *e ? e + 1 : e) {
        e = strchr(s, RET_STEP_SEP);
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
    if (cut && n > RET_CHAIN_SHOWN) {
        size_t head = RET_CHAIN_SHOWN / 2 - 2, tail = RET_CHAIN_SHOWN - head - 3;
        memcpy(out + head, "...", 3);
        memmove(out + head + 3, out + n - tail, tail + 1);
    }
    return out;
}

/* Top-level holders by retained bytes, each followed by the holders
 * nested in it, by theirs. */
static int cmp_holder(const void *a, const void *b)
{
    const struct ret_holder *x = a, *y = b;
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

/* Why there is no capture to show. */
const char *gmt_ret_why_none(const struct gmt_ret *t, const struct replay *r)
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


void gmt_ret_finish(struct gmt_ret *t, const struct replay *r)
{
    if (t->owner != r)
        gmt_ret_reset(t);
    if (t->finished)
        return;
    t->finished = true;
    for (size_t i = 0; i < t->ncaps; i++) {
        struct ret_capture *k = &t->caps[i];
        nested_in(k);
        qsort(k->h, k->nh, sizeof *k->h, cmp_holder);
        if ((k->rank = malloc((k->nh ? k->nh : 1) * sizeof *k->rank)) == NULL) {
            t->nomem = true;
            continue;
        }
        for (size_t j = 0; j < k->nh; j++)
            k->rank[k->h[j].index] = j;
    }
}

/* A chain as a JSON list of its steps. */
void gmt_ret_json_chain(FILE *f, const char *chain, bool html)
{
    fprintf(f, "[");
    for (const char *s = chain, *e; *s; s = *e ? e + 1 : e) {
        e = strchr(s, RET_STEP_SEP);
        e = e ? e : s + strlen(s);
        char *step = strndup(s, (size_t)(e - s));
        fprintf(f, "%s", s == chain ? "" : ",");
        gmt_json_str_to(f, step ? step : "", html);
        free(step);
    }
    fprintf(f, "]");
}

/* ---- held by ---------------------------------------------------------------------- */

struct tally {
    long holder; /* a holder line's index */
    uint64_t bytes;
};

static int cmp_tally(const void *a, const void *b)
{
    const struct tally *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->holder < y->holder ? -1 : x->holder > y->holder;
}

/* Is storage b allocated at the site labelled `label`? */
static bool at_site(struct loaded *l, const struct gmt_common *c, struct ret_block *b,
                    const char *label)
{
    if (!b->live)
        return false;
    if (b->label == NULL)
        b->label = sym_site(l->sym, b->stack, c->grain, c->depth);
    return b->label && strcmp(b->label, label) == 0;
}

size_t gmt_held_by(struct loaded *l, const struct gmt_common *c, const char *label,
                   struct gmt_held *out, size_t max)
{
    struct gmt_ret *t = &gmt_retention;
    if (t->owner != &l->r) /* another replay of the trace: its captures are not read */
        return 0;
    gmt_ret_finish(t, &l->r);
    for (size_t i = t->ncaps; i-- > 0;) {
        struct ret_capture *k = &t->caps[i];
        if (k->rank == NULL)
            continue;
        struct tally *ty = NULL;
        size_t n = 0, cap = 0;
        for (size_t j = 0; j < k->nb; j++) {
            struct ret_block *b = &k->b[j];
            long who = b->nested >= 0 ? b->nested : b->holder;
            if (who < 0 || !at_site(l, c, b, label))
                continue;
            size_t x = 0;
            while (x < n && ty[x].holder != who)
                x++;
            if (x == n) {
                if (n == cap) {
                    struct tally *m = realloc(ty, (cap = cap ? 2 * cap : 8) * sizeof *ty);
                    if (m == NULL)
                        break;
                    ty = m;
                }
                ty[n++] = (struct tally){who, 0};
            }
            ty[x].bytes += b->bytes;
        }
        if (n == 0) {
            free(ty);
            continue;
        }
        qsort(ty, n, sizeof *ty, cmp_tally);
        size_t m = n < max ? n : max;
        for (size_t x = 0; x < m; x++)
            out[x] = (struct gmt_held){k, &k->h[k->rank[ty[x].holder]], ty[x].bytes};
        free(ty);
        return m;
    }
    return 0;
}

const char *gmt_held_text(const struct gmt_held *h, char *buf, size_t len)
{
    char *ch = gmt_ret_chain_text(h->h->chain ? h->h->chain : "", true);
    snprintf(buf, len, "held by %s (capture %u, %s)", ch ? ch : "?", h->cap->id,
             h->cap->reason ? h->cap->reason : "?");
    free(ch);
    return buf;
}

const char *gmt_held_row(const struct gmt_held *h, char *buf, size_t len)
{
    char text[RET_CHAIN_SHOWN + 200];
    snprintf(buf, len, "    %s", gmt_held_text(h, text, sizeof text));
    return buf;
}

void gmt_held_json(FILE *f, struct loaded *l, const struct gmt_common *c, const char *label,
                   size_t max, bool html)
{
    if (gmt_retention.owner != &l->r)
        return;
    gmt_ret_finish(&gmt_retention, &l->r);
    if (gmt_retention.ncaps == 0)
        return;
    struct gmt_held held[8];
    size_t n = gmt_held_by(l, c, label, held, max < 8 ? max : 8);
    fprintf(f, ",\"held_by\":[");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s{\"chain\":", i ? "," : "");
        gmt_ret_json_chain(f, held[i].h->chain ? held[i].h->chain : "", html);
        fprintf(f, ",\"bytes\":%" PRIu64 ",\"retained\":%" PRIu64 ",\"capture\":%u,\"reason\":",
                held[i].bytes, held[i].h->retained, held[i].cap->id);
        gmt_json_str_to(f, held[i].cap->reason ? held[i].cap->reason : "", html);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}
