// The grouped GEMM for a few rows an expert (decode): a weight-streaming kernel instead of
// CUTLASS's tiles, which at one or two rows an expert leave most of a tile's MMA idle and,
// with few experts active, most SMs without a tile.
//
// It runs after the same setup kernel as the CUTLASS path (setup_groups or
// setup_groups_checked, so untrusted offsets are clamped and reported the same way) and
// reads each group's A/B/D pointers and row count from those arrays. Grid: (column tiles,
// slots), slots = min(groups, M): at most that many groups have rows, and CTA row `s` takes
// the s-th group with rows (found by a scan of the row counts), or exits. A grid over every
// group would be mostly CTAs that load a row count of 0 and exit: 12,288 of them for one
// token through 128 experts, which cost more than streaming the 8 experts' weights. Each CTA
// reads its column tile of B[g] once for every kGemvRows rows of the group (once in decode),
// so the B traffic is the minimum; A (a few rows) comes through L1/L2.
//
// - B row-major (k x n, N contiguous): a thread holds 8 adjacent columns (one 16-byte load
//   per k) for kGemvRows rows; the 8 lanes of a k row cover 64 columns (128 contiguous
//   bytes), the warp's 4 k rows and the CTA's 8 warps split K; the partial sums meet in
//   shared memory.
// - B K-major (stored n x k, K contiguous): a warp holds 2 adjacent columns, its lanes read
//   16 bytes of K each, and a warp reduction ends the dot products; 8 warps, 16 columns.
//
// Accumulation is fp32, in another order than CUTLASS's (so not bit-identical to
// torch._grouped_mm); each output is rounded once. SiLU-and-mul takes columns 2j and 2j+1
// (adjacent in both layouts) into output column j.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <cute/tensor.hpp>

#include "moe.h"

namespace moe_ops::gemm {

constexpr int kGemvRows = 4;      // rows of A a pass over the column tile
constexpr int kGemvThreads = 256;  // 8 warps
constexpr int kGemvWarps = kGemvThreads / 32;
// 16-byte loads of B a thread has in flight (row-major; half as many steps of two columns
// K-major): 32 KB a CTA, so that the few CTAs of one expert keep HBM busy.
constexpr int kGemvUnroll = 8;
// Row-major B: lanes a k row, columns a CTA (8 lanes x 8), k rows an iteration (4 a warp x
// 8 warps).
constexpr int kGemvRowLanes = 8;
constexpr int kGemvRowCols = 8 * kGemvRowLanes;
constexpr int kGemvRowKs = (32 / kGemvRowLanes) * kGemvWarps;
// K-major B: columns a CTA (2 a warp).
constexpr int kGemvColCols = 2 * kGemvWarps;
static_assert(kGemvColCols == moe_ops::kGemvColumnsPerCta, "moe.h's rule counts these CTAs");

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

// The group of CTA row `slot`: the slot-th group (from 0) with rows, or -1 when fewer groups
// have rows. One pass of the CTA over the row counts (256 a round, a count per thread).
template <class Shape>
__device__ __forceinline__ int gemv_group_of_slot(const Shape* shapes, int groups, int slot) {
  __shared__ int warp_counts[kGemvWarps];
  __shared__ int found;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    found = -1;
  }
  int before = 0;  // groups with rows in the earlier rounds
  for (int base = 0; base < groups; base += kGemvThreads) {
    const int g = base + static_cast<int>(threadIdx.x);
    const bool rows = g < groups && cute::get<0>(shapes[g]) > 0;
    const unsigned ballot = __ballot_sync(0xffffffffu, rows);
    if (lane == 0) {
      warp_counts[warp] = __popc(ballot);
    }
    __syncthreads();
    int rank = before + __popc(ballot & ((1u << lane) - 1u));
    int round = 0;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) {
      rank += w < warp ? warp_counts[w] : 0;
      round += warp_counts[w];
    }
    if (rows && rank == slot) {
      found = g;
    }
    before += round;
    __syncthreads();  // `found` is written; warp_counts may be rewritten
    if (found >= 0 || before > slot) {
      break;  // uniform: every thread read the same `found` and `before`
    }
  }
  return found;
}

