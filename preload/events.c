/* events.c - a hooked call, and the events it records.
 *
 * Every hook (hooks.c, generated) brackets the real call with
 * gmt_call_begin and gmt_call_finish. Begin starts tracing at the first
 * call (lifecycle.c), passes through calls made from inside the tracer (a
 * per-thread guard), captures the call's stack and saves errno; finish
 * leaves the hook with the errno the real call left.
 *
 * Between them, the gmt_ev_* functions know what each family of calls
 * records - which address and size, which stream, which copy direction -
 * and gmt_call_emit gives the event the call's stack, its device and the
 * stamp taken before the real call if any, and hands it to the trace
 * writer (trace.c: gmt_trace_emit stamps what is not stamped yet and
 * encodes it). Failed calls are recorded too, with their error (a failed
 * allocation is how an out-of-memory shows up in the trace). The pool's
 * own records (segments, synchronizations, samples) are built here too
 * and take the same path.
 *
 * The first event on a device also describes the device (a DEVICE
 * record), from the program's runtime or else from the driver.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

/* ---- the call ---------------------------------------------------------- */

static uint8_t g_device_written[GMT_MAX_DEVICES];

/* errno: the tracer's own work (libunwind probes memory through a pipe,
 * files are opened) must not show in the program's errno. It is saved on
 * entry and restored before the real call; gmt_call_finish restores the
 * value the real call left (see gmt_call_errno). */
bool gmt_call_begin(struct gmt_call *c, bool stamp_before)
{
    return gmt_call_begin_flags(c, stamp_before ? GMT_CALL_STAMP : 0);
}

bool gmt_call_begin_flags(struct gmt_call *c, unsigned flags)
{
    int saved = errno;
    if (GMT_UNLIKELY(!gmt_tracer_active()) && !gmt_tracer_start()) {
        errno = saved;
        return false;
    }
    struct gmt_thread *t = gmt_thread_get();
    if (GMT_UNLIKELY(t == NULL || t->guard)) {
        errno = saved;
        return false;
    }
    t->guard = 1;
    t->call_device = -1;
    c->t = t;
    c->stack = (flags & GMT_CALL_NO_STACK) || GMT_UNLIKELY(gmt_trace_full())
                   ? 0 : gmt_stack_capture(t);
    if (flags & GMT_CALL_STAMP)
        gmt_stamp(&c->seq, &c->time);
    else
        c->seq = 0;
    c->saved_errno = saved;
    errno = saved;
    return true;
}

void gmt_call_emit(struct gmt_call *c, struct gmt_event *ev)
{
    struct gmt_thread *t = c->t;
    if (c->seq) { /* stamped before the real call; else gmt_trace_emit stamps */
        ev->seq = c->seq;
        ev->time = c->time;
        c->seq = 0;
    }
    ev->stack = c->stack;
    if (ev->device == GMT_DEVICE_CURRENT) {
        if (t->call_device >= 0) /* the hook knows it already */
            ev->device = t->call_device;
        else
            ev->device = ev->result == 0 ? gmt_quiet_get_device(t->last_device)
                                         : t->last_device;
        t->last_device = ev->device;
    }
    gmt_trace_emit(t, ev);
    /* the record's own kind first: frees and copies read no shared flag */
    if (ev->kind == GMT_K_ALLOC &&
        GMT_UNLIKELY(__atomic_load_n(&gmt_retention_rearm, __ATOMIC_RELAXED)))
        gmt_retention_retry();
    if (ev->device >= 0 && ev->device < GMT_MAX_DEVICES &&
        !__atomic_load_n(&g_device_written[ev->device], __ATOMIC_RELAXED))
        gmt_device_seen(t, ev->device);
}

void gmt_call_finish(struct gmt_call *c)
{
    c->t->guard = 0;
    errno = c->saved_errno;
}

/* ---- what each family of calls records ------------------------------ */

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

/* ---- the devices events name ------------------------------------------ */

/* The runtime's description of dev; false if it could not be read. */
static bool runtime_device_info(int dev, struct gmt_devinfo *out)
{
    if (!gmt_real_present(GMT_R_cudaGetDeviceProperties) ||
        GMT_REAL(cudaPeekAtLastError)() != cudaSuccess)
        return false;
    /* cudaDeviceProp grows between CUDA versions; only its stable prefix
     * (name, uuid, ...) is read, from a buffer larger than any version.
     * No lock and no static buffer: a fork must not find them held. */
    uint8_t *props = calloc(1, 16384);
    if (props == NULL ||
        GMT_REAL(cudaGetDeviceProperties)((struct cudaDeviceProp *)props,
                                          dev) != cudaSuccess) {
        if (props)
            GMT_REAL(cudaGetLastError)();
        free(props);
        return false;
    }
    static const enum cudaDeviceAttr attrs[] = {
        cudaDevAttrPciDomainId, cudaDevAttrPciBusId, cudaDevAttrPciDeviceId,
        cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor};
    for (int i = 0; i < 5; i++) {
        if (GMT_REAL(cudaDeviceGetAttribute)(&out->attr[i], attrs[i], dev) !=
                cudaSuccess ||
            out->attr[i] < 0) {
            GMT_REAL(cudaGetLastError)();
            out->attr[i] = 0;
        }
    }
    const struct cudaDeviceProp *pr = (const struct cudaDeviceProp *)props;
    size_t n = strnlen(pr->name, sizeof pr->name);
    if (n >= sizeof out->name)
        n = sizeof out->name - 1;
    memcpy(out->name, pr->name, n);
    out->name[n] = '\0';
    out->total = pr->totalGlobalMem;
    memcpy(out->uuid, &pr->uuid, 16);
    free(props);
    return true;
}

/* Describe a device the first time an event happens on it: from the
 * program's runtime when it has one, else from the driver (a statically
 * linked runtime). Only a description actually read counts: with an error
 * pending (the call being recorded failed, say) nothing is asked and the
 * next event tries again. */
void gmt_device_seen(struct gmt_thread *t, int dev)
{
    if (__atomic_exchange_n(&g_device_written[dev], 1, __ATOMIC_RELAXED))
        return;
    struct gmt_devinfo info;
    memset(&info, 0, sizeof info);
    if (!runtime_device_info(dev, &info) && !gmt_drv_device_info(dev, &info)) {
        __atomic_store_n(&g_device_written[dev], 0, __ATOMIC_RELAXED);
        return;
    }
    gmt_nvml_device(dev, info.uuid);
    uint8_t buf[512];
    uint8_t *p = gmt_put_varint(buf, (uint64_t)dev);
    p = gmt_put_str(p, info.name, strlen(info.name));
    p = gmt_put_varint(p, info.total);
    p = gmt_put_str(p, info.uuid, 16);
    for (int i = 0; i < 5; i++)
        p = gmt_put_varint(p, (uint64_t)info.attr[i]);
    gmt_trace_emit_ext(t, GMT_X_DEVICE, buf, (size_t)(p - buf));
}

void gmt_call_reset_after_fork(void)
{
    memset(g_device_written, 0, sizeof g_device_written);
}
