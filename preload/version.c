/* version.c - the library run as a program: `libgpumemtrace.so --version`.
 *
 * The shared object has an interpreter and an entry point (the Makefile
 * links it with -e gmt_lib_main), as glibc's libc.so.6 does: executed, the
 * dynamic loader maps it and its libraries, runs their constructors (ours
 * only reads the environment) and jumps here. Loaded with LD_PRELOAD or
 * dlopen, neither is used. Whatever the arguments, it says what it is and
 * how it is used, and exits without running destructors.
 */
#include <string.h>
#include <unistd.h>

extern const char gmt_version[]; /* build/gen/version.c */

#if defined(__x86_64__) && defined(__linux__)
__attribute__((section(".interp"), used)) static const char interp[] =
    "/lib64/ld-linux-x86-64.so.2";
#endif

static void say(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(1, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* The entry point: no return address on the stack, so it never returns. */
__attribute__((noreturn, force_align_arg_pointer)) void
gmt_lib_main(void)
{
    say("libgpumemtrace.so ");
    say(gmt_version);
    say("\nthe gpumemtrace library: run a program under it with\n"
        "  gpumemtrace -- PROGRAM [ARGS]\n"
        "or LD_PRELOAD=/path/to/libgpumemtrace.so PROGRAM [ARGS]\n");
    _exit(0);
}
