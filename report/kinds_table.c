/* kinds_table.c - the bytes at the peak by kind, from the blocks the
 * replay kept (kinds.h has the rules). */
#include <string.h>

#include "common.h"
#include "kinds.h"

static bool workspace_fn(const char *fn)
{
    return fn && (strstr(fn, "Workspace") || strstr(fn, "workspace"));
}

bool gmt_kinds(struct loaded *l, struct kind_row rows[GMT_KIND_COUNT])
{
    static const struct kind_row names[GMT_KIND_COUNT] = {
        [GMT_KIND_PARAMS] = {"parameters and buffers", "parameters",
                             "made under torch.nn's Module.to/cuda/_apply, load_state_dict "
                             "or a torch.nn module's construction (stack)", "stack"},
        [GMT_KIND_GRADS] = {"gradients", "gradients",
                            "made in a backward call, kept past it (thread, lifetime)", "thread, lifetime"},
        [GMT_KIND_OPTIM] = {"optimizer state", "optimizer_state",
                            "made in a torch.optim step, kept past it (stack, lifetime)", "stack, lifetime"},
        [GMT_KIND_ACTS] = {"activations saved for backward", "activations",
                           "made outside backward, given back during a backward call "
                           "(lifetime)", "lifetime"},
        [GMT_KIND_TEMPS] = {"temporaries", "temporaries",
                            "given back within the call or step that made them, or "
                            "outside backward (lifetime)", "lifetime"},
        [GMT_KIND_WORKSPACE] = {"library workspaces", "workspaces",
                                "a workspace function on the native stack (stack)", "stack"},
        [GMT_KIND_HELD] = {"other, held to the end", "held",
                           "never given back, no rule above (lifetime)", "lifetime"},
        [GMT_KIND_OTHER] = {"other", "other", "no rule above", "-"},
    };
    memcpy(rows, names, sizeof names);
    const struct kept *kept;
    size_t n = gmt_kinds_kept(l->r.kinds, &kept);
    if (kept == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        const struct kept *k = &kept[i];
        enum gmt_mem_kind kind;
        bool backward = k->call != 0 || (k->flags & KEPT_ENGINE);
        if (sym_native_any(l->sym, k->stack, workspace_fn))
            kind = GMT_KIND_WORKSPACE;
        else if (k->flags & KEPT_PARAMS)
            kind = GMT_KIND_PARAMS;
        else if (k->step)
            kind = k->freed && k->free_step == k->step ? GMT_KIND_TEMPS : GMT_KIND_OPTIM;
        else if (backward)
            kind = k->freed && k->call && k->free_call == k->call ? GMT_KIND_TEMPS
                                                                  : GMT_KIND_GRADS;
        else if (k->freed && k->free_call)
            kind = GMT_KIND_ACTS;
        else if (k->freed)
            kind = GMT_KIND_TEMPS;
        else
            kind = GMT_KIND_HELD;
        rows[kind].bytes += (int64_t)k->size;
        rows[kind].blocks++;
    }
    return true;
}
