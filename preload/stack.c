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
 *
 * An entry keeps two independent 64-bit hashes of the key, not the key:
 * 40 bytes a stack instead of 8 per frame (a million distinct stacks of
 * 25 frames took 400 MB of the program's memory, now about 60 MB), and a
 * lookup compares two words instead of the frames. Two different stacks
 * would share an id only if both hashes collided at once (about 2^-128
 * per pair). The frames themselves are in the trace (the definition).
 */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <pthread.h>
#include <libunwind.h>
#include <unwind.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

#define BUCKET_BITS 16
#define NBUCKETS (1u << BUCKET_BITS)
#define SELF_SEARCH 24 /* our frames are among the innermost few */
#define SELF_SLACK 4   /* past the frames of ours the thread last had */

/* A stack is n native return addresses, then npy Python frames as
 * (code id, instruction offset) pairs: one key, hashed and compared as
 * n + 2 * npy words. */
struct stack_entry {
    struct stack_entry *next;
    uint64_t hash, hash2; /* hash_frames with two seeds */
    uint32_t id;
    uint16_t n, npy;      /* at most GMT_MAX_STACK_DEPTH, GMT_MAX_PY_DEPTH */
};

static struct stack_entry **g_buckets;
static uint32_t g_next_id;
static bool g_capped; /* GPUMEMTRACE_MAX_STACKS reached, said */

/* The unwind cache's second walk, from libgcc_s itself (libunwind exports
 * the same names, built on its slow cursor, and would otherwise be the one
 * bound). NULL: no cache. */
static _Unwind_Reason_Code (*g_gcc_backtrace)(_Unwind_Trace_Fn, void *);
static _Unwind_Ptr (*g_gcc_ip)(struct _Unwind_Context *, int *);
static _Unwind_Word (*g_gcc_cfa)(struct _Unwind_Context *);
static _Unwind_Word (*g_gcc_gr)(struct _Unwind_Context *, int);

/* With GPUMEMTRACE_EMBED_SYMBOLS: the distinct native return addresses of
 * the recorded stacks (the entries keep none), named at exit. An
 * open-addressing set, filled when a new stack is inserted (rare: never
 * on the hot path), under its own lock. */
static pthread_mutex_t g_ips_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t *g_ips;
static size_t g_ips_cap, g_ips_n;

static bool ips_put(uintptr_t *set, size_t cap, uintptr_t ip)
{
    size_t h = (ip * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
    while (set[h] && set[h] != ip)
        h = (h + 1) & (cap - 1);
    if (set[h])
        return false;
    set[h] = ip;
    return true;
}

static void remember_ips(const uintptr_t *ip, uint32_t n)
{
    pthread_mutex_lock(&g_ips_lock);
    for (uint32_t k = 0; k < n; k++) {
        if (ip[k] == 0)
            continue;
        if ((g_ips_n + 1) * 2 > g_ips_cap) {
            size_t nc = g_ips_cap ? g_ips_cap * 2 : 4096;
            uintptr_t *ns = calloc(nc, sizeof *ns);
            if (ns == NULL)
                break; /* fewer names at exit, nothing worse */
            for (size_t j = 0; j < g_ips_cap; j++)
                if (g_ips[j])
                    ips_put(ns, nc, g_ips[j]);
            free(g_ips);
            g_ips = ns;
            g_ips_cap = nc;
        }
        g_ips_n += ips_put(g_ips, g_ips_cap, ip[k]);
    }
    pthread_mutex_unlock(&g_ips_lock);
}

static void uc_init(void);
extern void *__libc_stack_end; /* the loader's: the first thread's stack end */

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
    if (gmt_opt.unwind_cache && gmt_opt.stack_depth > 0 && g_gcc_backtrace == NULL)
        uc_init();
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
    pthread_mutex_init(&g_ips_lock, NULL);
    free(g_ips);
    g_ips = NULL;
    g_ips_cap = g_ips_n = 0;
}

/* Two hashes of one key from one pass: different seeds and multipliers,
 * so they are independent for any practical purpose. */
static inline void hash_frames(const uintptr_t *ip, uint32_t n, uint32_t npy,
                               uint64_t *h1, uint64_t *h2)
{
    uint64_t h = 0x243f6a8885a308d3ull ^ n ^ (uint64_t)npy << 32;
    uint64_t g = 0x13198a2e03707344ull ^ ((uint64_t)n << 16) ^ npy;
    for (uint32_t i = 0; i < n + 2 * npy; i++) {
        h ^= ip[i];
        h *= 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
        g += ip[i];
        g *= 0xc2b2ae3d27d4eb4full;
        g ^= g >> 31;
    }
    *h1 = h;
    *h2 = g;
}

static struct stack_entry *find(struct stack_entry *e,
                                const struct stack_entry *stop, uint64_t hash,
                                uint64_t hash2, uint32_t n, uint32_t npy)
{
    for (; e != NULL && e != stop;
         e = __atomic_load_n(&e->next, __ATOMIC_ACQUIRE))
        if (e->hash == hash && e->hash2 == hash2 && e->n == n && e->npy == npy)
            return e;
    return NULL;
}

static bool write_definition(struct gmt_thread *t, uint32_t id, const uintptr_t *ip,
                             uint32_t n, uint32_t npy)
{
    uint8_t buf[3 * GMT_VARINT_MAX + GMT_MAX_STACK_DEPTH * GMT_VARINT_MAX +
                2 * GMT_MAX_PY_DEPTH * GMT_VARINT_MAX];
    uint8_t *p = gmt_put_varint(buf, id);
    p = gmt_put_varint(p, n);
    uintptr_t prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        p = gmt_put_svarint(p, (int64_t)(ip[i] - prev));
        prev = ip[i];
    }
    /* Python frames are appended fields: a reader that predates them
     * ignores the trailing bytes. */
    if (npy) {
        p = gmt_put_varint(p, npy);
        for (uint32_t i = 0; i < npy; i++) {
            p = gmt_put_varint(p, ip[n + 2 * i]);
            p = gmt_put_svarint(p, (int64_t)ip[n + 2 * i + 1]);
        }
    }
    return gmt_trace_emit_ext(t, GMT_X_STACK, buf, (size_t)(p - buf));
}

