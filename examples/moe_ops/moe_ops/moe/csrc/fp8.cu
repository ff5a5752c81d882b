// The FP8 parts of moe_ops outside CUTLASS: the e4m3 quantisation of activations (per row or
// per 1x128 block, optionally of silu(gate) * up) and the dispatch of the FP8 grouped GEMM
// instantiations (gemm_fp8_*.cu).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "moe.h"

namespace moe_ops {
namespace {

constexpr int kWarp = 32;
constexpr int kQuantThreads = 256;
constexpr float kE4m3Max = 448.0f;

// Element i of the row to quantise: x, or silu(gate) * up with up `cols` further on.
template <bool SiluMul>
__device__ __forceinline__ float value(const __nv_bfloat16* __restrict__ row, int64_t i,
                                       int64_t cols) {
  const float x = __bfloat162float(row[i]);
  if constexpr (SiluMul) {
    return x / (1.0f + __expf(-x)) * __bfloat162float(row[cols + i]);
  } else {
    return x;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
}

// scale = amax / 448 (1 for an all-zero block, whose values quantise to 0 either way).
__device__ __forceinline__ float scale_for(float amax) {
  return amax > 0.0f ? amax / kE4m3Max : 1.0f;
}

__device__ __forceinline__ __nv_fp8_storage_t to_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// One block per row, one scale for the whole row.
template <bool SiluMul>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows(const __nv_bfloat16* __restrict__ src, __nv_fp8_storage_t* __restrict__ dst,
                  float* __restrict__ scale, int64_t cols) {
  __shared__ float partial[kQuantThreads / kWarp];
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = src + r * cols * (SiluMul ? 2 : 1);
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kQuantThreads) {
    amax = fmaxf(amax, fabsf(value<SiluMul>(row, i, cols)));
  }
  amax = warp_max(amax);
  if (threadIdx.x % kWarp == 0) {
    partial[threadIdx.x / kWarp] = amax;
  }
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kQuantThreads / kWarp; ++w) {
    amax = fmaxf(amax, partial[w]);
  }
  const float s = scale_for(amax);
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < cols; i += kQuantThreads) {
    dst[r * cols + i] = to_e4m3(value<SiluMul>(row, i, cols) * inv);
  }
  if (threadIdx.x == 0) {
    scale[r] = s;
  }
}

// One block per row, one warp per 128-column block (4 values a lane), one scale per block.
template <bool SiluMul>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_blocks(const __nv_bfloat16* __restrict__ src, __nv_fp8_storage_t* __restrict__ dst,
                    float* __restrict__ scale, int64_t cols) {
  constexpr int kPerLane = static_cast<int>(kFp8Block) / kWarp;
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = src + r * cols * (SiluMul ? 2 : 1);
  const int lane = threadIdx.x % kWarp;
  const int64_t blocks = cols / kFp8Block;
  for (int64_t b = threadIdx.x / kWarp; b < blocks; b += kQuantThreads / kWarp) {
    float v[kPerLane];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      v[j] = value<SiluMul>(row, b * kFp8Block + lane * kPerLane + j, cols);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    const float s = scale_for(warp_max(amax));
    const float inv = 1.0f / s;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      dst[r * cols + b * kFp8Block + lane * kPerLane + j] = to_e4m3(v[j] * inv);
    }
    if (lane == 0) {
      scale[r * blocks + b] = s;
    }
  }
}

template <bool SiluMul>
void launch_quantize(const QuantizeArgs& a, cudaStream_t stream) {
  const auto* src = static_cast<const __nv_bfloat16*>(a.src);
  auto* dst = static_cast<__nv_fp8_storage_t*>(a.dst);
  const unsigned rows = static_cast<unsigned>(a.rows);
  if (a.scaling == Fp8Scaling::kBlockwise) {
    quantize_blocks<SiluMul><<<rows, kQuantThreads, 0, stream>>>(src, dst, a.scale, a.cols);
  } else {
    quantize_rows<SiluMul><<<rows, kQuantThreads, 0, stream>>>(src, dst, a.scale, a.cols);
  }
}

using WorkspaceFn = size_t (*)(int64_t, int);
using RunFn = const char* (*)(const Fp8GemmArgs&, void*, size_t, int, cudaStream_t);

struct Instantiation {
  WorkspaceFn workspace;
  RunFn run;
};

Instantiation pick(const Fp8GemmArgs& args, int sm_count) {
  if (args.scaling == Fp8Scaling::kBlockwise) {
    return Instantiation{gemm_fp8_blockwise_workspace_size, gemm_fp8_blockwise_run};
  }
  return fp8_config_for(args, sm_count) == Fp8Config::kPingpong
             ? Instantiation{gemm_fp8_rowwise_pong_workspace_size, gemm_fp8_rowwise_pong_run}
             : Instantiation{gemm_fp8_rowwise_workspace_size, gemm_fp8_rowwise_run};
}

}  // namespace

Fp8Config fp8_config_for(const Fp8GemmArgs& args, int /*sm_count*/) {
  if (args.config == static_cast<int>(Fp8Config::kCooperative) ||
      args.config == static_cast<int>(Fp8Config::kPingpong)) {
    return static_cast<Fp8Config>(args.config);
  }
  // Many experts of at most 64 rows each on average (fine-grained MoE layers): a 128-row
  // tile would compute as many padding rows as real ones. With few experts (Llama-4's 16 at
  // 1k tokens) the cooperative tile stayed faster (docs/moe_ops.md, H100 runs 9 and 10).
  return args.groups >= kFp8PingpongMinGroups &&
                 args.m_total <= args.groups * kFp8PingpongRowsPerGroup
             ? Fp8Config::kPingpong
             : Fp8Config::kCooperative;
}

const char* quantize_fp8(const QuantizeArgs& args, cudaStream_t stream) {
  if (args.rows == 0 || args.cols == 0) {
    return nullptr;
  }
  if (args.scaling == Fp8Scaling::kBlockwise && args.cols % kFp8Block != 0) {
    return "quantize_fp8: columns must be a multiple of 128 for block scales";
  }
  if (args.silu_mul) {
    launch_quantize<true>(args, stream);
  } else {
    launch_quantize<false>(args, stream);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

size_t grouped_gemm_fp8_workspace_size(const Fp8GemmArgs& args, int sm_count) {
  return pick(args, sm_count).workspace(args.groups, sm_count);
}

const char* grouped_gemm_fp8(const Fp8GemmArgs& args, void* workspace, size_t workspace_bytes,
                             int sm_count, cudaStream_t stream) {
  return pick(args, sm_count).run(args, workspace, workspace_bytes, sm_count, stream);
}

}  // namespace moe_ops
