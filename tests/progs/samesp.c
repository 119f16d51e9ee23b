/* samesp.c - two call chains that reach the same allocation at the same
 * stack pointer, for the unwind cache's test.
 *
 * main -> via_a -> mid -> leaf -> cudaMalloc(1000) and main -> via_b ->
 * mid -> leaf -> cudaMalloc(2000), alternating. via_a and via_b have the
 * same frame, so leaf's return address and stack pointer are the same on
 * both chains: only the return address two frames up tells them apart.
 * A cache keyed by the innermost frame alone would give one chain's stack
 * to the other's allocations. The program prints whether leaf's frame was
 * at the same place on both chains (the test needs it to be).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

static uintptr_t g_frame[3];
static volatile int g_tag;

__attribute__((noinline)) static void *leaf(size_t n, int which)
{
    void *p;
    /* where leaf's frame is: a local's address (not the frame address,
     * which would give leaf a frame pointer, and the cache keeps no chain
     * through one) */
    volatile char here;
    g_frame[which] = (uintptr_t)&here;
    if (cudaMalloc(&p, n) != cudaSuccess)
        abort();
    __asm__ volatile("" ::: "memory"); /* no tail call */
    return p;
}

__attribute__((noinline)) static void *mid(size_t n, int which)
{
    void *p = leaf(n, which);
    __asm__ volatile("" ::: "memory");
    return p;
}

/* the same frame, different code (a tag each): not folded into one */
#define VIA(name, tag)                                                        \
    __attribute__((noinline)) void *name(size_t n)                            \
    {                                                                         \
        g_tag = tag;                                                          \
        void *p = mid(n, tag);                                                \
        __asm__ volatile("" ::: "memory");                                    \
        return p;                                                             \
    }
VIA(via_a, 1)
VIA(via_b, 2)

int main(void)
{
    for (int i = 0; i < 50; i++) {
        void *a = via_a(1000);
        void *b = via_b(2000);
        cudaFree(a);
        cudaFree(b);
    }
    printf("same frame: %s\n", g_frame[1] == g_frame[2] ? "yes" : "no");
    return 0;
}
