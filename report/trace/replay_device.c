/* replay_device.c - what the run's other records add to the replay:
 * transfers and sets (per direction, per site), the driver's samples
 * (device memory in use, fragmentation), this process's own memory from
 * NVML, the driver's virtual memory (address space mapped and reserved)
 * and the stream-ordered pools' own figures. None of them moves the
 * requested, allocated or reserved bytes: the allocation records do
 * (replay.c).
 */
#include "replay_internal.h"

void replay_on_mempool(struct replay *r, const struct gmt_rec *rec)
{
    struct gmt_mempool m;
    if (gmt_mempool_decode(rec, &m) != 0)
        return;
    int i = 0;
    while (i < r->nmempools && r->mempools[i].pool != m.pool)
        i++;
    if (i == r->nmempools) {
        if (i == REPLAY_MAX_POOLS)
            return;
        r->mempools[r->nmempools++] = (struct replay_pool){m.pool, m.device, 0, 0};
    }
    struct replay_pool *p = &r->mempools[i];
    uint64_t res = m.reserved_high > m.reserved ? m.reserved_high : m.reserved;
    uint64_t used = m.used_high > m.used ? m.used_high : m.used;
    if (res > p->reserved_high)
        p->reserved_high = res;
    if (used > p->used_high)
        p->used_high = used;
}

/* Virtual memory: physical memory is counted by its cuMemCreate (an
 * allocation keyed by its handle); mappings and reservations are address
 * space, counted apart. */
/* Hostile traces: address-space sums stay far from overflow. */
static void clamp(int64_t *x)
{
    const int64_t lim = (int64_t)1 << 62;
    *x = *x > lim ? lim : *x < -lim ? -lim : *x;
}

void replay_on_vmm(struct replay *r, const struct gmt_rec *rec)
{
    struct gmt_vmm v;
    if (gmt_vmm_decode(rec, &v) != 0 || v.result != 0)
        return;
    clamp(&r->mapped);
    clamp(&r->va_reserved);
    r->vmm_ops++;
    switch (v.api) {
    case GMT_API_CU_MEM_MAP:
        r->mapped += (int64_t)v.size;
        if (r->mapped > 0 && (uint64_t)r->mapped > r->peak_mapped)
            r->peak_mapped = (uint64_t)r->mapped;
        break;
    case GMT_API_CU_MEM_UNMAP:
        r->mapped -= (int64_t)v.size;
        break;
    case GMT_API_CU_MEM_ADDRESS_RESERVE:
        r->va_reserved += (int64_t)v.size;
        if (r->va_reserved > 0 && (uint64_t)r->va_reserved > r->peak_va_reserved)
            r->peak_va_reserved = (uint64_t)r->va_reserved;
        break;
    case GMT_API_CU_MEM_ADDRESS_FREE:
        r->va_reserved -= (int64_t)v.size;
        break;
    }
}

void replay_on_copy(struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0)
        return;
    unsigned dir = rec->dir & GMT_DIR_MASK, hm = (rec->dir >> GMT_HOSTMEM_SHIFT) & 3;
    if (dir > 4)
        dir = 0;
    if (hm > 2)
        hm = 0;
    r->copy_bytes[dir][hm] += rec->size;
    r->copy_count[dir][hm]++;
    struct site *s = replay_site_of(r, rec->stack);
    struct site_rare *sr = s ? replay_site_rare(s) : NULL;
    if (sr) {
        sr->copy_bytes[dir] += rec->size;
        sr->copy_count[dir]++;
    }
}

void replay_on_sample(struct replay *r, const struct gmt_rec *rec)
{
    struct device_state *d = &r->dev[rec->device % REPLAY_MAX_DEVICES];
    d->seen = true;
    d->samples++;
    uint64_t used = rec->v[4];
    if (used) {
        d->last_device_used = used;
        if (used > d->max_device_used)
            d->max_device_used = used;
        int64_t beyond = (int64_t)used - d->reserved;
        if (beyond > d->max_untracked)
            d->max_untracked = beyond;
        struct bucket *b = replay_bucket_at(r, rec->time);
        b->device_used = used;
        b->used = true;
    }
    uint64_t reserved = rec->v[0], allocated = rec->v[1], largest = rec->v[2];
    if (reserved > allocated) {
        double frag = 1.0 - (double)largest / (double)(reserved - allocated);
        if (frag > d->max_frag) {
            d->max_frag = frag;
            d->max_frag_time = rec->time;
        }
    }
}

void replay_on_proc_mem(struct replay *r, const struct gmt_rec *rec)
{
    struct gmt_proc_mem m;
    if (gmt_proc_mem_decode(rec, &m) != 0)
        return;
    struct device_state *d = &r->dev[m.device % REPLAY_MAX_DEVICES];
    int64_t beyond = (int64_t)m.used - d->reserved;
    if (d->proc_samples++ == 0 || beyond > d->max_proc_untracked)
        d->max_proc_untracked = beyond;
    if (m.used > d->max_proc_used)
        d->max_proc_used = m.used;
}

void replay_on_memset(struct replay *r, const struct gmt_rec *rec)
{
    if (rec->result != 0)
        return;
    r->set_bytes += rec->size;
    r->set_count++;
    struct site *s = replay_site_of(r, rec->stack);
    struct site_rare *sr = s ? replay_site_rare(s) : NULL;
    if (sr) {
        sr->set_bytes += rec->size;
        sr->set_count++;
    }
}