static uint32_t insert(struct gmt_thread *t, uint64_t hash, uint64_t hash2,
                       const uintptr_t *ip, uint32_t n, uint32_t npy,
                       struct stack_entry *head)
{
    /* The table only grows: a program that makes a new stack at every
     * call (generated code, unbounded recursion) would grow it, and the
     * trace, without end - a million stacks cost 236 MB. Past the cap new
     * stacks are recorded as none, said once, on stderr and in the
     * trace, and each event so recorded is counted in the file header
     * (the trace is incomplete); stacks already known keep their ids. */
    if (__atomic_load_n(&g_next_id, __ATOMIC_RELAXED) >= (uint32_t)gmt_opt.max_stacks) {
        if (!__atomic_exchange_n(&g_capped, true, __ATOMIC_RELAXED)) {
            char text[200];
            snprintf(text, sizeof text, "%ld distinct stacks recorded "
                     "(GPUMEMTRACE_MAX_STACKS): later new ones are recorded "
                     "as no stack", gmt_opt.max_stacks);
            gmt_warn("%s", text);
            gmt_trace_note(t, 1, text);
        }
        gmt_trace_lost(GMT_LOST_STACK, GMT_LOST_STACK_CAP);
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
    struct stack_entry *e = malloc(sizeof *e);
    if (e == NULL) {
        gmt_trace_lost(GMT_LOST_STACK, GMT_LOST_OTHER);
        return 0;
    }
    e->hash = hash;
    e->hash2 = hash2;
    e->n = (uint16_t)n;
    e->npy = (uint16_t)npy;
    e->id = __atomic_add_fetch(&g_next_id, 1, __ATOMIC_RELAXED);
    if (!write_definition(t, e->id, ip, n, npy)) {
        /* its definition was lost (counted by the writer, with why); the
         * event itself, unless the file stopped growing, is recorded
         * without it */
        if (!gmt_trace_full())
            gmt_trace_lost(GMT_LOST_STACK, 0);
        free(e);
        return 0;
    }
    if (gmt_opt.embed_symbols)
        remember_ips(ip, n);
    struct stack_entry **bucket = &g_buckets[hash & (NBUCKETS - 1)];
    for (;;) {
        e->next = head;
        if (__atomic_compare_exchange_n(bucket, &head, e, false,
                                        __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
            return e->id;
        /* Someone published first: did they publish this very stack? */
        struct stack_entry *dup = find(head, e->next, hash, hash2, n, npy);
        if (dup != NULL) {
            free(e);
            return dup->id;
        }
    }
}

/* ---- the unwind cache ---------------------------------------------------
 *
 * A training step allocates from the same few hundred call chains every
 * step, and off the interpreter (PyTorch's autograd thread) each chain is
 * 30-60 frames that libunwind walks at about 15 ns a frame. Each thread
 * keeps the chains it unwound, with where each return address lies on its
 * stack; a capture whose innermost frame of the program's (return address
 * and stack pointer, found by following our own frame pointers) matches a
 * kept chain, and whose stack still holds every return address of that
 * chain at its place, is that chain: only the loads are paid.
 *
 * Why the check is enough: frame i's return address lies at its stack
 * pointer - 8, written by the call that made frame i - 1. If a caller
 * changed since, the call that re-entered wrote its own return address
 * there - provided every frame of the chain has a fixed size. A frame
 * that realigns its stack or allocas can keep the frames inside it in
 * place while its own return address moves, and the old one stays where
 * nothing writes (one such slot is enough: a review reproduced it,
 * tests/progs/realign.c). Such frames keep a frame pointer: rbp is their
 * stack pointer at entry - 16, and the frame's end is rbp + 16. So for
 * every frame of a chain that keeps one, the chain also keeps the slots
 * below it that hold that rbp (where a frame inside it, or the hook's own
 * prologue, saved it: the frames inside are where they were, so that
 * place is among them), and a capture checks they still hold it: a frame
 * that moved saved another rbp there. (Frame-pointer code, as distributions
 * build Python now, is cached this way.) A frame whose rbp points into
 * itself otherwise, with a copy of its return address above it (gcc's
 * realignment through another register), is never kept; one that uses
 * rbp as a plain register has a fixed size. Nor is a chain kept with a
 * frame interrupted by a signal.
 *
 * Safety: every address read lies between the hook's frame and the top of
 * this thread's stack (checked when kept, and the hook's frame when
 * looked up), which is mapped while the thread runs. A thread on another
 * stack (coroutines) keeps nothing. A miss unwinds as without the cache,
 * and walks the stack again with libgcc's unwinder for the stack
 * pointers; the chain is kept only if the two walks and the frame-pointer
 * walk agree on every frame and where the program's frames begin. */
#define UC_BUCKETS 256
#define UC_MAX 1024 /* chains kept per thread */
#define UC_WARM 64  /* captures of a thread before it keeps any */

struct uent {
    struct uent *next;
    uintptr_t sp0;
    uint16_t n;   /* frames of the program's recorded */
    uint16_t m;   /* frames checked: n, or n + 1 with the interpreter's */
    uint16_t nb;  /* saved frame pointers checked */
    bool cut;
    /* m return addresses, their m stack pointers, then nb slots and the
     * frame pointers they hold */
    uintptr_t f[];
};

struct gmt_ucache {
    uintptr_t lo, hi; /* this thread's stack */
    uint32_t kept, seen;
    uint64_t hits, misses, full; /* full: unwound the usual way */
    struct uc_walk *walk; /* scratch of uc_keep */
    bool off;
    struct uent *b[UC_BUCKETS];
};

/* Cache counts of the threads that ended (GPUMEMTRACE_VERBOSE). */
static uint64_t g_uc_hits, g_uc_unwound;
static _Thread_local bool tls_hit; /* the cache served the last capture */

static inline unsigned uc_slot(uintptr_t ip, uintptr_t sp)
{
    return (unsigned)(((ip ^ (sp << 7)) * 0x9e3779b97f4a7c15ull) >> 56);
}

static struct gmt_ucache *uc_get(struct gmt_thread *t)
{
    if (GMT_LIKELY(t->uc != NULL))
        return t->uc->off ? NULL : t->uc;
    struct gmt_ucache *uc = calloc(1, sizeof *uc);
    if (uc == NULL)
        return NULL;
    pthread_attr_t attr;
    void *addr;
    size_t size;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    uintptr_t end = (uintptr_t)__libc_stack_end;
    struct rlimit rl;
    uintptr_t span = (uintptr_t)1 << 30; /* the most a stack is taken to be */
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < span)
        span = rl.rlim_cur;
    if (t->tid == getpid() && here < end && end - here < span) {
        /* The process's first thread: its stack ends where the loader
         * found it, and reaches at most the stack limit below. (Not
         * pthread_getattr_np: it reads /proc/self/maps for this thread,
         * which cost the first capture tens of ms with PyTorch's
         * libraries loaded.) */
        uc->lo = end - span;
        uc->hi = end;
    } else if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            uc->lo = (uintptr_t)addr;
            uc->hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&attr);
    }
    uc->off = uc->hi == 0 || g_gcc_backtrace == NULL;
    t->uc = uc;
    return uc->off ? NULL : uc;
}

