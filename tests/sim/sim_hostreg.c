/*
 * sim_hostreg.c - registered host memory of the simulated CUDA runtime
 * (tests/sim, see README.md): cudaHostRegister, cudaHostUnregister,
 * cudaHostGetDevicePointer and cudaHostGetFlags.
 *
 * A registration is an allocation record (SIM_MEM_REGISTERED) over the
 * caller's own memory, in the allocation registry like any other: it is
 * never charged to a device and its memory is never freed by the
 * simulator.
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Registered host memory                                              */
/* ------------------------------------------------------------------ */

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    const unsigned valid = cudaHostRegisterPortable | cudaHostRegisterMapped |
                           cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
    if (!ptr || size == 0 || (flags & ~valid))
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    struct sim_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return sim_ret(cudaErrorMemoryAllocation);
    sim_lock();
    err = sim_capture_check_unsafe();
    if (err == cudaSuccess) {
        struct sim_alloc *o = sim_reg_overlap(ptr, size);
        if (o)
            err = (o->type == SIM_MEM_PINNED || o->type == SIM_MEM_REGISTERED)
                      ? cudaErrorHostMemoryAlreadyRegistered
                      : cudaErrorInvalidValue;
    }
    if (err == cudaSuccess) {
        a->base = (uintptr_t)ptr;
        a->size = size;
        a->id = ++sim_g.next_alloc_id;
        a->type = SIM_MEM_REGISTERED;
        a->device = sim_current_device();
        a->flags = flags;
        sim_reg_insert(a);
        a = NULL;
    }
    sim_unlock();
    free(a);
    return sim_ret(err);
}

cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    err = sim_capture_check_unsafe();
    struct sim_alloc *a = err == cudaSuccess ? sim_reg_find(ptr) : NULL;
    if (err == cudaSuccess &&
        (!a || a->type != SIM_MEM_REGISTERED || a->base != (uintptr_t)ptr || a->freeing))
        err = cudaErrorHostMemoryNotRegistered;
    if (err != cudaSuccess) {
        sim_unlock();
        return sim_ret(err);
    }
    /* After this the user may free() the memory: queued copies from / to
     * it must be done (they would be unchecked pageable accesses now). */
    a->freeing = true;
    sim_drain_device(-1);
    sim_alloc_unlink(a);
    sim_unlock();
    sim_alloc_destroy(a); /* frees the record only */
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    if (!pDevice || !pHost || flags != 0)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct sim_alloc *a = sim_reg_find(pHost);
    if (!a || (a->type != SIM_MEM_PINNED && a->type != SIM_MEM_REGISTERED))
        err = cudaErrorInvalidValue;
    else
        *pDevice = pHost; /* unified addressing: same address on both sides */
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    if (!pFlags || !pHost)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct sim_alloc *a = sim_reg_find(pHost);
    if (!a || (a->type != SIM_MEM_PINNED && a->type != SIM_MEM_REGISTERED))
        err = cudaErrorInvalidValue;
    else
        *pFlags = a->flags;
    sim_unlock();
    return sim_ret(err);
}
