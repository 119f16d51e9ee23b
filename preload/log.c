/* log.c - the library's messages.
 *
 * Everything goes to stderr with a "gpumemtrace:" prefix through write(2):
 * no stdio, so the program's own buffered output is never reordered or
 * flushed by us, and it is safe in a forked child. Failures of the tracer
 * are reported once per site; the program carries on either way.
 */
#include <stdio.h>
#include <unistd.h>

#include "internal.h"

static int g_reported[GMT_ERR_MAX];

static void vsay(const char *level, const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "gpumemtrace: %s", level);
    if (n < 0)
        return;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w <= 0)
            return; /* stderr closed: nothing we can do, and nothing to fix */
        p += w;
        len -= (size_t)w;
    }
}

void gmt_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("warning: ", fmt, ap);
    va_end(ap);
}

void gmt_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay("", fmt, ap);
    va_end(ap);
}

void gmt_error_once(unsigned key, const char *fmt, ...)
{
    if (key < GMT_ERR_MAX &&
        __atomic_exchange_n(&g_reported[key], 1, __ATOMIC_RELAXED))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsay("error: ", fmt, ap);
    va_end(ap);
}

void gmt_log_reset_after_fork(void)
{
    /* A child opens its own trace: let it report its own failures. */
    for (unsigned i = 0; i < GMT_ERR_MAX; i++)
        g_reported[i] = 0;
}
