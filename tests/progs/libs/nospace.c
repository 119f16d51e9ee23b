/* nospace.c - a disk that fills up, for the tests: preloaded after
 * libgpumemtrace.so, it lets SIM_NOSPACE_AFTER calls of posix_fallocate
 * through and refuses every later one with ENOSPC, counting them; at exit
 * it prints "nospace: N refused" on stderr. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

static long g_calls, g_refused;

int posix_fallocate(int fd, off_t off, off_t len)
{
    static int (*real)(int, off_t, off_t);
    const char *after = getenv("SIM_NOSPACE_AFTER");
    if (after && __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED) > atol(after)) {
        __atomic_add_fetch(&g_refused, 1, __ATOMIC_RELAXED);
        return ENOSPC;
    }
    if (real == NULL)
        real = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT, "posix_fallocate");
    return real ? real(fd, off, len) : ENOSYS;
}

__attribute__((destructor)) static void report(void)
{
    if (getenv("SIM_NOSPACE_AFTER"))
        fprintf(stderr, "nospace: %ld refused\n", g_refused);
}
