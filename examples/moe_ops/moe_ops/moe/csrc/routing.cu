// The non-GEMM parts of the MoE forward: top-k routing with renormalised softmax weights,
// the counting sort of (token, slot) pairs into expert order with the gather of x, and the
// weighted combine. Plus the host-side dispatch of the grouped GEMM instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "moe.h"

namespace moe_ops {
namespace {

constexpr int kWarp = 32;

template <class T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

// One warp per token: the k largest logits (ties to the lower expert index), their softmax
// (= the full softmax renormalised over the k chosen), and the per-expert counts.
template <class T>
__global__ void route_kernel(const T* __restrict__ logits, int64_t tokens, int experts,
                             int top_k, int32_t* __restrict__ ids, float* __restrict__ weights,
                             int32_t* __restrict__ counts) {
  constexpr int kPerLane = kMaxExperts / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) +
                        threadIdx.x / kWarp;
  if (token >= tokens) {
    return;
  }
  const T* row = logits + token * experts;
  float v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * kWarp + lane;
    v[i] = e < experts ? to_float(row[e]) : 0.f;
  }
  uint32_t taken = 0;  // bit i: this lane's expert i * 32 + lane is chosen (or absent)
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (i * kWarp + lane >= experts) {
      taken |= 1u << i;
    }
  }
  float top_v[kMaxTopK];
  int top_e[kMaxTopK];
#pragma unroll
  for (int j = 0; j < kMaxTopK; ++j) {
    if (j >= top_k) {
      break;
    }
    float best = -INFINITY;
    int best_e = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = i * kWarp + lane;
      if (!((taken >> i) & 1u) && (v[i] > best || (v[i] == best && e < best_e))) {
        best = v[i];
        best_e = e;
      }
    }
#pragma unroll
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, off);
      if (ov > best || (ov == best && oe < best_e)) {
        best = ov;
        best_e = oe;
      }
    }
    top_v[j] = best;
    top_e[j] = best_e;
    if (best_e < experts && best_e % kWarp == lane) {
      taken |= 1u << (best_e / kWarp);
    }
  }
  if (lane == 0) {
    float sum = 0.f;
    for (int j = 0; j < top_k; ++j) {
      sum += __expf(top_v[j] - top_v[0]);
    }
    for (int j = 0; j < top_k; ++j) {
      const int e = top_e[j] < experts ? top_e[j] : 0;
      ids[token * top_k + j] = e;
      weights[token * top_k + j] = __expf(top_v[j] - top_v[0]) / sum;
      atomicAdd(&counts[e], 1);
    }
  }
}

// One block: exclusive scan of the counts into starts (the fill cursors) and ends (offsets).
__global__ void scan_kernel(int32_t* __restrict__ counts, int experts,
                            int32_t* __restrict__ offsets) {
  __shared__ int32_t partial[kMaxExperts];
  const int e = threadIdx.x;
  partial[e] = e < experts ? counts[e] : 0;
  __syncthreads();
  // Hillis-Steele inclusive scan (experts <= 1024).
  for (int off = 1; off < kMaxExperts; off *= 2) {
    const int32_t add = e >= off ? partial[e - off] : 0;
    __syncthreads();
    partial[e] += add;
    __syncthreads();
  }
  if (e < experts) {
    offsets[e] = partial[e];
    counts[experts + e] = partial[e] - counts[e];  // start: the cursor of the scatter
  }
}

// One block per token: claim a row in each chosen expert's block and copy x's row there.
__global__ void scatter_kernel(const int32_t* __restrict__ ids, int top_k, int experts,
                               int32_t* __restrict__ counts, int32_t* __restrict__ rows,
                               const uint4* __restrict__ x, uint4* __restrict__ x_sorted,
                               int64_t vectors_per_row) {
  __shared__ int32_t dest[kMaxTopK];
  const int64_t token = blockIdx.x;
  if (threadIdx.x < top_k) {
    const int e = ids[token * top_k + threadIdx.x];
    const int32_t row = atomicAdd(&counts[experts + e], 1);
    dest[threadIdx.x] = row;
    rows[token * top_k + threadIdx.x] = row;
  }
  __syncthreads();
  const uint4* src = x + token * vectors_per_row;
  for (int64_t i = threadIdx.x; i < vectors_per_row; i += blockDim.x) {
    const uint4 value = src[i];
    for (int j = 0; j < top_k; ++j) {
      x_sorted[static_cast<int64_t>(dest[j]) * vectors_per_row + i] = value;
    }
  }
}

// One block per token: 8 bf16 per thread per step, fp32 sums.
__global__ void combine_kernel(const uint4* __restrict__ y_sorted, const float* __restrict__ weights,
                               const int32_t* __restrict__ rows, uint4* __restrict__ out,
                               int top_k, int64_t vectors_per_row) {
  __shared__ int32_t src_row[kMaxTopK];
  __shared__ float w[kMaxTopK];
  const int64_t token = blockIdx.x;
  if (threadIdx.x < top_k) {
    src_row[threadIdx.x] = rows[token * top_k + threadIdx.x];
    w[threadIdx.x] = weights[token * top_k + threadIdx.x];
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < vectors_per_row; i += blockDim.x) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < top_k; ++j) {
      const uint4 v = y_sorted[static_cast<int64_t>(src_row[j]) * vectors_per_row + i];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        acc[2 * q] += w[j] * f.x;
        acc[2 * q + 1] += w[j] * f.y;
      }
    }
    uint4 r;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      o[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
    }
    out[token * vectors_per_row + i] = r;
  }
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

