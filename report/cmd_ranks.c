/* cmd_ranks.c - `gpumemreport ranks`: one view of a multi-process job.
 *
 * A distributed job (torchrun, mpirun, srun) leaves one trace per process,
 * all with the session id the launcher handed down and, since format 1.2,
 * each with its rank, local rank, world sizes and host in the header. This
 * command reads them all and shows the job as one table: a row per
 * process, sorted by rank, with its peaks, the memory the driver reported
 * beyond it, its out-of-memory events and when and in which step its peak
 * came; then how unequal the ranks are, which process ran out of memory
 * first, the sites whose bytes at the peak differ most between ranks, and
 * what NCCL and torch.distributed held at each rank's peak. Traces of
 * other sessions are other jobs, each in its own section, in the order
 * they started.
 *
 * Times are aligned across processes by wall clock: every trace records
 * the wall time and the monotonic time of its start, and its events carry
 * monotonic times, so an event's wall time is start_realtime_ns + (time -
 * start_monotonic_ns); times shown are seconds since the job's first trace
 * started. Clocks of different hosts are only as close as NTP keeps them.
 *
 * Steps. The step mark is chosen as growth chooses it (gmt_step_mark: the
 * most frequent repeated name that reads like a step, else the most
 * frequent repeated name - NCCL's NVTX ranges come many times a step); the
 * step of an event is the number of its occurrences before the event.
 * The counts are taken by the marker callback while the trace replays, at
 * each marker: when the peak (or the first out-of-memory) has moved since
 * the previous marker, it came before this one, so the counts so far are
 * its step. Memory stays one counter set per mark name, however long the
 * run.
 *
 * Everything of one trace that the job's view needs is copied out of it
 * (labels included) before the next is loaded: memory is the traces' site
 * tables at the peak, not the traces.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s ranks [options] TRACE|DIR|PATTERN...\n\n"
               "One view of a multi-process job: a row per process (rank, host,\n"
               "pid, the process's peaks of requested, allocated and reserved\n"
               "memory as summary counts them, memory beyond the trace,\n"
               "out-of-memory events, when and in which step the peak came),\n"
               "the imbalance between ranks,\n"
               "the first out-of-memory, the sites that differ most between\n"
               "ranks and NCCL's buffers. Traces are grouped into jobs by their\n"
               "session; a quoted pattern ('run/*.gmt') is expanded here.\n\n"
               GMT_COMMON_HELP, gmt_prog);
}

/* ---- steps: mark names counted while a trace replays ------------------- */

#define RANKS_MARK_NAMES 64 /* mark names followed per trace */

struct mark_count {
    char *name;
    uint64_t count;   /* occurrences so far */
    uint64_t at_peak; /* occurrences before the peak of requested memory */
    uint64_t at_oom;  /* occurrences before the first out-of-memory */
};

struct marks {
    struct mark_count m[RANKS_MARK_NAMES];
    int n;
    uint64_t peak_seq; /* the peak that the at_peak counts are for */
    bool oom_seen;     /* at_oom taken */
};

static void marks_reset(struct marks *k)
{
    for (int i = 0; i < k->n; i++)
        free(k->m[i].name);
    memset(k, 0, sizeof *k);
}

/* The peak and the first out-of-memory, if they moved since the previous
 * marker, came before now: take the counts as their steps. */
static void marks_settle(struct marks *k, const struct replay *r)
{
    if (r->peak_requested_seq != k->peak_seq) {
        for (int i = 0; i < k->n; i++)
            k->m[i].at_peak = k->m[i].count;
        k->peak_seq = r->peak_requested_seq;
    }
    if (r->ooms_total && !k->oom_seen) {
        for (int i = 0; i < k->n; i++)
            k->m[i].at_oom = k->m[i].count;
        k->oom_seen = true;
    }
}

static void on_marker(struct replay *r, const struct gmt_rec *rec, void *ctx)
{
    if (rec->kind != GMT_K_MARKER)
        return;
    struct marks *k = ctx;
    if (r->markers == 1) /* this trace's first: forget the previous one's */
        marks_reset(k);
    marks_settle(k, r);
    /* a region's start counts as an occurrence of its name, as in the
     * replay: NVTX users mark steps with ranges */
    if (rec->api != GMT_MARK && rec->api != GMT_MARK_PUSH)
        return;
    const char *name = gmt_defs_string(&r->defs, rec->value);
    if (name == NULL)
        return;
    int j = 0;
    while (j < k->n && strcmp(k->m[j].name, name))
        j++;
    if (j == k->n) {
        if (j == RANKS_MARK_NAMES || (k->m[j].name = strdup(name)) == NULL)
            return;
        k->n++;
    }
    k->m[j].count++;
}

