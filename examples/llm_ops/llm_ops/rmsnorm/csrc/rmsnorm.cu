// RMSNorm forward and backward: one pass over each row.
//
// Rows whose bytes are a multiple of 16 (and 16-byte aligned pointers):
// - the forward takes the row kernels: a group of threads a row (a CTA of 128 threads or
//   more: one row at hidden >= 2048 bf16, several below), the whole row in registers, every
//   16-byte load of the row issued before the reduction; a non-persistent grid (a CTA per
//   group of rows), so the many CTAs an SM holds keep HBM busy. Without a residual the
//   registers are capped so that four CTAs fit an SM at hidden 8192 (choose_forward), and w
//   is loaded after the reduction; a grid that fits the SMs (small batches) is not capped
//   and loads w with x (forward_rows), one 16-byte vector a thread (small_batch_plan);
// - the backward of at most kClusterMaxRows rows (decode) takes a cluster kernel, one
//   launch, dw summed across the CTAs through distributed shared memory (no workspace, no
//   reduce kernel): from 2 rows the column-split one (each CTA a slice of every row's
//   columns; only the rows' partial dots cross the cluster) where the row splits into whole
//   warps, else the row-split one (a CTA per row or two);
// - other backwards take the staged kernel: a persistent grid (as many CTAs as fit on the
//   device) walks the rows with a grid stride; each CTA copies its next row into shared
//   memory with cp.async while it reduces and writes the current one. (The staged forward is
//   kept for rows no row kernel takes.)
// Global memory traffic is the minimum: x (+ residual) read once, y (+ h) written once, plus
// 4 bytes of rstd a row; the backward reads x and dy once and writes dx once.
//
// The backward keeps each CTA's share of dw in fp32 shared memory (each thread owns fixed
// columns, so no atomics), writes one partial row per CTA, and a small kernel sums the
// partials into dw: deterministic, and graph-capturable. A grid of one CTA (a batch of one
// row) writes dw itself, in one launch.
//
// Other rows (odd hidden sizes, unaligned views) take the register kernels, which hold a row
// slice in registers (up to 16 elements a thread, 1024 threads: hidden <= 16384).
//
// The kernels live in headers by family (rmsnorm_register.cuh, rmsnorm_staged.cuh,
// rmsnorm_rows.cuh, rmsnorm_cluster.cuh, their shared helpers in rmsnorm_device.cuh); this
// file holds the dw reduction and the host side that plans and launches them.

#include "rmsnorm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launch.cuh"
#include "rmsnorm_cluster.cuh"
#include "rmsnorm_device.cuh"
#include "rmsnorm_register.cuh"
#include "rmsnorm_rows.cuh"
#include "rmsnorm_staged.cuh"
#include "vec.cuh"

namespace llm_ops::rmsnorm {
namespace {

constexpr int kReduceCols = 32;
constexpr int kReduceSlices = 8;

// dw[c] = sum over p of partial[p, c]; a warp reads 32 consecutive columns of one row.
template <typename T>
__global__ void __launch_bounds__(kReduceCols* kReduceSlices)
    dw_reduce_kernel(T* __restrict__ dw, const float* __restrict__ partial, int partials,
                     int hidden) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  __shared__ float sums[kReduceSlices][kReduceCols + 1];
  const int col = blockIdx.x * kReduceCols + threadIdx.x;
  float sum = 0.f;
  if (col < hidden) {
    for (int p = threadIdx.y; p < partials; p += kReduceSlices) {
      sum += partial[static_cast<int64_t>(p) * hidden + col];
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < hidden) {
#pragma unroll
    for (int s = 1; s < kReduceSlices; ++s) {
      sum += sums[s][threadIdx.x];
    }
    dw[col] = from_float<T>(sum);
  }
}

template <typename T>
bool can_vectorise(int64_t hidden, std::initializer_list<const void*> ptrs) {
  if (hidden % kVec16<T> != 0) {
    return false;
  }
  return std::all_of(ptrs.begin(), ptrs.end(), [](const void* p) { return aligned16(p); });
}

template <int VEC, int NV>
int threads_for(int64_t hidden) {
  const int64_t nvec = hidden / VEC;
  const int64_t threads = (nvec + NV - 1) / NV;
  return static_cast<int>(std::max<int64_t>(32, (threads + 31) / 32 * 32));
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// CTAs of `fn` that fit on the device at once (at least 1), capped at `rows`.
// Whether `ctas` CTAs are at most one an SM of the current device.
bool fits_the_sms(int64_t ctas) {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return ctas <= sms;
}

int resident_grid(const void* fn, int threads, size_t smem, int64_t rows) {
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem) !=
          cudaSuccess) {
    cudaGetLastError();
    sms = 1;
    per_sm = 1;
  }
  const int64_t full = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min(rows, full)));
}

