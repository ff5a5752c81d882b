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
// - the backward of at most kClusterMaxRows rows (decode) takes the cluster kernel: one
//   launch, a CTA per row or two, dw summed across the CTAs through distributed shared
//   memory (no workspace, no reduce kernel);
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
#include "rmsnorm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cooperative_groups.h>

#include "launch.cuh"
#include "vec.cuh"

namespace llm_ops::rmsnorm {
namespace {

constexpr int kMaxThreads = 1024;
// Elements a thread of the register kernels holds (more would spill at 1024 threads).
constexpr int kMaxElemsPerThread = 16;

// Tuning of the staged kernels, measured on an H200 (docs/llm_ops.md): elements a thread
// handles per row (16 beat 8 and 32), and the stages (2 beat 3-4 chosen for bytes in flight:
// more CTAs an SM beat deeper pipelines, by up to 16% for the backward; 0 = choose).
#ifndef LLM_OPS_STAGED_ELEMS
#define LLM_OPS_STAGED_ELEMS 16
#endif
#ifndef LLM_OPS_STAGES
#define LLM_OPS_STAGES 2
#endif

constexpr int kStagedElemsPerThread = LLM_OPS_STAGED_ELEMS;

// The forward row kernels (the 16-byte path): vectors a thread, smallest CTA, cache hints
// (2: x and residual skip L1, y and h are streaming stores).
constexpr int kRowsVectors = 2;
constexpr int kRowsMinCta = 128;
constexpr int kRowsHint = 2;
// The forward without a residual. LLM_OPS_RMSNORM_PLAIN = 2 or 4: the row kernels at every
// size with that many vectors a thread and the registers capped for occupancy (32 a thread
// at 2: four 512-thread CTAs an SM at hidden 8192 bf16, 64 KB of x in flight); 0: uncapped
// row kernels for rows up to kRowsPlainMaxRowBytes and the persistent register kernel above.
// Measured on an H200 over the 12 benchmark shapes (bf16, geomean fraction of copy / at
// 65536 x 8192): 2 -> 0.80 / 0.97, 4 -> 0.79 / 0.96, 0 -> 0.77 / 0.91 (staged: 0.72 / 0.88).
#ifndef LLM_OPS_RMSNORM_PLAIN
#define LLM_OPS_RMSNORM_PLAIN 2
#endif
constexpr bool kRowsOccupyPlain = LLM_OPS_RMSNORM_PLAIN != 0;
constexpr int kRowsVectorsPlain = kRowsOccupyPlain ? LLM_OPS_RMSNORM_PLAIN : kRowsVectors;
constexpr int64_t kRowsPlainMaxRowBytes = 4096;
constexpr int kForcedStages = LLM_OPS_STAGES;

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

// Loads this thread's NV vectors of one row (those inside the row).
template <typename V, int NV>
__device__ __forceinline__ void load_row(V (&dst)[NV], const V* row, int nvec) {
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = threadIdx.x + k * blockDim.x;
    if (j < nvec) {
      dst[k] = row[j];
    }
  }
}

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

// ---- Row kernels: the 16-byte forward path ------------------------------------------------
//
// One row per group of threads, the whole row held in registers: each thread issues all its
// 16-byte loads of x (and residual) and of w before the reduction, so a row's bytes are in
// flight at once. The grid is not persistent (a group a row, blockDim.y rows a CTA): many
// small CTAs an SM keep HBM busy and the scheduler overlaps one CTA's stores with another's
// loads. x and residual are read once, so their loads skip L1 (L1::no_allocate); w is read
// by every row and stays cached.

// Loads 16 bytes read once (x, residual): HINT >= 1 does not allocate them in L1.
template <int HINT, typename V>
__device__ __forceinline__ V load_once(const V* p) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  if constexpr (HINT >= 1) {
    uint4 u;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
        : "l"(p));
    V v;
    __builtin_memcpy(&v, &u, sizeof(V));
    return v;
  } else {
    return *p;
  }
}

// Stores 16 bytes written once (y, h): HINT >= 2 marks them streaming (evict first).
template <int HINT, typename V>
__device__ __forceinline__ void store_once(V* p, const V& v) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  if constexpr (HINT >= 2) {
    uint4 u;
    __builtin_memcpy(&u, &v, sizeof(V));
    __stcs(reinterpret_cast<uint4*>(p), u);
  } else {
    *p = v;
  }
}

