// drv_prog.cu - known allocations through the runtime, for the driver
// observer's coverage proof. Built twice: nvcc's default (static cudart:
// only the driver observer can see it) and -cudart shared (the runtime
// hooks see it, the driver observer must not count it again).
// Prints the device bytes it holds at its peak and at exit.
#include <cstdio>
#include <cuda_runtime.h>

#define CK(x) do { if ((x) != cudaSuccess) { printf("FAIL %s\n", #x); return 1; } } while (0)

__global__ void fill(char *p, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = 1;
}

int main()
{
    const size_t MiB = 1 << 20;
    void *a, *b, *c, *m, *h, *s;
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CK(cudaMalloc(&a, 16 * MiB));
    CK(cudaMalloc(&b, 32 * MiB));
    CK(cudaMallocManaged(&m, 8 * MiB));
    CK(cudaMallocAsync(&s, 64 * MiB, st));
    fill<<<(16 * MiB + 255) / 256, 256, 0, st>>>((char *)a, 16 * MiB);
    CK(cudaFreeAsync(s, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMallocHost(&h, 4 * MiB));
    CK(cudaFree(a));
    CK(cudaMalloc(&c, 4 * MiB));
    CK(cudaFreeHost(h));
    CK(cudaFree(m));
    CK(cudaDeviceSynchronize());
    // peak: a + b + m + s = 120 MiB; left at exit: b + c = 36 MiB
    printf("{\"peak\": %zu, \"left\": %zu}\n", 120 * MiB, 36 * MiB);
    return 0;
}
