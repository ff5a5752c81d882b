// torch ops for SiLU-and-multiply, through the LibTorch stable ABI.
#include <kernelpack/ops.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <vector>

#include "silu_mul.h"
#include "stable_util.h"

namespace {

using torch::stable::Tensor;
using llm_ops::current_stream;
using llm_ops::silu_mul::DType;

DType dtype_of(const Tensor& t) { return llm_ops::dtype_of(t, "silu_mul"); }

// Checks x ([..., 2d], contiguous, CUDA) and returns d.
int64_t check_input(const Tensor& x) {
  STD_TORCH_CHECK(x.dim() >= 1, "silu_mul: x must have at least one dimension");
  STD_TORCH_CHECK(x.is_cuda(), "silu_mul: x must be a CUDA tensor");
  STD_TORCH_CHECK(x.is_contiguous(), "silu_mul: x must be contiguous");
  dtype_of(x);
  const int64_t last = x.size(x.dim() - 1);
  STD_TORCH_CHECK(last % 2 == 0, "silu_mul: the last dimension of x must be even, got ", last);
  STD_TORCH_CHECK(last < (int64_t{1} << 31), "silu_mul: the last dimension of x must be < 2^31");
  return last / 2;
}

std::vector<int64_t> half_shape(const Tensor& x) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    shape.push_back(x.size(d));
  }
  shape.back() /= 2;
  return shape;
}

Tensor forward(Tensor x) {
  const int64_t d = check_input(x);
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor out = llm_ops::empty(x, half_shape(x));
  const int64_t rows = d == 0 ? 0 : x.numel() / (2 * d);
  const char* err = llm_ops::silu_mul::launch_forward(dtype_of(x), out.mutable_data_ptr(),
                                                      x.const_data_ptr(), rows, d,
                                                      current_stream(x));
  STD_TORCH_CHECK(err == nullptr, "silu_mul forward: CUDA error: ", err);
  return out;
}

Tensor backward(Tensor grad, Tensor x) {
  const int64_t d = check_input(x);
  STD_TORCH_CHECK(grad.is_cuda() && grad.is_contiguous(),
                  "silu_mul backward: grad must be a contiguous CUDA tensor");
  STD_TORCH_CHECK(grad.scalar_type() == x.scalar_type(),
                  "silu_mul backward: grad must have the dtype of x");
  STD_TORCH_CHECK(grad.get_device_index() == x.get_device_index(),
                  "silu_mul backward: grad must be on the device of x");
  const std::vector<int64_t> expected = half_shape(x);
  STD_TORCH_CHECK(grad.dim() == x.dim(), "silu_mul backward: grad must have shape [..., d]");
  for (int64_t i = 0; i < grad.dim(); ++i) {
    STD_TORCH_CHECK(grad.size(i) == expected[static_cast<size_t>(i)],
                    "silu_mul backward: grad must have shape [..., d]");
  }
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor dx = llm_ops::empty_like(x);
  const int64_t rows = d == 0 ? 0 : x.numel() / (2 * d);
  const char* err = llm_ops::silu_mul::launch_backward(
      dtype_of(x), dx.mutable_data_ptr(), grad.const_data_ptr(), x.const_data_ptr(), rows, d,
      current_stream(x));
  STD_TORCH_CHECK(err == nullptr, "silu_mul backward: CUDA error: ", err);
  return dx;
}

}  // namespace

// `forward` gets its autograd formula in Python (torch.library.register_autograd);
// `forward_nograd` is the same function without one, for the eager calls that record no
// graph or record it through an autograd.Function (the dispatcher's C++ autograd fallback
// passes it straight to the kernel, with no round trip through Python).
KP_STABLE_LIBRARY(m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("forward_nograd(Tensor x) -> Tensor");
  m.def("backward(Tensor grad, Tensor x) -> Tensor grad_x");
}

KP_STABLE_LIBRARY_IMPL(CUDA, m) {
  m.impl("forward", TORCH_BOX(&forward));
  m.impl("forward_nograd", TORCH_BOX(&forward));
  m.impl("backward", TORCH_BOX(&backward));
}

// CPU tensors reach the same functions, whose first checks refuse them with the op's own
// message ("... must be a CUDA tensor") rather than the dispatcher's "Could not run".
KP_STABLE_LIBRARY_IMPL(CPU, m) {
  m.impl("forward", TORCH_BOX(&forward));
  m.impl("forward_nograd", TORCH_BOX(&forward));
  m.impl("backward", TORCH_BOX(&backward));
}
