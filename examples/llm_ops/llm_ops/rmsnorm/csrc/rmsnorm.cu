// RMSNorm forward and backward: one pass over each row, the row held in registers.
//
// Forward: one CTA a row; each thread loads its slice (16-byte vectors when the row is
// aligned), the sum of squares is reduced over the CTA, and the same registers are scaled
// and stored. Global memory traffic is the minimum: x (+ residual) read once, y (+ h)
// written once, plus 4 bytes of rstd a row.
//
// Backward: a persistent grid. Each CTA walks rows with a grid stride, keeps w in registers
// and accumulates its share of dw in fp32 registers (each thread owns fixed columns), then
// writes one partial row; a small kernel sums the partials into dw.
#include "rmsnorm.h"

#include <algorithm>

#include "vec.cuh"

namespace llm_ops::rmsnorm {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxElemsPerThread = 16;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum of `v` over the CTA, returned to every thread. `scratch` holds 32 floats; two
// consecutive calls must use different scratch arrays (the caller alternates two), which
// saves the barrier that would otherwise protect the re-use.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warps = static_cast<int>(blockDim.x) >> 5;
  if (warps == 1) {
    return v;
  }
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    scratch[threadIdx.x >> 5] = v;
  }
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.f);
}

template <typename T, int VEC, int NV, bool RESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(T* __restrict__ y, T* __restrict__ h_out, float* __restrict__ rstd_out,
                   const T* __restrict__ x, const T* __restrict__ residual,
                   const T* __restrict__ w, int hidden, float eps) {
  using V = Vec<T, VEC>;
  __shared__ float scratch[32];
  const int nvec = hidden / VEC;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  const V* x_row = reinterpret_cast<const V*>(x + offset);
  const V* w_vec = reinterpret_cast<const V*>(w);

  // Issue every load of the row before the first use.
  V xr[NV];
  V wr[NV];
  V rr[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      xr[k] = x_row[j];
      wr[k] = w_vec[j];
      if constexpr (RESIDUAL) {
        rr[k] = reinterpret_cast<const V*>(residual + offset)[j];
      }
    }
  }

  float v[NV][VEC];
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
          v[k][e] = to_float(h.v[e]);
        }
        reinterpret_cast<V*>(h_out + offset)[j] = h;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          v[k][e] = to_float(xr[k].v[e]);
        }
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        sum_sq += v[k][e] * v[k][e];
      }
    }
  }

  const float rstd = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(hidden) + eps);
  if (threadIdx.x == 0) {
    rstd_out[blockIdx.x] = rstd;
  }
  V* y_row = reinterpret_cast<V*>(y + offset);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      V out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        out.v[e] = from_float<T>(v[k][e] * rstd * to_float(wr[k].v[e]));
      }
      y_row[j] = out;
    }
  }
}

