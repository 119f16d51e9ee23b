/* hello.c - output and exit status must be the same with and without the
 * tracer. Prints to stdout and stderr around CUDA calls, exits with 3. */
#include <stdio.h>

#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
    printf("hello from %s with %d args\n", argv[0], argc);
    fprintf(stderr, "to stderr\n");
    void *p;
    cudaError_t e = cudaMalloc(&p, 1 << 20);
    printf("malloc: %d\n", (int)e);
    printf("free: %d\n", (int)cudaFree(p));
    size_t f, t;
    printf("meminfo: %d\n", (int)cudaMemGetInfo(&f, &t));
    return 3;
}
