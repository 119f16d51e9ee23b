/* export_speedscope.c - `export --format speedscope`: speedscope's own JSON.
 *
 * speedscope's file format (https://www.speedscope.app/file-format-schema.json):
 * {"$schema", "shared": {"frames": [{name, file, line}]}, "profiles": [...]}
 * with two "sampled" profiles whose unit is "bytes" - folded stacks
 * (`flamegraph`) carry counts without a unit, so speedscope would call the
 * bytes samples. Profile 1: the bytes live at the peak of requested
 * memory, one sample per site (its stack, outermost frame first) weighted
 * by its bytes then, so the weights add up to the peak. Profile 2: all
 * bytes ever allocated, per site. The frames are the stacks' user frames
 * (export_common.c), each distinct (name, file, line) once in the shared
 * table. Memory: the frame table, no more than the distinct frames.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "export.h"

struct frame_ix {
    char *key;      /* name \0 file \0 line, as one string with \1 separators */
    uint32_t index;
    UT_hash_handle hh;
};

struct ss {
    struct loaded *l;
    FILE *f;
    struct frame_ix *byname;
    struct frame_ix **order; /* by index */
    uint32_t n, cap;
    struct sym *frames;
    bool nomem;
};

/* The index of a frame in the shared table, added if new; -1: no memory. */
static int64_t frame_index(struct ss *s, const char *name, const char *file, int line)
{
    char key[4096];
    snprintf(key, sizeof key, "%s\1%s\1%d", name, file ? file : "", line);
    struct frame_ix *x;
    HASH_FIND_STR(s->byname, key, x);
    if (x)
        return x->index;
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 256;
        struct frame_ix **o = realloc(s->order, cap * sizeof *o);
        if (o == NULL)
            return -1;
        s->order = o;
        s->cap = cap;
    }
    if ((x = calloc(1, sizeof *x)) == NULL || (x->key = strdup(key)) == NULL) {
        free(x);
        return -1;
    }
    x->index = s->n;
    s->order[s->n++] = x;
    HASH_ADD_KEYPTR(hh, s->byname, x->key, strlen(x->key), x);
    return x->index;
}

/* One sample: the site's frames, outermost first. */
static void sample(struct ss *s, uint32_t stack, bool first)
{
    FILE *f = s->f;
    int n = export_frames(s->l, stack, s->frames, NULL, EXPORT_MAX_FRAMES);
    fputs(first ? "[" : ",[", f);
    if (n == 0) {
        int64_t i = frame_index(s, stack ? "[stack not in the trace]" : "[no stack]", NULL, 0);
        s->nomem |= i < 0;
        fprintf(f, "%" PRId64, i < 0 ? 0 : i);
    }
    for (int k = n - 1; k >= 0; k--) {
        char buf[96];
        const struct sym *y = &s->frames[k];
        int64_t i = frame_index(s, export_frame_name(y, buf, sizeof buf),
                                y->file ? y->file : NULL, y->file ? y->line : 0);
        s->nomem |= i < 0;
        fprintf(f, "%s%" PRId64, k == n - 1 ? "" : ",", i < 0 ? 0 : i);
    }
    fputc(']', f);
}

static void profile(struct ss *s, const char *name, bool total)
{
    FILE *f = s->f;
    const struct replay *r = &s->l->r;
    uint64_t sum = 0;
    for (size_t i = 0; i < r->nsites; i++) {
        const struct site *x = &r->sites[i];
        int64_t v = total ? (int64_t)x->total_bytes : x->peak_bytes;
        if (v > 0)
            sum += (uint64_t)v;
    }
    fputs("{\"type\":\"sampled\",\"name\":", f);
    gmt_json_str(f, name);
    fprintf(f, ",\"unit\":\"bytes\",\"startValue\":0,\"endValue\":%" PRIu64 ",\"samples\":[",
            sum);
    bool first = true;
    for (size_t i = 0; i < r->nsites; i++) {
        const struct site *x = &r->sites[i];
        int64_t v = total ? (int64_t)x->total_bytes : x->peak_bytes;
        if (v > 0) {
            sample(s, x->stack, first);
            first = false;
        }
    }
    fputs("],\"weights\":[", f);
    first = true;
    for (size_t i = 0; i < r->nsites; i++) {
        const struct site *x = &r->sites[i];
        int64_t v = total ? (int64_t)x->total_bytes : x->peak_bytes;
        if (v > 0) {
            fprintf(f, "%s%" PRId64, first ? "" : ",", v);
            first = false;
        }
    }
    fputs("]}", f);
}

int export_speedscope(struct loaded *l, FILE *out, char *err, size_t errlen)
{
    struct ss s = {.l = l, .f = out};
    s.frames = malloc(EXPORT_MAX_FRAMES * sizeof *s.frames);
    if (s.frames == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char name[600];
    const char *cmd = l->r.defs.process.cmdline;
    snprintf(name, sizeof name, "%.500s (pid %u)", cmd && *cmd ? cmd : l->path, l->r.hdr.pid);
    fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
          "\"exporter\":\"gpumemreport export\",\"name\":", out);
    gmt_json_str(out, name);
    fputs(",\"activeProfileIndex\":0,\"profiles\":[", out);
    profile(&s, "GPU memory live at the peak (bytes requested)", false);
    fputc(',', out);
    profile(&s, "GPU memory allocated over the run (bytes requested)", true);
    fputs("],\"shared\":{\"frames\":[", out);
    for (uint32_t i = 0; i < s.n; i++) {
        /* the key holds name, file and line: split it back */
        char *k = s.order[i]->key, *file = strchr(k, '\1'), *line = NULL;
        if (file) {
            *file++ = '\0';
            line = strchr(file, '\1');
            if (line)
                *line++ = '\0';
        }
        fputs(i ? ",\n{\"name\":" : "\n{\"name\":", out);
        gmt_json_str(out, k);
        if (file && *file) {
            fputs(",\"file\":", out);
            gmt_json_str(out, file);
            if (line && atoi(line) > 0)
                fprintf(out, ",\"line\":%d", atoi(line));
        }
        fputc('}', out);
    }
    fputs("]}}\n", out);
    struct frame_ix *x, *tmp;
    HASH_ITER(hh, s.byname, x, tmp) {
        HASH_DEL(s.byname, x);
        free(x->key);
        free(x);
    }
    free(s.order);
    free(s.frames);
    if (s.nomem) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}
