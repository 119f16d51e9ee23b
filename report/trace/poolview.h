/* poolview.h - the caching pool's segments and blocks, rebuilt from a trace.
 *
 * The replay engine counts bytes; it does not know where blocks lie. To
 * say how fragmented the pool was - how much of what it held was free,
 * in how many pieces, and where - `gpumemreport frag` feeds the trace's
 * records, in order, to a poolview and asks it for the picture at chosen
 * moments (the peak, each out-of-memory).
 *
 * What is rebuilt. Segments from SEGMENT_ALLOC/SEGMENT_FREE. Blocks from
 * ALLOC (address, requested size, block = requested + size2, i.e. rounded
 * to 512 bytes), FREE (the block becomes pending: freed, not yet
 * reusable) and FREE_COMPLETED (pending becomes free). Free space is what
 * no allocated or pending block covers; the pool merges free neighbours,
 * so each maximal uncovered run of a segment is one of its free blocks.
 * One rule of the pool is mirrored because the trace does not spell it
 * out: a block carved from a large segment keeps the rest of the free
 * block it came from when that rest is under 1 MiB (pool.c,
 * LARGE_SPLIT_MIN), or under 384 KiB when the rest is the segment's end
 * (LARGE_END_MIN) - the ALLOC record says 512-byte rounding, the block
 * is bigger. FREE_COMPLETED records carry the real block size; one that
 * disagrees with the rebuilt block is counted as an inconsistency.
 *
 * Device allocations that are not in any segment (managed, stream-ordered,
 * pitched memory, everything when the pool was off) are kept too, apart
 * from the pool's picture, for their rounding waste.
 *
 * A framework allocator's (PyTorch's caching allocator's) records build
 * the same picture of its own segments and blocks: segments from GMT_X_FW
 * records, blocks from GMT_API_FW_ALLOC/FW_FREE and FREE_COMPLETED. Its
 * blocks are as big as the record says (size + extra), or as a later
 * BLOCK_SIZE record says - never the pool's split rule, which is not
 * PyTorch's. Its FREE_COMPLETED records carry the requested size, not the
 * block's. An expandable segment arrives as pieces mapped and unmapped
 * (SEGMENT_MAP/UNMAP): adjacent mapped pieces are one segment, and
 * unmapping cuts a hole, or splits it in two. The CUDA allocations under
 * its segments (GMT_ALLOC_FW_BACKING) are no blocks: they are remembered
 * only so that their frees are not taken for frees of unknown blocks.
 *
 * Hostile input: frees of unknown addresses, blocks outside or across
 * segments, overlapping segments, segments freed while blocks live in
 * them - none of these crash or loop; each is counted in `odd` and the
 * picture stays self-consistent (every byte of a segment is counted
 * once). Memory is proportional to live blocks and segments, never to
 * the length of the trace.
 */
#ifndef GMT_POOLVIEW_H
#define GMT_POOLVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reader.h"

struct pv_block;
struct pv_segment;

#define PV_DEVICES 64 /* pending bytes are kept per device below this */

struct pv_blocks {               /* by address (addrmap.h) */
    struct pv_block *slot;
    size_t cap, n;
};

struct poolview {
    struct pv_blocks blocks;
    struct pv_segment *segs;    /* sorted by address, never overlapping */
    size_t nsegs, cap_segs;
    uint64_t *backing;          /* live GMT_ALLOC_FW_BACKING addresses, sorted */
    size_t nbacking, cap_backing;
    uint64_t pending[PV_DEVICES]; /* bytes in pending blocks, per device */
    uint64_t odd;               /* records that did not fit the picture */
    bool nomem;                 /* host memory ran out: the picture is partial */
};

void pv_init(struct poolview *v);
void pv_free(struct poolview *v);
/* Apply one record (any kind; those that do not concern memory are
 * ignored). */
void pv_apply(struct poolview *v, const struct gmt_rec *rec);

/* One segment at a moment. */
struct pv_seg_stat {
    uint64_t addr, size;
    uint32_t device;
    bool fw;                           /* the framework allocator's */
    uint64_t allocated, pending, free; /* bytes; they add up to size */
    uint64_t largest_gap, gaps;        /* free blocks: largest, count */
    uint64_t live;                     /* allocated blocks */
};

/* The picture at a moment, for one device or all (device < 0). Pool
 * figures cover blocks inside segments; `requested`, `waste` and
 * `allocations` cover every live device allocation. */
struct pv_state {
    uint64_t reserved, allocated, pending, free;
    uint64_t largest_free, free_blocks, live_blocks;
    uint64_t requested;          /* live device allocations, all */
    uint64_t waste;              /* their block bytes - requested bytes */
    uint64_t allocations;        /* their number */
    uint64_t unpooled_bytes, unpooled_count; /* outside every segment */
    size_t fw_segs;              /* of nsegs, the framework allocator's */
    double frag;                 /* 1 - largest_free / free; 0 if none free */
    struct pv_seg_stat *segs;    /* most free first, then by address */
    size_t nsegs;
};

/* A piece of a segment's map: one block or free run, or - where the
 * segment has more runs than the map may draw - neighbours merged into
 * pieces of at least 1/max of the segment. Pieces tile the segment in
 * address order. */
struct pv_piece {
    uint64_t size;
    uint64_t allocated, pending; /* of size; the rest is free */
    uint32_t stack;              /* of its largest allocated block, */
    bool named;                  /* if it has one */
};

/* The map of the segment based at addr now, in at most max pieces into
 * out[]: their number (0: no such segment). */
size_t pv_pieces(const struct poolview *v, uint64_t addr, struct pv_piece *out, size_t max);

/* Bytes pending on a device now (0 for devices >= PV_DEVICES): what the
 * pool's samples do not record, at the cost of a load. */
uint64_t pv_pending(const struct poolview *v, uint32_t device);

/* Fill *out (free it with pv_state_free). false: out of host memory. */
bool pv_state(const struct poolview *v, int64_t device, struct pv_state *out);
void pv_state_free(struct pv_state *s);

#endif /* GMT_POOLVIEW_H */
