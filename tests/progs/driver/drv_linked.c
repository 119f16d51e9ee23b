/* drv_linked.c - a driver API program linked with -lcuda: its calls bind
 * to the exported names. 4 MiB allocated and freed, 1 MiB left at exit. */
#include <cuda.h>
#include <stdio.h>

int main(void)
{
    CUdeviceptr a, b;
    if (cuInit(0) != CUDA_SUCCESS || cuMemAlloc(&a, 4u << 20) != CUDA_SUCCESS ||
        cuMemAlloc(&b, 1u << 20) != CUDA_SUCCESS || cuMemFree(a) != CUDA_SUCCESS) {
        fprintf(stderr, "drv_linked: a driver call failed\n");
        return 2;
    }
    printf("done\n");
    return 0;
}
