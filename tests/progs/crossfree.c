/* crossfree.c - a cudaFree made on another device than the memory's
 * (the pool once took it for a synchronization of the current device).
 * Device 0: a pool block A, a slow kernel still to write A, A freed
 * (pending: the kernel runs). Device 1: memory the pool does not own
 * (cudaMallocAsync). Back on device 0 that memory is freed with cudaFree:
 * the real call waits for the pointer's device (the simulator's choice;
 * on a GPU it may be the current one), so it is no
 * synchronization of device 0, and A must not be handed out while its
 * kernel is queued. With the argument "same", the memory freed is device
 * 0's own cudaMallocAsync memory, whose real cudaFree waits for nothing
 * (measured on an H100) though the runtime calls it device 0's memory.
 * Prints the stale writes and whether C kept its bytes; exits 0 when
 * nothing was overwritten. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "simcudart.h"

#define N (1u << 20)

int main(int argc, char **argv)
{
    int other = argc > 1 && strcmp(argv[1], "same") == 0 ? 0 : 1;
    static unsigned char host[N];
    void *a = NULL, *b = NULL, *c = NULL;
    cudaStream_t s; /* non-blocking: the legacy stream does not wait for it */
    if (cudaSetDevice(0) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc(&a, N) != cudaSuccess ||
        simLaunchFill(a, 0x11, N, 300000, s) != cudaSuccess || cudaFree(a) != cudaSuccess)
        return 2;
    if (cudaSetDevice(other) != cudaSuccess || cudaMallocAsync(&b, N, 0) != cudaSuccess ||
        cudaStreamSynchronize(0) != cudaSuccess)
        return 2;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(b) != cudaSuccess)
        return 2;
    if (cudaMalloc(&c, N) != cudaSuccess || cudaMemset(c, 0x22, N) != cudaSuccess)
        return 2;
    cudaDeviceSynchronize();
    cudaMemcpy(host, c, N, cudaMemcpyDeviceToHost);
    int kept = 1;
    for (unsigned i = 0; i < N; i++)
        kept &= host[i] == 0x22;
    printf("reused A: %s, stale writes: %llu, C kept: %d\n", c == a ? "yes" : "no",
           simStaleWrites(), kept);
    return !(kept && simStaleWrites() == 0);
}
