/* bench_pool.c - the caching pool's own cost, without CUDA or the trace.
 *
 * usage: bench_pool THREADS PAIRS
 * Each thread makes PAIRS pool_alloc + pool_free pairs (sizes cycling
 * through 512 B .. 64 KiB, 8 live blocks per thread) against a host-memory
 * upstream whose synchronization is free. Prints the median ns per pair
 * over 20 slices of the run (per thread) and the total pairs per second.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"

static int up_alloc(void *c, int d, size_t s, uintptr_t *o)
{
    (void)c;
    (void)d;
    void *p = aligned_alloc(512, s);
    *o = (uintptr_t)p;
    return p ? 0 : 2;
}

static int up_release(void *c, int d, uintptr_t p, size_t s)
{
    (void)c;
    (void)d;
    (void)s;
    free((void *)p);
    return 0;
}

static int up_sync(void *c, int d)
{
    (void)c;
    (void)d;
    return 0;
}

static struct pool *g_pool;
static long pairs;
static double slice_ns[64][20];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uintptr_t live[8] = {0};
    long per_slice = pairs / 20;
    for (int s = 0; s < 20; s++) {
        double t0 = now();
        for (long i = 0; i < per_slice; i++) {
            int k = (int)(i & 7);
            int dev;
            if (live[k])
                pool_free(g_pool, live[k], &dev);
            pool_alloc(g_pool, 0, (unsigned)id, 512 + (size_t)((i * 37) & 127) * 512,
                       &live[k]);
        }
        slice_ns[id][s] = (now() - t0) / (double)per_slice;
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1;
    pairs = argc > 2 ? atol(argv[2]) : 2000000;
    if (n < 1 || n > 64)
        return 2;
    struct pool_upstream up = {up_alloc, up_release, up_sync, NULL, NULL};
    g_pool = pool_create(&up, NULL);
    pthread_t t[64];
    double t0 = now();
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    double dt = now() - t0;
    double all[64 * 20];
    for (int i = 0; i < n; i++)
        for (int s = 0; s < 20; s++)
            all[i * 20 + s] = slice_ns[i][s];
    qsort(all, (size_t)n * 20, sizeof *all, cmp);
    struct pool_stats st;
    pool_stats(g_pool, 0, &st);
    fprintf(stderr, "reserved %llu segments %llu syncs %llu adopted %llu lent %llu spread %llu\n",
            (unsigned long long)st.reserved, (unsigned long long)st.segments,
            (unsigned long long)st.syncs, (unsigned long long)st.adopted,
            (unsigned long long)st.lent, (unsigned long long)st.spread);
    printf("threads %d median_ns_per_pair %.1f pairs_per_sec %.0f\n", n,
           all[n * 10], (double)n * (double)(pairs / 20 * 20) / (dt * 1e-9));
    return 0;
}
