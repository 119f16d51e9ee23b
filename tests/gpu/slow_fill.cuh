/* slow_fill.cuh - the kernel of the pool's stress programs (stress_streams.cu
 * and the fork-join library joinlib.cu): spin `spin` clocks, then write v
 * into n words at p - late writes into memory freed while it spins. */
#ifndef SLOW_FILL_CUH
#define SLOW_FILL_CUH
#include <cstddef>

static __global__ void slow_fill(unsigned *p, size_t n, unsigned v, long long spin)
{
    long long t0 = clock64();
    while (clock64() - t0 < spin)
        ;
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}
#endif
