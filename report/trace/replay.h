/* replay.h - rebuild a process's GPU memory state from its trace.
 *
 * The replay streams a trace once, in order, and keeps what the report
 * commands need: live allocations (by address), per-site statistics (a
 * site is a recorded call stack), per-device counters and their peaks,
 * the per-site picture at the moment of the peak, transfers, out-of-memory
 * events, pool samples, and time-bucketed series for timelines and growth.
 * Memory is proportional to live allocations and distinct stacks, never to
 * the length of the trace: the picture at the peak is kept by applying,
 * at each new peak, only the site changes since the previous one, and the
 * time series use a fixed number of buckets that merge in pairs when the
 * run outlasts them.
 *
 * Terms. requested: bytes the program asked for. allocated: the block
 * sizes behind them (rounded by the pool, pitched, ...). reserved: what
 * the process holds from the driver for them - the pool's segments when
 * the pool was on, else the allocations themselves. Device memory is
 * device and managed allocations; pinned host memory is counted apart.
 *
 * A framework allocator's own events (GMT_FEAT_FW_BLOCKS: PyTorch's
 * caching allocator with its cache on). Its blocks (GMT_API_FW_ALLOC) are
 * allocations like any other - requested, allocated, sites, leaks - but
 * reserve nothing themselves: its segments (GMT_X_FW) are its reserved
 * memory. The cudaMalloc/cuMemCreate calls under those segments
 * (GMT_ALLOC_FW_BACKING) would count the same bytes a second time, so
 * they are kept apart (replay.backing) and count nowhere: not requested,
 * not reserved, not leaked, and a failed one is no out-of-memory (the
 * framework frees its cache and retries; it raising out of memory is the
 * failed block). Per device, the framework's own figures follow its own
 * bookkeeping: allocated rises with a block handed out and falls when the
 * program frees it, reserved is the bytes of its segments, so their peaks
 * are torch.cuda.max_memory_allocated() and max_memory_reserved().
 */
#ifndef GMT_REPLAY_H
#define GMT_REPLAY_H

#include "defs.h"
#include "reader.h"

#define REPLAY_MAX_DEVICES 64
#define REPLAY_BUCKETS 256       /* timeline */
#define REPLAY_THREADS 4096       /* threads whose allocations are counted apart */
#define REPLAY_GROWTH_BUCKETS 64 /* per-site growth series: steps up to 64 each their own */
#define REPLAY_MAX_OOMS 1000     /* details kept; all are counted */
#define REPLAY_MARK_SLOTS 8      /* mark names followed per site */
#define REPLAY_MAX_POOLS 64      /* stream-ordered pools followed */

enum { MEM_DEVICE = 0, MEM_MANAGED = 1, MEM_HOST = 2 };
/* What memory an allocation of entry point api is (MEM_*). */
int replay_mem_of(unsigned api);

/* A site's figures. Every stack an event was recorded under has one, so
 * a trace of a million stacks can make as many sites: what few sites
 * have is kept apart, NULL until needed - pinned host memory and
 * transfers (`rare`), the growth series and the per-mark values
 * (replay_opts). */
struct site {                     /* 96 bytes */
    uint32_t stack;               /* stack id (0: none recorded) */
    bool dirty;                   /* changed since the last peak */
    int64_t live_bytes, live_count;
    int64_t live_alloc_bytes;     /* device blocks behind live_bytes (LIVE_BLOCK) */
    uint64_t total_bytes, total_count;
    int64_t peak_bytes, peak_count; /* live at the device peak */
    int64_t peak_alloc_bytes;     /* their blocks' bytes then (allocated) */
    struct site_rare *rare;
    struct site_growth *growth;   /* replay_opts.growth */
    struct site_marks *marks;     /* replay_opts.mark_sites */
};

struct site_rare {
    uint64_t host_live_bytes, host_total_bytes;
    uint64_t copy_bytes[5], copy_count[5]; /* by GMT_DIR_* */
    uint64_t set_bytes, set_count;
};

/* A site's live bytes at each growth bucket (replay_site_series) are a
 * step function, and most sites of a run with a million stacks change in
 * one or two buckets: up to GROWTH_POINTS changes are kept as (bucket,
 * value) points, and only a site that changes more gets the full series.
 * 64 buckets of every site were 512 bytes a site, most of `html`'s
 * memory on such a trace. */