void gmt_stack_thread_free(struct gmt_thread *t)
{
    struct gmt_ucache *uc = t->uc;
    if (uc == NULL)
        return;
    __atomic_fetch_add(&g_uc_hits, uc->hits, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_uc_unwound, uc->misses + uc->full, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < UC_BUCKETS; i++)
        for (struct uent *e = uc->b[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    free(uc->walk);
    free(uc);
    t->uc = NULL;
}

/* Where the program's frames begin: follow the frame pointers of our own
 * frames (the library is built with them) up to the first return address
 * outside it. *sp: the stack pointer of that frame (the hook's frame's
 * end). False if the chain leaves the thread's stack or runs long. */
static bool uc_boundary(const struct gmt_ucache *uc, uintptr_t *ip,
                        uintptr_t *sp)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    for (int i = 0; i < SELF_SEARCH; i++) {
        uintptr_t at = (uintptr_t)fp;
        if (at < uc->lo || at + 16 > uc->hi || (at & 7))
            return false;
        if (!gmt_modules_self(fp[1])) {
            *ip = fp[1];
            *sp = at + 16;
            return true;
        }
        const uintptr_t *up = (const uintptr_t *)fp[0];
        if ((uintptr_t)up <= at)
            return false; /* frames go up the stack */
        fp = up;
    }
    return false;
}

/* A kept chain that starts at (ip, sp) and that the stack still holds. */
static const struct uent *uc_find(const struct gmt_ucache *uc, uintptr_t ip,
                                  uintptr_t sp, bool cut)
{
    for (const struct uent *e = uc->b[uc_slot(ip, sp)]; e; e = e->next) {
        if (e->sp0 != sp || e->f[0] != ip || e->cut != cut)
            continue;
        const uintptr_t *ips = e->f, *sps = e->f + e->m;
        uint16_t i = 1;
        while (i < e->m && *(const uintptr_t *)(sps[i] - 8) == ips[i])
            i++;
        if (i < e->m)
            continue;
        const uintptr_t *at = e->f + 2 * e->m, *bp = at + e->nb;
        i = 0;
        while (i < e->nb && *(const uintptr_t *)at[i] == bp[i])
            i++;
        if (i == e->nb)
            return e;
    }
    return NULL;
}

/* libgcc's unwinder, for the stack pointers: a frame's _Unwind_GetCFA is
 * its stack pointer (the address just above the return address its callee
 * returns with). */
#define UC_WALK (GMT_MAX_STACK_DEPTH + SELF_SEARCH + 2)
#define UC_SAVED 64               /* saved frame pointers checked, a chain */
#define UC_SCAN ((uintptr_t)1 << 18) /* bytes searched for them */

static void uc_init(void)
{
    void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return;
    g_gcc_ip = (_Unwind_Ptr (*)(struct _Unwind_Context *, int *))dlsym(
        h, "_Unwind_GetIPInfo");
    g_gcc_cfa = (_Unwind_Word (*)(struct _Unwind_Context *))dlsym(h, "_Unwind_GetCFA");
    g_gcc_gr = (_Unwind_Word (*)(struct _Unwind_Context *, int))dlsym(h, "_Unwind_GetGR");
    if (g_gcc_ip && g_gcc_cfa && g_gcc_gr)
        g_gcc_backtrace = (_Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void *))dlsym(
            h, "_Unwind_Backtrace");
}

