/* gmt_format.h - the gpumemtrace trace file format (.gmt).
 *
 * This header is the one contract between the recording library (preload/)
 * and the reader (report/). docs/trace-format.md describes every field in
 * prose; keep the two in step.
 *
 * Shape of a file:
 *
 *   [file header, GMT_HEADER_SIZE bytes][chunk 0][chunk 1]...[chunk n-1]
 *
 * Every chunk is chunk_size bytes (from the header) and belongs to exactly
 * one recording thread. A thread writes its records into its current chunk
 * and publishes them by storing the chunk's `used` field after each record;
 * whatever lies beyond `used` is ignored by readers. The file is written
 * through a shared mapping, so a record is in the page cache - and survives
 * SIGKILL - the moment `used` covers it.
 *
 * Every record carries a sequence number drawn from one process-wide
 * counter, so the reader merges the per-thread chunk streams into the one
 * total order in which the calls happened.
 *
 * Record encoding (all integers little-endian; "varint" is unsigned LEB128,
 * "svarint" is zigzag-encoded LEB128):
 *
 *   tag        u8    bits 0-4 kind (GMT_K_*), bit 5 ERR, bit 6 STREAM,
 *                    bit 7 DEVICE
 *   seq        varint  delta from the previous record's seq in this chunk
 *                      (the first record: delta from chunk.first_seq)
 *   time       varint  delta in ns from the previous record's time, likewise
 *   [device]   varint  if DEVICE: the thread's device from here on
 *   [stream]   varint  if STREAM: the stream handle from here on
 *   [result]   varint  if ERR: the cudaError_t the call returned (else 0)
 *   body              per kind, below; kind GMT_K_EXT is
 *                      ext_kind varint, len varint, payload[len]
 *
 * Core kinds (1..30) have a fixed body and cannot be skipped without
 * knowing them, so they are frozen for major version 1. A newer minor
 * version adds records only as GMT_K_EXT kinds, which readers skip by
 * length when they don't know them.
 */
#ifndef GMT_FORMAT_H
#define GMT_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gmt_api.h"

#define GMT_MAGIC "GPUMEMTR"
#define GMT_VERSION_MAJOR 1
#define GMT_VERSION_MINOR 3
#define GMT_HEADER_SIZE 4096u
#define GMT_ENDIAN_MARK 0x01020304u
#define GMT_CHUNK_MAGIC 0x43544d47u /* "GMTC" */
#define GMT_CHUNK_HEADER_SIZE 32u
#define GMT_CHUNK_SIZE_DEFAULT (64u * 1024u)
#define GMT_CHUNK_SIZE_MIN 4096u
#define GMT_CHUNK_SIZE_MAX (16u * 1024u * 1024u)
#define GMT_MAX_STACK_DEPTH 256u
#define GMT_MAX_PY_FRAMES 256u /* Python frames per stack */

/* Feature bits in gmt_file_header.features: what the recorder captured. */
#define GMT_FEAT_NATIVE_STACKS (1ull << 0)
#define GMT_FEAT_PYTHON_STACKS (1ull << 1)
#define GMT_FEAT_POOL (1ull << 2)
/* A framework allocator's own block events were recorded (PyTorch's
 * caching allocator through its trace tracker: GMT_API_FW_ALLOC/FW_FREE,
 * GMT_X_FW). Its segments' cudaMalloc/cuMemCreate calls carry
 * GMT_ALLOC_FW_BACKING. */
#define GMT_FEAT_FW_BLOCKS (1ull << 3)

/* gmt_file_header.flags */
#define GMT_FLAG_CLOSED (1u << 0) /* the process closed the trace normally */

