// Helpers shared by the kernels' bindings: torch (stable ABI) tensors to launcher arguments.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cuda_runtime.h>

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

}  // namespace llm_ops
