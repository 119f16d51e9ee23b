/* modules.c - the module map that lets stacks be symbolized offline.
 *
 * Stacks are recorded as raw instruction addresses; the report tool turns
 * them into function/file:line later, possibly on another machine. For
 * that the trace holds one MODULE record per loaded object: path, load
 * base, address span and GNU build-id. The map is written when tracing
 * starts and brought up to date whenever a new stack holds an address no
 * known module covers (a library dlopen'ed since), so it costs nothing on
 * the hot path: known stacks never get here. glibc's dlpi_adds/dlpi_subs
 * counters tell whether anything was loaded or unloaded since the last
 * scan, so addresses outside every module (JIT code) don't rescan.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct module {
    uintptr_t lo, hi, base;
    uint32_t id;
    bool seen;
    char *path;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *g_mods;
static size_t g_nmods, g_cap;
static uint32_t g_next_id;
static unsigned long long g_adds = ~0ull, g_subs = ~0ull;
static uintptr_t g_self_lo, g_self_hi;
static uintptr_t g_bridge_lo, g_bridge_hi; /* the framework bridge (fw.c) */

/* A module found by the scan, not yet in the trace. */
struct found {
    uintptr_t lo, hi, base;
    char *path;
    uint8_t build_id[64];
    size_t build_id_len;
};

struct scan {
    struct found *items;
    size_t n, cap;
    bool failed;
};

static void span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
    *lo = UINTPTR_MAX;
    *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < *lo)
            *lo = a;
        if (a + ph->p_memsz > *hi)
            *hi = a + ph->p_memsz;
    }
}

static size_t build_id(const struct dl_phdr_info *info, uint8_t *out,
                       size_t cap)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t name = (nh->n_namesz + 3) & ~3u;
            size_t desc = (nh->n_descsz + 3) & ~3u;
            const uint8_t *d = p + sizeof *nh + name;
            if (d + desc > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                memcmp(p + sizeof *nh, "GNU", 4) == 0) {
                size_t n = nh->n_descsz < cap ? nh->n_descsz : cap;
                memcpy(out, d, n);
                return n;
            }
            p = d + desc;
        }
    }
    return 0;
}

static bool known(uintptr_t base, uintptr_t lo, const char *path)
{
    for (size_t i = 0; i < g_nmods; i++) {
        struct module *m = &g_mods[i];
        if (m->base == base && m->lo == lo && strcmp(m->path, path) == 0) {
            m->seen = true;
            return true;
        }
    }
    return false;
}

static char *object_path(const struct dl_phdr_info *info)
{
    if (info->dlpi_name && info->dlpi_name[0])
        return strdup(info->dlpi_name);
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return strdup("[main]");
    buf[n] = '\0';
    return strdup(buf);
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct scan *s = data;
    uintptr_t lo, hi;
    span(info, &lo, &hi);
    if (lo >= hi)
        return 0;
    char *path = object_path(info);
    if (path == NULL) {
        s->failed = true;
        return 0;
    }
    if (known(info->dlpi_addr, lo, path)) {
        free(path);
        return 0;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        struct found *p = realloc(s->items, cap * sizeof *p);
        if (p == NULL) {
            free(path);
            s->failed = true;
            return 0;
        }
        s->items = p;
        s->cap = cap;
    }
    struct found *f = &s->items[s->n++];
    f->lo = lo;
    f->hi = hi;
    f->base = info->dlpi_addr;
    f->path = path;
    f->build_id_len = build_id(info, f->build_id, sizeof f->build_id);
    return 0;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *c = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1;
}

