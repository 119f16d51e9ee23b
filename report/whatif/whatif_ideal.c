/* whatif_ideal.c - the ideal allocator: it reserves exactly what the
 * program requests, so its peak reserved is the peak requested, the
 * lower bound every real policy is measured against. It makes no device
 * calls and never waits; it runs out of memory only when the live
 * requests themselves (with what the device holds outside) exceed the
 * card. An id is the request's size: freeing gives back exactly that. */
#include <stdlib.h>

#include "whatif.h"

struct ideal {
    struct wi_stats st;
    uint64_t limit;
    const uint64_t *outside;
};

static void *ideal_init(const struct wi_opts *o)
{
    struct ideal *m = wi_model_state(sizeof *m);
    if (m) {
        m->limit = o->limit;
        m->outside = o->outside;
    }
    return m;
}

static int ideal_alloc(void *p, uint64_t size, uint64_t stream, uint64_t *id)
{
    (void)stream;
    struct ideal *m = p;
    uint64_t out = m->outside ? *m->outside : 0;
    if (m->limit && (out > m->limit || size > m->limit - out ||
                     m->st.reserved > m->limit - out - size))
        return -1;
    m->st.reserved += size;
    m->st.allocated += size;
    if (m->st.reserved > m->st.peak_reserved)
        m->st.peak_reserved = m->st.reserved;
    *id = size;
    return 0;
}

static void ideal_free(void *p, uint64_t id)
{
    struct ideal *m = p;
    m->st.reserved -= id <= m->st.reserved ? id : m->st.reserved;
    m->st.allocated = m->st.reserved;
}

static void ideal_stats(void *p, struct wi_stats *s)
{
    *s = ((struct ideal *)p)->st;
}

const struct wi_model_ops wi_ideal = {
    .name = "ideal",
    .init = ideal_init,
    .alloc = ideal_alloc,
    .free = ideal_free,
    .stats = ideal_stats,
    .fini = free,
};
