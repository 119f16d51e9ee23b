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
 *
 * The host name (`%h`) follows the same rule for the same reason: it is
 * whatever an administrator or a container runtime set, so it is made one
 * plain file-name component before it reaches a path (gmt_host_component).
 *
 * The trace header records the rank with the rest of what the launcher
 * said (gmt_dist_read): the rank on the host, the job's size and the
 * host's share of it, from the same launchers' variables.
 */
#ifndef GMT_RANK_H
#define GMT_RANK_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gmt_format.h"

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

/* The host name as one file-name component, in buf (cap >= 2): a '/' in
 * it, or a name of dots only, would make %h a directory step ("../../x"
 * wrote two levels up), and a control byte has no place in a file name;
 * each such byte becomes '_'. "host" when the name cannot be read. */
static inline void gmt_host_component(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0 || buf[0] == '\0')
        snprintf(buf, cap, "host");
    buf[cap - 1] = '\0';
    bool dots = true;
    for (char *p = buf; *p; p++) {
        if (*p == '/' || (unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '_';
        dots = dots && *p == '.';
    }
    for (char *p = buf; dots && *p; p++)
        *p = '_';
}

/* The first of vars (NULL-terminated) that holds a plain number. */
static inline bool gmt_dist_var(const char *const *vars, uint32_t *out)
{
    for (; *vars; vars++) {
        const char *v = getenv(*vars);
        if (v && gmt_rank_valid(v)) {
            unsigned long long n = strtoull(v, NULL, 10);
            if (n <= UINT32_MAX) {
                *out = (uint32_t)n;
                return true;
            }
        }
    }
    return false;
}

/* Fill the header's distributed-job fields from the environment; returns
 * the GMT_DIST_* bits found. The global rank follows gmt_rank (so a
 * LOCAL_RANK alone is the rank, as in the file name). */
static inline uint32_t gmt_dist_read(uint32_t *rank, uint32_t *local_rank,
                                     uint32_t *world, uint32_t *local_world)
{
    static const char *const rk[] = {GMT_RANK_VARS, NULL};
    static const char *const lr[] = {"LOCAL_RANK", "SLURM_LOCALID",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "MPI_LOCALRANKID", "PMI_LOCAL_RANK", NULL};
    static const char *const ws[] = {"WORLD_SIZE", "SLURM_NTASKS",
                                     "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                     "PMIX_SIZE", NULL};
    static const char *const lw[] = {"LOCAL_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", NULL};
    uint32_t f = 0;
    if (gmt_dist_var(rk, rank))
        f |= GMT_DIST_RANK;
    if (gmt_dist_var(lr, local_rank))
        f |= GMT_DIST_LOCAL_RANK;
    if (gmt_dist_var(ws, world))
        f |= GMT_DIST_WORLD_SIZE;
    if (gmt_dist_var(lw, local_world))
        f |= GMT_DIST_LOCAL_WORLD_SIZE;
    return f;
}

#endif /* GMT_RANK_H */
