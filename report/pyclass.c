/* pyclass.c - what a stack's Python frames say, found once per stack id
 * (pyclass.h). */
#include <stdlib.h>
#include <string.h>

#include "pyclass.h"

struct pyclass {
    uint32_t id;
    uint8_t flags;
    UT_hash_handle hh;
};

uint8_t gmt_pyclass(struct pyclass **cache, const struct gmt_defs *d, uint32_t id,
                    uint8_t (*of_frame)(const char *name, const char *file))
{
    struct pyclass *c;
    HASH_FIND(hh, *cache, &id, sizeof id, c);
    if (c)
        return c->flags;
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
    if ((c = calloc(1, sizeof *c)) != NULL) {
        c->id = id;
        c->flags = f;
        HASH_ADD(hh, *cache, id, sizeof c->id, c);
    }
    return f;
}

void gmt_pyclass_free(struct pyclass *cache)
{
    struct pyclass *c, *t;
    HASH_ITER(hh, cache, c, t) {
        HASH_DEL(cache, c);
        free(c);
    }
}

bool gmt_library_file(const char *file)
{
    return file == NULL || strstr(file, "/site-packages/") ||
           strstr(file, "/dist-packages/") || !strncmp(file, "<frozen ", 8) ||
           (strstr(file, "/lib/python3") && !strstr(file, "-packages/"));
}
