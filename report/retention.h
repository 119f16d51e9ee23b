/* retention.h - the retention captures of a trace (GMT_X_RETENTION
 * lines, preload/retention.py writes them): read as the replay goes, for
 * `gpumemreport retention` and for the "held by" rows that `leaks`,
 * `peak`, `growth` and the HTML page show under a site.
 *
 * Each storage a capture found is matched with the allocation live at its
 * address at that moment (the site that allocated it); a block's size that
 * a framework allocator says after the capture counts until it is freed.
 * Traces are hostile input: a line that does not parse is counted and
 * skipped; counts are bounded (RET_MAX_CAPTURES captures, RET_MAX_LINES
 * lines in each).
 */
#ifndef GMT_RETENTION_H
#define GMT_RETENTION_H

#include "common.h"

#define RET_MAX_CAPTURES 64
#define RET_MAX_LINES 1000000
#define RET_SITES 4 /* allocation sites kept per holder */
#define RET_STEP_SEP '\x1f' /* between a chain's steps */

struct ret_site {
    uint32_t stack;
    uint64_t bytes;
};

struct ret_holder {
    size_t index;                 /* among the capture's holder lines */
    long parent;                  /* a nested holder: the index of the holder it
                                     lies in; -1: a top-level one */
    size_t top;                   /* the top-level holder it is or lies in */
    uint64_t top_retained;        /* that one's retained bytes: the sort key */
    uint64_t retained, storages;
    char *chain;
    struct ret_site site[RET_SITES]; /* the largest, by bytes found live */
    size_t nsites;
    uint64_t other;               /* bytes from further sites */
    uint64_t unmatched;           /* bytes of storages no live allocation starts at */
    uint64_t allocated;           /* the blocks behind its storages: the live
                                     allocations' sizes as rounded, where found */
};

struct ret_block {
    uint64_t ptr, bytes;
    long holder;    /* its top-level holder's index; -1: none */
    long nested;    /* the nested holder it lies in, -1: none (gmt_ret_finish) */
    char *chain;
    bool live;
    uint32_t stack;
    const char *label; /* its site at the grain asked for (gmt_held_by), once looked up */
    uint64_t block; /* the live allocation's block bytes (rounded) */
};

/* The storages of the captures whose allocation is still live, by
 * address: a framework allocator may say a block's real size after the
 * capture (GMT_FWX_BLOCK_SIZE: PyTorch's bridge learns it at the device's
 * next allocator event), and that size is the block's until it is freed. */
struct ret_bref {
    uint32_t cap, idx;
};

struct ret_since {
    uint64_t addr;
    struct ret_bref *refs;
    uint32_t n;
};

struct ret_since_table {
    struct ret_since *slot;
    size_t cap, n;
};

struct ret_capture {
    unsigned id;
    char *reason, *bound;
    uint64_t objects, storages, holders, time;
    double seconds;
    struct ret_holder *h;
    size_t nh, caph;
    struct ret_block *b;
    size_t nb, capb;
    size_t lines;
    size_t *rank; /* a holder line's index -> its place in h[] (gmt_ret_finish) */
};

struct gmt_ret {
    const struct replay *owner; /* the replay the captures were read by */
    struct ret_capture *caps;
    size_t ncaps, capc;
    char *armed;      /* the moments the program asked for */
    char *note;       /* what the bootstrap said */
    uint64_t skipped; /* lines that did not parse, or past the bounds */
    bool nomem;
    struct ret_since_table live; /* captured storages not freed since */
    bool finished;
};

/* The captures of the trace the commands read (one at a time). */
extern struct gmt_ret gmt_retention;
/* The replay's observer that reads them: add it to replay_opts.observe. */
#define GMT_RETENTION_OBSERVER                                                \
    {.event = gmt_ret_event, .release = gmt_ret_release, .ctx = &gmt_retention}
void gmt_ret_event(struct replay *r, const struct gmt_rec *rec, void *ctx);
void gmt_ret_release(struct replay *r, void *ctx);
/* Once the trace r is read: each storage counted under its holders, the
 * holders sorted (top-level ones by retained bytes, each followed by those
 * nested in it) and ranked. Captures of another trace are dropped. */
void gmt_ret_finish(struct gmt_ret *t, const struct replay *r);
void gmt_ret_reset(struct gmt_ret *t);
/* Why the trace has no capture, in a few words. */
const char *gmt_ret_why_none(const struct gmt_ret *t, const struct replay *r);
/* A chain for reading: `__main__.memory[3].grad_fn -> ...`; cut to
 * RET_CHAIN_SHOWN characters (its start and its end) when `cut`.
 * malloc'd; NULL when out of memory. */
#define RET_CHAIN_SHOWN 100
char *gmt_ret_chain_text(const char *chain, bool cut);
/* The chain as a JSON list of its steps (html: safe inside a <script>). */
void gmt_ret_json_chain(FILE *f, const char *chain, bool html);

/* Who holds a site's memory: of the last capture that found storages
 * allocated at the site labelled `label` (sym_site at c's grain and
 * depth), its holders by the bytes of that site's storages each holds -
 * the innermost holder (nested, where the storage lies in one), largest
 * first. */
struct gmt_held {
    const struct ret_capture *cap;
    const struct ret_holder *h;
    uint64_t bytes;
};
size_t gmt_held_by(struct loaded *l, const struct gmt_common *c, const char *label,
                   struct gmt_held *out, size_t max);
/* "held by CHAIN (capture N, REASON)", cut to fit len; gmt_held_row:
 * indented, for a row under its site's. */
#define GMT_HELD_SHOWN 2 /* holders under a site in the tables */
const char *gmt_held_text(const struct gmt_held *h, char *buf, size_t len);
const char *gmt_held_row(const struct gmt_held *h, char *buf, size_t len);
/* ,"held_by":[{chain, bytes, retained, capture, reason}...] for the
 * site `label` (up to max holders): nothing when the trace has no
 * capture. html: strings safe inside a <script>. */
void gmt_held_json(FILE *f, struct loaded *l, const struct gmt_common *c, const char *label,
                   size_t max, bool html);

#endif /* GMT_RETENTION_H */
