/* nexter.c - prints what dlsym(RTLD_NEXT) found from inside a library:
 * "next: 2" is right (the next library's definition), "next: 1" means the
 * lookup started after the wrong object. */
#include <stdio.h>

int gmt_next_call(void);

int main(void)
{
    printf("next: %d\n", gmt_next_call());
    return 0;
}
