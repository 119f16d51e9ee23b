/* whatif.h - allocator models for `gpumemreport whatif`.
 *
 * A model is a small allocator that holds no memory: it replays a
 * program's requests (size, stream, in order, with their frees) and keeps
 * the figures a real allocator would have had - bytes reserved from the
 * device, bytes handed out, device calls, synchronizations - so policies
 * can be compared on one recorded allocation stream. Every model has the
 * same interface (struct wi_model_ops); cmd_whatif.c feeds them and
 * prints their figures side by side. One instance serves one device, as
 * PyTorch keeps one allocator per device.
 *
 * Memory is bounded by the live requests: a model keeps one record per
 * live block and per cached (free) block, never the length of the trace.
 * Sizes are at most GMT_SIZE_MAX (2^48): the caller skips larger ones.
 */
#ifndef GMT_WHATIF_H
#define GMT_WHATIF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A PYTORCH_CUDA_ALLOC_CONF, the options that change where memory goes. */
#define WI_ROUNDUP_INTERVALS 16 /* 1 MiB .. 64 GiB, one per power of two */
struct wi_conf {
    uint64_t max_split_size;         /* UINT64_MAX: unlimited (the default) */
    uint64_t max_non_split_rounding; /* default kLargeBuffer, 20 MiB */
    double gc_threshold;             /* 0: off */
    bool expandable;
    uint32_t roundup[WI_ROUNDUP_INTERVALS]; /* divisions per interval, 0: none */
};
/* Parse a PYTORCH_CUDA_ALLOC_CONF string by PyTorch's rules (keys
 * max_split_size_mb, max_non_split_rounding_mb, garbage_collection_threshold,
 * roundup_power2_divisions as N or [256:1,512:2,>:4], expandable_segments;
 * backend:native and the pinned/lock options are accepted and change
 * nothing). 0, or -1 with the reason in why. */
int wi_conf_parse(const char *s, struct wi_conf *c, char *why, size_t whylen);

/* A model's figures. */
struct wi_stats {
    uint64_t reserved;       /* now: bytes held from the device */
    uint64_t allocated;      /* now: block bytes handed out */
    uint64_t peak_reserved;
    /* at the first moment of peak_reserved: reserved bytes not handed
     * out, and the largest free block among them */
    uint64_t peak_free, peak_largest_free;
    uint64_t device_allocs, device_frees; /* cudaMalloc/cudaFree, or map/unmap */
    uint64_t syncs;          /* times the allocator waited for the GPU */
    uint64_t retries;        /* allocations retried after freeing cache */
    uint64_t segments, peak_segments;
    bool has_device_calls;   /* false: the model makes none (ideal) */
};

/* gpumemtrace's pool as a model (gmt-pool[:OPTS]): its options. */
enum { WI_GMT_PLAIN, WI_GMT_WHOLE, WI_GMT_PAGES };
struct wi_gmt {
    bool ordered;      /* GPUMEMTRACE_POOL_ORDERED=1 */
    uint8_t vm;        /* plain segments; GPUMEMTRACE_POOL_VMM_WHOLE=1; GPUMEMTRACE_POOL_VMM=1 */
    uint32_t chunk_mb; /* WI_GMT_PAGES: GPUMEMTRACE_POOL_VMM_CHUNK_MB (default 16) */
};
/* Parse gmt-pool's options (what follows "gmt-pool:"), a comma-separated
 * list of ordered, whole, vmm and chunk=MB (with vmm, once; 2-1024, a
 * multiple of 2, as the library takes it). 0, or -1 with the reason in
 * why. */
int wi_gmt_parse(const char *s, struct wi_gmt *g, char *why, size_t whylen);

/* What an instance is made with. */
struct wi_opts {
    const struct wi_conf *conf; /* pytorch: its configuration */
    uint64_t limit;             /* device memory; 0: unlimited */
    /* bytes this device holds outside the model (other allocations of the
     * program), counted against limit; may be NULL */
    const uint64_t *outside;
    const struct wi_gmt *gmt; /* gmt-pool: its options; NULL: the default */
};

struct wi_model_ops {
    const char *name;
    void *(*init)(const struct wi_opts *o); /* NULL: out of host memory */
    /* Hand out a block for `size` bytes on `stream`: 0 and *id, or -1
     * when the device would have run out of memory (after the model's
     * own retries). */
    int (*alloc)(void *m, uint64_t size, uint64_t stream, uint64_t *id);
    void (*free)(void *m, uint64_t id);
    void (*stats)(void *m, struct wi_stats *s);
    void (*fini)(void *m);
};

/* A model's state, zeroed, on cache lines of its own (freed with free):
 * models run on threads of their own (whatif_lanes.c), and two states on
 * one line would have the threads take it from each other at every
 * request. NULL when out of host memory. */
static inline void *wi_model_state(size_t size)
{
    void *p = NULL;
    size = (size + 63) / 64 * 64;
    return posix_memalign(&p, 64, size) == 0 ? memset(p, 0, size) : NULL;
}

extern const struct wi_model_ops wi_ideal;   /* whatif_ideal.c */
extern const struct wi_model_ops wi_pytorch; /* whatif_pytorch.c */
/* whatif_gmtpool.c: gpumemtrace's caching pool (preload/pool*.c, linked
 * in), its synchronizations free and immediate, with the options of
 * wi_opts.gmt (ordered: every free reusable at once, an estimate of
 * GPUMEMTRACE_POOL_ORDERED). Not reentrant: emptied pools are kept for
 * the next instance. */