template <typename T, int VEC, int NV, bool DRESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    backward_kernel(T* __restrict__ dx, float* __restrict__ dw_partial,
                    const T* __restrict__ dy, const T* __restrict__ x,
                    const T* __restrict__ w, const float* __restrict__ rstd,
                    const T* __restrict__ dresidual, int64_t rows, int hidden) {
  using V = Vec<T, VEC>;
  __shared__ float scratch[2][32];
  // This CTA's share of dw, fp32, NV * VEC values a thread. Each thread owns its values
  // (no barrier needed); the layout [k][e][thread] keeps a warp on distinct banks. Shared
  // memory rather than registers keeps the kernel under 64 registers at 1024 threads.
  extern __shared__ float acc[];
  const int nvec = hidden / VEC;
  const float inv_hidden = 1.f / static_cast<float>(hidden);
  const int threads = static_cast<int>(blockDim.x);

  V wr[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * threads;
    if (j < nvec) {
      wr[k] = reinterpret_cast<const V*>(w)[j];
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[(k * VEC + e) * threads + threadIdx.x] = 0.f;
    }
  }

  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * hidden;
    V xr[NV];
    V dyr[NV];
    V drr[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = threadIdx.x + k * threads;
      if (j < nvec) {
        xr[k] = reinterpret_cast<const V*>(x + offset)[j];
        dyr[k] = reinterpret_cast<const V*>(dy + offset)[j];
        if constexpr (DRESIDUAL) {
          drr[k] = reinterpret_cast<const V*>(dresidual + offset)[j];
        }
      }
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

constexpr int kReduceCols = 32;
constexpr int kReduceSlices = 8;

// dw[c] = sum over p of partial[p, c]; a warp reads 32 consecutive columns of one row.
template <typename T>
__global__ void __launch_bounds__(kReduceCols* kReduceSlices)
    dw_reduce_kernel(T* __restrict__ dw, const float* __restrict__ partial, int partials,
                     int hidden) {
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

template <typename T, int VEC>
void forward_vec(const ForwardArgs& a, cudaStream_t stream) {
  constexpr int NV = kMaxElemsPerThread / VEC;
  const int threads = threads_for<VEC, NV>(a.hidden);
  const auto grid = static_cast<unsigned>(a.rows);
  const int hidden = static_cast<int>(a.hidden);
  if (a.residual != nullptr) {
    forward_kernel<T, VEC, NV, true><<<grid, threads, 0, stream>>>(
        static_cast<T*>(a.y), static_cast<T*>(a.h), a.rstd, static_cast<const T*>(a.x),
        static_cast<const T*>(a.residual), static_cast<const T*>(a.w), hidden, a.eps);
  } else {
    forward_kernel<T, VEC, NV, false><<<grid, threads, 0, stream>>>(
        static_cast<T*>(a.y), nullptr, a.rstd, static_cast<const T*>(a.x), nullptr,
        static_cast<const T*>(a.w), hidden, a.eps);
  }
}

template <typename T>
void forward_typed(const ForwardArgs& a, cudaStream_t stream) {
  if (can_vectorise<T>(a.hidden, {a.y, a.h, a.x, a.residual, a.w})) {
    forward_vec<T, kVec16<T>>(a, stream);
  } else {
    forward_vec<T, 1>(a, stream);
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

template <typename T>
BackwardKernel pick_backward(const BackwardArgs& a) {
  const bool vec = can_vectorise<T>(a.hidden, {a.dx, a.dy, a.x, a.w, a.dresidual});
  const bool dres = a.dresidual != nullptr;
  if (vec) {
    const int64_t nvec = a.hidden / kVec16<T>;
    return dres ? pick_backward_nv<T, kVec16<T>, 1, true>(nvec)
                : pick_backward_nv<T, kVec16<T>, 1, false>(nvec);
  }
  return dres ? pick_backward_nv<T, 1, 1, true>(a.hidden)
              : pick_backward_nv<T, 1, 1, false>(a.hidden);
}

template <typename T>
int backward_partials_typed(const BackwardArgs& a, int device) {
  const BackwardKernel k = pick_backward<T>(a);
  int sms = 0;
  int per_sm = 0;
  if (cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(k.smem)) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, k.smem) !=
          cudaSuccess) {
    cudaGetLastError();
    sms = 1;
    per_sm = 1;
  }
  const int64_t full = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min(a.rows, full)));
}

template <typename T>
void backward_typed(const BackwardArgs& a, float* workspace, int partials,
                    cudaStream_t stream) {
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
  void* params[] = {&dx, &workspace, &dy, &x, &w, &rstd,
                    &dres, &rows, &hidden};
  cudaLaunchKernel(k.fn, dim3(partials), dim3(k.threads), params, k.smem, stream);
  const dim3 block(kReduceCols, kReduceSlices);
  const auto grid = static_cast<unsigned>((a.hidden + kReduceCols - 1) / kReduceCols);
  dw_reduce_kernel<T><<<grid, block, 0, stream>>>(static_cast<T*>(a.dw), workspace, partials,
                                                  hidden);
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

int backward_partials(const BackwardArgs& args, int device) {
  switch (args.dtype) {
    case DType::kFloat32:
      return backward_partials_typed<float>(args, device);
    case DType::kFloat16:
      return backward_partials_typed<__half>(args, device);
    case DType::kBFloat16:
      return backward_partials_typed<__nv_bfloat16>(args, device);
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