// Threads a CTA of the row kernel may have: fewer as a thread holds more (its registers).
template <int NV>
constexpr int kRowsMaxThreads = NV <= 2 ? 1024 : (NV == 4 ? 512 : 256);
// With OCCUPY, CTAs an SM must hold at the largest CTA: caps the registers (32 a thread up to
// 2 vectors, 64 above) so that more rows are in flight an SM.
template <int NV, bool OCCUPY>
constexpr int kRowsMinBlocks = !OCCUPY ? 1 : (NV <= 2 ? 2 : (NV == 4 ? 2 : 4));

// Makes the compiler forget what it knows of `v`'s value: the fp32 conversions of a row made
// for the sum of squares are then recomputed for the output instead of held in registers.
template <typename V>
__device__ __forceinline__ void opaque(V& v) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  uint32_t u[4];
  __builtin_memcpy(u, &v, sizeof(V));
  asm volatile("" : "+r"(u[0]), "+r"(u[1]), "+r"(u[2]), "+r"(u[3]));
  __builtin_memcpy(&v, u, sizeof(V));
}

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

// ---- Cluster kernel: the 16-byte backward of a few rows (decode), in one launch ----------
//
// For [1, 4096] Inductor launches one kernel (one 512-thread CTA, dw = dy * xhat written
// directly); for [16, 4096] two (a 16-CTA kernel for dx and a column-sum kernel for dw that
// reads dy and x again). The staged/register kernels above add a dw workspace, a shared-memory
// accumulator and a second (reduce) kernel. Here a batch of at most kClusterMaxRows rows is one
// thread-block cluster (portable size, <= 8 CTAs), one 16-byte vector a thread: every load of
// a CTA's rows (up to two), w and rstd is issued before the one block reduction (both rows'
// dots at once), dw's share stays in registers, and the CTAs sum their shares through
// distributed shared memory, each one a slice of the columns, in rank order (deterministic,
// no atomics, no workspace, no second kernel). One CTA (one row) stores dw directly.
constexpr int kClusterMax = 8;
constexpr int kClusterRowsPerCta = 2;
constexpr int64_t kClusterMaxRows = kClusterMax * kClusterRowsPerCta;

// Sums of `v` (two values) over the CTA, returned to every thread (block_sum for two).
__device__ __forceinline__ float2 block_sum2(float2 v, float2* scratch) {
  v = make_float2(warp_sum(v.x), warp_sum(v.y));
  const int warps = static_cast<int>(blockDim.x) >> 5;
  if (warps == 1) {
    return v;
  }
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    scratch[threadIdx.x >> 5] = v;
  }
  __syncthreads();
  v = lane < warps ? scratch[lane] : make_float2(0.f, 0.f);
  return make_float2(warp_sum(v.x), warp_sum(v.y));
}

