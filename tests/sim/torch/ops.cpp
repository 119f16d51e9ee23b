/* ops.cpp - the layers of PyTorch above its allocator, for the tests of
 * how gpumemtrace names allocations: a Python binding, the
 * dispatcher's operator entry, a kernel's output allocation, and the
 * autograd engine's device thread evaluating backward nodes.
 *
 * Only the shape of the native stacks matters, so every function has the
 * name (namespace, class, template) its PyTorch counterpart has and calls
 * the next one down, kept as a frame of its own (noinline, no tail call):
 *
 *   forward, on the calling (Python) thread:
 *     torch::autograd::TypeError_to_NotImplemented_<&THPVariable_mul>
 *     -> torch::autograd::THPVariable_mul -> at::_ops::mul_Tensor::call
 *     -> c10::impl::wrap_kernel_functor_unboxed_<...>::call (dispatch)
 *     -> at::native::mul -> at::detail::empty_cuda -> the allocator
 *
 *   backward, on the engine's thread "pt_autograd_0" (no Python), while
 *   the calling thread waits in sim_torch_run_backward as PyTorch's
 *   waits in Engine::execute:
 *     torch::autograd::Engine::thread_main -> Engine::evaluate_function
 *     -> torch::autograd::generated::MeanBackward0::apply -> at::_ops::
 *     expand / div ... -> the allocator; then MulBackward0::apply; then
 *     torch::autograd::AccumulateGrad::apply (no allocation).
 *
 * With a Python dispatch mode set (sim_torch_set_dispatch_mode, as
 * PyTorch's TorchDispatchMode), at::_ops::mul_Tensor::call hands the op
 * to Python, which calls the kernel boxed: ... -> Python frames of the
 * framework -> c10::impl::make_boxed_from_unboxed_functor<&at::(anonymous
 * namespace)::wrapper_CUDA_mul_Tensor>::call -> the kernel - on the
 * engine's thread too, which then runs Python.
 *
 * The C API at the end is what tests/e2e/py/ops_app.py calls.
 */
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <pthread.h>
#include <thread>

#include "sim_torch.h"

#define SIM_TORCH_API __attribute__((visibility("default")))

#define NOINLINE __attribute__((noinline))
/* A call followed by this is not a tail call: the caller's frame stays. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

namespace c10 {
namespace impl {
template <class Functor, bool AllowLegacy> struct wrap_kernel_functor_unboxed_ {
    NOINLINE static void *call(void *(*kernel)(size_t), size_t n)
    {
        void *p = kernel(n);
        KEEP_FRAME();
        return p;
    }
};
} // namespace impl
} // namespace c10

namespace at {
namespace detail {
NOINLINE void *empty_cuda(size_t n)
{
    void *p = sim_torch_malloc(n, nullptr);
    KEEP_FRAME();
    return p;
}
} // namespace detail

namespace cuda {
/* cuBLAS's workspace, as PyTorch allocates it from its caching allocator */
NOINLINE void *getCUDABlasLtWorkspace(size_t n)
{
    void *p = at::detail::empty_cuda(n);
    KEEP_FRAME();
    return p;
}
} // namespace cuda

namespace native {
NOINLINE void *mul(size_t n)
{
    void *p = at::detail::empty_cuda(n);
    KEEP_FRAME();
    return p;
}
NOINLINE void *mm(size_t n)
{
    void *p = at::detail::empty_cuda(n);
    KEEP_FRAME();
    return p;
}
NOINLINE void *expand_div(size_t n)
{
    void *p = at::detail::empty_cuda(n);
    KEEP_FRAME();
    return p;
}
} // namespace native

namespace {
struct MulFunctor {};
struct MmFunctor {};

/* the kernel as the dispatcher registers it */
NOINLINE void *wrapper_CUDA_mul_Tensor(size_t n)
{
    void *p = at::native::mul(n);
    KEEP_FRAME();
    return p;
}
} // namespace
} // namespace at

namespace c10 {
namespace impl {
/* a kernel called boxed, as torch.ops' OpOverload.__call__ calls it */
template <void *(*F)(size_t)> struct make_boxed_from_unboxed_functor {
    NOINLINE static void *call(size_t n)
    {
        void *p = F(n);
        KEEP_FRAME();
        return p;
    }
};
} // namespace impl
} // namespace c10

/* A Python dispatch mode (TorchDispatchMode, as PyTorch's MemTracker is):
 * while one is set, the op hands itself to Python, which calls the
 * kernel boxed (sim_torch_boxed_mul). */
static void *(*g_dispatch_mode)(size_t);

namespace torch {
namespace detail {
NOINLINE void *dispatch_to_python(size_t n)
{
    void *p = g_dispatch_mode(n);
    KEEP_FRAME();
    return p;
}
} // namespace detail
} // namespace torch

namespace at {
namespace _ops {
struct mul_Tensor {
    NOINLINE static void *call(size_t n)
    {
        void *p = g_dispatch_mode
                      ? torch::detail::dispatch_to_python(n)
                      : c10::impl::wrap_kernel_functor_unboxed_<MulFunctor, false>::call(
                            at::native::mul, n);
        KEEP_FRAME();
        return p;
    }
};
struct mm {
    NOINLINE static void *call(size_t n)
    {
        void *p = c10::impl::wrap_kernel_functor_unboxed_<MmFunctor, false>::call(
            at::native::mm, n);
        KEEP_FRAME();
        return p;
    }
};
struct div_Scalar {
    NOINLINE static void *call(size_t n)
    {
        void *p = c10::impl::wrap_kernel_functor_unboxed_<MulFunctor, true>::call(
            at::native::expand_div, n);
        KEEP_FRAME();
        return p;
    }
};
} // namespace _ops
} // namespace at