#define GROWTH_POINTS 4
struct site_growth {
    int64_t *dense;               /* [REPLAY_GROWTH_BUCKETS] once more than
                                     GROWTH_POINTS changes; else NULL */
    int64_t value[GROWTH_POINTS]; /* from bucket at[i] on, until the next */
    uint8_t at[GROWTH_POINTS];    /* ascending; before the first: 0 bytes */
    uint8_t npoints;
    uint64_t first_time, last_time; /* of its allocations and frees */
    /* its device allocations' ordinals among its thread's (the thread of
     * its first; mixed: it allocated on another too): the first, the
     * latest, and the gaps between them after the first gap - how
     * regularly it recurs (gmt_growth_anchor) */
    uint64_t ord_first, ord_last;
    uint32_t thread;
    bool mixed;
    uint32_t gaps;
    double gap_sum, gap_sq;
    uint32_t first_step; /* step mode: steps begun at its first allocation */
    int64_t at_first_step; /* step mode: live bytes as the first step began */
};

/* The site's live bytes at each of the first n growth buckets, into out. */
void replay_site_series(const struct site_growth *g, int64_t *out, int n);

/* Live bytes of a site at the first and the latest occurrence of each
 * followed mark name (replay.mark[]), kept lazily: see replay.c. */
struct site_marks {
    int64_t first[REPLAY_MARK_SLOTS], last[REPLAY_MARK_SLOTS];
    uint32_t stamp[REPLAY_MARK_SLOTS]; /* occurrence the values are of */
};

/* A mark name (MARKER type mark) followed per site. */
struct replay_mark {
    char *name;
    uint32_t count;               /* occurrences so far */
};

struct device_state {
    bool seen;
    int64_t requested, allocated, reserved, segments, host;
    uint64_t peak_requested, peak_allocated, peak_reserved, peak_host;
    uint64_t peak_requested_time, peak_allocated_time, peak_reserved_time;
    uint64_t peak_requested_seq;
    uint64_t allocs, frees, ooms, failed_allocs;
    /* the framework allocator on this device (see the top of this file):
     * its blocks' requested and block bytes, its segments' bytes */
    int64_t fw_requested, fw_allocated, fw_reserved;
    uint64_t peak_fw_requested, peak_fw_allocated, peak_fw_reserved;
    uint64_t peak_fw_allocated_time, peak_fw_reserved_time;
    uint64_t fw_allocs, fw_frees, fw_free_completed, fw_ooms;
    uint64_t fw_segments, fw_segment_frees, fw_maps, fw_unmaps;
    uint64_t fw_block_sizes;      /* blocks whose real size came later */
    uint64_t fw_backing, fw_backing_failed; /* CUDA allocations under segments */
    /* block bytes of device allocations outside the framework allocator
     * (libraries' workspaces, the program's own cudaMalloc) */
    int64_t outside;
    uint64_t peak_outside;
    /* driver view from samples */
    uint64_t samples, last_device_used, max_device_used;
    int64_t max_untracked;        /* device_used - reserved, largest seen */
    /* this process's own device memory (GMT_X_PROC_MEM, from NVML): on a
     * shared card the device-wide figure counts other processes too */
    uint64_t proc_samples, max_proc_used;
    int64_t max_proc_untracked;   /* own used - reserved, largest seen */
    /* fragmentation from samples */
    double max_frag;
    uint64_t max_frag_time;
};

struct oom {
    uint64_t time, seq, size;
    uint32_t device, thread, stack, result;
    bool fw;           /* the framework allocator raised it */
    bool has_state;
    uint64_t state[5]; /* device free, total, reserved, allocated, largest free */
};

struct bucket {
    uint64_t requested, reserved, device_used; /* maxima in the bucket */
    uint64_t host;
    bool used;
};

/* Allocations by address: open addressing. */
struct live_table {
    struct live *slot;
    size_t cap, n;
};

/* What the record just applied changed (an observer's event hook). device:
 * whose counters (requested, allocated, reserved; dev[] and the process's
 * sums) moved, -1: none. sites: the sites whose live device bytes moved,
 * and by how many requested bytes - two when an allocation replaced one
 * at the same address whose free the trace missed (the old one is gone:
 * its bytes are let go, as a free would). */
struct replay_change {
    int device;
    int nsites;
    struct { uint32_t stack; int64_t bytes; } site[2];
};

/* An observer of the replay: what follows the run beyond the replay's
 * basics plugs in here, one way for all - autograd's blocks named by the
 * backward call (backward.c, always on), memory kinds at one event
 * (kinds.c), and the commands' passes (timeline's and html's levels, the
 * Perfetto export, phases' and ranks' marks, peak --at, the step finder).
 * Called in the trace's order, the replay's own observers first, then
 * replay_opts.observe's in their order; any hook may be NULL.
 *
 *   site     before an allocation (GMT_K_ALLOC) is applied: the stack id
 *            it is counted under (rec->stack unless the observer names
 *            another); each observer's answer is the next one's rec->stack
 *   event    after every record (extension records too) was applied,
 *            with r->change saying what it changed, so a pass that
 *            follows the run's levels reads them instead of counting by
 *            rules of its own. At a MARKER, r->window_peak is still the
 *            highest `requested` since the previous marker (or the
 *            start): it is reset after the observers; the marker's name
 *            is gmt_defs_string(&r->defs, rec->value), its type rec->api
 *            (GMT_MARK, _PUSH, _POP)
 *   release  replay_free: give back what the observer keeps
 */
