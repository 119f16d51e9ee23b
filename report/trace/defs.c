/* defs.c - parsing the trace's definition records into lookup tables.
 *
 * Payload grammars are in gmt_format.h and docs/trace-format.md. Every
 * length is checked against the payload before it is used; trailing bytes
 * a newer minor version may append are ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defs.h"
#include "gmttrace.h"

struct cur {
    const uint8_t *p, *end;
    bool bad;
};

static uint64_t u(struct cur *c)
{
    uint64_t v = 0;
    const uint8_t *p = c->bad ? NULL : gmt_get_varint(c->p, c->end, &v);
    if (p == NULL) {
        c->bad = true;
        return 0;
    }
    c->p = p;
    return v;
}

static int64_t s(struct cur *c)
{
    return gmt_unzigzag(u(c));
}

/* A length-prefixed byte string; NULL (and c->bad) if it overruns. */
static const uint8_t *str(struct cur *c, size_t *len, size_t max)
{
    uint64_t n = u(c);
    if (c->bad || n > (uint64_t)(c->end - c->p) || n > max) {
        c->bad = true;
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n;
    *len = (size_t)n;
    return p;
}

/* Untrusted bytes to a printable, valid UTF-8 C string: control bytes
 * and invalid UTF-8 become '?', NULs become nul_as. */
static char *dup_printable(const uint8_t *p, size_t n, char nul_as)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, p, n);
    s[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0')
            s[i] = nul_as;
    gmt_printable(s);
    /* a command line ends with a NUL: don't leave a trailing separator */
    while (n > 0 && s[n - 1] == nul_as && nul_as != '\0')
        n--;
    s[n] = '\0';
    return s;
}

static int process(struct gmt_defs *d, struct cur *c)
{
    struct gmt_process_def *p = &d->process;
    size_t ncmd = 0, nhost = 0, nexe = 0;
    p->pid = u(c);
    p->ppid = u(c);
    p->session = u(c);
    u(c); /* file index; the header has it */
    p->realtime_ns = u(c);
    const uint8_t *cmd = str(c, &ncmd, SIZE_MAX);
    const uint8_t *host = str(c, &nhost, 4096);
    const uint8_t *exe = str(c, &nexe, 65536);
    if (c->bad)
        return -1;
    free(p->cmdline);
    free(p->host);
    free(p->exe);
    p->cmdline = dup_printable(cmd, ncmd, ' ');
    p->host = dup_printable(host, nhost, '?');
    p->exe = dup_printable(exe, nexe, '?');
    p->present = p->cmdline && p->host && p->exe;
    return 0;
}

#define MAX_MODULES (1u << 20)

static int module(struct gmt_defs *d, struct cur *c)
{
    struct gmt_module_def m = {0};
    size_t nbid = 0, npath = 0;
    m.id = (uint32_t)u(c);
    m.base = u(c);
    m.lo = u(c);
    m.hi = u(c);
    const uint8_t *bid = str(c, &nbid, sizeof m.build_id);
    const uint8_t *path = str(c, &npath, 65536);
    if (c->bad || m.lo >= m.hi || d->nmodules >= MAX_MODULES)
        return -1;
    memcpy(m.build_id, bid, nbid);
    m.build_id_len = (uint32_t)nbid;
    m.path = dup_printable(path, npath, '?');
    if (m.path == NULL)
        return -1;
    if (d->nmodules == d->cap_modules) {
        size_t cap = d->cap_modules ? 2 * d->cap_modules : 64;
        struct gmt_module_def *mm = realloc(d->modules, cap * sizeof *mm);
        if (mm)
            d->modules = mm;
        size_t *aa = mm ? realloc(d->active, cap * sizeof *aa) : NULL;
        if (aa)
            d->active = aa;
        if (!mm || !aa) {
            free(m.path);
            return -1;
        }
        d->cap_modules = cap;
    }
    /* The active set is sorted and non-overlapping, so what the new
     * mapping replaces (objects unloaded since) is one run of entries:
     * from the first that ends after m.lo, while they start before m.hi. */
    size_t lo = 0, hi = d->nactive;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->modules[d->active[mid]].hi <= m.lo)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < d->nactive && d->modules[d->active[end]].lo < m.hi)
        end++;
    memmove(&d->active[lo + 1], &d->active[end],
            (d->nactive - end) * sizeof *d->active);
    d->nactive = d->nactive - (end - lo) + 1;
    d->modules[d->nmodules] = m;
    d->active[lo] = d->nmodules++;
    return 0;
}

