/*
 * sim_registry.c - the allocation registry of the simulated CUDA runtime
 * (tests/sim, see README.md).
 *
 * Every tracked allocation (device, managed, pinned host, registered host,
 * array backing store) is a node of an AVL tree keyed by its base address.
 * Tracked ranges never overlap, so "which allocation contains address p"
 * is the node with the greatest base <= p, checked against its end: an
 * O(log n) query used by pointer attributes, IPC handles, copy validation
 * and the execution-time checks of queued operations.
 *
 * All functions require sim_g.lock to be held.
 */
#include "sim_internal.h"

#include <stdlib.h>

static int sim_h(const struct sim_alloc *n)
{
    return n ? n->height : 0;
}

static void sim_fix_height(struct sim_alloc *n)
{
    int l = sim_h(n->left), r = sim_h(n->right);
    n->height = 1 + (l > r ? l : r);
}

static struct sim_alloc *sim_rot_right(struct sim_alloc *y)
{
    struct sim_alloc *x = y->left;
    y->left = x->right;
    x->right = y;
    sim_fix_height(y);
    sim_fix_height(x);
    return x;
}

static struct sim_alloc *sim_rot_left(struct sim_alloc *x)
{
    struct sim_alloc *y = x->right;
    x->right = y->left;
    y->left = x;
    sim_fix_height(x);
    sim_fix_height(y);
    return y;
}

static struct sim_alloc *sim_rebalance(struct sim_alloc *n)
{
    sim_fix_height(n);
    int bf = sim_h(n->left) - sim_h(n->right);
    if (bf > 1) {
        if (sim_h(n->left->left) < sim_h(n->left->right))
            n->left = sim_rot_left(n->left);
        return sim_rot_right(n);
    }
    if (bf < -1) {
        if (sim_h(n->right->right) < sim_h(n->right->left))
            n->right = sim_rot_right(n->right);
        return sim_rot_left(n);
    }
    return n;
}

static struct sim_alloc *sim_insert_at(struct sim_alloc *root, struct sim_alloc *a)
{
    if (!root) {
        a->left = a->right = NULL;
        a->height = 1;
        return a;
    }
    if (a->base < root->base)
        root->left = sim_insert_at(root->left, a);
    else
        root->right = sim_insert_at(root->right, a);
    return sim_rebalance(root);
}

static struct sim_alloc *sim_remove_min(struct sim_alloc *n, struct sim_alloc **min)
{
    if (!n->left) {
        *min = n;
        return n->right;
    }
    n->left = sim_remove_min(n->left, min);
    return sim_rebalance(n);
}

static struct sim_alloc *sim_remove_at(struct sim_alloc *root, struct sim_alloc *a)
{
    if (!root)
        return NULL;
    if (a->base < root->base) {
        root->left = sim_remove_at(root->left, a);
    } else if (a->base > root->base) {
        root->right = sim_remove_at(root->right, a);
    } else {
        struct sim_alloc *l = root->left, *r = root->right, *m;
        root->left = root->right = NULL;
        if (!r)
            return l;
        r = sim_remove_min(r, &m);
        m->left = l;
        m->right = r;
        return sim_rebalance(m);
    }
    return sim_rebalance(root);
}

void sim_reg_insert(struct sim_alloc *a)
{
    sim_g.tree = sim_insert_at(sim_g.tree, a);
}

void sim_reg_remove(struct sim_alloc *a)
{
    sim_g.tree = sim_remove_at(sim_g.tree, a);
}

/* Node with the greatest base <= addr, or NULL. */
static struct sim_alloc *sim_floor(uintptr_t addr)
{
    struct sim_alloc *n = sim_g.tree, *best = NULL;
    while (n) {
        if (n->base <= addr) {
            best = n;
            n = n->right;
        } else {
            n = n->left;
        }
    }
    return best;
}

struct sim_alloc *sim_reg_find(const void *p)
{
    uintptr_t addr = (uintptr_t)p;
    struct sim_alloc *a = sim_floor(addr);
    return (a && addr - a->base < a->size) ? a : NULL;
}

struct sim_alloc *sim_reg_find_range(const void *p, size_t n)
{
    struct sim_alloc *a = sim_reg_find(p);
    if (!a)
        return NULL;
    size_t off = (uintptr_t)p - a->base;
    return n <= a->size - off ? a : NULL;
}

struct sim_alloc *sim_reg_overlap(const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    uintptr_t first = (uintptr_t)p, last = first + (n - 1);
    if (last < first)
        last = UINTPTR_MAX; /* clamp a range that wraps the address space */
    /* Ranges in the tree are disjoint, so only the range starting at or
     * before `last` with the greatest base can reach into [first, last]. */
    struct sim_alloc *a = sim_floor(last);
    return (a && a->base + (a->size - 1) >= first) ? a : NULL;
}

static void sim_collect_at(struct sim_alloc *n, struct sim_alloc **v, size_t *i)
{
    if (!n)
        return;
    sim_collect_at(n->left, v, i);
    v[(*i)++] = n;
    sim_collect_at(n->right, v, i);
}

static size_t sim_count_at(const struct sim_alloc *n)
{
    return n ? 1 + sim_count_at(n->left) + sim_count_at(n->right) : 0;
}

size_t sim_reg_collect(struct sim_alloc ***out)
{
    size_t n = sim_count_at(sim_g.tree), i = 0;
    *out = NULL;
    if (n == 0)
        return 0;
    *out = malloc(n * sizeof **out);
    if (!*out)
        return 0;
    sim_collect_at(sim_g.tree, *out, &i);
    return n;
}