struct gmt_file_header {
    char magic[8];             /* GMT_MAGIC, not NUL-terminated */
    uint16_t version_major;    /* format this file is written in */
    uint16_t version_minor;
    uint16_t min_reader_major; /* oldest reader version that can read it */
    uint16_t min_reader_minor;
    uint32_t header_size;      /* offset of chunk 0 */
    uint32_t endian;           /* GMT_ENDIAN_MARK as written by the host */
    uint64_t features;         /* GMT_FEAT_* */
    uint32_t chunk_size;
    uint32_t flags;            /* GMT_FLAG_*, updated at close */
    uint64_t session_id;       /* shared by every process of one run */
    uint32_t pid;
    uint32_t ppid;
    uint64_t start_realtime_ns; /* wall clock (CLOCK_REALTIME) at open */
    uint64_t start_monotonic_ns;/* CLOCK_MONOTONIC at the same instant */
    uint32_t file_index;       /* 0, or n for the n-th file of this pid (exec) */
    uint32_t reserved0;
    uint64_t end_monotonic_ns; /* written at close */
    uint64_t data_end;         /* bytes of the file in use, written at close */
    uint64_t parent_session_id;/* reserved: 0 */
    /* 1.2: which process of a distributed job this is, as its launcher
     * said (rank.h); each field counts only with its GMT_DIST_* bit */
    uint32_t dist_flags;       /* GMT_DIST_* */
    uint32_t rank;             /* global rank */
    uint32_t local_rank;       /* rank on this host */
    uint32_t world_size;       /* processes in the job */
    uint32_t local_world_size; /* processes on this host */
    uint32_t reserved1;
    char host[64];             /* host name, NUL-terminated (1.2) */
    /* 1.3: what the recorder could not record. Counted in the mapped
     * header as it happens, not at close, so that the trace of a process
     * killed after a loss says so too. A reader treats them as 0 in files
     * before 1.3 (nothing known lost). */
    uint64_t lost_events;      /* core records (calls, pool events) not written */
    uint64_t lost_records;     /* extension records not written: definitions,
                                  driver-level and framework events, notes */
    uint64_t lost_stacks;      /* events written without their stack */
    uint32_t lost_why;         /* GMT_LOST_*: every cause seen */
    int32_t lost_errno;        /* the error that stopped the file growing
                                  (GMT_LOST_FILE; Linux errno), or 0 */
};

/* gmt_file_header.dist_flags (1.2; files before 1.2 have 0: not known) */
#define GMT_DIST_RANK (1u << 0)
#define GMT_DIST_LOCAL_RANK (1u << 1)
#define GMT_DIST_WORLD_SIZE (1u << 2)
#define GMT_DIST_LOCAL_WORLD_SIZE (1u << 3)
/* the rank was learned at exit, not at start (the program set it in its
 * environment while running, as mp.spawn workers do): the file's name
 * does not carry it */
#define GMT_DIST_LATE (1u << 4)

/* gmt_file_header.lost_why (1.3) */
#define GMT_LOST_FILE (1u << 0)      /* the file could not grow: a full disk,
                                        a quota, the file size limit, a
                                        failed mapping, 128 GiB reached */
#define GMT_LOST_CUT (1u << 1)       /* another process truncated the file */
#define GMT_LOST_STACK_CAP (1u << 2) /* GPUMEMTRACE_MAX_STACKS distinct stacks
                                        recorded: later new ones are not */
#define GMT_LOST_TOO_LARGE (1u << 3) /* a record larger than a chunk */
#define GMT_LOST_OTHER (1u << 4)     /* the recorder's own failure (out of
                                        memory), said on stderr */
#define GMT_LOST_ALL 0x1fu

struct gmt_chunk_header {
    uint32_t magic;      /* GMT_CHUNK_MAGIC */
    uint32_t used;       /* bytes of this chunk holding records, header included */
    uint32_t thread;     /* recording thread's index (process-unique, from 1) */
    uint32_t ordinal;    /* this chunk's position in its thread's stream, from 0 */
    uint64_t first_seq;  /* seq of the first record (0: no record yet) */
    uint64_t first_time; /* time of the first record */
};

/* Tag byte. */
#define GMT_TAG_KIND_MASK 0x1fu
#define GMT_TAG_ERR 0x20u
#define GMT_TAG_STREAM 0x40u
#define GMT_TAG_DEVICE 0x80u

/* Core record kinds. Their bodies are listed in GMT_RECORD_BODIES below. */
enum gmt_kind {
    GMT_K_INVALID = 0,
    GMT_K_ALLOC = 1,
    GMT_K_FREE = 2,           /* free requested */
    GMT_K_FREE_COMPLETED = 3, /* the block is reusable */
    GMT_K_SEGMENT_ALLOC = 4,
    GMT_K_SEGMENT_FREE = 5,
    GMT_K_MEMCPY = 6,
    GMT_K_MEMSET = 7,
    GMT_K_SYNC = 8,
    GMT_K_STREAM_CREATE = 9,
    GMT_K_STREAM_DESTROY = 10,
    GMT_K_SET_DEVICE = 11,
    GMT_K_MEMGETINFO = 12,
    GMT_K_SAMPLE = 13,        /* periodic state */
    GMT_K_OOM = 14,           /* the state at an out-of-memory */
    GMT_K_MARKER = 15,
    GMT_K_CORE_MAX = 15,
    GMT_K_EXT = 31,
};

