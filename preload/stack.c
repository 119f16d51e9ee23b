/* stack.c - native call stacks, captured with libunwind and deduplicated.
 *
 * A training loop allocates from the same few hundred call sites millions
 * of times, so a stack is written to the trace once (a STACK record) and
 * events carry its id. The dedup table is an insert-only hash table whose
 * buckets are lock-free lists: lookups are plain loads, an insert is one
 * compare-and-swap. A new stack's record is written before the entry is
 * published, so any event that finds the id comes after its definition in
 * the trace's total order. Two threads inserting the same new stack at
 * once may both write a definition; the loser's id is simply never used.
 */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BUCKET_BITS 16
#define NBUCKETS (1u << BUCKET_BITS)
#define SELF_SEARCH 24 /* our frames are among the innermost few */

/* A stack is n native return addresses, then npy Python frames as
 * (code id, instruction offset) pairs: one key, hashed and compared as
 * n + 2 * npy words. */
struct stack_entry {
    struct stack_entry *next;
    uint64_t hash;
    uint32_t id;
    uint32_t n, npy;
    uintptr_t ip[];
};

static struct stack_entry **g_buckets;
static uint32_t g_next_id;
static bool g_capped; /* GPUMEMTRACE_MAX_STACKS reached, said */

void gmt_stack_init(void)
{
    if (g_buckets == NULL)
        g_buckets = calloc(NBUCKETS, sizeof *g_buckets);
    if (g_buckets == NULL)
        gmt_error_once(GMT_ERR_STACKTAB, "no memory for the stack table; "
                       "stacks are not recorded");
    /* libunwind's default global cache takes a lock on every step; each
     * thread keeping its own keeps capture lock-free. */
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

void gmt_stack_reset_after_fork(void)
{
    /* The child's file has none of the parent's definitions: forget them
     * so they are written again. Only this thread exists now. */
    if (g_buckets == NULL)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        struct stack_entry *e = g_buckets[i];
        while (e) {
            struct stack_entry *next = e->next;
            free(e);
            e = next;
        }
        g_buckets[i] = NULL;
    }
    g_next_id = 0;
    g_capped = false;
}

