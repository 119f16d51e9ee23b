/* cmd_diff.c - `gpumemreport diff A B`: what changed between two runs.
 *
 * A is "before", B "after" - typically the same program before and after a
 * change, or with a different configuration. For each site (matched by its
 * label at the chosen --group/--depth, so the same source line matches
 * across two builds even though its addresses moved) the command shows the
 * bytes live at the peak of requested device memory, the bytes allocated
 * in all and the number of allocations, on each side and their change;
 * a site seen on one side only counts 0 on the other. Rows are sorted by
 * the absolute change of the bytes at the peak, largest first, then by
 * label, so two runs of the same comparison print the same report. Then
 * the run's totals: peak requested, peak allocated (the sum of each
 * device's peak), peak reserved, device memory still allocated at exit,
 * allocations and out-of-memory failures, with change and change in %.
 *
 * Directories. Either side may be a directory (or a trace of its own); a
 * side made of several traces - the processes of one run - is summed: per
 * site, the bytes at each process's own peak are added, and the totals add
 * each process's peak. Processes peak at different moments, so such a sum
 * is an upper bound of what the run held at once (the same convention as
 * `summary`'s "combined" figures); for a per-process picture, diff the
 * traces one by one. Matching processes of two runs to each other by pid
 * or order would be guesswork, which is why sides are not paired up.
 *
 * Ranks. When every trace on both sides records its rank in a distributed
 * job (format 1.2) and a side has several, processes can be paired
 * without guessing: a per-rank
 * table comes before the sites - each rank's peak requested (A, B, change,
 * change in %), peak reserved (A, B, change) and out-of-memory failures
 * (A, B), in rank order; a rank on one side only is shown as such, its
 * other side empty. A rank written by several processes (an exec, or two
 * runs in one directory) is their sum, as a side is. In JSON: "ranks", a
 * list of {rank, before, after} (null without the table).
 *
 * Sites count device and managed memory; pinned host allocations are not
 * site figures here (they are in `summary` and `leaks`). "allocations" in
 * the totals counts every successful allocation, pinned host included, as
 * `summary` does.
 *
 * --top N limits the site rows (default 10, 0: all; in text the rest is
 * one "(N more sites)" row, in JSON "site_count" still counts them all).
 *
 * diff is informative: it exits 0 whatever changed, 2 on an error (bad
 * arguments, a trace that cannot be read - then nothing is printed). The
 * CI gate with limits and exit status 1 is `check`.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s diff [options] A B\n\n"
               "Per-site change between two runs (A before, B after) of the bytes\n"
               "live at the peak of requested device memory, of the bytes allocated\n"
               "in all and of the number of allocations; sites matched by label at\n"
               "the chosen --group/--depth, sorted by the change at the peak. Then\n"
               "the totals: peaks, leaked at exit, allocations, out-of-memory.\n"
               "A and B are traces or directories; a side of several traces is\n"
               "summed over its processes (peaks: sums of each process's peak, an\n"
               "upper bound). When every trace of both sides has a rank (a\n"
               "distributed job) and a side has several, a per-rank table comes\n"
               "first.\n"
               "Exit status 0 (2 on an error).\n\n"
               GMT_COMMON_HELP, gmt_prog);
}

/* Per-site values, [0] = A, [1] = B. */
enum { V_PEAK, V_PEAK_COUNT, V_TOTAL, V_COUNT, NV };

struct dsite {
    char *label;                /* owned: outlives the traces' symbolizers */
    int64_t v[2][NV];
    bool in[2];
    UT_hash_handle hh;
};

enum { T_PEAK_REQ, T_PEAK_ALLOC, T_PEAK_RES, T_LEAKED, T_ALLOCS, T_OOMS, NT };
static const char *const total_key[NT] = {"peak_requested", "peak_allocated",
                                          "peak_reserved", "leaked",
                                          "allocations", "ooms"};
static const char *const total_name[NT] = {"peak requested", "peak allocated",
                                           "peak reserved", "leaked at exit",
                                           "allocations", "out of memory"};
static const bool total_bytes[NT] = {true, true, true, true, false, false};

/* One rank's figures on one side (summed over its processes). */
struct rank_fig {
    int64_t rank;
    size_t processes;
    int64_t peak_req, peak_res, ooms;
};

