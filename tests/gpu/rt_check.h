/* rt_check.h - CHECK(call): a CUDA runtime call that must succeed, for the
 * GPU test programs. On failure it
 * prints the file, line, call and error, and exits 2. */
#ifndef RT_CHECK_H
#define RT_CHECK_H
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,          \
                    cudaGetErrorString(e_));                                   \
            exit(2);                                                           \
        }                                                                      \
    } while (0)
#endif
