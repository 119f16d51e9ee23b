/*
 * sim_mem.c - memory management of the simulated CUDA runtime (tests/sim,
 * see README.md): allocation records, device / managed / pitched / 3D /
 * pinned allocations and their frees, the driver underneath, pointer
 * attributes, IPC handles, cudaMemGetInfo and cudaDeviceReset.
 * Stream-ordered allocations and pools are in sim_mempool.c, CUDA arrays
 * in sim_array.c, registered host memory in sim_hostreg.c.
 *
 * "Device" memory is ordinary host memory from posix_memalign, so tests can
 * look at it directly.  Device, managed and array allocations are charged
 * against the device's capacity (SIM_CUDA_MEM); pinned host memory is not.
 * Before memory goes back to libc it is filled with 0xDB, so a test that
 * keeps using a stale pointer sees garbage rather than its old data.
 *
 * With SIM_CUDA_DRIVER=1 every device and pinned host allocation also gets
 * a twin from the simulated driver (libcuda.so.1, sim_driver.c), the way
 * the real runtime allocates through the driver, and so does every
 * stream made with flags or a priority (sim_drv_stream_twin): see "The
 * driver underneath" below.
 */
#include "sim_internal.h"
#include "simcudart.h"
#include "sim_env.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The driver underneath (SIM_CUDA_DRIVER=1)                           */
/* ------------------------------------------------------------------ */

/*
 * The real runtime reaches the driver with dlopen("libcuda.so.1"),
 * dlsym(handle, "cuGetProcAddress_v2") and cuGetProcAddress, and every
 * allocation it makes is a driver allocation.  With SIM_CUDA_DRIVER=1 the
 * simulator does the same lookups (dlsym, not linking, so that a
 * profiler's dlsym interposition is exercised) and gives each device
 * allocation (cudaMalloc, Pitch, 3D, Managed, the async ones) a
 * cuMemAlloc_v2 twin of the same size, and each pinned host allocation a
 * cuMemHostAlloc twin.  The runtime still hands out its own memory; the
 * twin only models "the runtime calls the driver under every allocation",
 * so that a profiler's driver hooks can be checked to count each
 * allocation once.  Twins are freed with their allocation, inside the call
 * that frees it: cudaFreeAsync releases the twin at once (the real
 * runtime's cuMemFreeAsync is made inside cudaFreeAsync too) rather than
 * from the stream worker, where a profiler would see a driver free that no
 * runtime call explains.
 *
 * cudaMalloc'd memory (not a stream-ordered pool's) is lent to the
 * driver (simDrvLendMemory): its twin is that memory itself, at the same
 * address, so that cudaFree can be what the real one is, the driver's
 * cuMemFree of the pointer (sim_free_via_driver): a profiler that
 * watches the driver sees the address the program freed.
 *
 * The driver is loaded once, at the first allocation, and always called
 * without the global lock, so that whatever hooks it may call back into
 * the runtime.  If it cannot be loaded, one warning and the simulator goes
 * on without it.  Nothing of this happens when SIM_CUDA_DRIVER is unset.
 */
static struct {
    bool on;
    __typeof__(cuMemAlloc_v2) *mem_alloc;
    __typeof__(cuMemFree_v2) *mem_free;
    __typeof__(cuMemHostAlloc) *host_alloc;
    __typeof__(cuMemFreeHost) *host_free;
    __typeof__(cuPointerGetAttribute) *ptr_attr;
    CUresult (*set_device)(int); /* simDrvSetDevice, if the driver has it */
    CUresult (*lend)(void *);    /* simDrvLendMemory, with ptr_attr */
    __typeof__(cuStreamCreate) *stream_create; /* optional */
} sim_drv;

static pthread_once_t sim_drv_once = PTHREAD_ONCE_INIT;