static const char *mark_name(int i, const void *ctx)
{
    return ((const struct marks *)ctx)->m[i].name;
}

static uint64_t mark_count(int i, const void *ctx)
{
    return ((const struct marks *)ctx)->m[i].count;
}

/* The step mark (see the top of this file), -1 if none. */
static int marks_step(const struct marks *k)
{
    return gmt_step_mark(k->n, mark_name, mark_count, k);
}

/* ---- one process ------------------------------------------------------ */

struct site_bytes {
    char *label;
    int64_t bytes; /* live at the process's peak */
};

struct proc {
    char *path;
    uint64_t session, start_real, start_mono;
    uint32_t pid, dist, rank, local_rank, world_size;
    char host[64];
    bool closed;
    /* the process's, as summary's: PyTorch's blocks and segments and the
     * allocations outside its allocator alike */
    uint64_t peak_requested, peak_allocated, peak_reserved;
    /* with PyTorch's events (r->fw): its own figures, sums of each
     * device's peak (summary's framework object) */
    bool fw;
    uint64_t fw_requested, fw_allocated, fw_reserved;
    char *fw_missing; /* gmt_fw_missing's why, or NULL */
    struct gmt_file_header hdr; /* what its recorder lost (gmt_lost) */
    char *lost;                 /* gmt_lost's line, or NULL */
    enum beyond_source beyond_source;
    int64_t beyond;
    uint64_t ooms;
    uint64_t peak_time;       /* monotonic, this process's clock */
    bool has_step;
    uint64_t peak_step;
    bool has_oom;             /* the details of the first are known */
    uint64_t oom_time, oom_size, oom_step;
    char *oom_site;
    uint64_t nccl;            /* bytes at the peak under NCCL/c10d frames */
    struct site_bytes *sites; /* grouped by label, bytes > 0 */
    size_t nsites;
    uint64_t job_start;       /* earliest start_real of its session */
};

struct ranks {
    struct marks marks;
    struct proc *p;
    size_t n, cap;
    bool failed; /* out of memory while gathering */
};

static bool has_rank(const struct proc *p)
{
    return p->dist & GMT_DIST_RANK;
}

/* NCCL's own buffers and torch.distributed's (c10d, its process groups):
 * a frame in a libnccl* module, or a function naming them. */
static bool dist_frame(const struct sym *f)
{
    if (f->module && !strncmp(f->module, "libnccl", 7))
        return true;
    return f->function && (strstr(f->function, "nccl") || strstr(f->function, "c10d::") ||
                           strstr(f->function, "ProcessGroup"));
}

static bool dist_stack(struct loaded *l, uint32_t id)
{
    struct gmt_stack_def st;
    if (!gmt_defs_stack(&l->r.defs, id, &st))
        return false;
    for (uint32_t i = 0; i < st.n; i++) {
        struct sym f[32];
        int n = sym_frames(l->sym, &st.frames[i], f, 32);
        for (int k = 0; k < n; k++)
            if (dist_frame(&f[k]))
                return true;
    }
    return false;
}

static void proc_free(struct proc *p)
{
    free(p->path);
    free(p->oom_site);
    free(p->fw_missing);
    free(p->lost);
    for (size_t i = 0; i < p->nsites; i++)
        free(p->sites[i].label);
    free(p->sites);
}

/* Who the process was, from its header: session, start, pid, rank and
 * world, host; and whether it closed its trace. */
static void proc_who(struct proc *p, const struct replay *r)
{
    const struct gmt_file_header *h = &r->hdr;
    p->session = h->session_id;
    p->start_real = h->start_realtime_ns;
    p->start_mono = h->start_monotonic_ns;
    p->pid = h->pid;
    p->dist = h->dist_flags;
    p->rank = h->rank;
    p->local_rank = h->local_rank;
    p->world_size = h->world_size;
    /* the 1.2 header's host, else the process record's (older traces) */
    const char *host = h->host[0] ? h->host
                       : r->defs.process.present && r->defs.process.host ? r->defs.process.host
                                                                          : "";
    snprintf(p->host, sizeof p->host, "%s", host);
    gmt_printable(p->host); /* the header's is raw bytes; a terminal shows it */
    p->closed = !r->cut;
}

