/* instant.h - a trace's state at one chosen instant (instant.c).
 *
 * The replay keeps the sites live at the peak; some questions are about
 * another moment: what was live when the program ran out of memory, at a
 * mark the program set, at a time. `peak --at` shows its table at such
 * an instant, and `summary` explains each out-of-memory event from one.
 *
 * An instant is an out-of-memory event (the Nth the replay kept), the Nth
 * occurrence of a mark name (gpumemtrace_mark or push, NVTX), or a time
 * from the trace's start: then the state after every record up to the
 * first one later than it. The picture is taken by replaying the trace
 * again (the replay streams, it cannot go back) and copying the live
 * figures of every site when the pass reaches the instant - memory
 * proportional to the sites, as the peak's picture is.
 */
#ifndef GMT_INSTANT_H
#define GMT_INSTANT_H

#include "common.h"

enum gmt_at_what { GMT_AT_OOM, GMT_AT_MARK, GMT_AT_TIME };

struct gmt_at {
    enum gmt_at_what what;
    char mark[256];  /* GMT_AT_MARK: the name */
    uint64_t n;      /* GMT_AT_OOM, GMT_AT_MARK: which one, from 1 */
    uint64_t ns;     /* GMT_AT_TIME: from the trace's start */
};

/* Parse an instant as --at takes it: oom or oom:N; a time in seconds
 * with its unit (1.5s, 250ms); else a mark name, MARK or MARK:N. 0; or
 * -1 with the reason in why. */
int gmt_at_parse(const char *arg, struct gmt_at *at, char *why, size_t whylen);

/* The instant in words: "out-of-memory #2", "mark \"step\" #3",
 * "1.500 s". */
const char *gmt_at_name(const struct gmt_at *at, char *buf, size_t len);

/* The picture at an instant. The caller sets `at` and the optional
 * fields, zeroes the rest, and gmt_at_load fills the results. */
struct gmt_instant {
    struct gmt_at at;
    /* optional: the kinds at the instant too (replay_opts.kinds_seq; only
     * for an out-of-memory event, whose sequence number is known) */
    bool kinds;
    /* optional: called for every record up to the instant's own, that
     * one included, after the replay applied it; then `then` at the
     * instant (the replay's counters are the instant's). */
    void (*each)(struct replay *r, const struct gmt_rec *rec, void *ctx);
    void (*then)(struct replay *r, const struct gmt_rec *rec, void *ctx);
    void *ctx;
    /* results */
    uint64_t seq, time;        /* the instant's record (time: the trace's clock) */
    const struct oom *oom;     /* GMT_AT_OOM: the event (the first replay's) */
    int device;                /* the event's device; -1: an instant of no device */
    int64_t requested, allocated, reserved; /* process-wide, live then */
    struct device_state dev;   /* device's counters then (device >= 0) */
    int64_t beyond;            /* memory beyond the trace on device (or all) up
                                  to then (replay_beyond) */
    enum beyond_source beyond_source;
    uint64_t occurrences;      /* GMT_AT_MARK: the name's in the whole trace */
    char why[400];             /* no such instant: why (no error printed) */
};

/* Replay l's trace again and take the picture at in->at. The returned
 * trace's sites carry the instant's live figures in their peak fields
 * (peak_bytes, peak_count, peak_alloc_bytes), so gmt_pick_peak and all
 * that builds on it (gmt_group, layers) show the instant; its other
 * figures are the whole trace's. NULL: no such instant in the trace
 * (in->why says; nothing printed), or the pass failed (in->why empty, an
 * error line printed). */
struct loaded *gmt_at_load(struct loaded *l, const struct gmt_common *c,
                           struct gmt_instant *in);

#endif /* GMT_INSTANT_H */
