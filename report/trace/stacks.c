/* stacks.c - the stack table: frames in prefix trees (see stacks.h).
 *
 * Both tables are open addressing with linear probing over 32-bit
 * numbers, at most three quarters full, doubled when they would pass
 * that: 4 bytes a slot where a chained hash (uthash) costs a 56-byte
 * handle and an allocation per entry. Nothing is ever removed, so probing
 * needs no tombstones. A stack is added from its outermost frame in, one
 * lookup of (caller's node, frame) per frame, a node's slot chosen by the
 * hash of its whole path (tree_path says why).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stacks.h"

struct stack_node {  /* 16 bytes */
    uint64_t key;    /* ip; a Python frame's offset */
    uint32_t tag;    /* module index + 1 (0: none); a Python frame's code */
    uint32_t parent; /* the caller's node; 0: the root */
};

struct stack_entry { /* 16 bytes */
    uint32_t id;
    uint32_t leaf, pyleaf; /* innermost nodes; 0 (the root) when none */
    uint16_t n, npy;
};

#define MAX_INDEX (1u << 31)
#define MAX_PATH (GMT_MAX_STACK_DEPTH > GMT_MAX_PY_FRAMES ? GMT_MAX_STACK_DEPTH \
                                                          : GMT_MAX_PY_FRAMES)

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* A seed the trace cannot know: where the table lies (randomized with
 * the address space). Orders nothing that is shown: nodes and entries are
 * numbered in the order they came. */
static uint64_t seed_at(const void *p)
{
    return mix((uint64_t)(uintptr_t)p ^ 0x9e3779b97f4a7c15ull) | 1;
}

/* A node's hash is that of its whole path from the root, so the slots of
 * every frame of a stack are known before any is looked at: their cache
 * misses overlap instead of following one another (the tables are far
 * bigger than the caches with a million stacks). */
static uint32_t path_hash(uint32_t parent_hash, uint64_t key, uint32_t tag)
{
    return (uint32_t)mix(mix(key ^ parent_hash) + tag);
}

/* Room for `more` nodes: the root made, the index rebuilt bigger if it
 * would pass three quarters full. Slots hold node numbers; parents come
 * before their children, so hashes are rebuilt in node order. */
static bool tree_room(struct stack_tree *t, uint32_t more)
{
    uint64_t want = (uint64_t)t->n + more + 1; /* + the root */
    if (want > UINT32_MAX)
        return false;
    if (want > t->cap) {
        uint64_t cap = t->cap ? t->cap : 1024;
        while (cap < want)
            cap *= 2;
        if (cap > UINT32_MAX)
            cap = UINT32_MAX;
        struct stack_node *nn = realloc(t->node, (size_t)cap * sizeof *nn);
        if (nn == NULL)
            return false;
        t->node = nn;
        t->cap = (uint32_t)cap;
    }
    if (t->n == 0) {
        t->node[t->n++] = (struct stack_node){0, 0, 0};
        t->seed = (uint32_t)seed_at(t->node);
    }
    if (want * 4 <= (uint64_t)t->index_cap * 3)
        return true;
    uint64_t cap = t->index_cap ? t->index_cap : 1024;
    while (want * 4 > cap * 3)
        cap *= 2;
    uint32_t *ix = cap <= MAX_INDEX ? calloc((size_t)cap, sizeof *ix) : NULL;
    uint32_t *h = ix ? malloc((size_t)t->n * sizeof *h) : NULL;
    if (h == NULL) {
        free(ix);
        return false;
    }
    uint32_t mask = (uint32_t)cap - 1;
    h[0] = t->seed;
    for (uint32_t i = 1; i < t->n; i++) {
        const struct stack_node *nd = &t->node[i];
        h[i] = path_hash(h[nd->parent], nd->key, nd->tag);
        uint32_t j = h[i] & mask;
        while (ix[j])
            j = (j + 1) & mask;
        ix[j] = i;
    }
    free(h);
    free(t->index);
    t->index = ix;
    t->index_cap = (uint32_t)cap;
    return true;
}

/* The node of the path key[n-1], ..., key[0] (outermost first; tags
 * alike), its missing nodes added; 0 (the root) if n is 0, or if there is
 * no room. */
static uint32_t tree_path(struct stack_tree *t, uint32_t n, const uint64_t *key,
                          const uint32_t *tag)
{
    if (n == 0 || !tree_room(t, n))
        return 0;
    uint32_t h[MAX_PATH];
    uint32_t mask = t->index_cap - 1, ph = t->seed;
    for (uint32_t i = n; i-- > 0;) {
        h[i] = ph = path_hash(ph, key[i], tag[i]);
        __builtin_prefetch(&t->index[h[i] & mask]);
    }
    uint32_t parent = 0;
    for (uint32_t i = n; i-- > 0;) {
        uint32_t j = h[i] & mask, v;
        while ((v = t->index[j]) != 0) {
            const struct stack_node *nd = &t->node[v];
            if (nd->parent == parent && nd->key == key[i] && nd->tag == tag[i])
                break;
            j = (j + 1) & mask;
        }
        if (v == 0) {
            v = t->n++;
            t->node[v] = (struct stack_node){key[i], tag[i], parent};
            t->index[j] = v;
        }
        parent = v;
    }
    return parent;
}

