/*
 * sim_array.c - CUDA arrays of the simulated CUDA runtime (tests/sim, see
 * README.md): cudaCreateChannelDesc, cudaMallocArray, cudaMalloc3DArray,
 * cudaArrayGetInfo and cudaFreeArray.
 *
 * An array is a plain row-major block of host memory, allocated and
 * charged to the device like cudaMalloc'd memory (an allocation record of
 * type SIM_MEM_ARRAY from sim_alloc_new), with its own handle that the
 * copy functions (sim_copy_array.c) check with sim_array_is_live.
 */
#include "sim_internal.h"
#include "simcudart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* CUDA arrays                                                         */
/* ------------------------------------------------------------------ */

bool sim_array_is_live(const struct cudaArray *arr)
{
    for (const struct cudaArray *a = sim_g.arrays; a; a = a->next)
        if (a == arr)
            return true;
    return false;
}

static cudaError_t sim_array_new(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                 size_t width, size_t height, size_t depth, unsigned flags)
{
    if (!array || !desc || width == 0)
        return cudaErrorInvalidValue;
    *array = NULL;
    if (desc->x < 0 || desc->y < 0 || desc->z < 0 || desc->w < 0 ||
        desc->x % 8 || desc->y % 8 || desc->z % 8 || desc->w % 8)
        return cudaErrorInvalidChannelDescriptor;
    size_t elem = (size_t)(desc->x + desc->y + desc->z + desc->w) / 8, bytes;
    if (elem == 0)
        return cudaErrorInvalidChannelDescriptor;
    struct cudaExtent requested = { width, height, depth };
    if (height == 0)
        height = 1; /* 1D array */
    if (depth == 0)
        depth = 1;
    if (__builtin_mul_overflow(width, elem, &bytes) || __builtin_mul_overflow(bytes, height, &bytes) ||
        __builtin_mul_overflow(bytes, depth, &bytes))
        return cudaErrorMemoryAllocation;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return err;

    struct cudaArray *arr = calloc(1, sizeof *arr);
    if (!arr)
        return cudaErrorMemoryAllocation;
    struct sim_alloc *a = NULL;
    int dev = sim_current_device();
    sim_lock();
    err = sim_capture_check_unsafe();
    if (err == cudaSuccess)
        err = sim_alloc_new(SIM_MEM_ARRAY, bytes, dev, flags, NULL, &a);
    if (err == cudaSuccess) {
        arr->magic = SIM_MAGIC_ARRAY;
        arr->device = dev;
        arr->desc = *desc;
        arr->elem = elem;
        arr->width = width;
        arr->height = height;
        arr->depth = depth;
        arr->extent = requested;
        arr->flags = flags;
        arr->data = (char *)a->base;
        arr->alloc = a;
        a->array = arr;
        arr->next = sim_g.arrays;
        sim_g.arrays = arr;
        *array = arr;
    }
    sim_unlock();
    if (err != cudaSuccess)
        free(arr);
    return err;
}

struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f)
{
    struct cudaChannelFormatDesc d = { x, y, z, w, f };
    return d;
}

cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                            size_t width, size_t height, unsigned int flags)
{
    return sim_ret(sim_array_new(array, desc, width, height, 0, flags));
}

cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                              struct cudaExtent extent, unsigned int flags)
{
    return sim_ret(sim_array_new(array, desc, extent.width, extent.height, extent.depth, flags));
}

cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned int *flags,
                             cudaArray_t array)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    if (!array || !sim_array_is_live(array)) {
        err = cudaErrorInvalidValue;
    } else {
        if (desc)
            *desc = array->desc;
        if (extent)
            *extent = array->extent;
        if (flags)
            *flags = array->flags;
    }
    sim_unlock();
    return sim_ret(err);
}

cudaError_t cudaFreeArray(cudaArray_t array)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess || !array)
        return sim_ret(err);
    sim_lock();
    err = sim_capture_check_unsafe();
    if (err == cudaSuccess && !sim_array_is_live(array))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess) {
        sim_unlock();
        return sim_ret(err);
    }
    for (struct cudaArray **pp = &sim_g.arrays; *pp; pp = &(*pp)->next) {
        if (*pp == array) {
            *pp = array->next;
            break;
        }
    }
    struct sim_alloc *a = array->alloc;
    a->freeing = true;
    sim_drain_device(array->device); /* queued copies may still use it */
    sim_alloc_unlink(a);
    sim_unlock();
    sim_alloc_destroy(a);
    array->magic = 0;
    free(array);
    return cudaSuccess;
}
