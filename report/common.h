/* common.h - shared machinery of the report commands (common.c). */
#ifndef GMT_COMMON_H
#define GMT_COMMON_H

#include <getopt.h>

#include "replay.h"
#include "report.h"
#include "symbols.h"

/* Options every table command understands. */
struct gmt_common {
    bool json, markdown, bytes, no_symbols;
    int top;                /* rows per table (0: all) */
    enum site_grain grain;  /* how sites are grouped */
    int depth;              /* frames per site label (stack grain) */
};

enum {
    OPT_JSON = 1000,
    OPT_MARKDOWN,
    OPT_BYTES,
    OPT_NO_SYMBOLS,
    OPT_TOP,
    OPT_DEPTH,
    OPT_GROUP,
    OPT_HELP,
    OPT_CMD_BASE = 1100, /* command-specific options start here */
};

#define GMT_COMMON_LONGOPTS                                                   \
    {"json", no_argument, NULL, OPT_JSON},                                    \
        {"markdown", no_argument, NULL, OPT_MARKDOWN},                        \
        {"bytes", no_argument, NULL, OPT_BYTES},                              \
        {"no-symbols", no_argument, NULL, OPT_NO_SYMBOLS},                    \
        {"top", required_argument, NULL, OPT_TOP},                            \
        {"depth", required_argument, NULL, OPT_DEPTH},                        \
        {"group", required_argument, NULL, OPT_GROUP},                        \
        {"help", no_argument, NULL, OPT_HELP}

#define GMT_COMMON_HELP                                                       \
    "  --json          machine-readable output (docs/report-json.md)\n"       \
    "  --markdown      tables in Markdown\n"                                  \
    "  --bytes         exact byte counts instead of KiB/MiB/GiB\n"            \
    "  --top N         rows per table (default 10, 0: all)\n"                 \
    "  --group G       group sites by function, line (default) or stack\n"    \
    "  --depth N       frames per site (stack grouping); with function or\n"  \
    "                  line grouping, which user frame names the site\n"      \
    "  --no-symbols    don't read binaries: frames as module+offset\n"

void gmt_common_init(struct gmt_common *c);
/* 1: handled, 0: not a common option, -1: bad value (message printed). */
int gmt_common_opt(struct gmt_common *c, int opt, const char *arg);

/* A command's command line: the options it takes besides the common ones
 * (GMT_COMMON_LONGOPTS, --help and -h), and what to do with them. Every
 * command parses its options with gmt_args_parse, so --help, an unknown
 * option, a missing value and a bad value are answered the same way by
 * all. */
struct gmt_args {
    const struct option *options; /* the command's own, NULL-terminated; may be NULL */
    const char *shortopts;        /* short options besides -h ("o:"); may be NULL */
    /* Called for each option before the common handling, in command-line
     * order: 1 taken, 0 not the command's (the common handling takes it),
     * -1 refused (one message printed) - so a command may refuse a common
     * option too. May be NULL. */
    int (*option)(int opt, const char *arg, void *ctx);
    void (*usage)(FILE *f);
    /* Only .options and --help, -h: not GMT_COMMON_LONGOPTS. A common
     * option's id among .options (OPT_JSON, OPT_NO_SYMBOLS) is then the
     * common option, set in struct gmt_common. */
    bool only_own;
};
/* Parse argv (argv[0]: the command's name) into *c (gmt_common_init'ed
 * by the caller, who may change its defaults) and, through a->option,
 * ctx. GMT_PARSED: go on with the operands argv[optind..]; else the exit
 * status to return at once: --help or -h printed the usage on stdout (0,
 * or 2 when it could not be written), bad usage printed one line (2). */
enum { GMT_PARSED = -1 };
int gmt_args_parse(int argc, char **argv, const struct gmt_args *a, struct gmt_common *c,
                   void *ctx);
/* Is option `id` on the command line? Silent (nothing is printed, bad
 * usage is gmt_args_parse's to answer): for refusing a pair of options
 * before any output starts. */
bool gmt_args_has(int argc, char **argv, const struct gmt_args *a, int id);
/* The option callback of a command whose one own option is a flag
 * (--layers, --total): ctx is its bool, set by that option. */
int gmt_args_flag(int opt, const char *arg, void *ctx);

/* Expand trace arguments: directories give their *.gmt files, sorted; an
 * argument that names nothing and holds * ? or [ is a pattern, expanded
 * with glob(3) (sorted; no match is an error). 0, or -1 after one error
 * line. */
int gmt_trace_list(int argc, char **argv, char ***out, size_t *n);
void gmt_trace_list_free(char **list, size_t n);

