/* real.h - the CUDA runtime functions the library intercepts or calls.
 *
 * GMT_RT_FUNCS and GMT_RT_PTDS (gmt_api.h, generated from the table in
 * preload/gen-hooks.py) list every runtime symbol we need the real
 * definition of: the ones the hooks export (the call goes on to the real
 * one) and the few the tracer calls for itself (device, pointer
 * attributes, errors). GMT_REAL(name) returns the real function with the
 * exact type of the runtime's declaration, resolved on first use.
 */
#ifndef GMT_REAL_H
#define GMT_REAL_H

#include <cuda_runtime_api.h>

#include "gmt_api.h"
#include "internal.h"

/* The runtime exports per-thread-default-stream variants (what
 * --default-stream per-thread compiles calls into). The headers only
 * declare them under a macro; declare them here with the base type. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define GMT_DECLARE_PTDS(base, sfx) extern __typeof__(base) base##sfx;
GMT_RT_PTDS(GMT_DECLARE_PTDS)
#undef GMT_DECLARE_PTDS
#pragma GCC diagnostic pop

enum gmt_real_idx {
#define GMT_ENUM_BASE(n) GMT_R_##n,
#define GMT_ENUM_PTDS(n, sfx) GMT_R_##n##sfx,
    GMT_RT_FUNCS(GMT_ENUM_BASE) GMT_RT_PTDS(GMT_ENUM_PTDS)
#undef GMT_ENUM_BASE
#undef GMT_ENUM_PTDS
    GMT_R_COUNT
};

#define GMT_REAL(name) ((__typeof__(&name))gmt_real(GMT_R_##name))

#endif /* GMT_REAL_H */