static inline uint64_t hash_frames(const uintptr_t *ip, uint32_t n, uint32_t npy)
{
    uint64_t h = 0x243f6a8885a308d3ull ^ n ^ (uint64_t)npy << 32;
    for (uint32_t i = 0; i < n + 2 * npy; i++) {
        h ^= ip[i];
        h *= 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return h;
}

static struct stack_entry *find(struct stack_entry *e,
                                const struct stack_entry *stop, uint64_t hash,
                                const uintptr_t *ip, uint32_t n, uint32_t npy)
{
    for (; e != NULL && e != stop;
         e = __atomic_load_n(&e->next, __ATOMIC_ACQUIRE))
        if (e->hash == hash && e->n == n && e->npy == npy &&
            memcmp(e->ip, ip, (n + 2 * npy) * sizeof *ip) == 0)
            return e;
    return NULL;
}

static bool write_definition(struct gmt_thread *t, const struct stack_entry *e)
{
    uint8_t buf[3 * GMT_VARINT_MAX + GMT_MAX_STACK_DEPTH * GMT_VARINT_MAX +
                2 * GMT_MAX_PY_DEPTH * GMT_VARINT_MAX];
    uint8_t *p = gmt_put_varint(buf, e->id);
    p = gmt_put_varint(p, e->n);
    uintptr_t prev = 0;
    for (uint32_t i = 0; i < e->n; i++) {
        p = gmt_put_svarint(p, (int64_t)(e->ip[i] - prev));
        prev = e->ip[i];
    }
    /* Python frames are appended fields: a reader that predates them
     * ignores the trailing bytes. */
    if (e->npy) {
        p = gmt_put_varint(p, e->npy);
        for (uint32_t i = 0; i < e->npy; i++) {
            p = gmt_put_varint(p, e->ip[e->n + 2 * i]);
            p = gmt_put_svarint(p, (int64_t)e->ip[e->n + 2 * i + 1]);
        }
    }
    return gmt_trace_emit_ext(t, GMT_X_STACK, buf, (size_t)(p - buf));
}

static uint32_t insert(struct gmt_thread *t, uint64_t hash,
                       const uintptr_t *ip, uint32_t n, uint32_t npy,
                       struct stack_entry *head)
{
    /* The table only grows: a program that makes a new stack at every
     * call (generated code, unbounded recursion) would grow it, and the
     * trace, without end - a million stacks cost 236 MB. Past the cap new
     * stacks are recorded as none, said once, on stderr and in the
     * trace; stacks already known keep their ids. */
    if (__atomic_load_n(&g_next_id, __ATOMIC_RELAXED) >= (uint32_t)gmt_opt.max_stacks) {
        if (!__atomic_exchange_n(&g_capped, true, __ATOMIC_RELAXED)) {
            char text[200];
            snprintf(text, sizeof text, "%ld distinct stacks recorded "
                     "(GPUMEMTRACE_MAX_STACKS): later new ones are recorded "
                     "as no stack", gmt_opt.max_stacks);
            gmt_warn("%s", text);
            gmt_trace_note(t, 1, text);
        }
        return 0;
    }
    /* New code (a library dlopen'ed since the last scan) must be in the
     * module map before a stack refers to it. */
    for (uint32_t i = 0; i < n; i++) {
        if (!gmt_modules_covers(ip[i])) {
            gmt_modules_scan(t);
            break;
        }
    }
    size_t words = n + 2 * (size_t)npy;
    struct stack_entry *e = malloc(sizeof *e + words * sizeof *ip);
    if (e == NULL)
        return 0;
    e->hash = hash;
    e->n = n;
    e->npy = npy;
    e->id = __atomic_add_fetch(&g_next_id, 1, __ATOMIC_RELAXED);
    memcpy(e->ip, ip, words * sizeof *ip);
    if (!write_definition(t, e)) {
        free(e);
        return 0;
    }
    struct stack_entry **bucket = &g_buckets[hash & (NBUCKETS - 1)];
    for (;;) {
        e->next = head;
        if (__atomic_compare_exchange_n(bucket, &head, e, false,
                                        __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
            return e->id;
        /* Someone published first: did they publish this very stack? */
        struct stack_entry *dup = find(head, e->next, hash, ip, n, npy);
        if (dup != NULL) {
            free(e);
            return dup->id;
        }
    }
}

/* Unwind up to `want` frames into t->frames and find the user's part:
 * after our own frames (*first), at most depth frames, and under Python
 * (cut) ending where the interpreter's code begins. Returns the number of
 * user frames; *at: index in t->frames of the first interpreter frame,
 * 0 if none was reached. */
static int unwind(struct gmt_thread *t, int want, int depth, bool cut,
                  int *first, int *at)
{
    int n = unw_backtrace(t->frames, want);
    if (n < 0)
        n = 0;
    /* Cut everything up to our outermost frame (the hook the program
     * called): tracer and unwinder frames are not the user's stack. */
    int limit = n < SELF_SEARCH ? n : SELF_SEARCH;
    *first = 0;
    for (int i = 0; i < limit; i++)
        if (gmt_modules_self((uintptr_t)t->frames[i]))
            *first = i + 1;
    *at = 0;
    uintptr_t lo = gmt_py_interp_lo, hi = gmt_py_interp_hi;
    for (int i = *first; cut && i < n; i++) {
        uintptr_t ip = (uintptr_t)t->frames[i];
        if (ip >= lo && ip < hi) {
            *at = i;
            n = i;
            break;
        }
    }
    n -= *first;
    if (n > depth)
        n = depth;
    return n < 0 ? 0 : n;
}

uint32_t gmt_stack_capture(struct gmt_thread *t)
{
    int depth = (int)gmt_opt.stack_depth;
    if (g_buckets == NULL)
        return 0;
    int n = 0, first = 0;
    /* Python frames first, into the end of the scratch buffer: whether
     * the thread runs Python decides where the native stack ends. */
    int64_t *py = (int64_t *)(t->frames + GMT_MAX_STACK_DEPTH + 32);
    int npy = gmt_py_capture(t, py, (int)gmt_opt.python);
    if (depth > 0) {
        /* Under Python the native stack ends where the interpreter's own
         * frames begin (the Python frames say more, and one native key
         * per op dedups better), so unwind only a little past where this
         * thread last met the interpreter; if that falls short, again in
         * full. */
        int full = depth + SELF_SEARCH, want = full, at;
        bool cut = npy > 0;
        if (cut && t->interp_at > 0 && t->interp_at + 8 < full)
            want = t->interp_at + 8;
        n = unwind(t, want, depth, cut, &first, &at);
        if (cut && at == 0 && want < full && first + n >= want)
            n = unwind(t, full, depth, cut, &first, &at);
        if (cut)
            t->interp_at = at;
    }
    /* The Python frames go right after the native ones: one key. */
    if (npy > 0)
        memmove(t->frames + first + n, py, (size_t)npy * 2 * sizeof(int64_t));
    if (n + npy == 0)
        return 0;
    const uintptr_t *ip = (const uintptr_t *)(t->frames + first);
    uint64_t hash = hash_frames(ip, (uint32_t)n, (uint32_t)npy);
    struct stack_entry *head =
        __atomic_load_n(&g_buckets[hash & (NBUCKETS - 1)], __ATOMIC_ACQUIRE);
    struct stack_entry *e = find(head, NULL, hash, ip, (uint32_t)n, (uint32_t)npy);
    if (GMT_LIKELY(e != NULL))
        return e->id;
    return insert(t, hash, ip, (uint32_t)n, (uint32_t)npy, head);
}

/* At exit, on request: name every return address of the recorded stacks
 * with dladdr, which knows the exported (dynamic) symbols of each loaded
 * object. Functions a binary does not export stay unnamed; the report
 * tool then shows module+offset for them, as without this. */
void gmt_stack_embed_symbols(struct gmt_thread *t)
{
    if (g_buckets == NULL)
        return;
    size_t cap = 4096, n = 0;
    uintptr_t *seen = calloc(cap, sizeof *seen); /* open addressing set */
    if (seen == NULL)
        return;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        for (struct stack_entry *e = g_buckets[i]; e; e = e->next) {
            for (uint32_t k = 0; k < e->n; k++) { /* native frames only */
                uintptr_t ip = e->ip[k];
                if ((n + 1) * 2 > cap) {
                    size_t nc = cap * 2;
                    uintptr_t *ns = calloc(nc, sizeof *ns);
                    if (ns == NULL)
                        goto out;
                    for (size_t j = 0; j < cap; j++) {
                        if (!seen[j])
                            continue;
                        size_t h = (seen[j] * 0x9e3779b97f4a7c15ull >> 20) & (nc - 1);
                        while (ns[h])
                            h = (h + 1) & (nc - 1);
                        ns[h] = seen[j];
                    }
                    free(seen);
                    seen = ns;
                    cap = nc;
                }
                size_t h = (ip * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
                while (seen[h] && seen[h] != ip)
                    h = (h + 1) & (cap - 1);
                if (seen[h])
                    continue;
                seen[h] = ip;
                n++;
                Dl_info di;
                /* ip - 1: inside the call, as the reader looks it up */
                if (!dladdr((void *)(ip - 1), &di) || di.dli_sname == NULL)
                    continue;
                uint8_t buf[2 * GMT_VARINT_MAX + GMT_VARINT_MAX + 1024];
                size_t len = strnlen(di.dli_sname, 1024);
                uint8_t *p = gmt_put_varint(buf, ip);
                p = gmt_put_varint(p, (uintptr_t)di.dli_saddr);
                p = gmt_put_varint(p, len);
                memcpy(p, di.dli_sname, len);
                gmt_trace_emit_ext(t, GMT_X_SYMBOL, buf, (size_t)(p + len - buf));
            }
        }
    }
out:
    free(seen);
}