static int32_t module_at(const struct gmt_defs *d, uint64_t ip)
{
    size_t lo = 0, hi = d->nactive;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct gmt_module_def *m = &d->modules[d->active[mid]];
        if (ip < m->lo)
            hi = mid;
        else if (ip >= m->hi)
            lo = mid + 1;
        else
            return (int32_t)d->active[mid];
    }
    return -1;
}

static int stack(struct gmt_defs *d, struct cur *c)
{
    uint64_t id = u(c), n = u(c);
    if (c->bad || id == 0 || id > UINT32_MAX || n > GMT_MAX_STACK_DEPTH)
        return -1;
    uint32_t id32 = (uint32_t)id;
    if (stacks_has(&d->stacks, id32))
        return 0; /* the recorder never reuses an id; keep the first */
    struct gmt_frame f[GMT_MAX_STACK_DEPTH];
    struct gmt_pyframe py[GMT_MAX_PY_FRAMES];
    uint64_t ip = 0;
    for (uint64_t i = 0; i < n && !c->bad; i++) {
        ip += (uint64_t)s(c);
        f[i].ip = ip;
        f[i].module = module_at(d, ip);
    }
    /* Appended: Python frames, (code id, offset) pairs. */
    uint64_t npy = c->bad || c->p == c->end ? 0 : u(c);
    if (npy > GMT_MAX_PY_FRAMES)
        c->bad = true;
    for (uint64_t i = 0; i < npy && !c->bad; i++) {
        uint64_t code = u(c);
        py[i].offset = s(c);
        if (code == 0 || code > UINT32_MAX)
            c->bad = true;
        py[i].code = (uint32_t)code;
    }
    if (c->bad || stacks_add(&d->stacks, id32, f, (uint32_t)n, py, (uint32_t)npy) != 0)
        return -1;
    d->nstacks++;
    return 0;
}

static int thread(struct gmt_defs *d, const struct gmt_rec *rec, struct cur *c)
{
    uint64_t tid = u(c);
    if (c->bad)
        return -1;
    struct gmt_thread_def *t;
    HASH_FIND(hh, d->threads, &rec->thread, sizeof rec->thread, t);
    if (t == NULL) {
        if ((t = calloc(1, sizeof *t)) == NULL)
            return -1;
        t->index = rec->thread;
        HASH_ADD(hh, d->threads, index, sizeof t->index, t);
        d->nthreads++;
    }
    t->tid = tid;
    size_t n = (size_t)(c->end - c->p);
    if (n > 16)
        n = 16;
    char *name = dup_printable(c->p, n, '?');
    if (name) {
        snprintf(t->name, sizeof t->name, "%s", name);
        free(name);
    }
    return 0;
}

static int device(struct gmt_defs *d, struct cur *c)
{
    struct gmt_device_def dev = {0};
    size_t nname = 0, nuuid = 0;
    uint64_t ord = u(c);
    const uint8_t *name = str(c, &nname, 256);
    dev.total_mem = u(c);
    const uint8_t *uuid = str(c, &nuuid, 16);
    uint64_t v[5];
    for (int i = 0; i < 5; i++)
        v[i] = u(c);
    if (c->bad || ord > 0xffff)
        return -1;
    dev.ordinal = (uint32_t)ord;
    char *nm = dup_printable(name, nname, '?');
    if (nm == NULL)
        return -1;
    snprintf(dev.name, sizeof dev.name, "%s", nm);
    free(nm);
    memcpy(dev.uuid, uuid, nuuid);
    dev.pci_domain = (uint32_t)v[0];
    dev.pci_bus = (uint32_t)v[1];
    dev.pci_device = (uint32_t)v[2];
    dev.cc_major = (uint32_t)v[3];
    dev.cc_minor = (uint32_t)v[4];
    for (size_t i = 0; i < d->ndevices; i++) {
        if (d->devices[i].ordinal == dev.ordinal) {
            d->devices[i] = dev;
            return 0;
        }
    }
    struct gmt_device_def *nd =
        realloc(d->devices, (d->ndevices + 1) * sizeof *nd);
    if (nd == NULL)
        return -1;
    d->devices = nd;
    d->devices[d->ndevices++] = dev;
    return 0;
}

