// The grouped GEMM for a few rows an expert (decode): a weight-streaming kernel instead of
// CUTLASS's tiles, which at one or two rows an expert leave most of a tile's MMA idle and,
// with few experts active, most SMs without a tile.
//
// One launch, no setup kernel: every CTA reads the int32 offsets itself and builds, in shared
// memory, the list of groups with rows, with the clamping of group_offsets.cuh's checked
// setup (group g is rows [c(g-1), c(g)) with c(g) = min(max(0, offsets[0..g]), m_total)); CTA
// 0 reports invalid offsets into the op's words as that setup does. The grid is persistent
// (at most the CTAs resident at once): the work is (group with rows, column block) tasks, CTA
// i takes tasks i, i + grid, ..., so no CTA waits for a scheduling slot and the list is built
// once a CTA. Within a task the CTA's threads split K into `k_splits` slices of one column
// block and meet in shared memory, summing the slices in a fixed order (deterministic; no
// atomics, no workspace). The split is chosen on the host (gemv_plan) from the shape alone so
// that the tasks divide into the resident CTAs with little of a last wave left over: Mixtral's
// one-token down GEMM (2 experts x 4096 columns x K 14336) has too few column blocks
// otherwise.
//
// - B K-major (stored n x k, K contiguous): a warp holds 2 adjacent columns of one K slice,
//   its lanes read 16 bytes of K each; 8 warps = (8 / k_splits) column pairs x k_splits.
// - B row-major (k x n, N contiguous): 8 lanes cover 64 columns of a k row (128 contiguous
//   bytes), each lane 8 columns; the CTA's 32 such lane groups = (32 / k_splits) column
//   groups x k_splits, each over a contiguous K slice, so its A values come as one 16-byte
//   load per row per 8 k.
// In both, a thread issues its loads of B and of A (a few rows, from L2) before it uses the
// first, and reads B[g] once for every kGemvRows rows of the group (once at decode).
//
// Accumulation is fp32, in another order than CUTLASS's (so not bit-identical to
// torch._grouped_mm); each output is rounded once. SiLU-and-mul takes columns 2j and 2j+1
// (adjacent in both layouts) into output column j.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <cub/block/block_scan.cuh>
#include <cuda/functional>

#include "group_offsets.cuh"
#include "moe.h"