struct side {
    const char *arg;            /* as given on the command line */
    char **paths;
    size_t npaths;
    uint32_t pid;               /* of the one process, when there is one */
    char *command;              /* likewise (owned) */
    int64_t t[NT];
    bool ranked;                /* every trace has a rank */
    struct rank_fig *ranks;     /* owned: sorted by rank, one entry per rank */
    size_t nranks;
    char *fw_missing;           /* owned: gmt_fw_missing's why, of its first such trace */
    size_t fw_missing_n;        /* its traces without PyTorch's block events */
    char *lost;                 /* owned: gmt_lost's line, of its first incomplete trace */
    size_t lost_n;              /* its traces whose recorder lost records */
};

static bool pick(const struct site *s, int64_t v[GROUP_VALUES])
{
    v[V_PEAK] = s->peak_bytes;
    v[V_PEAK_COUNT] = s->peak_count;
    v[V_TOTAL] = (int64_t)s->total_bytes;
    v[V_COUNT] = (int64_t)s->total_count;
    return s->total_count > 0 || s->peak_bytes > 0;
}

static void totals(const struct replay *r, int64_t t[NT])
{
    uint64_t alloc = 0, allocs = 0;
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++) {
        alloc += r->dev[d].peak_allocated;
        allocs += r->dev[d].allocs;
    }
    t[T_PEAK_REQ] += (int64_t)r->peak_requested;
    t[T_PEAK_ALLOC] += (int64_t)alloc;
    t[T_PEAK_RES] += (int64_t)r->peak_reserved;
    t[T_LEAKED] += (int64_t)replay_leaked(r, NULL, NULL);
    t[T_ALLOCS] += (int64_t)allocs;
    t[T_OOMS] += (int64_t)r->ooms_total;
}

static int cmp_rank_fig(const void *a, const void *b)
{
    int64_t x = ((const struct rank_fig *)a)->rank, y = ((const struct rank_fig *)b)->rank;
    return (x > y) - (x < y);
}

/* Sort a side's ranks and sum the processes of each rank into one entry. */
static void ranks_merge(struct side *sd)
{
    if (sd->nranks == 0)
        return;
    qsort(sd->ranks, sd->nranks, sizeof *sd->ranks, cmp_rank_fig);
    size_t w = 0;
    for (size_t i = 0; i < sd->nranks; i++) {
        struct rank_fig *e = &sd->ranks[i];
        if (w > 0 && sd->ranks[w - 1].rank == e->rank) {
            struct rank_fig *to = &sd->ranks[w - 1];
            to->processes += e->processes;
            to->peak_req += e->peak_req;
            to->peak_res += e->peak_res;
            to->ooms += e->ooms;
        } else {
            sd->ranks[w++] = *e;
        }
    }
    sd->nranks = w;
}

/* Load every trace of one side, one at a time (no trace's memory outlives
 * its turn), adding its sites into `map` and its rank's figures into
 * sd->ranks. 0, or -1 after an error line. */
static int load_side(struct side *sd, int k, const struct gmt_common *c,
                     struct dsite **map)
{
    char *arg = (char *)sd->arg;
    if (gmt_trace_list(1, &arg, &sd->paths, &sd->npaths) != 0)
        return -1;
    sd->ranked = sd->npaths > 0;
    if ((sd->ranks = calloc(sd->npaths ? sd->npaths : 1, sizeof *sd->ranks)) == NULL) {
        gmt_errorf("out of memory");
        return -1;
    }
    for (size_t i = 0; i < sd->npaths; i++) {
        struct loaded *l = gmt_load(sd->paths[i], c, NULL);
        if (l == NULL)
            return -1;
        totals(&l->r, sd->t);
        char why[512];
        if (gmt_fw_missing(&l->r, why, sizeof why) != NULL && sd->fw_missing_n++ == 0)
            sd->fw_missing = strdup(why);
        if (gmt_lost(&l->r.hdr, why, sizeof why) && sd->lost_n++ == 0)
            sd->lost = strdup(why);
        const struct gmt_file_header *h = &l->r.hdr;
        if (h->dist_flags & GMT_DIST_RANK)
            sd->ranks[sd->nranks++] = (struct rank_fig){
                h->rank, 1, (int64_t)l->r.peak_requested, (int64_t)l->r.peak_reserved,
                (int64_t)l->r.ooms_total};
        else
            sd->ranked = false;
        if (sd->npaths == 1) {
            sd->pid = l->r.hdr.pid;
            const struct gmt_defs *d = &l->r.defs;
            sd->command = strdup(d->process.present ? d->process.cmdline : "");
        }
        struct group_row *rows;
        size_t n = gmt_group(l, c, pick, &rows);
        int rc = rows ? 0 : -1;
        for (size_t j = 0; j < n && rc == 0; j++) {
            struct dsite *e;
            HASH_FIND_STR(*map, rows[j].label, e);
            if (e == NULL) {
                e = calloc(1, sizeof *e);
                if (e == NULL || (e->label = strdup(rows[j].label)) == NULL) {
                    free(e);
                    rc = -1;
                    break;
                }
                HASH_ADD_KEYPTR(hh, *map, e->label, strlen(e->label), e);
            }
            e->in[k] = true;
            for (int v = 0; v < NV; v++)
                e->v[k][v] += rows[j].v[v];
        }
        free(rows);
        gmt_unload(l);
        if (rc != 0) {
            gmt_errorf("%s: out of memory", sd->paths[i]);
            return -1;
        }
    }
    ranks_merge(sd);
    return 0;
}

