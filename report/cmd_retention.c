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
 * chain). retention.c reads them as the replay goes, matching each
 * storage with the allocation live at its address at that moment - the
 * site that allocated it - so a holder's bytes are shown here by the
 * sites they came from.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "retention.h"

#define RET_SITES_SHOWN 2 /* named per holder in the text */

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

/* ---- output ------------------------------------------------------------------------ */

static const char *site_text(struct loaded *l, const struct gmt_common *c, const struct ret_holder *h,
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

/* Sorted holders to show: the first `top` top-level ones (0: all) and
 * those nested in them. The top-level holders in all, in *ntop. */
static size_t holders_shown(const struct ret_capture *k, int top, size_t *ntop)
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

static void text(struct loaded *l, const struct gmt_common *c, struct gmt_ret *t)
{
    const struct replay *r = &l->r;
    printf("trace:     %s\n", l->path);
    const char *cmd = r->defs.process.cmdline;
    printf("process:   pid %u, %s\n", r->hdr.pid, cmd && *cmd ? cmd : "?");
    if (t->ncaps == 0) {
        printf("retention: %s\n", gmt_ret_why_none(t, r));
        return;
    }
    static const char *const hdr[] = {"retained", "storages", "held by", "allocated at"};
    static const bool right[] = {true, true, false, false};
    for (size_t i = 0; i < t->ncaps; i++) {
        struct ret_capture *k = &t->caps[i];
        size_t ntop, shown = holders_shown(k, c->top, &ntop), tops = 0;
        printf("\ncapture %u at %s, %.3f s: %" PRIu64 " tensor storage%s, %zu holder%s; %" PRIu64
               " objects walked in %.3f s%s%s\n", k->id, k->reason, at_s(r, k->time),
               k->storages, k->storages == 1 ? "" : "s", ntop, ntop == 1 ? "" : "s", k->objects,
               k->seconds, k->bound[0] ? "; cut short: " : "", k->bound);
        struct table *tb = table_new(4, hdr, right);
        for (size_t j = 0; tb && j < shown; j++) {
            const struct ret_holder *h = &k->h[j];
            char a[32], n[32], sites[512] = "", held[RET_CHAIN_SHOWN + 16];
            char *ch = gmt_ret_chain_text(h->chain, true);
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

static void json(struct loaded *l, const struct gmt_common *c, struct gmt_ret *t)
{
    const struct replay *r = &l->r;
    gmt_json_trace(l);
    printf(",\"pid\":%u,\"captures\":[", r->hdr.pid);
    for (size_t i = 0; i < t->ncaps; i++) {
        struct ret_capture *k = &t->caps[i];
        printf("%s{\"id\":%u,\"reason\":", i ? "," : "", k->id);
        gmt_json_str(stdout, k->reason);
        printf(",\"at_ns\":%" PRIu64 ",\"objects\":%" PRIu64 ",\"seconds\":%.3f,\"storages\":%"
               PRIu64 ",\"bound\":", k->time > r->hdr.start_monotonic_ns ?
               k->time - r->hdr.start_monotonic_ns : 0, k->objects, k->seconds, k->storages);
        gmt_json_str(stdout, k->bound);
        printf(",\"holders\":[");
        size_t ntop, shown = holders_shown(k, c->top, &ntop);
        /* holders and storages name a holder by its place in this list */
        const size_t *rank = k->rank;
        for (size_t j = 0; rank && j < shown; j++) {
            const struct ret_holder *h = &k->h[j];
            printf("%s{\"retained\":%" PRIu64 ",\"storages\":%" PRIu64 ",\"parent\":%ld,"
                   "\"chain\":", j ? "," : "", h->retained, h->storages,
                   h->parent < 0 ? -1L : (long)rank[h->parent]);
            gmt_ret_json_chain(stdout, h->chain, false);
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
            const struct ret_block *b = &k->b[j];
            printf("%s{\"address\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"holder\":%ld,"
                   "\"nested\":%ld,\"chain\":", j ? "," : "", b->ptr, b->bytes,
                   b->holder < 0 ? -1L : (long)rank[b->holder],
                   b->nested < 0 ? -1L : (long)rank[b->nested]);
            gmt_ret_json_chain(stdout, b->chain, false);
            if (b->live) {
                printf(",\"allocated\":%" PRIu64 ",\"site\":", b->block);
                gmt_json_str(stdout, sym_site(l->sym, b->stack, c->grain, c->depth));
            }
            printf("}");
        }
        printf("]}");
    }
    printf("]");
    if (t->ncaps == 0) {
        printf(",\"why\":");
        gmt_json_str(stdout, gmt_ret_why_none(t, r));
    }
    printf(",\"skipped_lines\":%" PRIu64 "}", t->skipped);
}

static void each(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct gmt_ret *t = ctx;
    gmt_ret_finish(t, &l->r);
    if (t->nomem)
        gmt_warnf("%s: not enough host memory for every retention line", l->path);
    if (t->skipped)
        gmt_warnf("%s: %" PRIu64 " retention lines did not parse (damaged?); skipped",
                  l->path, t->skipped);
    if (c->json)
        json(l, c, t);
    else
        text(l, c, t);
    gmt_ret_reset(t);
}

int cmd_retention(int argc, char **argv)
{
    const struct gmt_command cmd = {
        .schema = "gpumemtrace.retention/1",
        .args = {.usage = usage},
        .each = each,
        .replay = {.observe = {GMT_RETENTION_OBSERVER}},
        .default_top = 10,
    };
    gmt_ret_reset(&gmt_retention);
    int rc = gmt_run(argc, argv, &cmd, &gmt_retention);
    gmt_ret_reset(&gmt_retention);
    return rc;
}
