/* export_common.c - what the export writers share (export.h): a stack's
 * user frames as structured frames, live allocations by address, the
 * replay's rules for which allocations are host memory and which lie in
 * segments.
 *
 * The frames are those the flamegraph shows (sym_folded): the recorded
 * stack without its leading frames in the CUDA runtime or the tracer, cut
 * at the interpreter when Python frames describe what ran there, then the
 * Python frames - here as frames with function, file and line each, which
 * the other formats keep apart. A block autograd's engine made while a
 * backward call waited takes the call's Python frames, as it does in the
 * other reports.
 */
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "backward.h"
#include "export.h"

int export_frames(struct loaded *l, uint32_t stack, struct sym *out, struct gmt_frame *raw,
                  int max)
{
    int npy;
    return stack ? sym_user_frames(l->sym, stack, out, raw, max, &npy) : 0;
}

const char *export_frame_name(const struct sym *f, char *buf, size_t len)
{
    if (f->function)
        return f->function;
    snprintf(buf, len, "%s+0x%llx", f->module ? f->module : "?", f->offset);
    return buf;
}

/* ---- live allocations ------------------------------------------------------ */

ADDRMAP_FUNCS(exmap, struct ex_table, struct ex_live, 1024)

struct ex_live *ex_find(struct ex_table *t, uint64_t addr)
{
    return exmap_find(t, addr);
}

struct ex_live *ex_put(struct ex_table *t, uint64_t addr)
{
    struct ex_live *e = exmap_find(t, addr);
    if (e) {
        *e = (struct ex_live){.addr = addr};
        return e;
    }
    if ((e = exmap_insert(t, addr)) == NULL && addr)
        t->nomem = true;
    return e;
}

void ex_del(struct ex_table *t, struct ex_live *e)
{
    exmap_remove(t, e);
}

void ex_free(struct ex_table *t)
{
    exmap_release(t);
    *t = (struct ex_table){0};
}

bool export_host_api(unsigned api)
{
    return replay_mem_of(api) == MEM_HOST;
}

bool export_pooled(const struct replay *r, unsigned api)
{
    return replay_pooled(r, api);
}

uint64_t export_rel_ns(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? t - r->hdr.start_monotonic_ns : 0;
}
