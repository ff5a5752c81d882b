// torch ops for RMSNorm, through the LibTorch stable ABI (no C++ torch symbol is linked).
#include <kernelpack/ops.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "rmsnorm.h"
#include "stable_util.h"

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using llm_ops::current_stream;
using llm_ops::rmsnorm::DType;

DType dtype_of(const Tensor& t) { return llm_ops::dtype_of(t, "rmsnorm"); }

// The input's shape without its last dimension: the shape of rstd.
std::vector<int64_t> row_shape(const Tensor& x) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) {
    shape.push_back(x.size(d));
  }
  return shape;
}

void check_row_input(const Tensor& t, const Tensor& x, const char* name) {
  STD_TORCH_CHECK(t.is_cuda(), "rmsnorm: ", name, " must be a CUDA tensor");
  STD_TORCH_CHECK(t.is_contiguous(), "rmsnorm: ", name, " must be contiguous");
  STD_TORCH_CHECK(t.scalar_type() == x.scalar_type(), "rmsnorm: ", name,
                  " must have the dtype of x");
  STD_TORCH_CHECK(t.get_device_index() == x.get_device_index(), "rmsnorm: ", name,
                  " must be on the device of x");
}

// Checks shared by forward and backward; returns the hidden size.
int64_t check_inputs(const Tensor& x, const Tensor& w) {
  STD_TORCH_CHECK(x.dim() >= 1, "rmsnorm: x must have at least one dimension");
  check_row_input(x, x, "x");
  dtype_of(x);
  const int64_t hidden = x.size(x.dim() - 1);
  STD_TORCH_CHECK(hidden >= 1 && hidden <= llm_ops::rmsnorm::kMaxHidden,
                  "rmsnorm: hidden size must be in [1, ", llm_ops::rmsnorm::kMaxHidden,
                  "], got ", hidden);
  check_row_input(w, x, "weight");
  STD_TORCH_CHECK(w.dim() == 1 && w.size(0) == hidden,
                  "rmsnorm: weight must have shape [hidden] = [", hidden, "]");
  return hidden;
}

void check_same_shape(const Tensor& t, const Tensor& x, const char* name) {
  STD_TORCH_CHECK(t.dim() == x.dim(), "rmsnorm: ", name, " must have the shape of x");
  for (int64_t d = 0; d < x.dim(); ++d) {
    STD_TORCH_CHECK(t.size(d) == x.size(d), "rmsnorm: ", name, " must have the shape of x");
  }
}

// rstd is allocated and written only when `with_rstd` (what the backward needs).
std::tuple<Tensor, Tensor, Tensor> forward_impl(const Tensor& x,
                                                const std::optional<Tensor>& residual,
                                                const Tensor& w, double eps,
                                                bool with_rstd = true) {
  const int64_t hidden = check_inputs(x, w);
  if (residual.has_value()) {
    check_row_input(*residual, x, "residual");
    check_same_shape(*residual, x, "residual");
  }
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor y = llm_ops::empty_like(x);
  Tensor h = residual.has_value() ? llm_ops::empty_like(x) : Tensor();
  Tensor rstd =
      with_rstd ? llm_ops::empty(x, row_shape(x), aoti_torch_dtype_float32()) : Tensor();
  llm_ops::rmsnorm::ForwardArgs args{
      dtype_of(x),
      y.mutable_data_ptr(),
      residual.has_value() ? h.mutable_data_ptr() : nullptr,
      with_rstd ? static_cast<float*>(rstd.mutable_data_ptr()) : nullptr,
      x.const_data_ptr(),
      residual.has_value() ? residual->const_data_ptr() : nullptr,
      w.const_data_ptr(),
      x.numel() / hidden,
      hidden,
      static_cast<float>(eps)};
  const char* err = llm_ops::rmsnorm::launch_forward(args, current_stream(x));
  STD_TORCH_CHECK(err == nullptr, "rmsnorm forward: CUDA error: ", err);
  return {y, h, rstd};
}

std::tuple<Tensor, Tensor> forward(Tensor x, Tensor weight, double eps) {
  auto [y, h, rstd] = forward_impl(x, std::nullopt, weight, eps);
  return {y, rstd};
}

std::tuple<Tensor, Tensor, Tensor> forward_residual(Tensor x, Tensor residual, Tensor weight,
                                                    double eps) {
  return forward_impl(x, residual, weight, eps);
}

// Inference: y (and the new residual) only, no rstd.
Tensor infer(Tensor x, Tensor weight, double eps) {
  return std::get<0>(forward_impl(x, std::nullopt, weight, eps, false));
}

std::tuple<Tensor, Tensor> infer_residual(Tensor x, Tensor residual, Tensor weight, double eps) {
  auto [y, h, rstd] = forward_impl(x, residual, weight, eps, false);
  return {y, h};
}