/* The process's peaks, PyTorch's own, what is beyond the trace, its
 * out-of-memory count and when its peak came; what its recorder lost. */
static void proc_peaks(struct proc *p, const struct replay *r)
{
    /* One scope for the three peaks, the process's, as summary counts
     * them: PyTorch's own figures leave out what was allocated outside its
     * allocator (cuBLAS's workspaces), which the requested peak counts, so
     * mixing them put a requested peak above the allocated one. */
    p->peak_requested = r->peak_requested;
    p->peak_reserved = r->peak_reserved;
    p->fw = r->fw;
    char why[512];
    if (gmt_fw_missing(r, why, sizeof why) != NULL)
        p->fw_missing = strdup(why);
    p->hdr = r->hdr;
    if (gmt_lost(&r->hdr, why, sizeof why))
        p->lost = strdup(why);
    for (int d = 0; d < REPLAY_MAX_DEVICES; d++) {
        const struct device_state *s = &r->dev[d];
        p->peak_allocated += s->peak_allocated; /* sums of each device's peak */
        p->fw_requested += s->peak_fw_requested;
        p->fw_allocated += s->peak_fw_allocated;
        p->fw_reserved += s->peak_fw_reserved;
    }
    /* beyond the trace: the process's own figure where every sampled
     * device has one, else the device-wide one (replay_beyond) */
    p->beyond = replay_beyond(r, -1, &p->beyond_source);
    p->ooms = r->ooms_total;
    p->peak_time = r->peak_requested_time ? r->peak_requested_time : p->start_mono;
}

/* The steps of the peak and of the first out-of-memory, from the marks
 * counted while the trace replayed, and that out-of-memory's details;
 * the marks are then forgotten. False: out of memory. */
static bool proc_steps(struct proc *p, struct loaded *l, const struct gmt_common *c,
                       struct marks *k)
{
    const struct replay *r = &l->r;
    if (r->markers == 0) /* the marks gathered are another trace's */
        marks_reset(k);
    marks_settle(k, r);
    int step = marks_step(k);
    p->has_step = step >= 0;
    if (step >= 0)
        p->peak_step = k->m[step].at_peak;
    if (r->nooms) {
        p->has_oom = true;
        p->oom_time = r->ooms[0].time;
        p->oom_size = r->ooms[0].size;
        p->oom_step = step >= 0 ? k->m[step].at_oom : 0;
        p->oom_site = strdup(sym_site(l->sym, r->ooms[0].stack, c->grain, c->depth));
        if (p->oom_site == NULL)
            return false;
    }
    marks_reset(k);
    return true;
}

/* The sites live at the peak, their labels copied out of the trace, and
 * the bytes NCCL and torch.distributed held then. False: out of memory. */
static bool proc_sites(struct proc *p, struct loaded *l, const struct gmt_common *c)
{
    const struct replay *r = &l->r;
    struct group_row *rows;
    size_t n = gmt_group(l, c, gmt_pick_peak, &rows);
    p->sites = calloc(n ? n : 1, sizeof *p->sites);
    if (rows == NULL || p->sites == NULL) {
        free(rows);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((p->sites[i].label = strdup(rows[i].label)) == NULL) {
            free(rows);
            return false;
        }
        p->sites[i].bytes = rows[i].v[0];
        p->nsites++;
    }
    free(rows);
    for (size_t i = 0; i < r->nsites; i++) {
        const struct site *s = &r->sites[i];
        if (s->peak_bytes > 0 && dist_stack(l, s->stack))
            p->nccl += (uint64_t)s->peak_bytes;
    }
    return true;
}

/* Everything of l that the job's view needs, copied into p. False: out
 * of memory (p is then freed with proc_free). */
static bool proc_fill(struct proc *p, struct loaded *l, const struct gmt_common *c,
                      struct marks *k)
{
    proc_who(p, &l->r);
    proc_peaks(p, &l->r);
    if (!proc_steps(p, l, c, k) || !proc_sites(p, l, c))
        return false;
    p->path = strdup(l->path);
    return p->path != NULL;
}