namespace moe_ops::gemm {

constexpr int kGemvRows = 4;       // rows of A a pass over the column block
constexpr int kGemvThreads = 256;  // 8 warps
constexpr int kGemvWarps = kGemvThreads / 32;
// Groups with rows a CTA's list holds; with more, the launcher takes the small tile instead.
constexpr int kGemvMaxActive = 1024;
// K-major: steps of 256 k (32 lanes x 8) a warp has in flight, two columns each.
constexpr int kGemvColUnroll = 4;
constexpr int kGemvColStep = 32 * 8;
// Row-major: lanes a k row, columns a lane group, lane groups a CTA, k rows in flight.
constexpr int kGemvRowLanes = 8;
constexpr int kGemvRowCols = 8 * kGemvRowLanes;
constexpr int kGemvRowGroups = kGemvThreads / kGemvRowLanes;
constexpr int kGemvRowUnroll = 8;
static_assert(kGemvRowUnroll == 8, "a step's k rows are the 8 values of one 16-byte load of A");
// A task whose group has one row (every group at one token) takes a pass of its own: one
// accumulator set instead of kGemvRows, and twice the k rows (row-major) in flight.
constexpr int kGemvRowOneRowUnroll = 2 * kGemvRowUnroll;

// How one launch is cut: K into k_splits slices of k_slice elements (the last may be short),
// N into col_blocks blocks of block_cols columns, over `grid` persistent CTAs.
struct GemvPlan {
  int k_splits;
  int k_slice;
  int block_cols;
  int col_blocks;
  int grid;
};

struct GemvArgs {
  const __nv_bfloat16* a;
  const __nv_bfloat16* b;
  __nv_bfloat16* d;
  const int32_t* offsets;
  int32_t* errors;  // the op's kOffsetsErrorKinds words, or nullptr
  int64_t b_group_stride;
  int groups;
  int m_total;
  int n;
  int k;
  GemvPlan plan;
};

// The groups with rows, in group order: id, first row, row count.
struct GemvGroupList {
  int count;
  int group[kGemvMaxActive];
  int start[kGemvMaxActive];
  int rows[kGemvMaxActive];
};

__device__ __forceinline__ float gemv_silu_mul(float gate, float up) {
  return gate / (1.0f + __expf(-gate)) * up;
}

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// How the kernels load the weights, which a call reads once: as any load, or as streaming
// data (ld.global.cs: evict-first in L1 and L2; an L2 evict_first policy timed the same).
// An evict-first line is the first one L2 replaces, so weights streaming through evict each
// other rather than the lines other kernels left; a modified line must be written back to HBM
// before it is replaced, which takes bandwidth from the stream. gemv_weight_load picks.
enum class GemvLoad : int { kPlain = 0, kStreaming = 1 };

// The weight bytes up to which a call loads them as streaming data. Measured on an H100
// (benchmarks/micro/gemv_decode.cu, L2 full of modified lines, docs/moe_ops.md): streaming
// loads took 8-15% off the one-token GEMMs of 50-84 MB of weights, 1-3.5% off 168-235 MB,
// and added 1.4-3.9% to 352-671 MB; with a clean L2 all within 4%, most within 1%.
constexpr int64_t kGemvStreamingMaxBytes = int64_t{256} << 20;

// The load for a call that reads at most `active` experts' n x k bf16 weights.
inline GemvLoad gemv_weight_load(int64_t active, int64_t n, int64_t k) {
  return active * n * k * 2 <= kGemvStreamingMaxBytes ? GemvLoad::kStreaming : GemvLoad::kPlain;
}

template <GemvLoad L>
__device__ __forceinline__ uint4 load_weight16(const __nv_bfloat16* p) {
  if constexpr (L == GemvLoad::kStreaming) {
    return __ldcs(reinterpret_cast<const uint4*>(p));
  } else {
    return load16(p);
  }
}

// Builds `list` from the offsets (every thread of the CTA calls it) and, in CTA 0, reports
// what is invalid. Chunks of 256 groups: a running max clamps them as the checked setup does,
// a running count places the groups with rows.
inline __device__ void gemv_build_list(const GemvArgs& p, GemvGroupList& list) {
  using MaxScan = cub::BlockScan<int32_t, kGemvThreads>;
  using SumScan = cub::BlockScan<int, kGemvThreads>;
  __shared__ union {
    typename MaxScan::TempStorage max;
    typename SumScan::TempStorage sum;
  } scan;
  int32_t carry = 0;  // max(0, offsets of the chunks before)
  int placed = 0;     // groups with rows in the chunks before
  const bool reports = p.errors != nullptr && blockIdx.x == 0;
  for (int first = 0; first < p.groups; first += kGemvThreads) {
    const int g = first + static_cast<int>(threadIdx.x);
    const bool mine = g < p.groups;
    const int32_t offset = mine ? p.offsets[g] : INT32_MIN;
    int32_t before = 0;
    int32_t chunk_max = 0;
    MaxScan(scan.max).ExclusiveScan(offset, before, carry, cuda::maximum<>{}, chunk_max);
    __syncthreads();
    carry = chunk_max > carry ? chunk_max : carry;
    const int start = before < p.m_total ? before : p.m_total;
    const int last = offset > before ? offset : before;
    const int end = last < p.m_total ? last : p.m_total;
    const int has_rows = mine && end > start ? 1 : 0;
    int slot = 0;
    int chunk_count = 0;
    SumScan(scan.sum).ExclusiveSum(has_rows, slot, chunk_count);
    __syncthreads();
    slot += placed;
    if (has_rows && slot < kGemvMaxActive) {
      list.group[slot] = g;
      list.start[slot] = start;
      list.rows[slot] = end - start;
    }
    placed += chunk_count;
    if (reports && mine) {
      if (offset < 0) {
        groups::report(p.errors, OffsetsError::kNegative);
      }
      if (offset > p.m_total) {
        groups::report(p.errors, OffsetsError::kPastEnd);
      }
      if (g > 0 && offset < p.offsets[g - 1]) {
        groups::report(p.errors, OffsetsError::kDecreasing);
      }
    }
  }
  if (threadIdx.x == 0) {
    list.count = placed < kGemvMaxActive ? placed : kGemvMaxActive;
  }
  __syncthreads();
}

// Writes the block's sums out of `sums` [kGemvRows][cols] (rows r0.. of the group), the
// SiLU-and-mul of column pairs with SiluMul.
template <bool SiluMul>
__device__ __forceinline__ void gemv_store(const float* sums, int cols, int rows, int col0,
                                           int n, __nv_bfloat16* d) {
  const int n_out = SiluMul ? n / 2 : n;
  for (int i = static_cast<int>(threadIdx.x); i < rows * cols; i += kGemvThreads) {
    const int r = i / cols;
    const int c = i % cols;
    const int gc = col0 + c;
    if (gc >= n) {
      continue;
    }
    if constexpr (SiluMul) {
      if ((c & 1) == 0) {
        d[static_cast<int64_t>(r) * n_out + gc / 2] =
            __float2bfloat16(gemv_silu_mul(sums[r * cols + c], sums[r * cols + c + 1]));
      }
    } else {
      d[static_cast<int64_t>(r) * n_out + gc] = __float2bfloat16(sums[r * cols + c]);
    }
  }
}

// One pass of a K-major warp: rows 0..R-1 (the first `rows` of them real) of A against the
// warp's two columns, this lane's k from k_first in steps of kGemvColStep up to k_end, in
// ascending k (so R = 1 sums exactly as the R = kGemvRows pass does for its first row).
template <int R, int U, GemvLoad L>
__device__ __forceinline__ void gemv_colb_pass(const __nv_bfloat16* b0, const __nv_bfloat16* b1,
                                               const __nv_bfloat16* a, int k, int rows,
                                               int k_first, int k_end, float (&acc0)[kGemvRows],
                                               float (&acc1)[kGemvRows]) {
  for (int k0 = k_first; k0 < k_end; k0 += kGemvColStep * U) {
    uint4 v0[U];
    uint4 v1[U];
    uint4 xa[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = k0 + u * kGemvColStep;
      const bool in = kk < k_end;
      v0[u] = in ? load_weight16<L>(b0 + kk) : make_uint4(0, 0, 0, 0);
      v1[u] = in ? load_weight16<L>(b1 + kk) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        xa[r][u] = in && r < rows ? load16(a + static_cast<int64_t>(r) * k + kk)
                                  : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float w0[8];
      float w1[8];
      bf16x8_to_float(v0[u], w0);
      bf16x8_to_float(v1[u], w1);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float x[8];
        bf16x8_to_float(xa[r][u], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          acc0[r] = fmaf(x[e], w0[e], acc0[r]);
          acc1[r] = fmaf(x[e], w1[e], acc1[r]);
        }
      }
    }
  }
}

