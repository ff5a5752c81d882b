// The RMSNorm forward (bf16, no residual) of large batches, where it is bound by HBM: the row
// kernel llm_ops ships (a CTA a row, the row in registers, 512 threads, registers capped for
// four CTAs an SM) in its three cache-hint variants, against an experimental persistent kernel
// that moves rows with the Hopper bulk-copy engine (cp.async.bulk, completion on an mbarrier):
// a CTA an SM (or two) keeps STAGES rows in flight in shared memory, so the bytes in flight an
// SM no longer depend on the registers, and optionally writes y back with a bulk store too.
// Prints microseconds a call (the median of 7 timings of 10 back-to-back calls), the fraction
// of a device-to-device copy of the same bytes (timed the same way), and each variant's
// largest error against a float64 reference on 64 rows spread over the batch. A third kind
// reads x twice, as Inductor's looped reduction does (few registers, more rows an SM).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rmsnorm_rows.cuh"

using namespace llm_ops;
using namespace llm_ops::rmsnorm;
using T = __nv_bfloat16;
using V = Vec<T, 8>;

namespace bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// One row of `bytes` from global memory into shared memory, completing on `bar`.
__device__ __forceinline__ void load_row(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar, bool evict_first) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
  if (evict_first) {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
  }
}

__device__ __forceinline__ void store_row(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Persistent: CTA b takes rows b, b + grid, ...; `stages` rows in flight in shared memory.
// NV 16-byte vectors a thread (blockDim.x * NV * 8 == hidden).
template <int NV, bool BULK_STORE>
__global__ void __launch_bounds__(1024) forward_bulk_kernel(T* __restrict__ y,
                                                            float* __restrict__ rstd_out,
                                                            const T* __restrict__ x,
                                                            const T* __restrict__ w,
                                                            int64_t rows, int hidden, float eps,
                                                            int stages, bool evict_first) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float partials[2][32];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  unsigned char* bufs = smem + 128;
  const uint32_t row_bytes = static_cast<uint32_t>(hidden) * sizeof(T);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int64_t step = gridDim.x;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      const int64_t r = blockIdx.x + s * step;
      if (r < rows) {
        load_row(bufs + s * row_bytes, x + r * hidden, row_bytes, &full[s], evict_first);
      }
    }
  }
  V wr[NV];
  const V* w_vec = reinterpret_cast<const V*>(w);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    wr[k] = w_vec[tid + k * blockDim.x];
  }
  const float inv_hidden = 1.f / static_cast<float>(hidden);
  int i = 0;
  for (int64_t r = blockIdx.x; r < rows; r += step, ++i) {
    const int s = i % stages;
    mbar_wait(&full[s], static_cast<uint32_t>((i / stages) & 1));
    V* buf = reinterpret_cast<V*>(bufs + s * row_bytes);
    V xr[NV];
    float sum_sq = 0.f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      xr[k] = buf[tid + k * blockDim.x];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float f = to_float(xr[k].v[e]);
        sum_sq += f * f;
      }
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) {
      partials[i & 1][tid >> 5] = sum_sq;
    }
    __syncthreads();  // every thread has read row i's buffer and written its partial
    sum_sq = warp_sum(lane < warps ? partials[i & 1][lane] : 0.f);
    const float rstd = rsqrtf(sum_sq * inv_hidden + eps);
    if (rstd_out != nullptr && tid == 0) {
      rstd_out[r] = rstd;
    }
    const int64_t next = r + static_cast<int64_t>(stages) * step;
    if constexpr (!BULK_STORE) {
      if (tid == 0 && next < rows) {
        load_row(buf, x + next * hidden, row_bytes, &full[s], evict_first);
      }
    }
    V* y_row = BULK_STORE ? buf : reinterpret_cast<V*>(y + r * hidden);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      V out;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        out.v[e] = from_float<T>(to_float(xr[k].v[e]) * rstd * to_float(wr[k].v[e]));
      }
      if constexpr (BULK_STORE) {
        y_row[tid + k * blockDim.x] = out;
      } else {
        store_once<2>(y_row + tid + k * blockDim.x, out);
      }
    }
    if constexpr (BULK_STORE) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();  // y is in the buffer, visible to the bulk-copy engine
      if (tid == 0) {
        store_row(y + r * hidden, buf, row_bytes);
        if (next < rows) {
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
          load_row(buf, x + next * hidden, row_bytes, &full[s], evict_first);
        }
      }
    }
  }
  if constexpr (BULK_STORE) {
    if (tid == 0) {
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
  }
}

