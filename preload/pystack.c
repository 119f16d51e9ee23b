/* pystack.c - the Python call stack of the allocating thread.
 *
 * A native stack of a PyTorch allocation is dozens of interpreter frames
 * that say nothing; the user wants the line of their model. When the
 * process runs CPython, every captured stack also carries the Python
 * frames of the calling thread: (code object, instruction offset) pairs,
 * innermost first. Lines are computed offline from the code object's line
 * table, which is copied into the trace once per code object (a PYCODE
 * record), so the hot path reads a few pointers per frame and decodes
 * nothing.
 *
 * No GIL. PyTorch releases the GIL around its ops, and taking it inside a
 * hook could deadlock. We don't need it: the calling thread is blocked in
 * our hook, so its own frame chain cannot change under us, and every code
 * object on that chain is kept alive by its frame. The thread's state
 * comes from PyGILState_GetThisThreadState(), which reads a thread-specific
 * key and takes no lock. Reading the frames needs each version's layout of
 * the thread state, the interpreter frames and the code objects: the table
 * below, measured from each version's own headers (scripts/py-offsets.sh
 * prints it; tests/e2e/test_python.py checks it against every interpreter
 * it finds). Every code object is type-checked before it is read, so a
 * layout that does not match is noticed, and Python frames are then turned
 * off with a note in the trace, not read further.
 *
 * Code objects die and their addresses are reused (exec, lambdas, reloaded
 * modules). A code address is therefore never trusted on its own: a cached
 * entry matches only if the object still has the same name (the same str
 * object with the same hash, so the same text), file name, line-table
 * object and length, size word and first line. A new code object at an old
 * address differs in one of these unless it is the same function, made
 * again from the same source; it then gets a new id. Checking these costs
 * a few loads per frame, where comparing the line table's bytes cost a
 * third of the capture.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* How the current frame is reached, and what a frame is. */
enum py_frames {
    PY_FRAME_OBJECTS,   /* 3.9, 3.10: tstate->frame, PyFrameObject chain */
    PY_CFRAME,          /* 3.11, 3.12: tstate->cframe->current_frame */
    PY_CURRENT_FRAME,   /* 3.13: tstate->current_frame */
};

/* Line table formats, as recorded in PYCODE (docs/trace-format.md). */
enum { PY_LNOTAB = 0, PY_LINETABLE_310 = 1, PY_LOCATIONS = 2 };

struct py_layout {
    unsigned major, minor;
    enum py_frames frames;
    uint16_t ts_frame;      /* tstate: frame, cframe or current_frame */
    uint16_t cf_current;    /* _PyCFrame.current_frame */
    uint16_t fr_back;       /* frame: f_back / previous */
    uint16_t fr_code;       /* frame: f_code / f_executable */
    uint16_t fr_instr;      /* f_lasti (int), prev_instr or instr_ptr */
    uint16_t fr_owner;      /* interpreter frames: owner (char) */
    uint16_t co_filename, co_name, co_linetable, co_firstlineno;
    uint16_t co_code;       /* co_code_adaptive (3.11+) */
    uint16_t co_firsttraceable;
    uint16_t str_ascii;     /* sizeof(PyASCIIObject): ASCII data follows */
    uint16_t str_compact;   /* sizeof(PyCompactUnicodeObject) */
    uint8_t line_format;
    bool lasti_units;       /* 3.10: f_lasti counts code units */
};

/* x86-64, default (GIL) builds; from the versions' headers. */
static const struct py_layout g_layouts[] = {
    {3, 9, PY_FRAME_OBJECTS, 24, 0, 24, 32, 104, 0,
     104, 112, 120, 40, 0, 0, 48, 72, PY_LNOTAB, false},
    {3, 10, PY_FRAME_OBJECTS, 24, 0, 24, 32, 96, 0,
     104, 112, 120, 40, 0, 0, 48, 72, PY_LINETABLE_310, true},
    {3, 11, PY_CFRAME, 56, 8, 48, 32, 56, 69,
     112, 128, 136, 72, 184, 168, 48, 72, PY_LOCATIONS, false},
    {3, 12, PY_CFRAME, 56, 0, 8, 0, 56, 70,
     112, 128, 136, 68, 192, 176, 40, 56, PY_LOCATIONS, false},
    {3, 13, PY_CURRENT_FRAME, 72, 0, 8, 0, 56, 70,
     112, 128, 136, 68, 200, 184, 40, 56, PY_LOCATIONS, false},
};

/* Frame owners of interpreter frames (3.11+). */
enum { OWNED_BY_GENERATOR = 1, OWNED_BY_CSTACK = 3 };