/* The per-rank table: every trace of both sides has a rank, and a side
 * has several (two single traces are compared as they are, whatever
 * their ranks). */
static bool per_rank(const struct side sd[2])
{
    return sd[0].ranked && sd[1].ranked && (sd[0].npaths > 1 || sd[1].npaths > 1);
}

/* Walk the ranks of both sides in order: each call gives the next rank's
 * entries (NULL on a side without it); false at the end. */
struct rank_walk {
    size_t i[2];
};

static bool rank_next(const struct side sd[2], struct rank_walk *w,
                      const struct rank_fig *e[2])
{
    const struct rank_fig *a = w->i[0] < sd[0].nranks ? &sd[0].ranks[w->i[0]] : NULL;
    const struct rank_fig *b = w->i[1] < sd[1].nranks ? &sd[1].ranks[w->i[1]] : NULL;
    if (a == NULL && b == NULL)
        return false;
    if (a && b && a->rank != b->rank) {
        if (a->rank < b->rank)
            b = NULL;
        else
            a = NULL;
    }
    e[0] = a;
    e[1] = b;
    w->i[0] += a != NULL;
    w->i[1] += b != NULL;
    return true;
}

static int64_t abs64(int64_t v)
{
    return v < 0 ? -v : v;
}

static int cmp_rows(const void *a, const void *b)
{
    const struct dsite *x = *(struct dsite *const *)a, *y = *(struct dsite *const *)b;
    int64_t dx = abs64(x->v[1][V_PEAK] - x->v[0][V_PEAK]);
    int64_t dy = abs64(y->v[1][V_PEAK] - y->v[0][V_PEAK]);
    if (dx != dy)
        return dx > dy ? -1 : 1;
    return strcmp(x->label, y->label);
}

/* "+1.25 MiB", "-3 B", "0 B" (or counts when !bytes). */
static const char *signed_fmt(const struct gmt_common *c, char *buf, int64_t v, bool bytes)
{
    if (!bytes) {
        snprintf(buf, 32, v > 0 ? "+%" PRId64 : "%" PRId64, v);
        return buf;
    }
    if (v > 0) {
        buf[0] = '+';
        gmt_size(c, buf + 1, v); /* at most 24 characters after the sign */
        return buf;
    }
    return gmt_size(c, buf, v);
}

static const char *plain_fmt(const struct gmt_common *c, char *buf, int64_t v, bool bytes)
{
    if (bytes)
        return gmt_size(c, buf, v);
    snprintf(buf, 32, "%" PRId64, v);
    return buf;
}

/* Change in % of a; NAN when a is 0 and b is not (no base to compare). */
static double pct(int64_t a, int64_t b)
{
    if (a == 0)
        return b == 0 ? 0.0 : NAN;
    return 100.0 * ((double)b - (double)a) / (double)a;
}

static const char *pct_fmt(char *buf, int64_t a, int64_t b)
{
    double p = pct(a, b);
    if (isnan(p))
        snprintf(buf, 32, "new");
    else if (a == b)
        snprintf(buf, 32, "0.0%%"); /* no sign on no change */
    else
        snprintf(buf, 32, "%+.1f%%", p);
    return buf;
}

static void json_pct(int64_t a, int64_t b)
{
    double p = pct(a, b);
    if (isnan(p))
        printf("null");
    else
        printf("%.3f", p);
}

