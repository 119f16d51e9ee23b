/* oomexplain.h - what an out-of-memory event ran into (oomexplain.c).
 *
 * `summary` explains each of the first few out-of-memory events of a
 * trace: the failed request's site, labelled as every command labels
 * sites; what was live at that instant by site and by kind; allocated,
 * reserved and free memory on the device, and the largest free block
 * inside the reserved memory where the trace's pool picture knows it;
 * and, for the same requests up to that instant, whether whatif's
 * allocator models (PyTorch's with and without expandable segments, our
 * pool, the driver's stream-ordered pool, the ideal) would have served
 * the failed one. One more pass over the trace per event explained.
 */
#ifndef GMT_OOMEXPLAIN_H
#define GMT_OOMEXPLAIN_H

#include "common.h"
#include "kinds_table.h"
#include "whatif/whatif.h"

#define OOMX_FULL 3 /* events explained in full; the others are counted */

struct oomx {
    const struct oom *oom;  /* the event (the trace's replay) */
    const char *site;       /* the failed request's label */
    uint64_t at_ns;         /* from the trace's start */
    int64_t live;           /* live requested bytes then, every device's */
    int64_t requested, allocated, reserved; /* on the event's device then */
    uint64_t total;         /* the device's memory; 0: unknown */
    int64_t beyond;         /* beyond the trace on the device, up to then */
    bool beyond_known;
    int64_t free;           /* total - reserved - beyond, at least 0 (total known) */
    bool free_reported_known;
    uint64_t free_reported; /* the device's free memory recorded at the failure */
    bool largest_known;
    uint64_t largest_free;  /* the largest free block in the reserved memory */
    struct group_row *sites; /* live then, by site (gmt_group's rows) */
    size_t nsites;
    bool has_kinds;
    struct kind_row kinds[GMT_KIND_COUNT];
    uint64_t limit;         /* the models' device memory: total - beyond; 0: unknown */
    struct wi_try whatif[WI_MAX_POLICIES];
    int nwhatif;            /* 0: the failed request is none of the models' */
    struct loaded *at;      /* the pass's replay: the rows' labels are its */
    struct wi_feed *feed;
};

/* Explain l->r.ooms[i] into *x. false: the pass failed (an error line
 * printed); *x is then empty. Free with oomx_free. */
bool oomx_explain(struct loaded *l, const struct gmt_common *c, size_t i, struct oomx *x);
void oomx_free(struct oomx *x);

#endif /* GMT_OOMEXPLAIN_H */
