/* symbols.c - offline symbolization with elfutils libdwfl (see symbols.h).
 *
 * Every lookup result is cached by address, and every label by (stack,
 * grain, depth), so a report over millions of events symbolizes each
 * distinct frame once. Strings are interned in one arena freed with the
 * symbolizer.
 */
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backward.h"
#include "opnames.h"
#include "pyclass.h"
#include "gmttrace.h"
#include "symbols.h"

#define MAX_INLINE 16

struct cached {
    uint64_t ip;
    int n;
    struct sym frames[MAX_INLINE];
    UT_hash_handle hh;
};

struct label {
    uint64_t key; /* stack << 16 | grain << 8 | depth */
    const char *text;
    UT_hash_handle hh;
};

struct strings {
    struct strings *next;
    size_t used, cap;
    char data[];
};

struct symbolizer {
    const struct gmt_defs *defs;
    const struct bw_state *bw; /* synthetic stack ids (backward.h) */
    Dwfl *dwfl;
    Dwfl_Module **mods; /* per defs module: NULL if unusable */
    struct cached *cache;
    struct label *labels;
    struct strings *strings;
    char *(*demangle)(const char *, char *, size_t *, int *);
    bool demangle_ok; /* symbols wanted at all (not --no-symbols) */
    size_t resolved, raw;
    char buf[8192];
};

static const char *intern(struct symbolizer *s, const char *str, size_t n)
{
    if (str == NULL)
        return NULL;
    if (s->strings == NULL || s->strings->used + n + 1 > s->strings->cap) {
        size_t cap = n + 1 > 65536 ? n + 1 : 65536;
        struct strings *b = malloc(sizeof *b + cap);
        if (b == NULL)
            return "?";
        b->next = s->strings;
        b->used = 0;
        b->cap = cap;
        s->strings = b;
    }
    char *p = s->strings->data + s->strings->used;
    memcpy(p, str, n);
    p[n] = '\0';
    gmt_printable(p); /* names and paths from a binary's tables: printed */
    s->strings->used += n + 1;
    return p;
}

static const char *intern0(struct symbolizer *s, const char *str)
{
    return str ? intern(s, str, strlen(str)) : NULL;
}

static const char *base_name(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
};

/* A module's file, opened for libdw only when it is a regular file: a
 * trace is untrusted, and one naming a FIFO would block the report in
 * open() forever, one naming a device node would open the device. stat
 * first (no open at all of anything else), fstat again after the
 * non-blocking open (the path may change in between). -1: skip it. */
static int open_regular(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Report every recorded module whose file is here and is the same build. */
static void open_modules(struct symbolizer *s)
{
    const struct gmt_defs *d = s->defs;
    s->mods = calloc(d->nmodules ? d->nmodules : 1, sizeof *s->mods);
    s->dwfl = dwfl_begin(&callbacks);
    if (s->mods == NULL || s->dwfl == NULL)
        return;
    dwfl_report_begin(s->dwfl);
    for (size_t i = 0; i < d->nmodules; i++) {
        const struct gmt_module_def *m = &d->modules[i];
        if (m->path[0] != '/' || m->build_id_len == 0)
            continue; /* [vdso], [main] and friends */
        int fd = open_regular(m->path);
        if (fd < 0)
            continue;
        Dwfl_Module *mod = dwfl_report_elf(s->dwfl, base_name(m->path), m->path,
                                           fd, m->base, false);
        if (mod == NULL) { /* the fd is libdw's only on success */
            close(fd);
            continue;
        }
        const unsigned char *bits;
        GElf_Addr vaddr;
        int n = dwfl_module_build_id(mod, &bits, &vaddr);
        if (n != (int)m->build_id_len || memcmp(bits, m->build_id, (size_t)n))
            continue; /* a different build than the one traced */
        s->mods[i] = mod;
    }
    dwfl_report_end(s->dwfl, NULL, NULL);
}

struct symbolizer *sym_new(const struct gmt_defs *d, bool resolve)
{
    struct symbolizer *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->defs = d;
    if (resolve) {
        open_modules(s);
        void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (f == NULL) {
            void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
            f = h ? dlsym(h, "__cxa_demangle") : NULL;
        }
        s->demangle = (char *(*)(const char *, char *, size_t *, int *))f;
        s->demangle_ok = true;
    }
    return s;
}

void sym_set_backward(struct symbolizer *s, const struct bw_state *bw)
{
    if (s)
        s->bw = bw;
}

void sym_free(struct symbolizer *s)
{
    if (s == NULL)
        return;
    struct cached *c, *ct;
    HASH_ITER(hh, s->cache, c, ct) {
        HASH_DEL(s->cache, c);
        free(c);
    }
    struct label *l, *lt;
    HASH_ITER(hh, s->labels, l, lt) {
        HASH_DEL(s->labels, l);
        free(l);
    }
    while (s->strings) {
        struct strings *n = s->strings->next;
        free(s->strings);
        s->strings = n;
    }
    if (s->dwfl)
        dwfl_end(s->dwfl);
    free(s->mods);
    free(s);
}

static const char *demangled(struct symbolizer *s, const char *name)
{
    if (name == NULL)
        return NULL;
    if (s->demangle && name[0] == '_' && name[1] == 'Z') {
        int status = -1;
        char *d = s->demangle(name, NULL, NULL, &status);
        if (d && status == 0) {
            const char *r = intern0(s, d);
            free(d);
            return r;
        }
        free(d);
    }
    return intern0(s, name);
}

/* A function's name from its debug info: the linkage (mangled) name, else
 * the bare name (*bare set) - all a function with internal linkage (in an
 * anonymous namespace, or a template instantiated on one) has there. */
static const char *die_name(Dwarf_Die *die, bool *bare)
{
    Dwarf_Attribute attr;
    const char *n = NULL;
    *bare = false;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
        dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr))
        n = dwarf_formstring(&attr);
    if (n == NULL && dwarf_attr_integrate(die, DW_AT_name, &attr)) {
        n = dwarf_formstring(&attr);
        *bare = n != NULL;
    }
    return n;
}

