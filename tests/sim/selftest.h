/*
 * selftest.h - what the self test of the simulated CUDA runtime shares
 * between its files (not part of the library): selftest.c (main, devices,
 * errors, threads, allocation, pointer attributes, reset, stress, fork)
 * and selftest_streams.c (streams, events, host functions, stream-ordered
 * allocation, copies, capture).  One pair of counters for every check,
 * wherever it is made.
 */
#ifndef SIM_SELFTEST_H
#define SIM_SELFTEST_H

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The per-thread-default-stream entry points have no prototypes unless a
 * program is compiled for per-thread default streams. */
__typeof__(cudaMemcpyAsync) cudaMemcpyAsync_ptsz;
__typeof__(cudaMemcpy) cudaMemcpy_ptds;
__typeof__(cudaStreamSynchronize) cudaStreamSynchronize_ptsz;
__typeof__(cudaStreamQuery) cudaStreamQuery_ptsz;

#define MiB (1024u * 1024u)
#define DELAY_US 200000u

/* selftest.c */
extern int failures, checks;
struct cudaExtent extent3(size_t w, size_t h, size_t d);
struct cudaPos pos3(size_t x, size_t y, size_t z);
struct cudaPitchedPtr pitched(void *ptr, size_t pitch, size_t xsize, size_t ysize);
bool all_bytes(const void *p, int value, size_t n);

#define CHECK(cond)                                                                   \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                             \
    } while (0)

/* Expect a specific cudaError_t, printing both names on mismatch. */
#define EXPECT(call, want)                                                            \
    do {                                                                              \
        cudaError_t got_ = (call);                                                    \
        checks++;                                                                     \
        if (got_ != (want)) {                                                         \
            failures++;                                                               \
            fprintf(stderr, "FAIL %s:%d: %s -> %s, expected %s\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorName(got_), cudaGetErrorName(want));           \
        }                                                                             \
    } while (0)

#define OK(call) EXPECT(call, cudaSuccess)

/* selftest_streams.c */
void test_async_and_events(void);
void test_host_func(void);
void test_stream_ordered(void);
void test_copies(void);
void test_capture(void);

#endif
