/* rank.h - which process of a distributed job this is.
 *
 * Every launcher of distributed jobs tells each process its rank, each in
 * its own environment variable. The trace writer (`%r` in
 * GPUMEMTRACE_OUTPUT) and the gpumemtrace launcher (which picks a
 * rank-aware default name when one of these is set) must read the same
 * variables in the same order, so the rule lives here, header-only: the
 * library and the launcher link nothing in common.
 *
 * Order: the global rank first, from the launcher most likely to have set
 * it - torchrun/torch.distributed (RANK), Slurm (SLURM_PROCID), Open MPI
 * (OMPI_COMM_WORLD_RANK), MPICH/Intel MPI (PMI_RANK), PMIx (PMIX_RANK) -
 * and only then torchrun's per-node LOCAL_RANK, which repeats on every
 * node (the pid in the name keeps files apart there). A value that is not
 * a plain decimal number is skipped, so an odd variable can never put a
 * '/' or anything else into a file name.
 */
#ifndef GMT_RANK_H
#define GMT_RANK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define GMT_RANK_VARS                                                         \
    "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",  \
        "LOCAL_RANK"

static inline bool gmt_rank_valid(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (s[n] < '0' || s[n] > '9' || n >= 10)
            return false;
    return n > 0;
}

/* Copy the rank into buf (cap >= 11) and return the variable it came
 * from; with none set, buf holds "0" (a single process is rank 0) and the
 * result is NULL. */
static inline const char *gmt_rank(char *buf, size_t cap)
{
    static const char *const vars[] = {GMT_RANK_VARS};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && gmt_rank_valid(v) && strlen(v) < cap) {
            strcpy(buf, v);
            return vars[i];
        }
    }
    if (cap > 1)
        strcpy(buf, "0");
    return NULL;
}

#endif /* GMT_RANK_H */
