/* threads.c - many threads allocating at full speed.
 *
 * usage: threads NTHREADS PAIRS. Each thread makes PAIRS cudaMalloc +
 * cudaFree pairs; the program prints the number of calls it made, which
 * the trace must match exactly (no event dropped under contention).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

static long pairs;
static int errors;

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        void *p;
        if (cudaMalloc(&p, 256 + (size_t)(i % 7) * 512) != cudaSuccess ||
            cudaFree(p) != cudaSuccess)
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 16;
    pairs = argc > 2 ? atol(argv[2]) : 1000;
    pthread_t t[256];
    if (n < 1 || n > 256)
        return 2;
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("calls %ld errors %d\n", 2L * n * pairs, errors);
    return errors != 0;
}
