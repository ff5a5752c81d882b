// The FP8 (e4m3) CUTLASS 3.x sm90 pointer-array grouped GEMMs behind grouped_mm_fp8: bf16
// out, fp32 accumulation, B K-major, in two tile configurations (moe.h's Fp8Config):
//
//   Cooperative  128x128x128, cluster 1x2, both consumer warpgroups on one tile;
//   Pingpong     64x128x128, cluster 1x2, the consumer warpgroups on alternate tiles (one's
//                epilogue overlapping the other's main loop): for groups of 64 rows or fewer,
//                which fill only half of a 128-row tile.
//
// Both keep the FP8 main loop that promotes the wgmma accumulators into fp32 registers every
// 4 k-blocks (not the FP8FastAccum one), which bounds the tile: a warpgroup holds its
// accumulators twice, so 64x128 a warpgroup is as large as fits.
//
//   Fp8Scaling::kRowwise    an epilogue visitor tree: D = bf16(w_scale[col] * (x_scale[row] *
//                           acc)), both scales broadcast from per-group pointers
//                           (Sm90RowBroadcast / Sm90ColBroadcast over arrays of pointers).
//   Fp8Scaling::kBlockwise  ...FP8Blockwise: the main loop scales each 128-deep K block's
//                           partial sums by x_scale[row, kb] * w_scale[g, col / 128, kb]
//                           (K-major scale layouts, granularity 1 x 128 x 128), plain bf16
//                           TMA-store epilogue; cooperative only.
//
// As in grouped_gemm.cuh, everything per group (pointers, strides, shapes, scale pointers and
// scale layouts) is written on the device by group_offsets.cuh's setup kernels from the int32
// offsets: no host sync. Include from exactly one translation unit per instantiation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "cutlass_adapter.cuh"
#include "group_offsets.cuh"
#include "moe.h"

namespace moe_ops::fp8 {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // <M,N,K>
using ElementAB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using Accumulator = float;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;  // B[g] k x n stored n x k (K-major)
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16 / sizeof(ElementAB);
constexpr int kAlignD = 16 / sizeof(ElementD);
static_assert(kAlignAB == moe_ops::kFp8Alignment, "moe.h's FP8 alignment must match the TMA's");

struct CooperativeTile {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  // The main loop's mma_promotion_interval: wgmma k-blocks (32 deep in e4m3) accumulated in
  // the tensor cores before they are added into the fp32 registers; 4 is one 128-deep k-tile,
  // CUTLASS's default. 0 for a tile whose schedule has no promotion (FP8FastAccum).
  static constexpr uint32_t kPromotionInterval = 4;
};

struct PingpongTile {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  static constexpr uint32_t kPromotionInterval = 4;
};

constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

template <class Tile, class Epilogue, class LayoutAOrPair, class LayoutBOrPair,
          class KernelSchedule>
using MainloopFor = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutAOrPair, kAlignAB,
    ElementAB, LayoutBOrPair, kAlignAB, Accumulator, typename Tile::TileShape,
    typename Tile::ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

template <class Tile, class Fusion>
using EpilogueFor = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Tile::TileShape,
    typename Tile::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, Accumulator,
    Accumulator, void, LayoutD*, kAlignD, ElementD, LayoutD*, kAlignD,
    typename Tile::EpilogueSchedule, Fusion>::CollectiveOp;

// Row-wise scales in the epilogue.
template <class Tile>
struct Rowwise {
  static constexpr bool kBlockwise = false;
  static constexpr uint32_t kPromotionInterval = Tile::kPromotionInterval;
  using TileShape = typename Tile::TileShape;
  // x_scale: one value per row of the group's D (column vector, M-indexed); 4-byte aligned
  // per group (rows start anywhere), so scalar loads.
  using XScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float,
                                                             Stride<_1, _0, _0>, 1>;
  // w_scale[g]: one value per column (row vector, N-indexed), 16-byte aligned (N % 16 == 0).
  using WScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float,
                                                             Stride<_0, _1, _0>, 4>;
  using RowScaled = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, XScale,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>,
      WScale, RowScaled>;
  using CollectiveEpilogue = EpilogueFor<Tile, Fusion>;
  using CollectiveMainloop = MainloopFor<Tile, CollectiveEpilogue, LayoutA*, LayoutB*,
                                         typename Tile::KernelSchedule>;
  using LayoutSFA = char;  // unused
  using LayoutSFB = char;
};

// DeepSeek-style blocks in the main loop.
struct Blockwise {
  static constexpr bool kBlockwise = true;
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, moe_ops::kFp8Block, moe_ops::kFp8Block,
                                                cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using CollectiveEpilogue = EpilogueFor<
      CooperativeTile, cutlass::epilogue::fusion::LinearCombination<ElementD, Accumulator, void>>;
  using CollectiveMainloop =
      MainloopFor<CooperativeTile, CollectiveEpilogue, cute::tuple<LayoutA*, LayoutSFA*>,
                  cute::tuple<LayoutB*, LayoutSFB*>,
                  cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>;
};

template <class Scaling>
struct Gemm : Scaling {
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape,
                                                      typename Scaling::CollectiveMainloop,
                                                      typename Scaling::CollectiveEpilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape = ProblemShape::UnderlyingProblemShape;
};

using groups::Carver;  // cutlass_adapter.cuh

// The device arrays of one launch, at the workspace's front.
template <class G>
struct Arrays {
  const ElementAB** a;
  const ElementAB** b;
  ElementD** d;
  const float** a_scale;
  const float** b_scale;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;
  typename G::Shape* shapes;
  typename G::LayoutSFA* layout_sfa;  // block-wise only
  typename G::LayoutSFB* layout_sfb;

