/* cu_check.h - CK(call): a driver API call that must succeed, for the GPU
 * measurement programs (vmm_cost.cu, vmm_stall.cu). On failure it prints
 * the program (PROG), the call, the error's name and the line, and exits 1. */
#ifndef CU_CHECK_H
#define CU_CHECK_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                 \
    do {                                                                      \
        CUresult r_ = (x);                                                    \
        if (r_ != CUDA_SUCCESS) {                                             \
            const char *s_ = "?";                                             \
            cuGetErrorName(r_, &s_);                                          \
            fprintf(stderr, "%s: %s: %s (line %d)\n", PROG, #x, s_, __LINE__); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
#endif
