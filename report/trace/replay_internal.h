/* replay_internal.h - what the replay's files share (replay.h is the
 * interface): replay.c applies the allocation records and runs the loop,
 * replay_series.c keeps the time series and the per-site mark values,
 * replay_device.c applies the other records. Functions named as in the
 * file that defines them, grouped under it.
 */
#ifndef GMT_REPLAY_INTERNAL_H
#define GMT_REPLAY_INTERNAL_H

#include "replay.h"

/* ---- replay.c ------------------------------------------------------------ */

/* The site of stack id, made on first use; NULL: out of memory. */
struct site *replay_site_of(struct replay *r, uint32_t id);
/* Its rarely used figures, made on first use; NULL: out of memory. */
struct site_rare *replay_site_rare(struct site *s);

/* ---- replay_series.c ------------------------------------------------------ */

struct bucket *replay_bucket_find(struct replay *r, uint64_t t);

/* The timeline bucket of time t. Events come in time order: usually the
 * same bucket as the last one, found here without a call. */
static inline struct bucket *replay_bucket_at(struct replay *r, uint64_t t)
{
    if (t >= r->cur_lo && t < r->cur_hi && r->cur_bucket)
        return r->cur_bucket;
    return replay_bucket_find(r, t);
}

/* The levels after an event at time t, into its bucket's maxima. */
static inline void replay_note_series(struct replay *r, uint64_t t)
{
    struct bucket *b = replay_bucket_at(r, t);
    b->used = true;
    if ((uint64_t)r->requested > b->requested)
        b->requested = (uint64_t)r->requested;
    if ((uint64_t)r->reserved > b->reserved)
        b->reserved = (uint64_t)r->reserved;
    if ((uint64_t)r->host > b->host)
        b->host = (uint64_t)r->host;
}

/* Growth series (replay_opts.growth): the buckets up to time t, or up to
 * growth bucket b, get every site's live bytes now; a step begins at t
 * (replay_opts.step_anchor); the number of step buckets in use. */
void replay_growth_advance(struct replay *r, uint64_t t);
void replay_growth_fill_to(struct replay *r, int b);
void replay_step_begins(struct replay *r, uint64_t t);
int replay_step_buckets(const struct replay *r);

/* Per-site values at the followed marks, lazily: an occurrence only counts
 * itself. A site about to change checks each followed mark: if it occurred
 * since the site's last change, the site's live bytes until now are its
 * value at that occurrence (and at the first one, if that is the one). So
 * a mark costs O(1) however many sites there are, a change O(slots). A
 * site's values are made at its first change after a mark: until then
 * they are its live bytes (replay_site_mark), and a run without marks
 * holds none. */
void replay_marks_update(const struct replay *r, struct site *s);
static inline void replay_marks_before_change(const struct replay *r, struct site *s)
{
    if (r->nmarks > 0 && r->want_marks)
        replay_marks_update(r, s);
}
/* A MARKER record: counts, the followed names (its observers see it after). */
void replay_on_marker(struct replay *r, const struct gmt_rec *rec);

/* ---- replay_device.c ------------------------------------------------------ */

void replay_on_copy(struct replay *r, const struct gmt_rec *rec);
void replay_on_memset(struct replay *r, const struct gmt_rec *rec);
void replay_on_sample(struct replay *r, const struct gmt_rec *rec);
void replay_on_proc_mem(struct replay *r, const struct gmt_rec *rec);
void replay_on_vmm(struct replay *r, const struct gmt_rec *rec);
void replay_on_mempool(struct replay *r, const struct gmt_rec *rec);

#endif /* GMT_REPLAY_INTERNAL_H */