/* libgcc's walk, stopped as soon as it has the frames wanted: from
 * (ip0, sp0), among the innermost SELF_SEARCH, m frames. */
struct uc_walk {
    uintptr_t ip0, sp0;
    int n, j, m; /* j: index of (ip0, sp0), -1 until met */
    bool odd;    /* a frame interrupted by a signal */
    uintptr_t ip[UC_WALK], sp[UC_WALK], bp[UC_WALK]; /* bp: rbp there */
    uintptr_t at[UC_SAVED], bpv[UC_SAVED]; /* slots holding a frame pointer */
};

static _Unwind_Reason_Code uc_walk_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct uc_walk *w = arg;
    int before = 0;
    uintptr_t ip = (uintptr_t)g_gcc_ip(ctx, &before), sp = (uintptr_t)g_gcc_cfa(ctx);
    if (w->j < 0 && ip == w->ip0 && sp == w->sp0)
        w->j = w->n;
    if (before && w->j >= 0)
        w->odd = true;
    w->ip[w->n] = ip;
    w->sp[w->n] = sp;
    w->bp[w->n] = (uintptr_t)g_gcc_gr(ctx, 6); /* DWARF register 6: rbp */
    w->n++;
    if ((w->j >= 0 && w->n >= w->j + w->m) || (w->j < 0 && w->n >= SELF_SEARCH) ||
        w->n >= (int)UC_WALK)
        return _URC_END_OF_STACK; /* enough, or the boundary was not met */
    return _URC_NO_REASON;
}