struct replay;
struct replay_observer {
    uint32_t (*site)(struct replay *r, const struct gmt_rec *rec, void *ctx);
    void (*event)(struct replay *r, const struct gmt_rec *rec, void *ctx);
    void (*release)(struct replay *r, void *ctx);
    void *ctx;
};
#define REPLAY_OPT_OBSERVERS 4
#define REPLAY_OBSERVERS (REPLAY_OPT_OBSERVERS + 1)

struct replay {
    struct gmt_defs defs;
    struct gmt_file_header hdr;
    char damage[640];             /* what a damaged trace lost ("": nothing) */
    bool cut;
    bool pool;                    /* the pool was on */
    bool fw;                      /* a framework allocator's events are in it */
    uint64_t records, events, first_time, last_time;
    uint64_t last_seq;            /* of the last event (kinds at the end) */
    /* device allocations per recording thread (index < REPLAY_THREADS;
     * the others share the last slot) */
    uint64_t *thread_allocs;
    uint32_t nthread_allocs;
    struct live_table live;       /* live allocations */
    /* CUDA allocations under the framework's segments (GMT_ALLOC_FW_BACKING):
     * apart, because a block at a segment's start shares its address */
    struct live_table backing;
    /* the framework's blocks freed, not yet reusable again: which
     * FREE_COMPLETED records are the framework's (the pool's are not) */
    struct live_table fw_pending;
    uint64_t fw_odd;              /* framework records that fit nothing known */
    /* sites by stack id */
    struct site *sites;           /* dense index -> site; moves as it
                                     grows: hold indexes across events */
    size_t nsites, cap_sites;
    uint32_t *site_of_id;         /* stack id -> dense index + 1 (ids < 1M) */
    size_t site_of_cap;
    struct site_hash *site_big;   /* ids >= 1M */
    uint32_t *touched;            /* dense indexes dirty since the peak */
    size_t ntouched, cap_touched;
    struct device_state dev[REPLAY_MAX_DEVICES];
    /* process-wide device memory (all devices) and its peak */
    int64_t requested, allocated, reserved, host;
    uint64_t peak_requested, peak_requested_time, peak_requested_seq;
    uint64_t peak_reserved, peak_reserved_time;
    uint64_t unknown_frees;       /* frees of addresses never seen allocated */
    uint64_t driver_allocs;       /* allocations seen at the driver level */
    uint64_t segments_taken;      /* the pool's segment allocations */
    /* virtual memory address space (GMT_X_VMM), all devices */
    uint64_t vmm_ops;
    int64_t mapped, va_reserved;
    uint64_t peak_mapped, peak_va_reserved;
    /* stream-ordered pools (GMT_X_MEMPOOL samples): per pool, the highest
     * reserved and used bytes the driver reported */
    struct replay_pool {
        uint64_t pool;
        uint32_t device;
        uint64_t reserved_high, used_high;
    } mempools[REPLAY_MAX_POOLS];
    int nmempools;
    /* transfers */
    uint64_t copy_bytes[5][3], copy_count[5][3]; /* [dir][hostmem] */
    uint64_t set_bytes, set_count;
    struct oom ooms[REPLAY_MAX_OOMS];
    size_t nooms;
    uint64_t ooms_total;
    bool oom_state_pending;
    uint64_t oom_state[5];
    /* time series */
    uint64_t t0, bucket_ns;       /* bucket i covers t0 + i*bucket_ns */
    uint64_t cur_lo, cur_hi;      /* the last bucket found, and its range */
    struct bucket *cur_bucket;
    struct bucket buckets[REPLAY_BUCKETS];
    uint64_t g_bucket_ns;         /* growth buckets */
    int g_last;                   /* last growth bucket written */
    bool want_growth;
    /* markers */
    uint64_t markers;             /* MARKER records so far */
    uint64_t allocs, alloc_bytes; /* device allocations so far, requested bytes */
    uint64_t window_peak;         /* highest `requested` since the last marker */
    struct replay_mark mark[REPLAY_MARK_SLOTS]; /* first mark names seen */
    int nmarks;
    bool want_marks;
    /* blocks of autograd's engine counted under the backward call's line
     * (backward.h): the synthetic stack ids the sites may carry */
    struct bw_state *bw;
    /* growth by steps (replay_opts.step_anchor or step_mark; by_steps) */
    uint32_t step_anchor, step_count, steps_begun;
    const char *step_mark;
    bool by_steps;
    uint64_t first_step_time;
    /* memory kinds at one event (replay_opts.kinds_seq; kinds.h) */
    uint64_t kinds_seq;
    struct kinds_state *kinds;
    const char *path; /* the trace's, while replay_trace runs */
    struct replay_change change; /* what the record just applied changed */
    /* the observers (struct replay_observer), the replay's own first */
    struct replay_observer obs[REPLAY_OBSERVERS];
    int nobs;
};

