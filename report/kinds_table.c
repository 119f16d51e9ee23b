/* kinds_table.c - the bytes at the peak by kind, from the blocks the
 * replay kept (kinds.h has the rules). */
#include <stdlib.h>
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
    struct layer_sum {
        const char *layer;
        int64_t bytes;
        uint64_t blocks;
        UT_hash_handle hh;
    } *by_layer[GMT_KIND_COUNT] = {0};
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
        const char *layer = sym_layer(l->sym, k->stack);
        if (layer == NULL)
            continue;
        struct layer_sum *e;
        HASH_FIND_STR(by_layer[kind], layer, e);
        if (e == NULL) {
            if ((e = calloc(1, sizeof *e)) == NULL)
                continue;
            e->layer = layer;
            HASH_ADD_KEYPTR(hh, by_layer[kind], e->layer, strlen(e->layer), e);
        }
        e->bytes += (int64_t)k->size;
        e->blocks++;
    }
    /* each kind's top layers */
    for (int kind = 0; kind < GMT_KIND_COUNT; kind++) {
        struct layer_sum *e, *t;
        HASH_ITER(hh, by_layer[kind], e, t) {
            struct kind_row *row = &rows[kind];
            int at = row->nlayers < KIND_LAYERS ? row->nlayers++ : KIND_LAYERS;
            /* insertion into the sorted top list (bytes, then name) */
            while (at > 0 && (row->layers[at - 1].bytes < e->bytes ||
                              (row->layers[at - 1].bytes == e->bytes &&
                               strcmp(row->layers[at - 1].layer, e->layer) > 0))) {
                if (at < KIND_LAYERS)
                    row->layers[at] = row->layers[at - 1];
                at--;
            }
            if (at < KIND_LAYERS)
                row->layers[at] = (struct kind_layer){e->layer, e->bytes, e->blocks};
            HASH_DEL(by_layer[kind], e);
            free(e);
        }
    }
    return true;
}