template <typename T, int VEC>
void forward_vec(const ForwardArgs& a, cudaStream_t stream) {
  constexpr int NV = kMaxElemsPerThread / VEC;
  const int threads = threads_for<VEC, NV>(a.hidden);
  const int hidden = static_cast<int>(a.hidden);
  if (a.residual != nullptr) {
    const auto fn = forward_kernel<T, VEC, NV, true>;
    const int grid = resident_grid(reinterpret_cast<const void*>(fn), threads, 0, a.rows);
    launch(fn, dim3(grid), dim3(threads), 0, stream, static_cast<T*>(a.y),
           static_cast<T*>(a.h), a.rstd, static_cast<const T*>(a.x),
           static_cast<const T*>(a.residual), static_cast<const T*>(a.w), a.rows, hidden,
           a.eps);
  } else {
    const auto fn = forward_kernel<T, VEC, NV, false>;
    const int grid = resident_grid(reinterpret_cast<const void*>(fn), threads, 0, a.rows);
    launch(fn, dim3(grid), dim3(threads), 0, stream, static_cast<T*>(a.y), nullptr, a.rstd,
           static_cast<const T*>(a.x), nullptr, static_cast<const T*>(a.w), a.rows, hidden,
           a.eps);
  }
}

// Dynamic shared memory a block may opt in to on the current device.
int max_dynamic_smem() {
  int device = 0;
  int bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return 48 * 1024;
  }
  return bytes;
}

