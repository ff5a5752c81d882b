// SiLU-and-multiply, forward and backward: elementwise over [rows, 2d] -> [rows, d].
//
// Grid: blockIdx.y walks rows (with a stride when there are more than 65535), blockIdx.x and
// the thread index walk the row's VEC-element vectors (16 bytes when d and the pointers
// allow, single elements otherwise, so odd d works). Each thread issues the loads of U
// vectors before it uses the first: U = kUnroll, or 1 on smaller CTAs, more of them, when
// the grid would not fill the SMs (launch_shape). All arithmetic is fp32; each output is rounded once.
#include "silu_mul.h"

#include <algorithm>

#include "launch.cuh"
#include "vec.cuh"

namespace llm_ops::silu_mul {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kUnroll = 2;
constexpr int64_t kMaxGridY = 65535;

// Fast reciprocal and exponential (a few ulp): the kernels are memory-bound only if the
// per-element arithmetic stays short; an IEEE division alone would cost more than the loads.
__device__ __forceinline__ float sigmoid(float a) {
  return __fdividef(1.f, 1.f + __expf(-a));
}

template <typename T, int VEC, int U>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t rows, int64_t d) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  using V = Vec<T, VEC>;
  const int nvec = static_cast<int>(d / VEC);
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const V* a = reinterpret_cast<const V*>(x + r * 2 * d);
    const V* b = reinterpret_cast<const V*>(x + r * 2 * d + d);
    V* o = reinterpret_cast<V*>(out + r * d);
    for (int j0 = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j0 < nvec;
         j0 += stride * U) {
      V av[U];
      V bv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * stride;
        if (j < nvec) {
          av[u] = a[j];
          bv[u] = b[j];
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * stride;
        if (j < nvec) {
          V ov;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float g = to_float(av[u].v[e]);
            ov.v[e] = from_float<T>(g * sigmoid(g) * to_float(bv[u].v[e]));
          }
          o[j] = ov;
        }
      }
    }
  }
}

template <typename T, int VEC, int U>
__global__ void __launch_bounds__(kMaxThreads)
    backward_kernel(T* __restrict__ dx, const T* __restrict__ dout, const T* __restrict__ x,
                    int64_t rows, int64_t d) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  using V = Vec<T, VEC>;
  const int nvec = static_cast<int>(d / VEC);
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const V* a = reinterpret_cast<const V*>(x + r * 2 * d);
    const V* b = reinterpret_cast<const V*>(x + r * 2 * d + d);
    const V* go = reinterpret_cast<const V*>(dout + r * d);
    V* da = reinterpret_cast<V*>(dx + r * 2 * d);
    V* db = reinterpret_cast<V*>(dx + r * 2 * d + d);
    for (int j0 = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j0 < nvec;
         j0 += stride * U) {
      V av[U];
      V bv[U];
      V gv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * stride;
        if (j < nvec) {
          av[u] = a[j];
          bv[u] = b[j];
          gv[u] = go[j];
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * stride;
        if (j < nvec) {
          V dav;
          V dbv;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float g = to_float(av[u].v[e]);
            const float s = sigmoid(g);
            const float grad = to_float(gv[u].v[e]);
            dav.v[e] = from_float<T>(grad * to_float(bv[u].v[e]) * s * (1.f + g * (1.f - s)));
            dbv.v[e] = from_float<T>(grad * g * s);
          }
          da[j] = dav;
          db[j] = dbv;
        }
      }
    }
  }
}

struct Launch {
  dim3 grid;
  dim3 block;
  int unroll;  // vectors a thread per grid stride: kUnroll or 1
};

