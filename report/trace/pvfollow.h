/* pvfollow.h - the pool's pictures at the peak and at out-of-memory
 * events, taken as the trace is read.
 *
 * `frag` and `html` show the pool (poolview.h) at the peak of requested
 * memory and at each out-of-memory event. A picture is of the moment
 * after its event: it is taken before the first record past the event's
 * sequence number reaches the poolview.
 *
 * Unplanned, a follower rides along the replay that loads the trace (call
 * pvf_event from an observer's event hook): it takes a picture at each
 * out-of-memory event as it happens, and at the peak each time the peak
 * is raised - retaken while that work stays bounded per record read.
 * Where it could not keep them (the picture at the final peak was not
 * retaken, or records came out of order, as in a damaged trace, where
 * "past the event" needs the moment known ahead), pvf_complete says so,
 * and the caller reads the trace again with the moments planned from the
 * loaded replay (pvf_plan): the same follower, fed by that second read.
 *
 * Memory: the poolview's live blocks and segments, and the pictures.
 */
#ifndef GMT_PVFOLLOW_H
#define GMT_PVFOLLOW_H

#include "poolview.h"
#include "replay.h"

#define PVF_MAX_SHOTS 33 /* pictures at out-of-memory events kept at most */

struct pvf_shot {
    long oom;        /* index into the replay's ooms; -1: the peak */
    uint64_t seq;    /* taken before the first record past it */
    int64_t device;  /* -1: every device (the peak) */
    bool due, taken;
    bool ok;         /* st holds the picture (false: out of host memory) */
    struct pv_state st;
    void *data[2];   /* the caller's, set by its taken() and let go by its drop() */
};

struct pv_follow;
/* Called when a picture was just taken, with the poolview at its moment:
 * what the caller keeps beside it (html's maps of segments). */
typedef void (*pvf_taken_fn)(void *ctx, const struct poolview *v, struct pvf_shot *s);
/* Called before a taken picture is let go (an old peak's, or any at
 * pvf_free): what taken() kept. */
typedef void (*pvf_drop_fn)(void *ctx, struct pvf_shot *s);

struct pv_follow {
    struct poolview pv;
    bool planned;     /* the moments were known ahead */
    bool out_of_order;
    uint64_t last_seq;
    uint64_t work;    /* blocks and segments copied into pictures of the peak */
    struct pvf_shot peak;
    bool peak_seen, peak_stale;
    struct pvf_shot ooms[PVF_MAX_SHOTS];
    size_t nooms, max_ooms, ooms_seen, next_oom;
    pvf_taken_fn taken;
    pvf_drop_fn drop;
    void *ctx;
};

/* Follow the replay at all? GPUMEMREPORT_FOLLOW=0: no, read the trace a
 * second time with the moments planned (the output is the same; the
 * switch is there to show that it is). */
bool pvf_wanted(void);
/* Can a pass follow replay r, the run's length known ahead? A trace
 * closed normally says it in its header (*dur, ns); a trace cut short
 * does not. false too when pvf_wanted() says no. */
bool pvf_ahead(const struct replay *r, uint64_t *dur);
/* Unplanned: up to max_ooms (<= PVF_MAX_SHOTS) pictures at out-of-memory
 * events; taken and drop may be NULL. */
void pvf_init(struct pv_follow *f, size_t max_ooms, pvf_taken_fn taken, pvf_drop_fn drop,
              void *ctx);
/* Planned from the loaded replay r: the peak (when r has one) and, when a
 * pool was on (ours or the framework's), its first out-of-memory events,
 * up to max_ooms. */
void pvf_plan(struct pv_follow *f, const struct replay *r, size_t max_ooms);
/* One record, in the trace's order. r: the replay, just after it applied
 * rec (unplanned); NULL when planned. */
void pvf_event(struct pv_follow *f, const struct replay *r, const struct gmt_rec *rec);
/* The trace's end: the pictures still due are taken. */
void pvf_end(struct pv_follow *f);
/* Unplanned: were all the pictures kept? (Planned: always.) */
bool pvf_complete(const struct pv_follow *f);
void pvf_free(struct pv_follow *f);

#endif /* GMT_PVFOLLOW_H */
