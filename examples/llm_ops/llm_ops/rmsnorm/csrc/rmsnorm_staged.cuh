// The staged kernels of RMSNorm, forward and backward: 16-byte rows brought into shared
// memory by cp.async on a persistent grid.
// Part of rmsnorm.cu (see its opening comment); include from that translation unit only.
#pragma once

#include "rmsnorm_device.cuh"

namespace llm_ops::rmsnorm {
namespace {

// ---- Staged kernels: the 16-byte path, rows brought in by cp.async ----------------------
//
// Rows travel through shared memory in STAGES stages: while a CTA reduces and writes row i,
// rows i + grid ... i + (STAGES - 1) * grid are already on their way (cp.async, holding no
// registers). The rows in flight live in shared memory, so registers stay few, many CTAs fit
// on an SM, and together they keep enough bytes in flight to saturate HBM. Each thread copies
// and later reads only its own 16-byte vectors, so a stage needs no barrier between its
// arrival and its use, and shared memory is read as whole vectors (one LDS.128 each).

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}



__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N of this thread's most recent copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Copies this thread's vectors of `src` (a row of `nvec` 16-byte vectors) into `dst`.
template <typename V, int NV>
__device__ __forceinline__ void stage_row(V* dst, const V* src, int nvec) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      cp_async16(dst + j, src + j);
    }
  }
}

template <typename T, int NV, int STAGES, bool RESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    forward_staged_kernel(T* __restrict__ y, T* __restrict__ h_out,
                          float* __restrict__ rstd_out, const T* __restrict__ x,
                          const T* __restrict__ residual, const T* __restrict__ w,
                          int64_t rows, int hidden, float eps) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  constexpr int VEC = kVec16<T>;
  constexpr int kInputs = RESIDUAL ? 2 : 1;
  using V = Vec<T, VEC>;
  extern __shared__ uint4 stage_mem[];
  __shared__ float scratch[2][32];
  V* stages = reinterpret_cast<V*>(stage_mem);
  const int nvec = hidden / VEC;
  const int slot = NV * static_cast<int>(blockDim.x);
  const float inv_hidden = 1.f / static_cast<float>(hidden);
  const int64_t grid = gridDim.x;

  const auto issue = [&](int64_t row, int stage) {
    if (row < rows) {
      stage_row<V, NV>(stages + stage * kInputs * slot,
                       reinterpret_cast<const V*>(x + row * hidden), nvec);
      if constexpr (RESIDUAL) {
        stage_row<V, NV>(stages + (stage * kInputs + 1) * slot,
                         reinterpret_cast<const V*>(residual + row * hidden), nvec);
      }
    }
    cp_async_commit();
  };

  const V* w_vec = reinterpret_cast<const V*>(w);
  int64_t row = blockIdx.x;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    issue(row + s * grid, s);
  }
  int stage = 0;
  int parity = 0;
  for (; row < rows; row += grid) {
    issue(row + (STAGES - 1) * grid, stage == 0 ? STAGES - 1 : stage - 1);
    cp_async_wait<STAGES - 1>();
    const V* xs = stages + stage * kInputs * slot;
    const int64_t offset = row * hidden;

    // Vector j of the row normalised: x, or h = x + residual rounded to T. Read from shared
    // memory in each pass rather than held, which keeps the registers (and so the CTAs an SM
    // holds) for bytes in flight.
    const auto row_vec = [&](int j) -> V {
      V v = xs[j];
      if constexpr (RESIDUAL) {
        const V r = xs[slot + j];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          v.v[e] = from_float<T>(to_float(v.v[e]) + to_float(r.v[e]));
        }
      }
      return v;
    };

    float sum_sq = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        const V v = row_vec(j);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float f = to_float(v.v[e]);
          sum_sq += f * f;
        }
        if constexpr (RESIDUAL) {
          reinterpret_cast<V*>(h_out + offset)[j] = v;
        }
      }
    }
    const float rstd = rsqrtf(block_sum(sum_sq, scratch[parity]) * inv_hidden + eps);
    parity ^= 1;
    if (rstd_out != nullptr && threadIdx.x == 0) {
      rstd_out[row] = rstd;
    }
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < nvec) {
        const V v = row_vec(j);
        const V wv = w_vec[j];
        V out;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          out.v[e] = from_float<T>(to_float(v.v[e]) * rstd * to_float(wv.v[e]));
        }
        reinterpret_cast<V*>(y + offset)[j] = out;
      }
    }
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
}


