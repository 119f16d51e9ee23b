/* fw_bridge.h - the C ABI between libgpumemtrace.so and a framework bridge.
 *
 * A framework bridge is a small C++ library, compiled against the
 * framework the traced program runs (fw_torch.cpp: PyTorch's caching
 * allocator) and loaded by fw.c when that framework's allocator first asks
 * CUDA for memory. It attaches to the allocator's own event hook and turns
 * each event into a struct gmt_fw_event for the library, which stamps,
 * stacks and records it. Nothing of C++ crosses this line: the bridge
 * includes this header as C, the library never includes a framework
 * header. This file is compiled into both, and written out beside the
 * bridge's source when the bridge is built at run time.
 */
#ifndef GMT_FW_BRIDGE_H
#define GMT_FW_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMT_FW_ABI 1
#define GMT_FW_ATTACH_SYM "gmt_fw_torch_attach"

/* What happened, in the framework's vocabulary (PyTorch's TraceEntry). */
enum gmt_fw_action {
    GMT_FW_ALLOC = 0,          /* block handed out: size requested */
    GMT_FW_FREE_REQUESTED = 1, /* the program freed the block */
    GMT_FW_FREE_COMPLETED = 2, /* the block is reusable: size requested */
    GMT_FW_SEGMENT_ALLOC = 3,  /* segment taken from CUDA */
    GMT_FW_SEGMENT_FREE = 4,   /* segment given back */
    GMT_FW_SEGMENT_MAP = 5,    /* expandable segment grew */
    GMT_FW_SEGMENT_UNMAP = 6,  /* expandable segment shrank */
    GMT_FW_OOM = 7,            /* the allocator is about to raise out of
                                  memory: addr = device free bytes, size =
                                  the request (rounded) */
    GMT_FW_BLOCK_SIZE = 8,     /* the block at addr is `size` bytes (sent,
                                  only when it differs from the requested
                                  size rounded to 512, before the next
                                  event of that device) */
};

struct gmt_fw_event {
    int action;          /* GMT_FW_* */
    int device;
    uint64_t addr, size;
    uint64_t stream;     /* the stream handle, 0: the legacy stream */
    uint64_t pool;       /* the framework's memory pool id, 0: default */
    uint64_t allocated;  /* OOM: the allocator's allocated bytes */
    uint64_t reserved;   /* OOM: its reserved bytes */
};

/* What the library gives the bridge. `event` is called from inside the
 * framework's allocator, on the thread that caused the event, with the
 * allocator's lock held: it takes no lock the framework could wait on and
 * never calls into the framework. */
struct gmt_fw_host {
    unsigned abi;        /* GMT_FW_ABI */
    void (*event)(const struct gmt_fw_event *ev);
};

/* The bridge's one export. 0: attached; 1: not yet (the allocator is not
 * initialized: ask again at its next call); -1: cannot, `why` says why in
 * a few words (another allocator backend, a layout not recognized). */
typedef int (*gmt_fw_attach_fn)(const struct gmt_fw_host *host, char *why,
                                size_t whylen);

#ifdef __cplusplus
}
#endif

#endif /* GMT_FW_BRIDGE_H */
