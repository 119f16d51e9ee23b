/* api.c - the public API (gpumemtrace.h): phase markers, and NVTX.
 *
 * A marker is one MARKER record (mark, push or pop) in the calling
 * thread's chunk, naming a string by id. Only the name travels to the
 * trace; the report rebuilds the phases and what memory did in them.
 *
 * Names are interned like stacks (stack.c): an insert-only hash table of
 * lock-free lists. Finding a known name is a hash and a few plain loads;
 * a new one is written to the trace as a STRING record, and only then
 * published with one compare-and-swap, so every marker that finds its id
 * comes after the definition in the trace's order. Two threads meeting
 * the same new name at once may both write a definition; the loser's id
 * is never used. The table holds at most MAX_STRINGS names: a program
 * that makes a fresh name every time (NVTX ranges named after a counter)
 * then gets one definition per use, so memory stays bounded and names
 * stay right. String ids are one namespace per trace file: anything else
 * that writes STRING records takes its ids from gmt_string_id().
 *
 * Lazy start. A marker before the first CUDA call starts tracing, as that
 * call would: a phase that opens before the program allocates anything
 * (`push("setup")`, then the model is built) is then recorded whole.
 * With tracing disabled, a marker costs an atomic load.
 *
 * NVTX. InitializeInjectionNvtx2 is what an NVTX v3 instance (one per
 * library built with the header-only nvtx3 headers; NVTX v2's
 * libnvToolsExt.so too) calls when NVTX_INJECTION64_PATH names this
 * library: we fill its callback slots so that marks become marks and
 * push/pop ranges become regions. Start/end ranges (which may end on
 * another thread) are left to NVTX's no-ops.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#define NVTX_NO_IMPL /* the types only: we are the tool, not a user */
#include <nvtx3/nvToolsExt.h>

#include "gpumemtrace.h"
#include "internal.h"

#define GMT_EXPORT __attribute__((visibility("default")))

#define BUCKET_BITS 12
#define NBUCKETS (1u << BUCKET_BITS)
#define MAX_STRINGS 65536u

struct string_entry {
    struct string_entry *next;
    uint64_t hash;
    uint32_t id;
    uint32_t len;
    char s[];
};

static struct string_entry *g_buckets[NBUCKETS];
static uint32_t g_next_id;  /* string ids handed out */
static uint32_t g_nstrings; /* entries in the table */
static GMT_TLS int tls_nvtx_depth; /* NVTX's push/pop levels */

/* ---- strings ---------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 32);
}

static struct string_entry *find(struct string_entry *e,
                                 const struct string_entry *stop,
                                 uint64_t hash, const char *s, size_t n)
{
    for (; e != NULL && e != stop;
         e = __atomic_load_n(&e->next, __ATOMIC_ACQUIRE))
        if (e->hash == hash && e->len == n && memcmp(e->s, s, n) == 0)
            return e;
    return NULL;
}

/* Write a STRING record under a fresh id; 0 if it could not be written. */
static uint32_t define(struct gmt_thread *t, const char *s, size_t n)
{
    uint8_t buf[GMT_VARINT_MAX + GMT_STRING_MAX];
    uint32_t id = __atomic_add_fetch(&g_next_id, 1, __ATOMIC_RELAXED);
    uint8_t *p = gmt_put_varint(buf, id);
    memcpy(p, s, n);
    return gmt_trace_emit_ext(t, GMT_X_STRING, buf, (size_t)(p - buf) + n)
               ? id : 0;
}