static int symbol(struct gmt_defs *d, struct cur *c)
{
    uint64_t ip = u(c), start = u(c);
    size_t n = 0;
    const uint8_t *name = str(c, &n, 4096);
    if (c->bad)
        return -1;
    struct gmt_symbol_def *s;
    HASH_FIND(hh, d->symbols, &ip, sizeof ip, s);
    if (s)
        return 0;
    if ((s = calloc(1, sizeof *s)) == NULL ||
        (s->name = dup_printable(name, n, '?')) == NULL) {
        free(s);
        return -1;
    }
    s->ip = ip;
    s->start = start;
    HASH_ADD(hh, d->symbols, ip, sizeof s->ip, s);
    d->nsymbols++;
    return 0;
}

static int pycode(struct gmt_defs *d, struct cur *c)
{
    uint64_t id = u(c), first = u(c), format = u(c);
    size_t nfile = 0, nname = 0;
    const uint8_t *file = str(c, &nfile, 4096);
    const uint8_t *name = str(c, &nname, 4096);
    if (c->bad || id == 0 || id > UINT32_MAX || first > INT32_MAX)
        return -1;
    struct gmt_pycode_def *pc;
    uint32_t id32 = (uint32_t)id;
    HASH_FIND(hh, d->pycodes, &id32, sizeof id32, pc);
    if (pc != NULL)
        return 0;
    size_t nt = (size_t)(c->end - c->p);
    if ((pc = calloc(1, sizeof *pc)) == NULL ||
        (pc->file = dup_printable(file, nfile, '?')) == NULL ||
        (pc->name = dup_printable(name, nname, '?')) == NULL ||
        (pc->table = malloc(nt ? nt : 1)) == NULL) {
        if (pc) {
            free(pc->file);
            free(pc->name);
        }
        free(pc);
        return -1;
    }
    memcpy(pc->table, c->p, nt);
    pc->table_len = (uint32_t)nt;
    pc->id = id32;
    pc->firstlineno = (int)first;
    pc->format = format > 255 ? 255 : (unsigned)format;
    HASH_ADD(hh, d->pycodes, id, sizeof pc->id, pc);
    d->npycodes++;
    return 0;
}

const struct gmt_pycode_def *gmt_defs_pycode(const struct gmt_defs *d,
                                             uint32_t id)
{
    struct gmt_pycode_def *pc;
    HASH_FIND(hh, d->pycodes, &id, sizeof id, pc);
    return pc;
}

/* 3.9 co_lnotab: (byte delta, signed line delta) pairs. */
/* Lines are summed in 64 bits: a hostile table must not overflow them. */
static int64_t line_lnotab(const struct gmt_pycode_def *pc, int64_t addrq)
{
    int64_t line = pc->firstlineno;
    int64_t addr = 0;
    for (uint32_t i = 0; i + 1 < pc->table_len; i += 2) {
        addr += pc->table[i];
        if (addr > addrq)
            break;
        line += (int8_t)pc->table[i + 1];
    }
    return line;
}

/* 3.10 co_linetable: (byte delta, signed line delta or -128: none). */
static int64_t line_310(const struct gmt_pycode_def *pc, int64_t addrq)
{
    int64_t computed = pc->firstlineno, line = -1;
    int64_t end = 0;
    for (uint32_t i = 0; i + 1 < pc->table_len; i += 2) {
        int64_t start = end;
        end += pc->table[i];
        int8_t ld = (int8_t)pc->table[i + 1];
        if (ld == -128) {
            line = -1;
        } else {
            computed += ld;
            line = computed;
        }
        if (start <= addrq && addrq < end)
            return line;
    }
    return -1;
}

/* 3.11+ location table (CPython's Objects/locations.md): entries of a
 * first byte 1cccclll (code c, length l+1 code units) and varints. */