/* The body of every core record kind, field by field in the order they
 * are written: the one description that the recorder's encoder
 * (preload/trace.c), the reader's decoder (report/trace/reader.c) and the test
 * writers (tests/bench/gen_trace.c, tests/unit/test_fw.c) expand.
 *
 *   R(KIND, fields)   the body of GMT_K_KIND
 *   F(enc, ev, rec)   one field: how it is encoded, the member of the
 *                     recorder's event it comes from (struct gmt_event,
 *                     struct gmt_body) and the member of the reader's
 *                     record it goes to (struct gmt_rec)
 *
 * Encodings:
 *   BYTE     u8
 *   ADDR     svarint delta against the address register that
 *            gmt_addr_reg(kind, api, dir, 0) names, which then holds the
 *            new address (api and dir: this record's, written before)
 *   ADDR2    likewise with which = 1: a copy's source
 *   VARINT   unsigned varint
 *   SVARINT  signed varint (zigzag)
 *   STACK    varint stack id, below 2^32 (0: none)
 *
 * Frozen for major version 1, as the kinds are: a new field is a new
 * GMT_K_EXT kind, never a change here. */
#define GMT_RECORD_BODIES(R, F)                                               \
    R(ALLOC, F(BYTE, api, api) F(ADDR, addr, addr) F(VARINT, size, size)      \
             F(VARINT, size2, size2) /* extra */ F(VARINT, flags, flags)      \
             F(STACK, stack, stack))                                          \
    R(FREE, F(BYTE, api, api) F(ADDR, addr, addr) F(STACK, stack, stack))     \
    R(FREE_COMPLETED, F(ADDR, addr, addr) F(VARINT, size, size))              \
    R(SEGMENT_ALLOC, F(ADDR, addr, addr) F(VARINT, size, size)                \
                     F(STACK, stack, stack))                                  \
    R(SEGMENT_FREE, F(ADDR, addr, addr) F(VARINT, size, size))                \
    R(MEMCPY, F(BYTE, api, api) F(BYTE, dir, dir) F(ADDR, addr, addr) /* dst */ \
              F(ADDR2, addr2, addr2) /* src */ F(VARINT, size, size)          \
              F(STACK, stack, stack))                                         \
    R(MEMSET, F(BYTE, api, api) F(ADDR, addr, addr) F(VARINT, size, size)     \
              F(VARINT, value, value) F(STACK, stack, stack))                 \
    R(SYNC, F(BYTE, api, api) F(STACK, stack, stack))                         \
    R(STREAM_CREATE, F(BYTE, api, api) F(VARINT, addr, addr) /* handle */     \
                     F(VARINT, flags, flags)                                  \
                     F(SVARINT, value, priority) F(STACK, stack, stack))      \
    R(STREAM_DESTROY, F(VARINT, addr, addr) /* handle */                      \
                      F(STACK, stack, stack))                                 \
    R(SET_DEVICE, F(VARINT, value, value) /* device */)                       \
    R(MEMGETINFO, F(VARINT, size, size) /* free */                            \
                  F(VARINT, size2, size2) /* total */)                        \
    R(SAMPLE, F(VARINT, v[0], v[0]) /* reserved */                            \
              F(VARINT, v[1], v[1]) /* allocated */                           \
              F(VARINT, v[2], v[2]) /* largest_free */                        \
              F(VARINT, v[3], v[3]) /* free_blocks */                         \
              F(VARINT, v[4], v[4]) /* device_used */                         \
              F(VARINT, v[5], v[5]) /* host_rss */)                           \
    R(OOM, F(VARINT, size, size)                                              \
           F(VARINT, v[0], v[0]) /* dev_free */                               \
           F(VARINT, v[1], v[1]) /* dev_total */                              \
           F(VARINT, v[2], v[2]) /* reserved */                               \
           F(VARINT, v[3], v[3]) /* allocated */                              \
           F(VARINT, v[4], v[4]) /* largest_free */                           \
           F(STACK, stack, stack))                                            \
    R(MARKER, F(BYTE, api, api) /* type: GMT_MARK... */                       \
              F(VARINT, value, value) /* string id */)

