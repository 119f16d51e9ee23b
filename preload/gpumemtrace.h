/* gpumemtrace.h - the public API of libgpumemtrace.so: phase markers.
 *
 * Markers slice a traced run into phases that `gpumemreport phases`
 * reports on (time, peak memory, memory kept, allocations per phase), and
 * that `gpumemreport growth` uses to say how much a site grows per step.
 * Two kinds, freely mixed:
 *
 *   gpumemtrace_mark("step");       a repeated mark: each `step` starts an
 *                                   interval that ends at the next `step`
 *                                   (or at the end of the run)
 *   gpumemtrace_push("forward");    a region on the calling thread's stack,
 *   ...                             ended by the matching pop; regions nest
 *   gpumemtrace_pop();              ("forward/attention")
 *
 * Memory figures are process-wide (all threads), so a region's peak is the
 * most device memory the process had requested at any moment inside it.
 *
 * Names are copied (the caller's string can go away at once), at most 256
 * bytes (longer ones are cut at a UTF-8 character boundary); NULL is
 * recorded as "(null)". Each distinct name is written to the trace once.
 *
 * Every function is safe to call at any time, from any thread, and never
 * changes errno:
 *  - Without the library (not preloaded), see "Linking" below.
 *  - With the library loaded but tracing not started yet, a marker starts
 *    tracing, as the first CUDA runtime call would (so a phase opened
 *    before the first allocation is recorded).
 *  - With GPUMEMTRACE_DISABLE=1, or when the trace file could not be
 *    created, markers do nothing.
 *  - In a forked child, markers go to the child's own trace.
 *  - A pop without a matching push is recorded as it is; the report counts
 *    it and carries on.
 * They are not async-signal-safe (they may allocate the first time a name
 * is seen): don't call them from a signal handler.
 *
 * Linking. The library is normally LD_PRELOADed into a program that was
 * built without it. Three ways to call these functions:
 *  1. Define GPUMEMTRACE_WEAK before including this header and use the
 *     GPUMEMTRACE_MARK/PUSH/POP macros: the functions are weak references,
 *     resolved when the library is preloaded and no-ops when it is not.
 *     Nothing to link. (Needs a position-independent executable or a
 *     shared library, the default of current GCC and Clang on Linux.)
 *  2. Look them up at run time: dlsym(RTLD_DEFAULT, "gpumemtrace_mark").
 *  3. Link with -lgpumemtrace. The program then always runs traced.
 *
 * From Python (ctypes), when the library is preloaded:
 *
 *     import ctypes
 *     ctypes.CDLL(None).gpumemtrace_mark(b"step")
 *
 * or preload/gpumemtrace_markers.py (mark, push, pop, `with phase(...)`),
 * which does nothing when the library is not loaded.
 *
 * NVTX: libgpumemtrace.so is also an NVTX injection library. With
 * NVTX_INJECTION64_PATH=/path/to/libgpumemtrace.so (the gpumemtrace
 * launcher sets it), nvtxMarkA/W/Ex become marks and nvtxRangePushA/W/Ex
 * and nvtxRangePop become regions, without changing the program.
 */
#ifndef GPUMEMTRACE_H
#define GPUMEMTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GPUMEMTRACE_WEAK) && defined(__GNUC__)
#define GPUMEMTRACE_DECL __attribute__((weak))
#else
#define GPUMEMTRACE_DECL
#endif

/* Longest name recorded, in bytes. */
#define GPUMEMTRACE_NAME_MAX 256

/* Mark a moment named `name`. Repeated marks of one name divide the run
 * into intervals (mark to next mark of that name, or to the end). */
GPUMEMTRACE_DECL void gpumemtrace_mark(const char *name);

/* Open a region named `name` on the calling thread; it ends at the
 * matching gpumemtrace_pop() on the same thread. */
GPUMEMTRACE_DECL void gpumemtrace_push(const char *name);

/* Close the calling thread's innermost open region. */
GPUMEMTRACE_DECL void gpumemtrace_pop(void);

/* 1 if this process is recording a trace, else 0 (GPUMEMTRACE_DISABLE=1,
 * or the trace file could not be created). Starts tracing if it has not
 * started yet, as a marker does. */
GPUMEMTRACE_DECL int gpumemtrace_active(void);

/* Calls that are no-ops when the library is absent (GPUMEMTRACE_WEAK),
 * and plain calls otherwise. */
#ifdef GPUMEMTRACE_WEAK
#define GPUMEMTRACE_MARK(name)                                                \
    do {                                                                      \
        if (gpumemtrace_mark)                                                 \
            gpumemtrace_mark(name);                                           \
    } while (0)
#define GPUMEMTRACE_PUSH(name)                                                \
    do {                                                                      \
        if (gpumemtrace_push)                                                 \
            gpumemtrace_push(name);                                           \
    } while (0)
#define GPUMEMTRACE_POP()                                                     \
    do {                                                                      \
        if (gpumemtrace_pop)                                                  \
            gpumemtrace_pop();                                                \
    } while (0)
#define GPUMEMTRACE_ACTIVE() (gpumemtrace_active ? gpumemtrace_active() : 0)
#else
#define GPUMEMTRACE_MARK(name) gpumemtrace_mark(name)
#define GPUMEMTRACE_PUSH(name) gpumemtrace_push(name)
#define GPUMEMTRACE_POP() gpumemtrace_pop()
#define GPUMEMTRACE_ACTIVE() gpumemtrace_active()
#endif

#ifdef __cplusplus
} /* extern "C" */

namespace gpumemtrace {
/* A region for the lifetime of a C++ scope:
 *     { gpumemtrace::region r("forward"); ... } */
class region {
public:
    explicit region(const char *name) { GPUMEMTRACE_PUSH(name); }
    ~region() { GPUMEMTRACE_POP(); }
    region(const region &) = delete;
    region &operator=(const region &) = delete;
};
} /* namespace gpumemtrace */
#endif

#endif /* GPUMEMTRACE_H */