// Launches `fn` as a resident grid with `smem` bytes of dynamic shared memory.
template <typename... Args>
void launch_resident(void (*fn)(Args...), int threads, size_t smem, int64_t rows,
                     cudaStream_t stream, Args... args) {
  const void* key = reinterpret_cast<const void*>(fn);
  cudaFuncSetAttribute(key, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  const int grid = resident_grid(key, threads, smem, rows);
  launch(fn, dim3(grid), dim3(threads), smem, stream, args...);
}

// Shared memory the static arrays of a kernel use besides its dynamic share.
constexpr size_t kStaticSmem = 1024;

// Stages for a staged kernel whose CTA has `threads` threads, `fixed` bytes of dynamic
// shared memory besides its stages and `stage_bytes` a stage: the count that keeps the most
// bytes in flight per SM (CTAs resident x stages ahead), or 0 when not even 2 stages fit.
int pick_stages(int threads, size_t fixed, size_t stage_bytes) {
  const size_t limit = static_cast<size_t>(max_dynamic_smem());
  constexpr size_t kSmPerSm = 228 * 1024;
  int best = 0;
  size_t best_flight = 0;
  for (int stages = 2; stages <= 4; ++stages) {
    const size_t smem = fixed + stages * stage_bytes;
    if (smem + kStaticSmem > limit) {
      break;
    }
    if (kForcedStages != 0 && stages != kForcedStages) {
      continue;
    }
    const size_t by_threads = 2048 / static_cast<size_t>(threads);
    const size_t by_smem = kSmPerSm / (smem + kStaticSmem);
    const size_t flight = std::min(by_threads, by_smem) * (stages - 1) * stage_bytes;
    if (flight > best_flight) {
      best = stages;
      best_flight = flight;
    }
  }
  return best;
}

template <typename T, int NV, int STAGES, bool RESIDUAL>
void forward_staged(const ForwardArgs& a, int threads, size_t smem, cudaStream_t stream) {
  launch_resident(forward_staged_kernel<T, NV, STAGES, RESIDUAL>, threads, smem, a.rows,
                  stream, static_cast<T*>(a.y), static_cast<T*>(a.h), a.rstd,
                  static_cast<const T*>(a.x), static_cast<const T*>(a.residual),
                  static_cast<const T*>(a.w), a.rows, static_cast<int>(a.hidden), a.eps);
}

template <typename T, int NV, bool RESIDUAL>
void forward_staged_any(const ForwardArgs& a, int stages, int threads, size_t stage_bytes,
                        cudaStream_t stream) {
  switch (stages) {
    case 2:
      forward_staged<T, NV, 2, RESIDUAL>(a, threads, 2 * stage_bytes, stream);
      break;
    case 3:
      forward_staged<T, NV, 3, RESIDUAL>(a, threads, 3 * stage_bytes, stream);
      break;
    default:
      forward_staged<T, NV, 4, RESIDUAL>(a, threads, 4 * stage_bytes, stream);
      break;
  }
}

// The launch of a row kernel: `nv` 16-byte vectors a thread, `per_row` threads a row (a
// multiple of 32), `rows_per_cta` rows a CTA, and the cache hints (see load_once/store_once).
struct RowsPlan {
  int nv;
  int per_row;
  int rows_per_cta;
  int hint;
  bool occupy;  // registers capped for more CTAs an SM (kRowsMinBlocks)
};

// A plan holding at most `nv` vectors a thread (more when a row needs over 1024 threads) in
// CTAs of at least `min_cta` threads; false when no row kernel takes the row.
bool plan_rows(int64_t nvec, int nv, int min_cta, int hint, bool occupy, RowsPlan* plan) {
  const auto limit_for = [](int v) -> int64_t { return v <= 2 ? 1024 : (v == 4 ? 512 : 256); };
  while (nv < 8 && (nvec + nv - 1) / nv > limit_for(nv)) {  // kRowsMaxThreads<nv>
    nv *= 2;
  }
  const int64_t per_row = std::max<int64_t>(32, ((nvec + nv - 1) / nv + 31) / 32 * 32);
  const int64_t limit = limit_for(nv);
  if (per_row > limit) {
    return false;
  }
  const int64_t rows_per_cta =
      std::max<int64_t>(1, std::min<int64_t>(min_cta, limit) / per_row);
  *plan = {nv, static_cast<int>(per_row), static_cast<int>(rows_per_cta), hint, occupy};
  return true;
}

template <typename T, int NV, bool RESIDUAL, int HINT, bool OCCUPY>
void forward_rows_launch(const ForwardArgs& a, const RowsPlan& p, cudaStream_t stream) {
  const dim3 block(p.per_row, p.rows_per_cta);
  const auto grid = static_cast<unsigned>((a.rows + p.rows_per_cta - 1) / p.rows_per_cta);
  launch(forward_rows_kernel<T, NV, RESIDUAL, HINT, OCCUPY>, dim3(grid), block, 0, stream,
         static_cast<T*>(a.y), static_cast<T*>(a.h), a.rstd, static_cast<const T*>(a.x),
         static_cast<const T*>(a.residual), static_cast<const T*>(a.w), a.rows,
         static_cast<int>(a.hidden), a.eps);
}

template <typename T, bool RESIDUAL, int HINT, bool OCCUPY>
void forward_rows_nv(const ForwardArgs& a, const RowsPlan& p, cudaStream_t stream) {
  switch (p.nv) {
    case 1:
      forward_rows_launch<T, 1, RESIDUAL, HINT, OCCUPY>(a, p, stream);
      break;
    case 2:
      forward_rows_launch<T, 2, RESIDUAL, HINT, OCCUPY>(a, p, stream);
      break;
    case 4:
      forward_rows_launch<T, 4, RESIDUAL, HINT, OCCUPY>(a, p, stream);
      break;
    default:
      forward_rows_launch<T, 8, RESIDUAL, HINT, OCCUPY>(a, p, stream);
      break;
  }
}

template <typename T, bool RESIDUAL>
void forward_rows(const ForwardArgs& a, const RowsPlan& p, cudaStream_t stream) {
#ifdef LLM_OPS_RMSNORM_TUNING
  if constexpr (!RESIDUAL) {
    if (p.occupy) {
      switch (p.hint) {
        case 0:
          forward_rows_nv<T, RESIDUAL, 0, true>(a, p, stream);
          return;
        case 1:
          forward_rows_nv<T, RESIDUAL, 1, true>(a, p, stream);
          return;
        default:
          forward_rows_nv<T, RESIDUAL, 2, true>(a, p, stream);
          return;
      }
    }
  }
  switch (p.hint) {
    case 0:
      forward_rows_nv<T, RESIDUAL, 0, false>(a, p, stream);
      return;
    case 1:
      forward_rows_nv<T, RESIDUAL, 1, false>(a, p, stream);
      return;
    default:
      forward_rows_nv<T, RESIDUAL, 2, false>(a, p, stream);
      return;
  }
#else
  if constexpr (!RESIDUAL && kRowsOccupyPlain) {
    // A grid no larger than the SMs gives every CTA an SM of its own: the register cap buys
    // nothing there, and w loaded with x (not after the reduction) takes a memory latency
    // off each row's critical path (small batches: decode).
    if (fits_the_sms((a.rows + p.rows_per_cta - 1) / p.rows_per_cta)) {
      forward_rows_nv<T, RESIDUAL, kRowsHint, false>(a, p, stream);
      return;
    }
  }
  forward_rows_nv<T, RESIDUAL, kRowsHint, !RESIDUAL && kRowsOccupyPlain>(a, p, stream);
#endif
}

// Which forward kernel takes a 16-byte row: the row kernels (RowsPlan), the staged kernel,
// or the persistent register kernel.
enum class ForwardKind { kRows, kStaged, kRegister };

// The row kernel's plan for a row of `nvec` 16-byte vectors of `elem` bytes each element.
ForwardKind choose_forward(int64_t nvec, int elem, bool residual, RowsPlan* plan) {
#ifdef LLM_OPS_RMSNORM_TUNING
  // Tuning builds only: LLM_OPS_RMSNORM_FWD = staged | register | rows:NV:MIN_CTA:HINT[:OCCUPY].
  if (const char* env = std::getenv("LLM_OPS_RMSNORM_FWD")) {
    int nv = 0;
    int min_cta = 0;
    int hint = 0;
    int occupy = 0;
    if (std::strcmp(env, "staged") == 0) {
      return ForwardKind::kStaged;
    }
    if (std::strcmp(env, "register") == 0) {
      return ForwardKind::kRegister;
    }
    if (std::sscanf(env, "rows:%d:%d:%d:%d", &nv, &min_cta, &hint, &occupy) >= 3 &&
        plan_rows(nvec, nv, min_cta, hint, occupy != 0, plan)) {
      return ForwardKind::kRows;
    }
  }
#endif
  // Measured on an H200 (docs/llm_ops.md): the row kernels win at every benchmarked size.
  // With a residual (two inputs a row) uncapped ones hold enough bytes in flight. Without
  // one, uncapped ones (42 registers) fit two 512-thread CTAs an SM at hidden 8192: 32 KB of
  // x in flight, 0.77 of copy; capped (kRowsOccupyPlain), four: 0.97.
  if (!residual && !kRowsOccupyPlain && nvec * 16 > kRowsPlainMaxRowBytes) {
    return ForwardKind::kRegister;
  }
  (void)elem;
  return plan_rows(nvec, residual ? kRowsVectors : kRowsVectorsPlain, kRowsMinCta, kRowsHint,
                   !residual && kRowsOccupyPlain, plan)
             ? ForwardKind::kRows
             : ForwardKind::kStaged;
}

// A batch whose row-kernel grid fits the SMs (decode) is latency-bound: as Inductor does at
// [1 | 16, 4096] (a 512-thread CTA a row, 8 elements a thread), hold one 16-byte vector a
// thread, so that a thread's arithmetic before and after the reduction is half as long, on
// as many CTAs as rows (w is then loaded with x: forward_rows).
void small_batch_plan(int64_t nvec, int64_t rows, RowsPlan* plan) {
#ifdef LLM_OPS_RMSNORM_TUNING
  if (std::getenv("LLM_OPS_RMSNORM_FWD") != nullptr) {
    return;  // the plan asked for stands
  }
#endif
  RowsPlan one{};
  if (plan->nv != 1 && plan_rows(nvec, 1, kRowsMinCta, kRowsHint, false, &one) &&
      fits_the_sms((rows + one.rows_per_cta - 1) / one.rows_per_cta)) {
    *plan = one;
  }
}

template <typename T>
void forward_typed(const ForwardArgs& a, cudaStream_t stream) {
  if (!can_vectorise<T>(a.hidden, {a.y, a.h, a.x, a.residual, a.w})) {
    forward_vec<T, 1>(a, stream);
    return;
  }
  constexpr int VEC = kVec16<T>;
  const bool residual = a.residual != nullptr;
  RowsPlan plan{};
  const ForwardKind kind = choose_forward(a.hidden / VEC, sizeof(T), residual, &plan);
  if (kind == ForwardKind::kRows) {
    small_batch_plan(a.hidden / VEC, a.rows, &plan);
  }
  if (kind == ForwardKind::kRows && (a.rows + plan.rows_per_cta - 1) / plan.rows_per_cta <=
                                        static_cast<int64_t>(0x7fffffff)) {
    if (residual) {
      forward_rows<T, true>(a, plan, stream);
    } else {
      forward_rows<T, false>(a, plan, stream);
    }
    return;
  }
  if (kind == ForwardKind::kRegister) {
    forward_vec<T, VEC>(a, stream);
    return;
  }
  constexpr int NV = kStagedElemsPerThread / VEC;
  const int threads = threads_for<VEC, NV>(a.hidden);
  const size_t stage_bytes = (residual ? 2 : 1) * static_cast<size_t>(NV) * threads * 16;
  const int stages = pick_stages(threads, 0, stage_bytes);
  if (stages == 0) {
    forward_vec<T, VEC>(a, stream);  // the register kernel (kMaxElemsPerThread)
  } else if (residual) {
    forward_staged_any<T, NV, true>(a, stages, threads, stage_bytes, stream);
  } else {
    forward_staged_any<T, NV, false>(a, stages, threads, stage_bytes, stream);
  }
}

// The backward kernel for one row shape: as few elements a thread as 1024 threads allow
// (the fp32 temporaries of the two passes over the row must stay in registers).
struct BackwardKernel {
  const void* fn;
  int threads;
  size_t smem;
};

template <typename T, int VEC, int NV, bool DRESIDUAL>
BackwardKernel pick_backward_nv(int64_t nvec) {
  constexpr int kMaxNv = kMaxElemsPerThread / VEC;
  if constexpr (NV < kMaxNv) {
    if (nvec > static_cast<int64_t>(NV) * kMaxThreads) {
      return pick_backward_nv<T, VEC, NV * 2, DRESIDUAL>(nvec);
    }
  }
  const int threads = threads_for<VEC, NV>(nvec * VEC);
  return {reinterpret_cast<const void*>(&backward_kernel<T, VEC, NV, DRESIDUAL>), threads,
          static_cast<size_t>(NV) * VEC * threads * sizeof(float)};
}

template <typename T, int NV, bool DRESIDUAL>
const void* backward_staged_fn(int stages) {
  switch (stages) {
    case 2:
      return reinterpret_cast<const void*>(&backward_staged_kernel<T, NV, 2, DRESIDUAL>);
    case 3:
      return reinterpret_cast<const void*>(&backward_staged_kernel<T, NV, 3, DRESIDUAL>);
    default:
      return reinterpret_cast<const void*>(&backward_staged_kernel<T, NV, 4, DRESIDUAL>);
  }
}

template <typename T>
BackwardKernel pick_backward(const BackwardArgs& a) {
  const bool vec = can_vectorise<T>(a.hidden, {a.dx, a.dy, a.x, a.w, a.dresidual});
  const bool dres = a.dresidual != nullptr;
  // (Batches of up to kClusterMaxRows rows take the cluster kernel: uses_cluster_backward.
  // The register kernel for every batch of at most a row an SM, tried in 1ddd5d1, measured
  // slower than the staged one on an H200 at [1, 4096] (3.3 us vs 3.0) and [16, 4096] (6.4
  // vs 4.6); it writes its dw partials as scalar stores.)
  if (vec) {
    constexpr int VEC = kVec16<T>;
    constexpr int NV = kStagedElemsPerThread / VEC;
    const int threads = threads_for<VEC, NV>(a.hidden);
    const size_t acc_bytes = static_cast<size_t>(NV) * threads * VEC * sizeof(float);
    const size_t stage_bytes = 2 * static_cast<size_t>(NV) * threads * 16;  // x and dy
    const int stages = pick_stages(threads, acc_bytes, stage_bytes);
    if (stages != 0) {
      const void* fn = dres ? backward_staged_fn<T, NV, true>(stages)
                            : backward_staged_fn<T, NV, false>(stages);
      return {fn, threads, acc_bytes + stages * stage_bytes};
    }
    const int64_t nvec = a.hidden / VEC;
    return dres ? pick_backward_nv<T, VEC, 1, true>(nvec)
                : pick_backward_nv<T, VEC, 1, false>(nvec);
  }
  return dres ? pick_backward_nv<T, 1, 1, true>(a.hidden)
              : pick_backward_nv<T, 1, 1, false>(a.hidden);
}

// Whether the backward of `a` takes the cluster kernel: a 16-byte row of at most kMaxThreads
// vectors (one a thread) and at most kClusterMaxRows rows (decode).
template <typename T>
bool uses_cluster_backward(const BackwardArgs& a) {
  return a.rows >= 1 && a.rows <= kClusterMaxRows && a.hidden / kVec16<T> <= kMaxThreads &&
         can_vectorise<T>(a.hidden, {a.dx, a.dw, a.dy, a.x, a.w, a.dresidual});
}

// Whether the device runs the column-split kernel in clusters of kColMaxCluster CTAs of
// kMaxThreads threads (a non-portable size: allowed on sm_90, not in every partition of a
// GPU), asked once per process.
// The column-split kernel's dynamic shared memory: dy * xhat of the CTA's slice of every
// row in fp32, at most kMaxThreads vectors (32 KB for bf16 and fp16: under the default
// limit of 48 KB).
template <typename T>
size_t colsplit_smem(int rows, int slice) {
  return static_cast<size_t>(rows) * slice * kVec16<T> * sizeof(float);
}

template <typename T, bool DRESIDUAL>
bool nonportable_cluster_fits() {
  static_assert(kColMaxCluster > kClusterMax, "kColMaxCluster is the one non-portable size");
  static const bool fits = [] {
    constexpr int c = kColMaxCluster;
    const auto fn = backward_colsplit_kernel<T, DRESIDUAL>;
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    // The cluster attribute alone (LaunchConfig would add the launch's PDL attribute, which
    // the occupancy query does not need).
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(c);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.gridDim = dim3(static_cast<unsigned>(c));
    config.blockDim = dim3(kMaxThreads);
    config.dynamicSmemBytes = colsplit_smem<T>(1, kMaxThreads);
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, fn, &config) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return clusters >= 1;
  }();
  return fits;
}

