/* nexter.c - prints what dlsym(RTLD_NEXT) found from inside a library:
 * "next: 2" is right (the next library's definition), "next: 1" means the
 * lookup started after the wrong object. Then whether a global lookup
 * finds the driver's cuInit: this program never loads the driver. */
#include <dlfcn.h>
#include <stdio.h>

int gmt_next_call(void);

int main(void)
{
    printf("next: %d\n", gmt_next_call());
    /* "is the CUDA driver loaded?" - it is not, whoever exports cuInit */
    printf("cuInit: %s\n", dlsym(RTLD_DEFAULT, "cuInit") ? "found" : "absent");
    return 0;
}