/* The compile unit holding pc when the module has no .debug_aranges
 * (clang's default; elfutils 0.188's address lookups need them): scan the
 * units' address ranges. */
static Dwarf_Die *cu_by_scan(Dwfl_Module *mod, Dwarf_Addr pc, Dwarf_Die *buf,
                             Dwarf_Addr *bias)
{
    Dwarf_Die *c = NULL;
    while ((c = dwfl_module_nextcu(mod, c, bias)) != NULL) {
        if (dwarf_haspc(c, pc - *bias) > 0) {
            *buf = *c;
            return buf;
        }
    }
    return NULL;
}

/* Resolve ip (a return address) in module mod: the function and line of
 * the call, and the chain of functions inlined there, innermost first. */
static int resolve(struct symbolizer *s, Dwfl_Module *mod, uint64_t ip,
                   const char *modname, uint64_t offset, struct sym *out)
{
    Dwarf_Addr pc = ip - 1; /* inside the call instruction */
    int n = 0;
    const char *fn = dwfl_module_addrname(mod, pc);
    const char *file = NULL;
    int line = 0;
    Dwfl_Line *l = dwfl_module_getsrc(mod, pc);
    if (l)
        file = dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL);
    Dwarf_Addr bias = 0;
    Dwarf_Die cu_buf;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, &bias);
    if (cu == NULL && (cu = cu_by_scan(mod, pc, &cu_buf, &bias)) != NULL &&
        file == NULL) {
        Dwarf_Line *dl = dwarf_getsrc_die(cu, pc - bias);
        if (dl && (file = dwarf_linesrc(dl, NULL, NULL)) != NULL)
            dwarf_lineno(dl, &line);
    }
    Dwarf_Die *scopes = NULL;
    int ns = cu ? dwarf_getscopes(cu, pc - bias, &scopes) : 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (cu && dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
        files = NULL;
    /* scopes: innermost first; each inlined subroutine's call site is
     * where its caller is */
    const char *cur_file = file;
    int cur_line = line;
    for (int i = 0; i < ns && n < MAX_INLINE - 1; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
            continue;
        bool bare;
        const char *name = die_name(&scopes[i], &bare);
        /* the function itself (not inlined): the symbol table's name at pc
         * is qualified where the bare one is not ("call" vs
         * "c10::impl::...<...>::call(...)") */
        if (bare && tag == DW_TAG_subprogram && fn)
            name = fn;
        out[n] = (struct sym){demangled(s, name ? name : fn), intern0(s, cur_file),
                              cur_line, modname, offset,
                              tag == DW_TAG_inlined_subroutine};
        n++;
        if (tag == DW_TAG_subprogram)
            break;
        Dwarf_Attribute attr;
        Dwarf_Word cf = 0, cl = 0;
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &cf) == 0 &&
            files && cf < nfiles)
            cur_file = dwarf_filesrc(files, cf, NULL, NULL);
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &cl) == 0)
            cur_line = (int)cl;
    }
    free(scopes);
    if (n == 0 && fn) /* symbol table only, no debug info */
        out[n++] = (struct sym){demangled(s, fn), intern0(s, file), line, modname,
                                offset, false};
    return n;
}