static int cmp_mod(const void *a, const void *b)
{
    const struct module *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void emit_module(struct gmt_thread *t, const struct module *m,
                        const struct found *f)
{
    uint8_t buf[4 * GMT_VARINT_MAX + 2 * GMT_VARINT_MAX + 64 + 4096];
    size_t plen = strlen(f->path);
    size_t room = gmt_trace_ext_max() - 6 * GMT_VARINT_MAX - f->build_id_len;
    if (plen > 4096)
        plen = 4096;
    if (plen > room)
        plen = room;
    uint8_t *p = gmt_put_varint(buf, m->id);
    p = gmt_put_varint(p, f->base);
    p = gmt_put_varint(p, f->lo);
    p = gmt_put_varint(p, f->hi);
    p = gmt_put_varint(p, f->build_id_len);
    memcpy(p, f->build_id, f->build_id_len);
    p += f->build_id_len;
    p = gmt_put_varint(p, plen);
    memcpy(p, f->path, plen);
    p += plen;
    gmt_trace_emit_ext(t, GMT_X_MODULE, buf, (size_t)(p - buf));
}

void gmt_modules_scan(struct gmt_thread *t)
{
    pthread_mutex_lock(&g_lock);
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(counters_cb, c);
    if (c[0] == g_adds && c[1] == g_subs) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    g_adds = c[0];
    g_subs = c[1];
    for (size_t i = 0; i < g_nmods; i++)
        g_mods[i].seen = false;
    struct scan s = {0};
    dl_iterate_phdr(scan_cb, &s);
    if (s.failed)
        gmt_error_once(GMT_ERR_MODULES, "out of memory while reading the "
                       "module map; some frames will not symbolize");
    /* Drop unloaded objects: their range may be reused by a new one. */
    size_t keep = 0;
    for (size_t i = 0; i < g_nmods; i++) {
        if (g_mods[i].seen)
            g_mods[keep++] = g_mods[i];
        else
            free(g_mods[i].path);
    }
    g_nmods = keep;
    if (g_nmods + s.n > g_cap) {
        size_t cap = (g_nmods + s.n) * 2;
        struct module *m = realloc(g_mods, cap * sizeof *m);
        if (m == NULL) {
            gmt_error_once(GMT_ERR_MODULES, "out of memory for the module map");
            s.n = 0;
        } else {
            g_mods = m;
            g_cap = cap;
        }
    }
    for (size_t i = 0; i < s.n; i++) {
        struct module *m = &g_mods[g_nmods++];
        *m = (struct module){s.items[i].lo, s.items[i].hi, s.items[i].base,
                             ++g_next_id, true, s.items[i].path};
        emit_module(t, m, &s.items[i]);
    }
    free(s.items);
    qsort(g_mods, g_nmods, sizeof *g_mods, cmp_mod);
    pthread_mutex_unlock(&g_lock);
}

bool gmt_modules_covers(uintptr_t ip)
{
    pthread_mutex_lock(&g_lock);
    size_t lo = 0, hi = g_nmods;
    bool found = false;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ip < g_mods[mid].lo)
            hi = mid;
        else if (ip >= g_mods[mid].hi)
            lo = mid + 1;
        else {
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

bool gmt_modules_self(uintptr_t ip)
{
    if (ip >= g_self_lo && ip < g_self_hi)
        return true;
    /* hi first (published last): a lo read before it could be stale */
    uintptr_t hi = __atomic_load_n(&g_bridge_hi, __ATOMIC_ACQUIRE);
    return hi != 0 && ip < hi &&
           ip >= __atomic_load_n(&g_bridge_lo, __ATOMIC_RELAXED);
}

struct span_of {
    uintptr_t at, lo, hi;
};

static int span_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct span_of *q = data;
    uintptr_t lo, hi;
    span(info, &lo, &hi);
    if (q->at >= lo && q->at < hi) {
        q->lo = lo;
        q->hi = hi;
        return 1;
    }
    return 0;
}

bool gmt_module_span(const void *addr, uintptr_t *lo, uintptr_t *hi)
{
    struct span_of q = {(uintptr_t)addr, 0, 0};
    dl_iterate_phdr(span_cb, &q);
    *lo = q.lo;
    *hi = q.hi;
    return q.hi != 0;
}

void gmt_modules_add_bridge(const void *addr)
{
    uintptr_t lo, hi;
    if (gmt_module_span(addr, &lo, &hi)) {
        __atomic_store_n(&g_bridge_lo, lo, __ATOMIC_RELAXED);
        __atomic_store_n(&g_bridge_hi, hi, __ATOMIC_RELEASE);
    }
}

void gmt_modules_init(void)
{
    if (g_self_hi == 0)
        gmt_module_span((const void *)(uintptr_t)&gmt_modules_init, &g_self_lo,
                        &g_self_hi);
}

void gmt_modules_lock(void)
{
    pthread_mutex_lock(&g_lock);
}

void gmt_modules_unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

void gmt_modules_reset_after_fork(void)
{
    pthread_mutex_init(&g_lock, NULL);
    for (size_t i = 0; i < g_nmods; i++)
        free(g_mods[i].path);
    g_nmods = 0;
    g_next_id = 0;
    g_adds = g_subs = ~0ull;
}
