/* events.c - turning each family of runtime calls into trace events.
 *
 * hooks.c knows the signatures; this file knows what to record: which
 * address and size, which stream, which copy direction. Failed calls are
 * recorded too, with their error (a failed allocation is how an
 * out-of-memory shows up in the trace).
 */
#include <string.h>

#include "real.h"

uint64_t gmt_stream_of(const void *stream, bool ptsz)
{
    uintptr_t s = (uintptr_t)stream;
    if (s == 0)
        return ptsz ? GMT_STREAM_PER_THREAD : GMT_STREAM_LEGACY;
    if (s == (uintptr_t)cudaStreamLegacy)
        return GMT_STREAM_LEGACY;
    return s; /* cudaStreamPerThread is 2 == GMT_STREAM_PER_THREAD */
}

static void emit(struct gmt_call *c, struct gmt_event *ev, int r,
                 uint64_t stream)
{
    ev->result = r;
    if (stream != GMT_NO_STREAM) {
        ev->has_stream = true;
        ev->stream = stream;
    }
    gmt_call_emit(c, ev);
}

void gmt_ev_alloc(struct gmt_call *c, int r, unsigned api, const void *ptr,
                  uint64_t size, uint64_t block, uint64_t flags,
                  uint64_t stream)
{
    struct gmt_event ev = {
        .kind = GMT_K_ALLOC,
        .api = (uint8_t)api,
        .device = GMT_DEVICE_CURRENT,
        .addr = r == 0 ? (uintptr_t)ptr : 0,
        .size = size,
        .size2 = block > size ? block - size : 0,
        .flags = flags,
    };
    emit(c, &ev, r, stream);
}

void gmt_ev_free(struct gmt_call *c, int r, unsigned api, const void *ptr,
                 uint64_t stream)
{
    struct gmt_event ev = {
        .kind = GMT_K_FREE,
        .api = (uint8_t)api,
        .device = GMT_DEVICE_CURRENT,
        .addr = (uintptr_t)ptr,
    };
    emit(c, &ev, r, stream);
}

static unsigned side(int cls)
{
    return cls == GMT_PTR_DEVICE;
}

static unsigned hostmem(int cls)
{
    return cls == GMT_PTR_PINNED     ? GMT_HOSTMEM_PINNED
           : cls == GMT_PTR_PAGEABLE ? GMT_HOSTMEM_PAGEABLE
                                     : GMT_HOSTMEM_UNKNOWN;
}

/* Resolve the copy's direction, and the host side's memory kind (pinned
 * copies are asynchronous and fast, pageable ones staged and slow - the
 * transfers report's most useful column). The pointer queries are skipped
 * when the call failed: pointers may be garbage then. */
static uint8_t direction(int r, const void *dst, const void *src, int kind)
{
    static const uint8_t dir_of[2][2] = {
        /* [src is device][dst is device] */
        {GMT_DIR_H2H, GMT_DIR_H2D}, {GMT_DIR_D2H, GMT_DIR_D2D}};
    int dir;
    switch (kind) {
    case cudaMemcpyHostToHost:
        return GMT_DIR_H2H;
    case cudaMemcpyDeviceToDevice:
        return GMT_DIR_D2D;
    case cudaMemcpyHostToDevice:
        dir = GMT_DIR_H2D;
        break;
    case cudaMemcpyDeviceToHost:
        dir = GMT_DIR_D2H;
        break;
    case cudaMemcpyDefault:
        if (r != 0)
            return GMT_DIR_UNKNOWN;
        {
            int cd = gmt_quiet_ptr_class(dst), cs = gmt_quiet_ptr_class(src);
            if (cd == GMT_PTR_UNKNOWN || cs == GMT_PTR_UNKNOWN)
                return GMT_DIR_UNKNOWN;
            dir = dir_of[side(cs)][side(cd)];
            if (dir == GMT_DIR_H2D)
                return (uint8_t)(dir | hostmem(cs) << GMT_HOSTMEM_SHIFT);
            if (dir == GMT_DIR_D2H)
                return (uint8_t)(dir | hostmem(cd) << GMT_HOSTMEM_SHIFT);
            return (uint8_t)dir;
        }
    default:
        return GMT_DIR_UNKNOWN;
    }
    if (r != 0 || !gmt_opt.hostmem)
        return (uint8_t)dir;
    const void *host = dir == GMT_DIR_H2D ? src : dst;
    return (uint8_t)(dir | hostmem(gmt_quiet_ptr_class(host))
                               << GMT_HOSTMEM_SHIFT);
}

void gmt_ev_copy(struct gmt_call *c, int r, unsigned api, const void *dst,
                 const void *src, uint64_t bytes, int kind, uint64_t stream)
{
    struct gmt_event ev = {
        .kind = GMT_K_MEMCPY,
        .api = (uint8_t)api,
        .dir = direction(r, dst, src, kind),
        .device = GMT_DEVICE_CURRENT,
        .addr = (uintptr_t)dst,
        .addr2 = (uintptr_t)src,
        .size = bytes,
    };
    emit(c, &ev, r, stream);
}

