// The CUTLASS 3.x sm90 pointer-array grouped GEMM behind moe_ops (after CUTLASS's example
// 57_hopper_grouped_gemm): TMA loads, wgmma, warp-specialised persistent kernels.
//
// Everything a launch needs per group (A/B/D pointers, strides, problem shape) is computed on
// the device by group_offsets.cuh's `setup_groups` (or `setup_groups_checked`, for offsets
// from the caller) from the int32 offsets, and CUTLASS gets the device problem shapes with host problem shapes =
// nullptr: the host knows only the group count, so a call never synchronises and can be
// captured in a CUDA graph.
//
// Include this from exactly one translation unit per instantiation (gemm_*.cu), which then
// uses MOE_OPS_DEFINE_GEMM.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "gemv.cuh"
#include "cutlass_adapter.cuh"
#include "group_offsets.cuh"
#include "moe.h"
#include "silu_mul_epilogue.hpp"

namespace moe_ops::gemm {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // <M,N,K>
using Element = cutlass::bfloat16_t;
using Accumulator = float;
constexpr int kAlign = 16 / sizeof(Element);
static_assert(kAlign == moe_ops::kAlignment, "moe.h's alignment must match the TMA's");

struct CooperativeConfig {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_1, _2, _1>;
};

// The same tile in a 2x1 cluster: the cluster's CTAs share B's tile (TMA multicast of the
// weights), so two row tiles of an expert read its weight columns once from L2; for experts
// of a few hundred rows, where the weights are the larger operand.
struct Cooperative2x1Config {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_2, _1, _1>;
};

// Decode sizes: a 64-row tile wastes less of the MMA on one-row experts, and the 64-column
// tile doubles the CTAs that stream an expert's weights; no cluster (nothing to multicast).
struct SmallConfig {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  using TileShape = Shape<_64, _64, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
};

using LayoutA = cutlass::layout::RowMajor;
using LayoutD = cutlass::layout::RowMajor;

// The epilogue: bf16 D through TMA stores (plain), or SiLU-and-mul from registers.
template <class Config, bool SiluMul>
struct EpilogueFor;

template <class Config>
struct EpilogueFor<Config, false> {
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto,
      Accumulator, Accumulator, void, LayoutD*, kAlign, Element, LayoutD*, kAlign,
      typename Config::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<Element, Accumulator, void>>::CollectiveOp;
};

template <class Config>
struct EpilogueFor<Config, true> {
  using Op = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      SiluMulEpilogueArray<Element, cutlass::detail::TagToStrideC_t<LayoutD*>>>;
};

template <class Config, class LayoutB, bool SiluMul>
struct Gemm {
  static constexpr bool kSiluMul = SiluMul;
  static constexpr bool kKMajorB = std::is_same_v<LayoutB, cutlass::layout::ColumnMajor>;
  // The small-tile instantiations also run the decode kernel (gemv.cuh).
  static constexpr bool kHostsGemv = std::is_same_v<Config, SmallConfig>;
  using CollectiveEpilogue = typename EpilogueFor<Config, SiluMul>::Op;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlign, Element,
      LayoutB*, kAlign, Accumulator, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape = ProblemShape::UnderlyingProblemShape;
};

// The device arrays of one launch, carved out of the workspace's front.
template <class G>
struct Arrays {
  const Element** a;
  const Element** b;
  Element** d;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;
  typename G::Shape* shapes;

  static Arrays carve(moe_ops::groups::Carver& c, int64_t groups) {
    Arrays r;
    r.a = c.take<const Element*>(groups);
    r.b = c.take<const Element*>(groups);
    r.d = c.take<Element*>(groups);
    r.stride_a = c.take<typename G::StrideA>(groups);
    r.stride_b = c.take<typename G::StrideB>(groups);
    r.stride_d = c.take<typename G::StrideD>(groups);
    r.shapes = c.take<typename G::Shape>(groups);
    return r;
  }

  static size_t bytes(int64_t groups) {
    moe_ops::groups::Carver c{nullptr};
    carve(c, groups);
    return c.used;
  }
};

// Pointers, strides and problem shape of group g, rows [start, end) of A and D
// (0 <= start <= end <= m_total): the `Describe` of group_offsets.cuh's setup kernels.
template <class G>
struct DescribeGroup {
  GroupedGemmArgs args;
  Arrays<G> arrays;