static void *sim_drv_lookup(__typeof__(cuGetProcAddress_v2) *gpa, const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (gpa(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
        st != CU_GET_PROC_ADDRESS_SUCCESS)
        return NULL;
    return fn;
}

static void sim_drv_load(void)
{
    const char *env = getenv("SIM_CUDA_DRIVER");
    if (!env || strcmp(env, "1") != 0)
        return;
    void *h = dlopen("libcuda.so.1", RTLD_NOW); /* kept open: the driver stays */
    if (!h) {
        fprintf(stderr, "simcudart: SIM_CUDA_DRIVER=1 but the driver could not be loaded (%s); "
                        "going on without it\n", dlerror());
        return;
    }
    __typeof__(cuGetProcAddress_v2) *gpa =
        (__typeof__(cuGetProcAddress_v2) *)dlsym(h, "cuGetProcAddress_v2");
    if (gpa) {
        sim_drv.mem_alloc = (__typeof__(cuMemAlloc_v2) *)sim_drv_lookup(gpa, "cuMemAlloc");
        sim_drv.mem_free = (__typeof__(cuMemFree_v2) *)sim_drv_lookup(gpa, "cuMemFree");
        sim_drv.host_alloc = (__typeof__(cuMemHostAlloc) *)sim_drv_lookup(gpa, "cuMemHostAlloc");
        sim_drv.host_free = (__typeof__(cuMemFreeHost) *)sim_drv_lookup(gpa, "cuMemFreeHost");
    }
    if (!sim_drv.mem_alloc || !sim_drv.mem_free || !sim_drv.host_alloc || !sim_drv.host_free) {
        fprintf(stderr, "simcudart: SIM_CUDA_DRIVER=1 but libcuda.so.1 lacks cuGetProcAddress_v2 or "
                        "a memory function; going on without the driver\n");
        return;
    }
    sim_drv.stream_create = (__typeof__(cuStreamCreate) *)sim_drv_lookup(gpa, "cuStreamCreate");
    sim_drv.set_device = (CUresult(*)(int))dlsym(h, "simDrvSetDevice");
    sim_drv.lend = (CUresult(*)(void *))dlsym(h, "simDrvLendMemory");
    sim_drv.ptr_attr = gpa ? (__typeof__(cuPointerGetAttribute) *)sim_drv_lookup(gpa, "cuPointerGetAttribute")
                           : NULL;
    if (!sim_drv.ptr_attr)
        sim_drv.lend = NULL;
    sim_drv.on = true;
}

/* Loads the driver the first time (lock NOT held); true if it is in use. */
bool sim_drv_ready(void)
{
    (void)pthread_once(&sim_drv_once, sim_drv_load);
    return sim_drv.on;
}

/* A stream's creation reaches the driver too (lock NOT held), as the
 * real runtime's does: a driver stream with the same flags, kept (the
 * runtime's stream stays the one the program uses), so that a profiler's
 * driver wrappers see a creation under the runtime's. */
void sim_drv_stream_twin(unsigned flags)
{
    CUstream s;
    if (sim_drv_ready() && sim_drv.stream_create)
        (void)sim_drv.stream_create(&s, flags);
}

void sim_drv_release(enum sim_mem_type type, uintptr_t twin)
{
    if (type == SIM_MEM_PINNED)
        (void)sim_drv.host_free((void *)twin);
    else
        (void)sim_drv.mem_free((CUdeviceptr)twin);
}

/*
 * Gives a fresh allocation its driver twin (lock NOT held).  The caller
 * has set a->freeing, which keeps cudaDeviceReset away from the record
 * meanwhile; nobody else knows the pointer yet.  If the driver refuses,
 * the allocation is undone as if it had never been made and the call
 * fails with cudaErrorMemoryAllocation, as the real runtime's would.
 */
cudaError_t sim_drv_attach(struct sim_alloc *a)
{
    uintptr_t twin = 0;
    CUresult r;

    if (a->type == SIM_MEM_PINNED) {
        void *p = NULL;
        /* cudaHostAlloc* flags have the values of CU_MEMHOSTALLOC_*. */
        r = sim_drv.host_alloc(&p, a->size, a->flags);
        twin = (uintptr_t)p;
    } else {
        CUdeviceptr p = 0;
        /* The runtime makes the device's context current first. */
        if (sim_drv.set_device)
            (void)sim_drv.set_device(a->device);
        /* cudaMalloc'd memory (not a stream-ordered pool's) is the
         * driver's allocation itself: see sim_free_via_driver. */
        bool lend = sim_drv.lend && a->pool == NULL;
        if (lend)
            (void)sim_drv.lend((void *)a->base);
        r = sim_drv.mem_alloc(&p, a->size);
        if (lend)
            (void)sim_drv.lend(NULL);
        twin = (uintptr_t)p;
        a->drv_lent = lend && r == CUDA_SUCCESS && twin == a->base;
    }
    sim_lock();
    if (r == CUDA_SUCCESS && twin) {
        a->drv_ptr = twin;
        a->freeing = false;
        sim_unlock();
        return cudaSuccess;
    }
    sim_alloc_unlink(a);
    sim_g.mallocs--; /* never happened, for simGetStats too */
    sim_g.frees--;
    sim_unlock();
    sim_alloc_destroy(a);
    return cudaErrorMemoryAllocation;
}

/* ------------------------------------------------------------------ */
/* Allocation records                                                  */
/* ------------------------------------------------------------------ */

/*
 * Creates and registers an allocation (lock held).  Capacity is checked and
 * charged atomically with the registration, so concurrent allocations can
 * never overshoot SIM_CUDA_MEM.
 */
cudaError_t sim_alloc_new(enum sim_mem_type type, size_t size, int dev, unsigned flags,
                          struct CUmemPoolHandle_st *pool, struct sim_alloc **out)
{
    bool charged = type == SIM_MEM_DEVICE || type == SIM_MEM_MANAGED || type == SIM_MEM_ARRAY;
    size_t align = type == SIM_MEM_PINNED ? SIM_HOST_ALIGN : SIM_DEV_ALIGN;
    size_t rounded = sim_round_up(size, align);
    struct sim_device *d = &sim_g.dev[dev];
    void *mem = NULL;

    if (size == 0 || rounded < size)
        return cudaErrorMemoryAllocation;
    if (charged && size > d->capacity - d->used)
        return cudaErrorMemoryAllocation;
    if (pool && pool->max_size && size > pool->max_size - pool->used)
        return cudaErrorMemoryAllocation;

    struct sim_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return cudaErrorMemoryAllocation;
    if (posix_memalign(&mem, align, rounded) != 0) {
        free(a);
        return cudaErrorMemoryAllocation;
    }
    /* A registration the user forgot to undo before free()ing its memory
     * may cover the block libc just handed us; the registration is stale,
     * drop it so the registry stays a set of disjoint ranges. */
    for (struct sim_alloc *o; (o = sim_reg_overlap(mem, size)) != NULL;) {
        if (o->type != SIM_MEM_REGISTERED) {
            /* Our own blocks leave the registry before libc gets them back. */
            fprintf(stderr, "simcudart: internal error: libc returned tracked memory %p\n", mem);
            abort();
        }
        sim_reg_remove(o);
        free(o);
    }

    a->base = (uintptr_t)mem;
    a->size = size;
    a->id = ++sim_g.next_alloc_id;
    a->type = type;
    a->device = dev;
    a->flags = flags;
    a->charged = charged;
    a->pool = pool;
    sim_reg_insert(a);

    if (charged) {
        d->used += size;
        if (d->used > d->peak)
            d->peak = d->used;
    }
    if (pool) {
        pool->used += size;
        if (pool->used > pool->used_high)
            pool->used_high = pool->used;
    }
    sim_g.mallocs++;
    *out = a;
    return cudaSuccess;
}

void sim_alloc_unlink(struct sim_alloc *a)
{
    sim_reg_remove(a);
    if (a->charged)
        sim_g.dev[a->device].used -= a->size;
    if (a->pool) {
        struct CUmemPoolHandle_st *p = a->pool;
        p->used -= a->size;
        if (p->destroyed && p->used == 0) {
            p->magic = 0;
            free(p); /* destroyed by the user while allocations were live */
        }
        a->pool = NULL;
    }
    if (a->type != SIM_MEM_REGISTERED)
        sim_g.frees++;
}

void sim_alloc_destroy(struct sim_alloc *a)
{
    if (a->drv_ptr)
        sim_drv_release(a->type, a->drv_ptr);
    if (a->type != SIM_MEM_REGISTERED) {
        /* Poison before libc gets it back: stale users see 0xDB bytes. */
        memset((void *)a->base, SIM_FREED_FILL, a->size);
        free((void *)a->base);
    }
    free(a);
}

/* Allocation front end shared by the cudaMalloc family. */
static cudaError_t sim_malloc_common(void **out, size_t size, enum sim_mem_type type, unsigned flags,
                                     struct CUmemPoolHandle_st *pool, int dev, bool capture_unsafe)
{
    struct sim_alloc *a = NULL;
    cudaError_t err = cudaSuccess;
    bool twin = sim_drv_ready();
    void *base = NULL;

    *out = NULL;
    sim_lock();
    if (capture_unsafe)
        err = sim_capture_check_unsafe();
    if (err == cudaSuccess && size > 0)
        err = sim_alloc_new(type, size, dev, flags, pool, &a);
    if (a) {
        base = (void *)a->base;
        a->freeing = twin; /* until it has its driver twin */
    }
    sim_unlock();
    if (a && twin && (err = sim_drv_attach(a)) != cudaSuccess)
        base = NULL;
    *out = base;
    return err;
}

/* ------------------------------------------------------------------ */
/* cudaMalloc family                                                   */
/* ------------------------------------------------------------------ */

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr)
        return sim_ret(cudaErrorInvalidValue);
    *devPtr = NULL;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    return sim_ret(sim_malloc_common(devPtr, size, SIM_MEM_DEVICE, 0, NULL, sim_current_device(), true));
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (!devPtr)
        return sim_ret(cudaErrorInvalidValue);
    *devPtr = NULL;
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    return sim_ret(sim_malloc_common(devPtr, size, SIM_MEM_MANAGED, flags, NULL, sim_current_device(), true));
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!devPtr || !pitch)
        return sim_ret(cudaErrorInvalidValue);
    *devPtr = NULL;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    size_t p = sim_round_up(width, SIM_DEV_ALIGN);
    if (p < width || (height && p > SIZE_MAX / height))
        return sim_ret(cudaErrorMemoryAllocation);
    err = sim_malloc_common(devPtr, p * height, SIM_MEM_DEVICE, 0, NULL, sim_current_device(), true);
    if (err == cudaSuccess)
        *pitch = p;
    return sim_ret(err);
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    if (!pitchedDevPtr)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    size_t p = sim_round_up(extent.width, SIM_DEV_ALIGN), rows;
    if (p < extent.width || __builtin_mul_overflow(extent.height, extent.depth, &rows) ||
        (rows && p > SIZE_MAX / rows))
        return sim_ret(cudaErrorMemoryAllocation);
    void *ptr = NULL;
    err = sim_malloc_common(&ptr, p * rows, SIM_MEM_DEVICE, 0, NULL, sim_current_device(), true);
    if (err == cudaSuccess) {
        pitchedDevPtr->ptr = ptr;
        pitchedDevPtr->pitch = p;
        pitchedDevPtr->xsize = extent.width;
        pitchedDevPtr->ysize = extent.height;
    }
    return sim_ret(err);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr)
        return sim_ret(cudaErrorInvalidValue);
    *ptr = NULL;
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    return sim_ret(sim_malloc_common(ptr, size, SIM_MEM_PINNED, cudaHostAllocDefault, NULL,
                                     sim_current_device(), true));
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return sim_ret(cudaErrorInvalidValue);
    *pHost = NULL;
    if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    return sim_ret(sim_malloc_common(pHost, size, SIM_MEM_PINNED, flags, NULL, sim_current_device(), true));
}

