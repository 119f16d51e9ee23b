/* option_values.c - the rules for GPUMEMTRACE_* values (gmt_options.h),
 * compiled into both the library and the launcher, so that what the
 * launcher accepts is what the library reads. No messages here: the
 * library warns and keeps its default, the launcher refuses.
 */
#include <errno.h>
#include <stdlib.h>
#include <strings.h>

#include "gmt_options.h"

bool gmt_optval_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool gmt_optval_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on"};
    static const char *const no[] = {"0", "no", "false", "off"};
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
    return false;
}

bool gmt_optval_hex(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno || end == s || *end != '\0' || v == 0)
        return false;
    *out = v;
    return true;
}

bool gmt_optval_str(const char *s)
{
    return *s != '\0';
}