/* A miss, unwound the usual way into t->frames (the program's n frames at
 * `first`, the interpreter's at `at` when it ended them): walk the stack
 * again with libgcc's unwinder for where each return address lies, and
 * keep the chain if the two walks agree frame for frame from (ip0, sp0)
 * on. libgcc's walk, not libunwind's cursor: the cursor makes two
 * signal-mask system calls a frame (libunwind 1.6; 43-118 us for 65
 * frames, libgcc about 20 us, on this machine). */
static bool uc_keep(struct gmt_thread *t, struct gmt_ucache *uc, uintptr_t ip0,
                    uintptr_t sp0, int first, int n, int at, bool cut)
{
    const uintptr_t *ips = (const uintptr_t *)t->frames + first;
    /* the frames checked: the recorded ones, and the interpreter's frame
     * that ended them when it did */
    int m = n + (at > 0 && at == first + n);
    if (m == 0 || ips[0] != ip0 || sp0 < uc->lo || sp0 > uc->hi)
        return false;
    if (uc->walk == NULL && (uc->walk = malloc(sizeof *uc->walk)) == NULL)
        return false;
    struct uc_walk *w = uc->walk;
    w->ip0 = ip0;
    w->sp0 = sp0;
    w->n = 0;
    w->j = -1;
    w->m = m;
    w->odd = false;
    g_gcc_backtrace(uc_walk_frame, w);
    int j = w->j;
    if (j < 0 || j + m > w->n || w->odd)
        return false;
    for (int i = 0; i < m; i++) {
        uintptr_t sp = w->sp[j + i];
        if (w->ip[j + i] != ips[i] || sp > uc->hi || (i > 0 && sp <= w->sp[j + i - 1]) ||
            *(const uintptr_t *)(sp - 8) != ips[i])
            return false; /* the walks disagree, or not a plain chain (a
                     * signal frame's address is not where a call put it) */
    }
    /* Frames that keep a frame pointer (rbp = their end - 16): the slots
     * below them that hold it, from the hook's saved rbp (sp0 - 16) up,
     * all checked when looked up (see the comment above). Frame i spans
     * [sp[i], sp[i + 1]). */
    int nb = 0;
    uintptr_t *slot = w->at, *bp = w->bpv;
    for (int i = 0; i + 1 < m; i++) {
        uintptr_t v = w->bp[j + i], lo = w->sp[j + i], end = w->sp[j + i + 1];
        if (v < lo || v >= end)
            continue; /* rbp elsewhere: a frame of a fixed size */
        if (v + 16 != end) {
            if (v + 16 > end || *(const uintptr_t *)(v + 8) == ips[i + 1])
                return false; /* realigned through another register */
            continue;         /* rbp a plain register pointing at a local */
        }
        if (lo - (sp0 - 16) > UC_SCAN)
            return false;
        int found = 0;
        for (uintptr_t a = sp0 - 16; a < lo; a += 8)
            if (*(const uintptr_t *)a == v) {
                if (nb == UC_SAVED || ++found > 4)
                    return false;
                slot[nb] = a;
                bp[nb++] = v;
            }
        if (found == 0)
            return false; /* saved nowhere we look: not kept */
    }
    struct uent *e = malloc(sizeof *e + 2 * (size_t)(m + nb) * sizeof(uintptr_t));
    if (e == NULL)
        return false;
    e->sp0 = sp0;
    e->n = (uint16_t)n;
    e->m = (uint16_t)m;
    e->nb = (uint16_t)nb;
    memcpy(e->f + 2 * m, slot, (size_t)nb * sizeof(uintptr_t));
    memcpy(e->f + 2 * m + nb, bp, (size_t)nb * sizeof(uintptr_t));
    e->cut = cut;
    memcpy(e->f, ips, (size_t)m * sizeof(uintptr_t));
    memcpy(e->f + m, w->sp + j, (size_t)m * sizeof(uintptr_t));
    unsigned b = uc_slot(ip0, sp0);
    e->next = uc->b[b];
    uc->b[b] = e;
    uc->kept++;
    return true;
}