// Grid = one cluster of `cluster` CTAs; CTA b takes rows b and b + cluster; thread j the
// row's vector j (blockDim.x >= hidden / VEC).
template <typename T, bool DRESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    backward_cluster_kernel(T* __restrict__ dx, T* __restrict__ dw, const T* __restrict__ dy,
                            const T* __restrict__ x, const T* __restrict__ w,
                            const float* __restrict__ rstd, const T* __restrict__ dresidual,
                            int rows, int hidden, int cluster) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  constexpr int VEC = kVec16<T>;
  constexpr int R = kClusterRowsPerCta;
  constexpr int kQuads = VEC / 4;  // float4s of dw a thread
  static_assert(R == 2, "block_sum2 reduces two rows");
  using V = Vec<T, VEC>;
  extern __shared__ float4 dw_share[];  // hidden fp32 (cluster > 1): this CTA's dw share
  __shared__ float2 scratch[32];
  const int nvec = hidden / VEC;
  const int j = static_cast<int>(threadIdx.x);
  const bool in_row = j < nvec;
  const float inv_hidden = 1.f / static_cast<float>(hidden);

  // Every load first: w, then x, dy (and the residual grad) and rstd of both rows.
  V wv;
  V xv[R];
  V dyv[R];
  V drv[R];
  float r[R];
  bool live[R];
  if (in_row) {
    wv = reinterpret_cast<const V*>(w)[j];
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int row = static_cast<int>(blockIdx.x) + i * cluster;
    live[i] = row < rows;
    r[i] = 0.f;
    if (live[i]) {
      r[i] = rstd[row];
      if (in_row) {
        const int64_t offset = static_cast<int64_t>(row) * hidden;
        xv[i] = load_once<1>(reinterpret_cast<const V*>(x + offset) + j);
        dyv[i] = load_once<1>(reinterpret_cast<const V*>(dy + offset) + j);
        if constexpr (DRESIDUAL) {
          drv[i] = load_once<1>(reinterpret_cast<const V*>(dresidual + offset) + j);
        }
      }
    }
  }

  float dot[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    dot[i] = 0.f;
    if (live[i] && in_row) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        dot[i] += to_float(dyv[i].v[e]) * to_float(wv.v[e]) * to_float(xv[i].v[e]);
      }
    }
  }
  // The rows stay packed across the reduction (their fp32 forms are recomputed after it):
  // fewer registers, no spill at 1024 threads.
  opaque(wv);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    opaque(xv[i]);
    opaque(dyv[i]);
  }
  // mean(g * xhat) = r * mean(dy * w * x), both rows in one reduction
  const float2 sums = block_sum2(make_float2(dot[0], dot[1]), scratch);
  const float sum[R] = {sums.x, sums.y};

  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    acc[e] = 0.f;
  }
  V out[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (live[i] && in_row) {
      const float c = sum[i] * r[i] * inv_hidden;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xhat = to_float(xv[i].v[e]) * r[i];
        const float g = to_float(dyv[i].v[e]);
        float d = r[i] * g * to_float(wv.v[e]) - xhat * c * r[i];
        if constexpr (DRESIDUAL) {
          d += to_float(drv[i].v[e]);
        }
        out[i].v[e] = from_float<T>(d);
        acc[e] += g * xhat;
      }
    }
  }
  const auto store_dx = [&] {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (live[i] && in_row) {
        const int64_t row = static_cast<int64_t>(blockIdx.x) + i * cluster;
        reinterpret_cast<V*>(dx + row * hidden)[j] = out[i];
      }
    }
  };

  if (cluster == 1) {  // one row: its dy * xhat is dw
    store_dx();
    if (in_row) {
      V dw_out;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        dw_out.v[e] = from_float<T>(acc[e]);
      }
      reinterpret_cast<V*>(dw)[j] = dw_out;
    }
    return;
  }
  if (in_row) {
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      dw_share[j * kQuads + q] =
          make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    }
  }
  // Every share written and visible to the cluster (release / acquire). dx is stored between
  // the arrival and the wait, so that the release does not wait for those stores.
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  store_dx();
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  // This CTA's slice of the columns, four at a time, summed over the CTAs in rank order.
  const cooperative_groups::cluster_group cta_cluster = cooperative_groups::this_cluster();
  const int quads = hidden / 4;
  const int span = (quads + cluster - 1) / cluster;
  const int first = static_cast<int>(blockIdx.x) * span;
  const int last = min(quads, first + span);
  using V4 = Vec<T, 4>;
  for (int q = first + j; q < last; q += static_cast<int>(blockDim.x)) {
    // Every CTA's share is read before the first is added (the remote loads are in flight
    // together), then summed in rank order.
    float4 v[kClusterMax];
#pragma unroll
    for (int b = 0; b < kClusterMax; ++b) {
      if (b < cluster) {
        v[b] = cta_cluster.map_shared_rank(dw_share, b)[q];
      }
    }
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int b = 0; b < kClusterMax; ++b) {
      if (b < cluster) {
        s.x += v[b].x;
        s.y += v[b].y;
        s.z += v[b].z;
        s.w += v[b].w;
      }
    }
    V4 dw_out;
    dw_out.v[0] = from_float<T>(s.x);
    dw_out.v[1] = from_float<T>(s.y);
    dw_out.v[2] = from_float<T>(s.z);
    dw_out.v[3] = from_float<T>(s.w);
    reinterpret_cast<V4*>(dw)[q] = dw_out;
  }
  // No CTA leaves while another still reads its share (the reads above have completed: their
  // sums were stored).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

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

template <typename T, bool DRESIDUAL>
void backward_cluster(const BackwardArgs& a, cudaStream_t stream) {
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