static unsigned loc_varint(const uint8_t *p, const uint8_t *end, const uint8_t **next)
{
    unsigned v = 0, shift = 0;
    while (p < end) {
        unsigned b = *p++;
        if (shift < 30)
            v |= (b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *next = p;
    return v;
}

static int64_t line_locations(const struct gmt_pycode_def *pc, int64_t addrq)
{
    const uint8_t *p = pc->table, *end = pc->table + pc->table_len;
    int64_t line = pc->firstlineno;
    int64_t stop = 0;
    while (p < end) {
        unsigned first = *p;
        if (!(first & 0x80))
            return -1; /* not at an entry: a cut or corrupt table */
        unsigned code = (first >> 3) & 15;
        int delta = 0;
        const uint8_t *q = p + 1;
        if (code == 13 || code == 14) {
            unsigned v = loc_varint(q, end, &q);
            delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
        } else if (code >= 10 && code <= 12) {
            delta = (int)code - 10;
        }
        line += delta;
        int64_t start = stop;
        stop += ((first & 7) + 1) * 2;
        if (start <= addrq && addrq < stop)
            return code == 15 ? -1 : line;
        for (p++; p < end && !(*p & 0x80); p++)
            ;
    }
    return -1;
}

int gmt_pycode_line(const struct gmt_pycode_def *pc, int64_t offset)
{
    if (offset < 0)
        return pc->firstlineno;
    int64_t line = pc->format == 0 ? line_lnotab(pc, offset)
                 : pc->format == 1 ? line_310(pc, offset)
                 : pc->format == 2 ? line_locations(pc, offset) : -1;
    return line < 0 || line > INT32_MAX ? pc->firstlineno : (int)line;
}

const struct gmt_symbol_def *gmt_defs_symbol(const struct gmt_defs *d,
                                             uint64_t ip)
{
    struct gmt_symbol_def *s;
    HASH_FIND(hh, d->symbols, &ip, sizeof ip, s);
    return s;
}

/* What the recorder wanted the reader to know (Python frames off, ...).
 * The first 64 are kept. */
static int note(struct gmt_defs *d, struct cur *c)
{
    uint64_t level = u(c);
    if (c->bad)
        return -1;
    if (d->nnotes_kept >= 64)
        return 0;
    size_t n = (size_t)(c->end - c->p);
    if (n > 1024)
        n = 1024;
    char *text = dup_printable(c->p, n, '?');
    char *line = text ? malloc(n + 16) : NULL;
    char **nn = line ? realloc(d->notes, (d->nnotes_kept + 1) * sizeof *nn) : NULL;
    if (nn == NULL) {
        free(text);
        free(line);
        return 0; /* out of memory: the note is lost, the trace is fine */
    }
    snprintf(line, n + 16, "%s%s", level ? "warning: " : "", text);
    free(text);
    d->notes = nn;
    d->notes[d->nnotes_kept++] = line;
    return 0;
}

#define MAX_STRING 4096

/* A STRING: id, then the bytes. The recorder may repeat a definition
 * (same id, same text); the first one stays. */
static int string(struct gmt_defs *d, struct cur *c)
{
    uint64_t id = u(c);
    if (c->bad || id == 0 || id > UINT32_MAX)
        return -1;
    uint32_t id32 = (uint32_t)id;
    struct gmt_string_def *sd;
    HASH_FIND(hh, d->strings, &id32, sizeof id32, sd);
    if (sd != NULL)
        return 0;
    size_t n = (size_t)(c->end - c->p);
    if ((sd = calloc(1, sizeof *sd)) == NULL ||
        (sd->text = dup_printable(c->p, n > MAX_STRING ? MAX_STRING : n,
                                  '?')) == NULL) {
        free(sd);
        return -1;
    }
    sd->id = id32;
    HASH_ADD(hh, d->strings, id, sizeof sd->id, sd);
    return 0;
}

const char *gmt_defs_string(const struct gmt_defs *d, uint64_t id)
{
    struct gmt_string_def *sd;
    uint32_t id32 = (uint32_t)id;
    if (id > UINT32_MAX)
        return NULL;
    HASH_FIND(hh, d->strings, &id32, sizeof id32, sd);
    return sd ? sd->text : NULL;
}

void gmt_defs_add(struct gmt_defs *d, const struct gmt_rec *rec)
{
    struct cur c = {rec->payload, rec->payload + rec->len, false};
    int rc = 0;
    const char *what = "extension";
    switch (rec->ext) {
    case GMT_X_THREAD:
        what = "thread";
        rc = thread(d, rec, &c);
        break;
    case GMT_X_PROCESS:
        what = "process";
        rc = process(d, &c);
        break;
    case GMT_X_MODULE:
        what = "module";
        rc = module(d, &c);
        break;
    case GMT_X_STACK:
        what = "stack";
        rc = stack(d, &c);
        break;
    case GMT_X_DEVICE:
        what = "device";
        rc = device(d, &c);
        break;
    case GMT_X_SYMBOL:
        what = "symbol";
        rc = symbol(d, &c);
        break;
    case GMT_X_PYCODE:
        what = "Python code";
        rc = pycode(d, &c);
        break;
    case GMT_X_STRING:
        what = "string";
        rc = string(d, &c);
        d->nstrings++;
        break;
    case GMT_X_NOTE:
        what = "note";
        rc = note(d, &c);
        d->nnotes++;
        break;
    case GMT_X_VMM: { /* an event, not a definition: the replay takes it */
        struct gmt_vmm v;
        what = "virtual memory";
        rc = gmt_vmm_decode(rec, &v);
        break;
    }
    case GMT_X_MEMPOOL: { /* likewise */
        struct gmt_mempool m;
        what = "memory pool";
        rc = gmt_mempool_decode(rec, &m);
        break;
    }
    case GMT_X_PROC_MEM: { /* likewise */
        struct gmt_proc_mem m;
        what = "process memory";
        rc = gmt_proc_mem_decode(rec, &m);
        break;
    }
    case GMT_X_FW: { /* likewise */
        struct gmt_fw f;
        what = "framework allocator";
        rc = gmt_fw_decode(rec, &f);
        break;
    }
    case GMT_X_RETENTION: /* a capture's line: `retention` reads them */
        d->nretention++;
        break;
    default:
        d->nunknown++; /* from a newer minor version: skipped */
        break;
    }
    if (rc != 0) {
        /* skipped: stacks, modules and names it would define read as
         * unknown; the records around it stand */
        if (d->malformed++ == 0)
            snprintf(d->malformed_first, sizeof d->malformed_first,
                     "malformed %s definition (record %llu)", what,
                     (unsigned long long)rec->seq);
    }
}

bool gmt_damage(const struct gmt_reader *rd, const struct gmt_defs *d, char *buf,
                size_t len)
{
    char rb[400];
    bool reader = rd && gmt_reader_damage(rd, rb, sizeof rb);
    if (!reader && !d->malformed)
        return false;
    if (reader && d->malformed)
        snprintf(buf, len, "%s; %zu malformed definition%s skipped (first: %s)", rb,
                 d->malformed, d->malformed == 1 ? "" : "s", d->malformed_first);
    else if (reader)
        snprintf(buf, len, "%s", rb);
    else
        snprintf(buf, len, "%zu malformed definition%s skipped (first: %s)",
                 d->malformed, d->malformed == 1 ? "" : "s", d->malformed_first);
    return true;
}

bool gmt_defs_stack(const struct gmt_defs *d, uint32_t id,
                    struct gmt_stack_def *out)
{
    return stacks_get(&d->stacks, id, out);
}

const struct gmt_thread_def *gmt_defs_thread(const struct gmt_defs *d,
                                             uint32_t index)
{
    struct gmt_thread_def *t;
    HASH_FIND(hh, d->threads, &index, sizeof index, t);
    return t;
}

const struct gmt_device_def *gmt_defs_device(const struct gmt_defs *d,
                                             uint32_t ordinal)
{
    for (size_t i = 0; i < d->ndevices; i++)
        if (d->devices[i].ordinal == ordinal)
            return &d->devices[i];
    return NULL;
}

void gmt_defs_free(struct gmt_defs *d)
{
    stacks_free(&d->stacks);
    struct gmt_pycode_def *pc, *pctmp;
    HASH_ITER(hh, d->pycodes, pc, pctmp) {
        HASH_DEL(d->pycodes, pc);
        free(pc->file);
        free(pc->name);
        free(pc->table);
        free(pc);
    }
    struct gmt_string_def *sd, *sdtmp;
    HASH_ITER(hh, d->strings, sd, sdtmp) {
        HASH_DEL(d->strings, sd);
        free(sd->text);
        free(sd);
    }
    struct gmt_symbol_def *sy, *sytmp;
    HASH_ITER(hh, d->symbols, sy, sytmp) {
        HASH_DEL(d->symbols, sy);
        free(sy->name);
        free(sy);
    }
    struct gmt_thread_def *t, *ttmp;
    HASH_ITER(hh, d->threads, t, ttmp) {
        HASH_DEL(d->threads, t);
        free(t);
    }
    for (size_t i = 0; i < d->nnotes_kept; i++)
        free(d->notes[i]);
    free(d->notes);
    for (size_t i = 0; i < d->nmodules; i++)
        free(d->modules[i].path);
    free(d->modules);
    free(d->active);
    free(d->devices);
    free(d->process.cmdline);
    free(d->process.host);
    free(d->process.exe);
    memset(d, 0, sizeof *d);
}

int gmt_vmm_decode(const struct gmt_rec *rec, struct gmt_vmm *out)
{
    const uint8_t *p = rec->payload, *end = rec->payload + rec->len;
    uint64_t v[8];
    for (int i = 0; i < 8; i++)
        if ((p = gmt_get_varint(p, end, &v[i])) == NULL)
            return -1;
    if (v[0] < GMT_API_CU_MEM_MAP || v[0] > GMT_API_CU_MEM_ADDRESS_FREE ||
        v[1] > UINT32_MAX || v[2] > UINT32_MAX || v[7] > UINT32_MAX ||
        v[4] > GMT_SIZE_MAX)
        return -1;
    *out = (struct gmt_vmm){(unsigned)v[0], (uint32_t)v[1], (uint32_t)v[2],
                            (uint32_t)v[7], v[3], v[4], v[5], v[6]};
    return 0;
}

int gmt_mempool_decode(const struct gmt_rec *rec, struct gmt_mempool *out)
{
    const uint8_t *p = rec->payload, *end = rec->payload + rec->len;
    uint64_t v[6];
    for (int i = 0; i < 6; i++)
        if ((p = gmt_get_varint(p, end, &v[i])) == NULL)
            return -1;
    if (v[0] > UINT32_MAX || v[2] > GMT_SIZE_MAX || v[3] > GMT_SIZE_MAX ||
        v[4] > GMT_SIZE_MAX || v[5] > GMT_SIZE_MAX)
        return -1;
    *out = (struct gmt_mempool){(uint32_t)v[0], v[1], v[2], v[3], v[4], v[5]};
    return 0;
}

int gmt_proc_mem_decode(const struct gmt_rec *rec, struct gmt_proc_mem *out)
{
    const uint8_t *p = rec->payload, *end = rec->payload + rec->len;
    uint64_t v[2];
    for (int i = 0; i < 2; i++)
        if ((p = gmt_get_varint(p, end, &v[i])) == NULL)
            return -1;
    if (v[0] > UINT32_MAX || v[1] > GMT_SIZE_MAX)
        return -1;
    *out = (struct gmt_proc_mem){(uint32_t)v[0], v[1]};
    return 0;
}

int gmt_fw_decode(const struct gmt_rec *rec, struct gmt_fw *out)
{
    const uint8_t *p = rec->payload, *end = rec->payload + rec->len;
    uint64_t v[7];
    for (int i = 0; i < 7; i++)
        if ((p = gmt_get_varint(p, end, &v[i])) == NULL)
            return -1;
    /* devices as the reader bounds them; sizes as every other record */
    if (v[0] > UINT32_MAX || v[1] > 0xffff || v[3] > GMT_SIZE_MAX ||
        v[2] + v[3] < v[2] || v[6] > UINT32_MAX)
        return -1;
    *out = (struct gmt_fw){(unsigned)v[0], (uint32_t)v[1], (uint32_t)v[6],
                           v[2], v[3], v[4], v[5]};
    return 0;
}