// Row-major B[g] (k x n); the group's row count comes from the setup's shapes.
template <bool SiluMul, class Shape>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_rowb_kernel(const __nv_bfloat16* const* a_ptrs, const __nv_bfloat16* const* b_ptrs,
                     __nv_bfloat16* const* d_ptrs, const Shape* shapes, int groups, int n,
                     int k) {
  const int g = gemv_group_of_slot(shapes, groups, static_cast<int>(blockIdx.y));
  if (g < 0) {
    return;
  }
  const int m = cute::get<0>(shapes[g]);
  constexpr int kKLanes = kGemvThreads / kGemvRowLanes;  // threads on distinct k rows
  __shared__ float partial[kKLanes][kGemvRows][kGemvRowCols + 1];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int sub = lane % kGemvRowLanes;  // which 8 columns of the tile
  const int col = blockIdx.x * kGemvRowCols + sub * 8;  // this thread's 8 columns
  const int krow = warp * (32 / kGemvRowLanes) + lane / kGemvRowLanes;  // its first k
  const bool live = col < n;
  const __nv_bfloat16* a = a_ptrs[g];
  const __nv_bfloat16* b = b_ptrs[g];
  const int n_out = SiluMul ? n / 2 : n;
  __nv_bfloat16* d = d_ptrs[g];
  for (int r0 = 0; r0 < m; r0 += kGemvRows) {
    float acc[kGemvRows][8];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        acc[r][c] = 0.f;
      }
    }
    if (live) {
      for (int k0 = krow; k0 < k; k0 += kGemvRowKs * kGemvUnroll) {
        uint4 wv[kGemvUnroll];  // every load of the step issued before the first is used
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int kk = k0 + u * kGemvRowKs;
          wv[u] = kk < k ? *reinterpret_cast<const uint4*>(b + static_cast<int64_t>(kk) * n + col)
                         : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kGemvUnroll; ++u) {
          const int kk = k0 + u * kGemvRowKs;
          if (kk < k) {
            float w[8];
            bf16x8_to_float(wv[u], w);
#pragma unroll
            for (int r = 0; r < kGemvRows; ++r) {
              if (r0 + r < m) {
                const float x = __bfloat162float(a[static_cast<int64_t>(r0 + r) * k + kk]);
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                  acc[r][c] = fmaf(x, w[c], acc[r][c]);
                }
              }
            }
          }
        }
      }
    }
    // The 32 k-lanes of the CTA (4 a warp x 8 warps) meet: thread (k-lane, column group).
    const int klane = threadIdx.x / kGemvRowLanes;
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        partial[klane][r][sub * 8 + c] = acc[r][c];
      }
    }
    __syncthreads();
    // kGemvRows x 64 sums, one a thread.
    static_assert(kGemvRows * kGemvRowCols == kGemvThreads, "one sum a thread");
    if (threadIdx.x < kGemvRows * kGemvRowCols) {
      const int r = threadIdx.x / kGemvRowCols;
      const int c = threadIdx.x % kGemvRowCols;
      float sum = 0.f;
      for (int l = 0; l < kKLanes; ++l) {
        sum += partial[l][r][c];
      }
      partial[0][r][c] = sum;  // each (r, c) is read and written by this thread only
    }
    __syncthreads();
    if (threadIdx.x < kGemvRows * kGemvRowCols) {
      const int r = threadIdx.x / kGemvRowCols;
      const int c = threadIdx.x % kGemvRowCols;
      const int gc = blockIdx.x * kGemvRowCols + c;
      if (r0 + r < m && gc < n) {
        if constexpr (SiluMul) {
          if ((c & 1) == 0) {
            d[static_cast<int64_t>(r0 + r) * n_out + gc / 2] =
                __float2bfloat16(gemv_silu_mul(partial[0][r][c], partial[0][r][c + 1]));
          }
        } else {
          d[static_cast<int64_t>(r0 + r) * n_out + gc] = __float2bfloat16(partial[0][r][c]);
        }
      }
    }
    __syncthreads();  // `partial` is reused by the next pass
  }
}

