// The register kernels of RMSNorm, forward and backward: any row (odd hidden sizes,
// unaligned views), a slice of it in registers, on a persistent grid.
// Part of rmsnorm.cu (see its opening comment); include from that translation unit only.
#pragma once

#include "rmsnorm_device.cuh"

namespace llm_ops::rmsnorm {
namespace {

// A persistent grid: each CTA walks rows with a grid stride and loads row i + 1 into
// registers before it reduces and writes row i, so the memory system always has a row in
// flight per CTA (the loads retire while the CTA waits at the reduction barrier).
template <typename T, int VEC, int NV, bool RESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd_out,
                   const T* __restrict__ x, const T* __restrict__ residual,
                   const T* __restrict__ w, int64_t rows, int hidden, float eps) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  using V = Vec<T, VEC>;
  __shared__ float scratch[2][32];
  const int nvec = hidden / VEC;
  const float inv_hidden = 1.f / static_cast<float>(hidden);

  V wr[NV];
  load_row(wr, reinterpret_cast<const V*>(w), nvec);
  V xr[NV];
  V rr[NV];
  int64_t row = blockIdx.x;
  if (row < rows) {
    load_row(xr, reinterpret_cast<const V*>(x + row * hidden), nvec);
    if constexpr (RESIDUAL) {
      load_row(rr, reinterpret_cast<const V*>(residual + row * hidden), nvec);
    }
  }
  int parity = 0;
  for (; row < rows; row += gridDim.x) {
    const int64_t offset = row * hidden;
    const int64_t next = row + gridDim.x;
    V xn[NV];
    V rn[NV];
    if (next < rows) {
      load_row(xn, reinterpret_cast<const V*>(x + next * hidden), nvec);
      if constexpr (RESIDUAL) {
        load_row(rn, reinterpret_cast<const V*>(residual + next * hidden), nvec);
      }
    }

    float sum_sq = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        if constexpr (RESIDUAL) {
          V h;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            h.v[e] = from_float<T>(to_float(xr[k].v[e]) + to_float(rr[k].v[e]));
            const float v = to_float(h.v[e]);
            sum_sq += v * v;
          }
          reinterpret_cast<V*>(h_out + offset)[j] = h;
          xr[k] = h;  // the row normalised is h
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float v = to_float(xr[k].v[e]);
            sum_sq += v * v;
          }
        }
      }
    }

    const float rstd = rsqrtf(block_sum(sum_sq, scratch[parity]) * inv_hidden + eps);
    parity ^= 1;
    if (rstd_out != nullptr && threadIdx.x == 0) {
      rstd_out[row] = rstd;
    }
    V* y_row = reinterpret_cast<V*>(y + offset);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        V out;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          out.v[e] = from_float<T>(to_float(xr[k].v[e]) * rstd * to_float(wr[k].v[e]));
        }
        y_row[j] = out;
      }
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      xr[k] = xn[k];
      if constexpr (RESIDUAL) {
        rr[k] = rn[k];
      }
    }
  }
}

template <typename T, int VEC, int NV, bool DRESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    backward_kernel(T* __restrict__ dx, float* __restrict__ dw_partial, T* __restrict__ dw_direct,
                    const T* __restrict__ dy, const T* __restrict__ x,
                    const T* __restrict__ w, const float* __restrict__ rstd,
                    const T* __restrict__ dresidual, int64_t rows, int hidden) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  using V = Vec<T, VEC>;
  __shared__ float scratch[2][32];
  // This CTA's share of dw, fp32, NV * VEC values a thread. Each thread owns its values
  // (no barrier needed); the layout [k][e][thread] keeps a warp on distinct banks. Shared
  // memory rather than registers leaves the registers to the rows in flight.
  extern __shared__ float acc[];
  const int nvec = hidden / VEC;
  const float inv_hidden = 1.f / static_cast<float>(hidden);
  const int threads = static_cast<int>(blockDim.x);

  V wr[NV];
  load_row(wr, reinterpret_cast<const V*>(w), nvec);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[(k * VEC + e) * threads + threadIdx.x] = 0.f;
    }
  }

  // As in the forward kernel, row i + 1 is loaded before row i is reduced.
  V xr[NV];
  V dyr[NV];
  int64_t row = blockIdx.x;
  if (row < rows) {
    load_row(xr, reinterpret_cast<const V*>(x + row * hidden), nvec);
    load_row(dyr, reinterpret_cast<const V*>(dy + row * hidden), nvec);
  }
  int parity = 0;
  for (; row < rows; row += gridDim.x) {
    const int64_t offset = row * hidden;
    const int64_t next = row + gridDim.x;
    V xn[NV];
    V dyn[NV];
    if (next < rows) {
      load_row(xn, reinterpret_cast<const V*>(x + next * hidden), nvec);
      load_row(dyn, reinterpret_cast<const V*>(dy + next * hidden), nvec);
    }
    V drr[NV];
    if constexpr (DRESIDUAL) {
      load_row(drr, reinterpret_cast<const V*>(dresidual + offset), nvec);
    }
    const float r = rstd[row];

    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          dot += to_float(dyr[k].v[e]) * to_float(wr[k].v[e]) * to_float(xr[k].v[e]);
        }
      }
    }
    // mean(g * xhat) = r * mean(dy * w * x)
    const float c = block_sum(dot, scratch[parity]) * r * inv_hidden;
    parity ^= 1;

#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
        V out;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float xhat = to_float(xr[k].v[e]) * r;
          const float g = to_float(dyr[k].v[e]);
          float d = r * g * to_float(wr[k].v[e]) - xhat * c * r;
          if constexpr (DRESIDUAL) {
            d += to_float(drr[k].v[e]);
          }
          out.v[e] = from_float<T>(d);
          acc[(k * VEC + e) * threads + threadIdx.x] += g * xhat;
        }
        reinterpret_cast<V*>(dx + offset)[j] = out;
      }
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      xr[k] = xn[k];
      dyr[k] = dyn[k];
    }
  }

  if (dw_direct != nullptr) {  // a grid of one CTA: its share is dw (no reduce kernel)
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          dw_direct[j * VEC + e] = from_float<T>(acc[(k * VEC + e) * threads + threadIdx.x]);
        }
      }
    }
    return;
  }
  float* partial = dw_partial + static_cast<int64_t>(blockIdx.x) * hidden;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * threads;
    if (j < nvec) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        partial[j * VEC + e] = acc[(k * VEC + e) * threads + threadIdx.x];
      }
    }
  }
}

}  // namespace
}  // namespace llm_ops::rmsnorm
