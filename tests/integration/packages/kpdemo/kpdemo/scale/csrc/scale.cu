#include <cuda_runtime.h>
#include <kernelpack/ops.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "scale.h"

namespace {

__global__ void scale_kernel(const float* x, float* out, float factor, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * factor;
}

torch::stable::Tensor scale(torch::stable::Tensor x, double factor) {
  torch::stable::Tensor out = torch::stable::empty_like(x);
  int64_t n = x.numel();
  void* stream = nullptr;
  aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream);
  int blocks = static_cast<int>((n + SCALE_THREADS - 1) / SCALE_THREADS);
  if (n > 0) {
    scale_kernel<<<blocks, SCALE_THREADS, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(x.data_ptr()), static_cast<float*>(out.data_ptr()),
        static_cast<float>(factor), n);
  }
  return out;
}

}  // namespace

KP_STABLE_LIBRARY(m) { m.def("scale(Tensor x, float factor) -> Tensor"); }

KP_STABLE_LIBRARY_IMPL(CUDA, m) { m.impl("scale", TORCH_BOX(&scale)); }
