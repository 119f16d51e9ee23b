/* opnames.c - what a native frame is to someone reading a site (opnames.h). */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "opnames.h"

static bool starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The identifier at s (letters, digits, '_') into out; its length. */
static size_t ident(const char *s, char *out, size_t len)
{
    size_t n = 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_')
        n++;
    if (len > 0)
        snprintf(out, len, "%.*s", (int)n, s);
    return n;
}

/* at::_ops::<name>_<Overload>: the struct is the schema's name and its
 * overload joined by '_'. Overload names mostly start with a capital
 * (Tensor, Scalar, IntList): cut at the first "_X". A lowercase overload
 * (mm_out) stays part of the name. */
static void strip_overload(char *name)
{
    for (char *p = name + 1; *p; p++)
        if (p[0] == '_' && isupper((unsigned char)p[1])) {
            *p = '\0';
            return;
        }
}

/* The op of a registered kernel's wrapper, from what follows "wrapper_":
 * the dispatch key, '_', then the op's name and overload. Structured
 * kernels put the name first (CUDA_mm, CUDA_div_Tensor), the others the
 * overload first, empty or not (CUDA__empty_strided,
 * CUDA___cudnn_attention_forward, CompositeExplicitAutograd_Scalar_div).
 * Read as: a leading '_' is the empty overload's; a capitalized first or
 * last part is the overload; else the whole (CUDA_nll_loss_forward; a
 * lowercase overload first, CUDA_low_randint, stays in the name). */
static bool kernel_op(const char *p, char *name, size_t len)
{
    while (isalnum((unsigned char)*p))
        p++;
    char op[128];
    if (*p != '_' || ident(p + 1, op, sizeof op) == 0)
        return false;
    char *o = op;
    if (o[0] == '_' && o[1] != '\0') {
        o++;
    } else if (isupper((unsigned char)o[0]) && strchr(o, '_')) {
        o = strchr(o, '_') + 1;
    } else {
        strip_overload(o);
    }
    snprintf(name, len, "aten::%s", o);
    return true;
}

/* Frames that hand memory out or move a call along: never the answer to
 * "what allocated this". */
static const char *const machinery[] = {
    "c10::cuda::CUDACachingAllocator::",
    "c10::CachingDeviceAllocator::",
    "c10::CachingAllocator::",
    "c10::cuda::MemPool",
    "std::function<",
    "std::_Function_handler<",
    "std::__invoke",
    "c10::impl::",
    "c10::Dispatcher::",
    "c10::KernelFunction::",
    "c10::BoxedKernel::",
    "c10::OperatorHandle::",
    "c10::TypedOperatorHandle<",
    "c10::callUnboxedKernelFunction<",
    "c10::intrusive_ptr<",
    "c10::make_intrusive<",
    "c10::TensorImpl::",
    "c10::StorageImpl::",
    "c10::Allocator::",
    "c10::DataPtr::",
    "at::detail::empty",
    "at::empty",
    "at::native::empty",
    "at::native::(anonymous namespace)::empty",
    "at::cuda::empty",
    "at::TensorBase::",
    "at::Tensor::",
    "at::TensorIteratorBase::",
    "at::TensorIterator::",
    "at::meta::structured_",
    "at::(anonymous namespace)::",
    "torch::autograd::VariableType::",
    "torch::ADInplaceOrView::",
    "torch::autograd::TypeError_to_NotImplemented_",
    "pybind11::",
    "THPVariable_",
    NULL,
};

static const char *const engine[] = {
    "torch::autograd::Engine::",
    "torch::autograd::python::PythonEngine::",
    "torch::autograd::call_function",
    "torch::autograd::validate_outputs",
    "torch::autograd::Node::operator()",
    "torch::autograd::GraphTask::",
    NULL,
};

enum gmt_frame_role gmt_frame_role(const char *fn, char *name, size_t len)
{
    if (len > 0)
        name[0] = '\0';
    if (fn == NULL)
        return GMT_FRAME_PLAIN;
    const char *p;
    /* torch::autograd::generated::MulBackward0::apply(...) */
    if (starts(fn, "torch::autograd::generated::")) {
        p = fn + strlen("torch::autograd::generated::");
        size_t n = ident(p, name, len);
        if (n > 0 && starts(p + n, "::apply"))
            return GMT_FRAME_NODE;
        if (len > 0)
            name[0] = '\0';
    }
    if (starts(fn, "torch::autograd::AccumulateGrad::apply") ||
        starts(fn, "torch::autograd::PyNode::apply") ||
        starts(fn, "torch::autograd::CppNode<")) {
        const char *q = fn + strlen("torch::autograd::");
        ident(q, name, len);
        return GMT_FRAME_NODE;
    }
    /* at::_ops::mul_Tensor::call / ::redispatch */
    if (starts(fn, "at::_ops::")) {
        char op[128];
        p = fn + strlen("at::_ops::");
        size_t n = ident(p, op, sizeof op);
        if (n > 0 && (starts(p + n, "::call(") || starts(p + n, "::redispatch("))) {
            strip_overload(op);
            snprintf(name, len, "aten::%s", op);
            return GMT_FRAME_OP;
        }
    }
    /* torch::autograd::THPVariable_mul(...), and its wrapper
     * TypeError_to_NotImplemented_<&torch::autograd::THPVariable_mul>
     * (demangled with its return type first) */
    p = strstr(fn, "torch::autograd::THPVariable_");
    p = p ? p + strlen("torch::autograd::") : starts(fn, "THPVariable_") ? fn : NULL;
    if (p != NULL && ident(p + strlen("THPVariable_"), name, len) > 0)
        return GMT_FRAME_BINDING;
    for (int i = 0; engine[i]; i++)
        if (starts(fn, engine[i]))
            return GMT_FRAME_ENGINE;
    /* c10::impl::...<...&at::(anonymous namespace)::wrapper_CUDA_mm>::call */
    if (starts(fn, "c10::impl::") && (p = strstr(fn, "::wrapper_")) != NULL &&
        kernel_op(p + strlen("::wrapper_"), name, len))
        return GMT_FRAME_KERNEL;
    for (int i = 0; machinery[i]; i++)
        if (starts(fn, machinery[i]))
            return GMT_FRAME_MACHINERY;
    return GMT_FRAME_PLAIN;
}
