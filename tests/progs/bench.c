/* bench.c - the workload behind scripts/bench-record.py.
 *
 * usage: bench WORKLOAD THREADS ITERS DEPTH
 *   setdevice  one cudaSetDevice per iteration: the cheapest runtime call,
 *              so the difference with and without the tracer is the cost
 *              of recording one event
 *   allocfree  cudaMalloc + cudaFree per iteration (2 events)
 *   mix        cudaMalloc, cudaMemcpy H2D, cudaMemsetAsync, cudaMemcpyAsync
 *              D2H, cudaFree per iteration (5 events), from 3 call sites
 * Each thread first recurses DEPTH frames, so the recorded stacks are
 * that deep. Prints ns per iteration (per thread), events per iteration
 * and events per second over all threads, timed inside the process.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

static const char *workload;
static long iters;
static int depth;
static char host[65536];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void mix_copy(void *d, size_t n, cudaStream_t s)
{
    cudaMemcpy(d, host, n, cudaMemcpyHostToDevice);
    cudaMemsetAsync(d, 0, n, s);
    cudaMemcpyAsync(host, d, n, cudaMemcpyDeviceToHost, s);
}

__attribute__((noinline)) static void loop(void)
{
    cudaStream_t s = 0;
    if (!strcmp(workload, "setdevice")) {
        for (long i = 0; i < iters; i++)
            cudaSetDevice(0);
    } else if (!strcmp(workload, "allocfree")) {
        for (long i = 0; i < iters; i++) {
            void *p;
            cudaMalloc(&p, 512 + (size_t)(i & 15) * 512);
            cudaFree(p);
        }
    } else {
        for (long i = 0; i < iters; i++) {
            void *p;
            size_t n = 256 + (size_t)(i & 63) * 1024;
            cudaMalloc(&p, n);
            mix_copy(p, n, s);
            cudaFree(p);
        }
    }
}

__attribute__((noinline)) static void recurse(int n)
{
    if (n > 0)
        recurse(n - 1);
    else
        loop();
    __asm__ volatile("" ::: "memory");
}

static void *thread_main(void *arg)
{
    (void)arg;
    recurse(depth);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bench WORKLOAD THREADS ITERS DEPTH\n");
        return 2;
    }
    workload = argv[1];
    int threads = atoi(argv[2]);
    iters = atol(argv[3]);
    depth = atoi(argv[4]);
    int per = !strcmp(workload, "setdevice") ? 1 : !strcmp(workload, "allocfree") ? 2 : 5;
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        return 2;
    cudaSetDevice(0); /* start the runtime and the tracer outside the timing */
    double t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, thread_main, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double dt = now() - t0;
    printf("ns_per_iter %.1f events_per_iter %d events_per_sec %.0f\n",
           dt * 1e9 / (double)iters, per, (double)threads * iters * per / dt);
    return 0;
}