/* The program's frames from the cache: their number in t->frames, or -1
 * (unwind the usual way; then *keep says whether to keep the chain that
 * starts at (*ip0, *sp0), with uc_keep). */
static int uc_capture(struct gmt_thread *t, bool cut, bool *keep,
                      uintptr_t *ip0, uintptr_t *sp0)
{
    struct gmt_ucache *uc = uc_get(t);
    *keep = false;
    if (uc == NULL)
        return -1;
    uc->full++; /* until served below */
    if (!uc_boundary(uc, ip0, sp0))
        return -1;
    const struct uent *e = uc_find(uc, *ip0, *sp0, cut);
    if (e != NULL) {
        tls_hit = true;
        uc->full--;
        uc->hits++;
        memcpy(t->frames, e->f, e->n * sizeof(uintptr_t));
        return e->n;
    }
    /* Keeping a chain costs a second walk of the stack (uc_keep), a few
     * hundred ns a frame. So a thread keeps chains only once it has made
     * UC_WARM captures (threads that allocate a few times never pay), and
     * a thread that keeps making new chains - more misses than hits past
     * 256 - stops trying. */
    if (uc->seen < UC_WARM) {
        uc->seen++;
        return -1;
    }
    if (uc->misses > 256 && uc->misses > uc->hits) {
        uc->off = true;
        return -1;
    }
    if (uc->kept >= UC_MAX)
        return -1;
    uc->full--;
    uc->misses++;
    *keep = true;
    return -1;
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

/* GPUMEMTRACE_VERBOSE: what capturing stacks cost, for the summary at
 * exit (two clock reads a capture, and shared counters: only then). Pairs
 * of count and ns: all captures, those of a stack seen before, those the
 * cache served; chains kept and the time spent trying. */
static struct {
    uint64_t n, ns, known_n, known_ns, hit_n, hit_ns, keep_n, keep_ns;
    uint64_t py_ns, frames, py_frames;
} g_cost;
static _Thread_local bool tls_new; /* the last capture made a new stack */

#define COST_ADD(field, v) __atomic_fetch_add(&g_cost.field, (uint64_t)(v), __ATOMIC_RELAXED)

static uint32_t capture(struct gmt_thread *t, uint64_t *py_ns, int *frames,
                        int *py_frames);

uint32_t gmt_stack_capture(struct gmt_thread *t)
{
    if (GMT_LIKELY(!gmt_opt.verbose))
        return capture(t, NULL, NULL, NULL);
    uint64_t t0 = gmt_now_ns(), py_ns = 0;
    int n = 0, npy = 0;
    tls_new = tls_hit = false;
    uint32_t id = capture(t, &py_ns, &n, &npy);
    uint64_t ns = gmt_now_ns() - t0;
    COST_ADD(n, 1);
    COST_ADD(ns, ns);
    if (!tls_new) {
        COST_ADD(known_n, 1);
        COST_ADD(known_ns, ns);
        if (tls_hit) {
            COST_ADD(hit_n, 1);
            COST_ADD(hit_ns, ns);
        }
    }
    COST_ADD(py_ns, py_ns);
    COST_ADD(frames, n);
    COST_ADD(py_frames, npy);
    return id;
}

bool gmt_stack_summary(struct gmt_thread *t, char *buf, size_t size)
{
    uint64_t n = __atomic_load_n(&g_cost.n, __ATOMIC_RELAXED);
    if (n == 0)
        return false;
#define AVG(num, den) ((den) ? (double)(num) / (double)(den) : 0.0)
    char how[200] = "unwind cache off";
    if (gmt_opt.unwind_cache) {
        uint64_t cached = __atomic_load_n(&g_uc_hits, __ATOMIC_RELAXED);
        uint64_t unwound = __atomic_load_n(&g_uc_unwound, __ATOMIC_RELAXED);
        if (t != NULL && t->uc != NULL) { /* the exiting thread's own */
            cached += t->uc->hits;
            unwound += t->uc->misses + t->uc->full;
        }
        snprintf(how, sizeof how, "%llu from the unwind cache (%.0f ns each), "
                 "%llu unwound, %llu chains kept (%.1f ms trying)",
                 (unsigned long long)cached, AVG(g_cost.hit_ns, g_cost.hit_n),
                 (unsigned long long)unwound, (unsigned long long)g_cost.keep_n,
                 g_cost.keep_ns / 1e6);
    }
    snprintf(buf, size, "stacks: %llu captured, %.0f ns each (%.0f ns of it "
             "reading Python frames; %.0f ns for the %llu of a stack seen "
             "before), %.1f native and %.1f Python frames each; native: %s",
             (unsigned long long)n, AVG(g_cost.ns, n), AVG(g_cost.py_ns, n),
             AVG(g_cost.known_ns, g_cost.known_n),
             (unsigned long long)g_cost.known_n, AVG(g_cost.frames, n),
             AVG(g_cost.py_frames, n), how);
#undef AVG
    return true;
}

static uint32_t capture(struct gmt_thread *t, uint64_t *py_ns, int *frames,
                        int *py_frames)
{
    int depth = (int)gmt_opt.stack_depth;
    if (g_buckets == NULL)
        return 0;
    int n = 0, first = 0;
    /* Python frames first, into the end of the scratch buffer: whether
     * the thread runs Python decides where the native stack ends. */
    int64_t *py = (int64_t *)(t->frames + GMT_MAX_STACK_DEPTH + 32);
    uint64_t p0 = py_ns ? gmt_now_ns() : 0;
    int npy = gmt_py_capture(t, py, (int)gmt_opt.python);
    if (py_ns) {
        *py_ns = gmt_now_ns() - p0;
        *py_frames = npy;
    }
    if (depth > 0) {
        /* Under Python the native stack ends where the interpreter's own
         * frames begin (the Python frames say more, and one native key
         * per op dedups better), so unwind only a little past where this
         * thread last met the interpreter. Elsewhere (PyTorch's autograd
         * thread) only `depth` frames past the frames of ours this thread
         * last had, not past all SELF_SEARCH: the frames between were
         * unwound and dropped (24 of 88 at the default depth). If either
         * falls short - the unwind filled what it asked for, and the
         * interpreter was not met or fewer than `depth` frames are the
         * program's - again in full. */
        int full = depth + SELF_SEARCH, want = full, at;
        bool cut = npy > 0;
        bool keep = false;
        uintptr_t ip0 = 0, sp0 = 0;
        if (gmt_opt.unwind_cache && (n = uc_capture(t, cut, &keep, &ip0, &sp0)) >= 0)
            goto have;
        n = 0;
        if (cut && t->interp_at > 0 && t->interp_at + 8 < full)
            want = t->interp_at + 8;
        else if (!cut && t->self_at > 0 && t->self_at + SELF_SLACK + depth < full)
            want = t->self_at + SELF_SLACK + depth;
        n = unwind(t, want, depth, cut, &first, &at);
        if (want < full && first + n >= want && (cut ? at == 0 : n < depth))
            n = unwind(t, full, depth, cut, &first, &at);
        if (cut)
            t->interp_at = at;
        t->self_at = first;
        if (keep) {
            uint64_t k0 = py_ns ? gmt_now_ns() : 0;
            bool kept = uc_keep(t, t->uc, ip0, sp0, first, n, at, cut);
            if (py_ns) {
                COST_ADD(keep_ns, gmt_now_ns() - k0);
                COST_ADD(keep_n, kept);
            }
        }
    }
have:
    if (frames)
        *frames = n;
    /* The Python frames go right after the native ones: one key. */
    if (npy > 0)
        memmove(t->frames + first + n, py, (size_t)npy * 2 * sizeof(int64_t));
    if (n + npy == 0)
        return 0;
    const uintptr_t *ip = (const uintptr_t *)(t->frames + first);
    uint64_t hash, hash2;
    hash_frames(ip, (uint32_t)n, (uint32_t)npy, &hash, &hash2);
    struct stack_entry *head =
        __atomic_load_n(&g_buckets[hash & (NBUCKETS - 1)], __ATOMIC_ACQUIRE);
    struct stack_entry *e = find(head, NULL, hash, hash2, (uint32_t)n, (uint32_t)npy);
    if (GMT_LIKELY(e != NULL))
        return e->id;
    if (py_ns)
        tls_new = true;
    return insert(t, hash, hash2, ip, (uint32_t)n, (uint32_t)npy, head);
}

/* At exit, on request: name every return address of the recorded stacks
 * with dladdr, which knows the exported (dynamic) symbols of each loaded
 * object. Functions a binary does not export stay unnamed; the report
 * tool then shows module+offset for them, as without this. */
void gmt_stack_embed_symbols(struct gmt_thread *t)
{
    pthread_mutex_lock(&g_ips_lock);
    for (size_t j = 0; j < g_ips_cap; j++) {
        uintptr_t ip = g_ips[j];
        Dl_info di;
        /* ip - 1: inside the call, as the reader looks it up */
        if (!ip || !dladdr((void *)(ip - 1), &di) || di.dli_sname == NULL)
            continue;
        uint8_t buf[2 * GMT_VARINT_MAX + GMT_VARINT_MAX + 1024];
        size_t len = strnlen(di.dli_sname, 1024);
        uint8_t *p = gmt_put_varint(buf, ip);
        p = gmt_put_varint(p, (uintptr_t)di.dli_saddr);
        p = gmt_put_varint(p, len);
        memcpy(p, di.dli_sname, len);
        gmt_trace_emit_ext(t, GMT_X_SYMBOL, buf, (size_t)(p + len - buf));
    }
    pthread_mutex_unlock(&g_ips_lock);
}
