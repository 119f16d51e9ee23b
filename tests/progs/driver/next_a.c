/* next_a.c - with next_b.c: dlsym(RTLD_NEXT) from this library must find
 * next_b's definition, whoever interposes dlsym. */
#include <dlfcn.h>

int gmt_next_probe(void)
{
    return 1;
}

int gmt_next_call(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gmt_next_probe");
    return next ? next() : -1;
}
