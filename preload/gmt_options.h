/* gmt_options.h - the GPUMEMTRACE_* options: one table, and the rules
 * for their values.
 *
 * The library reads the options from its environment (options.c); the
 * launcher (gpumemtrace) sets them from its command line and refuses a bad
 * value there, before any process starts, by the same rules
 * (option_values.c, compiled into both); the options table of docs/usage.md and
 * the launcher's --help are checked against this table. Nothing else of
 * the library's internals is the launcher's business: this header needs
 * only the trace format's limits.
 */
#ifndef GMT_OPTIONS_H
#define GMT_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "gmt_format.h"

#define GMT_MAX_PY_DEPTH GMT_MAX_PY_FRAMES

/* X(NAME, field, type, default, min, max, help). One table: parsing, the
 * options table of docs/usage.md and `--help` of the launcher all come from it. */
#define GMT_OPTIONS(X)                                                        \
    X(OUTPUT, output, str, "gpumemtrace.%R%p.gmt", 0, 0,                      \
      "trace file path; %p is the pid, %h the host name (a '/' in it, or a " \
      "name of dots only, made '_'), %r the rank (RANK, "                    \
      "SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, LOCAL_RANK; " \
      "0 if none is set), %R \"r<rank>.\" when one is set (else nothing), " \
      "%% a percent sign")                                                    \
    X(STACK_DEPTH, stack_depth, int, 64, 0, GMT_MAX_STACK_DEPTH,              \
      "native frames recorded per call stack; 0 turns stacks off")            \
    X(UNWIND_CACHE, unwind_cache, bool, 1, 0, 1,                            \
      "1: reuse a native stack unwound before when the thread's stack still " \
      "holds each of its return addresses, and each saved frame pointer, in " \
      "place (checked at every call); 0: unwind every stack in full")         \
    X(MAX_STACKS, max_stacks, int, 1000000, 1, 100000000,                     \
      "distinct call stacks recorded at most; later new ones are recorded "    \
      "as none (said once)")                                                  \
    X(PYTHON, python, int, 128, 0, GMT_MAX_PY_DEPTH,                          \
      "Python frames recorded per call stack when the process runs CPython "  \
      "(3.9-3.13); 0 turns them off")                                         \
    X(DISABLE, disable, bool, 0, 0, 1,                                        \
      "1: trace nothing, pass every call straight through")                   \
    X(HOSTMEM, hostmem, bool, 1, 0, 1,                                        \
      "classify the host side of copies as pinned or pageable (one pointer "  \
      "query per copy)")                                                      \
    X(POOL, pool, bool, 1, 0, 1,                                              \
      "serve cudaMalloc/cudaFree from gpumemtrace's caching pool; 0: pass "   \
      "every call through to the runtime")                                    \
    X(POOL_VMM, pool_vmm, bool, 0, 0, 1,                                      \
      "1: the pool backs blocks over 1 MiB with the driver's virtual "       \
      "memory and moves free memory to where a request needs it (less "      \
      "memory held; cudaIpcGetMemHandle is refused on those blocks)")        \
    X(POOL_VMM_PAGE_MB, pool_vmm_page_mb, int, 2, 2, 1024,                    \
      "with GPUMEMTRACE_POOL_VMM=1: MiB per page, the unit memory is "       \
      "mapped in, a power of two")                                            \
    X(POOL_VMM_CHUNK_MB, pool_vmm_chunk_mb, int, 16, 2, 1024,                 \
      "with GPUMEMTRACE_POOL_VMM=1: the most MiB one mapping covers: larger " \
      "chunks cost fewer driver calls per byte moved and hold more memory")  \
    X(POOL_VMM_DEFER, pool_vmm_defer, bool, 1, 0, 1,                         \
      "with GPUMEMTRACE_POOL_VMM=1: unmap memory moved out of a free block "  \
      "just before the next wait for the GPU rather than at once; 0: at once")\
    X(POOL_VMM_WHOLE, pool_vmm_whole, bool, 0, 0, 1,                          \
      "1 (without GPUMEMTRACE_POOL_VMM): each segment of the pool for "       \
      "blocks over 1 MiB is one mapping of the driver's virtual memory, "     \
      "given back without synchronizing the device, and a free one of 256 "  \
      "MiB or more is given back rather than cut for a request of half its " \
      "size or less (cudaIpcGetMemHandle is refused on those blocks)")       \
    X(POOL_ORDERED, pool_ordered, bool, 0, 0, 1,                              \
      "1: hand freed blocks out again as soon as a fence is recorded after "  \
      "the free, before the GPU reaches it (safe while fences are on; see "   \
      "docs/usage.md); ends at the program's first non-blocking stream "     \
      "(not cuDNN's: GPUMEMTRACE_POOL_JOINED_STREAMS) or capture")           \
    X(POOL_FENCES, pool_fences, bool, 1, 0, 1,                                \
      "let the pool reuse freed blocks once events on the legacy stream "     \
      "and on each non-blocking stream (up to 8) show the GPU past the "      \
      "free, instead of synchronizing the device (see docs/usage.md); 0: "    \
      "device-wide synchronizations only")                                    \
    X(POOL_JOINED_STREAMS, pool_joined_streams, str, "libcudnn", 0, 0,        \
      "libraries (file name prefixes, comma-separated; none: no library) "    \
      "whose own non-blocking streams fences leave out, taking the work on "  \
      "them as joined to the calling stream before each call returns, as "   \
      "PyTorch's allocator does (see docs/usage.md)")                          \
    X(DRIVER, driver, bool, 1, 0, 1,                                          \
      "observe the CUDA driver's memory calls too (a statically linked "      \
      "cudart, CuPy, JAX, PyTorch's expandable segments); 0: runtime hooks "  \
      "only")                                                                 \
    X(SAMPLE_MS, sample_ms, int, 50, 0, 60000,                                \
      "milliseconds between samples of pool and device memory; 0: none")      \
    X(EMBED_SYMBOLS, embed_symbols, bool, 0, 0, 1,                            \
      "1: at exit, write the names of the functions in the recorded stacks "  \
      "into the trace (dladdr: exported symbols), for reports on machines "    \
      "without the binaries")                                                 \
    X(FRAMEWORK, framework, bool, 1, 0, 1,                                    \
      "record PyTorch's caching allocator's own block events, its cache "     \
      "left on (a C++ bridge built once against the program's PyTorch); 0: "  \
      "its CUDA calls only")                                                  \
    X(CXX, cxx, str, "c++", 0, 0,                                             \
      "the C++ compiler that builds the PyTorch bridge at first use")          \
    X(CACHE, cache, str, "", 0, 0,                                            \
      "directory of built bridges (default: $XDG_CACHE_HOME/gpumemtrace, "    \
      "else ~/.cache/gpumemtrace)")                                           \
    X(RETENTION, retention, str, "", 0, 0,                                    \
      "when a Python program records which of its objects keep its CUDA "   \
      "tensors alive (comma-separated): exit (before the interpreter ends), "\
      "signal (on SIGUSR2, unless the program handles it), step:N (after "   \
      "the N-th optimizer step or \"step\" mark), mark:NAME (at the first "  \
      "mark or region NAME), growth (once, when PyTorch's tensors grew over "\
      "5 optimizer steps in a row), all (every tensor, not only CUDA's); "   \
      "empty: never")                                                        \
    X(VERBOSE, verbose, bool, 0, 0, 1,                                        \
      "1: print the trace file's name and event count at exit")               \
    X(CHUNK_KB, chunk_kb, int, 64, 4, 16384,                                  \
      "per-thread chunk size of the trace file in KiB (rounded up to 4 KiB)")                       \
    X(SESSION, session, hex, 0, 0, 0,                                         \
      "session id shared by the processes of one run (set by the tool)")      \
    X(FORCED_ALLOCATOR, forced_allocator, str, "", 0, 0,                      \
      "set by the launcher: the frameworks whose own caching it turned off "  \
      "(pytorch, jax), so the library can explain failures that may cause")

/* The values an option of each type takes, as the library reads them:
 * int, a decimal number in [lo, hi]; bool, 1/0, yes/no, true/false or
 * on/off (any case); hex, a non-zero hexadecimal number; str, anything
 * but empty. true: s is one, and *out holds it. */
bool gmt_optval_int(const char *s, long lo, long hi, long *out);
bool gmt_optval_bool(const char *s, bool *out);
bool gmt_optval_hex(const char *s, uint64_t *out);
bool gmt_optval_str(const char *s);

#endif /* GMT_OPTIONS_H */