// The cluster size the column-split backward takes for `a` (a batch uses_cluster_backward
// takes, of at least kColMinRows rows), or 0: the row-split cluster kernel then.
// Sizes in the order of preference (kColClusters), each where a row's slice is a whole
// number of warps and the CTA's rows x slice vectors fit kMaxThreads; 16 only where the
// device runs it.
template <typename T, bool DRESIDUAL>
int colsplit_cluster(const BackwardArgs& a) {
  if (a.rows < kColMinRows || a.rows > kClusterMaxRows) {
    return 0;
  }
  const int64_t nvec = a.hidden / kVec16<T>;
  for (const int c : kColClusters) {
    if (nvec % (static_cast<int64_t>(c) * 32) != 0 || a.rows * (nvec / c) > kMaxThreads) {
      continue;
    }
    if (c > kClusterMax && !nonportable_cluster_fits<T, DRESIDUAL>()) {
      continue;
    }
    return c;
  }
  return 0;
}

template <typename T, bool DRESIDUAL>
void backward_colsplit(const BackwardArgs& a, int cluster, cudaStream_t stream) {
  const int hidden = static_cast<int>(a.hidden);
  const int rows = static_cast<int>(a.rows);
  const int slice = hidden / kVec16<T> / cluster;  // vectors of a row a CTA owns
  const size_t smem = colsplit_smem<T>(rows, slice);
  launch_cluster(backward_colsplit_kernel<T, DRESIDUAL>, static_cast<unsigned>(cluster),
                 dim3(static_cast<unsigned>(cluster)), dim3(static_cast<unsigned>(rows * slice)),
                 smem, stream, static_cast<T*>(a.dx), static_cast<T*>(a.dw),
                 static_cast<const T*>(a.dy), static_cast<const T*>(a.x),
                 static_cast<const T*>(a.w), a.rstd, static_cast<const T*>(a.dresidual), rows,
                 hidden, cluster);
}