// Row-major B, R rows of A (the first `rows` real) against this lane's 8 columns over
// [k_begin, k_end), U k rows of B in flight; k ascending, so every R and U sums a row in the
// same order. (k_end - k_begin) is a multiple of 8 (k_slice and K are); a U = 16 pass ends
// with one 8-row step when it is not a multiple of 16.
template <int R, int U, GemvLoad L>
__device__ __forceinline__ void gemv_rowb_steps(const __nv_bfloat16* b, int n,
                                                const __nv_bfloat16* a, int k, int rows,
                                                int& k0, int k_end, float (&acc)[kGemvRows][8]) {
  static_assert(U % 8 == 0, "A comes in 16-byte loads of 8 k");
  for (; k0 + U <= k_end; k0 += U) {
    uint4 wv[U];
    uint4 xa[R][U / 8];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      wv[u] = load_weight16<L>(b + static_cast<int64_t>(k0 + u) * n);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int h = 0; h < U / 8; ++h) {
        xa[r][h] = r < rows ? load16(a + static_cast<int64_t>(r) * k + k0 + 8 * h)
                            : make_uint4(0, 0, 0, 0);
      }
    }
    float x[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int h = 0; h < U / 8; ++h) {
        float part[8];
        bf16x8_to_float(xa[r][h], part);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          x[r][8 * h + e] = part[e];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float w[8];
      bf16x8_to_float(wv[u], w);
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          acc[r][c] = fmaf(x[r][u], w[c], acc[r][c]);
        }
      }
    }
  }
}