/* Extension records: GMT_K_EXT, then ext kind, byte length, payload. */
enum gmt_ext_kind {
    GMT_X_THREAD = 1,  /* tid varint, name[rest] */
    GMT_X_PROCESS = 2, /* pid, ppid, session varint, file_index, realtime_ns,
                          str cmdline (NUL-separated args), str host,
                          str exe */
    GMT_X_MODULE = 3,  /* id, base, lo, hi, str build_id (raw bytes), str path */
    GMT_X_STACK = 4,   /* id, nframes, frames: svarint delta from the previous
                          frame's IP (the first from 0), innermost first */
    GMT_X_DEVICE = 5,  /* ordinal, str name, total_mem, str uuid (16 bytes),
                          pci_domain, pci_bus, pci_device, cc_major, cc_minor */
    GMT_X_STRING = 6,  /* id, bytes[rest] */
    GMT_X_NOTE = 7,    /* level varint (0 info, 1 warning), text[rest] */
    GMT_X_SYMBOL = 8,  /* ip, start (the symbol's address), str name: a
                          symbol embedded at exit (GPUMEMTRACE_EMBED_SYMBOLS) */
    GMT_X_PYCODE = 9,  /* id, firstlineno, line table format, str file,
                          str name, line table[rest]: a Python code object */
    GMT_X_VMM = 10,    /* api (GMT_API_CU_MEM_MAP...ADDRESS_FREE), result,
                          device, addr, size, offset, handle, stack: a
                          virtual address range mapped, unmapped, reserved
                          or freed (driver API; no memory of its own) */
    GMT_X_MEMPOOL = 11, /* device, pool handle, reserved, reserved_high,
                           used, used_high: a stream-ordered memory pool as
                           the driver reports it (sampled) */
    GMT_X_FW = 12,      /* action (GMT_FWX_*), device, addr, size, stream,
                           pool, stack: a framework allocator's segment
                           event, or the real size of one of its blocks */
    GMT_X_PROC_MEM = 13, /* device, used: the device memory this process
                            holds as NVML reports it (context and
                            libraries included), beside a SAMPLE (1.2) */
    GMT_X_RETENTION = 14, /* capture varint, text[rest]: one line of a
                             capture of the Python references that hold
                             the tensors (preload/retention.py says its
                             fields) */
};

/* GMT_X_FW actions. A framework allocator (PyTorch's caching allocator)
 * holds segments from CUDA and hands out blocks inside them; its blocks
 * are ALLOC/FREE records with api GMT_API_FW_ALLOC/FW_FREE, its reusable
 * blocks FREE_COMPLETED records, and these are its segments. */
enum gmt_fwx {
    GMT_FWX_SEGMENT_ALLOC = 0, /* a segment taken (cudaMalloc under it) */
    GMT_FWX_SEGMENT_FREE = 1,  /* a segment given back */
    GMT_FWX_SEGMENT_MAP = 2,   /* expandable segment: pages mapped */
    GMT_FWX_SEGMENT_UNMAP = 3, /* expandable segment: pages unmapped */
    GMT_FWX_BLOCK_SIZE = 4,    /* the block at addr is `size` bytes: the
                                  ALLOC record's size + extra was the size
                                  rounded to 512 bytes, the allocator kept
                                  more (an unsplit block; finer rounding).
                                  Written before any later record of that
                                  allocator's device. */
};

/* ALLOC flags bit: memory a framework allocator took for its segments.
 * Its blocks and segments are recorded by the framework's own events, so
 * this allocation is neither requested nor reserved a second time. */
#define GMT_ALLOC_FW_BACKING (1ull << 40)
/* "str" inside a payload = varint length, then that many bytes. */

/* Which entry point produced an event (the api byte). The codes, their
 * values and their names in reports are listed once, by value and with
 * what a record of each means, in GMT_API_CODES (gmt_api.h, generated
 * from the table in preload/gen-hooks.py). A value, once written to a
 * trace, never changes. */
enum gmt_api {
    GMT_API_NONE = 0,
#define GMT_API_ENUM(constant, value, name) constant = value,
    GMT_API_CODES(GMT_API_ENUM)
#undef GMT_API_ENUM
    GMT_API_API_MAX = 127,
};
/* Bit 7 of the api byte: the call was the per-thread-default-stream variant
 * (the runtime's _ptds / _ptsz export). */
#define GMT_API_PTDS 0x80u

/* The dir byte of GMT_K_MEMCPY: bits 0-2 the resolved direction, bits 3-4
 * the kind of the host-side memory when one side is the host. */