// Two passes over the row, as Inductor's looped reduction makes them: the sum of squares from
// a first read, then y from a second read of x (L1 or L2 hits); nothing of the row is held
// across the reduction, so the registers stay few and more rows fit an SM.
template <int NV, int MIN_CTAS>
__global__ void __launch_bounds__(2048 / MIN_CTAS, MIN_CTAS)
    forward_twopass_kernel(T* __restrict__ y, float* __restrict__ rstd_out,
                           const T* __restrict__ x, const T* __restrict__ w, int64_t rows,
                           int hidden, float eps) {
  __shared__ float partials[32];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int64_t r = blockIdx.x;
  const V* x_row = reinterpret_cast<const V*>(x + r * hidden);
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const V v = x_row[tid + k * blockDim.x];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float f = to_float(v.v[e]);
      sum_sq += f * f;
    }
  }
  sum_sq = warp_sum(sum_sq);
  if (lane == 0) {
    partials[tid >> 5] = sum_sq;
  }
  __syncthreads();
  sum_sq = warp_sum(lane < warps ? partials[lane] : 0.f);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(hidden) + eps);
  if (rstd_out != nullptr && tid == 0) {
    rstd_out[r] = rstd;
  }
  const V* w_vec = reinterpret_cast<const V*>(w);
  V* y_row = reinterpret_cast<V*>(y + r * hidden);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = tid + k * blockDim.x;
    const V v = load_once<2>(x_row + j);
    const V wv = w_vec[j];
    V out;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      out.v[e] = from_float<T>(to_float(v.v[e]) * rstd * to_float(wv.v[e]));
    }
    store_once<2>(y_row + j, out);
  }
}

}  // namespace bulk

struct Variant {
  const char* name;
  int kind;  // 0: row kernel (hint), 1: bulk, 2: copy, 3: two passes (threads: vectors a thread)
  int hint;
  int threads;  // bulk: threads a CTA
  int stages;
  int ctas_per_sm;
  bool bulk_store;
  bool evict_first;
};

static int g_sms = 0;

template <int NV, bool BS>
static cudaError_t launch_bulk_nv(const Variant& v, T* y, float* rstd, const T* x, const T* w,
                                  int64_t rows, int hidden, cudaStream_t st) {
  auto kernel = bulk::forward_bulk_kernel<NV, BS>;
  const size_t smem = 128 + static_cast<size_t>(v.stages) * hidden * sizeof(T);
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  const int grid = static_cast<int>(std::min<int64_t>(rows, (int64_t)g_sms * v.ctas_per_sm));
  kernel<<<grid, hidden / 8 / NV, smem, st>>>(y, rstd, x, w, rows, hidden, 1e-6f, v.stages,
                                              v.evict_first);
  return cudaGetLastError();
}

template <bool BS>
static cudaError_t launch_bulk(const Variant& v, T* y, float* rstd, const T* x, const T* w,
                               int64_t rows, int hidden, cudaStream_t st) {
  const int nv = hidden / 8 / v.threads;
  switch (nv) {
    case 1:
      return launch_bulk_nv<1, BS>(v, y, rstd, x, w, rows, hidden, st);
    case 2:
      return launch_bulk_nv<2, BS>(v, y, rstd, x, w, rows, hidden, st);
    case 4:
      return launch_bulk_nv<4, BS>(v, y, rstd, x, w, rows, hidden, st);
    case 8:
      return launch_bulk_nv<8, BS>(v, y, rstd, x, w, rows, hidden, st);
    default:
      return cudaErrorInvalidValue;
  }
}

template <int HINT>
static void launch_rows_hint(T* y, float* rstd, const T* x, const T* w, int64_t rows, int hidden,
                             cudaStream_t st) {
  // As llm_ops plans the plain forward of a large batch: two vectors a thread, a CTA a row
  // (hidden >= 2048), registers capped (OCCUPY).
  const int per_row = std::max(32, (hidden / 8 / 2 + 31) / 32 * 32);
  const int rows_per_cta = std::max(1, 128 / per_row);
  const int64_t grid = (rows + rows_per_cta - 1) / rows_per_cta;
  forward_rows_kernel<T, 2, false, HINT, true><<<(unsigned)grid, dim3(per_row, rows_per_cta), 0,
                                                 st>>>(y, nullptr, rstd, x, nullptr, w, rows,
                                                       hidden, 1e-6f);
}