// K-major B: warp (column pair cp, K slice s) of the block; partial[s][r][c].
template <bool SiluMul, GemvLoad L>
__global__ void __launch_bounds__(kGemvThreads) gemv_colb_kernel(GemvArgs p) {
  __shared__ GemvGroupList list;
  // [k_splits][kGemvRows][block_cols] with k_splits * block_cols = 2 * kGemvWarps, then the
  // block's sums [kGemvRows][block_cols].
  __shared__ float partial[kGemvRows * 2 * kGemvWarps];
  __shared__ float sums[kGemvRows * 2 * kGemvWarps];
  gemv_build_list(p, list);
  const GemvPlan plan = p.plan;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int split = warp % plan.k_splits;
  const int pair = warp / plan.k_splits;
  const int k_begin = split * plan.k_slice;
  const int k_end = k_begin + plan.k_slice < p.k ? k_begin + plan.k_slice : p.k;
  const int tasks = list.count * plan.col_blocks;
  for (int task = static_cast<int>(blockIdx.x); task < tasks; task += plan.grid) {
    const int slot = task / plan.col_blocks;
    const int col0 = (task % plan.col_blocks) * plan.block_cols;
    const int g = list.group[slot];
    const int m = list.rows[slot];
    const int col = col0 + 2 * pair;  // columns col, col + 1
    const bool live = col < p.n;
    const __nv_bfloat16* b0 = p.b + g * p.b_group_stride + static_cast<int64_t>(col) * p.k;
    const __nv_bfloat16* b1 = b0 + p.k;
    for (int r0 = 0; r0 < m; r0 += kGemvRows) {
      const int rows = m - r0 < kGemvRows ? m - r0 : kGemvRows;
      const __nv_bfloat16* a = p.a + static_cast<int64_t>(list.start[slot] + r0) * p.k;
      float acc0[kGemvRows];
      float acc1[kGemvRows];
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        acc0[r] = 0.f;
        acc1[r] = 0.f;
      }
      if (live) {
        const int k_first = k_begin + lane * 8;
        if (m == 1) {
          gemv_colb_pass<1, kGemvColUnroll, L>(b0, b1, a, p.k, 1, k_first, k_end, acc0, acc1);
        } else {
          gemv_colb_pass<kGemvRows, kGemvColUnroll, L>(b0, b1, a, p.k, rows, k_first, k_end,
                                                       acc0, acc1);
        }
      }
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
          acc0[r] += __shfl_xor_sync(0xffffffffu, acc0[r], offset);
          acc1[r] += __shfl_xor_sync(0xffffffffu, acc1[r], offset);
        }
      }
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kGemvRows; ++r) {
          float* row = partial + (split * kGemvRows + r) * plan.block_cols + 2 * pair;
          row[0] = acc0[r];
          row[1] = acc1[r];
        }
      }
      __syncthreads();
      for (int i = static_cast<int>(threadIdx.x); i < kGemvRows * plan.block_cols;
           i += kGemvThreads) {
        float sum = 0.f;
        for (int s = 0; s < plan.k_splits; ++s) {  // in slice order
          sum += partial[s * kGemvRows * plan.block_cols + i];
        }
        sums[i] = sum;
      }
      __syncthreads();
      gemv_store<SiluMul>(sums, plan.block_cols, rows, col0, p.n,
                          p.d + static_cast<int64_t>(list.start[slot] + r0) *
                                    (SiluMul ? p.n / 2 : p.n));
      __syncthreads();  // partial and sums are reused by the next pass
    }
  }
}

