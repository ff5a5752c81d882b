#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>
#include <kernelpack/ops.h>
#include <torch/library.h>

void addone_launch(const float* x, float* out, int64_t n, cudaStream_t stream);

namespace {
at::Tensor addone(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "addone: expected a contiguous float32 CUDA tensor");
  at::Tensor out = at::empty_like(x);
  addone_launch(x.const_data_ptr<float>(), out.mutable_data_ptr<float>(), x.numel(),
                c10::cuda::getCurrentCUDAStream());
  return out;
}
}  // namespace

KP_LIBRARY(m) { m.def("addone(Tensor x) -> Tensor"); }

KP_LIBRARY_IMPL(CUDA, m) { m.impl("addone", &addone); }