static const char *grain_name(const struct gmt_common *c)
{
    return c->grain == GRAIN_FUNCTION ? "function" : c->grain == GRAIN_LINE ? "line" : "stack";
}

static void describe_side(const char *name, const struct side *sd)
{
    if (sd->npaths == 1)
        printf("%s: %s (pid %u, %s)\n", name, sd->paths[0], sd->pid,
               sd->command && *sd->command ? sd->command : "command unknown");
    else
        printf("%s: %s (%zu processes, summed)\n", name, sd->arg, sd->npaths);
    if (sd->lost) {
        char who[64];
        if (sd->npaths == 1)
            snprintf(who, sizeof who, "%s", name);
        else
            snprintf(who, sizeof who, "%s, %zu of its processes (the first)", name,
                     sd->lost_n);
        gmt_lost_note_of(who, sd->lost);
    }
    if (sd->fw_missing) {
        char who[64];
        if (sd->npaths == 1)
            snprintf(who, sizeof who, "%s", name);
        else
            snprintf(who, sizeof who, "%s, %zu of its processes", name, sd->fw_missing_n);
        gmt_fw_note_of(who, sd->fw_missing);
    }
}

/* The per-rank table (both sides ranked). */
static void text_ranks(const struct gmt_common *c, const struct side sd[2])
{
    static const char *const h[] = {"rank", "peak A", "peak B", "peak +/-", "peak %",
                                    "reserved A", "reserved B", "reserved +/-",
                                    "OOMs A", "OOMs B"};
    static const bool right[] = {true, true, true, true, true, true, true, true, true, true};
    struct table *t = table_new(10, h, right);
    struct rank_walk w = {{0, 0}};
    const struct rank_fig *e[2];
    bool several = false;
    printf("\nper rank (peak requested, peak reserved, out of memory):\n");
    while (rank_next(sd, &w, e)) {
        char s[10][32];
        const char *only = e[0] == NULL ? " (B only)" : e[1] == NULL ? " (A only)" : "";
        snprintf(s[0], sizeof s[0], "%" PRId64 "%s", (e[0] ? e[0] : e[1])->rank, only);
        for (int k = 0; k < 2; k++) {
            if (e[k] == NULL) {
                strcpy(s[1 + k], "-");
                strcpy(s[5 + k], "-");
                strcpy(s[8 + k], "-");
                continue;
            }
            several |= e[k]->processes > 1;
            gmt_size(c, s[1 + k], e[k]->peak_req);
            gmt_size(c, s[5 + k], e[k]->peak_res);
            plain_fmt(c, s[8 + k], e[k]->ooms, false);
        }
        if (e[0] && e[1]) {
            signed_fmt(c, s[3], e[1]->peak_req - e[0]->peak_req, true);
            pct_fmt(s[4], e[0]->peak_req, e[1]->peak_req);
            signed_fmt(c, s[7], e[1]->peak_res - e[0]->peak_res, true);
        } else {
            strcpy(s[3], "-");
            strcpy(s[4], "-");
            strcpy(s[7], "-");
        }
        table_row(t, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]);
    }
    table_print(t, c->markdown);
    table_free(t);
    if (several)
        printf("\n(a rank of several processes: their sum)\n");
}