/* Does the driver still hold an allocation at p? (Lock not held.) */
static bool sim_drv_holds(void *p)
{
    CUmemorytype type;
    return sim_drv.ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) == CUDA_SUCCESS;
}

/*
 * cudaFree with the driver underneath, of memory lent to it (see
 * sim_drv_attach) or of a pointer the runtime does not know as an
 * allocation's start: the real runtime's cudaFree is the driver's
 * cuMemFree of the pointer, so the driver decides, before the runtime
 * touches anything (lock NOT held).  Its error is the runtime's
 * cudaErrorInvalidValue.  A success the driver did not make itself - a
 * profiler above it took the call and kept the memory, which still is
 * the driver's - leaves the allocation alone.  Otherwise the allocation
 * goes as in cudaFree: its device drained, then poisoned and freed.
 */
static cudaError_t sim_free_via_driver(void *devPtr)
{
    if (sim_drv.mem_free((CUdeviceptr)devPtr) != CUDA_SUCCESS)
        return cudaErrorInvalidValue;
    if (sim_drv_holds(devPtr))
        return cudaSuccess;
    sim_lock();
    struct sim_alloc *a = sim_reg_find(devPtr);
    if (!a || a->base != (uintptr_t)devPtr || a->freeing || !a->drv_lent) {
        sim_unlock(); /* a racing cudaFreeAsync has it */
        return cudaSuccess;
    }
    a->drv_ptr = 0; /* released just now */
    a->freeing = true;
    sim_g.device_syncs++;
    sim_drain_device(a->device);
    sim_alloc_unlink(a);
    sim_unlock();
    sim_alloc_destroy(a);
    return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess || !devPtr)
        return sim_ret(err); /* cudaFree(NULL): only the implicit init */

    bool via_driver = sim_drv_ready() && sim_drv.lend;
    sim_lock();
    err = sim_capture_check_unsafe();
    struct sim_alloc *a = err == cudaSuccess ? sim_reg_find(devPtr) : NULL;
    if (err == cudaSuccess && via_driver &&
        !(a && a->base == (uintptr_t)devPtr && !a->drv_lent)) {
        sim_unlock();
        return sim_ret(sim_free_via_driver(devPtr));
    }
    if (err == cudaSuccess &&
        (!a || a->base != (uintptr_t)devPtr || a->freeing ||
         (a->type != SIM_MEM_DEVICE && a->type != SIM_MEM_MANAGED)))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess) {
        sim_unlock();
        return sim_ret(err);
    }
    /* Like the real cudaFree: wait for all work on the memory's device
     * first, so that memory still used by queued operations is not
     * released - except a stream-ordered pool's memory, whose cudaFree
     * waits for nothing (measured on an H100, docs/validation.md). */
    a->freeing = true;
    if (a->pool == NULL) {
        sim_g.device_syncs++;
        sim_drain_device(a->device);
    }
    sim_alloc_unlink(a);
    sim_unlock();
    sim_alloc_destroy(a);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess || !ptr)
        return sim_ret(err);

    sim_lock();
    err = sim_capture_check_unsafe();
    struct sim_alloc *a = err == cudaSuccess ? sim_reg_find(ptr) : NULL;
    if (err == cudaSuccess &&
        (!a || a->base != (uintptr_t)ptr || a->freeing || a->type != SIM_MEM_PINNED))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess) {
        sim_unlock();
        return sim_ret(err);
    }
    /* Pinned memory may be the source / target of async copies on any
     * device: let them finish (the real cudaFreeHost synchronises too). */
    a->freeing = true;
    sim_drain_device(-1);
    sim_alloc_unlink(a);
    sim_unlock();
    sim_alloc_destroy(a);
    return cudaSuccess;
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */
/* ------------------------------------------------------------------ */

