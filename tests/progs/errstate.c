/* errstate.c - the tracer must not disturb the runtime's error state.
 *
 * cudaMemcpyDefault makes the tracer query pointer attributes; those
 * queries must neither clear an error the program has not read yet nor
 * leave one behind. Prints "ok" or what went wrong.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

int main(void)
{
    void *d;
    char host[256];
    memset(host, 1, sizeof host);
    if (cudaMalloc(&d, 256) != cudaSuccess)
        return 1;
    /* 1. a pending error survives a traced successful call */
    cudaError_t e = cudaFree((void *)(uintptr_t)0xdead000);
    if (e == cudaSuccess) {
        printf("invalid free succeeded\n");
        return 1;
    }
    if (cudaMemcpy(d, host, sizeof host, cudaMemcpyDefault) != cudaSuccess) {
        printf("copy failed\n");
        return 1;
    }
    cudaError_t got = cudaGetLastError();
    if (got != e) {
        printf("pending error changed: %d, expected %d\n", (int)got, (int)e);
        return 1;
    }
    /* 2. no error is left behind by the tracer's own queries */
    if (cudaMemcpy(host, d, sizeof host, cudaMemcpyDefault) != cudaSuccess ||
        cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("copy failed\n");
        return 1;
    }
    got = cudaGetLastError();
    if (got != cudaSuccess) {
        printf("error left behind: %d\n", (int)got);
        return 1;
    }
    cudaFree(d);
    printf("ok\n");
    return 0;
}