void gmt_ev_set(struct gmt_call *c, int r, unsigned api, const void *ptr,
                uint64_t bytes, int value, uint64_t stream)
{
    struct gmt_event ev = {
        .kind = GMT_K_MEMSET,
        .api = (uint8_t)api,
        .device = GMT_DEVICE_CURRENT,
        .addr = (uintptr_t)ptr,
        .size = bytes,
        .value = (uint8_t)value, /* memset uses the low byte */
    };
    emit(c, &ev, r, stream);
}

void gmt_ev_sync(struct gmt_call *c, int r, unsigned api, uint64_t stream)
{
    struct gmt_event ev = {
        .kind = GMT_K_SYNC,
        .api = (uint8_t)api,
        .device = GMT_DEVICE_CURRENT,
    };
    emit(c, &ev, r, stream);
}

void gmt_ev_stream_create(struct gmt_call *c, int r, unsigned api,
                          const void *handle, unsigned flags, int priority)
{
    struct gmt_event ev = {
        .kind = GMT_K_STREAM_CREATE,
        .api = (uint8_t)api,
        .device = GMT_DEVICE_CURRENT,
        .addr = r == 0 ? (uintptr_t)handle : 0,
        .flags = flags,
        .value = (uint64_t)(int64_t)priority,
    };
    emit(c, &ev, r, GMT_NO_STREAM);
}

void gmt_ev_stream_destroy(struct gmt_call *c, int r, const void *handle)
{
    struct gmt_event ev = {
        .kind = GMT_K_STREAM_DESTROY,
        .device = GMT_DEVICE_CURRENT,
        .addr = (uintptr_t)handle,
    };
    emit(c, &ev, r, GMT_NO_STREAM);
}

void gmt_ev_set_device(struct gmt_call *c, int r, int device)
{
    struct gmt_event ev = {
        .kind = GMT_K_SET_DEVICE,
        .device = r == 0 ? device : GMT_DEVICE_CURRENT,
        .value = (uint64_t)(uint32_t)device,
    };
    if (r == 0)
        c->t->last_device = device;
    emit(c, &ev, r, GMT_NO_STREAM);
}

void gmt_ev_mem_get_info(struct gmt_call *c, int r, uint64_t free_b,
                         uint64_t total_b)
{
    struct gmt_event ev = {
        .kind = GMT_K_MEMGETINFO,
        .device = GMT_DEVICE_CURRENT,
        .size = r == 0 ? free_b : 0,
        .size2 = r == 0 ? total_b : 0,
    };
    emit(c, &ev, r, GMT_NO_STREAM);
}

/* Size in bytes of one element of a CUDA array, or 1 if unknown. */
static uint64_t array_elem_size(const void *array)
{
    struct cudaChannelFormatDesc d;
    struct cudaExtent e;
    unsigned flags;
    if (array == NULL || GMT_REAL(cudaPeekAtLastError)() != cudaSuccess)
        return 1;
    if (GMT_REAL(cudaArrayGetInfo)(&d, &e, &flags,
                                   (cudaArray_t)(uintptr_t)array) !=
        cudaSuccess) {
        GMT_REAL(cudaGetLastError)();
        return 1;
    }
    int bits = d.x + d.y + d.z + d.w;
    return bits >= 8 ? (uint64_t)bits / 8 : 1;
}

static const void *pitched_at(struct cudaPitchedPtr p, struct cudaPos pos)
{
    if (p.ptr == NULL)
        return NULL;
    return (const char *)p.ptr + pos.x + pos.y * p.pitch +
           pos.z * p.pitch * p.ysize;
}

/* 3D copies name either a pitched pointer or a CUDA array on each side;
 * the extent counts bytes for pointers and elements when an array is
 * involved. */
void gmt_ev_copy3d(struct gmt_call *c, int r, unsigned api,
                   const struct cudaMemcpy3DParms *p, uint64_t stream)
{
    if (p == NULL) {
        gmt_ev_copy(c, r, api, NULL, NULL, 0, cudaMemcpyDefault, stream);
        return;
    }
    const void *dst = p->dstArray ? (const void *)p->dstArray
                                  : pitched_at(p->dstPtr, p->dstPos);
    const void *src = p->srcArray ? (const void *)p->srcArray
                                  : pitched_at(p->srcPtr, p->srcPos);
    uint64_t n = (uint64_t)p->extent.width * p->extent.height *
                 p->extent.depth;
    if (r == 0 && (p->srcArray || p->dstArray))
        n *= array_elem_size(p->srcArray ? (const void *)p->srcArray
                                         : (const void *)p->dstArray);
    int kind = p->kind;
    /* An array side is device memory: don't ask the driver about it. */
    if (kind == cudaMemcpyDefault && (p->srcArray || p->dstArray))
        kind = p->srcArray && p->dstArray ? cudaMemcpyDeviceToDevice
               : p->srcArray              ? cudaMemcpyDeviceToHost
                                          : cudaMemcpyHostToDevice;
    gmt_ev_copy(c, r, api, dst, src, n, kind, stream);
}

