/* html_oom.c - the page's out-of-memory events, explained (oomexplain.h).
 *
 * The same list as `summary --json`'s "oom_events", with the same fields
 * (docs/report-json.md): every event the replay kept, and the first
 * OOMX_FULL of them explained - the failed request's site, the device's
 * memory then, what was live by site and by kind, and whether whatif's
 * models would have served it. summary's writer prints to stdout with
 * plain JSON strings; the page needs its strings safe inside <script>
 * (html_json.c) and its live sites cut as its other tables are (--top,
 * at most HTML_ROWS), so it has this writer of its own.
 */
#include <inttypes.h>

#include "html.h"
#include "oomexplain.h"

static void opt_u64(FILE *f, const char *key, bool known, uint64_t v)
{
    if (known)
        fprintf(f, ",\"%s\":%" PRIu64, key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

/* The explained event's fields after "explained":true. */
static void explained(FILE *f, const struct oomx *x, size_t rows)
{
    fprintf(f, ",\"requested\":%" PRId64 ",\"allocated\":%" PRId64 ",\"reserved\":%" PRId64
               ",\"live_requested\":%" PRId64,
            x->requested, x->allocated, x->reserved, x->live);
    opt_u64(f, "device_total", x->total != 0, x->total);
    if (x->total)
        fprintf(f, ",\"free\":%" PRId64, x->free);
    else
        fprintf(f, ",\"free\":null");
    if (x->beyond_known)
        fprintf(f, ",\"beyond_trace\":%" PRId64, x->beyond);
    else
        fprintf(f, ",\"beyond_trace\":null");
    opt_u64(f, "free_reported", x->free_reported_known, x->free_reported);
    opt_u64(f, "largest_free_block", x->largest_known, x->largest_free);
    size_t shown = x->nsites < rows ? x->nsites : rows;
    int64_t rest = 0;
    fprintf(f, ",\"live_by_site\":[");
    for (size_t j = 0; j < x->nsites; j++) {
        if (j >= shown) {
            rest += x->sites[j].v[0];
            continue;
        }
        fprintf(f, "%s{", j ? "," : "");
        html_kv_str(f, false, "site", x->sites[j].label);
        /* gmt_pick_peak's values: bytes, allocations, allocated */
        fprintf(f, ",\"bytes\":%" PRId64 ",\"allocated\":%" PRId64 ",\"allocations\":%" PRId64
                   "}",
                x->sites[j].v[0], x->sites[j].v[2], x->sites[j].v[1]);
    }
    fprintf(f, "],\"live_other_bytes\":%" PRId64 ",\"live_by_kind\":", rest);
    if (x->has_kinds)
        gmt_kinds_json(f, x->kinds, true);
    else
        fprintf(f, "null");
    opt_u64(f, "whatif_device_memory", x->limit != 0, x->limit);
    fprintf(f, ",\"whatif\":[");
    for (int p = 0; p < x->nwhatif; p++) {
        const struct wi_try *t = &x->whatif[p];
        fprintf(f, "%s{", p ? "," : "");
        html_kv_str(f, false, "policy", t->policy);
        /* an unknown card: no model can say whether it would have fit */
        fprintf(f, ",\"peak_reserved\":%" PRIu64 ",\"fits\":%s,\"earlier\":%s}", t->peak_reserved,
                !x->limit ? "null" : t->fits ? "true" : "false", t->earlier ? "true" : "false");
    }
    fprintf(f, "]");
}

void html_oom(FILE *f, struct loaded *l, const struct gmt_common *c, size_t rows)
{
    const struct replay *r = &l->r;
    fprintf(f, ",\"oom_events\":[");
    for (size_t i = 0; i < r->nooms; i++) {
        const struct oom *o = &r->ooms[i];
        struct oomx x;
        /* a pass that fails has said why on stderr: the event is then
         * listed unexplained, as summary lists it, and the page goes on */
        bool full = i < OOMX_FULL && oomx_explain(l, c, i, &x);
        fprintf(f, "%s{\"time_ns\":%" PRIu64 ",\"device\":%u,\"size\":%" PRIu64
                   ",\"framework\":%s",
                i ? "," : "",
                o->time > r->hdr.start_monotonic_ns ? o->time - r->hdr.start_monotonic_ns : 0,
                o->device, o->size, o->fw ? "true" : "false");
        html_kv_str(f, true, "site", sym_site(l->sym, o->stack, c->grain, c->depth));
        fprintf(f, ",\"explained\":%s", full ? "true" : "false");
        if (full) {
            explained(f, &x, rows);
            oomx_free(&x);
        }
        fprintf(f, "}");
    }
    fprintf(f, "]");
}