// The backward of a batch uses_cluster_backward takes: the column-split kernel where
// colsplit_cluster names a size, else the row-split one.
template <typename T, bool DRESIDUAL>
void backward_cluster(const BackwardArgs& a, cudaStream_t stream) {
  if (const int c = colsplit_cluster<T, DRESIDUAL>(a); c != 0) {
    backward_colsplit<T, DRESIDUAL>(a, c, stream);
    return;
  }
  const int hidden = static_cast<int>(a.hidden);
  const int rows = static_cast<int>(a.rows);
  const int cluster = static_cast<int>(std::min<int64_t>(a.rows, kClusterMax));
  const int threads = threads_for<kVec16<T>, 1>(a.hidden);
  // The CTAs' dw shares (hidden fp32: at most 32 KB, under the default 48 KB limit).
  const size_t smem = cluster > 1 ? static_cast<size_t>(hidden) * sizeof(float) : 0;
  // One CTA: a plain launch (launch_cluster adds no cluster attribute for a cluster of 1).
  launch_cluster(backward_cluster_kernel<T, DRESIDUAL>, static_cast<unsigned>(cluster),
                 dim3(static_cast<unsigned>(cluster)), dim3(static_cast<unsigned>(threads)),
                 smem, stream, static_cast<T*>(a.dx), static_cast<T*>(a.dw),
                 static_cast<const T*>(a.dy), static_cast<const T*>(a.x),
                 static_cast<const T*>(a.w), a.rstd, static_cast<const T*>(a.dresidual), rows,
                 hidden, cluster);
}