  static Arrays carve(Carver& c, int64_t groups) {
    Arrays r;
    r.a = c.take<const ElementAB*>(groups);
    r.b = c.take<const ElementAB*>(groups);
    r.d = c.take<ElementD*>(groups);
    r.a_scale = c.take<const float*>(groups);
    r.b_scale = c.take<const float*>(groups);
    r.stride_a = c.take<typename G::StrideA>(groups);
    r.stride_b = c.take<typename G::StrideB>(groups);
    r.stride_d = c.take<typename G::StrideD>(groups);
    r.shapes = c.take<typename G::Shape>(groups);
    r.layout_sfa = c.take<typename G::LayoutSFA>(G::kBlockwise ? groups : 0);
    r.layout_sfb = c.take<typename G::LayoutSFB>(G::kBlockwise ? groups : 0);
    return r;
  }

  static size_t bytes(int64_t groups) {
    Carver c{nullptr};
    carve(c, groups);
    return c.used;
  }
};

// Group g, rows [start, end): the `Describe` of group_offsets.cuh's setup kernels.
template <class G>
struct DescribeGroup {
  Fp8GemmArgs args;
  Arrays<G> arrays;

  __device__ void operator()(int64_t g, int64_t start, int64_t end) const {
    const int m = static_cast<int>(end - start);
    const int n = static_cast<int>(args.n);
    const int k = static_cast<int>(args.k);
    arrays.a[g] = static_cast<const ElementAB*>(args.a) + start * args.k;
    arrays.b[g] = static_cast<const ElementAB*>(args.b) + g * args.b_group_stride;
    arrays.d[g] = static_cast<ElementD*>(args.d) + start * args.n;
    arrays.stride_a[g] = cutlass::make_cute_packed_stride(typename G::StrideA{}, {m, k, 1});
    arrays.stride_b[g] = cutlass::make_cute_packed_stride(typename G::StrideB{}, {n, k, 1});
    arrays.stride_d[g] = cutlass::make_cute_packed_stride(typename G::StrideD{}, {m, n, 1});
    arrays.shapes[g] = typename G::Shape{m, n, k};
    if constexpr (G::kBlockwise) {
      const int64_t k_blocks = args.k / moe_ops::kFp8Block;
      const int64_t n_blocks = args.n / moe_ops::kFp8Block;
      arrays.a_scale[g] = args.a_scale + start * k_blocks;
      arrays.b_scale[g] = args.b_scale + g * n_blocks * k_blocks;
      arrays.layout_sfa[g] = G::ScaleConfig::tile_atom_to_shape_SFA(make_shape(m, n, k, 1));
      arrays.layout_sfb[g] = G::ScaleConfig::tile_atom_to_shape_SFB(make_shape(m, n, k, 1));
    } else {
      arrays.a_scale[g] = args.a_scale + start;
      arrays.b_scale[g] = args.b_scale + g * args.n;
    }
  }
};

template <class G>
size_t workspace_size(int64_t groups, int sm_count) {
  return moe_ops::groups::workspace_size<typename G::Adapter>(Arrays<G>::bytes(groups), groups,
                                                              sm_count);
}

template <class G>
const char* run(const Fp8GemmArgs& args, void* workspace, size_t bytes, int sm_count,
                cudaStream_t stream) {
  if (args.groups <= 0) {
    return nullptr;
  }
  if (bytes < workspace_size<G>(args.groups, sm_count)) {
    return "FP8 grouped GEMM workspace too small";
  }
  Carver carver{static_cast<char*>(workspace)};
  Arrays<G> arrays = Arrays<G>::carve(carver, args.groups);
  void* cutlass_workspace = moe_ops::groups::adapter_workspace(workspace, carver.used);

  int32_t* errors =
      args.offsets_errors == nullptr
          ? nullptr
          : args.offsets_errors +
                kOffsetsErrorKinds * static_cast<int>(OffsetsErrorOp::kGroupedMmFp8);
  cudaError_t err = groups::launch_setup(args.offsets, args.groups, args.m_total, errors,
                                         DescribeGroup<G>{args, arrays}, stream);
  if (err != cudaSuccess) {
    return cudaGetErrorString(err);
  }

  typename G::Adapter::Arguments arguments{};
  arguments.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  arguments.problem_shape = {static_cast<int>(args.groups), arrays.shapes, nullptr};
  arguments.mainloop.ptr_A = arrays.a;
  arguments.mainloop.dA = arrays.stride_a;
  arguments.mainloop.ptr_B = arrays.b;
  arguments.mainloop.dB = arrays.stride_b;
  arguments.epilogue.ptr_C = nullptr;
  arguments.epilogue.dC = arrays.stride_d;
  arguments.epilogue.ptr_D = arrays.d;
  arguments.epilogue.dD = arrays.stride_d;
  if constexpr (G::kBlockwise) {
    arguments.mainloop.ptr_SFA = arrays.a_scale;
    arguments.mainloop.layout_SFA = arrays.layout_sfa;
    arguments.mainloop.ptr_SFB = arrays.b_scale;
    arguments.mainloop.layout_SFB = arrays.layout_sfb;
    arguments.epilogue.thread.alpha = 1.0f;
    arguments.epilogue.thread.beta = 0.0f;
  } else {
    if constexpr (G::kPromotionInterval > 0) {
      arguments.mainloop.mma_promotion_interval = G::kPromotionInterval;
    }
    // The tree's arguments: children first, then the node's own (none for a multiply).
    arguments.epilogue.thread = {
        {arrays.b_scale, 0.0f, {}},            // WScale (row broadcast)
        {{arrays.a_scale, 0.0f, {}}, {}, {}},  // XScale * acc
        {}};
  }
  return groups::run_adapter<typename G::Adapter>(arguments, cutlass_workspace, sm_count,
                                                  stream);
}

}  // namespace moe_ops::fp8

// Defines NAME_workspace_size and NAME_run (declared in moe.h) for one instantiation.
#define MOE_OPS_DEFINE_FP8_GEMM(NAME, ...)                                                \
  namespace moe_ops {                                                                      \
  using NAME##_type = fp8::Gemm<fp8::__VA_ARGS__>;                                         \
  size_t NAME##_workspace_size(int64_t groups, int sm_count) {                             \
    return fp8::workspace_size<NAME##_type>(groups, sm_count);                             \
  }                                                                                        \
  const char* NAME##_run(const Fp8GemmArgs& args, void* workspace, size_t bytes,           \
                         int sm_count, cudaStream_t stream) {                              \
    return fp8::run<NAME##_type>(args, workspace, bytes, sm_count, stream);                \
  }                                                                                        \
  }