static void one(struct loaded *l, const struct gmt_common *c, void *ctx)
{
    struct ranks *st = ctx;
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 16;
        struct proc *np = realloc(st->p, cap * sizeof *np);
        if (np == NULL) {
            st->failed = true;
            return;
        }
        st->p = np;
        st->cap = cap;
    }
    struct proc *p = &st->p[st->n];
    memset(p, 0, sizeof *p);
    if (!proc_fill(p, l, c, &st->marks)) {
        gmt_errorf("%s: out of memory", l->path);
        proc_free(p);
        st->failed = true;
        return;
    }
    st->n++;
}

/* ---- the job ------------------------------------------------------------ */

/* Jobs by their start, then session; in a job, ranked processes by rank,
 * then the others by pid; the path last, so the order is always the same. */
static int cmp_proc(const void *a, const void *b)
{
    const struct proc *x = a, *y = b;
    if (x->job_start != y->job_start)
        return x->job_start < y->job_start ? -1 : 1;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    if (has_rank(x) != has_rank(y))
        return has_rank(x) ? -1 : 1;
    if (has_rank(x) && x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return strcmp(x->path, y->path);
}

static int cmp_session(const void *a, const void *b)
{
    const struct proc *x = a, *y = b;
    return x->session < y->session ? -1 : x->session > y->session;
}

/* Seconds from the job's start to monotonic time t of process p. */
static double job_at(const struct proc *p, uint64_t t)
{
    double since = (double)(p->start_real - p->job_start);
    double in = t >= p->start_mono ? (double)(t - p->start_mono)
                                   : -(double)(p->start_mono - t);
    return (since + in) / 1e9;
}

/* "rank 3", or "pid 1234" for a process without a rank. */
static const char *who(char *buf, size_t len, const struct proc *p)
{
    if (has_rank(p))
        snprintf(buf, len, "rank %" PRIu32, p->rank);
    else
        snprintf(buf, len, "pid %" PRIu32, p->pid);
    return buf;
}

static void json_rank(const struct proc *p)
{
    if (has_rank(p))
        printf("%" PRIu32, p->rank);
    else
        printf("null");
}

/* Largest and smallest of a figure over a job's processes (the first in
 * row order on ties). */
struct spread {
    const char *name, *field;
    size_t max, min; /* row indexes */
};

static uint64_t figure(const struct proc *p, int which)
{
    return which == 0 ? p->peak_requested : which == 1 ? p->peak_allocated : p->peak_reserved;
}

static struct spread spread(const struct proc *p, size_t n, int which)
{
    static const char *const names[] = {"peak requested", "peak allocated", "peak reserved"};
    static const char *const fields[] = {"peak_requested", "peak_allocated", "peak_reserved"};
    struct spread s = {names[which], fields[which], 0, 0};
    for (size_t i = 1; i < n; i++) {
        if (figure(&p[i], which) > figure(&p[s.max], which))
            s.max = i;
        if (figure(&p[i], which) < figure(&p[s.min], which))
            s.min = i;
    }
    return s;
}

/* A site label's bytes at each process's peak, in row order. */
struct job_site {
    const char *label;
    int64_t *per; /* [processes] */
    size_t max, min;
    int64_t diff;
    UT_hash_handle hh;
};

static int cmp_job_site(const void *a, const void *b)
{
    const struct job_site *x = *(struct job_site *const *)a, *y = *(struct job_site *const *)b;
    if (x->diff != y->diff)
        return x->diff > y->diff ? -1 : 1;
    return strcmp(x->label, y->label);
}

/* The sites of a job whose bytes differ between its processes, most
 * first; NULL with *n = 0 when none (or out of memory). Free with
 * job_sites_free. */
static struct job_site **job_sites(const struct proc *p, size_t np, size_t *n)
{
    struct job_site *map = NULL, *e, *tmp;
    bool oom = false;
    *n = 0;
    for (size_t i = 0; i < np && !oom; i++) {
        for (size_t k = 0; k < p[i].nsites; k++) {
            const char *label = p[i].sites[k].label;
            HASH_FIND_STR(map, label, e);
            if (e == NULL) {
                if ((e = calloc(1, sizeof *e)) == NULL ||
                    (e->per = calloc(np, sizeof *e->per)) == NULL) {
                    free(e);
                    oom = true;
                    break;
                }
                e->label = label;
                HASH_ADD_KEYPTR(hh, map, e->label, strlen(e->label), e);
            }
            e->per[i] += p[i].sites[k].bytes;
        }
    }
    struct job_site **rows = oom ? NULL : calloc(HASH_COUNT(map) + 1, sizeof *rows);
    HASH_ITER(hh, map, e, tmp) {
        HASH_DEL(map, e);
        for (size_t i = 1; i < np; i++) {
            if (e->per[i] > e->per[e->max])
                e->max = i;
            if (e->per[i] < e->per[e->min])
                e->min = i;
        }
        e->diff = e->per[e->max] - e->per[e->min];
        if (rows && e->diff > 0) {
            rows[(*n)++] = e;
        } else {
            free(e->per);
            free(e);
        }
    }
    if (rows)
        qsort(rows, *n, sizeof *rows, cmp_job_site);
    return rows;
}

static void job_sites_free(struct job_site **rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(rows[i]->per);
        free(rows[i]);
    }
    free(rows);
}