  __device__ void operator()(int64_t g, int64_t start, int64_t end) const {
    const int m = static_cast<int>(end - start);
    const int n = static_cast<int>(args.n);
    const int k = static_cast<int>(args.k);
    const int64_t n_out = args.silu_mul ? args.n / 2 : args.n;
    arrays.a[g] = static_cast<const Element*>(args.a) + start * args.k;
    arrays.b[g] = static_cast<const Element*>(args.b) + g * args.b_group_stride;
    arrays.d[g] = static_cast<Element*>(args.d) + start * n_out;
    arrays.stride_a[g] = cutlass::make_cute_packed_stride(typename G::StrideA{}, {m, k, 1});
    arrays.stride_b[g] = cutlass::make_cute_packed_stride(typename G::StrideB{}, {n, k, 1});
    arrays.stride_d[g] =
        cutlass::make_cute_packed_stride(typename G::StrideD{}, {m, static_cast<int>(n_out), 1});
    arrays.shapes[g] = typename G::Shape{m, n, k};
  }
};

template <class G>
size_t workspace_size(int64_t groups, int sm_count) {
  return moe_ops::groups::workspace_size<typename G::Adapter>(Arrays<G>::bytes(groups), groups,
                                                              sm_count);
}

template <class G>
const char* run(const GroupedGemmArgs& args, void* workspace, size_t bytes, int sm_count,
                cudaStream_t stream) {
  if (args.groups <= 0) {
    return nullptr;
  }
  if (bytes < workspace_size<G>(args.groups, sm_count)) {
    return "grouped GEMM workspace too small";
  }
  moe_ops::groups::Carver carver{static_cast<char*>(workspace)};
  Arrays<G> arrays = Arrays<G>::carve(carver, args.groups);
  void* cutlass_workspace = moe_ops::groups::adapter_workspace(workspace, carver.used);

  // This op's words of the offsets report (moe.h's OffsetsErrorOp), if the offsets are untrusted.
  int32_t* errors = args.offsets_errors == nullptr
                        ? nullptr
                        : args.offsets_errors +
                              kOffsetsErrorKinds *
                                  static_cast<int>(args.silu_mul ? OffsetsErrorOp::kGroupedMmSiluMul
                                                                 : OffsetsErrorOp::kGroupedMm);
  if constexpr (G::kHostsGemv) {
    // The weight-streaming kernel reads the offsets itself (no setup kernel); with more
    // groups with rows than it can list, the small tile runs instead.
    if (args.config == static_cast<int>(GemmConfig::kGemv) &&
        gemv_fits(args.groups, args.m_total)) {
      const cudaError_t err =
          launch_gemv<G::kKMajorB, G::kSiluMul>(args, errors, sm_count, stream);
      return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
    }
  }
  const cudaError_t err = groups::launch_setup(args.offsets, args.groups, args.m_total, errors,
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
  if constexpr (!G::kSiluMul) {
    arguments.epilogue.thread.alpha = 1.0f;
    arguments.epilogue.thread.beta = 0.0f;
  }
  return groups::run_adapter<typename G::Adapter>(arguments, cutlass_workspace, sm_count,
                                                  stream);
}

}  // namespace moe_ops::gemm

// Defines NAME_workspace_size and NAME_run (declared in moe.h) for one instantiation.
#define MOE_OPS_DEFINE_GEMM(NAME, CONFIG, LAYOUT_B, SILU)                                 \
  namespace moe_ops {                                                                      \
  using NAME##_type = gemm::Gemm<gemm::CONFIG, cutlass::layout::LAYOUT_B, SILU>;            \
  size_t NAME##_workspace_size(int64_t groups, int sm_count) {                             \
    return gemm::workspace_size<NAME##_type>(groups, sm_count);                            \
  }                                                                                        \
  const char* NAME##_run(const GroupedGemmArgs& args, void* workspace, size_t bytes,       \
                         int sm_count, cudaStream_t stream) {                              \
    return gemm::run<NAME##_type>(args, workspace, bytes, sm_count, stream);               \
  }                                                                                        \
  }
