// One CUTLASS 3.x device-adapter GEMM run, shared by the bf16 and FP8 grouped GEMMs: the
// hardware info, then can_implement, initialize (CUTLASS's workspace given) and run on the
// stream. Returns nullptr, or CUTLASS's or CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include <cutlass/cutlass.h>

namespace moe_ops::groups {

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
