// A stable-ABI kernel whose only job is to refuse: its messages format numbers (the part a
// second libstdc++ in the process breaks), and it has a Meta kernel for fake tensors.
#include <kernelpack/ops.h>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

void check_inputs(const Tensor& x, int64_t top_k) {
  STD_TORCH_CHECK(x.scalar_type() == ScalarType::Float, "refuse: x must be float32, got dtype ",
                  static_cast<int>(x.scalar_type()));
  STD_TORCH_CHECK(top_k >= 1 && top_k <= 8, "refuse: top_k must be in [1, 8], got ", top_k);
}

Tensor check_cpu(Tensor x, int64_t top_k) {
  check_inputs(x, top_k);
  Tensor out = torch::stable::empty_like(x);
  const float* in = static_cast<const float*>(x.const_data_ptr());
  float* o = static_cast<float*>(out.mutable_data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) {
    o[i] = 2.0f * in[i];
  }
  return out;
}

Tensor check_meta(Tensor x, int64_t top_k) {
  check_inputs(x, top_k);
  return torch::stable::empty_like(x);
}

}  // namespace

KP_STABLE_LIBRARY(m) { m.def("check(Tensor x, int top_k) -> Tensor"); }

KP_STABLE_LIBRARY_IMPL(CPU, m) { m.impl("check", TORCH_BOX(&check_cpu)); }

KP_STABLE_LIBRARY_IMPL(Meta, m) { m.impl("check", TORCH_BOX(&check_meta)); }