/* A replayed trace with its symbolizer. NULL after one error line. */
struct fwd_op;
struct loaded {
    const char *path;
    struct replay r;
    struct symbolizer *sym;
    struct fwd_op *fwd; /* forward lines by op, made on first use */
    bool fwd_made;
    /* gmt_growth_steps: why growth was not judged (a Python program
     * without steps), or NULL */
    const char *unjudged;
};
struct loaded *gmt_load(const char *path, const struct gmt_common *c,
                        const struct replay_opts *ro);
void gmt_unload(struct loaded *l);

/* Sizes per --bytes (buffers of 32). Negative values get a minus sign. */
const char *gmt_size(const struct gmt_common *c, char *buf, int64_t v);
const char *gmt_seconds(char *buf, uint64_t ns);

/* Tables: text aligned in columns, or Markdown. */
#define TABLE_MAX_COLS 12
struct table {
    int ncols;
    const char *headers[TABLE_MAX_COLS];
    bool right[TABLE_MAX_COLS];
    char **cells;
    size_t nrows, cap;
};
struct table *table_new(int ncols, const char *const *headers, const bool *right);
void table_row(struct table *t, ...); /* ncols strings */
void table_print(struct table *t, bool markdown);
void table_free(struct table *t);

/* Sites grouped by their label at the chosen grain. `pick` fills up to
 * GROUP_VALUES numbers for a site (false: leave it out); rows are sorted
 * by v[0], largest first, then by label. */
#define GROUP_VALUES 6
struct group_row {
    const char *label;
    int64_t v[GROUP_VALUES];
    uint32_t stack; /* one of its sites' (the first met): what it is made of */
};
size_t gmt_group(struct loaded *l, const struct gmt_common *c,
                 bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                 struct group_row **out);
/* The sites of one row of gmt_group (same pick, label `label`) grouped
 * by the layer inside a library that allocated (sym_layer); sites with
 * no layer are left out. Sorted as gmt_group's rows. */
size_t gmt_group_layers(struct loaded *l, const struct gmt_common *c,
                        bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                        const char *label, struct group_row **out);
/* The one line outside backward that made the op an autograd node is
 * named for (MulBackward0: aten::mul); NULL when the op was made at
 * several lines or none. */
const char *gmt_forward_line(struct loaded *l, const char *node);
/* Print a row's "op", "node", "backward_of", "forward_line" and "layers"
 * JSON fields
 * (those it has), each preceded by a comma. */
void gmt_json_site_parts(struct loaded *l, const struct gmt_common *c,
                         bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                         const struct group_row *row);
/* ,"layers":[{layer, BYTES_KEY, allocations}...] of gmt_group_layers
 * (pick, label); nothing when there are none, unless always. */
void gmt_json_layers(struct loaded *l, const struct gmt_common *c,
                     bool (*pick)(const struct site *, int64_t v[GROUP_VALUES]),
                     const char *label, const char *bytes_key, bool always);
/* The picks the commands share: at the peak (peak, summary, ranks, the
 * HTML page): bytes, allocations, their blocks' bytes; live at the end
 * (leaks, the page): device bytes, allocations, pinned host bytes; copies
 * and sets (transfers, the page): bytes copied, copies, of them host to
 * device and device to host, bytes set, sets. */
bool gmt_pick_peak(const struct site *s, int64_t v[GROUP_VALUES]);
bool gmt_pick_live(const struct site *s, int64_t v[GROUP_VALUES]);
bool gmt_pick_transfers(const struct site *s, int64_t v[GROUP_VALUES]);
/* A process with PyTorch's caching allocator whose trace holds none of
 * its block events (the bridge did not attach): the figures are its
 * segments' cudaMalloc calls, "requested" is what PyTorch asked CUDA for,
 * not the program's tensors. gmt_fw_missing: why, in a few words, into
 * buf (returned), or NULL when the trace is not such a one (the bridge
 * attached; no PyTorch; its cache off or its cudaMallocAsync backend,
 * where every tensor is an allocation of its own). gmt_fw_note: the
 * header line that says so ("note: ...\n"), nothing for other traces -
 * every text report prints it under its first line. */
const char *gmt_fw_missing(const struct replay *r, char *buf, size_t len);
void gmt_fw_note(const struct replay *r);
/* The same for one of several processes (ranks, diff): `who` names it,
 * `why` is gmt_fw_missing's. */