int sym_frames(struct symbolizer *s, const struct gmt_frame *f, struct sym *out,
               int max)
{
    struct cached *c;
    HASH_FIND(hh, s->cache, &f->ip, sizeof f->ip, c);
    if (c == NULL && (c = calloc(1, sizeof *c)) != NULL) {
        c->ip = f->ip;
        const char *modname = "?";
        uint64_t offset = f->ip;
        Dwfl_Module *mod = NULL;
        if (f->module >= 0 && (size_t)f->module < s->defs->nmodules) {
            const struct gmt_module_def *m = &s->defs->modules[f->module];
            modname = intern0(s, base_name(m->path));
            offset = f->ip - m->base;
            mod = s->mods ? s->mods[f->module] : NULL;
        }
        c->n = mod ? resolve(s, mod, f->ip, modname, offset, c->frames) : 0;
        const struct gmt_symbol_def *emb;
        if (c->n == 0 && s->demangle_ok &&
            (emb = gmt_defs_symbol(s->defs, f->ip)) != NULL) {
            /* the binary is not here: the name the recorder embedded */
            c->frames[0] = (struct sym){demangled(s, emb->name), NULL, 0, modname,
                                        offset, false};
            c->n = 1;
        }
        if (c->n == 0) {
            c->frames[0] = (struct sym){NULL, NULL, 0, modname, offset, false};
            c->n = 1;
            s->raw++;
        } else {
            s->resolved++;
        }
        HASH_ADD(hh, s->cache, ip, sizeof c->ip, c);
    }
    if (c == NULL) {
        out[0] = (struct sym){NULL, NULL, 0, "?", f->ip, false};
        return 1;
    }
    int n = c->n < max ? c->n : max;
    memcpy(out, c->frames, (size_t)n * sizeof *out);
    return n;
}

const char *sym_format(struct symbolizer *s, const struct sym *f, bool with_line)
{
    if (f->function == NULL)
        snprintf(s->buf, sizeof s->buf, "%s+0x%llx", f->module, f->offset);
    else if (with_line && f->file)
        snprintf(s->buf, sizeof s->buf, "%s (%s:%d)", f->function,
                 base_name(f->file), f->line);
    else
        snprintf(s->buf, sizeof s->buf, "%s", f->function);
    return s->buf;
}

/* Frames in the CUDA runtime or the tracer itself are not the user's. A
 * statically linked runtime lives in the program: its entry points
 * (cudaMalloc, ...) and its internals (libcudart_static_<hash>) are known
 * by name. */
static bool runtime_frame(const struct sym *f)
{
    const char *fn = f->function;
    return !strncmp(f->module, "libcudart", 9) ||
           !strncmp(f->module, "libgpumemtrace", 14) ||
           !strncmp(f->module, "libcuda.so", 10) ||
           (fn && (!strncmp(fn, "libcudart_static_", 17) ||
                   (!strncmp(fn, "cuda", 4) && fn[4] >= 'A' && fn[4] <= 'Z')));
}

/* The interpreter and its calling glue: what runs Python code, which the
 * Python frames describe better. */
static bool interpreter_frame(const struct sym *f)
{
    return !strncmp(f->module, "libpython", 9) ||
           !strncmp(f->module, "python", 6) ||
           !strncmp(f->module, "_ctypes", 7) ||
           !strncmp(f->module, "libffi", 6);
}

