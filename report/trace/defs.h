/* defs.h - the definitions a trace carries besides its events.
 *
 * Extension records describe the process, its threads, devices, loaded
 * modules and call stacks. gmt_defs_add() parses them (as untrusted
 * payloads) into tables that the commands look things up in. A stack's
 * frames are tied to the module loaded at that address at the time the
 * stack was defined, so a library unloaded and replaced later does not
 * misattribute earlier stacks.
 */
#ifndef GMT_DEFS_H
#define GMT_DEFS_H

#include <uthash.h>

#include "reader.h"
#include "stacks.h"

struct gmt_module_def {
    uint32_t id;
    uint64_t base, lo, hi;
    uint8_t build_id[64];
    uint32_t build_id_len;
    char *path;
};

/* A Python code object (PYCODE). */
struct gmt_pycode_def {
    uint32_t id;
    int firstlineno;
    unsigned format;          /* line table format: 0 3.9, 1 3.10, 2 3.11+ */
    char *file, *name;
    uint8_t *table;
    uint32_t table_len;
    UT_hash_handle hh;
};

struct gmt_thread_def {
    uint32_t index;
    uint64_t tid;
    char name[17];
    UT_hash_handle hh;
};

struct gmt_symbol_def { /* embedded by the recorder at exit */
    uint64_t ip, start;
    char *name;
    UT_hash_handle hh;
};

struct gmt_string_def { /* STRING: marker names */
    uint32_t id;
    char *text; /* printable UTF-8, at most 4096 bytes */
    UT_hash_handle hh;
};

struct gmt_device_def {
    uint32_t ordinal;
    char name[257];
    uint64_t total_mem;
    uint8_t uuid[16];
    uint32_t pci_domain, pci_bus, pci_device, cc_major, cc_minor;
};

struct gmt_process_def {
    bool present;
    uint64_t pid, ppid, session, realtime_ns;
    char *cmdline; /* arguments joined by spaces */
    char *host;
    char *exe;
};

struct gmt_defs {
    struct gmt_process_def process;
    struct gmt_module_def *modules;
    size_t nmodules, cap_modules;
    size_t *active; /* indices of the modules mapped now, sorted by lo */
    size_t nactive;
    struct stack_table stacks; /* stacks.h; gmt_defs_stack() */
    size_t nstacks;
    struct gmt_thread_def *threads; /* uthash by index */
    size_t nthreads;
    struct gmt_device_def *devices;
    size_t ndevices;
    struct gmt_symbol_def *symbols; /* uthash by ip */
    size_t nsymbols;
    struct gmt_pycode_def *pycodes; /* uthash by id */
    size_t npycodes;
    char **notes;       /* NOTE texts, "warning: " prefixed, first 64 */
    size_t nnotes_kept;
    struct gmt_string_def *strings; /* uthash by id */
    size_t nstrings, nnotes, nunknown;
    size_t nretention;         /* GMT_X_RETENTION lines */
    size_t malformed;          /* definitions skipped as malformed */
    char malformed_first[96];  /* which was the first */
};

/* Take in one extension record. Unknown kinds are counted and skipped,
 * and so are malformed ones (d->malformed, gmt_damage: a damaged
 * definition costs what refers to it, not the trace), and one that
 * memory ran out for. */
void gmt_defs_add(struct gmt_defs *d, const struct gmt_rec *rec);
/* What a damaged trace lost, read to its end: the reader's account
 * (gmt_reader_damage) and the malformed definitions skipped. False and
 * buf untouched when nothing was. */
bool gmt_damage(const struct gmt_reader *rd, const struct gmt_defs *d, char *buf,
                size_t len);
/* Copy stack `id` into *out (a local: about 8 KiB); false if the trace
 * does not define it. */
bool gmt_defs_stack(const struct gmt_defs *d, uint32_t id,
                    struct gmt_stack_def *out);
const struct gmt_thread_def *gmt_defs_thread(const struct gmt_defs *d,
                                             uint32_t index);
const struct gmt_device_def *gmt_defs_device(const struct gmt_defs *d,
                                             uint32_t ordinal);
