/* export_pprof.c - `export --format pprof`: a gzipped profile.proto.
 *
 * The profile pprof reads (github.com/google/pprof, proto/profile.proto),
 * shaped as Go's heap profiles are, so `go tool pprof` and its web UI know
 * the sample types: inuse_objects/count, inuse_space/bytes,
 * alloc_objects/count, alloc_space/bytes, inuse_space the default.
 * "In use" is what was live at the peak of requested device memory (what
 * `peak` and `flamegraph` show); "alloc" everything allocated over the
 * run. One sample per site (a recorded stack), its locations innermost
 * first. A location is a recorded native frame - its address, in the
 * mapping of the module it lies in, with one line per function inlined
 * there, innermost first - or a Python frame (file, line, function; no
 * mapping). Mappings are the trace's modules with their build ids, marked
 * as symbolized already (pprof then keeps our names and does not look for
 * the binaries). Functions and strings are written once each.
 *
 * Protocol buffers are encoded by hand: varints and length-delimited
 * fields, each message built in a small buffer and written as a field of
 * the Profile message, which is written field by field as it goes (a
 * message's fields may come in any order), so only the tables of
 * distinct strings, functions and locations stay in memory.
 *
 * gzip without zlib: the stream is deflate's stored blocks (RFC 1951,
 * 3.2.4) in a gzip member (RFC 1952) with its CRC-32 - valid gzip that
 * pprof, gunzip and zlib read. Compression is given up: a profile holds
 * sites, not events, so it stays small, and the report code - linked into
 * gpumemreport, the launcher, the unit tests and the fuzz and sanitizer
 * builds - needs no new library.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "export.h"

/* ---- gzip of stored blocks ---------------------------------------------------- */

#define GZ_BLOCK 65535u /* a stored block's most */

struct gz {
    FILE *f;
    uint32_t crc, size;
    unsigned char buf[GZ_BLOCK];
    size_t n;
};

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static void gz_block(struct gz *z, bool last)
{
    unsigned char h[5] = {last ? 1 : 0, (unsigned char)(z->n & 255),
                          (unsigned char)(z->n >> 8), (unsigned char)(~z->n & 255),
                          (unsigned char)((~z->n >> 8) & 255)};
    fwrite(h, 1, 5, z->f);
    fwrite(z->buf, 1, z->n, z->f);
    z->n = 0;
}

static void gz_write(struct gz *z, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        z->crc = crc_table[(z->crc ^ b[i]) & 255] ^ (z->crc >> 8);
    z->size += (uint32_t)len; /* ISIZE: the length modulo 2^32 */
    while (len) {
        size_t k = GZ_BLOCK - z->n < len ? GZ_BLOCK - z->n : len;
        memcpy(z->buf + z->n, b, k);
        z->n += k;
        b += k;
        len -= k;
        if (z->n == GZ_BLOCK)
            gz_block(z, false);
    }
}

static void gz_begin(struct gz *z, FILE *f)
{
    static const unsigned char h[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 /* Unix */};
    crc_init();
    z->f = f;
    z->crc = 0xffffffffu;
    fwrite(h, 1, sizeof h, f);
}

static void gz_end(struct gz *z)
{
    gz_block(z, true);
    uint32_t crc = ~z->crc;
    unsigned char t[8] = {(unsigned char)crc, (unsigned char)(crc >> 8),
                          (unsigned char)(crc >> 16), (unsigned char)(crc >> 24),
                          (unsigned char)z->size, (unsigned char)(z->size >> 8),
                          (unsigned char)(z->size >> 16), (unsigned char)(z->size >> 24)};
    fwrite(t, 1, 8, z->f);
}

/* ---- protobuf ------------------------------------------------------------------- */

/* A message being built. */
struct pb {
    unsigned char *p;
    size_t n, cap;
    bool nomem;
};

static void pb_bytes(struct pb *b, const void *p, size_t len)
{
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (q == NULL) {
            b->nomem = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, len);
    b->n += len;
}

static void pb_varint(struct pb *b, uint64_t v)
{
    uint8_t buf[GMT_VARINT_MAX];
    pb_bytes(b, buf, (size_t)(gmt_put_varint(buf, v) - buf));
}

/* field `f` as a varint (wire type 0); zero is the default: left out */
static void pb_uint(struct pb *b, unsigned f, uint64_t v)
{
    if (v == 0)
        return;
    pb_varint(b, (uint64_t)f << 3);
    pb_varint(b, v);
}

/* field `f`, length-delimited (wire type 2) */
static void pb_len(struct pb *b, unsigned f, const void *p, size_t len)
{
    pb_varint(b, (uint64_t)f << 3 | 2);
    pb_varint(b, len);
    pb_bytes(b, p, len);
}

/* ---- the tables: strings, functions, locations ------------------------------------ */

struct entry {
    char *key;
    uint64_t id;
    UT_hash_handle hh;
};

