/* options.c - GPUMEMTRACE_* environment variables.
 *
 * All options live in one table (GMT_OPTIONS in gmt_options.h). They are read
 * once, when the first CUDA call starts tracing (or a stream is created:
 * gmt_options_load), never in a process that doesn't use CUDA. A value that doesn't parse or is out of range gets one
 * warning and the default is kept: a typo must not stop the user's job.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct gmt_options gmt_opt = {
#define GMT_OPT_DEF_str(def) def
#define GMT_OPT_DEF_int(def) def
#define GMT_OPT_DEF_bool(def) def
#define GMT_OPT_DEF_hex(def) def
#define X(NAME, field, type, def, lo, hi, help) .field = GMT_OPT_DEF_##type(def),
    GMT_OPTIONS(X)
#undef X
};

/* The rules are gmt_optval_*'s (gmt_options.h); a bad value is said
 * once and the default kept. */
static bool parse_int(const char *name, const char *s, long lo, long hi,
                      long *out)
{
    if (gmt_optval_int(s, lo, hi, out))
        return true;
    gmt_warn("%s=%s is not a number in [%ld, %ld]; keeping %ld", name, s, lo, hi, *out);
    return false;
}

static bool parse_bool(const char *name, const char *s, bool *out)
{
    if (gmt_optval_bool(s, out))
        return true;
    gmt_warn("%s=%s is not a boolean (1/0, yes/no, true/false, on/off); "
             "keeping %d", name, s, (int)*out);
    return false;
}

static bool parse_hex(const char *name, const char *s, uint64_t *out)
{
    if (gmt_optval_hex(s, out))
        return true;
    gmt_warn("%s=%s is not a non-zero hexadecimal number; ignored", name, s);
    return false;
}

static bool parse_str(const char *name, const char *s, const char **out)
{
    if (!gmt_optval_str(s)) {
        gmt_warn("%s is empty; keeping \"%s\"", name, *out);
        return false;
    }
    *out = s;
    return true;
}

#define GMT_OPT_PARSE_str(n, s, lo, hi, f) parse_str(n, s, &gmt_opt.f)
#define GMT_OPT_PARSE_int(n, s, lo, hi, f) parse_int(n, s, lo, hi, &gmt_opt.f)
#define GMT_OPT_PARSE_bool(n, s, lo, hi, f) parse_bool(n, s, &gmt_opt.f)
#define GMT_OPT_PARSE_hex(n, s, lo, hi, f) parse_hex(n, s, &gmt_opt.f)

bool gmt_opt_verbose_now(void)
{
    const char *s = getenv("GPUMEMTRACE_VERBOSE");
    bool v = gmt_opt.verbose, on;
    return v || (s != NULL && gmt_optval_bool(s, &on) && on);
}

static void load(void)
{
    const char *s;
#define X(NAME, field, type, def, lo, hi, help)                               \
    if ((s = getenv("GPUMEMTRACE_" #NAME)) != NULL)                           \
        GMT_OPT_PARSE_##type("GPUMEMTRACE_" #NAME, s, lo, hi, field);
    GMT_OPTIONS(X)
#undef X
    gmt_opt.session_set = gmt_opt.session != 0;
}

/* Once: at the first CUDA call that starts tracing, or earlier where a
 * stream's creation needs the pool's options (fence.c), whichever comes
 * first. */
void gmt_options_load(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load);
}