namespace torch {
namespace autograd {
NOINLINE void *THPVariable_mul(size_t n)
{
    void *p = at::_ops::mul_Tensor::call(n);
    KEEP_FRAME();
    return p;
}
NOINLINE void *THPVariable_mm(size_t n)
{
    void *p = at::_ops::mm::call(n);
    KEEP_FRAME();
    return p;
}
template <void *(*F)(size_t)> NOINLINE void *TypeError_to_NotImplemented_(size_t n)
{
    void *p = F(n);
    KEEP_FRAME();
    return p;
}

struct Node {
    virtual ~Node() = default;
    virtual void *apply(size_t n) = 0;
};

namespace generated {
struct MeanBackward0 : Node {
    NOINLINE void *apply(size_t n) override
    {
        void *p = at::_ops::div_Scalar::call(n);
        KEEP_FRAME();
        return p;
    }
};
struct MulBackward0 : Node {
    NOINLINE void *apply(size_t n) override
    {
        void *p = at::_ops::mul_Tensor::call(n);
        KEEP_FRAME();
        return p;
    }
};
} // namespace generated

struct AccumulateGrad : Node {
    NOINLINE void *apply(size_t) override { return nullptr; } /* steals the gradient */
};

/* One backward pass: the nodes to run and the blocks they made. With
 * release, the engine gives back the first node's output (an
 * intermediate gradient) and the saved tensors once the second has run,
 * as autograd does. */
struct GraphTask {
    size_t n = 0, n2 = 0;
    void *out[2] = {nullptr, nullptr};
    bool release = false;
    void **saved = nullptr;
    int nsaved = 0;
    bool done = false;
};

class Engine {
  public:
    NOINLINE void evaluate_function(Node &node, size_t n, void **out)
    {
        *out = node.apply(n);
        KEEP_FRAME();
    }

    /* The device thread: waits for graph tasks, runs their nodes. */
    NOINLINE void thread_main()
    {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            cv_.wait(lk, [this] { return task_ != nullptr; });
            GraphTask *t = task_;
            lk.unlock();
            generated::MeanBackward0 mean;
            generated::MulBackward0 mul;
            AccumulateGrad acc;
            void *none = nullptr;
            evaluate_function(mean, t->n, &t->out[0]);
            evaluate_function(mul, t->n2 ? t->n2 : t->n, &t->out[1]);
            evaluate_function(acc, t->n, &none);
            if (t->release) {
                sim_torch_free(t->out[0]);
                t->out[0] = nullptr;
                for (int i = 0; i < t->nsaved; i++)
                    sim_torch_free(t->saved[i]);
            }
            lk.lock();
            task_ = nullptr;
            t->done = true;
            cv_.notify_all();
        }
    }

    /* The calling thread hands the task over and waits, as
     * Engine::execute does for a graph on a CUDA device. */
    NOINLINE void execute(GraphTask &t)
    {
        std::call_once(started_, [this] {
            std::thread th([this] { thread_main(); });
            pthread_setname_np(th.native_handle(), "pt_autograd_0");
            th.detach();
        });
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return task_ == nullptr; });
        task_ = &t;
        cv_.notify_all();
        cv_.wait(lk, [&t] { return t.done; });
    }

  private:
    std::once_flag started_;
    std::mutex mu_;
    std::condition_variable cv_;
    GraphTask *task_ = nullptr;
};

Engine &default_engine()
{
    static Engine *e = new Engine; /* never destroyed: its thread lives on */
    return *e;
}
} // namespace autograd
} // namespace torch

/* ---- the C API (sim_torch.h) --------------------------------------------- */

extern "C" SIM_TORCH_API void *sim_torch_op_mul(size_t n)
{
    using namespace torch::autograd;
    return TypeError_to_NotImplemented_<&THPVariable_mul>(n);
}

extern "C" SIM_TORCH_API void sim_torch_set_dispatch_mode(void *(*mode)(size_t))
{
    g_dispatch_mode = mode;
}

extern "C" SIM_TORCH_API void *sim_torch_boxed_mul(size_t n)
{
    return c10::impl::make_boxed_from_unboxed_functor<
        at::wrapper_CUDA_mul_Tensor>::call(n);
}

extern "C" SIM_TORCH_API void *sim_torch_op_mm(size_t n)
{
    return torch::autograd::THPVariable_mm(n);
}

extern "C" SIM_TORCH_API void *sim_torch_workspace(size_t n)
{
    return at::cuda::getCUDABlasLtWorkspace(n);
}

extern "C" SIM_TORCH_API void *sim_torch_run_backward_release(size_t n_intermediate,
                                                              size_t n_grad, void **saved,
                                                              int nsaved)
{
    try {
        torch::autograd::GraphTask t;
        t.n = n_intermediate;
        t.n2 = n_grad;
        t.release = true;
        t.saved = saved;
        t.nsaved = nsaved;
        torch::autograd::default_engine().execute(t);
        return t.out[1];
    } catch (...) {
        return nullptr;
    }
}

extern "C" SIM_TORCH_API int sim_torch_run_backward(size_t n, void *out[2])
{
    try {
        torch::autograd::GraphTask t;
        t.n = n;
        torch::autograd::default_engine().execute(t);
        out[0] = t.out[0];
        out[1] = t.out[1];
        return out[0] && out[1] ? 0 : -1;
    } catch (...) {
        return -1;
    }
}