int sym_user_frames(struct symbolizer *s, uint32_t stack, struct sym *out,
                    struct gmt_frame *raw, int max, int *npy_out)
{
    struct gmt_stack_def def;
    const struct gmt_stack_def *st = &def;
    *npy_out = 0;
    /* a block the autograd engine made while a backward call waited: its
     * own (native) frames, then the call's Python frames */
    uint32_t caller = 0;
    if (!gmt_bw_pair(s->bw, stack, &stack, &caller))
        caller = 0;
    if (!gmt_defs_stack(s->defs, stack, &def))
        return 0;
    int n = 0;
    bool leading = true;
    uint32_t last = UINT32_MAX;
    for (uint32_t i = 0; i < st->n && n < max; i++) {
        struct sym tmp[MAX_INLINE];
        int k = sym_frames(s, &st->frames[i], tmp, MAX_INLINE);
        if (st->npy && interpreter_frame(&tmp[0]))
            break;
        for (int j = 0; j < k && n < max; j++) {
            if (leading && runtime_frame(&tmp[j]))
                continue;
            leading = false;
            if (raw) /* a function inlined at the frame just given: -2 */
                raw[n] = n && last == i ? (struct gmt_frame){0, -2} : st->frames[i];
            last = i;
            out[n++] = tmp[j];
        }
    }
    int npy = 0;
    /* the native frames are copied out (interned): def can be reused for
     * the call's Python frames, from the backward call outwards (not what
     * it did on its own thread before handing over, _make_grads) */
    uint32_t from = 0;
    if (caller) {
        if (!gmt_defs_stack(s->defs, caller, &def))
            def.npy = 0;
        for (uint32_t i = 0; i < def.npy; i++) {
            const struct gmt_pycode_def *pc = gmt_defs_pycode(s->defs, def.py[i].code);
            if (pc && gmt_bw_call_frame(pc->name, pc->file)) {
                from = i;
                break;
            }
        }
    }
    for (uint32_t i = from; i < st->npy && n < max; i++) {
        const struct gmt_pycode_def *pc = gmt_defs_pycode(s->defs, st->py[i].code);
        struct sym f = {.module = "python", .python = true};
        if (pc) {
            f.function = pc->name;
            f.file = pc->file;
            f.line = gmt_pycode_line(pc, st->py[i].offset);
        } else {
            f.function = "?";
        }
        if (raw)
            raw[n] = (struct gmt_frame){0, -1};
        out[n++] = f;
        npy++;
    }
    *npy_out = npy;
    return n;
}

static int user_frames(struct symbolizer *s, uint32_t stack, struct sym *out, int max,
                       int *npy_out)
{
    return sym_user_frames(s, stack, out, NULL, max, npy_out);
}

/* A native function name without its parameter list, or the return type
 * a template's demangled name starts with: the op's name ("_object*
 * f<&g>(a, b)" -> "f<&g>"). */
static const char *short_name(struct symbolizer *s, const struct sym *f)
{
    const char *t = sym_format(s, f, false); /* in s->buf: copy it */
    if (f->function == NULL)
        return intern0(s, t);
    /* the parameter list is the last top-level (...) group; a space at
     * the top level before it ends a return type */
    size_t start = 0, end = strlen(t), cut = end;
    int depth = 0;
    for (size_t i = 0; i < end; i++) {
        if (t[i] == '<' || t[i] == '(') {
            if (t[i] == '(' && depth == 0 && i > 0)
                cut = i;
            depth++;
        } else if ((t[i] == '>' || t[i] == ')') && depth > 0) {
            depth--;
        } else if (depth == 0 && t[i] == ' ' && cut == end) {
            start = i + 1;
        }
    }
    if (start >= cut)
        start = 0;
    end = cut;
    return intern(s, t + start, end - start);
}

/* Ops that only make memory: the op a user called makes its output
 * through one of these, and is the better name. */
static bool factory_op(const char *name)
{
    static const char *const f[] = {"aten::empty", "aten::new_empty", "aten::_empty",
                                    "aten::empty_like", "aten::empty_strided", NULL};
    for (int i = 0; f[i]; i++)
        if (strncmp(name, f[i], strlen(f[i])) == 0)
            return true;
    return false;
}

/* What made the memory, from a stack's native user frames frames[0..n)
 * (innermost first): the autograd node being evaluated (innermost), else
 * the innermost op that is not a mere factory (the outermost op when all
 * are), else the innermost kernel that is not a factory's, else the
 * outermost op binding - and op_out gets the op as well
 * (NULL if none); NULL when the stack shows none of them. The names are
 * interned. */
