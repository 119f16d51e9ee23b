/*
 * sim_copy.h - what the copy family of the simulated CUDA runtime
 * (tests/sim, see README.md) shares between its files: sim_copy.c
 * (region validation, issuing, linear and 3D copies), sim_copy_batch.c,
 * sim_copy_array.c (symbols and CUDA arrays) and sim_memset.c.  Private to
 * the library, as sim_internal.h is; everything here runs with the lock
 * held.
 */
#ifndef SIM_COPY_H
#define SIM_COPY_H

#include "sim_internal.h"

/* Stream used by the synchronous functions and their _ptds twins. */
#define SIM_SYNC_LEGACY ((cudaStream_t)NULL)
#define SIM_SYNC_PTDS cudaStreamPerThread

/* What a copy kind says a side must be. */
enum sim_need { SIM_NEED_ANY, SIM_NEED_HOST, SIM_NEED_DEVICE };

/* One side of a 3D copy: a CUDA array or a pitched pointer. */
struct sim_side3d {
    const struct cudaArray *arr;
    struct cudaPos pos;          /* elements for arrays, bytes for pointers */
    struct cudaPitchedPtr pp;
};

/* sim_copy.c: region validation */
cudaError_t sim_kind_needs(enum cudaMemcpyKind kind, enum sim_need *dst, enum sim_need *src);
/* A region of linear memory (w, h, d > 0). */
cudaError_t sim_region_ptr(const void *ptr, size_t pitch, size_t slice, size_t w, size_t h,
                           size_t d, enum sim_need need, struct sim_region *r);
/* A w_bytes x h x d box of a CUDA array at byte column x, row y, slice z. */
cudaError_t sim_region_array(const struct cudaArray *arr, size_t x, size_t y, size_t z,
                             size_t w, size_t h, size_t d, struct sim_region *r);
/* Builds c from two sides.  *empty: nothing to copy. */
cudaError_t sim_build_3d(const struct sim_side3d *dst, const struct sim_side3d *src,
                         struct cudaExtent e, enum sim_need nd, enum sim_need ns,
                         struct sim_copy *c, bool *empty);

/* sim_copy.c: issuing operations */
struct sim_op *sim_copy_op(void); /* a one-copy SIM_OP_COPY, NULL on OOM */
/* Enqueues a validated op on stream h (consumes op).  sync_api: a
 * synchronous API (capture rules apply, waits for the op); force_wait:
 * wait for completion without being a synchronising API. */
cudaError_t sim_issue(cudaStream_t h, struct sim_op *op, bool sync_api, bool force_wait);
/* Common tail: issue if validation succeeded, else drop the op; unlocks
 * and returns through sim_ret. */
cudaError_t sim_finish(cudaError_t err, cudaStream_t h, struct sim_op *op, bool sync_api);

#endif