struct pp {
    struct loaded *l;
    struct gz z;
    struct pb msg, tmp;            /* a message, and one nested in it */
    struct entry *strings, *functions, *locations;
    uint64_t nstrings, nfunctions, nlocations;
    bool *mapped;                  /* per module: a location lies in it */
    struct sym *frames;
    struct gmt_frame *raw;
    uint64_t *ids;                 /* a sample's location ids */
    bool nomem;
};

/* The id for key in table t; *fresh when it was added now (with the next
 * id, 0-based for strings, 1-based otherwise). 0 and nomem on failure. */
static uint64_t intern(struct pp *p, struct entry **t, uint64_t *count, const char *key,
                       bool from_one, bool *fresh)
{
    struct entry *e;
    *fresh = false;
    HASH_FIND_STR(*t, key, e);
    if (e)
        return e->id;
    if ((e = calloc(1, sizeof *e)) == NULL || (e->key = strdup(key)) == NULL) {
        free(e);
        p->nomem = true;
        return 0;
    }
    e->id = (*count)++ + (from_one ? 1 : 0);
    HASH_ADD_KEYPTR(hh, *t, e->key, strlen(e->key), e);
    *fresh = true;
    return e->id;
}

/* Write the Profile's field `f` (a nested message in p->tmp). */
static void emit(struct pp *p, unsigned f, struct pb *m)
{
    struct pb out = {0};
    pb_len(&out, f, m->p, m->n);
    p->nomem |= out.nomem || m->nomem;
    if (!out.nomem)
        gz_write(&p->z, out.p, out.n);
    free(out.p);
    m->n = 0;
}

/* The index of string s in string_table; written at once when new. */
static uint64_t str(struct pp *p, const char *s)
{
    bool fresh;
    uint64_t id = intern(p, &p->strings, &p->nstrings, s ? s : "", false, &fresh);
    if (fresh) {
        struct pb out = {0};
        pb_len(&out, 6, s ? s : "", s ? strlen(s) : 0);
        p->nomem |= out.nomem;
        if (!out.nomem)
            gz_write(&p->z, out.p, out.n);
        free(out.p);
    }
    return id;
}

static uint64_t function(struct pp *p, const char *name, const char *file)
{
    char key[4096];
    snprintf(key, sizeof key, "%s\1%s", name, file ? file : "");
    bool fresh;
    uint64_t id = intern(p, &p->functions, &p->nfunctions, key, true, &fresh);
    if (fresh) {
        uint64_t n = str(p, name), fl = str(p, file ? file : "");
        struct pb m = {0};
        pb_uint(&m, 1, id);
        pb_uint(&m, 2, n);
        pb_uint(&m, 3, n);
        pb_uint(&m, 4, fl);
        emit(p, 5, &m);
        free(m.p);
    }
    return id;
}

/* The location of frames f[0..n) (one recorded frame and the functions
 * inlined at it, innermost first). */
static uint64_t location(struct pp *p, const struct sym *f, const struct gmt_frame *raw, int n)
{
    char key[4096];
    if (raw->ip)
        snprintf(key, sizeof key, "n\1%" PRIx64 "\1%d", raw->ip, raw->module);
    else
        snprintf(key, sizeof key, "p\1%s\1%s\1%d", f->function ? f->function : "",
                 f->file ? f->file : "", f->line);
    bool fresh;
    uint64_t id = intern(p, &p->locations, &p->nlocations, key, true, &fresh);
    if (!fresh)
        return id;
    struct pb m = {0};
    pb_uint(&m, 1, id);
    const struct gmt_defs *d = &p->l->r.defs;
    if (raw->ip && raw->module >= 0 && (size_t)raw->module < d->nmodules) {
        pb_uint(&m, 2, (uint64_t)raw->module + 1);
        p->mapped[raw->module] = true;
    }
    pb_uint(&m, 3, raw->ip);
    for (int i = 0; i < n; i++) {
        char buf[96];
        uint64_t fn = function(p, export_frame_name(&f[i], buf, sizeof buf), f[i].file);
        struct pb line = {0};
        pb_uint(&line, 1, fn);
        pb_uint(&line, 2, f[i].line > 0 ? (uint64_t)f[i].line : 0);
        pb_len(&m, 4, line.p, line.n);
        m.nomem |= line.nomem;
        free(line.p);
    }
    emit(p, 4, &m);
    free(m.p);
    return id;
}

/* ---- the profile ------------------------------------------------------------------ */