static const char *what_of(struct symbolizer *s, const struct sym *frames, int n,
                           const char **op_out, const char **node_out)
{
    const char *node = NULL, *op = NULL, *outer_op = NULL, *binding = NULL, *kernel = NULL;
    char name[160];
    for (int i = 0; i < n; i++) {
        switch (gmt_frame_role(frames[i].function, name, sizeof name)) {
        case GMT_FRAME_NODE:
            if (node == NULL)
                node = intern0(s, name);
            break;
        case GMT_FRAME_OP:
            if (op == NULL && !factory_op(name))
                op = intern0(s, name);
            outer_op = intern0(s, name);
            break;
        case GMT_FRAME_BINDING:
            binding = intern0(s, name);
            break;
        case GMT_FRAME_KERNEL:
            if (kernel == NULL && !factory_op(name))
                kernel = intern0(s, name);
            break;
        default:
            break;
        }
    }
    if (op == NULL)
        op = outer_op ? outer_op : kernel;
    *op_out = op ? op : binding;
    *node_out = node;
    return node ? node : *op_out;
}

/* The innermost of frames[0..n) that is neither machinery nor the
 * engine: what names a native site when no op or node does; NULL when
 * every frame is machinery. */
static const struct sym *first_plain(const struct sym *frames, int n)
{
    char name[8];
    for (int i = 0; i < n; i++) {
        enum gmt_frame_role r = gmt_frame_role(frames[i].function, name, sizeof name);
        if (r != GMT_FRAME_MACHINERY && r != GMT_FRAME_ENGINE && r != GMT_FRAME_KERNEL)
            return &frames[i];
    }
    return NULL;
}

static const char *cached_label(struct symbolizer *s, uint64_t key)
{
    struct label *l;
    HASH_FIND(hh, s->labels, &key, sizeof key, l);
    return l ? l->text : NULL;
}

static const char *store_label(struct symbolizer *s, uint64_t key, const char *text)
{
    struct label *l = calloc(1, sizeof *l);
    const char *t = intern0(s, text);
    if (l) {
        l->key = key;
        l->text = t;
        HASH_ADD(hh, s->labels, key, sizeof l->key, l);
    }
    return t;
}

const char *sym_site(struct symbolizer *s, uint32_t stack, enum site_grain grain,
                     int depth)
{
    if (stack == 0)
        return "(no stack recorded)";
    if (depth < 0)
        depth = 0;
    if (depth > 255)
        depth = 255;
    uint64_t key = (uint64_t)stack << 16 | (uint64_t)grain << 8 | (uint64_t)depth;
    const char *t = cached_label(s, key);
    if (t)
        return t;
    struct sym frames[512];
    int npy;
    int n = user_frames(s, stack, frames, 512, &npy);
    char text[8192];
    size_t len = 0;
    text[0] = '\0';
    /* Python frames first when there are any, from the innermost frame of
     * the user's own code (all of them when none is); the op after them. */
    const struct sym *f = npy ? frames + (n - npy) : frames;
    int nf = npy ? npy : n;
    if (npy) {
        int user = 0;
        while (user < nf && gmt_library_file(f[user].file))
            user++;
        if (user < nf) {
            f += user;
            nf -= user;
        }
    }
    /* After the Python line: the node, the op, or else the outermost
     * native frame (the entry the Python code called). With no Python
     * frames the native frames name the site: the node or op when the
     * stack shows one, else the innermost frame that is not machinery. */
    const char *op_name, *node_name;
    const char *what = what_of(s, frames, n - npy, &op_name, &node_name);
    const char *op = what ? what
                          : npy && n > npy ? short_name(s, &frames[n - npy - 1]) : NULL;
    struct sym named;
    if (npy == 0 && n > 0) {
        const struct sym *plain = first_plain(frames, n);
        if (what && grain != GRAIN_STACK) {
            /* the node or op alone is the site */
            named = (struct sym){.function = what, .module = "", .python = false};
            f = &named;
            nf = 1;
        } else if (plain) {
            f = plain;
            nf = n - (int)(plain - frames);
        }
        op = NULL;
    }
    if (n == 0) {
        snprintf(text, sizeof text, "(stack %u: no user frames)", stack);
    } else if (grain == GRAIN_STACK) {
        int upto = depth ? (depth < nf ? depth : nf) : nf;
        for (int i = 0; i < upto && len < sizeof text - 1; i++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s",
                                    i ? " <- " : "", sym_format(s, &f[i], true));
        if (op && len < sizeof text - 1)
            snprintf(text + len, sizeof text - len, " > %s", op);
    } else {
        int i = depth < nf ? depth : nf - 1;
        len = (size_t)snprintf(text, sizeof text, "%s",
                               sym_format(s, &f[i], grain == GRAIN_LINE));
        if (op && grain == GRAIN_LINE && len < sizeof text - 1)
            snprintf(text + len, sizeof text - len, " > %s", op);
    }
    return store_label(s, key, text);
}

