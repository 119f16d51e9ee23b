/* dlopen.c - tracing across dlopen.
 *
 * Allocates once (tracing starts, the module map is written), then
 * dlopens libdlalloc.so, which was not loaded when the map was written,
 * and allocates from inside it. The stack of that allocation must point
 * into the new library: the module map has to catch up. With a second
 * argument "keep", the library stays loaded until exit (for symbols
 * embedded at exit).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
    void *p;
    if (argc < 2 || cudaMalloc(&p, 1111) != cudaSuccess)
        return 1;
    cudaFree(p);
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*pair)(void) = (int (*)(void))dlsym(h, "dlalloc_pair");
    if (pair == NULL || pair() != 0)
        return 1;
    if (argc < 3 || strcmp(argv[2], "keep") != 0)
        dlclose(h);
    printf("ok\n");
    return 0;
}
