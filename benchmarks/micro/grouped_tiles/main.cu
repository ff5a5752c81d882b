// The grouped-GEMM tile experiment: moe_ops' shipped tiles against tile and cluster shapes it
// does not ship (configs.cuh), on the prefill GEMMs of benchmarks/moe.py (bf16, B row-major)
// and the FP8 row-wise GEMMs at 4k tokens, the kernels alone (no torch). Rows per expert are
// uneven, within 15% of the mean from a fixed hash (as top-k routing of random logits makes
// them; a run with 50% measured tail effects the benchmark's routing does not have). Prints milliseconds a call (the
// median of 5 timings of 5 back-to-back calls), TFLOP/s, each tile's time against the shipped
// cooperative tile's, and how many outputs differ from the shipped tile's (the same K order:
// 0 expected) with the largest difference; for FP8 also the output's error against a float64
// GEMM of the same e4m3 inputs on every 97th row (rms of the error over rms of the result:
// bf16's rounding alone is about 1e-3). Built by build.sh (needs the CUTLASS headers).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "moe.h"

namespace moe_ops {
#define DECLARE(NAME, ARGS)                                                              \
  size_t NAME##_workspace_size(int64_t groups, int sm_count);                            \
  const char* NAME##_run(const ARGS& args, void* workspace, size_t bytes, int sm_count, \
                         cudaStream_t stream);
DECLARE(tiles_coop2x2, GroupedGemmArgs)
DECLARE(tiles_coop256x128c12, GroupedGemmArgs)
DECLARE(tiles_coop256x128c21, GroupedGemmArgs)
DECLARE(tiles_fp8_coop_p8, Fp8GemmArgs)
DECLARE(tiles_fp8_coop_p16, Fp8GemmArgs)
DECLARE(tiles_fp8_pong_p8, Fp8GemmArgs)
DECLARE(tiles_fp8_coop_fast, Fp8GemmArgs)
DECLARE(tiles_fp8_coop128x256_fast, Fp8GemmArgs)
#undef DECLARE
}  // namespace moe_ops

using namespace moe_ops;

template <class Args>
struct Tile {
  const char* name;
  size_t (*workspace)(int64_t, int);
  const char* (*run)(const Args&, void*, size_t, int, cudaStream_t);
};

static const Tile<GroupedGemmArgs> kBf16[] = {
    {"cooperative 128x256x64 1x2 (shipped)", gemm_coop_rowb_workspace_size, gemm_coop_rowb_run},
    {"cooperative 128x256x64 2x1 (shipped)", gemm_coop21_rowb_workspace_size,
     gemm_coop21_rowb_run},
    {"cooperative 128x256x64 2x2", tiles_coop2x2_workspace_size, tiles_coop2x2_run},
    {"cooperative 256x128x64 1x2", tiles_coop256x128c12_workspace_size, tiles_coop256x128c12_run},
    {"cooperative 256x128x64 2x1", tiles_coop256x128c21_workspace_size, tiles_coop256x128c21_run},
};
static const Tile<Fp8GemmArgs> kFp8[] = {
    {"fp8 cooperative 128x128x128 1x2 (shipped)", gemm_fp8_rowwise_workspace_size,
     gemm_fp8_rowwise_run},
    {"fp8 pingpong 64x128x128 1x2 (shipped)", gemm_fp8_rowwise_pong_workspace_size,
     gemm_fp8_rowwise_pong_run},
    {"fp8 cooperative, promoted every 8", tiles_fp8_coop_p8_workspace_size,
     tiles_fp8_coop_p8_run},
    {"fp8 cooperative, promoted every 16", tiles_fp8_coop_p16_workspace_size,
     tiles_fp8_coop_p16_run},
    {"fp8 pingpong, promoted every 8", tiles_fp8_pong_p8_workspace_size, tiles_fp8_pong_p8_run},
    {"fp8 cooperative FastAccum", tiles_fp8_coop_fast_workspace_size, tiles_fp8_coop_fast_run},
    {"fp8 cooperative 128x256x128 FastAccum", tiles_fp8_coop128x256_fast_workspace_size,
     tiles_fp8_coop128x256_fast_run},
};

struct Shape {
  const char* name;
  int experts;
  int64_t rows;
  int64_t n;
  int64_t k;
};