std::tuple<Tensor, Tensor> backward(Tensor dy, Tensor x, Tensor weight, Tensor rstd,
                                    std::optional<Tensor> dresidual) {
  const int64_t hidden = check_inputs(x, weight);
  check_row_input(dy, x, "grad");
  check_same_shape(dy, x, "grad");
  if (dresidual.has_value()) {
    check_row_input(*dresidual, x, "residual grad");
    check_same_shape(*dresidual, x, "residual grad");
  }
  const int64_t rows = x.numel() / hidden;
  STD_TORCH_CHECK(rstd.scalar_type() == ScalarType::Float && rstd.is_contiguous() &&
                      rstd.numel() == rows,
                  "rmsnorm backward: rstd must be a contiguous float32 tensor of ", rows,
                  " elements");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  Tensor dx = llm_ops::empty_like(x);
  Tensor dw = llm_ops::empty_like(weight);
  llm_ops::rmsnorm::BackwardArgs args{
      dtype_of(x),
      dx.mutable_data_ptr(),
      dw.mutable_data_ptr(),
      dy.const_data_ptr(),
      x.const_data_ptr(),
      weight.const_data_ptr(),
      static_cast<const float*>(rstd.const_data_ptr()),
      dresidual.has_value() ? dresidual->const_data_ptr() : nullptr,
      rows,
      hidden};
  const int partials = llm_ops::rmsnorm::backward_partials(args);
  // One partial (a grid of one CTA) is dw itself: no workspace.
  Tensor workspace = partials > 1
                         ? llm_ops::empty(x, {partials, hidden}, aoti_torch_dtype_float32())
                         : Tensor();
  const char* err = llm_ops::rmsnorm::launch_backward(
      args, partials > 1 ? static_cast<float*>(workspace.mutable_data_ptr()) : nullptr,
      partials, current_stream(x));
  STD_TORCH_CHECK(err == nullptr, "rmsnorm backward: CUDA error: ", err);
  return {dx, dw};
}

}  // namespace

// `forward` and `forward_residual` get their autograd formula in Python
// (torch.library.register_autograd). The others have none, so the dispatcher's own C++
// autograd fallback passes them straight to the kernel, where a Python autograd kernel would
// be a round trip through Python on every call: `*_nograd` (the same outputs) for the eager
// graph-recording autograd.Function, `infer*` (no rstd: one allocation and one returned
// tensor fewer) for the eager calls that record nothing (llm_ops/_dispatch.py).
KP_STABLE_LIBRARY(m) {
  m.def("forward(Tensor x, Tensor weight, float eps) -> (Tensor y, Tensor rstd)");
  m.def(
      "forward_residual(Tensor x, Tensor residual, Tensor weight, float eps)"
      " -> (Tensor y, Tensor new_residual, Tensor rstd)");
  m.def("forward_nograd(Tensor x, Tensor weight, float eps) -> (Tensor y, Tensor rstd)");
  m.def(
      "forward_residual_nograd(Tensor x, Tensor residual, Tensor weight, float eps)"
      " -> (Tensor y, Tensor new_residual, Tensor rstd)");
  m.def("infer(Tensor x, Tensor weight, float eps) -> Tensor y");
  m.def(
      "infer_residual(Tensor x, Tensor residual, Tensor weight, float eps)"
      " -> (Tensor y, Tensor new_residual)");
  m.def(
      "backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd, Tensor? residual_grad)"
      " -> (Tensor grad_x, Tensor grad_weight)");
}

KP_STABLE_LIBRARY_IMPL(CUDA, m) {
  m.impl("forward", TORCH_BOX(&forward));
  m.impl("forward_residual", TORCH_BOX(&forward_residual));
  m.impl("forward_nograd", TORCH_BOX(&forward));
  m.impl("forward_residual_nograd", TORCH_BOX(&forward_residual));
  m.impl("infer", TORCH_BOX(&infer));
  m.impl("infer_residual", TORCH_BOX(&infer_residual));
  m.impl("backward", TORCH_BOX(&backward));
}

// CPU tensors reach the same functions, whose first checks refuse them with the op's own
// message ("... must be a CUDA tensor") rather than the dispatcher's "Could not run".
KP_STABLE_LIBRARY_IMPL(CPU, m) {
  m.impl("forward", TORCH_BOX(&forward));
  m.impl("forward_residual", TORCH_BOX(&forward_residual));
  m.impl("forward_nograd", TORCH_BOX(&forward));
  m.impl("forward_residual_nograd", TORCH_BOX(&forward_residual));
  m.impl("infer", TORCH_BOX(&infer));
  m.impl("infer_residual", TORCH_BOX(&infer_residual));
  m.impl("backward", TORCH_BOX(&backward));
}
