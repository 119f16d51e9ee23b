/* kinds_table.c - the bytes at the peak by kind, from the blocks the
 * replay kept (kinds.h has the rules). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kinds_table.h"

/* A library workspace: a frame whose function names a workspace
 * (PyTorch's cuBLAS and cuDNN workspaces, taken from its own allocator;
 * the functions that allocate nothing else),
 * or memory a CUDA library allocated itself - the innermost frame past the
 * runtime is in cuBLAS, cuDNN, cuFFT, cuSPARSE, cuSOLVER, cuRAND or NCCL
 * (cuBLAS's handle on a new thread, NCCL's buffers). */
static bool workspace_frame(const struct sym *f, int index)
{
    static const char *const libs[] = {"libcublas", "libcudnn", "libcufft", "libcusparse",
                                       "libcusolver", "libcurand", "libnccl", NULL};
    /* PyTorch's cuBLAS handle for a new thread or stream takes the
     * handle's workspace; cuDNN's convolution plans, theirs */
    static const char *const fns[] = {"Workspace", "workspace", "getCurrentCUDABlasHandle",
                                      "getCurrentCUDABlasLtHandle", "run_conv_plan",
                                      "try_plans", "try_configs", NULL};
    const char *fn = f->function;
    for (int i = 0; fn && fns[i]; i++)
        if (strstr(fn, fns[i]))
            return true;
    for (int i = 0; index == 0 && f->module && libs[i]; i++)
        if (strncmp(f->module, libs[i], strlen(libs[i])) == 0)
            return true;
    return false;
}

enum gmt_mem_kind gmt_kind_of(struct loaded *l, const struct kept *k)
{
    bool backward = k->call != 0 || (k->flags & KEPT_ENGINE);
    if (sym_native_any(l->sym, k->stack, workspace_frame))
        return GMT_KIND_WORKSPACE;
    if (k->flags & KEPT_PARAMS)
        return GMT_KIND_PARAMS;
    if (k->step)
        return k->freed && k->free_step == k->step ? GMT_KIND_TEMPS : GMT_KIND_OPTIM;
    if (backward)
        return k->freed && k->call && k->free_call == k->call ? GMT_KIND_TEMPS : GMT_KIND_GRADS;
    if (k->freed && k->free_call)
        return GMT_KIND_ACTS;
    if (k->freed && k->ended <= k->begun)
        return GMT_KIND_TEMPS;
    /* never given back, and no backward call began after it was made: the
     * run ended (a crash, an out-of-memory in the forward pass) before
     * anything showed what it was - not memory held across steps */
    if (!k->freed && gmt_kinds_calls_begun(l->r.kinds) == k->begun)
        return GMT_KIND_OTHER;
    return GMT_KIND_HELD; /* never given back, or kept across a whole backward call */
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
                                "a workspace function on the native stack, or a CUDA "
                                "library's own allocation (stack)", "stack"},
        [GMT_KIND_HELD] = {"other, held across steps", "held",
                           "never given back, or kept across a whole backward call, "
                           "no rule above (lifetime)", "lifetime"},
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
        enum gmt_mem_kind kind = gmt_kind_of(l, k);
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

struct loaded *gmt_kinds_at(struct loaded *l, const struct gmt_common *c, uint64_t seq,
                            struct kind_row rows[GMT_KIND_COUNT])
{
    if (!(l->r.hdr.features & GMT_FEAT_PYTHON_STACKS) || seq == 0)
        return NULL;
    struct loaded *k = gmt_load(l->path, c, &(struct replay_opts){.kinds_seq = seq,
                                                                  .observe = {GMT_KINDS_OBSERVER}});
    if (k && !gmt_kinds(k, rows)) {
        gmt_unload(k);
        k = NULL;
    }
    return k;
}

void gmt_kinds_json(FILE *f, const struct kind_row rows[GMT_KIND_COUNT], bool html)
{
    fputc('[', f);
    for (int i = 0; i < GMT_KIND_COUNT; i++) {
        fprintf(f, "%s{\"kind\":\"%s\",\"bytes\":%" PRId64 ",\"blocks\":%" PRIu64
                   ",\"name\":", i ? "," : "", rows[i].key, rows[i].bytes, rows[i].blocks);
        gmt_json_str_to(f, rows[i].name, html);
        fputs(",\"basis\":", f);
        gmt_json_str_to(f, rows[i].basis, html);
        fputs(",\"layers\":[", f);
        for (int j = 0; j < rows[i].nlayers; j++) {
            fprintf(f, "%s{\"layer\":", j ? "," : "");
            gmt_json_str_to(f, rows[i].layers[j].layer, html);
            fprintf(f, ",\"bytes\":%" PRId64 ",\"blocks\":%" PRIu64 "}",
                    rows[i].layers[j].bytes, rows[i].layers[j].blocks);
        }
        fputs("]}", f);
    }
    fputc(']', f);
}