/* What a command needs beyond the basics. */
struct replay_opts {
    /* Observers of this replay, after its own (see struct
     * replay_observer); the first with no hook ends the list. */
    struct replay_observer observe[REPLAY_OPT_OBSERVERS];
    bool growth; /* keep per-site growth series */
    /* per site, live bytes at the first and latest occurrence of each of
     * the first REPLAY_MARK_SLOTS mark names (replay_site_mark) */
    bool mark_sites;
    /* With growth: the growth buckets are steps, not time. A step begins
     * at each device allocation counted under stack id step_anchor, which
     * occurs step_count times (gmt_growth_anchor found both in a first
     * replay); bucket b ends where step b * step_count / buckets begins. */
    uint32_t step_anchor, step_count;
    /* Or: a step begins at each occurrence of the mark of this name (a
     * mark, or a region's start), which occurs step_count times - the
     * program's own steps. The name must outlive the replay. */
    const char *step_mark;
    /* Memory kinds at one event (kinds.h: with GMT_KINDS_OBSERVER among
     * the observers): its seq, the peak's from a first replay. */
    uint64_t kinds_seq;
};

/* Replay a whole trace. 0 on success; -1 with err set (one line). A trace
 * cut short by a dead process replays up to its cut (r->cut). */
/* Is an allocation of api reserved by another record - one of the pool's
 * segments (r->pool), or the framework allocator's? */
bool replay_pooled(const struct replay *r, unsigned api);

int replay_trace(const char *path, struct replay *r,
                 const struct replay_opts *opts, char *err, size_t errlen);
void replay_free(struct replay *r);

/* Iterate the live allocations left at the end (leaks). */
struct live {         /* 32 bytes: two per cache line */
    uint64_t addr;     /* 0: empty slot */
    uint64_t size;
    uint32_t extra;    /* block size - size (rounding, pitch; a framework
                          block's real size once GMT_FWX_BLOCK_SIZE says) */
    uint32_t stack;
    uint32_t thread;
    uint16_t device;
    uint8_t mem;
    uint8_t api;
};
#define LIVE_BLOCK(l) ((l)->size + (l)->extra)
#define REPLAY_FOREACH_LIVE(r, l)                                             \
    for (struct live *l = (r)->live.slot;                                     \
         l && l < (r)->live.slot + (r)->live.cap; l++)                        \
        if (l->addr)

/* Device and managed bytes live at the end (leaked at exit: the
 * framework's blocks still held count, its cached segments don't); *count
 * such allocations, *host the pinned host bytes live (either may be NULL). */
uint64_t replay_leaked(const struct replay *r, uint64_t *count, uint64_t *host);
/* Memory beyond the trace: device memory held beyond what the trace
 * reserved (CUDA context, libraries' own), the largest seen on any
 * device. This process's own figure (NVML) where the trace has it on
 * every device it sampled, else the device-wide one (which counts other
 * processes on a shared card too). *source: BEYOND_PROCESS,
 * BEYOND_DEVICE, or BEYOND_NONE (no samples; the result is 0). dev: one
 * device, or every device when negative. */
enum beyond_source { BEYOND_NONE, BEYOND_DEVICE, BEYOND_PROCESS };
int64_t replay_beyond(const struct replay *r, int dev, enum beyond_source *source);
/* Duration of the traced run in ns, as well as it is known. */
uint64_t replay_duration(const struct replay *r);
/* The allocation live now at exactly addr, or NULL (an observer's
 * question, during the replay). */
const struct live *replay_live_at(const struct replay *r, uint64_t addr);
/* Device allocations the recording thread `thread` made (its count in
 * thread_allocs). */
uint64_t replay_thread_allocs(const struct replay *r, uint32_t thread);

/* Number of growth buckets in use and their width. */
int replay_growth_buckets(const struct replay *r, uint64_t *width_ns);
/* Live bytes of site s at the first and the latest occurrence of mark
 * r->mark[slot] (replay_opts.mark_sites); false if it never occurred. */
bool replay_site_mark(const struct replay *r, const struct site *s, int slot,
                      int64_t *first, int64_t *last);

#endif /* GMT_REPLAY_H */