static void sample(struct pp *p, const struct site *s)
{
    int n = export_frames(p->l, s->stack, p->frames, p->raw, EXPORT_MAX_FRAMES);
    size_t k = 0;
    if (n == 0) { /* no stack: one location that says so */
        struct sym none = {.function = s->stack ? "[stack not in the trace]" : "[no stack]",
                           .module = "?"};
        struct gmt_frame raw = {0, -1};
        p->ids[k++] = location(p, &none, &raw, 1);
    }
    for (int i = 0; i < n;) {
        int j = i + 1; /* the functions inlined at one recorded frame */
        while (j < n && p->raw[j].module == -2)
            j++;
        p->ids[k++] = location(p, &p->frames[i], &p->raw[i], j - i);
        i = j;
    }
    struct pb ids = {0}, vals = {0};
    for (size_t i = 0; i < k; i++)
        pb_varint(&ids, p->ids[i]);
    /* values in the order of sample_type */
    int64_t v[4] = {s->peak_count > 0 ? s->peak_count : 0, s->peak_bytes > 0 ? s->peak_bytes : 0,
                    (int64_t)s->total_count, (int64_t)s->total_bytes};
    for (int i = 0; i < 4; i++)
        pb_varint(&vals, (uint64_t)v[i]);
    struct pb m = {0};
    pb_len(&m, 1, ids.p, ids.n);
    pb_len(&m, 2, vals.p, vals.n);
    m.nomem |= ids.nomem || vals.nomem;
    free(ids.p);
    free(vals.p);
    emit(p, 2, &m);
    free(m.p);
}

static void value_type(struct pp *p, unsigned field, const char *type, const char *unit)
{
    uint64_t t = str(p, type), u = str(p, unit);
    struct pb m = {0};
    pb_uint(&m, 1, t);
    pb_uint(&m, 2, u);
    emit(p, field, &m);
    free(m.p);
}

static void mappings(struct pp *p)
{
    const struct gmt_defs *d = &p->l->r.defs;
    for (size_t i = 0; i < d->nmodules; i++) {
        if (!p->mapped[i])
            continue;
        const struct gmt_module_def *mod = &d->modules[i];
        char hex[2 * sizeof mod->build_id + 1] = "";
        uint32_t len = mod->build_id_len < sizeof mod->build_id ? mod->build_id_len
                                                                 : sizeof mod->build_id;
        for (uint32_t k = 0; k < len; k++)
            snprintf(hex + 2 * k, 3, "%02x", mod->build_id[k]);
        uint64_t file = str(p, mod->path ? mod->path : ""), bid = str(p, hex);
        struct pb m = {0};
        pb_uint(&m, 1, (uint64_t)i + 1);
        pb_uint(&m, 2, mod->lo);
        pb_uint(&m, 3, mod->hi > mod->lo ? mod->hi : mod->lo);
        pb_uint(&m, 4, mod->lo > mod->base ? mod->lo - mod->base : 0);
        pb_uint(&m, 5, file);
        pb_uint(&m, 6, bid);
        pb_uint(&m, 7, 1); /* has_functions: symbolized here */
        pb_uint(&m, 8, 1);
        pb_uint(&m, 9, 1);
        pb_uint(&m, 10, 1);
        emit(p, 3, &m);
        free(m.p);
    }
}

static void free_table(struct entry **t)
{
    struct entry *e, *tmp;
    HASH_ITER(hh, *t, e, tmp) {
        HASH_DEL(*t, e);
        free(e->key);
        free(e);
    }
}

int export_pprof(struct loaded *l, FILE *out, char *err, size_t errlen)
{
    struct pp *p = calloc(1, sizeof *p);
    if (p == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    p->l = l;
    p->frames = malloc(EXPORT_MAX_FRAMES * sizeof *p->frames);
    p->raw = malloc(EXPORT_MAX_FRAMES * sizeof *p->raw);
    p->ids = malloc((EXPORT_MAX_FRAMES + 1) * sizeof *p->ids);
    p->mapped = calloc(l->r.defs.nmodules + 1, sizeof *p->mapped);
    int rc = -1;
    if (!p->frames || !p->raw || !p->ids || !p->mapped) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    gz_begin(&p->z, out);
    str(p, ""); /* string_table[0] must be "" */
    value_type(p, 1, "inuse_objects", "count");
    value_type(p, 1, "inuse_space", "bytes");
    value_type(p, 1, "alloc_objects", "count");
    value_type(p, 1, "alloc_space", "bytes");
    const struct replay *r = &l->r;
    for (size_t i = 0; i < r->nsites; i++)
        if (r->sites[i].total_count || r->sites[i].peak_bytes > 0)
            sample(p, &r->sites[i]);
    mappings(p);
    struct pb m = {0};
    pb_uint(&m, 9, r->hdr.start_realtime_ns);       /* time_nanos */
    pb_uint(&m, 10, replay_duration(r));            /* duration_nanos */
    pb_uint(&m, 14, str(p, "inuse_space"));         /* default_sample_type */
    uint64_t c = str(p, "inuse: live at the peak of requested GPU memory; alloc: over the run");
    pb_uint(&m, 13, c);                             /* comment */
    p->nomem |= m.nomem;
    gz_write(&p->z, m.p, m.n);
    free(m.p);
    gz_end(&p->z);
    if (p->nomem) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free_table(&p->strings);
    free_table(&p->functions);
    free_table(&p->locations);
    free(p->mapped);
    free(p->frames);
    free(p->raw);
    free(p->ids);
    free(p);
    return rc;
}