cudaError_t cudaMemGetInfo(size_t *freeBytes, size_t *totalBytes)
{
    if (!freeBytes || !totalBytes)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct sim_device *d = &sim_g.dev[sim_current_device()];
    *freeBytes = (size_t)sim_free_reported(d->capacity - d->used);
    *totalBytes = d->capacity;
    sim_unlock();
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    memset(attributes, 0, sizeof *attributes);
    sim_lock();
    struct sim_alloc *a = ptr ? sim_reg_find(ptr) : NULL;
    if (!a || a->type == SIM_MEM_ARRAY) {
        /* Unknown memory is not an error since CUDA 11. -2 is the driver's
         * "invalid device" ordinal (CU_DEVICE_INVALID). */
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)ptr;
    } else {
        attributes->device = a->device;
        switch (a->type) {
        case SIM_MEM_DEVICE:
            attributes->type = cudaMemoryTypeDevice;
            attributes->devicePointer = (void *)ptr;
            break;
        case SIM_MEM_MANAGED:
            attributes->type = cudaMemoryTypeManaged;
            attributes->devicePointer = (void *)ptr;
            attributes->hostPointer = (void *)ptr;
            break;
        default: /* pinned or registered host memory, mapped at the same address */
            attributes->type = cudaMemoryTypeHost;
            attributes->devicePointer = (void *)ptr;
            attributes->hostPointer = (void *)ptr;
            break;
        }
    }
    sim_unlock();
    return cudaSuccess;
}