template <int NV>
static cudaError_t launch_twopass(const Variant& v, T* y, float* rstd, const T* x, const T* w,
                                  int64_t rows, int hidden, cudaStream_t st) {
  const int threads = hidden / 8 / NV;
  if (threads * v.ctas_per_sm > 2048 || threads < 32) return cudaErrorInvalidValue;
  switch (v.ctas_per_sm) {
    case 2:
      bulk::forward_twopass_kernel<NV, 2><<<(unsigned)rows, threads, 0, st>>>(y, rstd, x, w, rows, hidden, 1e-6f);
      break;
    case 4:
      bulk::forward_twopass_kernel<NV, 4><<<(unsigned)rows, threads, 0, st>>>(y, rstd, x, w, rows, hidden, 1e-6f);
      break;
    default:
      bulk::forward_twopass_kernel<NV, 8><<<(unsigned)rows, threads, 0, st>>>(y, rstd, x, w, rows, hidden, 1e-6f);
      break;
  }
  return cudaGetLastError();
}

static cudaError_t launch_variant(const Variant& v, T* y, float* rstd, const T* x, const T* w,
                                  int64_t rows, int hidden, cudaStream_t st) {
  if (v.kind == 3) {
    // v.threads holds the vectors a thread.
    if (v.threads == 1) return launch_twopass<1>(v, y, rstd, x, w, rows, hidden, st);
    if (v.threads == 2) return launch_twopass<2>(v, y, rstd, x, w, rows, hidden, st);
    if (v.threads == 4) return launch_twopass<4>(v, y, rstd, x, w, rows, hidden, st);
    return cudaErrorInvalidValue;
  }
  if (v.kind == 0) {
    if (v.hint == 0) launch_rows_hint<0>(y, rstd, x, w, rows, hidden, st);
    if (v.hint == 1) launch_rows_hint<1>(y, rstd, x, w, rows, hidden, st);
    if (v.hint == 2) launch_rows_hint<2>(y, rstd, x, w, rows, hidden, st);
    return cudaGetLastError();
  }
  if (v.kind == 2) {
    return cudaMemcpyAsync(y, x, (size_t)rows * hidden * sizeof(T), cudaMemcpyDeviceToDevice, st);
  }
  return v.bulk_store ? launch_bulk<true>(v, y, rstd, x, w, rows, hidden, st)
                      : launch_bulk<false>(v, y, rstd, x, w, rows, hidden, st);
}

static float bf(T v) { return __bfloat162float(v); }