__device__ __forceinline__ uint32_t hash(uint64_t i) {
  uint32_t h = static_cast<uint32_t>(i * 0x9E3779B97F4A7C15ull >> 32);
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  return h;
}

__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    p[i] = __float2bfloat16((hash(i + seed * 0x100000000ull) & 0xffff) / 32768.f - 1.f);
  }
}

__global__ void fill_fp8(__nv_fp8_e4m3* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    p[i] = __nv_fp8_e4m3(((hash(i + seed * 0x100000000ull) & 0xffff) / 32768.f - 1.f) * 4.f);
  }
}

__global__ void fill_f32(float* p, int64_t n, float base) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    p[i] = base * (1.f + (hash(i) & 0xff) / 256.f);
  }
}

// How many elements of a and b differ, and the largest |a - b|.
__global__ void compare(const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
                        unsigned long long* count, float* max_diff) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float d = fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i]));
    if (d != 0.f || __bfloat162float(a[i]) != __bfloat162float(b[i])) {
      atomicAdd(count, 1ull);
      atomicMax(reinterpret_cast<int*>(max_diff), __float_as_int(d));
    }
  }
}

// The FP8 row-wise GEMM in float64 on every kRefStride-th row: one warp an output, the lanes
// splitting K (B is K-major: b[g] is n x k). ref is [rows / kRefStride, n].
constexpr int64_t kRefStride = 97;
__global__ void reference_fp8(const __nv_fp8_e4m3* a, const __nv_fp8_e4m3* b, const float* a_scale,
                              const float* b_scale, const int32_t* offsets, int groups,
                              int64_t rows, int64_t n, int64_t k, double* ref) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int64_t sampled = (rows + kRefStride - 1) / kRefStride;
  if (warp >= sampled * n) return;
  const int64_t row = warp / n * kRefStride;
  const int64_t col = warp % n;
  int g = 0;
  while (g < groups - 1 && row >= offsets[g]) ++g;
  const __nv_fp8_e4m3* ar = a + row * k;
  const __nv_fp8_e4m3* bc = b + (g * n + col) * k;
  double acc = 0;
  for (int64_t i = lane; i < k; i += 32) acc += double(float(ar[i])) * double(float(bc[i]));
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) ref[warp] = acc * a_scale[row] * b_scale[g * n + col];
}

// Over the sampled rows: sums of (d - ref)^2 and ref^2 (err[0], err[1]).
__global__ void error_vs_reference(const __nv_bfloat16* d, const double* ref, int64_t rows,
                                   int64_t n, double* err) {
  const int64_t sampled = (rows + kRefStride - 1) / kRefStride;
  double e = 0, r = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < sampled * n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double x = __bfloat162float(d[(i / n) * kRefStride * n + i % n]);
    e += (x - ref[i]) * (x - ref[i]);
    r += ref[i] * ref[i];
  }
  atomicAdd(&err[0], e);
  atomicAdd(&err[1], r);
}

// Uneven rows per expert summing to `rows` (a fixed hash of the expert index), as offsets.
static std::vector<int32_t> offsets_for(int experts, int64_t rows) {
  std::vector<double> w(experts);
  double sum = 0;
  for (int e = 0; e < experts; ++e) {
    uint32_t h = static_cast<uint32_t>(e + 1) * 2654435761u;
    h ^= h >> 13;
    w[e] = 0.85 + 0.3 * (h % 1000) / 1000.0;  // 0.85-1.15: top-k of random logits
    sum += w[e];
  }
  std::vector<int32_t> offsets(experts);
  double acc = 0;
  for (int e = 0; e < experts; ++e) {
    acc += w[e];
    offsets[e] = static_cast<int32_t>(std::llround(acc / sum * rows));
  }
  offsets[experts - 1] = static_cast<int32_t>(rows);
  return offsets;
}

// The device buffers of one shape, freed together: the two outputs (the first tile's, then
// each other tile's) and the offsets, filled; take() allocates the operands.
struct Operands {
  std::vector<void*> owned;
  void* d_ref;
  void* d_out;
  int32_t* offsets;