// Row-major B: lane group (column group cg, K slice s) of the block; partial[s][r][c].
template <bool SiluMul, GemvLoad L>
__global__ void __launch_bounds__(kGemvThreads) gemv_rowb_kernel(GemvArgs p) {
  __shared__ GemvGroupList list;
  // [k_splits][kGemvRows][block_cols] with k_splits * block_cols = 64 * 32; the block's sums
  // go back into its first slice.
  // 16-byte aligned: the lanes store their 8 columns as two float4s (a float array alone is
  // placed at any 4-byte boundary, after `list` here).
  __shared__ __align__(16) float partial[kGemvRows * kGemvRowCols * kGemvRowGroups];
  gemv_build_list(p, list);
  const GemvPlan plan = p.plan;
  const int lane_group = static_cast<int>(threadIdx.x) / kGemvRowLanes;
  const int sub = static_cast<int>(threadIdx.x) % kGemvRowLanes;
  const int split = lane_group % plan.k_splits;
  const int cg = lane_group / plan.k_splits;
  const int k_begin = split * plan.k_slice;
  const int k_end = k_begin + plan.k_slice < p.k ? k_begin + plan.k_slice : p.k;
  const int cols = plan.block_cols;
  const int tasks = list.count * plan.col_blocks;
  for (int task = static_cast<int>(blockIdx.x); task < tasks; task += plan.grid) {
    const int slot = task / plan.col_blocks;
    const int col0 = (task % plan.col_blocks) * cols;
    const int g = list.group[slot];
    const int m = list.rows[slot];
    const int lc = cg * kGemvRowCols + sub * 8;  // this lane's 8 columns within the block
    const bool live = col0 + lc < p.n;
    const __nv_bfloat16* b = p.b + g * p.b_group_stride + col0 + lc;
    for (int r0 = 0; r0 < m; r0 += kGemvRows) {
      const int rows = m - r0 < kGemvRows ? m - r0 : kGemvRows;
      const __nv_bfloat16* a = p.a + static_cast<int64_t>(list.start[slot] + r0) * p.k;
      float acc[kGemvRows][8];
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          acc[r][c] = 0.f;
        }
      }
      if (live) {
        int k0 = k_begin;
        if (m == 1) {
          gemv_rowb_steps<1, kGemvRowOneRowUnroll, L>(b, p.n, a, p.k, 1, k0, k_end, acc);
          gemv_rowb_steps<1, kGemvRowUnroll, L>(b, p.n, a, p.k, 1, k0, k_end, acc);
        } else {
          gemv_rowb_steps<kGemvRows, kGemvRowUnroll, L>(b, p.n, a, p.k, rows, k0, k_end, acc);
        }
      }
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        float4* dst =
            reinterpret_cast<float4*>(partial + (split * kGemvRows + r) * cols + lc);
        dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      }
      __syncthreads();
      for (int i = static_cast<int>(threadIdx.x); i < kGemvRows * cols; i += kGemvThreads) {
        float sum = partial[i];
        for (int s = 1; s < plan.k_splits; ++s) {  // in slice order
          sum += partial[s * kGemvRows * cols + i];
        }
        partial[i] = sum;  // each i is read and written by this thread only
      }
      __syncthreads();
      gemv_store<SiluMul>(partial, cols, rows, col0, p.n,
                          p.d + static_cast<int64_t>(list.start[slot] + r0) *
                                    (SiluMul ? p.n / 2 : p.n));
      __syncthreads();  // partial is reused by the next pass
    }
  }
}

// CTAs of this kernel resident on one SM (the occupancy calculator, asked once a process).
template <bool KMajor, bool SiluMul, GemvLoad L>
int gemv_ctas_per_sm() {
  static const int ctas = [] {
    int blocks = 0;
    const cudaError_t err =
        KMajor ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                     &blocks, gemv_colb_kernel<SiluMul, L>, kGemvThreads, 0)
               : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                     &blocks, gemv_rowb_kernel<SiluMul, L>, kGemvThreads, 0);
    return err == cudaSuccess && blocks > 0 ? blocks : 1;
  }();
  return ctas;
}

// The plan of one split of K: `splits` slices, the column blocks the CTA's remaining thread
// groups cover, and a grid of at most `slots` persistent CTAs. `fill` receives the fraction of
// the last wave of tasks that is busy (all of it when the tasks divide evenly).
// `active` = min(groups, m_total) bounds the groups with rows.
inline GemvPlan gemv_plan_split(bool k_major, int64_t active, int64_t n, int64_t k, int slots,
                                int splits, double* fill) {
  const int units = k_major ? kGemvWarps : kGemvRowGroups;  // threads' groups that split K
  const int unit_cols = k_major ? 2 : kGemvRowCols;
  const int64_t slice_step = k_major ? kGemvColStep : kGemvRowUnroll;
  const int block_cols = (units / splits) * unit_cols;
  const int64_t col_blocks = (n + block_cols - 1) / block_cols;
  const int64_t tasks = active * col_blocks;
  double f = 1.0;
  if (tasks < slots) {
    f = static_cast<double>(tasks) / slots;
  } else if (tasks % slots != 0) {
    const double waves = static_cast<double>(tasks) / slots;
    f = waves / static_cast<double>((tasks + slots - 1) / slots);
  }
  if (fill != nullptr) {
    *fill = f;
  }
  const int64_t raw = (k + splits - 1) / splits;
  GemvPlan plan{};
  plan.k_splits = splits;
  plan.k_slice = static_cast<int>((raw + slice_step - 1) / slice_step * slice_step);
  plan.block_cols = block_cols;
  plan.col_blocks = static_cast<int>(col_blocks);
  plan.grid = static_cast<int>(tasks < slots ? (tasks > 0 ? tasks : 1) : slots);
  return plan;
}

