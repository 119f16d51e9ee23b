/* freeasync.c - cudaFreeAsync of cudaMalloc memory (legal: the runtime
 * frees it when the stream gets there). Under the pool both blocks are
 * pool blocks, the second one inside the first one's segment: the pool
 * must take both frees, the runtime must see neither.
 * Then the memory is allocated and used again. Prints each result; exits
 * 0 when every call succeeded. */
#include <stdio.h>

#include <cuda_runtime_api.h>

int main(void)
{
    void *a = NULL, *b = NULL, *c = NULL;
    int bad = 0;
    bad |= cudaMalloc(&a, 4096) != cudaSuccess;
    bad |= cudaMalloc(&b, 4096) != cudaSuccess;
    bad |= cudaMemset(b, 1, 4096) != cudaSuccess;
    cudaError_t ea = cudaFreeAsync(a, 0);
    cudaError_t eb = cudaFreeAsync(b, 0);
    printf("free_async: %d %d\n", (int)ea, (int)eb);
    bad |= ea != cudaSuccess || eb != cudaSuccess;
    bad |= cudaStreamSynchronize(0) != cudaSuccess;
    bad |= cudaMalloc(&c, 8192) != cudaSuccess;
    bad |= cudaMemset(c, 2, 8192) != cudaSuccess;
    bad |= cudaFree(c) != cudaSuccess;
    bad |= cudaDeviceSynchronize() != cudaSuccess;
    cudaError_t last = cudaGetLastError();
    printf("last error: %d\n", (int)last);
    return bad || last != cudaSuccess;
}