static void text(const struct gmt_common *c, const struct side sd[2],
                 struct dsite **rows, size_t n)
{
    char a[32], b[32], d[32], p[32];
    describe_side("A", &sd[0]);
    describe_side("B", &sd[1]);
    printf("\ntotals:\n");
    {
        static const char *const h[] = {"", "A", "B", "change", "change %"};
        static const bool right[] = {false, true, true, true, true};
        struct table *t = table_new(5, h, right);
        for (int i = 0; i < NT; i++)
            table_row(t, total_name[i], plain_fmt(c, a, sd[0].t[i], total_bytes[i]),
                      plain_fmt(c, b, sd[1].t[i], total_bytes[i]),
                      signed_fmt(c, d, sd[1].t[i] - sd[0].t[i], total_bytes[i]),
                      pct_fmt(p, sd[0].t[i], sd[1].t[i]));
        table_print(t, c->markdown);
        table_free(t);
    }
    if (sd[0].npaths > 1 || sd[1].npaths > 1)
        printf("\n(a side of several processes: sums of each process's peak, an upper "
               "bound of what the run held at once)\n");
    if (per_rank(sd))
        text_ranks(c, sd);
    printf("\nsites (by %s), by change of the bytes at the peak:\n", grain_name(c));
    if (n == 0) {
        printf("(no allocations on either side)\n");
        return;
    }
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    static const char *const h[] = {"peak A", "peak B", "peak +/-", "total A",
                                    "total B", "total +/-", "allocs A", "allocs B",
                                    "allocs +/-", "site"};
    static const bool right[] = {true, true, true, true, true, true, true, true, true,
                                 false};
    struct table *t = table_new(10, h, right);
    int64_t rest[2][NV] = {{0}};
    for (size_t i = 0; i < n; i++) {
        const struct dsite *e = rows[i];
        if (i >= shown) {
            for (int k = 0; k < 2; k++)
                for (int v = 0; v < NV; v++)
                    rest[k][v] += e->v[k][v];
            continue;
        }
        char s[9][32];
        table_row(t, gmt_size(c, s[0], e->v[0][V_PEAK]), gmt_size(c, s[1], e->v[1][V_PEAK]),
                  signed_fmt(c, s[2], e->v[1][V_PEAK] - e->v[0][V_PEAK], true),
                  gmt_size(c, s[3], e->v[0][V_TOTAL]), gmt_size(c, s[4], e->v[1][V_TOTAL]),
                  signed_fmt(c, s[5], e->v[1][V_TOTAL] - e->v[0][V_TOTAL], true),
                  plain_fmt(c, s[6], e->v[0][V_COUNT], false),
                  plain_fmt(c, s[7], e->v[1][V_COUNT], false),
                  signed_fmt(c, s[8], e->v[1][V_COUNT] - e->v[0][V_COUNT], false),
                  e->label);
    }
    if (shown < n) {
        char s[9][32], label[64];
        snprintf(label, sizeof label, "(%zu more sites)", n - shown);
        table_row(t, gmt_size(c, s[0], rest[0][V_PEAK]), gmt_size(c, s[1], rest[1][V_PEAK]),
                  signed_fmt(c, s[2], rest[1][V_PEAK] - rest[0][V_PEAK], true),
                  gmt_size(c, s[3], rest[0][V_TOTAL]), gmt_size(c, s[4], rest[1][V_TOTAL]),
                  signed_fmt(c, s[5], rest[1][V_TOTAL] - rest[0][V_TOTAL], true),
                  plain_fmt(c, s[6], rest[0][V_COUNT], false),
                  plain_fmt(c, s[7], rest[1][V_COUNT], false),
                  signed_fmt(c, s[8], rest[1][V_COUNT] - rest[0][V_COUNT], false), label);
    }
    table_print(t, c->markdown);
    table_free(t);
}

static void json_side(const struct side *sd)
{
    printf("{\"input\":");
    gmt_json_str(stdout, sd->arg);
    printf(",\"processes\":%zu,\"traces\":[", sd->npaths);
    for (size_t i = 0; i < sd->npaths; i++) {
        if (i)
            printf(",");
        gmt_json_str(stdout, sd->paths[i]);
    }
    printf("]");
    if (sd->npaths == 1) {
        printf(",\"pid\":%u,\"command\":", sd->pid);
        gmt_json_str(stdout, sd->command ? sd->command : "");
    }
    printf(",\"incomplete_traces\":%zu,\"lost\":", sd->lost_n);
    if (sd->lost)
        gmt_json_str(stdout, sd->lost);
    else
        printf("null");
    printf("}");
}