/* The process whose first out-of-memory came first, or -1. */
static long first_oom(const struct proc *p, size_t n)
{
    long best = -1;
    for (size_t i = 0; i < n; i++)
        if (p[i].has_oom &&
            (best < 0 || job_at(&p[i], p[i].oom_time) < job_at(&p[best], p[best].oom_time)))
            best = (long)i;
    return best;
}

static const char *const beyond_names[] = {
    [BEYOND_NONE] = "null", [BEYOND_DEVICE] = "\"device\"", [BEYOND_PROCESS] = "\"process\""};

/* One process's object in the job's "ranks". */
static void json_process(const struct proc *q)
{
    printf("{\"rank\":");
    json_rank(q);
    printf(",\"local_rank\":");
    if (q->dist & GMT_DIST_LOCAL_RANK)
        printf("%" PRIu32, q->local_rank);
    else
        printf("null");
    printf(",\"host\":");
    gmt_json_str(stdout, q->host);
    printf(",\"pid\":%" PRIu32 ",\"trace\":", q->pid);
    gmt_json_str(stdout, q->path);
    char lost[512];
    gmt_json_lost(&q->hdr, lost, sizeof lost);
    printf(",\"peak_requested\":%" PRIu64 ",\"peak_allocated\":%" PRIu64
           ",\"peak_reserved\":%" PRIu64 ",\"beyond_trace\":",
           q->peak_requested, q->peak_allocated, q->peak_reserved);
    if (q->beyond_source == BEYOND_NONE)
        printf("null");
    else
        printf("%" PRId64, q->beyond);
    printf(",\"beyond_trace_source\":%s,\"ooms\":%" PRIu64 ",\"peak_at_s\":%.6f"
           ",\"peak_step\":",
           beyond_names[q->beyond_source], q->ooms, job_at(q, q->peak_time));
    if (q->has_step)
        printf("%" PRIu64, q->peak_step);
    else
        printf("null");
    printf(",\"nccl_bytes_at_peak\":%" PRIu64 ",\"closed\":%s,\"framework\":", q->nccl,
           q->closed ? "true" : "false");
    if (q->fw)
        printf("{\"name\":\"pytorch\",\"peak_requested\":%" PRIu64
               ",\"peak_allocated\":%" PRIu64 ",\"peak_reserved\":%" PRIu64 "}}",
               q->fw_requested, q->fw_allocated, q->fw_reserved);
    else
        printf("null}");
}

/* The job's "imbalance": the largest and smallest of each peak, on which
 * ranks, and their ratio. */
static void json_imbalance(const struct proc *p, size_t n)
{
    printf(",\"imbalance\":{");
    for (int k = 0; k < 3; k++) {
        struct spread s = spread(p, n, k);
        uint64_t hi = figure(&p[s.max], k), lo = figure(&p[s.min], k);
        printf("%s\"%s\":{\"max\":%" PRIu64 ",\"max_rank\":", k ? "," : "", s.field, hi);
        json_rank(&p[s.max]);
        printf(",\"min\":%" PRIu64 ",\"min_rank\":", lo);
        json_rank(&p[s.min]);
        if (lo)
            printf(",\"ratio\":%.6f}", (double)hi / (double)lo);
        else
            printf(",\"ratio\":null}");
    }
    printf("}");
}