template <typename T, int NV, int STAGES, bool DRESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    backward_staged_kernel(T* __restrict__ dx, float* __restrict__ dw_partial, T* __restrict__ dw_direct,
                           const T* __restrict__ dy, const T* __restrict__ x,
                           const T* __restrict__ w, const float* __restrict__ rstd,
                           const T* __restrict__ dresidual, int64_t rows, int hidden) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  constexpr int VEC = kVec16<T>;
  constexpr int kQuads = NV * VEC / 4;  // float4s of dw share a thread
  using V = Vec<T, VEC>;
  extern __shared__ uint4 stage_mem[];
  __shared__ float scratch[2][32];
  const int threads = static_cast<int>(blockDim.x);
  const int slot = NV * threads;
  // [kQuads][threads] float4 dw share (each thread owns its columns), then STAGES x {x, dy}.
  float4* acc = reinterpret_cast<float4*>(stage_mem);
  V* stages = reinterpret_cast<V*>(acc + kQuads * threads);
  const int nvec = hidden / VEC;
  const float inv_hidden = 1.f / static_cast<float>(hidden);
  const int64_t grid = gridDim.x;

  const auto issue = [&](int64_t row, int stage) {
    if (row < rows) {
      stage_row<V, NV>(stages + (stage * 2) * slot,
                       reinterpret_cast<const V*>(x + row * hidden), nvec);
      stage_row<V, NV>(stages + (stage * 2 + 1) * slot,
                       reinterpret_cast<const V*>(dy + row * hidden), nvec);
    }
    cp_async_commit();
  };

  const V* w_vec = reinterpret_cast<const V*>(w);
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    acc[q * threads + threadIdx.x] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  int64_t row = blockIdx.x;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    issue(row + s * grid, s);
  }
  int stage = 0;
  int parity = 0;
  for (; row < rows; row += grid) {
    issue(row + (STAGES - 1) * grid, stage == 0 ? STAGES - 1 : stage - 1);
    const int64_t offset = row * hidden;
    const float r = rstd[row];
    cp_async_wait<STAGES - 1>();
    const V* xs = stages + (stage * 2) * slot;
    const V* dys = xs + slot;

    // x and dy are read from shared memory in each pass rather than held in registers.
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
        const V xv = xs[j];
        const V dyv = dys[j];
        const V wv = w_vec[j];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          dot += to_float(dyv.v[e]) * to_float(wv.v[e]) * to_float(xv.v[e]);
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
        const V xv = xs[j];
        const V dyv = dys[j];
        const V wv = w_vec[j];
        V drv;
        if constexpr (DRESIDUAL) {
          drv = reinterpret_cast<const V*>(dresidual + offset)[j];
        }
        V out;
        float grad_w[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float xhat = to_float(xv.v[e]) * r;
          const float g = to_float(dyv.v[e]);
          float d = r * g * to_float(wv.v[e]) - xhat * c * r;
          if constexpr (DRESIDUAL) {
            d += to_float(drv.v[e]);
          }
          out.v[e] = from_float<T>(d);
          grad_w[e] = g * xhat;
        }
        reinterpret_cast<V*>(dx + offset)[j] = out;
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
          float4& a = acc[(k * VEC / 4 + q) * threads + threadIdx.x];
          a.x += grad_w[4 * q];
          a.y += grad_w[4 * q + 1];
          a.z += grad_w[4 * q + 2];
          a.w += grad_w[4 * q + 3];
        }
      }
    }
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }

  if (dw_direct != nullptr) {  // a grid of one CTA: its share is dw (no reduce kernel)
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
          const float4 v = acc[(k * VEC / 4 + q) * threads + threadIdx.x];
          T* out = dw_direct + j * VEC + q * 4;
          out[0] = from_float<T>(v.x);
          out[1] = from_float<T>(v.y);
          out[2] = from_float<T>(v.z);
          out[3] = from_float<T>(v.w);
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
      for (int q = 0; q < VEC / 4; ++q) {
        reinterpret_cast<float4*>(partial + j * VEC)[q] =
            acc[(k * VEC / 4 + q) * threads + threadIdx.x];
      }
    }
  }
}

}  // namespace
}  // namespace llm_ops::rmsnorm
