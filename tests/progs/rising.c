/* rising.c - a peak that rises with every allocation: N blocks (argv[1],
 * default 20000) of 256 bytes allocated one after another and kept, then
 * freed. A report that pictures the pool at the peak while reading sees a
 * new peak at each of them, with ever more live blocks: more work than it
 * allows itself, so it must read the trace again for the picture. */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    void **p = calloc((size_t)n, sizeof *p);
    if (p == NULL)
        return 1;
    for (int i = 0; i < n; i++)
        if (cudaMalloc(&p[i], 256) != cudaSuccess) {
            printf("cudaMalloc %d failed\n", i);
            return 1;
        }
    for (int i = 0; i < n; i++)
        cudaFree(p[i]);
    free(p);
    printf("ok %d\n", n);
    return 0;
}
