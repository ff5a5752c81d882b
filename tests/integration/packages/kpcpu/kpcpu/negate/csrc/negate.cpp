// A CPU op through the LibTorch stable ABI: x = -x in place.
#include <kernelpack/ops.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>

namespace {

void negate_(torch::stable::Tensor x) {
  STD_TORCH_CHECK(x.scalar_type() == torch::headeronly::ScalarType::Float,
                  "negate_: x must be float32");
  STD_TORCH_CHECK(x.is_contiguous(), "negate_: x must be contiguous");
  float* data = static_cast<float*>(x.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) data[i] = -data[i];
}

}  // namespace

KP_STABLE_LIBRARY(m) { m.def("negate_(Tensor(a!) x) -> ()"); }

KP_STABLE_LIBRARY_IMPL(CPU, m) { m.impl("negate_", TORCH_BOX(&negate_)); }