/* The job's "first_oom": which process ran out of memory first, in which
 * step, when, for how much and where; null when none did. */
static void json_first_oom(const struct proc *p, size_t n)
{
    printf(",\"first_oom\":");
    long f = first_oom(p, n);
    if (f < 0) {
        printf("null");
        return;
    }
    const struct proc *q = &p[f];
    printf("{\"rank\":");
    json_rank(q);
    printf(",\"pid\":%" PRIu32 ",\"step\":", q->pid);
    if (q->has_step)
        printf("%" PRIu64, q->oom_step);
    else
        printf("null");
    printf(",\"at_s\":%.6f,\"size\":%" PRIu64 ",\"site\":", job_at(q, q->oom_time),
           q->oom_size);
    gmt_json_str(stdout, q->oom_site);
    printf("}");
}

/* The job's "sites": those that differ most between ranks (--top of
 * them), with the bytes at each rank's peak. */
static void json_sites(const struct proc *p, size_t n, const struct gmt_common *c)
{
    printf(",\"sites\":[");
    size_t ns;
    struct job_site **rows = job_sites(p, n, &ns);
    for (size_t i = 0; i < ns && (c->top == 0 || i < (size_t)c->top); i++) {
        const struct job_site *s = rows[i];
        printf("%s{\"site\":", i ? "," : "");
        gmt_json_str(stdout, s->label);
        printf(",\"max\":%" PRId64 ",\"max_rank\":", s->per[s->max]);
        json_rank(&p[s->max]);
        printf(",\"min\":%" PRId64 ",\"min_rank\":", s->per[s->min]);
        json_rank(&p[s->min]);
        printf(",\"per_rank\":[");
        for (size_t k = 0; k < n; k++)
            printf("%s%" PRId64, k ? "," : "", s->per[k]);
        printf("]}");
    }
    job_sites_free(rows, ns);
    printf("]");
}

static void job_json(const struct proc *p, size_t n, const struct gmt_common *c)
{
    printf("{\"session\":\"%016" PRIx64 "\",\"processes\":%zu,\"world_size\":", p[0].session, n);
    size_t w = 0;
    while (w < n && !(p[w].dist & GMT_DIST_WORLD_SIZE))
        w++;
    if (w < n)
        printf("%" PRIu32, p[w].world_size);
    else
        printf("null");
    printf(",\"ranks\":[");
    for (size_t i = 0; i < n; i++) {
        printf("%s", i ? "," : "");
        json_process(&p[i]);
    }
    printf("]");
    json_imbalance(p, n);
    json_first_oom(p, n);
    json_sites(p, n, c);
    printf("}");
}

/* Markdown needs a blank line between a table and the text around it
 * (a line after a table would be read as one more row). */
static void print_table(struct table *t, const struct gmt_common *c)
{
    if (t == NULL)
        return;
    if (c->markdown)
        printf("\n");
    table_print(t, c->markdown);
    if (c->markdown)
        printf("\n");
}

/* One process's row of the job's table. */
static void process_row(struct table *t, const struct proc *q, const struct gmt_common *c)
{
    char a[32], b[32], e[32], x[32];
    char rank[16], pid[16], beyond[40], ooms[24], at[32], step[24], nc[32];
    if (has_rank(q))
        snprintf(rank, sizeof rank, "%" PRIu32, q->rank);
    else
        snprintf(rank, sizeof rank, "-");
    snprintf(pid, sizeof pid, "%" PRIu32, q->pid);
    if (q->beyond_source == BEYOND_NONE)
        snprintf(beyond, sizeof beyond, "-");
    else
        snprintf(beyond, sizeof beyond, "%s%s", gmt_size(c, e, q->beyond),
                 q->beyond_source == BEYOND_DEVICE ? " *" : "");
    snprintf(ooms, sizeof ooms, "%" PRIu64, q->ooms);
    snprintf(at, sizeof at, "%.3f s", job_at(q, q->peak_time));
    if (q->has_step)
        snprintf(step, sizeof step, "%" PRIu64, q->peak_step);
    else
        snprintf(step, sizeof step, "-");
    gmt_size(c, nc, (int64_t)q->nccl);
    table_row(t, rank, q->host[0] ? q->host : "-", pid,
              gmt_size(c, a, (int64_t)q->peak_requested),
              gmt_size(c, b, (int64_t)q->peak_allocated),
              gmt_size(c, x, (int64_t)q->peak_reserved), beyond, ooms, at, step, nc);
}

