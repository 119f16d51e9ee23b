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

/* The figures, in the order rows and output follow. M_STEP_GROWTH is
 * judged per growing site, not per process (struct step_site). */
enum metric { M_PEAK, M_RESERVED, M_LEAKED, M_GROWTH, M_STEP_GROWTH, M_OOMS, NMETRICS };

struct metric_info {
    const char *key;  /* JSON name */
    const char *name; /* for people */
    const char *opt;  /* the limit's option */
};

/* Ranks are what the trace header records: 0 to 2^32-1; -1: none. */
#define NO_RANK (-1)

/* A site that grows step after step (gmt_growth_steps by steps). */
struct step_site {
    char *label;         /* owned */
    int64_t per_step;    /* bytes a step, rounded */
    uint32_t first_step; /* 1-based; 0: before the first step */
};

/* One process's figures. Growth is in bytes per second, rounded; growth
 * per step is its largest site's. */
struct figures {
    char *trace, *command; /* owned */
    uint32_t pid;
    int64_t rank;          /* the process's rank in its job, or NO_RANK */
    bool closed;           /* the header says the process closed it */
    uint64_t events;       /* events read */
    /* owned: what the reader skipped or found missing (a damaged or
     * cut file), one line; NULL: nothing */
    char *damage;
    /* owned: what its recorder could not record (gmt_lost: a file that
     * stopped growing, a stack cap), one line; NULL: nothing */
    char *lost;
    /* with growth asked: whether the run was judged by steps, how many
     * there were, and its sites growing step after step, most per step
     * first */
    bool steps_found;
    const char *no_steps_why; /* without steps: why none (static), or NULL */
    uint32_t steps;
    struct step_site *grow; /* owned, ngrow entries */
    size_t ngrow;
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
    /* a baseline read from traces: those damaged (figures_damaged), each
     * with its account; owned */
    struct base_damage {
        char *trace, *how;
    } *damaged;
    size_t ndamaged;
};

/* ---- check_baseline.c ----------------------------------------------------- */

extern const struct metric_info metric_info[NMETRICS]; /* by enum metric */

/* Load every trace the arguments name, keeping only their figures (growth
 * only when asked). 0, or -1 after an error line. */
int load_figures(int argc, char **argv, const struct gmt_common *c, bool growth,
                 struct figures **out, size_t *nout);
void figures_free(struct figures *f, size_t n);
/* Is f's trace one a gate must not judge as it is: not closed normally
 * (the process was killed or crashed), damaged or cut short (the reader
 * skipped parts, or the file is shorter than its writer left it),
 * incomplete (its recorder lost events or their stacks, and says so in
 * the header), or nothing read from it at all? True with a one-line
 * account in buf. */
bool figures_damaged(const struct figures *f, char *buf, size_t len);

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