void gmt_ev_copy3d_peer(struct gmt_call *c, int r, unsigned api,
                        const struct cudaMemcpy3DPeerParms *p,
                        uint64_t stream)
{
    if (p == NULL) {
        gmt_ev_copy(c, r, api, NULL, NULL, 0, cudaMemcpyDeviceToDevice,
                    stream);
        return;
    }
    const void *dst = p->dstArray ? (const void *)p->dstArray
                                  : pitched_at(p->dstPtr, p->dstPos);
    const void *src = p->srcArray ? (const void *)p->srcArray
                                  : pitched_at(p->srcPtr, p->srcPos);
    uint64_t n = (uint64_t)p->extent.width * p->extent.height *
                 p->extent.depth;
    if (r == 0 && (p->srcArray || p->dstArray))
        n *= array_elem_size(p->srcArray ? (const void *)p->srcArray
                                         : (const void *)p->dstArray);
    gmt_ev_copy(c, r, api, dst, src, n, cudaMemcpyDeviceToDevice, stream);
}

/* A batch is recorded as one copy event per entry, all with the batch
 * call's result. */
void gmt_ev_copy_batch(struct gmt_call *c, int r, unsigned api,
                       void *const *dsts, const void *const *srcs,
                       const size_t *sizes, size_t count, uint64_t stream)
{
    /* a failed call's arguments may be garbage: one event, nothing read */
    if (r != 0 || dsts == NULL || srcs == NULL || sizes == NULL || count == 0) {
        gmt_ev_copy(c, r, api, NULL, NULL, 0, cudaMemcpyDefault, stream);
        return;
    }
    for (size_t i = 0; i < count; i++)
        gmt_ev_copy(c, r, api, dsts[i], srcs[i], sizes[i], cudaMemcpyDefault,
                    stream);
}

static const void *operand(const struct cudaMemcpy3DOperand *o)
{
    return o->type == cudaMemcpyOperandTypeArray ? (const void *)o->op.array.array
                                                 : o->op.ptr.ptr;
}

void gmt_ev_copy3d_batch(struct gmt_call *c, int r, unsigned api,
                         size_t count, const struct cudaMemcpy3DBatchOp *ops,
                         uint64_t stream)
{
    if (r != 0 || ops == NULL || count == 0) {
        gmt_ev_copy(c, r, api, NULL, NULL, 0, cudaMemcpyDefault, stream);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const struct cudaMemcpy3DBatchOp *o = &ops[i];
        bool sa = o->src.type == cudaMemcpyOperandTypeArray;
        bool da = o->dst.type == cudaMemcpyOperandTypeArray;
        int kind = sa && da ? cudaMemcpyDeviceToDevice
                   : sa     ? cudaMemcpyDeviceToHost
                   : da     ? cudaMemcpyHostToDevice
                            : cudaMemcpyDefault;
        uint64_t n = (uint64_t)o->extent.width * o->extent.height *
                     o->extent.depth;
        gmt_ev_copy(c, r, api, operand(&o->dst), operand(&o->src), n, kind,
                    stream);
    }
}

void gmt_ev_pool(struct gmt_thread *t, unsigned kind, int dev, uint64_t addr,
                 uint64_t size, uint32_t stack)
{
    struct gmt_event ev = {
        .kind = (uint8_t)kind,
        .device = dev,
        .addr = addr,
        .size = size,
        .stack = stack,
    };
    gmt_trace_emit(t, &ev);
}

void gmt_ev_pool_sync(struct gmt_thread *t, int dev, unsigned api, int result)
{
    struct gmt_event ev = {
        .kind = GMT_K_SYNC,
        .api = (uint8_t)api,
        .device = dev,
        .result = result,
        .stack = t->call_stack,
    };
    gmt_trace_emit(t, &ev);
}

void gmt_ev_sample(struct gmt_thread *t, int dev, const uint64_t v[6])
{
    struct gmt_event ev = {.kind = GMT_K_SAMPLE, .device = dev};
    memcpy(ev.v, v, sizeof ev.v);
    gmt_trace_emit(t, &ev);
}

void gmt_ev_oom(struct gmt_call *c, int dev, uint64_t size, const uint64_t v[5])
{
    struct gmt_event ev = {
        .kind = GMT_K_OOM,
        .device = dev,
        .size = size,
        .stack = c->stack,
    };
    memcpy(ev.v, v, 5 * sizeof *v);
    gmt_trace_emit(c->t, &ev);
}