int sm_count() {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return sms;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Launch launch_shape(int64_t rows, int64_t nvec) {
  const int64_t blocks_y = std::max<int64_t>(1, std::min(rows, kMaxGridY));
  const int64_t per_thread = ceil_div(nvec, kUnroll);
  const int64_t threads =
      std::clamp<int64_t>((per_thread + 31) / 32 * 32, 64, static_cast<int64_t>(kMaxThreads));
  const int64_t blocks_x = std::max<int64_t>(1, ceil_div(per_thread, threads));
  const int64_t sms = sm_count();
  if (blocks_x * blocks_y >= sms) {
    return {dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)),
            dim3(static_cast<unsigned>(threads)), kUnroll};
  }
  // A grid smaller than the SMs (a few rows: decode) is latency-bound. Inductor's pointwise
  // kernels at [1 | 16, 4096] run 128-thread CTAs of 1-4 elements a thread, 16-32 CTAs a row
  // of 4096; here one 16-byte vector a thread (no second vector in the thread's chain of
  // loads and arithmetic), CTAs of 128 threads halved (down to a warp) while the grid would
  // still have at most half a CTA an SM: [1, 4096] bf16 -> 16 CTAs of 32, [16, 4096] -> 128
  // CTAs of 64.
  int64_t small = std::clamp<int64_t>((nvec + 31) / 32 * 32, 32, 128);
  while (small > 32 && ceil_div(nvec, small) * blocks_y * 2 <= sms) {
    small /= 2;
  }
  return {dim3(static_cast<unsigned>(ceil_div(nvec, small)), static_cast<unsigned>(blocks_y)),
          dim3(static_cast<unsigned>(small)), 1};
}

template <typename T>
bool can_vectorise(int64_t d, std::initializer_list<const void*> ptrs) {
  return d % kVec16<T> == 0 &&
         std::all_of(ptrs.begin(), ptrs.end(), [](const void* p) { return aligned16(p); });
}

template <typename T, int VEC>
void forward_vec(const Launch& l, T* out, const T* x, int64_t rows, int64_t d,
                 cudaStream_t stream) {
  if (l.unroll == 1) {
    launch(forward_kernel<T, VEC, 1>, l.grid, l.block, 0, stream, out, x, rows, d);
  } else {
    launch(forward_kernel<T, VEC, kUnroll>, l.grid, l.block, 0, stream, out, x, rows, d);
  }
}

template <typename T, int VEC>
void backward_vec(const Launch& l, T* dx, const T* dout, const T* x, int64_t rows, int64_t d,
                  cudaStream_t stream) {
  if (l.unroll == 1) {
    launch(backward_kernel<T, VEC, 1>, l.grid, l.block, 0, stream, dx, dout, x, rows, d);
  } else {
    launch(backward_kernel<T, VEC, kUnroll>, l.grid, l.block, 0, stream, dx, dout, x, rows,
           d);
  }
}

template <typename T>
void forward_typed(void* out, const void* x, int64_t rows, int64_t d, cudaStream_t stream) {
  T* o = static_cast<T*>(out);
  const T* in = static_cast<const T*>(x);
  if (can_vectorise<T>(d, {out, x})) {
    forward_vec<T, kVec16<T>>(launch_shape(rows, d / kVec16<T>), o, in, rows, d, stream);
  } else {
    forward_vec<T, 1>(launch_shape(rows, d), o, in, rows, d, stream);
  }
}

template <typename T>
void backward_typed(void* dx, const void* dout, const void* x, int64_t rows, int64_t d,
                    cudaStream_t stream) {
  T* g = static_cast<T*>(dx);
  const T* go = static_cast<const T*>(dout);
  const T* in = static_cast<const T*>(x);
  if (can_vectorise<T>(d, {dx, dout, x})) {
    backward_vec<T, kVec16<T>>(launch_shape(rows, d / kVec16<T>), g, go, in, rows, d, stream);
  } else {
    backward_vec<T, 1>(launch_shape(rows, d), g, go, in, rows, d, stream);
  }
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch_forward(DType dtype, void* out, const void* x, int64_t rows, int64_t d,
                           cudaStream_t stream) {
  if (rows == 0 || d == 0) {
    return nullptr;
  }
  switch (dtype) {
    case DType::kFloat32:
      forward_typed<float>(out, x, rows, d, stream);
      break;
    case DType::kFloat16:
      forward_typed<__half>(out, x, rows, d, stream);
      break;
    case DType::kBFloat16:
      forward_typed<__nv_bfloat16>(out, x, rows, d, stream);
      break;
  }
  return last_error();
}

const char* launch_backward(DType dtype, void* dx, const void* dout, const void* x,
                            int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows == 0 || d == 0) {
    return nullptr;
  }
  switch (dtype) {
    case DType::kFloat32:
      backward_typed<float>(dx, dout, x, rows, d, stream);
      break;
    case DType::kFloat16:
      backward_typed<__half>(dx, dout, x, rows, d, stream);
      break;
    case DType::kBFloat16:
      backward_typed<__nv_bfloat16>(dx, dout, x, rows, d, stream);
      break;
  }
  return last_error();
}

}  // namespace llm_ops::silu_mul
