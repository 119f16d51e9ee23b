/* stackbomb.c - many distinct call stacks, for the recorder's and the
 * reader's memory with a large stack table (it once
 * had no bound; docs/benchmarks.md).
 *
 * usage: stackbomb N
 * Allocation i (0 <= i < N) is made at the bottom of a 20-level recursion
 * through two functions, f0 or f1 at level k as bit k of i says: up to
 * 2^20 (1,048,576) distinct stacks, each allocation freed at once.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define LEVELS 20

static void down(unsigned long i, int level);

__attribute__((noinline)) static void f0(unsigned long i, int level)
{
    down(i, level + 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

__attribute__((noinline)) static void f1(unsigned long i, int level)
{
    down(i, level + 1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void down(unsigned long i, int level)
{
    if (level == LEVELS) {
        void *p = NULL;
        if (cudaMalloc(&p, 512) != cudaSuccess || cudaFree(p) != cudaSuccess)
            exit(3);
        return;
    }
    if ((i >> level) & 1)
        f1(i, level);
    else
        f0(i, level);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (n < 1)
        return 2;
    for (long i = 0; i < n; i++)
        down((unsigned long)i, 0);
    printf("stackbomb %ld allocations\n", n);
    return 0;
}