#define OB_TYPE 8       /* PyObject.ob_type */
#define OB_SIZE 16      /* PyVarObject.ob_size */
#define BYTES_DATA 32   /* PyBytesObject.ob_sval */
#define STR_LENGTH 16   /* PyASCIIObject.length */
#define STR_HASH 24     /* PyASCIIObject.hash (-1 until computed) */
#define STR_STATE 32    /* PyASCIIObject.state: kind bits 2-4, compact 5, ascii 6 */
#define MAX_STR 512     /* longest file or function name recorded (chars) */

static const struct py_layout *g_py;  /* NULL: no Python frames */
static void *(*g_this_tstate)(void);
static int (*g_is_initialized)(void);
static const void *g_code_type, *g_str_type, *g_bytes_type;
static int g_broken;                  /* set once a layout check failed */

/* ---- code objects, described once ------------------------------------- */

#define CODE_BUCKET_BITS 14
#define CODE_NBUCKETS (1u << CODE_BUCKET_BITS)

/* What identifies a live code object: see the file's comment. */
struct code_key {
    uintptr_t code;                  /* the object's address */
    uintptr_t filename, name, table; /* its str and bytes objects */
    int64_t name_hash;               /* the name's cached str hash */
    int64_t size_word;               /* ob_size (3.11+) or argument counts */
    int64_t table_len;
    int firstlineno;
};

struct code_entry {
    struct code_entry *next;
    struct code_key k;
    uint32_t id;
};

static struct code_entry **g_code_buckets;
static uint32_t g_next_code_id;

static inline uintptr_t load_ptr(uintptr_t obj, unsigned off)
{
    return *(const uintptr_t *)(obj + off);
}

static inline bool is_type(uintptr_t obj, const void *type)
{
    return obj != 0 && (const void *)load_ptr(obj, OB_TYPE) == type;
}

/* Append a str object as a "str" field (varint length, UTF-8 bytes).
 * Compact strings only, the only kind the compiler makes; "?" for any
 * other. p must have room for GMT_VARINT_MAX + 4 * MAX_STR bytes. */
static uint8_t *put_str(uint8_t *p, uintptr_t s)
{
    uint8_t text[4 * MAX_STR], *q = text;
    uint8_t state = is_type(s, g_str_type) ? *(const uint8_t *)(s + STR_STATE) : 0;
    if (state & 0x20) { /* compact */
        int64_t n = *(const int64_t *)(s + STR_LENGTH);
        unsigned kind = (state >> 2) & 7;
        bool ascii = state & 0x40;
        const uint8_t *d = (const uint8_t *)(s + (ascii ? g_py->str_ascii : g_py->str_compact));
        if (n > MAX_STR)
            n = MAX_STR;
        for (int64_t i = 0; i < n; i++) {
            uint32_t c = kind == 1 ? d[i] : kind == 2 ? ((const uint16_t *)d)[i]
                                                      : ((const uint32_t *)d)[i];
            if (c < 0x80) {
                *q++ = (uint8_t)c;
            } else if (c < 0x800) {
                *q++ = (uint8_t)(0xc0 | c >> 6);
                *q++ = (uint8_t)(0x80 | (c & 0x3f));
            } else if (c < 0x10000) {
                *q++ = (uint8_t)(0xe0 | c >> 12);
                *q++ = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
                *q++ = (uint8_t)(0x80 | (c & 0x3f));
            } else {
                *q++ = (uint8_t)(0xf0 | (c >> 18 & 7));
                *q++ = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
                *q++ = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
                *q++ = (uint8_t)(0x80 | (c & 0x3f));
            }
        }
    } else {
        *q++ = '?';
    }
    p = gmt_put_varint(p, (uint64_t)(q - text));
    memcpy(p, text, (size_t)(q - text));
    return p + (q - text);
}

/* PYCODE: id, firstlineno, line table format, str file, str name, then
 * the line table to the end of the payload. */
static bool write_code(struct gmt_thread *t, const struct code_entry *e,
                       const uint8_t *table)
{
    size_t cap = gmt_trace_ext_max();
    uint8_t buf[3 * GMT_VARINT_MAX + 2 * (GMT_VARINT_MAX + 4 * MAX_STR)];
    uint8_t *p = gmt_put_varint(buf, e->id);
    p = gmt_put_varint(p, (uint64_t)(e->k.firstlineno < 0 ? 0 : e->k.firstlineno));
    p = gmt_put_varint(p, g_py->line_format);
    p = put_str(p, e->k.filename);
    p = put_str(p, e->k.name);
    size_t head = (size_t)(p - buf);
    if (head >= cap)
        return false;
    /* The table goes last, cut to what a record holds (only a function of
     * many thousand lines is that long; its later lines then read as its
     * first). */
    size_t n = (size_t)e->k.table_len;
    if (head + n > cap)
        n = cap - head;
    uint8_t *rec = malloc(head + n);
    if (rec == NULL)
        return false;
    memcpy(rec, buf, head);
    memcpy(rec + head, table, n);
    bool ok = gmt_trace_emit_ext(t, GMT_X_PYCODE, rec, head + n);
    free(rec);
    return ok;
}

