/* options.c - GPUMEMTRACE_* environment variables.
 *
 * All options live in one table (GMT_OPTIONS in internal.h). They are read
 * once, when the first CUDA call starts tracing, never in a process that
 * doesn't use CUDA. A value that doesn't parse or is out of range gets one
 * warning and the default is kept: a typo must not stop the user's job.
 */
#include <errno.h>
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

static bool parse_int(const char *name, const char *s, long lo, long hi,
                      long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        gmt_warn("%s=%s is not a number in [%ld, %ld]; keeping %ld", name, s,
                 lo, hi, *out);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_bool(const char *name, const char *s, bool *out)
{
    static const char *yes[] = {"1", "yes", "true", "on"};
    static const char *no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    gmt_warn("%s=%s is not a boolean (1/0, yes/no, true/false, on/off); "
             "keeping %d", name, s, (int)*out);
    return false;
}

static bool parse_hex(const char *name, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno || end == s || *end != '\0' || v == 0) {
        gmt_warn("%s=%s is not a non-zero hexadecimal number; ignored", name, s);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_str(const char *name, const char *s, const char **out)
{
    if (*s == '\0') {
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
    bool v = gmt_opt.verbose;
    if (s != NULL && !v) {
        static const char *yes[] = {"1", "yes", "true", "on"};
        for (size_t i = 0; i < 4; i++)
            v = v || strcasecmp(s, yes[i]) == 0;
    }
    return v;
}

void gmt_options_load(void)
{
    const char *s;
#define X(NAME, field, type, def, lo, hi, help)                               \
    if ((s = getenv("GPUMEMTRACE_" #NAME)) != NULL)                           \
        GMT_OPT_PARSE_##type("GPUMEMTRACE_" #NAME, s, lo, hi, field);
    GMT_OPTIONS(X)
#undef X
    gmt_opt.session_set = gmt_opt.session != 0;
}