void sym_site_parts(struct symbolizer *s, uint32_t stack, const char **op,
                    const char **node, const char **backward_of)
{
    *op = *node = *backward_of = NULL;
    struct sym frames[512];
    int npy;
    int n = stack ? user_frames(s, stack, frames, 512, &npy) : 0;
    if (n == 0)
        return;
    what_of(s, frames, n - npy, op, node);
    uint32_t real, caller;
    if (npy && gmt_bw_pair(s->bw, stack, &real, &caller)) {
        /* the innermost frame of the user's code among the call's */
        const struct sym *f = frames + (n - npy);
        int i = 0;
        while (i < npy - 1 && gmt_library_file(f[i].file))
            i++;
        *backward_of = intern0(s, sym_format(s, &f[i], true));
    }
}

bool sym_native_any(struct symbolizer *s, uint32_t stack,
                    bool (*pred)(const struct sym *f, int index))
{
    struct sym frames[512];
    int npy = 0;
    int n = stack ? user_frames(s, stack, frames, 512, &npy) : 0;
    for (int i = 0; i < n - npy; i++)
        if (pred(&frames[i], i))
            return true;
    return false;
}

/* A library's module: a method named forward. */
static bool forward_frame(const struct sym *f)
{
    size_t n = f->function ? strlen(f->function) : 0;
    return n >= 8 && strcmp(f->function + n - 8, ".forward") == 0;
}

const char *sym_layer(struct symbolizer *s, uint32_t stack)
{
    uint64_t key = (uint64_t)stack << 16 | 4u << 8;
    const char *t = cached_label(s, key);
    if (t)
        return *t ? t : NULL;
    struct sym frames[512];
    int npy = 0;
    int n = stack ? user_frames(s, stack, frames, 512, &npy) : 0;
    const struct sym *f = frames + (n - npy), *any = NULL, *own = NULL;
    /* the library frames under the user's innermost line */
    for (int i = 0; i < npy && gmt_library_file(f[i].file); i++) {
        if (!forward_frame(&f[i]))
            continue;
        if (any == NULL)
            any = &f[i];
        /* torch's own package: site-packages/torch/ (not any directory
         * named torch: a virtual environment may be) */
        if (own == NULL && !strstr(f[i].file ? f[i].file : "", "-packages/torch/"))
            own = &f[i];
    }
    const struct sym *layer = own ? own : any;
    const char *r = store_label(s, key, layer ? sym_format(s, layer, true) : "");
    return r && *r ? r : NULL;
}

const char *sym_folded(struct symbolizer *s, uint32_t stack, int depth)
{
    uint64_t key = (uint64_t)stack << 16 | 3u << 8 | (uint64_t)(depth & 255);
    const char *t = cached_label(s, key);
    if (t)
        return t;
    struct sym frames[512];
    int npy = 0;
    int n = stack ? user_frames(s, stack, frames, 512, &npy) : 0;
    int from = depth && depth < n ? depth : n;
    char text[16384];
    size_t len = 0;
    text[0] = '\0';
    /* outermost first: the Python frames, then the native ones under them */
    for (int i = from - 1; i >= 0 && len < sizeof text - 1; i--) {
        const char *fr = frames[i].python ? sym_format(s, &frames[i], true)
                                          : sym_format(s, &frames[i], false);
        size_t at = len + (len ? 1 : 0);
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s",
                                len ? ";" : "", fr);
        /* folded format: ';' separates frames (a ';' inside a frame's
         * name becomes ':'), the line ends with a count */
        for (size_t k = at; k < len && k < sizeof text; k++)
            if (text[k] == ';' || text[k] == '\n')
                text[k] = text[k] == ';' ? ':' : ' ';
    }
    if (len > sizeof text - 1)
        len = sizeof text - 1;
    if (len == 0)
        snprintf(text, sizeof text, "[no stack]");
    return store_label(s, key, text);
}

void sym_counts(const struct symbolizer *s, size_t *resolved, size_t *raw)
{
    *resolved = s->resolved;
    *raw = s->raw;
}
