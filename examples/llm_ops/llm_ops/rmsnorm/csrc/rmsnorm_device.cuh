// The constants and device helpers the RMSNorm kernels share: tuning switches, block sums,
// row loads and the once-read / once-written 16-byte accesses.
// Part of rmsnorm.cu (see its opening comment); include from that translation unit only.
#pragma once

#include <cstdint>

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

}  // namespace
}  // namespace llm_ops::rmsnorm
