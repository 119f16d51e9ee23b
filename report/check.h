/* check.h - what the files of `gpumemreport check` share.
 *
 * cmd_check.c is the command: its options, the checks and their verdicts,
 * the output. check_baseline.c gives it the figures it checks: a trace's
 * (one process's, with its rank when the trace records one), and a
 * baseline's - its largest process's, and rank by rank when every process
 * of it has a rank - read from traces, from a file the command saved, or
 * from `summary --json` output - and writes --save files. Nothing else
 * includes this header.
 */
#ifndef GMT_CHECK_H
#define GMT_CHECK_H

#include "common.h"

/* The figures, in the order rows and output follow. */
enum metric { M_PEAK, M_RESERVED, M_LEAKED, M_GROWTH, M_OOMS, NMETRICS };

struct metric_info {
    const char *key;  /* JSON name */
    const char *name; /* for people */
    const char *opt;  /* the limit's option */
};

/* Ranks are what the trace header records: 0 to 2^32-1; -1: none. */
#define NO_RANK (-1)

/* One process's figures. Growth is in bytes per second, rounded. */
struct figures {
    char *trace, *command; /* owned */
    uint32_t pid;
    int64_t rank;          /* the process's rank in its job, or NO_RANK */
    bool closed;
    int64_t v[NMETRICS];
};

/* One rank's figures in a baseline: the largest of its processes (a rank
 * is normally one process). Growth is never part of a baseline. */
struct base_rank {
    int64_t rank;
    int64_t v[NMETRICS];
};

/* Baseline figures: the largest process's value for each figure, and,
 * when every process of the baseline has a rank (`ranked`), each rank's,
 * sorted by rank, one entry per rank. */
struct baseline {
    bool have[NMETRICS];
    int64_t v[NMETRICS];
    size_t processes;
    const char *kind; /* "traces", "check baseline", "summary" */
    bool ranked;
    struct base_rank *ranks; /* owned; nranks entries when ranked */
    size_t nranks;
};

/* ---- check_baseline.c ----------------------------------------------------- */

extern const struct metric_info metric_info[NMETRICS]; /* by enum metric */

/* Load every trace the arguments name, keeping only their figures (growth
 * only when asked). 0, or -1 after an error line. */
int load_figures(int argc, char **argv, const struct gmt_common *c, bool growth,
                 struct figures **out, size_t *nout);
void figures_free(struct figures *f, size_t n);

/* BASE: a directory (traces), a JSON file (--save or `summary --json`
 * output), or a trace. 0, or -1 after an error line. */
int load_baseline(const char *path, const struct gmt_common *c, struct baseline *b);
void baseline_free(struct baseline *b);
/* Rank r's figures in a ranked baseline, or NULL if it has none. */
const struct base_rank *baseline_rank(const struct baseline *b, int64_t r);
/* --save FILE: this run's figures as a baseline. 0, or -1 after an error line. */
int save_baseline(const char *path, const struct figures *f, size_t n);

/* A count: decimal digits only, at most 2^63-1 (--max-ooms, and the figures
 * of a baseline file). 0, or -1. */
int parse_count(const char *arg, int64_t *out);

#endif /* GMT_CHECK_H */