static void json(const struct gmt_common *c, const struct side sd[2], struct dsite **rows,
                 size_t n)
{
    printf("{\"schema\":\"gpumemtrace.diff/1\",\"group\":\"%s\",\"depth\":%d,\"a\":",
           grain_name(c), c->depth);
    json_side(&sd[0]);
    printf(",\"b\":");
    json_side(&sd[1]);
    printf(",\"totals\":{");
    for (int i = 0; i < NT; i++) {
        printf("%s\"%s\":{\"a\":%" PRId64 ",\"b\":%" PRId64 ",\"change\":%" PRId64
               ",\"change_pct\":", i ? "," : "", total_key[i], sd[0].t[i], sd[1].t[i],
               sd[1].t[i] - sd[0].t[i]);
        json_pct(sd[0].t[i], sd[1].t[i]);
        printf("}");
    }
    printf("},\"ranks\":");
    if (per_rank(sd)) {
        struct rank_walk w = {{0, 0}};
        const struct rank_fig *e[2];
        printf("[");
        for (bool first = true; rank_next(sd, &w, e); first = false) {
            printf("%s{\"rank\":%" PRId64, first ? "" : ",", (e[0] ? e[0] : e[1])->rank);
            for (int k = 0; k < 2; k++) {
                printf(",\"%s\":", k ? "after" : "before");
                if (e[k] == NULL)
                    printf("null");
                else
                    printf("{\"processes\":%zu,\"peak_requested\":%" PRId64
                           ",\"peak_reserved\":%" PRId64 ",\"ooms\":%" PRId64 "}",
                           e[k]->processes, e[k]->peak_req, e[k]->peak_res, e[k]->ooms);
            }
            printf("}");
        }
        printf("]");
    } else {
        printf("null");
    }
    size_t shown = c->top && (size_t)c->top < n ? (size_t)c->top : n;
    printf(",\"site_count\":%zu,\"sites\":[", n);
    for (size_t i = 0; i < shown; i++) {
        const struct dsite *e = rows[i];
        printf("%s{\"site\":", i ? "," : "");
        gmt_json_str(stdout, e->label);
        printf(",\"in_a\":%s,\"in_b\":%s", e->in[0] ? "true" : "false",
               e->in[1] ? "true" : "false");
        printf(",\"peak_a\":%" PRId64 ",\"peak_b\":%" PRId64 ",\"peak_change\":%" PRId64
               ",\"peak_change_pct\":",
               e->v[0][V_PEAK], e->v[1][V_PEAK], e->v[1][V_PEAK] - e->v[0][V_PEAK]);
        json_pct(e->v[0][V_PEAK], e->v[1][V_PEAK]);
        printf(",\"peak_allocations_a\":%" PRId64 ",\"peak_allocations_b\":%" PRId64
               ",\"total_a\":%" PRId64 ",\"total_b\":%" PRId64 ",\"total_change\":%" PRId64
               ",\"allocations_a\":%" PRId64 ",\"allocations_b\":%" PRId64
               ",\"allocations_change\":%" PRId64 "}",
               e->v[0][V_PEAK_COUNT], e->v[1][V_PEAK_COUNT], e->v[0][V_TOTAL],
               e->v[1][V_TOTAL], e->v[1][V_TOTAL] - e->v[0][V_TOTAL], e->v[0][V_COUNT],
               e->v[1][V_COUNT], e->v[1][V_COUNT] - e->v[0][V_COUNT]);
    }
    printf("]}\n");
}

int cmd_diff(int argc, char **argv)
{
    static const struct gmt_args args = {.usage = usage};
    struct gmt_common c;
    gmt_common_init(&c); /* --top 10 */
    int parsed = gmt_args_parse(argc, argv, &args, &c, NULL);
    if (parsed != GMT_PARSED)
        return parsed;
    if (argc - optind != 2)
        return gmt_usage_error(argv[0], "diff compares two runs: give A and B (a directory "
                                        "holds one run of several processes)");
    struct side sd[2] = {{.arg = argv[optind]}, {.arg = argv[optind + 1]}};
    struct dsite *map = NULL, *e, *tmp;
    struct dsite **rows = NULL;
    size_t n = 0;
    int rc = EXIT_OK;
    if (load_side(&sd[0], 0, &c, &map) != 0 || load_side(&sd[1], 1, &c, &map) != 0) {
        rc = EXIT_ERROR;
        goto out;
    }
    n = HASH_COUNT(map);
    if ((rows = calloc(n ? n : 1, sizeof *rows)) == NULL) {
        gmt_errorf("out of memory");
        rc = EXIT_ERROR;
        goto out;
    }
    n = 0;
    HASH_ITER(hh, map, e, tmp)
        rows[n++] = e;
    qsort(rows, n, sizeof *rows, cmp_rows);
    if (c.json)
        json(&c, sd, rows, n);
    else
        text(&c, sd, rows, n);
    rc = gmt_finish_output(EXIT_OK);
out:
    free(rows);
    HASH_ITER(hh, map, e, tmp) {
        HASH_DEL(map, e);
        free(e->label);
        free(e);
    }
    for (int k = 0; k < 2; k++) {
        if (sd[k].paths)
            gmt_trace_list_free(sd[k].paths, sd[k].npaths);
        free(sd[k].command);
        free(sd[k].ranks);
        free(sd[k].fw_missing);
        free(sd[k].lost);
    }
    return rc;
}
