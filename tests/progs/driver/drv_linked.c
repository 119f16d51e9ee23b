/* drv_linked.c - a driver API program linked with -lcuda: its calls bind
 * to the exported names. 4 MiB allocated and freed, 1 MiB left at exit;
 * with an argument, a non-blocking stream created before and destroyed
 * after (the pool's fences must see both). */
#include <cuda.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    (void)argv;
    CUdeviceptr a, b;
    CUstream s = NULL;
    if (cuInit(0) != CUDA_SUCCESS ||
        (argc > 1 && cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ||
        cuMemAlloc(&a, 4u << 20) != CUDA_SUCCESS ||
        cuMemAlloc(&b, 1u << 20) != CUDA_SUCCESS || cuMemFree(a) != CUDA_SUCCESS ||
        (argc > 1 && cuStreamDestroy(s) != CUDA_SUCCESS)) {
        fprintf(stderr, "drv_linked: a driver call failed\n");
        return 2;
    }
    printf("done\n");
    return 0;
}
