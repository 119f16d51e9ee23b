/* call.c - the life of one hooked call.
 *
 * Every hook brackets the real call with gmt_call_begin and
 * gmt_call_finish. Begin starts tracing at the first call (lifecycle.c),
 * passes through calls made from inside the tracer (a per-thread guard),
 * captures the call's stack and saves errno; gmt_call_emit stamps each
 * event the call records, gives it the call's stack and device, and
 * writes it; finish leaves the hook with the errno the real call left.
 * The first event on a device also describes the device (a DEVICE
 * record), from the program's runtime or else from the driver.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

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
    if (ev->device >= 0 && ev->device < GMT_MAX_DEVICES &&
        !__atomic_load_n(&g_device_written[ev->device], __ATOMIC_RELAXED))
        gmt_device_seen(t, ev->device);
}

void gmt_call_finish(struct gmt_call *c)
{
    c->t->guard = 0;
    errno = c->saved_errno;
}

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