/* The table of the job's processes, a row each; the NCCL column only
 * where some process had NCCL's buffers at its peak. */
static void text_processes(const struct proc *p, size_t n, const struct gmt_common *c)
{
    bool nccl = false;
    for (size_t i = 0; i < n; i++)
        nccl |= p[i].nccl > 0;
    static const char *const h[] = {"rank", "host", "pid", "peak requested",
                                    "peak allocated", "peak reserved", "beyond trace",
                                    "ooms", "peak at", "step", "NCCL"};
    static const bool right[] = {true, false, true, true, true, true, true, true, true,
                                 true, true};
    struct table *t = table_new(nccl ? 11 : 10, h, right);
    for (size_t i = 0; i < n && t; i++)
        process_row(t, &p[i], c);
    print_table(t, c);
    table_free(t);
}

/* The notes under the processes' table: what its peaks count, what each
 * recorder lost or PyTorch's figures lack, device-wide figures, traces
 * not closed. */
static void text_notes(const struct proc *p, size_t n)
{
    char a[32];
    bool fw = false, device = false;
    for (size_t i = 0; i < n; i++) {
        fw |= p[i].fw;
        device |= p[i].beyond_source == BEYOND_DEVICE;
    }
    if (fw)
        printf("peaks are the process's: PyTorch's blocks and segments and the allocations "
               "outside its\nallocator (cuBLAS/cuDNN/NCCL workspaces) alike; PyTorch's own "
               "figures: summary\n");
    for (size_t i = 0; i < n; i++)
        if (p[i].lost)
            gmt_lost_note_of(who(a, sizeof a, &p[i]), p[i].lost);
    for (size_t i = 0; i < n; i++)
        if (p[i].fw_missing)
            gmt_fw_note_of(who(a, sizeof a, &p[i]), p[i].fw_missing);
    if (device)
        printf("* device-wide: no per-process samples in the trace, so the driver's "
               "figure for the whole GPU\n  (processes sharing a GPU each count the "
               "others' memory)\n");
    for (size_t i = 0; i < n; i++)
        if (!p[i].closed)
            printf("note: %s (pid %" PRIu32 ") ended without closing its trace: "
                   "figures up to its last event\n", who(a, sizeof a, &p[i]), p[i].pid);
}

/* The imbalance table: the largest and smallest of each peak, on which
 * process, and their ratio. */
static void text_imbalance(const struct proc *p, size_t n, const struct gmt_common *c)
{
    char a[32], b[32], x[32], y[32];
    printf("\nimbalance (largest and smallest over the processes):\n");
    static const char *const ih[] = {"", "max", "on", "min", "on", "max/min"};
    static const bool iright[] = {false, true, false, true, false, true};
    struct table *t = table_new(6, ih, iright);
    for (int k = 0; k < 3 && t; k++) {
        struct spread s = spread(p, n, k);
        uint64_t hi = figure(&p[s.max], k), lo = figure(&p[s.min], k);
        char ratio[32];
        if (lo)
            snprintf(ratio, sizeof ratio, "%.2fx", (double)hi / (double)lo);
        else
            snprintf(ratio, sizeof ratio, "-");
        table_row(t, s.name, gmt_size(c, a, (int64_t)hi), who(x, sizeof x, &p[s.max]),
                  gmt_size(c, b, (int64_t)lo), who(y, sizeof y, &p[s.min]), ratio);
    }
    print_table(t, c);
    table_free(t);
}

/* Which process ran out of memory first: when, in which step, for how
 * much and where; or that none did. */