template <typename T>
int backward_partials_typed(const BackwardArgs& a) {
  if (uses_cluster_backward<T>(a)) {
    return 1;  // no workspace
  }
  const BackwardKernel k = pick_backward<T>(a);
  cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(k.smem));
  return resident_grid(k.fn, k.threads, k.smem, a.rows);
}

template <typename T>
void backward_typed(const BackwardArgs& a, float* workspace, int partials,
                    cudaStream_t stream) {
  if (uses_cluster_backward<T>(a)) {
    if (a.dresidual != nullptr) {
      backward_cluster<T, true>(a, stream);
    } else {
      backward_cluster<T, false>(a, stream);
    }
    return;
  }
  const BackwardKernel k = pick_backward<T>(a);
  cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(k.smem));
  T* dx = static_cast<T*>(a.dx);
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* dres = static_cast<const T*>(a.dresidual);
  const float* rstd = a.rstd;
  int64_t rows = a.rows;
  int hidden = static_cast<int>(a.hidden);
  // One CTA: it writes dw itself, and the reduce kernel is not launched (small batches:
  // one launch instead of two; the same sum, so the same bits).
  T* dw_direct = partials == 1 ? static_cast<T*>(a.dw) : nullptr;
  void* params[] = {&dx, &workspace, &dw_direct, &dy, &x, &w, &rstd,
                    &dres, &rows, &hidden};
  launch_untyped(k.fn, dim3(partials), dim3(k.threads), k.smem, stream, params);
  if (dw_direct != nullptr) {
    return;
  }
  const dim3 block(kReduceCols, kReduceSlices);
  const auto grid = static_cast<unsigned>((a.hidden + kReduceCols - 1) / kReduceCols);
  launch(dw_reduce_kernel<T>, dim3(grid), block, 0, stream, static_cast<T*>(a.dw), workspace,
         partials, hidden);
}

}  // namespace