uint32_t gmt_string_id(struct gmt_thread *t, const char *s, size_t n)
{
    if (n > GMT_STRING_MAX)
        n = GMT_STRING_MAX;
    uint64_t hash = hash_bytes(s, n);
    struct string_entry **bucket = &g_buckets[hash & (NBUCKETS - 1)];
    struct string_entry *head = __atomic_load_n(bucket, __ATOMIC_ACQUIRE);
    struct string_entry *e = find(head, NULL, hash, s, n);
    if (GMT_LIKELY(e != NULL))
        return e->id;
    if (__atomic_load_n(&g_nstrings, __ATOMIC_RELAXED) >= MAX_STRINGS ||
        (e = malloc(sizeof *e + n)) == NULL)
        return define(t, s, n); /* table full: a definition per use */
    e->hash = hash;
    e->len = (uint32_t)n;
    memcpy(e->s, s, n);
    if ((e->id = define(t, s, n)) == 0) {
        free(e);
        return 0;
    }
    for (;;) {
        e->next = head;
        if (__atomic_compare_exchange_n(bucket, &head, e, false,
                                        __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
            __atomic_add_fetch(&g_nstrings, 1, __ATOMIC_RELAXED);
            return e->id;
        }
        /* Someone published first: did they publish this very name? */
        struct string_entry *dup = find(head, e->next, hash, s, n);
        if (dup != NULL) {
            free(e);
            return dup->id;
        }
    }
}

void gmt_api_reset_after_fork(void)
{
    /* The child's file has none of the parent's definitions: forget them
     * so they are written again. Only this thread exists now. */
    for (unsigned i = 0; i < NBUCKETS; i++) {
        struct string_entry *e = g_buckets[i];
        while (e) {
            struct string_entry *next = e->next;
            free(e);
            e = next;
        }
        g_buckets[i] = NULL;
    }
    g_next_id = g_nstrings = 0;
}

/* Bytes of `s` recorded as a marker name: at most GPUMEMTRACE_NAME_MAX,
 * cut before a UTF-8 character that would not fit whole. */
static size_t name_len(const char *s)
{
    size_t n = strnlen(s, GPUMEMTRACE_NAME_MAX + 1);
    if (n <= GPUMEMTRACE_NAME_MAX)
        return n;
    n = GPUMEMTRACE_NAME_MAX;
    /* s[n] is the first byte left out: while it continues a character,
     * that character is cut, so leave it out whole (at most 3 bytes back:
     * beyond that the bytes are not UTF-8 anyway) */
    for (int k = 0; k < 3 && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; k++)
        n--;
    return n;
}

/* ---- the MARKER record ------------------------------------------------ */

static bool emit_marker(struct gmt_thread *t, unsigned type, uint32_t id)
{
    struct gmt_event ev = {.kind = GMT_K_MARKER, .api = (uint8_t)type,
                           .value = id, .device = -1};
    return gmt_trace_emit(t, &ev);
}

/* The calling thread, ready to record, with its guard set; NULL: record
 * nothing (tracing off, or called from inside the tracer). Starts tracing
 * if it has not started: gmt_call_begin does that for the first hooked
 * call, and so for us (its stack capture is paid once, not per marker). */
static struct gmt_thread *enter(void)
{
    if (GMT_UNLIKELY(!gmt_tracer_active())) {
        struct gmt_call c;
        if (!gmt_call_begin(&c, false))
            return NULL;
        gmt_call_finish(&c);
    }
    struct gmt_thread *t = gmt_thread_get();
    if (GMT_UNLIKELY(t == NULL || t->guard))
        return NULL;
    t->guard = 1;
    return t;
}

/* Record a marker named s[0..n) (pops: no name, string id 0). */
static void marker(unsigned type, const char *s, size_t n)
{
    int saved = errno;
    struct gmt_thread *t = enter();
    if (t != NULL) {
        if (GMT_UNLIKELY(gmt_opt.verbose) && type == GMT_MARK && n == 4 &&
            memcmp(s, "step", 4) == 0)
            gmt_mem_step_mark(); /* the hooks' steady cost, said at exit */
        uint32_t id = type == GMT_MARK_POP ? 0 : gmt_string_id(t, s, n);
        if (id != 0 || type == GMT_MARK_POP)
            emit_marker(t, type, id);
        if (GMT_UNLIKELY(__atomic_load_n(&gmt_retention_marks, __ATOMIC_ACQUIRE)) &&
            type != GMT_MARK_POP)
            gmt_retention_on_mark(type, s, n);
        t->guard = 0;
    }
    errno = saved;
}

static void named(unsigned type, const char *name)
{
    if (name == NULL)
        name = "(null)";
    marker(type, name, name_len(name));
}

GMT_EXPORT void gpumemtrace_mark(const char *name)
{
    named(GMT_MARK, name);
}

GMT_EXPORT void gpumemtrace_push(const char *name)
{
    named(GMT_MARK_PUSH, name);
}

GMT_EXPORT void gpumemtrace_pop(void)
{
    marker(GMT_MARK_POP, NULL, 0);
}

GMT_EXPORT int gpumemtrace_active(void)
{
    int saved = errno;
    if (!gmt_tracer_active()) {
        struct gmt_call c;
        if (gmt_call_begin(&c, false))
            gmt_call_finish(&c);
    }
    int on = gmt_tracer_active();
    errno = saved;
    return on;
}

/* ---- retention captures ------------------------------------------------- */

/* One line of a capture (preload/retention.py writes them, through
 * ctypes): a GMT_X_RETENTION record. Longer lines than a record may carry
 * are cut. 1: recorded. */
GMT_EXPORT int gpumemtrace_retention_line(unsigned capture, const char *s, size_t n)
{
    int saved = errno, done = 0;
    struct gmt_thread *t = s ? enter() : NULL;
    if (t != NULL) {
        uint8_t buf[8192];
        uint8_t *p = gmt_put_varint(buf, capture);
        size_t room = sizeof buf - (size_t)(p - buf);
        n = n < room ? n : room;
        memcpy(p, s, n);
        done = gmt_trace_emit_ext(t, GMT_X_RETENTION, buf, (size_t)(p - buf) + n);
        t->guard = 0;
    }
    errno = saved;
    return done;
}

/* The walk's source, which the bootstrap compiles (preload/retention.c). */
GMT_EXPORT const char *gpumemtrace_retention_source(void)
{
    return gmt_retention_py;
}

/* ---- NVTX -------------------------------------------------------------- */

/* A wide (UTF-32) string as UTF-8, cut to whole characters that fit. */
static const char *from_wide(const wchar_t *w, char *buf, size_t cap)
{
    if (w == NULL)
        return "(null)";
    size_t n = 0;
    for (; *w; w++) {
        uint32_t c = (uint32_t)*w;
        uint8_t enc[4];
        size_t k;
        if (c >= 0xd800 && c <= 0xdfff)
            c = 0xfffd; /* a lone surrogate is not a character */
        if (c < 0x80) {
            enc[0] = (uint8_t)c;
            k = 1;
        } else if (c < 0x800) {
            enc[0] = (uint8_t)(0xc0 | c >> 6);
            enc[1] = (uint8_t)(0x80 | (c & 0x3f));
            k = 2;
        } else if (c < 0x10000) {
            enc[0] = (uint8_t)(0xe0 | c >> 12);
            enc[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
            enc[2] = (uint8_t)(0x80 | (c & 0x3f));
            k = 3;
        } else if (c < 0x110000) {
            enc[0] = (uint8_t)(0xf0 | c >> 18);
            enc[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
            enc[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
            enc[3] = (uint8_t)(0x80 | (c & 0x3f));
            k = 4;
        } else {
            enc[0] = 0xef, enc[1] = 0xbf, enc[2] = 0xbd; /* U+FFFD */
            k = 3;
        }
        if (n + k >= cap)
            break;
        memcpy(buf + n, enc, k);
        n += k;
    }
    buf[n] = '\0';
    return buf;
}

/* The text of an event's message: ASCII, wide, or a string registered
 * with us (the handle is our own copy); "(nvtx)" when there is none. */
static const char *message(const nvtxEventAttributes_t *a, char *buf,
                           size_t cap)
{
    if (a == NULL || a->size < offsetof(nvtxEventAttributes_t, message) +
                                   sizeof a->message)
        return "(nvtx)";
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
        return a->message.ascii ? a->message.ascii : "(null)";
    case NVTX_MESSAGE_TYPE_UNICODE:
        return from_wide(a->message.unicode, buf, cap);
    case NVTX_MESSAGE_TYPE_REGISTERED:
        return a->message.registered ? (const char *)a->message.registered
                                     : "(nvtx)";
    default:
        return "(nvtx)";
    }
}

#define WBUF (GPUMEMTRACE_NAME_MAX + 1)

static void NVTX_API nv_mark_a(const char *m)
{
    named(GMT_MARK, m);
}

static void NVTX_API nv_mark_w(const wchar_t *m)
{
    char buf[WBUF];
    named(GMT_MARK, from_wide(m, buf, sizeof buf));
}

static void NVTX_API nv_mark_ex(const nvtxEventAttributes_t *a)
{
    char buf[WBUF];
    named(GMT_MARK, message(a, buf, sizeof buf));
}

/* Push returns the level of the range it opens, pop the level of the one
 * it closes (NVTX's contract), from a per-thread count; a pop with
 * nothing open is recorded and returns -1. */
static int push_level(const char *name)
{
    named(GMT_MARK_PUSH, name);
    return tls_nvtx_depth++;
}

static int NVTX_API nv_push_a(const char *m)
{
    return push_level(m);
}

static int NVTX_API nv_push_w(const wchar_t *m)
{
    char buf[WBUF];
    return push_level(from_wide(m, buf, sizeof buf));
}

static int NVTX_API nv_push_ex(const nvtxEventAttributes_t *a)
{
    char buf[WBUF];
    return push_level(message(a, buf, sizeof buf));
}

static int NVTX_API nv_pop(void)
{
    marker(GMT_MARK_POP, NULL, 0);
    return tls_nvtx_depth > 0 ? --tls_nvtx_depth : -1;
}

/* Domains share the thread's one stack of regions. */
static void NVTX_API nv_domain_mark_ex(nvtxDomainHandle_t d,
                                       const nvtxEventAttributes_t *a)
{
    (void)d;
    nv_mark_ex(a);
}

static int NVTX_API nv_domain_push_ex(nvtxDomainHandle_t d,
                                      const nvtxEventAttributes_t *a)
{
    (void)d;
    return nv_push_ex(a);
}

static int NVTX_API nv_domain_pop(nvtxDomainHandle_t d)
{
    (void)d;
    return nv_pop();
}

/* A registered string's handle is our own copy of its (cut) text. It is
 * never freed: handles live as long as the program, and registering is
 * meant to be done once per string. */
static nvtxStringHandle_t register_string(const char *s)
{
    if (s == NULL)
        s = "(null)";
    size_t n = name_len(s);
    char *copy = malloc(n + 1);
    if (copy == NULL)
        return NULL; /* messages that use it read "(nvtx)" */
    memcpy(copy, s, n);
    copy[n] = '\0';
    return (nvtxStringHandle_t)(void *)copy;
}

static nvtxStringHandle_t NVTX_API nv_register_a(nvtxDomainHandle_t d,
                                                 const char *s)
{
    (void)d;
    return register_string(s);
}

static nvtxStringHandle_t NVTX_API nv_register_w(nvtxDomainHandle_t d,
                                                 const wchar_t *s)
{
    char buf[WBUF];
    (void)d;
    return register_string(from_wide(s, buf, sizeof buf));
}

struct slot {
    unsigned id;
    NvtxFunctionPointer fn;
};

#define SLOT(id, fn) {(id), (NvtxFunctionPointer)(fn)}

/* Point the slots of one callback module of an NVTX instance at us. */
static bool fill(const NvtxExportTableCallbacks *cb, NvtxCallbackModule mod,
                 const struct slot *slots, size_t n)
{
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (!cb->GetModuleFunctionTable(mod, &table, &size) || table == NULL)
        return false;
    for (size_t i = 0; i < n; i++)
        if (slots[i].id < size && table[slots[i].id] != NULL)
            *table[slots[i].id] = slots[i].fn;
    return true;
}

/* The entry point NVTX looks up in the library NVTX_INJECTION64_PATH
 * names. Nonzero: attached. NVTX calls it once per instance (every
 * library carrying its own header-only NVTX), possibly from several
 * threads; it only writes into that instance's tables. */
GMT_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    int saved = errno;
    int ok = 0;
    /* Markers belong in the trace of the copy of this library that is
     * preloaded: the one in the program's global scope, which is what a
     * lookup through the program's own handle finds (RTLD_DEFAULT would
     * find this copy too: it also searches the caller's own scope). NVTX
     * may have loaded another copy (another path): hand over to the
     * preloaded one. Or the only copy, loaded by NVTX alone: its hooks
     * see nothing, so decline. */
    void *prog = dlopen(NULL, RTLD_LAZY);
    void *global = prog ? dlsym(prog, "InitializeInjectionNvtx2") : NULL;
    if (prog)
        dlclose(prog);
    /* Which object `global` lies in: not by comparing it with our own
     * InitializeInjectionNvtx2, which in a second copy resolves to the
     * preloaded one too (interposition), but by load address. */
    Dl_info gi, self;
    if (global != NULL && dladdr(global, &gi) &&
        dladdr((void *)nv_mark_a, &self) && gi.dli_fbase != self.dli_fbase) {
        ok = ((NvtxInitializeInjectionNvtxFunc_t)global)(get);
        goto out;
    }
    if (global == NULL) {
        gmt_warn("NVTX_INJECTION64_PATH names libgpumemtrace.so, which is "
                 "not preloaded: NVTX ranges are not recorded (run the "
                 "program with LD_PRELOAD=libgpumemtrace.so, or with the "
                 "gpumemtrace launcher)");
        goto out;
    }
    const NvtxExportTableCallbacks *cb =
        get ? (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS)
            : NULL;
    if (cb == NULL || cb->struct_size < sizeof *cb ||
        cb->GetModuleFunctionTable == NULL)
        goto out;
    static const struct slot core[] = {
        SLOT(NVTX_CBID_CORE_MarkEx, nv_mark_ex),
        SLOT(NVTX_CBID_CORE_MarkA, nv_mark_a),
        SLOT(NVTX_CBID_CORE_MarkW, nv_mark_w),
        SLOT(NVTX_CBID_CORE_RangePushEx, nv_push_ex),
        SLOT(NVTX_CBID_CORE_RangePushA, nv_push_a),
        SLOT(NVTX_CBID_CORE_RangePushW, nv_push_w),
        SLOT(NVTX_CBID_CORE_RangePop, nv_pop),
    };
    static const struct slot core2[] = {
        SLOT(NVTX_CBID_CORE2_DomainMarkEx, nv_domain_mark_ex),
        SLOT(NVTX_CBID_CORE2_DomainRangePushEx, nv_domain_push_ex),
        SLOT(NVTX_CBID_CORE2_DomainRangePop, nv_domain_pop),
        SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, nv_register_a),
        SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, nv_register_w),
    };
    ok = fill(cb, NVTX_CB_MODULE_CORE, core, sizeof core / sizeof *core);
    if (ok)
        fill(cb, NVTX_CB_MODULE_CORE2, core2, sizeof core2 / sizeof *core2);
    /* tools are asked to say which NVTX version they were built with */
    const NvtxExportTableVersionInfo *vi =
        (const NvtxExportTableVersionInfo *)get(NVTX_ETID_VERSIONINFO);
    if (ok && vi && vi->struct_size >= sizeof *vi && vi->SetInjectionNvtxVersion)
        vi->SetInjectionNvtxVersion(NVTX_VERSION);
out:
    errno = saved;
    return ok;
}