const struct gmt_symbol_def *gmt_defs_symbol(const struct gmt_defs *d,
                                             uint64_t ip);
const struct gmt_pycode_def *gmt_defs_pycode(const struct gmt_defs *d,
                                             uint32_t id);
/* The source line of a Python frame at byte offset `offset` of code c,
 * from its line table; the first line when the table has none. */
int gmt_pycode_line(const struct gmt_pycode_def *c, int64_t offset);
/* A GMT_X_VMM record: an address range mapped, unmapped, reserved or
 * freed through the driver's virtual memory API. */
struct gmt_vmm {
    unsigned api;      /* GMT_API_CU_MEM_MAP ... GMT_API_CU_MEM_ADDRESS_FREE */
    uint32_t result, device, stack;
    uint64_t addr, size, offset, handle;
};
/* Sizes beyond this are malformed (no memory is 2^48 bytes): sums of
 * them cannot overflow. */
#define GMT_SIZE_MAX (1ull << 48)
/* 0 and *out filled, or -1: malformed. */
int gmt_vmm_decode(const struct gmt_rec *rec, struct gmt_vmm *out);
/* A GMT_X_MEMPOOL record: a stream-ordered pool as the driver saw it. */
/* GMT_X_PROC_MEM: this process's own device memory (NVML). */
struct gmt_proc_mem {
    uint32_t device;
    uint64_t used;
};
int gmt_proc_mem_decode(const struct gmt_rec *rec, struct gmt_proc_mem *out);

struct gmt_mempool {
    uint32_t device;
    uint64_t pool, reserved, reserved_high, used, used_high;
};
int gmt_mempool_decode(const struct gmt_rec *rec, struct gmt_mempool *out);
/* A GMT_X_FW record: a framework allocator's (PyTorch's caching
 * allocator's) segment taken, given back, mapped or unmapped, or the real
 * size of one of its blocks (action GMT_FWX_*). Actions beyond those this
 * reader knows decode (a newer minor version may add some) and are
 * ignored by the consumers. */
struct gmt_fw {
    unsigned action;
    uint32_t device, stack;
    uint64_t addr, size, stream, pool;
};
/* 0 and *out filled, or -1: malformed (truncated, a device beyond the
 * reader's, a size of 2^48 or more, a range that wraps). */
int gmt_fw_decode(const struct gmt_rec *rec, struct gmt_fw *out);
/* An allocation a framework allocator made for its segments: flags bit
 * GMT_ALLOC_FW_BACKING on cudaMalloc, cuMemAlloc or cuMemCreate, the
 * calls it makes them with. Other allocations' flags hold a pool handle
 * (cudaMallocFromPoolAsync, cuMemAllocFromPoolAsync) or a framework
 * pool's id (GMT_API_FW_ALLOC), where bit 40 means nothing. */
static inline bool gmt_is_fw_backing(const struct gmt_rec *rec)
{
    unsigned api = rec->api & ~GMT_API_PTDS;
    return rec->kind == GMT_K_ALLOC && (rec->flags & GMT_ALLOC_FW_BACKING) &&
           (api == GMT_API_MALLOC || api == GMT_API_CU_MEM_ALLOC ||
            api == GMT_API_CU_MEM_CREATE);
}
/* The stream of an allocation: its own for the stream-ordered calls and a
 * framework's blocks, 0 (the legacy stream) for the others, which have
 * none - the record's stream is a register (docs/trace-format.md), and
 * there it holds whatever the thread's last stream-ordered call left. */
static inline uint64_t gmt_alloc_stream(const struct gmt_rec *rec)
{
    unsigned api = rec->api & ~GMT_API_PTDS;
    return api == GMT_API_MALLOC_ASYNC || api == GMT_API_MALLOC_FROM_POOL_ASYNC ||
                   api == GMT_API_FW_ALLOC || api == GMT_API_CU_MEM_ALLOC_ASYNC ||
                   api == GMT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC
               ? rec->stream
               : 0;
}
/* The text of string `id`, NULL if the trace does not define it. */
const char *gmt_defs_string(const struct gmt_defs *d, uint64_t id);
void gmt_defs_free(struct gmt_defs *d);

#endif /* GMT_DEFS_H */