static inline uint64_t hash_ptr(uintptr_t p)
{
    uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static inline bool same_code(const struct code_key *a, const struct code_key *b)
{
    return a->code == b->code && a->name == b->name &&
           a->name_hash == b->name_hash && a->filename == b->filename &&
           a->table == b->table && a->table_len == b->table_len &&
           a->size_word == b->size_word && a->firstlineno == b->firstlineno;
}

/* The id of code object `code`, describing it first if it is new.
 * 0: could not be described. */
static uint32_t code_id(struct gmt_thread *t, uintptr_t code)
{
    const struct py_layout *L = g_py;
    struct code_key k;
    k.code = code;
    k.filename = load_ptr(code, L->co_filename);
    k.name = load_ptr(code, L->co_name);
    k.table = load_ptr(code, L->co_linetable);
    k.name_hash = is_type(k.name, g_str_type) ? *(const int64_t *)(k.name + STR_HASH) : 0;
    k.size_word = *(const int64_t *)(code + OB_SIZE);
    k.table_len = is_type(k.table, g_bytes_type) ? *(const int64_t *)(k.table + OB_SIZE) : 0;
    if (k.table_len < 0 || k.table_len > (1 << 20))
        k.table_len = 0;
    k.firstlineno = *(const int *)(code + L->co_firstlineno);
    uint64_t h = hash_ptr(code);
    struct code_entry **bucket = &g_code_buckets[h & (CODE_NBUCKETS - 1)];
    struct code_entry *head = __atomic_load_n(bucket, __ATOMIC_ACQUIRE);
    for (struct code_entry *e = head; e; e = __atomic_load_n(&e->next, __ATOMIC_ACQUIRE))
        if (same_code(&e->k, &k))
            return e->id;
    struct code_entry *e = malloc(sizeof *e);
    if (e == NULL)
        return 0;
    e->k = k;
    e->id = __atomic_add_fetch(&g_next_code_id, 1, __ATOMIC_RELAXED);
    if (!write_code(t, e, (const uint8_t *)(k.table + BYTES_DATA))) {
        free(e);
        return 0;
    }
    for (;;) { /* publish after the definition: see stack.c */
        e->next = head;
        if (__atomic_compare_exchange_n(bucket, &head, e, false,
                                        __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
            return e->id;
        for (struct code_entry *d = head; d != e->next; d = d->next)
            if (same_code(&d->k, &k)) {
                free(e);
                return d->id;
            }
    }
}

/* ---- finding the interpreter ------------------------------------------ */


/* The interpreter's code: the executable segment of the object that
 * defines the C API (the python executable or libpython). */
uintptr_t gmt_py_interp_lo, gmt_py_interp_hi;

static int find_text(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t sym = (uintptr_t)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && sym >= lo &&
            sym < hi) {
            gmt_py_interp_lo = lo;
            gmt_py_interp_hi = hi;
            return 1;
        }
    }
    return 0;
}

static void find_interpreter_code(void)
{
    /* Py_IsInitialized is a real function of the interpreter (not a data
     * symbol): its segment is the interpreter's code. */
    dl_iterate_phdr(find_text, (void *)g_is_initialized);
}

bool gmt_py_init(struct gmt_thread *t)
{
    if (g_py != NULL || gmt_opt.python == 0)
        return g_py != NULL;
    /* Symbols of the interpreter the process runs, if any: the python
     * executable or libpython exports the C API. */
    const char *(*get_version)(void) = dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (get_version == NULL)
        return false; /* not a Python process */
    g_this_tstate = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    g_is_initialized = (int (*)(void))dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    g_code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
    g_str_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    g_bytes_type = dlsym(RTLD_DEFAULT, "PyBytes_Type");
    const char *v = get_version();
    unsigned major = 0, minor = 0;
    char why[200];
    if (v == NULL || sscanf(v, "%u.%u", &major, &minor) != 2) {
        gmt_trace_note(t, 1, "Python: version not recognized; no Python frames recorded");
        return false;
    }
    const struct py_layout *L = NULL;
    for (size_t i = 0; i < sizeof g_layouts / sizeof *g_layouts; i++)
        if (g_layouts[i].major == major && g_layouts[i].minor == minor)
            L = &g_layouts[i];
    if (L == NULL || sizeof(void *) != 8) {
        snprintf(why, sizeof why, "Python %u.%u: interpreter layout not known to "
                 "this gpumemtrace (3.9-3.13 are); no Python frames recorded",
                 major, minor);
        gmt_trace_note(t, 1, why);
        gmt_info("%s", why);
        return false;
    }
    if (!g_this_tstate || !g_is_initialized || !g_code_type || !g_str_type ||
        !g_bytes_type) {
        gmt_trace_note(t, 1, "Python: the interpreter does not export the functions "
             "gpumemtrace reads frames with; no Python frames recorded");
        return false;
    }
    if (g_code_buckets == NULL)
        g_code_buckets = calloc(CODE_NBUCKETS, sizeof *g_code_buckets);
    if (g_code_buckets == NULL)
        return false;
    find_interpreter_code();
    snprintf(why, sizeof why, "Python %u.%u: recording Python frames", major, minor);
    gmt_trace_note(t, 0, why);
    __atomic_store_n(&g_py, L, __ATOMIC_RELEASE);
    return true;
}

void gmt_py_reset_after_fork(void)
{
    /* As for stacks: the child's file has none of these definitions. */
    if (g_code_buckets == NULL)
        return;
    for (unsigned i = 0; i < CODE_NBUCKETS; i++) {
        struct code_entry *e = g_code_buckets[i];
        while (e) {
            struct code_entry *next = e->next;
            free(e);
            e = next;
        }
        g_code_buckets[i] = NULL;
    }
    g_next_code_id = 0;
}

/* The layout did not hold: stop reading frames, say so once. */
static int broken(struct gmt_thread *t, const char *what)
{
    if (__atomic_exchange_n(&g_broken, 1, __ATOMIC_RELAXED) == 0) {
        char why[200];
        snprintf(why, sizeof why, "Python %u.%u: %s; Python frames turned off",
                 g_py->major, g_py->minor, what);
        gmt_trace_note(t, 1, why);
        gmt_warn("%s", why);
    }
    return 0;
}

/* ---- the capture -------------------------------------------------------- */

int gmt_py_capture(struct gmt_thread *t, int64_t *out, int max)
{
    const struct py_layout *L = __atomic_load_n(&g_py, __ATOMIC_ACQUIRE);
    if (L == NULL || max <= 0 || __atomic_load_n(&g_broken, __ATOMIC_RELAXED) ||
        !g_is_initialized())
        return 0;
    uintptr_t ts = (uintptr_t)g_this_tstate();
    if (ts == 0)
        return 0; /* a thread that never ran Python */
    uintptr_t f;
    if (L->frames == PY_CFRAME) {
        uintptr_t cf = load_ptr(ts, L->ts_frame);
        f = cf ? load_ptr(cf, L->cf_current) : 0;
    } else {
        f = load_ptr(ts, L->ts_frame);
    }
    int n = 0;
    /* The chain is the thread's own and finite; the bound only guards
     * against a layout we misread. */
    for (int hops = 0; f != 0 && n < max && hops < 100000;
         f = load_ptr(f, L->fr_back), hops++) {
        uintptr_t code = load_ptr(f, L->fr_code);
        int64_t offset;
        if (L->frames == PY_FRAME_OBJECTS) {
            if (!is_type(code, g_code_type))
                return broken(t, "a frame without a code object");
            int lasti = *(const int *)(f + L->fr_instr);
            offset = L->lasti_units ? (int64_t)lasti * 2 : lasti;
        } else {
            char owner = *(const char *)(f + L->fr_owner);
            if (owner == OWNED_BY_CSTACK)
                continue; /* the interpreter's entry shim, not code */
            if (!is_type(code, g_code_type))
                return broken(t, "a frame without a code object");
            uintptr_t instr = load_ptr(f, L->fr_instr);
            uintptr_t start = code + L->co_code;
            int first = *(const int *)(code + L->co_firsttraceable);
            /* A frame still setting up is not on the Python stack yet. */
            if (owner != OWNED_BY_GENERATOR && instr < start + 2u * (unsigned)first)
                continue;
            offset = ((int64_t)instr - (int64_t)start);
        }
        uint32_t id = code_id(t, code);
        if (id == 0)
            break;
        out[2 * n] = id;
        out[2 * n + 1] = offset;
        n++;
    }
    return n;
}
