/*
 * simcudart.h - test-only extras of the simulated CUDA runtime
 * (tests/sim/libcudart.so.13, see tests/sim/README.md).
 *
 * Test programs include this next to <cuda_runtime_api.h> to "launch
 * kernels" (there is no device code in the simulator), to read the
 * simulator's own counters, and to decode IPC handles.  These functions
 * exist only in the simulator: a program that calls them cannot run
 * against the real libcudart.
 */
#ifndef SIMCUDART_H
#define SIMCUDART_H

#include <cuda_runtime_api.h>

#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Simulated kernel: enqueues on `stream` an operation that sleeps delay_us
 * microseconds and then memsets [dst, dst + bytes) to `value`.
 * At launch dst must either lie inside no tracked allocation or the whole
 * range must lie inside one (else cudaErrorInvalidValue, like an
 * out-of-bounds launch caught early).  Like a real kernel, the operation
 * does not care whether dst is still allocated when it runs; if the
 * allocation it was launched against is gone by then, simStaleWrites() is
 * incremented and the bytes are written only if they now belong to a newer
 * allocation (reused memory gets corrupted, as on a GPU); memory that went
 * back to libc is never touched.
 */
cudaError_t simLaunchFill(void *dst, int value, size_t bytes, unsigned delay_us, cudaStream_t stream);

/* Simulated kernel that only takes delay_us microseconds. */
cudaError_t simLaunchSleep(unsigned delay_us, cudaStream_t stream);

/* Number of stream operations (simLaunchFill, async memset / copy
 * destinations) that wrote to memory whose allocation had been freed. */
unsigned long long simStaleWrites(void);

/* Same for copy sources read after their allocation had been freed (the
 * destination then receives 0xDB bytes if the source went back to libc). */
unsigned long long simStaleReads(void);

struct simStats {
    unsigned long long mallocs;        /* successful allocations of any kind
                                          (not cudaHostRegister) */
    unsigned long long frees;          /* allocations actually released
                                          (cudaFreeAsync: when the stream ran it) */
    unsigned long long live_bytes[8];  /* per device: capacity-charged bytes
                                          (device + managed + arrays) */
    unsigned long long peak_bytes[8];  /* per device: high watermark of live_bytes */
    unsigned long long device_syncs;   /* cudaDeviceSynchronize calls, plus the
                                          implicit one inside each cudaFree */
    unsigned long long stream_syncs;   /* successful cudaStreamSynchronize calls */
};

void simGetStats(struct simStats *out);

/*
 * Layout of cudaIpcMemHandle_t::reserved as written by cudaIpcGetMemHandle:
 * it names the whole allocation containing the pointer given to it.
 * Unused bytes are zero.
 */
#define SIM_IPC_MAGIC 0x31434950534d4753ULL /* "SGMSPIC1" little-endian */

struct simIpcHandleLayout {
    unsigned long long magic;     /* SIM_IPC_MAGIC */
    unsigned long long base;      /* base address of the allocation */
    unsigned long long size;      /* its size in bytes as requested */
    unsigned long long alloc_id;  /* simulator-unique allocation id */
    int device;                   /* owning device */
};

/* Returns 1 and fills *out if h was produced by the simulator, else 0. */
static inline int simIpcHandleDecode(const cudaIpcMemHandle_t *h, struct simIpcHandleLayout *out)
{
    memcpy(out, h->reserved, sizeof *out);
    return out->magic == SIM_IPC_MAGIC;
}

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDART_H */
