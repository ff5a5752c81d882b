// From int32 offsets to per-group row ranges, on the device: the setup step every grouped GEMM
// of moe_ops (bf16 and FP8) runs before CUTLASS. Each op supplies a `Describe` functor,
//   __device__ void operator()(int64_t g, int64_t start, int64_t end) const,
// that writes the pointers, strides, scale pointers and problem shape of group g, rows
// [start, end) of A and D (0 <= start <= end <= m_total); these kernels decide the ranges.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>
#include <cuda/atomic>
#include <cuda/functional>

#include "moe.h"

namespace moe_ops::groups {

// Offsets valid by construction (moe_forward's scan): one thread per group. The clamp into
// [0, m_total] costs nothing and keeps every access in bounds should they ever not be.
template <class Describe>
__global__ void setup_groups(const int32_t* __restrict__ offsets, int64_t groups,
                             int64_t m_total, Describe describe) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) {
    return;
  }
  const int64_t prev = g == 0 ? 0 : static_cast<int64_t>(offsets[g - 1]);
  const int64_t start = prev < 0 ? 0 : (prev > m_total ? m_total : prev);
  int64_t end = static_cast<int64_t>(offsets[g]);
  end = end < start ? start : (end > m_total ? m_total : end);
  describe(g, start, end);
}

constexpr int kCheckedSetupThreads = 1024;

// Sets word `kind` of an op's kOffsetsErrorKinds words.
__device__ __forceinline__ void report(int32_t* errors, OffsetsError kind) {
  // Mapped host memory: a system-scope store, which the host reads without a sync.
  cuda::atomic_ref<int32_t, cuda::thread_scope_system>(errors[static_cast<int>(kind)])
      .store(1, cuda::std::memory_order_relaxed);
}

// Offsets from the caller, which nothing on the host has looked at: one block walks the
// groups in chunks, a prefix max over the offsets makes the groups non-decreasing and
// disjoint whatever they hold (group g: rows [c(g-1), c(g)), c(g) = min(max(0, offsets[0..g]),
// m_total)), and whatever is invalid is reported in `errors` (the op's kOffsetsErrorKinds
// words).
template <class Describe>
__global__ void __launch_bounds__(kCheckedSetupThreads)
    setup_groups_checked(const int32_t* __restrict__ offsets, int64_t groups, int64_t m_total,
                         int32_t* errors, Describe describe) {
  using Scan = cub::BlockScan<int32_t, kCheckedSetupThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  int32_t carry = 0;  // max(0, offsets of the chunks before this one)
  for (int64_t first = 0; first < groups; first += kCheckedSetupThreads) {
    const int64_t g = first + threadIdx.x;
    const bool mine = g < groups;
    const int32_t offset = mine ? offsets[g] : INT32_MIN;
    int32_t before = 0;  // max(0, offsets[0..g-1])
    int32_t chunk_max = 0;
    Scan(scan_storage).ExclusiveScan(offset, before, carry, cuda::maximum<>{}, chunk_max);
    __syncthreads();  // scan_storage is reused by the next chunk
    carry = chunk_max > carry ? chunk_max : carry;
    if (!mine) {
      continue;
    }
    const int64_t start = before < m_total ? before : m_total;
    const int64_t last = offset > before ? offset : before;
    describe(g, start, last < m_total ? last : m_total);
    if (offset < 0) {
      report(errors, OffsetsError::kNegative);
    }
    if (offset > m_total) {
      report(errors, OffsetsError::kPastEnd);
    }
    if (g > 0 && offset < offsets[g - 1]) {
      report(errors, OffsetsError::kDecreasing);
    }
  }
}

// Launches the setup on `stream`: the checked kernel when `errors` (the op's words) is given,
// else the one-thread-per-group kernel.
template <class Describe>
cudaError_t launch_setup(const int32_t* offsets, int64_t groups, int64_t m_total,
                         int32_t* errors, const Describe& describe, cudaStream_t stream) {
  if (errors == nullptr) {
    constexpr int kThreads = 128;
    const int blocks = static_cast<int>((groups + kThreads - 1) / kThreads);
    setup_groups<Describe><<<blocks, kThreads, 0, stream>>>(offsets, groups, m_total, describe);
  } else {
    setup_groups_checked<Describe>
        <<<1, kCheckedSetupThreads, 0, stream>>>(offsets, groups, m_total, errors, describe);
  }
  return cudaGetLastError();
}

}  // namespace moe_ops::groups
