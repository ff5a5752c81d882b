// The cluster kernels of RMSNorm: the 16-byte backward of a few rows (decode) in one
// launch, dw summed through distributed shared memory.
// Part of rmsnorm.cu (see its opening comment); include from that translation unit only.
#pragma once

#include <cooperative_groups.h>

#include "rmsnorm_device.cuh"

namespace llm_ops::rmsnorm {
namespace {

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

// ---- Column-split cluster kernel: the 16-byte backward of a few rows, by columns ---------
//
// The same batches in the other direction: CTA b of a cluster of C owns columns
// [b * hidden / C, (b + 1) * hidden / C) of every row, a thread one 16-byte vector of one
// row. dw's slice is then the CTA's own (dy * xhat summed over the rows in order, through
// shared memory), and only each row's partial dot crosses the cluster: every CTA pushes its
// `rows` partials into every CTA's shared memory before one cluster barrier (release /
// acquire), and each sums the C partials in rank order (deterministic, no remote reads, so
// no second barrier). dw is stored between the barrier's arrival and its wait.
// Taken when colsplit_cluster (rmsnorm.cu) names a cluster size: the slice a whole number
// of warps a row, rows x slice at most kMaxThreads.
constexpr int kColMaxCluster = 16;
// Batches of fewer rows keep the row-split kernel; the cluster sizes, in preference order.
// Measured on an H100 (bf16, a CUDA graph of dependent launches, L2 rotated; docs/llm_ops.md),
// microseconds a call, row-split / column-split in clusters of 8 / of 16:
//   1 x 4096: 2.03 / 2.36 / 2.32    2 x 4096: 3.14 / 2.47 / 2.48    4 x 4096: 3.30 / 2.60 / 2.61
//   8 x 4096: 3.51 / 3.08 / 2.86    16 x 4096: 3.96 / 4.01 / 3.34   16 x 2048: 3.24 / 3.11 / -
//   8 x 8192: 4.96 / 3.96 / 3.25    16 x 8192: 5.75 / - / 4.29
constexpr int kColMinRows = 2;
constexpr int kColClusters[] = {kColMaxCluster, 8};
static_assert(kColMaxCluster <= 16, "16 CTAs is the largest cluster sm_90 runs");

// Grid = one cluster of `cluster` CTAs; CTA b the b-th slice of every row (hidden / VEC /
// cluster vectors, a multiple of 32); thread t vector t % slice of row t / slice
// (blockDim.x = rows x slice).
template <typename T, bool DRESIDUAL>
__global__ void __launch_bounds__(kMaxThreads)
    backward_colsplit_kernel(T* __restrict__ dx, T* __restrict__ dw, const T* __restrict__ dy,
                             const T* __restrict__ x, const T* __restrict__ w,
                             const float* __restrict__ rstd, const T* __restrict__ dresidual,
                             int rows, int hidden, int cluster) {
  grid_dependency_sync();  // before any global memory access (launch.cuh)
  constexpr int VEC = kVec16<T>;
  using V = Vec<T, VEC>;
  extern __shared__ float4 gx[];  // [rows][vpc * VEC / 4] float4 of dy * xhat
  __shared__ float part[kColMaxCluster][kClusterMaxRows];  // partial dots, by source rank
  __shared__ float warp_part[32];
  const int nvec = hidden / VEC;
  const int vpc = nvec / cluster;  // vectors of a row a CTA owns (a multiple of 32)
  const int rank = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid / vpc;
  const int jl = tid - r * vpc;
  const int j = rank * vpc + jl;
  const int64_t offset = static_cast<int64_t>(r) * hidden;
  const V wv = reinterpret_cast<const V*>(w)[j];
  const V xv = load_once<1>(reinterpret_cast<const V*>(x + offset) + j);
  const V dyv = load_once<1>(reinterpret_cast<const V*>(dy + offset) + j);
  V drv;
  if constexpr (DRESIDUAL) {
    drv = load_once<1>(reinterpret_cast<const V*>(dresidual + offset) + j);
  }
  const float rs = rstd[r];
  float dot = 0.f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    dot += to_float(dyv.v[e]) * to_float(wv.v[e]) * to_float(xv.v[e]);
  }
  dot = warp_sum(dot);
  if ((tid & 31) == 0) {
    warp_part[tid >> 5] = dot;
  }
  __syncthreads();
  const cooperative_groups::cluster_group cta_cluster = cooperative_groups::this_cluster();
  const int wpr = vpc >> 5;  // warps a row
  if (tid < cluster * rows) {
    const int dest = tid / rows;
    const int rr = tid - dest * rows;
    float p = 0.f;
    for (int k = 0; k < wpr; ++k) {
      p += warp_part[rr * wpr + k];
    }
    *cta_cluster.map_shared_rank(&part[rank][rr], dest) = p;
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  // dw's slice: dy * xhat of every row, summed over the rows in order.
  const int quads_row = vpc * VEC / 4;
#pragma unroll
  for (int q = 0; q < VEC / 4; ++q) {
    float4 v;
    v.x = to_float(dyv.v[4 * q]) * to_float(xv.v[4 * q]) * rs;
    v.y = to_float(dyv.v[4 * q + 1]) * to_float(xv.v[4 * q + 1]) * rs;
    v.z = to_float(dyv.v[4 * q + 2]) * to_float(xv.v[4 * q + 2]) * rs;
    v.w = to_float(dyv.v[4 * q + 3]) * to_float(xv.v[4 * q + 3]) * rs;
    gx[r * quads_row + jl * (VEC / 4) + q] = v;
  }
  __syncthreads();
  using V4 = Vec<T, 4>;
  for (int q = tid; q < quads_row; q += static_cast<int>(blockDim.x)) {
    float4 s = gx[q];
    for (int rr = 1; rr < rows; ++rr) {
      const float4 v = gx[rr * quads_row + q];
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    V4 o;
    o.v[0] = from_float<T>(s.x); o.v[1] = from_float<T>(s.y);
    o.v[2] = from_float<T>(s.z); o.v[3] = from_float<T>(s.w);
    reinterpret_cast<V4*>(dw)[rank * quads_row + q] = o;
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  float sum = 0.f;
  for (int b = 0; b < cluster; ++b) {
    sum += part[b][r];
  }
  const float c = sum * rs / static_cast<float>(hidden);
  V out;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float xhat = to_float(xv.v[e]) * rs;
    float d = rs * to_float(dyv.v[e]) * to_float(wv.v[e]) - xhat * c * rs;
    if constexpr (DRESIDUAL) {
      d += to_float(drv.v[e]);
    }
    out.v[e] = from_float<T>(d);
  }
  reinterpret_cast<V*>(dx + offset)[j] = out;
}
}  // namespace
}  // namespace llm_ops::rmsnorm
