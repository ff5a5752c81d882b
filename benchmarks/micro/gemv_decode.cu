// launch_gemv (moe_ops' weight-streaming grouped GEMM) on decode shapes, one row an active expert
// unless named: each call after a 512 MB memset (L2 full of modified lines: "us") and after a
// 512 MB read (L2 clean: "clean"); medians of 35 CUDA-event times. Usage: gemv_decode LABEL
#include "gemv.cuh"
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace moe_ops;
// Reads the buffer (a clean L2 afterwards, unlike a memset that leaves it dirty).
__global__ void read_flush(const uint4* p, size_t n, unsigned* sink) {
  uint4 acc = {0, 0, 0, 0};
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcg(p + i); acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) *sink = 1;
}
struct Shape { const char* name; int groups, active, rows, k, n; bool kmajor; };
int main(int argc, char** argv) {
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
  };
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
    cudaMemset(a, 0x3c, m * s.k * 2); cudaMemset(b, 0x3c, bbytes);
    std::vector<int32_t> h(s.groups);
    for (int g = 0; g < s.groups; ++g) h[g] = (int32_t)(std::min(g + 1, s.active) * s.rows);
    cudaMemcpy(off, h.data(), s.groups * 4, cudaMemcpyHostToDevice);
    GroupedGemmArgs args{};
    args.a = a; args.b = b; args.d = d; args.offsets = off; args.offsets_errors = nullptr;
    args.groups = s.groups; args.m_total = m; args.n = s.n; args.k = s.k;
    args.b_group_stride = (int64_t)s.k * s.n; args.b_k_major = s.kmajor; args.silu_mul = false;
    args.config = 4;
    std::vector<float> t, tc;
    for (int it = 0; it < 80; ++it) {
      const bool clean = it >= 40;
      if (clean) read_flush<<<sms * 4, 512, 0, st>>>((const uint4*)flush, flush_bytes / 16, (unsigned*)d);
      else cudaMemsetAsync(flush, it, flush_bytes, st);
      cudaEventRecord(e0, st);
      cudaError_t err = s.kmajor ? gemm::launch_gemv<true, false>(args, nullptr, sms, st)
                                 : gemm::launch_gemv<false, false>(args, nullptr, sms, st);
      cudaEventRecord(e1, st);
      if (err != cudaSuccess) { printf("launch error %s\n", cudaGetErrorString(err)); return 1; }
      cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); if (it % 40 >= 5) (clean ? tc : t).push_back(ms);
    }
    std::sort(t.begin(), t.end()); std::sort(tc.begin(), tc.end());
    const float med = t[t.size() / 2]; const float medc = tc[tc.size() / 2];
    const double bytes = bbytes + m * s.k * 2.0 + m * s.n * 2.0;
    gemm::GemvPlan pl = gemm::gemv_plan(s.kmajor, s.active, s.n, s.k,
        sms * (s.kmajor ? gemm::gemv_ctas_per_sm<true, false>() : gemm::gemv_ctas_per_sm<false, false>()));
    printf("%-8s %-22s %-8s us %7.2f clean %7.2f  TB/s %5.2f clean %5.2f  splits %2d cols %4d grid %4d\n", variant, s.name,
           s.kmajor ? "K-major" : "row", med * 1e3, medc * 1e3, bytes / (med * 1e-3) / 1e12, bytes / (medc * 1e-3) / 1e12, pl.k_splits, pl.block_cols, pl.grid);
    cudaFree(a); cudaFree(b); cudaFree(d); cudaFree(off);
  }
  return 0;
}