int main(int argc, char** argv) {
  const char* label = argc > 1 ? argv[1] : "current";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  g_sms = prop.multiProcessorCount;
  printf("%s: %s, %d SMs, %zu KB shared memory an SM\n", label, prop.name, g_sms,
         prop.sharedMemPerMultiprocessor / 1024);
  std::vector<Variant> variants = {
      {"copy (cudaMemcpyAsync)", 2, 0, 0, 0, 0, false, false},
      {"rows hint2 (shipped)", 0, 2, 0, 0, 0, false, false},
      {"rows hint1", 0, 1, 0, 0, 0, false, false},
      {"rows hint0", 0, 0, 0, 0, 0, false, false},
  };
  // Two passes: vectors a thread (1, 2, 4) x CTAs an SM the registers are capped for (2, 4, 8).
  {
    static char names[16][64];
    int used = 0;
    for (int nv : {1, 2, 4}) {
      for (int ctas : {2, 4, 8}) {
        snprintf(names[used], 64, "two-pass nv%d min-ctas%d", nv, ctas);
        variants.push_back({names[used++], 3, 0, nv, 0, ctas, false, false});
      }
    }
  }
  const int thread_choices[] = {256, 512};
  const int stage_choices[][2] = {{4, 1}, {8, 1}, {12, 1}, {3, 2}, {4, 2}, {6, 2}, {3, 3}, {4, 3}};
  for (int bs = 0; bs < 2; ++bs) {
    for (int threads : thread_choices) {
      for (auto& sc : stage_choices) {
        for (int ef = 0; ef < 2; ++ef) {
          if (ef && (threads != 256 || bs)) continue;
          static char names[256][64];
          static int used = 0;
          snprintf(names[used], 64, "bulk t%d s%d c%d%s%s", threads, sc[0], sc[1],
                   bs ? " bulk-store" : "", ef ? " evict-first" : "");
          variants.push_back({names[used++], 1, 0, threads, sc[0], sc[1], bs != 0, ef != 0});
        }
      }
    }
  }
  const int shapes[][2] = {{65536, 8192}, {16384, 8192}, {65536, 4096}, {4096, 4096}};
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (auto& sh : shapes) {
    const int64_t rows = sh[0];
    const int hidden = sh[1];
    const size_t n = (size_t)rows * hidden;
    T *x, *y, *w;
    float* rstd;
    cudaMalloc(&x, n * 2);
    cudaMalloc(&y, n * 2);
    cudaMalloc(&w, hidden * 2);
    cudaMalloc(&rstd, rows * 4);
    // x[r, c] from a hash (device-side fill would need a kernel; host fill of a row pattern
    // repeated is enough for timing, and the checked rows differ).
    std::vector<T> hrow((size_t)hidden * 64), hw(hidden);
    for (size_t i = 0; i < hrow.size(); ++i) {
      uint32_t h = (uint32_t)i * 2654435761u;
      h ^= h >> 15;
      hrow[i] = __float2bfloat16(((h & 0xffff) / 32768.f - 1.f) * (1.f + (i / hidden) % 7));
    }
    for (int i = 0; i < hidden; ++i) hw[i] = __float2bfloat16(0.5f + 0.01f * (i % 101));
    for (int64_t r = 0; r < rows; r += 64) {
      const int64_t count = std::min<int64_t>(64, rows - r);
      cudaMemcpy(x + r * hidden, hrow.data(), count * hidden * 2, cudaMemcpyHostToDevice);
    }
    cudaMemcpy(w, hw.data(), hidden * 2, cudaMemcpyHostToDevice);
    // The reference of the 64 distinct rows (every row r is row r % 64 of the pattern).
    std::vector<double> ref((size_t)64 * hidden);
    for (int r = 0; r < 64; ++r) {
      double s = 0;
      for (int c = 0; c < hidden; ++c) s += (double)bf(hrow[r * hidden + c]) * bf(hrow[r * hidden + c]);
      const double rs = 1.0 / std::sqrt(s / hidden + 1e-6);
      for (int c = 0; c < hidden; ++c) ref[(size_t)r * hidden + c] = bf(hrow[r * hidden + c]) * rs * bf(hw[c]);
    }
    double copy_us = 0;
    printf("\n%lld x %d bf16 (%.1f MB read + written)\n", (long long)rows, hidden, 2.0 * n * 2 / 1e6);
    printf("%-40s %10s %8s %10s %10s\n", "variant", "us", "TB/s", "of copy", "max err");
    for (const Variant& v : variants) {
      if (v.kind == 1) {
        const int nvec = hidden / 8;
        if (nvec % v.threads != 0 || nvec / v.threads > 8) continue;
        const size_t smem = 128 + (size_t)v.stages * hidden * 2 + 256;
        if (smem * v.ctas_per_sm > prop.sharedMemPerMultiprocessor - 1024 * v.ctas_per_sm) continue;
        if (smem > prop.sharedMemPerBlockOptin) continue;
      }
      if (v.kind == 3) {  // v.threads holds the vectors a thread; an SM holds 2048 threads
        const int threads = hidden / 8 / v.threads;
        if (threads < 32 || threads * v.ctas_per_sm > 2048) continue;
      }
      cudaMemsetAsync(y, 0, n * 2, st);  // on the timed stream: ordered before the launch
      cudaGetLastError();
      cudaError_t err = launch_variant(v, y, rstd, x, w, rows, hidden, st);
      if (err == cudaSuccess) err = cudaStreamSynchronize(st);
      if (err != cudaSuccess) {
        printf("%-40s error: %s\n", v.name, cudaGetErrorString(err));
        cudaGetLastError();
        continue;
      }
      double max_err = 0;
      if (v.kind != 2) {
        std::vector<T> out((size_t)hidden);
        for (int probe = 0; probe < 64; ++probe) {
          const int64_t r = (rows / 64) * probe + probe;  // row r is pattern row r % 64
          if (r >= rows) break;
          cudaMemcpy(out.data(), y + r * hidden, hidden * 2, cudaMemcpyDeviceToHost);
          for (int c = 0; c < hidden; ++c) {
            const double want = ref[(size_t)(r % 64) * hidden + c];
            max_err = std::max(max_err, std::fabs(bf(out[c]) - want) / (std::fabs(want) + 1e-3));
          }
        }
      }
      std::vector<float> times;
      for (int rep = 0; rep < 7; ++rep) {
        cudaEventRecord(e0, st);
        for (int call = 0; call < 10; ++call) launch_variant(v, y, rstd, x, w, rows, hidden, st);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        times.push_back(ms * 100.f);  // us a call
      }
      std::sort(times.begin(), times.end());
      const double us = times[3];
      if (v.kind == 2) copy_us = us;
      printf("%-40s %10.1f %8.2f %10.3f %10.2e\n", v.name, us, 2.0 * n * 2 / us / 1e6,
             copy_us > 0 ? copy_us / us : 0.0, max_err);
    }
    cudaFree(x);
    cudaFree(y);
    cudaFree(w);
    cudaFree(rstd);
  }
  return 0;
}