int threads_for(int64_t vectors_per_row) {
  return vectors_per_row >= 512 ? 256 : 128;
}

}  // namespace

const char* route_and_permute(const RouteArgs& a, cudaStream_t stream) {
  if (a.tokens == 0) {
    cudaMemsetAsync(a.offsets, 0, sizeof(int32_t) * a.experts, stream);
    return last_error();
  }
  if (cudaMemsetAsync(a.counts, 0, sizeof(int32_t) * a.experts, stream) != cudaSuccess) {
    return last_error();
  }
  constexpr int kTokensPerBlock = 4;
  const int blocks = static_cast<int>((a.tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  const int experts = static_cast<int>(a.experts);
  // `rows` holds the expert ids until the scatter replaces them with the permuted rows.
  int32_t* ids = a.rows;
  switch (a.logit_type) {
    case LogitType::kFloat32:
      route_kernel<float><<<blocks, kTokensPerBlock * kWarp, 0, stream>>>(
          static_cast<const float*>(a.logits), a.tokens, experts, a.top_k, ids, a.weights,
          a.counts);
      break;
    case LogitType::kBFloat16:
      route_kernel<__nv_bfloat16><<<blocks, kTokensPerBlock * kWarp, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(a.logits), a.tokens, experts, a.top_k, ids,
          a.weights, a.counts);
      break;
    case LogitType::kFloat16:
      route_kernel<__half><<<blocks, kTokensPerBlock * kWarp, 0, stream>>>(
          static_cast<const __half*>(a.logits), a.tokens, experts, a.top_k, ids, a.weights,
          a.counts);
      break;
  }
  if (const char* err = last_error()) {
    return err;
  }
  scan_kernel<<<1, kMaxExperts, 0, stream>>>(a.counts, experts, a.offsets);
  if (const char* err = last_error()) {
    return err;
  }
  const int64_t vectors = a.hidden / 8;
  scatter_kernel<<<static_cast<unsigned>(a.tokens), threads_for(vectors), 0, stream>>>(
      ids, a.top_k, experts, a.counts, a.rows, static_cast<const uint4*>(a.x),
      static_cast<uint4*>(a.x_sorted), vectors);
  return last_error();
}

const char* combine(const void* y_sorted, const float* weights, const int32_t* rows, void* out,
                    int64_t tokens, int64_t hidden, int top_k, cudaStream_t stream) {
  if (tokens == 0) {
    return nullptr;
  }
  const int64_t vectors = hidden / 8;
  combine_kernel<<<static_cast<unsigned>(tokens), threads_for(vectors), 0, stream>>>(
      static_cast<const uint4*>(y_sorted), weights, rows, static_cast<uint4*>(out), top_k,
      vectors);
  return last_error();
}

namespace {

using WorkspaceFn = size_t (*)(int64_t, int);
using RunFn = const char* (*)(const GroupedGemmArgs&, void*, size_t, int, cudaStream_t);

struct Instantiation {
  WorkspaceFn workspace;
  RunFn run;
};

Instantiation pick(const GroupedGemmArgs& args, GemmConfig resolved) {
  // [config][silu_mul][b_k_major]
  static constexpr Instantiation table[3][2][2] = {
      {{{gemm_coop_rowb_workspace_size, gemm_coop_rowb_run},
        {gemm_coop_colb_workspace_size, gemm_coop_colb_run}},
       {{gemm_silu_coop_rowb_workspace_size, gemm_silu_coop_rowb_run},
        {gemm_silu_coop_colb_workspace_size, gemm_silu_coop_colb_run}}},
      {{{gemm_small_rowb_workspace_size, gemm_small_rowb_run},
        {gemm_small_colb_workspace_size, gemm_small_colb_run}},
       {{gemm_silu_small_rowb_workspace_size, gemm_silu_small_rowb_run},
        {gemm_silu_small_colb_workspace_size, gemm_silu_small_colb_run}}},
      {{{gemm_coop21_rowb_workspace_size, gemm_coop21_rowb_run},
        {gemm_coop21_colb_workspace_size, gemm_coop21_colb_run}},
       {{gemm_silu_coop21_rowb_workspace_size, gemm_silu_coop21_rowb_run},
        {gemm_silu_coop21_colb_workspace_size, gemm_silu_coop21_colb_run}}},
  };
  // The table's row of each configuration; kGemv runs in the small-tile instantiations
  // (after their setup kernel).
  int config = 0;
  switch (resolved) {
    case GemmConfig::kSmall:
    case GemmConfig::kGemv:
      config = 1;
      break;
    case GemmConfig::kCooperative2x1:
      config = 2;
      break;
    default:  // kCooperative (kAuto never reaches here: gemm_config_for resolves it)
      config = 0;
      break;
  }
  return table[config][args.silu_mul ? 1 : 0][args.b_k_major ? 1 : 0];
}

}  // namespace

size_t grouped_gemm_workspace_size(const GroupedGemmArgs& args, int sm_count) {
  return pick(args, gemm_config_for(args, sm_count)).workspace(args.groups, sm_count);
}

const char* grouped_gemm(const GroupedGemmArgs& args, void* workspace, size_t workspace_bytes,
                         int sm_count, cudaStream_t stream) {
  // The instantiation sees the configuration chosen, not kAuto.
  const GemmConfig config = gemm_config_for(args, sm_count);
  GroupedGemmArgs resolved = args;
  resolved.config = static_cast<int>(config);
  return pick(args, config).run(resolved, workspace, workspace_bytes, sm_count, stream);
}

}  // namespace moe_ops