extern const struct wi_model_ops wi_gmtpool;
/* whatif_async.c: the driver's stream-ordered pool (cudaMallocAsync), by
 * rules measured on an H200. */
extern const struct wi_model_ops wi_async;

/* whatif_pytorch.c: PyTorch's size rounding for a configuration
 * (round_size): at least 512 bytes, a multiple of 512, or the next
 * power-of-two division where roundup_power2_divisions says so. */
uint64_t wi_pytorch_round(const struct wi_conf *c, uint64_t size);

/* whatif_feed.c: a trace's requests fed to models (cmd_whatif.c, and
 * summary at an out-of-memory event). A policy: a model and its
 * options, named as --policy names it. */
#define WI_MAX_POLICIES 8
#define WI_DEVICES 64 /* REPLAY_MAX_DEVICES */
struct wi_policy {
    char label[160];
    const struct wi_model_ops *ops;
    struct wi_conf conf;
    struct wi_gmt gmt;
};
/* Parse a --policy value (ideal, pytorch[:CONF], gmt-pool[:OPTIONS],
 * cuda-async) into *p. 0; -1 with the reason in why (a bad CONF or
 * OPTIONS, a value too long); -2 for no such policy. */
int wi_policy_parse(const char *arg, struct wi_policy *p, char *why, size_t whylen);

/* Which device allocations are the requests when the trace has no
 * framework blocks (whatif --requests): auto resolves to the runtime's
 * if the trace has any, else the driver's. */
enum { WI_REQ_AUTO, WI_REQ_RUNTIME, WI_REQ_DRIVER, WI_REQ_ALL };

struct wi_oom { /* where a policy ran out of memory */
    bool hit;
    uint64_t seq, time, size, stream;
    uint32_t stack;
};

struct wi_dev { /* one device: the feed's counts, and its models, one per policy */
    uint64_t outside, requested, peak_requested, requests;
    /* the models' side, which the threads running them write: on cache
     * lines apart from the counts the feed writes at every request */
    _Alignas(64) void *m[WI_MAX_POLICIES];
    struct wi_oom oom[WI_MAX_POLICIES];
    /* what the device holds outside the models as each model is told it
     * (its wi_opts.outside): `outside` as of the request it is given */
    uint64_t seen_outside[WI_MAX_POLICIES];
};

struct wi_req { /* a live allocation of the program */
    uint64_t addr, size;
    uint32_t ref; /* a request's number among the live ones (whatif_lanes.h) */
    uint16_t dev;
    bool request; /* fed to the models; else held outside them */
};

/* The feed: the caller fills pol, npol, limit, requests_from and
 * workers, zeroes the rest, and passes it to wi_feed_event as its
 * observer's ctx (or calls it from its own event hook); a new trace
 * restarts it. Its counts are those of the records fed so far, the
 * models' figures (dev[]: m, oom) those of the requests wi_feed_flush
 * has given them: the records become requests as they come, and the
 * models get them a batch at a time (whatif_lanes.c), on threads of
 * their own with workers. */
struct replay;
struct gmt_rec;
struct wi_lanes;
struct wi_feed {
    struct wi_policy pol[WI_MAX_POLICIES];
    int npol;
    uint64_t limit;    /* device memory (wi_opts.limit); 0: unlimited */
    int requests_from; /* WI_REQ_* */
    int workers;       /* threads to run the models beside the feed; 0: none */
    /* the replay in progress */
    const struct replay *owner;
    uint64_t last_records;
    struct wi_dev *dev[WI_DEVICES];
    struct wi_req *slot; /* live allocations by address (addrmap.h) */
    size_t cap, n;
    uint64_t requests, frees;
    uint64_t outside_n; /* device allocations held outside the models (no framework blocks) */
    int source;         /* this trace's: WI_REQ_RUNTIME, _DRIVER or _ALL (auto resolved) */
    bool failed;        /* out of host memory: the figures would be wrong */
    struct wi_lanes *lanes; /* the requests on their way to the models */
};
/* One record of the replay, applied (an observer's event hook, replay.h). */
void wi_feed_event(struct replay *r, const struct gmt_rec *rec, void *ctx);
/* The requests fed so far given to the models. */
void wi_feed_flush(struct wi_feed *w);
/* Every model and live request let go; the policies stay. */
void wi_feed_reset(struct wi_feed *w);
/* Would the allocation rec - one that failed in the trace - have been
 * served, by each policy, after the records fed so far? out[p] for
 * policy p; returns npol, or 0 when rec is no request of the models (an
 * allocation held outside them, pinned host memory). A policy that ran
 * out of memory earlier never got to it; one that served it gives it
 * back at once (its peak keeps it). */
struct wi_try {
    const char *policy;     /* its label */
    bool fits;
    bool earlier;           /* ran out of memory on an earlier request */
    uint64_t earlier_time;  /* that request's time */
    uint64_t peak_reserved; /* the model's, with the request when it fit */
};
int wi_feed_try(struct wi_feed *w, const struct replay *r, const struct gmt_rec *rec,
                struct wi_try out[WI_MAX_POLICIES]);

/* cmd_whatif.c: the command (main.c's table) */
int cmd_whatif(int argc, char **argv);

#endif /* GMT_WHATIF_H */