  Operands(const Shape& s, cudaStream_t st) {
    d_ref = take(s.rows * s.n * 2);
    d_out = take(s.rows * s.n * 2);
    offsets = static_cast<int32_t*>(take(s.experts * 4));
    const std::vector<int32_t> h_off = offsets_for(s.experts, s.rows);
    cudaMemcpyAsync(offsets, h_off.data(), s.experts * 4, cudaMemcpyHostToDevice, st);
    cudaStreamSynchronize(st);
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
  ~Operands() {
    for (void* p : owned) cudaFree(p);
  }
  void* take(size_t bytes) {
    void* p = nullptr;
    cudaMalloc(&p, bytes);
    owned.push_back(p);
    return p;
  }
};

template <class Args>
static float time_ms(const Tile<Args>& t, const Args& args, void* ws, size_t bytes, int sms,
                     cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1) {
  std::vector<float> times;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(e0, st);
    for (int call = 0; call < 5; ++call) t.run(args, ws, bytes, sms, st);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    times.push_back(ms / 5);
  }
  std::sort(times.begin(), times.end());
  return times[2];
}

template <class Args, size_t N>
static void run_shape(const Shape& s, const Tile<Args> (&tiles)[N], Args args, void* d_ref,
                      void* d_out, int sms, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1,
                      unsigned long long* count, float* max_diff, const double* ref = nullptr,
                      double* ref_err = nullptr) {
  const double flops = 2.0 * s.rows * s.n * s.k;
  printf("\n%s: %d experts, %lld rows, N %lld, K %lld\n", s.name, s.experts, (long long)s.rows,
         (long long)s.n, (long long)s.k);
  printf("  %-44s %9s %9s %9s %12s %10s %12s\n", "tile", "ms", "TFLOP/s", "vs first",
         "outputs !=", "max diff", ref ? "rms err f64" : "");
  float first = 0;
  for (size_t i = 0; i < N; ++i) {
    const Tile<Args>& t = tiles[i];
    const size_t bytes = t.workspace(s.experts, sms);
    void* ws = nullptr;
    cudaMalloc(&ws, bytes);
    args.d = i == 0 ? d_ref : d_out;
    cudaMemsetAsync(args.d, 0, s.rows * s.n * 2, st);
    const char* err = t.run(args, ws, bytes, sms, st);
    cudaError_t cerr = cudaStreamSynchronize(st);
    if (err != nullptr || cerr != cudaSuccess) {
      printf("  %-44s error: %s\n", t.name, err ? err : cudaGetErrorString(cerr));
      cudaGetLastError();
      cudaFree(ws);
      continue;
    }
    unsigned long long h_count = 0;
    float h_max = 0;
    if (i > 0) {
      cudaMemset(count, 0, sizeof(*count));
      cudaMemset(max_diff, 0, sizeof(*max_diff));
      compare<<<1024, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(d_ref),
                                    static_cast<const __nv_bfloat16*>(d_out), s.rows * s.n, count,
                                    max_diff);
      cudaMemcpyAsync(&h_count, count, sizeof(h_count), cudaMemcpyDeviceToHost, st);
      cudaMemcpyAsync(&h_max, max_diff, sizeof(h_max), cudaMemcpyDeviceToHost, st);
      cudaStreamSynchronize(st);
    }
    double h_err[2] = {0, 0};
    if (ref != nullptr) {
      cudaMemsetAsync(ref_err, 0, 2 * sizeof(double), st);
      error_vs_reference<<<1024, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(args.d), ref,
                                               s.rows, s.n, ref_err);
      cudaMemcpyAsync(h_err, ref_err, sizeof(h_err), cudaMemcpyDeviceToHost, st);
      cudaStreamSynchronize(st);
    }
    const float ms = time_ms(t, args, ws, bytes, sms, st, e0, e1);
    if (i == 0) first = ms;
    printf("  %-44s %9.3f %9.1f %9.3f %12llu %10.3g", t.name, ms, flops / ms / 1e9, first / ms,
           h_count, h_max);
    if (ref != nullptr) printf(" %12.3e", std::sqrt(h_err[0] / h_err[1]));
    printf("\n");
    fflush(stdout);
    cudaFree(ws);
  }
}

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  printf("%s, %d SMs\n", prop.name, sms);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  unsigned long long* count;
  float* max_diff;
  cudaMalloc(&count, sizeof(*count));
  cudaMalloc(&max_diff, sizeof(*max_diff));
  // benchmarks/moe.py's prefill layers: gate/up [T*k, H] x [E, H, 2I], down [T*k, I] x [E, I, H].
  const Shape bf16_shapes[] = {
      {"mixtral T=4k gate_up", 8, 8192, 28672, 4096},
      {"mixtral T=4k down", 8, 8192, 4096, 14336},
      {"deepseek-v3 T=4k gate_up", 256, 32768, 4096, 7168},
      {"deepseek-v3 T=4k down", 256, 32768, 7168, 2048},
      {"qwen3-30b T=16k gate_up", 128, 131072, 1536, 2048},
      {"qwen3-30b T=16k down", 128, 131072, 2048, 768},
      {"gpt-oss-120b T=4k gate_up", 128, 16384, 5760, 2880},
      {"gpt-oss-120b T=4k down", 128, 16384, 2880, 2880},
      {"llama-4 T=4k gate_up", 16, 4096, 16384, 5120},
      {"llama-4 T=4k down", 16, 4096, 5120, 8192},
  };
  const Shape fp8_shapes[] = {
      {"fp8 mixtral T=4k gate_up", 8, 8192, 28672, 4096},
      {"fp8 mixtral T=4k down", 8, 8192, 4096, 14336},
      {"fp8 llama-4 T=4k gate_up", 16, 4096, 16384, 5120},
      {"fp8 llama-4 T=4k down", 16, 4096, 5120, 8192},
      {"fp8 deepseek-v3 T=4k gate_up", 256, 32768, 4096, 7168},
      {"fp8 deepseek-v3 T=4k down", 256, 32768, 7168, 2048},
  };
  for (const Shape& s : bf16_shapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    Operands o(s, st);
    void* a = o.take(s.rows * s.k * 2);
    void* b = o.take((size_t)s.experts * s.k * s.n * 2);
    fill_bf16<<<2048, 256, 0, st>>>(static_cast<__nv_bfloat16*>(a), s.rows * s.k, 1);
    fill_bf16<<<2048, 256, 0, st>>>(static_cast<__nv_bfloat16*>(b), (int64_t)s.experts * s.k * s.n, 2);
    GroupedGemmArgs args{};
    args.a = a;
    args.b = b;
    args.offsets = o.offsets;
    args.groups = s.experts;
    args.m_total = s.rows;
    args.n = s.n;
    args.k = s.k;
    args.b_group_stride = s.k * s.n;
    run_shape(s, kBf16, args, o.d_ref, o.d_out, sms, st, e0, e1, count, max_diff);
  }
  for (const Shape& s : fp8_shapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    Operands o(s, st);
    void* a = o.take(s.rows * s.k);
    void* b = o.take((size_t)s.experts * s.k * s.n);
    auto* a_scale = static_cast<float*>(o.take(s.rows * 4));
    auto* b_scale = static_cast<float*>(o.take((size_t)s.experts * s.n * 4));
    fill_fp8<<<2048, 256, 0, st>>>(static_cast<__nv_fp8_e4m3*>(a), s.rows * s.k, 3);
    fill_fp8<<<2048, 256, 0, st>>>(static_cast<__nv_fp8_e4m3*>(b), (int64_t)s.experts * s.k * s.n, 4);
    fill_f32<<<256, 256, 0, st>>>(a_scale, s.rows, 1.f / 64);
    fill_f32<<<256, 256, 0, st>>>(b_scale, (int64_t)s.experts * s.n, 1.f / 64);
    Fp8GemmArgs args{};
    args.a = a;
    args.b = b;
    args.a_scale = a_scale;
    args.b_scale = b_scale;
    args.offsets = o.offsets;
    args.groups = s.experts;
    args.m_total = s.rows;
    args.n = s.n;
    args.k = s.k;
    args.b_group_stride = s.k * s.n;
    args.scaling = Fp8Scaling::kRowwise;
    const int64_t sampled = (s.rows + kRefStride - 1) / kRefStride;
    auto* ref = static_cast<double*>(o.take(sampled * s.n * sizeof(double)));
    auto* err = static_cast<double*>(o.take(2 * sizeof(double)));
    reference_fp8<<<static_cast<unsigned>((sampled * s.n * 32 + 255) / 256), 256, 0, st>>>(
        static_cast<const __nv_fp8_e4m3*>(a), static_cast<const __nv_fp8_e4m3*>(b), a_scale,
        b_scale, o.offsets, s.experts, s.rows, s.n, s.k, ref);
    run_shape(s, kFp8, args, o.d_ref, o.d_out, sms, st, e0, e1, count, max_diff, ref, err);
  }
  return 0;
}