const char* launch_forward(const ForwardArgs& args, cudaStream_t stream) {
  if (args.rows == 0) {
    return nullptr;
  }
  switch (args.dtype) {
    case DType::kFloat32:
      forward_typed<float>(args, stream);
      break;
    case DType::kFloat16:
      forward_typed<__half>(args, stream);
      break;
    case DType::kBFloat16:
      forward_typed<__nv_bfloat16>(args, stream);
      break;
  }
  return last_error();
}

int backward_partials(const BackwardArgs& args) {
  switch (args.dtype) {
    case DType::kFloat32:
      return backward_partials_typed<float>(args);
    case DType::kFloat16:
      return backward_partials_typed<__half>(args);
    case DType::kBFloat16:
      return backward_partials_typed<__nv_bfloat16>(args);
  }
  return 1;
}

const char* launch_backward(const BackwardArgs& args, float* workspace, int partials,
                            cudaStream_t stream) {
  switch (args.dtype) {
    case DType::kFloat32:
      backward_typed<float>(args, workspace, partials, stream);
      break;
    case DType::kFloat16:
      backward_typed<__half>(args, workspace, partials, stream);
      break;
    case DType::kBFloat16:
      backward_typed<__nv_bfloat16>(args, workspace, partials, stream);
      break;
  }
  return last_error();
}

}  // namespace llm_ops::rmsnorm
