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

#define EX_INLINE 16 /* source frames per recorded frame (inlining) */

static bool runtime_frame(const struct sym *f)
{
    const char *fn = f->function;
    return !strncmp(f->module, "libcudart", 9) || !strncmp(f->module, "libgpumemtrace", 14) ||
           !strncmp(f->module, "libcuda.so", 10) ||
           (fn && (!strncmp(fn, "libcudart_static_", 17) ||
                   (!strncmp(fn, "cuda", 4) && fn[4] >= 'A' && fn[4] <= 'Z')));
}

static bool interpreter_frame(const struct sym *f)
{
    return !strncmp(f->module, "libpython", 9) || !strncmp(f->module, "python", 6) ||
           !strncmp(f->module, "_ctypes", 7) || !strncmp(f->module, "libffi", 6);
}

int export_frames(struct loaded *l, uint32_t stack, struct sym *out, struct gmt_frame *raw,
                  int max)
{
    const struct gmt_defs *d = &l->r.defs;
    uint32_t caller = 0;
    if (!gmt_bw_pair(l->r.bw, stack, &stack, &caller))
        caller = 0;
    struct gmt_stack_def *def = malloc(sizeof *def); /* 8 KiB: not on the stack */
    if (def == NULL || stack == 0 || !gmt_defs_stack(d, stack, def)) {
        free(def);
        return 0;
    }
    int n = 0;
    bool leading = true;
    uint32_t last = UINT32_MAX;
    for (uint32_t i = 0; i < def->n && n < max; i++) {
        struct sym tmp[EX_INLINE];
        int k = sym_frames(l->sym, &def->frames[i], tmp, EX_INLINE);
        if (def->npy && interpreter_frame(&tmp[0]))
            break;
        for (int j = 0; j < k && n < max; j++) {
            if (leading && runtime_frame(&tmp[j]))
                continue;
            leading = false;
            if (raw) /* a function inlined at the frame just given: -2 */
                raw[n] = n && last == i ? (struct gmt_frame){0, -2} : def->frames[i];
            last = i;
            out[n++] = tmp[j];
        }
    }
    /* the Python frames: the stack's own, or the backward call's from the
     * call outwards */
    uint32_t from = 0;
    if (caller) {
        if (!gmt_defs_stack(d, caller, def))
            def->npy = 0;
        for (uint32_t i = 0; i < def->npy; i++) {
            const struct gmt_pycode_def *pc = gmt_defs_pycode(d, def->py[i].code);
            if (pc && gmt_bw_call_frame(pc->name, pc->file)) {
                from = i;
                break;
            }
        }
    }
    for (uint32_t i = from; i < def->npy && n < max; i++) {
        const struct gmt_pycode_def *pc = gmt_defs_pycode(d, def->py[i].code);
        struct sym f = {.module = "python", .python = true};
        if (pc) {
            f.function = pc->name;
            f.file = pc->file;
            f.line = gmt_pycode_line(pc, def->py[i].offset);
        } else {
            f.function = "?";
        }
        if (raw)
            raw[n] = (struct gmt_frame){0, -1};
        out[n++] = f;
    }
    free(def);
    return n;
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
    switch (api & ~GMT_API_PTDS) {
    case GMT_API_MALLOC_HOST:
    case GMT_API_HOST_ALLOC:
    case GMT_API_CU_MEM_ALLOC_HOST:
    case GMT_API_CU_MEM_HOST_ALLOC:
    case GMT_API_CU_MEM_CREATE_HOST:
        return true;
    default:
        return false;
    }
}

bool export_pooled(const struct replay *r, unsigned api)
{
    api &= ~GMT_API_PTDS;
    return (r->pool && api == GMT_API_MALLOC) || api == GMT_API_FW_ALLOC;
}

uint64_t export_rel_ns(const struct replay *r, uint64_t t)
{
    return t > r->hdr.start_monotonic_ns ? t - r->hdr.start_monotonic_ns : 0;
}
