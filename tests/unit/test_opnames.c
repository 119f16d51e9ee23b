/* test_opnames.c - the frame roles that name sites (report/trace/opnames.c). */
#include <stdio.h>
#include <string.h>

#include "opnames.h"
#include "check.h"

static int role(const char *fn, const char *want_name)
{
    char name[128];
    int r = gmt_frame_role(fn, name, sizeof name);
    if (want_name && strcmp(name, want_name) != 0) {
        fprintf(stderr, "%s: name '%s', want '%s'\n", fn, name, want_name);
        check_failures++;
    }
    return r;
}

int main(void)
{
    CHECK(role("at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)",
               "aten::mul") == GMT_FRAME_OP);
    CHECK(role("at::_ops::addmm::call(at::Tensor const&, at::Tensor const&, at::Tensor "
               "const&, c10::Scalar const&, c10::Scalar const&)", "aten::addmm") == GMT_FRAME_OP);
    CHECK(role("at::_ops::add__Tensor::redispatch(c10::DispatchKeySet, at::Tensor&)",
               "aten::add_") == GMT_FRAME_OP);
    CHECK(role("at::_ops::native_layer_norm::call(at::Tensor const&)",
               "aten::native_layer_norm") == GMT_FRAME_OP);
    CHECK(role("at::_ops::sum_dim_IntList::call(at::Tensor const&)", "aten::sum_dim") ==
          GMT_FRAME_OP);
    CHECK(role("at::_ops::_softmax::call(at::Tensor const&, long, bool)", "aten::_softmax") ==
          GMT_FRAME_OP);
    CHECK(role("torch::autograd::THPVariable_mul(_object*, _object*, _object*)", "mul") ==
          GMT_FRAME_BINDING);
    CHECK(role("_object* torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::"
               "THPVariable_mul>(_object*, _object*, _object*)", "mul") == GMT_FRAME_BINDING);
    CHECK(role("void* torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::"
               "THPVariable_mul>(unsigned long)", "mul") == GMT_FRAME_BINDING);
    CHECK(role("torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, "
               "std::allocator<at::Tensor> >&&)", "MulBackward0") == GMT_FRAME_NODE);
    CHECK(role("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)",
               "AccumulateGrad") == GMT_FRAME_NODE);
    CHECK(role("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::"
               "GraphTask> const&)", "") == GMT_FRAME_ENGINE);
    CHECK(role("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::"
               "GraphTask>&, torch::autograd::Node*)", "") == GMT_FRAME_ENGINE);
    CHECK(role("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::"
               "allocate(unsigned long)", "") == GMT_FRAME_MACHINERY);
    CHECK(role("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::"
               "record_trace(c10::CachingDeviceAllocator::TraceEntry::Action)", "") ==
          GMT_FRAME_MACHINERY);
    CHECK(role("std::function<void (c10::cuda::CUDACachingAllocator::TraceEntry const&)>::"
               "operator()(c10::cuda::CUDACachingAllocator::TraceEntry const&) const", "") ==
          GMT_FRAME_MACHINERY);
    CHECK(role("pybind11::cpp_function::dispatcher(_object*, _object*, _object*)", "") ==
          GMT_FRAME_MACHINERY);
    CHECK(role("at::detail::empty_cuda(unsigned long)", "") == GMT_FRAME_MACHINERY);
    CHECK(role("c10::impl::wrap_kernel_functor_unboxed_<at::(anonymous namespace)::"
               "MulFunctor, false>::call(void* (*)(unsigned long), unsigned long)", "") ==
          GMT_FRAME_MACHINERY);
    /* a registered kernel's wrapper (as the dispatcher calls it boxed from
     * Python): its op, with the key and overload taken off - names seen in
     * PyTorch 2.11's frames */
    static const char *const kernels[][2] = {
        {"CUDA_mm", "aten::mm"},
        {"CUDA_addmm", "aten::addmm"},
        {"CUDA_div_Tensor", "aten::div"},
        {"CUDA_nll_loss_forward", "aten::nll_loss_forward"},
        {"CUDA__empty_strided", "aten::empty_strided"},
        {"CUDA__cudnn_convolution", "aten::cudnn_convolution"},
        {"CUDA___cudnn_attention_forward", "aten::_cudnn_attention_forward"},
        {"CompositeExplicitAutograd_Scalar_div", "aten::div"},
        {"CompositeExplicitAutograd__ones_like", "aten::ones_like"},
    };
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        char fn[512];
        snprintf(fn, sizeof fn,
                 "c10::impl::make_boxed_from_unboxed_functor<c10::impl::detail::"
                 "WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor "
                 "(at::Tensor const&), &at::(anonymous namespace)::wrapper_%s>, at::Tensor, "
                 "c10::guts::typelist::typelist<at::Tensor const&> >, false>::call("
                 "c10::OperatorKernel*, c10::OperatorHandle const&, c10::DispatchKeySet, "
                 "std::vector<c10::IValue, std::allocator<c10::IValue> >*)", kernels[i][0]);
        CHECK(role(fn, kernels[i][1]) == GMT_FRAME_KERNEL);
    }
    CHECK(role("c10::impl::BoxedKernelWrapper<at::Tensor (at::Tensor const&)>::call("
               "c10::BoxedKernel const&)", "") == GMT_FRAME_MACHINERY);
    /* ordinary code stays ordinary */
    CHECK(role("at::native::mul(unsigned long)", "") == GMT_FRAME_PLAIN);
    CHECK(role("my_app_alloc", "") == GMT_FRAME_PLAIN);
    CHECK(role("torch::autograd::generated::details::foo(int)", "") == GMT_FRAME_PLAIN);
    CHECK(role("at::_ops::mul_Tensor", "") == GMT_FRAME_PLAIN);
    CHECK(role(NULL, "") == GMT_FRAME_PLAIN);
    CHECK(role("THPVariable_", "") == GMT_FRAME_MACHINERY);
    return CHECK_DONE();
}