_Static_assert(sizeof(struct simIpcHandleLayout) <= CUDA_IPC_HANDLE_SIZE,
               "simIpcHandleLayout must fit in cudaIpcMemHandle_t");

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (!handle)
        return sim_ret(cudaErrorInvalidValue);
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    sim_lock();
    struct sim_alloc *a = devPtr ? sim_reg_find(devPtr) : NULL;
    /* Only cudaMalloc-style device memory can be exported (pool memory
     * needs the pool IPC API, managed / host memory cannot be). */
    if (!a || a->type != SIM_MEM_DEVICE || a->pool) {
        err = cudaErrorInvalidValue;
    } else {
        /* Like the real handle, it names the whole allocation containing
         * devPtr: the layout is struct simIpcHandleLayout (simcudart.h). */
        struct simIpcHandleLayout h;
        memset(&h, 0, sizeof h);
        h.magic = SIM_IPC_MAGIC;
        h.base = (unsigned long long)a->base;
        h.size = (unsigned long long)a->size;
        h.alloc_id = a->id;
        h.device = a->device;
        memset(handle, 0, sizeof *handle);
        memcpy(handle->reserved, &h, sizeof h);
    }
    sim_unlock();
    return sim_ret(err);
}

/* ------------------------------------------------------------------ */
/* Device reset                                                        */
/* ------------------------------------------------------------------ */

