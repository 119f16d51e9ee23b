/* realign.c - a frame that realigns its stack, for the unwind cache's test.
 *
 * main -> G -> F1 -> F0 -> cudaMalloc(1000) and main -> H -> F1 -> F0 ->
 * cudaMalloc(2000), G and H called from one call site (an array of
 * function pointers). F1 has a 32-byte-aligned local, so it realigns its
 * stack: G's frame is 16 bytes larger than H's, yet F0's frame can sit at
 * the same place under both, while F1's own return address moves - and
 * the old one stays, unwritten, in the alignment gap. A cache that only
 * checked return addresses at their places gave G's stack to H's
 * allocations (found in review). ARGV[1]: bytes main allocas first, to
 * move the stack (with address randomization off, one of 0, 16, 32, 48
 * puts the frames so).
 */
#include <alloca.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

static void *g_keep[1000];
static int g_nk;
static volatile size_t g_n;

__attribute__((noinline)) void sink(void *p)
{
    __asm__ volatile("" ::"r"(p) : "memory");
}

__attribute__((noinline)) void F0(size_t n)
{
    void *p;
    if (cudaMalloc(&p, n) != cudaSuccess)
        abort();
    g_keep[g_nk++] = p;
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

__attribute__((noinline)) void F1(void)
{
    int __attribute__((aligned(32))) x[8];
    sink(x);
    F0(g_n);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void G(void)
{
    char pad[40];
    sink(pad);
    g_n = 1000;
    F1();
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void H(void)
{
    char pad[24];
    sink(pad);
    g_n = 2000;
    F1();
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    int shift = argc > 1 ? atoi(argv[1]) : 0;
    char *a = alloca((size_t)shift + 1);
    sink(a);
    static void (*volatile fps[200])(void);
    for (int i = 0; i < 200; i++)
        fps[i] = (i >= 100 && (i & 1)) ? H : G;
    for (int i = 0; i < 200; i++)
        fps[i]();
    for (int i = 0; i < g_nk; i++)
        cudaFree(g_keep[i]);
    printf("done %d\n", g_nk);
    return 0;
}
