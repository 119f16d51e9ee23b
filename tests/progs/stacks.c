/* stacks.c - allocations from known functions, for the stack test.
 *
 * main -> middle -> leaf_alloc -> cudaMalloc(4096), and main ->
 * other_alloc -> cudaMalloc(8192). The test finds these functions in the
 * binary's symbol table and checks that the recorded frames fall inside
 * them, innermost first, with no tracer frame on top. The loop makes the
 * same stacks recur, which must not add stack definitions.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

__attribute__((noinline)) void leaf_alloc(void **p)
{
    if (cudaMalloc(p, 4096) != cudaSuccess)
        abort();
    __asm__ volatile("" ::: "memory"); /* no tail call */
}

__attribute__((noinline)) void middle(void **p)
{
    leaf_alloc(p);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void other_alloc(void **p)
{
    if (cudaMalloc(p, 8192) != cudaSuccess)
        abort();
    __asm__ volatile("" ::: "memory");
}

int main(void)
{
    for (int i = 0; i < 10; i++) {
        void *a, *b;
        middle(&a);
        other_alloc(&b);
        cudaFree(a);
        cudaFree(b);
    }
    printf("ok\n");
    return 0;
}
