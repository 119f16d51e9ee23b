/* rt_dlclose.c - a program that is not linked to the CUDA runtime: it
 * dlopens it (argv[1]), allocates and frees through cudaMalloc/cudaFree
 * found with dlsym(RTLD_DEFAULT) - the preloaded library's hooks when it
 * is there, else the runtime's own - then dlcloses it and exits. Nothing
 * of the runtime may be called after that (the pool's
 * exit handler called cudaGetDevice into the unloaded library). */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

int main(int argc, char **argv)
{
    void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (h == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    malloc_fn m = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    free_fn f = (free_fn)dlsym(RTLD_DEFAULT, "cudaFree");
    if (m == NULL || f == NULL) { /* not preloaded: the runtime's own */
        m = (malloc_fn)dlsym(h, "cudaMalloc");
        f = (free_fn)dlsym(h, "cudaFree");
    }
    void *p = NULL;
    if (m == NULL || f == NULL || m(&p, 1 << 20) != 0 || f(p) != 0)
        return 1;
    if (dlclose(h) != 0)
        return 1;
    printf("ok\n");
    return 0;
}