// K-major B[g] (stored n x k): a warp, two adjacent columns.
template <bool SiluMul, class Shape>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_colb_kernel(const __nv_bfloat16* const* a_ptrs, const __nv_bfloat16* const* b_ptrs,
                     __nv_bfloat16* const* d_ptrs, const Shape* shapes, int groups, int n,
                     int k) {
  const int g = gemv_group_of_slot(shapes, groups, static_cast<int>(blockIdx.y));
  if (g < 0) {
    return;
  }
  const int m = cute::get<0>(shapes[g]);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int col = blockIdx.x * kGemvColCols + warp * 2;  // columns col, col + 1
  if (col >= n) {
    return;  // no barrier below: a warp may leave
  }
  const __nv_bfloat16* a = a_ptrs[g];
  const __nv_bfloat16* b0 = b_ptrs[g] + static_cast<int64_t>(col) * k;
  const __nv_bfloat16* b1 = b0 + k;
  const int n_out = SiluMul ? n / 2 : n;
  __nv_bfloat16* d = d_ptrs[g];
  for (int r0 = 0; r0 < m; r0 += kGemvRows) {
    float acc0[kGemvRows];
    float acc1[kGemvRows];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      acc0[r] = 0.f;
      acc1[r] = 0.f;
    }
    for (int k0 = lane * 8; k0 < k; k0 += 32 * 8 * kGemvUnroll / 2) {
      uint4 v0[kGemvUnroll / 2];  // every load of the step issued before the first is used
      uint4 v1[kGemvUnroll / 2];
#pragma unroll
      for (int u = 0; u < kGemvUnroll / 2; ++u) {
        const int kk = k0 + u * 32 * 8;
        v0[u] = kk < k ? *reinterpret_cast<const uint4*>(b0 + kk) : make_uint4(0, 0, 0, 0);
        v1[u] = kk < k ? *reinterpret_cast<const uint4*>(b1 + kk) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll / 2; ++u) {
        const int kk = k0 + u * 32 * 8;
        if (kk < k) {
          float w0[8];
          float w1[8];
          bf16x8_to_float(v0[u], w0);
          bf16x8_to_float(v1[u], w1);
#pragma unroll
          for (int r = 0; r < kGemvRows; ++r) {
            if (r0 + r < m) {
              float x[8];
              bf16x8_to_float(
                  *reinterpret_cast<const uint4*>(a + static_cast<int64_t>(r0 + r) * k + kk), x);
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                acc0[r] = fmaf(x[e], w0[e], acc0[r]);
                acc1[r] = fmaf(x[e], w1[e], acc1[r]);
              }
            }
          }
        }
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
    if (lane < kGemvRows && r0 + lane < m) {
      float v0 = acc0[0];
      float v1 = acc1[0];
#pragma unroll
      for (int r = 1; r < kGemvRows; ++r) {
        if (lane == r) {
          v0 = acc0[r];
          v1 = acc1[r];
        }
      }
      __nv_bfloat16* out = d + static_cast<int64_t>(r0 + lane) * n_out;
      if constexpr (SiluMul) {
        out[col / 2] = __float2bfloat16(gemv_silu_mul(v0, v1));
      } else {
        out[col] = __float2bfloat16(v0);
        out[col + 1] = __float2bfloat16(v1);
      }
    }
  }
}

// Launches the kernel of this layout over (column tiles, slots), after the setup kernel;
// `m_total` (the rows of A) bounds the groups that can have rows.
template <bool KMajor, bool SiluMul, class Shape>
cudaError_t launch_gemv(const void* const* a, const void* const* b, void* const* d,
                        const Shape* shapes, int64_t groups, int64_t m_total, int64_t n,
                        int64_t k, cudaStream_t stream) {
  const auto* ap = reinterpret_cast<const __nv_bfloat16* const*>(a);
  const auto* bp = reinterpret_cast<const __nv_bfloat16* const*>(b);
  auto* const* dp = reinterpret_cast<__nv_bfloat16* const*>(d);
  const int cols = KMajor ? kGemvColCols : kGemvRowCols;
  const int64_t slots = m_total < groups ? m_total : groups;
  const dim3 grid(static_cast<unsigned>((n + cols - 1) / cols), static_cast<unsigned>(slots));
  if constexpr (KMajor) {
    gemv_colb_kernel<SiluMul, Shape><<<grid, kGemvThreads, 0, stream>>>(
        ap, bp, dp, shapes, static_cast<int>(groups), static_cast<int>(n), static_cast<int>(k));
  } else {
    gemv_rowb_kernel<SiluMul, Shape><<<grid, kGemvThreads, 0, stream>>>(
        ap, bp, dp, shapes, static_cast<int>(groups), static_cast<int>(n), static_cast<int>(k));
  }
  return cudaGetLastError();
}

}  // namespace moe_ops::gemm
