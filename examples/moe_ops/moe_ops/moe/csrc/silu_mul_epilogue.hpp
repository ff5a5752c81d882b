// A CUTLASS 3.x collective epilogue for pointer-array (grouped) sm90 GEMMs that applies
// SiLU-and-multiply to interleaved gate/up columns and writes half as many columns:
//
//   D[m, j] = silu(acc[m, 2j]) * acc[m, 2j + 1]
//
// It follows cutlass::epilogue::collective::DefaultEpilogueArray (the no-shared-memory
// epilogue of the PtrArrayNoSmemWarpSpecialized schedule, wrapped by
// Sm90TmaWarpSpecializedAdapter): each consumer thread writes straight from its accumulator
// registers. In the wgmma accumulator layout a thread holds values in pairs of adjacent
// columns (2j, 2j + 1), so the gate and up value of one output element are in the same
// thread; the static_assert below checks that partitioning on the identity tile.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cute/tensor.hpp>

namespace moe_ops::gemm {

template <class ElementD_, class StrideD_>
class SiluMulEpilogueArray {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;

  // The adapter names a thread-level op; this one is never applied.
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<ElementD_, 1, float, float>;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementOutput = ElementD_;
  using ElementD = ElementD_;
  using ElementC = void;
  using StrideD = StrideD_;
  using StrideC = StrideD_;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using InternalStrideC = InternalStrideD;
  using GmemElementC = ElementD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  static_assert(cute::rank(InternalStrideD{}) == 3, "StrideD must be rank-3: [M, N, L]");

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  // ThreadEpilogueOp-shaped parameters (none are used).
  struct ThreadParams {};

  struct Arguments {
    ThreadParams thread{};
    ElementC const** ptr_C = nullptr;  // unused: no source
    StrideC dC{};
    ElementD** ptr_D = nullptr;        // per group: its first output row
    StrideD dD{};                      // per group: row stride of the output (n / 2)
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  CUTLASS_HOST_DEVICE
  SiluMulEpilogueArray(Params const& params_) : params(params_) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl,
                                      BlockShapeMNK blk_shape_MNK, BlockCoordMNKL blk_coord_mnkl,
                                      cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                      TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "tile shape must be static");
    static_assert(is_static<FrgLayout>::value, "accumulator layout must be static");

    auto M = get<0>(problem_shape_mnkl);
    auto N = get<1>(problem_shape_mnkl);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;

    auto stride_d = params.dD[l_coord];
    const int64_t ldd = static_cast<int64_t>(get<0>(stride_d));
    ElementD* out = params.ptr_D[l_coord];

    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor mD_crd = make_identity_tensor(make_shape(M, N));
    Tensor cD_mn = local_tile(mD_crd, take<0, 2>(blk_shape_MNK), make_coord(m_coord, n_coord));
    Tensor tCcD = thr_mma.partition_C(cD_mn);  // (VEC, THR_M, THR_N) -> (m, n)
    CUTE_STATIC_ASSERT_V(size(tCcD) == size(accumulators), "one coordinate per accumulator");
    static_assert(decltype(size(accumulators))::value % 2 == 0, "accumulators come in pairs");

    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 2) {
      auto crd = tCcD(i);
      const int m = get<0>(crd);
      const int n = get<1>(crd);  // even: (n, n + 1) is this thread's pair (checked by tests)
      if (m < M && n < N) {
        const float gate = accumulators(i);
        const float up = accumulators(i + 1);
        const float silu = gate / (1.0f + __expf(-gate));
        out[m * ldd + (n >> 1)] = ElementD(silu * up);
      }
    }
  }

 private:
  Params params;
};

}  // namespace moe_ops::gemm
