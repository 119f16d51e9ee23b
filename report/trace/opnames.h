/* opnames.h - what a native frame is to someone reading a site.
 *
 * A PyTorch allocation's native stack is mostly machinery: the caching
 * allocator (and, with the bridge, the std::function that calls our trace
 * tracker), the dispatcher, the binding glue. The frames that say
 * something are the op (at::_ops::mul_Tensor::call: "aten::mul"; or its
 * Python binding, THPVariable_mul: "mul") and, on the autograd engine's
 * threads, the node being evaluated (generated::MulBackward0::apply:
 * "MulBackward0"). The rules are on function names as demangled, so they
 * hold for any build of PyTorch that keeps its symbols; docs/usage.md
 * lists them.
 */
#ifndef GMT_OPNAMES_H
#define GMT_OPNAMES_H

#include <stddef.h>

enum gmt_frame_role {
    GMT_FRAME_PLAIN,     /* may name a site */
    GMT_FRAME_MACHINERY, /* allocator, dispatcher, glue: names no site when
                            another frame can */
    GMT_FRAME_OP,        /* a framework op; name: "aten::mul" or "mul" */
    GMT_FRAME_BINDING,   /* an op's Python binding; name: "mul" */
    GMT_FRAME_NODE,      /* an autograd node's apply; name: "MulBackward0" */
    GMT_FRAME_ENGINE,    /* the autograd engine evaluating nodes */
    GMT_FRAME_KERNEL,    /* the dispatcher calling an op's registered kernel
                            (wrapper_CUDA_mm); name: "aten::mm". Names the op
                            only when no op frame does: a call boxed from
                            Python (torch.ops, a dispatch mode) has none */
};

/* The role of a frame whose function is fn (demangled; NULL: unknown),
 * and for ops, bindings and nodes their short name in name[len]. */
enum gmt_frame_role gmt_frame_role(const char *fn, char *name, size_t len);

#endif /* GMT_OPNAMES_H */