enum gmt_dir {
    GMT_DIR_UNKNOWN = 0,
    GMT_DIR_H2H = 1,
    GMT_DIR_H2D = 2,
    GMT_DIR_D2H = 3,
    GMT_DIR_D2D = 4,
};
#define GMT_DIR_MASK 0x7u
#define GMT_HOSTMEM_SHIFT 3
enum gmt_hostmem {
    GMT_HOSTMEM_UNKNOWN = 0,
    GMT_HOSTMEM_PAGEABLE = 1,
    GMT_HOSTMEM_PINNED = 2,
};

/* Address registers. Addresses are delta-coded against one of two
 * per-chunk registers: A for device-side addresses, B for host-side ones,
 * so that a copy's host buffer and device buffer don't spoil each other's
 * deltas. Which register a field uses follows from the record itself;
 * writer and reader both call this. which: 0 the record's first address
 * (ptr, or a copy's dst), 1 a copy's src. Returns 0 for A, 1 for B. */
static inline unsigned gmt_addr_reg(unsigned kind, unsigned api, unsigned dir,
                                    unsigned which)
{
    api &= 0x7fu; /* without the per-thread-stream bit */
    if (kind == 1 /* ALLOC: host memory and VMM handles use B */)
        return api == 5 /* MALLOC_HOST */ || api == 6 /* HOST_ALLOC */ ||
               api == 103 || api == 104 || api == 107 || api == 108;
    if (kind == 2 /* FREE */)
        return api == 17 /* FREE_HOST */ || api == 113 || api == 115;
    if (kind == 6 /* MEMCPY */) {
        switch (dir & 7u) {
        case 1: /* H2H */
            return 1;
        case 2: /* H2D: dst device, src host */
            return which;
        case 3: /* D2H: dst host, src device */
            return !which;
        case 4: /* D2D */
            return 0;
        default: /* unknown: dst A, src B */
            return which;
        }
    }
    return 0;
}

/* GMT_K_MARKER types */
enum gmt_marker { GMT_MARK = 0, GMT_MARK_PUSH = 1, GMT_MARK_POP = 2 };

/* Streams are recorded by their handle value; these are the runtime's
 * special handles. */
#define GMT_STREAM_LEGACY 0u      /* 0 and cudaStreamLegacy (1) */
#define GMT_STREAM_PER_THREAD 2u  /* cudaStreamPerThread */

/* ---- varints ----------------------------------------------------------
 * Encoders write to a buffer that the caller has checked is large enough
 * (GMT_VARINT_MAX per value). Decoders never read past `end` and return
 * NULL on truncated or over-long input, which is how corrupt files are
 * caught. */
#define GMT_VARINT_MAX 10

static inline uint8_t *gmt_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t gmt_zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t gmt_unzigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline uint8_t *gmt_put_svarint(uint8_t *p, int64_t v)
{
    return gmt_put_varint(p, gmt_zigzag(v));
}

static inline const uint8_t *gmt_get_varint(const uint8_t *p,
                                            const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    if (end - p >= 8) {
        /* Up to 8 bytes (56-bit values: nearly every field) without a
         * branch per byte: find the first byte without the continuation
         * bit in one load, then gather the 7-bit groups. Little-endian
         * hosts only, as the format. */
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t stop = ~x & 0x8080808080808080ull;
        if (stop) {
            unsigned n = ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
            uint64_t m = n == 8 ? x : x & ((1ull << (8 * n)) - 1);
            v = (m & 0x7full) | ((m >> 1) & (0x7full << 7)) |
                ((m >> 2) & (0x7full << 14)) | ((m >> 3) & (0x7full << 21)) |
                ((m >> 4) & (0x7full << 28)) | ((m >> 5) & (0x7full << 35)) |
                ((m >> 6) & (0x7full << 42)) | ((m >> 7) & (0x7full << 49));
            *out = v;
            return p + n;
        }
    }
    if (end - p >= GMT_VARINT_MAX) {
        /* room for the longest varint: no bounds check per byte */
        for (unsigned i = 0; i < GMT_VARINT_MAX; i++) {
            uint8_t b = p[i];
            if (i == GMT_VARINT_MAX - 1 && b > 1)
                return NULL; /* would overflow 64 bits */
            v |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80)) {
                *out = v;
                return p + i + 1;
            }
        }
        return NULL;
    }
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (p >= end)
            return NULL;
        uint8_t b = *p++;
        if (shift == 63 && b > 1)
            return NULL; /* would overflow 64 bits */
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return p;
        }
    }
    return NULL;
}

