// Helpers shared by the kernels' bindings: torch (stable ABI) tensors to launcher arguments.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "dtype.h"

namespace llm_ops {

// The launcher's DType of `t`; `op` names the op in the error for any other dtype.
inline DType dtype_of(const torch::stable::Tensor& t, const char* op) {
  using torch::headeronly::ScalarType;
  switch (t.scalar_type()) {
    case ScalarType::Float:
      return DType::kFloat32;
    case ScalarType::Half:
      return DType::kFloat16;
    case ScalarType::BFloat16:
      return DType::kBFloat16;
    default:
      STD_TORCH_CHECK(false, op, ": dtype must be float32, float16 or bfloat16");
  }
  return DType::kFloat32;
}

// torch's current CUDA stream on `t`'s device (kernels launched there are graph-capturable).
inline cudaStream_t current_stream(const torch::stable::Tensor& t) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream));
  return static_cast<cudaStream_t>(stream);
}

// A new contiguous tensor of `sizes` on `like`'s device, of `like`'s dtype or `dtype` (an
// aoti_torch_dtype_*() code), straight from torch's allocator through the C shim.
// torch::stable::empty_like / new_empty call the aten op by name (torch_call_dispatcher looks
// the schema up on every call): for a tiny input that was about 1 us per output.
inline torch::stable::Tensor empty(const torch::stable::Tensor& like,
                                   const std::vector<int64_t>& sizes, int32_t dtype = -1) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 0 ? sizes[i] : 1;
  }
  if (dtype < 0) {
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  }
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(
      static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), dtype,
      aoti_torch_device_type_cuda(), like.get_device_index(), &handle));
  return torch::stable::Tensor(handle);
}

// empty() with the shape (and dtype) of a contiguous `like`.
inline torch::stable::Tensor empty_like(const torch::stable::Tensor& like) {
  const auto sizes = like.sizes();
  return empty(like, std::vector<int64_t>(sizes.begin(), sizes.end()));
}

}  // namespace llm_ops
