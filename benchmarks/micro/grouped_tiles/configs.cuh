// Tile configurations moe_ops does not ship, for the grouped-GEMM tile experiment (main.cu):
// the same CUTLASS 3.x sm90 pointer-array kernels as grouped_gemm.cuh / grouped_gemm_fp8.cuh,
// other tile and cluster shapes. Each instantiation is its own translation unit (tile_*.cu).
// (The bf16 2x1 cluster of run 21 ships now: grouped_gemm.cuh's Cooperative2x1Config.)
// (The FP8 128x128x128 tile in a 2x1 cluster lost on all six FP8 GEMMs in run 21 and was dropped.)
#pragma once

#include "grouped_gemm.cuh"
#include "grouped_gemm_fp8.cuh"

namespace moe_ops::gemm {

// 128x256x64 in a 2x2 cluster: both operands multicast.
struct Coop2x2 {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_2, _2, _1>;
};

// 256x128x64: each consumer warpgroup a 128x128 half along M.
struct Coop256x128c12 {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using TileShape = Shape<_256, _128, _64>;
  using ClusterShape = Shape<_1, _2, _1>;
};

struct Coop256x128c21 {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using TileShape = Shape<_256, _128, _64>;
  using ClusterShape = Shape<_2, _1, _1>;
};

}  // namespace moe_ops::gemm

namespace moe_ops::fp8 {

// The shipped FP8 tiles with the accumulators promoted into fp32 registers less often: every
// 8 or 16 wgmma k-blocks (256 or 512 of K) instead of every 4 (128 of K, one k-tile). Each
// promotion waits for every wgmma in flight; fewer waits, more of K summed at the tensor
// cores' accumulation precision.
template <uint32_t Interval>
struct CoopPromote : CooperativeTile {
  static constexpr uint32_t kPromotionInterval = Interval;
};

template <uint32_t Interval>
struct PongPromote : PingpongTile {
  static constexpr uint32_t kPromotionInterval = Interval;
};

// FP8FastAccum: the whole K summed in the tensor cores (torch's use_fast_accum=True, not its
// default), one set of accumulators, so a 128x256 tile fits. A ceiling, not a candidate for
// the op's default semantics.
struct CoopFast {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum;
  static constexpr uint32_t kPromotionInterval = 0;
};

struct Coop128x256Fast : CoopFast {
  using TileShape = Shape<_128, _256, _128>;
};

}  // namespace moe_ops::fp8