static inline const uint8_t *gmt_get_svarint(const uint8_t *p,
                                             const uint8_t *end, int64_t *out)
{
    uint64_t u;
    p = gmt_get_varint(p, end, &u);
    if (p)
        *out = gmt_unzigzag(u);
    return p;
}

/* ---- core record bodies: the encoder ---------------------------------
 * The values of one core record's body, as a writer hands them to
 * gmt_encode_body: the event-side members GMT_RECORD_BODIES names. */
struct gmt_body {
    uint8_t kind, api, dir; /* GMT_K_*, the api and dir bytes */
    uint64_t addr, addr2, size, size2, value, flags;
    uint64_t v[6];          /* SAMPLE and OOM values */
    uint32_t stack;
};

static inline uint8_t *gmt_put_addr(uint8_t *p, uint64_t a, uint64_t *reg)
{
    p = gmt_put_svarint(p, (int64_t)(a - *reg));
    *reg = a;
    return p;
}

/* GMT_BODY_ENCODER(name, type) defines
 *
 *   static inline uint8_t *name(uint8_t *p, const type *ev,
 *                               uint64_t *ra, uint64_t *rb)
 *
 * which writes the body of an ev->kind record at p, from the members of
 * *ev that GMT_RECORD_BODIES names, and returns its end; ra and rb are
 * the chunk's address registers A and B, which it updates. The caller
 * has checked that GMT_BODY_MAX bytes fit; a kind without a core body
 * writes nothing. One definition for two types: gmt_encode_body below
 * for struct gmt_body, and the recorder's for its struct gmt_event
 * (preload/trace.c), which has the same members among others. */
#define GMT_ENC_BYTE_(f) *p++ = (uint8_t)ev->f;
#define GMT_ENC_ADDR_(f)                                                      \
    p = gmt_put_addr(p, ev->f,                                                \
                     gmt_addr_reg(ev->kind, ev->api, ev->dir, 0) ? rb : ra);
#define GMT_ENC_ADDR2_(f)                                                     \
    p = gmt_put_addr(p, ev->f,                                                \
                     gmt_addr_reg(ev->kind, ev->api, ev->dir, 1) ? rb : ra);
#define GMT_ENC_VARINT_(f) p = gmt_put_varint(p, ev->f);
#define GMT_ENC_SVARINT_(f) p = gmt_put_svarint(p, (int64_t)ev->f);
#define GMT_ENC_STACK_(f) p = gmt_put_varint(p, ev->f);
#define GMT_ENC_FIELD_(enc, evf, recf) GMT_ENC_##enc##_(evf)
#define GMT_ENC_KIND_(kind, fields)                                           \
    case GMT_K_##kind:                                                        \
        fields break;
#define GMT_BODY_ENCODER(name, type)                                          \
    static inline uint8_t *name(uint8_t *p, const type *ev, uint64_t *ra,     \
                                uint64_t *rb)                                 \
    {                                                                         \
        switch (ev->kind) {                                                   \
            GMT_RECORD_BODIES(GMT_ENC_KIND_, GMT_ENC_FIELD_)                  \
        default:                                                              \
            break;                                                            \
        }                                                                     \
        return p;                                                             \
    }

GMT_BODY_ENCODER(gmt_encode_body, struct gmt_body)

/* The longest core body: the size of a union with one member per kind,
 * a byte array as long as that kind's fields can be. */
#define GMT_SIZE_BYTE_ 1
#define GMT_SIZE_ADDR_ GMT_VARINT_MAX
#define GMT_SIZE_ADDR2_ GMT_VARINT_MAX
#define GMT_SIZE_VARINT_ GMT_VARINT_MAX
#define GMT_SIZE_SVARINT_ GMT_VARINT_MAX
#define GMT_SIZE_STACK_ GMT_VARINT_MAX
#define GMT_SIZE_FIELD_(enc, evf, recf) + GMT_SIZE_##enc##_
#define GMT_SIZE_KIND_(kind, fields) uint8_t k_##kind[0 fields];
union gmt_body_sizes_ {
    GMT_RECORD_BODIES(GMT_SIZE_KIND_, GMT_SIZE_FIELD_)
};
#define GMT_BODY_MAX sizeof(union gmt_body_sizes_)

#endif /* GMT_FORMAT_H */