cudaError_t cudaDeviceReset(void)
{
    cudaError_t err = sim_enter();
    if (err != cudaSuccess)
        return sim_ret(err);
    int dev = sim_current_device();
    struct sim_alloc **v = NULL, **dead = NULL;
    size_t n, ndead = 0;
    struct cudaArray *dead_arrays = NULL;

    sim_lock();
    err = sim_capture_check_unsafe();
    if (err != cudaSuccess) {
        sim_unlock();
        return sim_ret(err);
    }
    sim_drain_device(dev);

    /* Every allocation made on this device (device, managed, pinned, array)
     * is released, registrations are dropped. */
    n = sim_reg_collect(&v);
    dead = v; /* compacted in place */
    for (size_t i = 0; i < n; i++) {
        struct sim_alloc *a = v[i];
        if (a->device != dev || a->freeing)
            continue; /* another thread is freeing it right now */
        sim_alloc_unlink(a);
        dead[ndead++] = a;
    }
    for (struct cudaArray **pp = &sim_g.arrays; *pp;) {
        struct cudaArray *arr = *pp;
        if (arr->device == dev) {
            *pp = arr->next;
            arr->next = dead_arrays;
            dead_arrays = arr;
        } else {
            pp = &arr->next;
        }
    }
    for (struct CUmemPoolHandle_st **pp = &sim_g.pools; *pp;) {
        struct CUmemPoolHandle_st *p = *pp;
        if (p->device == dev && !p->is_default) {
            *pp = p->next;
            p->destroyed = true;
            if (p->used == 0) {
                p->magic = 0;
                free(p);
            }
        } else {
            pp = &p->next;
        }
    }
    sim_g.dev[dev].current_pool = sim_g.dev[dev].default_pool;
    sim_g.dev[dev].default_pool->used_high = sim_g.dev[dev].default_pool->used;
    memset(sim_g.dev[dev].peer_enabled, 0, sizeof sim_g.dev[dev].peer_enabled);
    sim_device_reset_streams(dev);
    sim_unlock();

    for (size_t i = 0; i < ndead; i++)
        sim_alloc_destroy(dead[i]);
    free(v);
    while (dead_arrays) {
        struct cudaArray *next = dead_arrays->next;
        dead_arrays->magic = 0;
        free(dead_arrays);
        dead_arrays = next;
    }
    return cudaSuccess;
}