static void text_first_oom(const struct proc *p, size_t n, const struct gmt_common *c)
{
    char a[32], b[32];
    long f = first_oom(p, n);
    if (f < 0) {
        printf("\nno out-of-memory\n");
        return;
    }
    const struct proc *q = &p[f];
    char step[40] = "";
    if (q->has_step)
        snprintf(step, sizeof step, ", step %" PRIu64, q->oom_step);
    printf("\nfirst out-of-memory: %s (pid %" PRIu32 "%s%s) at %.3f s%s: %s at %s\n",
           who(a, sizeof a, q), q->pid, q->host[0] ? ", " : "", q->host,
           job_at(q, q->oom_time), step, gmt_size(c, b, (int64_t)q->oom_size),
           q->oom_site);
}

/* The sites that differ most between ranks (--top of them), or that none
 * does where there are several processes. */
static void text_sites(const struct proc *p, size_t n, const struct gmt_common *c)
{
    char a[32], b[32], e[32], x[32], y[32];
    size_t ns;
    struct job_site **rows = job_sites(p, n, &ns);
    if (ns) {
        size_t shown = c->top && (size_t)c->top < ns ? (size_t)c->top : ns;
        printf("\nsites that differ most between ranks (bytes at each one's peak):\n");
        static const char *const sh[] = {"difference", "max", "on", "min", "on", "site"};
        static const bool sright[] = {true, true, false, true, false, false};
        struct table *t = table_new(6, sh, sright);
        for (size_t i = 0; i < shown && t; i++) {
            const struct job_site *s = rows[i];
            table_row(t, gmt_size(c, e, s->diff), gmt_size(c, a, s->per[s->max]),
                      who(x, sizeof x, &p[s->max]), gmt_size(c, b, s->per[s->min]),
                      who(y, sizeof y, &p[s->min]), s->label);
        }
        print_table(t, c);
        table_free(t);
        if (shown < ns)
            printf("(%zu more sites differ)\n", ns - shown);
    } else if (n > 1) {
        printf("\nno site differs between ranks\n");
    }
    job_sites_free(rows, ns);
}

static void job_text(const struct proc *p, size_t n, const struct gmt_common *c)
{
    size_t w = 0;
    while (w < n && !(p[w].dist & GMT_DIST_WORLD_SIZE))
        w++;
    printf("job %016" PRIx64 ": %zu process%s", p[0].session, n, n == 1 ? "" : "es");
    if (w < n)
        printf(", world size %" PRIu32, p[w].world_size);
    printf(c->markdown ? "\n" : "\n\n");
    text_processes(p, n, c);
    text_notes(p, n);
    text_imbalance(p, n, c);
    text_first_oom(p, n, c);
    text_sites(p, n, c);
}

static void done(const struct gmt_common *c, void *ctx, size_t traces)
{
    (void)traces;
    struct ranks *st = ctx;
    struct proc *p = st->p;
    size_t n = st->n;
    /* each job's start: the earliest of its processes' */
    if (n)
        qsort(p, n, sizeof *p, cmp_session);
    for (size_t a = 0, b; a < n; a = b) {
        uint64_t start = p[a].start_real;
        for (b = a + 1; b < n && p[b].session == p[a].session; b++)
            if (p[b].start_real < start)
                start = p[b].start_real;
        for (size_t i = a; i < b; i++)
            p[i].job_start = start;
    }
    if (n)
        qsort(p, n, sizeof *p, cmp_proc);
    if (c->json)
        printf("{\"schema\":\"gpumemtrace.ranks/1\",\"jobs\":[");
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && p[b].session == p[a].session; b++)
            ;
        if (c->json) {
            if (a)
                printf(",");
            job_json(p + a, b - a, c);
        } else {
            if (a)
                printf("\n");
            job_text(p + a, b - a, c);
        }
    }
    if (c->json)
        printf("]}\n");
}

int cmd_ranks(int argc, char **argv)
{
    struct ranks st = {0};
    const struct gmt_command cmd = {
        .schema = "gpumemtrace.ranks/1",
        .args = {.usage = usage},
        .each = one,
        .done = done,
        .replay = {.observe = {{.event = on_marker, .ctx = &st.marks}}},
        .default_top = 10,
        .whole = true,
    };
    int rc = gmt_run(argc, argv, &cmd, &st);
    if (st.failed && rc == EXIT_OK)
        rc = EXIT_ERROR;
    for (size_t i = 0; i < st.n; i++)
        proc_free(&st.p[i]);
    free(st.p);
    marks_reset(&st.marks);
    return rc;
}
