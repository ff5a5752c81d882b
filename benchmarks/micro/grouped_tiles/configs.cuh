// Tile configurations moe_ops does not ship, for the grouped-GEMM tile experiment (main.cu):
// the same CUTLASS 3.x sm90 pointer-array kernels as grouped_gemm.cuh / grouped_gemm_fp8.cuh,
// other tile and cluster shapes. Each instantiation is its own translation unit (tile_*.cu).
// (The bf16 2x1 cluster of run 21 ships now: grouped_gemm.cuh's Cooperative2x1Config.)
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

// The shipped FP8 cooperative tile (128x128x128) with the cluster along M (B multicast).
struct Coop2x1 {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
};

}  // namespace moe_ops::fp8
