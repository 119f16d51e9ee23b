/* report_known.c - a trace with known answers for the report tests.
 *
 *   weights()   allocates 3 x 4 MiB once and keeps them          (12 MiB)
 *   scratch()   allocates 8 MiB and frees it right away, twice
 *   step()      20 times: 1 MiB activation freed at once, and
 *   history()   256 KiB kept per step, never freed: steady growth and a
 *               known leak of 20 x 256 KiB = 5 MiB
 *   copies()    4 x 1 MiB host-to-device from pageable memory, 2 x 512 KiB
 *               device-to-host into pinned memory, 3 memsets of 4 MiB
 * The peak of requested device memory is reached inside the second
 * scratch() call: 12 MiB weights + 8 MiB scratch + the history so far.
 * With the simulator's timing, each step sleeps 2 ms so the growth is
 * spread over the run. Prints the expected figures.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define MiB (1u << 20)

static void *w[3];

__attribute__((noinline)) static void weights(void)
{
    for (int i = 0; i < 3; i++)
        cudaMalloc(&w[i], 4 * MiB);
}

__attribute__((noinline)) static void scratch(void)
{
    void *p;
    cudaMalloc(&p, 8 * MiB);
    cudaFree(p);
}

__attribute__((noinline)) static void *history(void)
{
    void *p;
    cudaMalloc(&p, 256 * 1024);
    return p;
}

__attribute__((noinline)) static void step(void)
{
    void *a;
    cudaMalloc(&a, 1 * MiB);
    cudaFree(a);
}

__attribute__((noinline)) static void copies(void)
{
    static char pageable[MiB];
    void *pinned;
    cudaMallocHost(&pinned, MiB);
    for (int i = 0; i < 4; i++)
        cudaMemcpy(w[0], pageable, MiB, cudaMemcpyHostToDevice);
    for (int i = 0; i < 2; i++)
        cudaMemcpy(pinned, w[1], MiB / 2, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 3; i++)
        cudaMemset(w[2], 0, 4 * MiB);
    cudaFreeHost(pinned);
}

int main(void)
{
    weights();
    scratch();
    for (int i = 0; i < 20; i++) {
        step();
        history();
        usleep(2000);
    }
    scratch();
    copies();
    for (int i = 0; i < 3; i++)
        cudaFree(w[i]);
    printf("peak %u leaked %u leaks %d\n", 12 * MiB + 8 * MiB + 20 * 256 * 1024,
           20 * 256 * 1024, 20);
    return 0;
}
