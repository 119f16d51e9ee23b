/* pyclass.c - what a stack's Python frames say, found once per stack id
 * (pyclass.h). */
#include <stdlib.h>
#include <string.h>

#include "pyclass.h"

/* The answers by stack id: a byte each, 0 until found (every answer has
 * PYCLASS_KNOWN). A table, not a hash: it is asked at every allocation.
 * Ids past PYCLASS_MAX_ID (a damaged trace's) are answered, not kept. */
#define PYCLASS_MAX_ID (1u << 24)
struct pyclass {
    uint8_t *flags;
    size_t cap;
};

static void keep(struct pyclass **cache, uint32_t id, uint8_t f)
{
    if (id >= PYCLASS_MAX_ID)
        return;
    if (*cache == NULL && (*cache = calloc(1, sizeof **cache)) == NULL)
        return;
    struct pyclass *c = *cache;
    if (id >= c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap <= id)
            cap *= 2;
        uint8_t *n = realloc(c->flags, cap);
        if (n == NULL)
            return;
        memset(n + c->cap, 0, cap - c->cap);
        c->flags = n;
        c->cap = cap;
    }
    c->flags[id] = f;
}

uint8_t gmt_pyclass(struct pyclass **cache, const struct gmt_defs *d, uint32_t id,
                    uint8_t (*of_frame)(const char *name, const char *file))
{
    const struct pyclass *c = *cache;
    if (c && id < c->cap && c->flags[id])
        return c->flags[id];
    uint8_t f = PYCLASS_KNOWN;
    struct gmt_stack_def def;
    if (id && gmt_defs_stack(d, id, &def)) {
        if (def.npy)
            f |= PYCLASS_PYTHON;
        for (uint32_t i = 0; i < def.npy; i++) {
            const struct gmt_pycode_def *pc = gmt_defs_pycode(d, def.py[i].code);
            if (pc && pc->name && pc->file)
                f |= of_frame(pc->name, pc->file) & 0x3fu;
        }
    }
    keep(cache, id, f);
    return f;
}

void gmt_pyclass_free(struct pyclass *cache)
{
    if (cache)
        free(cache->flags);
    free(cache);
}

bool gmt_library_file(const char *file)
{
    return file == NULL || strstr(file, "/site-packages/") ||
           strstr(file, "/dist-packages/") || !strncmp(file, "<frozen ", 8) ||
           (strstr(file, "/lib/python3") && !strstr(file, "-packages/"));
}