static void tree_free(struct stack_tree *t)
{
    free(t->node);
    free(t->index);
}

/* The slot for id: holding its entry number + 1, or empty. */
static uint32_t *entry_slot(const struct stack_table *t, uint32_t id)
{
    uint32_t mask = t->index_cap - 1;
    uint32_t j = (uint32_t)mix(id ^ t->seed) & mask;
    for (;; j = (j + 1) & mask) {
        uint32_t v = t->index[j];
        if (v == 0 || t->entry[v - 1].id == id)
            return &t->index[j];
    }
}

static const struct stack_entry *entry_of(const struct stack_table *t, uint32_t id)
{
    if (t->n == 0)
        return NULL;
    uint32_t v = *entry_slot(t, id);
    return v ? &t->entry[v - 1] : NULL;
}

bool stacks_has(const struct stack_table *t, uint32_t id)
{
    return entry_of(t, id) != NULL;
}

static bool entry_room(struct stack_table *t)
{
    if ((uint64_t)(t->n + 1) * 4 > (uint64_t)t->index_cap * 3) {
        if (t->index_cap >= MAX_INDEX)
            return false;
        uint32_t cap = t->index_cap ? 2 * t->index_cap : 1024;
        uint32_t *ix = calloc(cap, sizeof *ix);
        if (ix == NULL)
            return false;
        if (t->seed == 0)
            t->seed = seed_at(ix);
        free(t->index);
        t->index = ix;
        t->index_cap = cap;
        for (uint32_t i = 0; i < t->n; i++)
            *entry_slot(t, t->entry[i].id) = i + 1;
    }
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 1024; /* n < 2^31: the index */
        struct stack_entry *ne = realloc(t->entry, (size_t)cap * sizeof *ne);
        if (ne == NULL)
            return false;
        t->entry = ne;
        t->cap = cap;
    }
    return true;
}

int stacks_add(struct stack_table *t, uint32_t id, const struct gmt_frame *f,
               uint32_t n, const struct gmt_pyframe *py, uint32_t npy)
{
    if (n > GMT_MAX_STACK_DEPTH || npy > GMT_MAX_PY_FRAMES || !entry_room(t))
        return -1;
    uint32_t *slot = entry_slot(t, id);
    if (*slot)
        return 1;
    uint64_t key[MAX_PATH];
    uint32_t tag[MAX_PATH];
    struct stack_entry e = {id, 0, 0, (uint16_t)n, (uint16_t)npy};
    for (uint32_t i = 0; i < n; i++) {
        key[i] = f[i].ip;
        tag[i] = (uint32_t)(f[i].module + 1);
    }
    if (n && (e.leaf = tree_path(&t->native, n, key, tag)) == 0)
        return -1;
    for (uint32_t i = 0; i < npy; i++) {
        key[i] = (uint64_t)py[i].offset;
        tag[i] = py[i].code;
    }
    if (npy && (e.pyleaf = tree_path(&t->python, npy, key, tag)) == 0)
        return -1;
    t->entry[t->n] = e;
    *slot = ++t->n;
    return 0;
}

static void copy_out(const struct stack_table *t, const struct stack_entry *e,
                     struct gmt_stack_def *out)
{
    out->id = e->id;
    out->n = e->n;
    out->npy = e->npy;
    /* a leaf at depth n: n steps up reach the root */
    uint32_t v = e->leaf;
    for (uint32_t i = 0; i < e->n; i++) {
        const struct stack_node *nd = &t->native.node[v];
        out->frames[i] = (struct gmt_frame){nd->key, (int32_t)nd->tag - 1};
        v = nd->parent;
    }
    v = e->pyleaf;
    for (uint32_t i = 0; i < e->npy; i++) {
        const struct stack_node *nd = &t->python.node[v];
        out->py[i] = (struct gmt_pyframe){nd->tag, (int64_t)nd->key};
        v = nd->parent;
    }
}

bool stacks_get(const struct stack_table *t, uint32_t id, struct gmt_stack_def *out)
{
    const struct stack_entry *e = entry_of(t, id);
    if (e == NULL)
        return false;
    copy_out(t, e, out);
    return true;
}

void stacks_at(const struct stack_table *t, uint32_t i, struct gmt_stack_def *out)
{
    copy_out(t, &t->entry[i], out);
}

void stacks_free(struct stack_table *t)
{
    tree_free(&t->native);
    tree_free(&t->python);
    free(t->entry);
    free(t->index);
    memset(t, 0, sizeof *t);
}