// The largest split of K a launch may take: every slice keeps a thread's loads in flight (at
// least one unrolled step each), and splits divide the CTA's thread groups.
inline int gemv_max_splits(bool k_major, int64_t k) {
  const int units = k_major ? kGemvWarps : kGemvRowGroups;
  const int64_t min_slice = k_major ? kGemvColStep * kGemvColUnroll : 2 * kGemvRowUnroll;
  int splits = 1;
  while (splits * 2 <= units && k / (splits * 2) >= min_slice) {
    splits *= 2;
  }
  return splits;
}

// The split of K and the grid, from the shape alone (so a config's result never depends on
// anything but its arguments). Among the splits gemv_max_splits allows, take the one whose
// tasks fill the resident CTAs best (gemv_plan_split's fill), the smaller split on a tie.
inline GemvPlan gemv_plan(bool k_major, int64_t active, int64_t n, int64_t k, int slots) {
  GemvPlan best{};
  double best_fill = -1.0;
  const int most = gemv_max_splits(k_major, k);
  for (int splits = 1; splits <= most; splits *= 2) {
    double fill = 0.0;
    const GemvPlan plan = gemv_plan_split(k_major, active, n, k, slots, splits, &fill);
    if (fill > best_fill + 1e-9) {
      best_fill = fill;
      best = plan;
    }
  }
  return best;
}

// CTAs of this layout's kernel that can be resident on the device at once.
template <bool KMajor, bool SiluMul, GemvLoad L>
int gemv_slots(int sm_count) {
  return gemv_ctas_per_sm<KMajor, SiluMul, L>() * sm_count;
}

// Launches the kernel of this layout. False when it cannot take these groups (more groups
// with rows than its list holds): the caller then runs a CUTLASS tile.
inline bool gemv_fits(int64_t groups, int64_t m_total) {
  return (m_total < groups ? m_total : groups) <= kGemvMaxActive;
}

// Launches the kernel of this layout with `plan` (gemv_plan's, or another split's for a
// benchmark) and the weight load L (gemv_weight_load's, or another for a benchmark).
template <bool KMajor, bool SiluMul, GemvLoad L>
cudaError_t launch_gemv_plan(const GroupedGemmArgs& args, int32_t* errors, const GemvPlan& plan,
                             cudaStream_t stream) {
  GemvArgs p;
  p.a = static_cast<const __nv_bfloat16*>(args.a);
  p.b = static_cast<const __nv_bfloat16*>(args.b);
  p.d = static_cast<__nv_bfloat16*>(args.d);
  p.offsets = args.offsets;
  p.errors = errors;
  p.b_group_stride = args.b_group_stride;
  p.groups = static_cast<int>(args.groups);
  p.m_total = static_cast<int>(args.m_total);
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.plan = plan;
  if constexpr (KMajor) {
    gemv_colb_kernel<SiluMul, L><<<p.plan.grid, kGemvThreads, 0, stream>>>(p);
  } else {
    gemv_rowb_kernel<SiluMul, L><<<p.plan.grid, kGemvThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// gemv_plan's split for the CTAs of the kernel with load L that fit at once, launched.
template <bool KMajor, bool SiluMul, GemvLoad L>
cudaError_t launch_gemv_load(const GroupedGemmArgs& args, int32_t* errors, int64_t active,
                             int sm_count, cudaStream_t stream) {
  const GemvPlan plan =
      gemv_plan(KMajor, active, args.n, args.k, gemv_slots<KMajor, SiluMul, L>(sm_count));
  return launch_gemv_plan<KMajor, SiluMul, L>(args, errors, plan, stream);
}

template <bool KMajor, bool SiluMul>
cudaError_t launch_gemv(const GroupedGemmArgs& args, int32_t* errors, int sm_count,
                        cudaStream_t stream) {
  const int64_t active = args.m_total < args.groups ? args.m_total : args.groups;
  if (gemv_weight_load(active, args.n, args.k) == GemvLoad::kStreaming) {
    return launch_gemv_load<KMajor, SiluMul, GemvLoad::kStreaming>(args, errors, active,
                                                                  sm_count, stream);
  }
  return launch_gemv_load<KMajor, SiluMul, GemvLoad::kPlain>(args, errors, active, sm_count,
                                                             stream);
}

}  // namespace moe_ops::gemm
