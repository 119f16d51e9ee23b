/* lifecycle.c - CUDA calls before main and during exit.
 *
 * A constructor allocates before main runs (before the tracer's own
 * initialization could have happened in any particular order); an atexit
 * handler and a destructor free during exit. All of it must be recorded.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

static void *early, *late;

__attribute__((constructor)) static void before_main(void)
{
    if (cudaMalloc(&early, 1234) != cudaSuccess)
        abort();
}

static void at_exit(void)
{
    cudaFree(early);
}

__attribute__((destructor)) static void in_destructor(void)
{
    cudaFree(late);
}

int main(void)
{
    if (cudaMalloc(&late, 5678) != cudaSuccess)
        return 1;
    atexit(at_exit);
    printf("ok\n");
    return 0;
}
