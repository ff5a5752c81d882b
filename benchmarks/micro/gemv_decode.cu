// launch_gemv (moe_ops' weight-streaming grouped GEMM) on decode shapes, one row an active expert
// unless named: each call after a 512 MB memset (L2 full of modified lines: "us") and after a
// 512 MB read (L2 clean: "clean"); medians of 35 CUDA-event times, and the output's relative
// error against a naive fp32 kernel ("err"). The row LABEL is gemv_plan's split with the
// weight load gemv_weight_load picks; rows "load-0", "load-1" time the same split
// with each weight load (GemvLoad: plain, streaming); with --sweep, a row
// "split" follows for every split of K the kernel allows (gemv_max_splits), so the plan's
// pick can be checked against the best. Usage: gemv_decode LABEL [--sweep]
#include "gemv.cuh"
#include <cmath>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstring>
#include <string>
using namespace moe_ops;
// Reads the buffer (a clean L2 afterwards, unlike a memset that leaves it dirty).
__global__ void read_flush(const uint4* p, size_t n, unsigned* sink) {
  uint4 acc = {0, 0, 0, 0};
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcg(p + i); acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) *sink = 1;
}
// Values in [-1, 1) from a hash of the index.
__global__ void fill_hash(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16((h & 0xffff) / 32768.0f - 1.0f);
  }
}
// out[r][c] = sum_k a[r][k] * B[r / rows][k][c] in fp32 (row-major; K-major: B[g][c][k]).
__global__ void reference(const __nv_bfloat16* a, const __nv_bfloat16* b, float* out, int m, int n,
                          int k, int rows, bool kmajor) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= m * n) return;
  const int r = idx / n, c = idx % n;
  const __nv_bfloat16* bg = b + (size_t)(r / rows) * k * n;
  float acc = 0.f;
  for (int kk = 0; kk < k; ++kk) {
    const float w = __bfloat162float(kmajor ? bg[(size_t)c * k + kk] : bg[(size_t)kk * n + c]);
    acc += __bfloat162float(a[(size_t)r * k + kk]) * w;
  }
  out[idx] = acc;
}
// launch_gemv_plan of the layout and weight load named at run time.
template <bool KMajor>
cudaError_t launch_layout(gemm::GemvLoad load, const GroupedGemmArgs& args, const gemm::GemvPlan& pl, cudaStream_t st) {
  switch (load) {
    case gemm::GemvLoad::kStreaming: return gemm::launch_gemv_plan<KMajor, false, gemm::GemvLoad::kStreaming>(args, nullptr, pl, st);
    default: return gemm::launch_gemv_plan<KMajor, false, gemm::GemvLoad::kPlain>(args, nullptr, pl, st);
  }
}
cudaError_t launch(bool kmajor, gemm::GemvLoad load, const GroupedGemmArgs& args, const gemm::GemvPlan& pl, cudaStream_t st) {
  return kmajor ? launch_layout<true>(load, args, pl, st) : launch_layout<false>(load, args, pl, st);
}
// gemv_slots of the layout and weight load named at run time.
int slots_of(bool kmajor, gemm::GemvLoad load, int sms) {
  const bool streaming = load == gemm::GemvLoad::kStreaming;
  if (kmajor) return streaming ? gemm::gemv_slots<true, false, gemm::GemvLoad::kStreaming>(sms) : gemm::gemv_slots<true, false, gemm::GemvLoad::kPlain>(sms);
  return streaming ? gemm::gemv_slots<false, false, gemm::GemvLoad::kStreaming>(sms) : gemm::gemv_slots<false, false, gemm::GemvLoad::kPlain>(sms);
}
struct Shape { const char* name; int groups, active, rows, k, n; bool kmajor; };
int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const char* variant = argc > 1 ? argv[1] : "?";
  Shape shapes[] = {
    {"qwen3 gate_up T1", 128, 8, 1, 2048, 1536, false}, {"qwen3 gate_up T1", 128, 8, 1, 2048, 1536, true},
    {"qwen3 down T1", 128, 8, 1, 768, 2048, false}, {"qwen3 down T1", 128, 8, 1, 768, 2048, true},
    {"mixtral down T1", 8, 2, 1, 14336, 4096, false}, {"mixtral down T1", 8, 2, 1, 14336, 4096, true},
    {"gptoss down T1", 128, 4, 1, 2880, 2880, false}, {"gptoss down T1", 128, 4, 1, 2880, 2880, true},
    {"llama4 down T1", 16, 1, 1, 8192, 5120, false}, {"llama4 down T1", 16, 1, 1, 8192, 5120, true},
    {"llama4 gate_up T1", 16, 1, 1, 5120, 16384, false}, {"llama4 gate_up T1", 16, 1, 1, 5120, 16384, true},
    {"llama4 down T8", 16, 8, 1, 8192, 5120, false}, {"llama4 down T8", 16, 8, 1, 8192, 5120, true},
    {"deepseek gate_up T1", 256, 8, 1, 7168, 4096, false}, {"deepseek gate_up T1", 256, 8, 1, 7168, 4096, true},
    {"qwen3 gate_up T8", 128, 64, 1, 2048, 1536, false}, {"qwen3 gate_up T8", 128, 64, 1, 2048, 1536, true},
    {"gptoss gate_up T8 r2", 128, 16, 2, 2880, 5760, false},
    {"qwen3 down T8", 128, 56, 1, 768, 2048, false}, {"qwen3 down T8", 128, 56, 1, 768, 2048, true},
    {"qwen3 down T64 r4", 128, 120, 4, 768, 2048, false}, {"qwen3 down T64 r4", 128, 120, 4, 768, 2048, true},
    {"qwen3 gate_up T64 r4", 128, 120, 4, 2048, 1536, false},
  };
  const bool sweep = argc > 2 && std::strcmp(argv[2], "--sweep") == 0;
  int dev = 0, sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  size_t flush_bytes = 512u << 20; void* flush; cudaMalloc(&flush, flush_bytes);
  cudaStream_t st; cudaStreamCreate(&st);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (const Shape& s : shapes) {
    const int64_t m = (int64_t)s.active * s.rows;
    size_t bbytes = (size_t)s.active * s.k * s.n * 2;
    void *a, *b, *d; int32_t* off;
    cudaMalloc(&a, m * s.k * 2); cudaMalloc(&b, bbytes); cudaMalloc(&d, m * s.n * 2);
    cudaMalloc(&off, s.groups * 4);
    fill_hash<<<1024, 256, 0, st>>>((__nv_bfloat16*)a, m * s.k, 1u); fill_hash<<<4096, 256, 0, st>>>((__nv_bfloat16*)b, bbytes / 2, 2u);
    std::vector<int32_t> h(s.groups);
    for (int g = 0; g < s.groups; ++g) h[g] = (int32_t)(std::min(g + 1, s.active) * s.rows);
    cudaMemcpy(off, h.data(), s.groups * 4, cudaMemcpyHostToDevice);
    GroupedGemmArgs args{};
    args.a = a; args.b = b; args.d = d; args.offsets = off; args.offsets_errors = nullptr;
    args.groups = s.groups; args.m_total = m; args.n = s.n; args.k = s.k;
    args.b_group_stride = (int64_t)s.k * s.n; args.b_k_major = s.kmajor; args.silu_mul = false;
    args.config = 4;
    float* ref; cudaMalloc(&ref, m * s.n * 4);
    reference<<<(int)((m * s.n + 255) / 256), 256, 0, st>>>((const __nv_bfloat16*)a, (const __nv_bfloat16*)b, ref, (int)m, s.n, s.k, s.rows, s.kmajor);
    std::vector<float> href(m * s.n); cudaMemcpy(href.data(), ref, m * s.n * 4, cudaMemcpyDeviceToHost);
    // The plan as the op takes it (active = min(groups, m_total), not the experts with rows),
    // for the CTAs of the kernel with the load it picks.
    const int64_t planned = std::min<int64_t>(s.groups, m);
    const gemm::GemvLoad picked = gemm::gemv_weight_load(planned, s.n, s.k);
    const int slots = slots_of(s.kmajor, picked, sms);
    const gemm::GemvPlan chosen = gemm::gemv_plan(s.kmajor, planned, s.n, s.k, slots);
    struct Run { gemm::GemvPlan plan; gemm::GemvLoad load; std::string label; };
    std::vector<Run> plans{{chosen, picked, variant}};
    for (gemm::GemvLoad load : {gemm::GemvLoad::kPlain, gemm::GemvLoad::kStreaming})
      plans.push_back({chosen, load, "load-" + std::to_string(static_cast<int>(load))});
    if (sweep) {
      for (int sp = 1; sp <= gemm::gemv_max_splits(s.kmajor, s.k); sp *= 2)
        plans.push_back({gemm::gemv_plan_split(s.kmajor, planned, s.n, s.k, slots, sp, nullptr), picked, "split"});
    }
    for (size_t pi = 0; pi < plans.size(); ++pi) {
      const gemm::GemvPlan& pl = plans[pi].plan;
      std::vector<float> t, tc;
      for (int it = 0; it < 80; ++it) {
        const bool clean = it >= 40;
        if (clean) read_flush<<<sms * 4, 512, 0, st>>>((const uint4*)flush, flush_bytes / 16, (unsigned*)d);
        else cudaMemsetAsync(flush, it, flush_bytes, st);
        cudaEventRecord(e0, st);
        cudaError_t err = launch(s.kmajor, plans[pi].load, args, pl, st);
        cudaEventRecord(e1, st);
        if (err != cudaSuccess) { printf("launch error %s\n", cudaGetErrorString(err)); return 1; }
        cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (it % 40 >= 5) (clean ? tc : t).push_back(ms);
      }
      if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) { printf("kernel error %s\n", cudaGetErrorString(err)); return 1; }
      std::vector<__nv_bfloat16> hd(m * s.n); cudaMemcpy(hd.data(), d, m * s.n * 2, cudaMemcpyDeviceToHost);
      double num = 0, den = 0;
      for (size_t i = 0; i < hd.size(); ++i) { const double e = __bfloat162float(hd[i]) - href[i]; num += e * e; den += (double)href[i] * href[i]; }
      std::sort(t.begin(), t.end()); std::sort(tc.begin(), tc.end());
      const float med = t[t.size() / 2]; const float medc = tc[tc.size() / 2];
      const double bytes = bbytes + m * s.k * 2.0 + m * s.n * 2.0;
      printf("%-8s %-22s %-8s us %7.2f clean %7.2f  TB/s %5.2f clean %5.2f  splits %2d cols %4d grid %4d slots %4d  err %.1e\n",
             plans[pi].label.c_str(), s.name, s.kmajor ? "K-major" : "row", med * 1e3, medc * 1e3,
             bytes / (med * 1e-3) / 1e12, bytes / (medc * 1e-3) / 1e12, pl.k_splits, pl.block_cols, pl.grid, slots, std::sqrt(num / den));
      cudaMemset(d, 0, m * s.n * 2);
    }
    cudaFree(a); cudaFree(b); cudaFree(d); cudaFree(off); cudaFree(ref);
  }
  return 0;
}
