// The row kernels of RMSNorm: the 16-byte forward path, a row in registers a group of
// threads, on a grid of a CTA per group of rows.
// Part of rmsnorm.cu (see its opening comment); include from that translation unit only.
#pragma once

#include "rmsnorm_device.cuh"

namespace llm_ops::rmsnorm {
namespace {

// ---- Row kernels: the 16-byte forward path ------------------------------------------------
//
// One row per group of threads, the whole row held in registers: each thread issues all its
// 16-byte loads of x (and residual) and of w before the reduction, so a row's bytes are in
// flight at once. The grid is not persistent (a group a row, blockDim.y rows a CTA): many
// small CTAs an SM keep HBM busy and the scheduler overlaps one CTA's stores with another's
// loads. x and residual are read once, so their loads skip L1 (L1::no_allocate); w is read
// by every row and stays cached.

// Threads a CTA of the row kernel may have: fewer as a thread holds more (its registers).
template <int NV>
constexpr int kRowsMaxThreads = NV <= 2 ? 1024 : (NV == 4 ? 512 : 256);
// With OCCUPY, CTAs an SM must hold at the largest CTA: caps the registers (32 a thread up to
// 2 vectors, 64 above) so that more rows are in flight an SM.
template <int NV, bool OCCUPY>
constexpr int kRowsMinBlocks = !OCCUPY ? 1 : (NV <= 2 ? 2 : (NV == 4 ? 2 : 4));

template <typename T, int NV, bool RESIDUAL, int HINT, bool OCCUPY>
__global__ void __launch_bounds__(kRowsMaxThreads<NV>, kRowsMinBlocks<NV, OCCUPY>)
    forward_rows_kernel(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd_out,
                        const T* __restrict__ x, const T* __restrict__ residual,
                        const T* __restrict__ w, int64_t rows, int hidden, float eps) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  constexpr int VEC = kVec16<T>;
  using V = Vec<T, VEC>;
  __shared__ float partials[32];
  const int per_row = static_cast<int>(blockDim.x);  // threads a row, a multiple of 32
  const int nvec = hidden / VEC;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const int64_t offset = row * hidden;
  const float inv_hidden = 1.f / static_cast<float>(hidden);

  V xr[NV];
  V rr[NV];
  V wr[NV];
  if (live) {
    const V* x_row = reinterpret_cast<const V*>(x + offset);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * per_row;
      if (j < nvec) {
        xr[k] = load_once<HINT>(x_row + j);
      }
    }
    if constexpr (RESIDUAL) {
      const V* r_row = reinterpret_cast<const V*>(residual + offset);
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int j = threadIdx.x + k * per_row;
        if (j < nvec) {
          rr[k] = load_once<HINT>(r_row + j);
        }
      }
    }
  }
  const V* w_vec = reinterpret_cast<const V*>(w);
  const auto load_w = [&] {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * per_row;
      if (j < nvec) {
        wr[k] = w_vec[j];
      }
    }
  };
  // w is read by every row (cached); with the registers capped it is loaded after the
  // reduction, so that it holds no registers while x is in flight.
  if constexpr (!OCCUPY) {
    load_w();
  }

  float sum_sq = 0.f;
  if (live) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * per_row;
      if (j < nvec) {
        if constexpr (RESIDUAL) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            xr[k].v[e] = from_float<T>(to_float(xr[k].v[e]) + to_float(rr[k].v[e]));
          }
          store_once<HINT>(reinterpret_cast<V*>(h_out + offset) + j, xr[k]);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float f = to_float(xr[k].v[e]);
          sum_sq += f * f;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    opaque(xr[k]);
  }
  sum_sq = warp_sum(sum_sq);
  const int warps_per_row = per_row >> 5;
  if (warps_per_row > 1) {  // the same for the whole CTA: every thread reaches the barrier
    const int lane = threadIdx.x & 31;
    const int first = threadIdx.y * warps_per_row;
    if (lane == 0) {
      partials[first + (threadIdx.x >> 5)] = sum_sq;
    }
    __syncthreads();
    sum_sq = warp_sum(lane < warps_per_row ? partials[first + lane] : 0.f);
  }
  if (!live) {
    return;
  }
  const float rstd = rsqrtf(sum_sq * inv_hidden + eps);
  if (rstd_out != nullptr && threadIdx.x == 0) {
    rstd_out[row] = rstd;
  }
  if constexpr (OCCUPY) {
    load_w();
  }
  V* y_row = reinterpret_cast<V*>(y + offset);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * per_row;
    if (j < nvec) {
      V out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        out.v[e] = from_float<T>(to_float(xr[k].v[e]) * rstd * to_float(wr[k].v[e]));
      }
      store_once<HINT>(y_row + j, out);
    }
  }
}

}  // namespace
}  // namespace llm_ops::rmsnorm