void gmt_fw_note_of(const char *who, const char *why);
/* A trace whose recorder lost events (format 1.3 header; gmt_lost):
 * gmt_lost_note_of prints the header line that says so ("note: who:
 * INCOMPLETE TRACE - what"), `who` naming one of several processes or
 * NULL. gmt_header_notes: the notes every text report prints under its
 * first line - this one, then gmt_fw_note's. */
void gmt_lost_note_of(const char *who, const char *what);
void gmt_header_notes(const struct replay *r);
/* The start of a command's JSON object for a trace: {"trace": path,
 * "lost": gmt_json_lost - the caller goes on with ,"pid":... */
void gmt_json_trace(const struct loaded *l);
/* ,"lost":null, or ,"lost":{events, records, stacks, why, error, text}
 * (docs/report-json.md); buf: room for gmt_lost's line. */
void gmt_json_lost(const struct gmt_file_header *h, char *buf, size_t len);
/* Does v[a] differ from v[b] in any of the first n rows? */
bool gmt_group_differ(const struct group_row *rows, size_t n, int a, int b);

/* The table of sites at the peak (peak, summary): bytes, share,
 * allocations, site - with an `allocated` column after bytes when
 * `allocated` (some site's blocks are bigger than its requests). */
struct table *gmt_sites_table(bool allocated);

/* A command that prints something for each trace. gmt_run parses the
 * common options and the command's own (args: gmt_args_parse, with
 * default_top as --top's default), expands trace arguments, loads
 * each, and calls `each`; with --json, the output is
 * {"schema": SCHEMA, "traces": [each's object, ...] ...}, and `done` may
 * append fields after the list (it is called before the closing "]}" with
 * the list still open: print "]," and your fields, and gmt_run closes with
 * "}" - or print nothing). A `whole` command reports on all its traces
 * together: `each` gathers, `done` prints everything, JSON included, and
 * gmt_run prints nothing around them. */
struct gmt_command {
    const char *schema;
    struct gmt_args args;
    void (*each)(struct loaded *l, const struct gmt_common *c, void *ctx);
    void (*done)(const struct gmt_common *c, void *ctx, size_t traces);
    struct replay_opts replay;
    int default_top;
    bool whole;
};
int gmt_run(int argc, char **argv, const struct gmt_command *cmd, void *ctx);

/* growth.c: sites whose live bytes rise steadily (needs the replay with
 * replay_opts.growth). Rows sorted by rate, largest first. */
struct growth_row {
    const char *label;
    double bytes_per_s;   /* slope of the live bytes */
    int64_t net;          /* rise over the analysed part of the run */
    double r2;            /* how straight the rise is */
    double rising;        /* share of bucket-to-bucket changes that rise */
    int64_t from_bytes, to_bytes;
    /* with replay_opts.mark_sites and a repeated mark (gmt_growth_mark):
     * the rise per interval between its occurrences, first to last */
    bool has_interval;
    int64_t per_interval;
    /* with steps (replay_opts.step_anchor): the slope per step, and the
     * step its site first allocated in (1-based; 0: before the first) */
    bool by_step;
    double per_step;
    uint32_t first_step;
};
size_t gmt_growth(struct loaded *l, const struct gmt_common *c,
                  struct growth_row **out);
/* gmt_growth by steps when the run has them (gmt_growth_anchor): then
 * the trace is replayed again with the step's site as the anchor, and
 * *stepped is that replay - the rows' labels are its, so unload it after
 * them; else by time on l, *stepped NULL. */
size_t gmt_growth_steps(struct loaded *l, const struct gmt_common *c,
                        struct growth_row **out, struct loaded **stepped);
/* The step of a run without markers (a first replay with growth): the
 * stack id of the site allocated once a step, and how many steps. */
bool gmt_growth_anchor(const struct loaded *l, uint32_t *anchor, uint32_t *count);
/* The mark that divides the run into steps, as an index into l->r.mark;
 * -1 if none (or the replay did not follow marks): gmt_step_mark. */
int gmt_growth_mark(const struct loaded *l);
/* Which of n mark names with their counts divides the run into steps:
 * among names occurring at least twice, the most frequent that reads
 * like a step (gmt_step_like: "step", "train_step", "iteration"), else
 * the most frequent of all - so the NVTX ranges that libraries open many
 * times a step (NCCL's collectives, say) do not pass for steps when the
 * program marks its own. Ties: the first. -1 if none occurs twice. */
int gmt_step_mark(int n, const char *(*name)(int i, const void *ctx),
                  uint64_t (*count)(int i, const void *ctx), const void *ctx);
bool gmt_step_like(const char *name);

#endif /* GMT_COMMON_H */
