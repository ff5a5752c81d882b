// What the bf16 and FP8 grouped GEMMs share around CUTLASS 3.x's device adapter: carving the
// per-group device arrays out of the front of one workspace (Carver), the workspace size (the
// arrays, then CUTLASS's own, 128-byte aligned), and one run (hardware info, can_implement,
// initialize, run on the stream).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <cutlass/cutlass.h>
#include <cutlass/gemm/gemm.h>

namespace moe_ops::groups {

// Takes arrays from the front of `base`, each rounded up to 16 bytes; with base == nullptr it
// only counts (`used`), so an Arrays type's size is its carve of nothing.
struct Carver {
  char* base;
  size_t used = 0;
  template <class T>
  T* take(int64_t count) {
    T* r = base == nullptr ? nullptr : reinterpret_cast<T*>(base + used);
    used += (static_cast<size_t>(count) * sizeof(T) + 15) / 16 * 16;
    return r;
  }
};

// CUTLASS's workspace follows the arrays, aligned to this.
constexpr size_t kAdapterAlign = 128;

// The whole workspace of one launch over `groups` groups: the arrays (`arrays_bytes`), the
// alignment slack, and what the adapter asks for.
template <class Adapter>
size_t workspace_size(size_t arrays_bytes, int64_t groups, int sm_count) {
  typename Adapter::Arguments arguments{};
  arguments.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  arguments.problem_shape = {static_cast<int>(groups), nullptr, nullptr};
  arguments.hw_info.sm_count = sm_count;
  return arrays_bytes + kAdapterAlign + Adapter::get_workspace_size(arguments);
}

// CUTLASS's part of a workspace whose first `arrays_bytes` hold the arrays.
inline void* adapter_workspace(void* workspace, size_t arrays_bytes) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(workspace) + arrays_bytes;
  return reinterpret_cast<void*>((base + kAdapterAlign - 1) / kAdapterAlign * kAdapterAlign);
}

// Runs one grouped GEMM; nullptr, or CUTLASS's or CUDA's message.
template <class Adapter>
const char* run_adapter(typename Adapter::Arguments& arguments, void* cutlass_workspace,
                        int sm_count, cudaStream_t stream) {
  int device = 0;
  cudaGetDevice(&device);
  arguments.hw_info.device_id = device;
  arguments.hw_info.sm_count = sm_count;
  Adapter gemm;
  cutlass::Status status = gemm.can_implement(arguments);
  if (status == cutlass::Status::kSuccess) {
    status = gemm.initialize(arguments, cutlass_workspace, stream);
  }
  if (status == cutlass::Status::kSuccess) {
    status = gemm.run(stream);
  }
  if (status != cutlass::Status::kSuccess) {
    return cutlassGetStatusString(status);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace moe_ops::groups
