// The RMSNorm backward of decode batches: the row-split cluster kernel against the column-split
// one in clusters of 4, 8 and 16, bf16, each a CUDA graph of 400 launches (dependent launch),
// rotating over input sets of 256 MB in all (L2 rotated); checked against a float64 reference.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include "rmsnorm_cluster.cuh"
using namespace llm_ops;
using namespace llm_ops::rmsnorm;
using T = __nv_bfloat16;
struct Bufs { T *dx, *dw, *dy, *x, *w; float* rstd; };
static void launch_variant(int v, const Bufs& b, int rows, int hidden, cudaStream_t st) {
  if (v == 0) {
    const int cluster = std::min(rows, kClusterMax);
    const int threads = std::max(32, (hidden / 8 + 31) / 32 * 32);
    const size_t smem = cluster > 1 ? (size_t)hidden * 4 : 0;
    launch_cluster(backward_cluster_kernel<T, false>, cluster, dim3(cluster), dim3(threads), smem,
                   st, b.dx, b.dw, (const T*)b.dy, (const T*)b.x, (const T*)b.w,
                   (const float*)b.rstd, (const T*)nullptr, rows, hidden, cluster);
  } else {
    const int cluster = v;
    const int vpc = hidden / 8 / cluster;
    const size_t smem = (size_t)rows * vpc * 8 * 4;
    launch_cluster(backward_colsplit_kernel<T, false>, cluster, dim3(cluster), dim3(rows * vpc),
                   smem, st, b.dx, b.dw, (const T*)b.dy, (const T*)b.x, (const T*)b.w,
                   (const float*)b.rstd, (const T*)nullptr, rows, hidden, cluster);
  }
}
static float bf(T v) { return __bfloat162float(v); }
int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaFuncSetAttribute(backward_colsplit_kernel<T, false>,
                       cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(backward_colsplit_kernel<T, false>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  int shapes[][2] = {{1, 4096}, {2, 4096}, {4, 4096}, {8, 4096}, {16, 4096}, {16, 2048}, {8, 8192}, {16, 8192}};
  int variants[] = {0, 4, 8, 16};
  cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  for (auto& sh : shapes) {
    const int rows = sh[0], hidden = sh[1];
    const size_t n = (size_t)rows * hidden;
    const int sets = std::max<int>(64, (int)((256u << 20) / (n * 6 + hidden * 4)));
    std::vector<Bufs> bs(sets);
    std::vector<T> hx(n), hdy(n), hw(hidden); std::vector<float> hr(rows);
    for (size_t i = 0; i < n; ++i) { hx[i] = __float2bfloat16(std::sin(0.1f * i)); hdy[i] = __float2bfloat16(std::cos(0.37f * i)); }
    for (int i = 0; i < hidden; ++i) hw[i] = __float2bfloat16(1.f + 0.001f * (i % 97));
    for (int r = 0; r < rows; ++r) { double s = 0; for (int i = 0; i < hidden; ++i) s += bf(hx[r * hidden + i]) * bf(hx[r * hidden + i]); hr[r] = 1.f / std::sqrt(s / hidden + 1e-6); }
    for (auto& b : bs) {
      cudaMalloc(&b.dx, n * 2); cudaMalloc(&b.dw, hidden * 2); cudaMalloc(&b.dy, n * 2); cudaMalloc(&b.x, n * 2);
      cudaMalloc(&b.w, hidden * 2); cudaMalloc(&b.rstd, rows * 4);
      cudaMemcpy(b.x, hx.data(), n * 2, cudaMemcpyHostToDevice); cudaMemcpy(b.dy, hdy.data(), n * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(b.w, hw.data(), hidden * 2, cudaMemcpyHostToDevice); cudaMemcpy(b.rstd, hr.data(), rows * 4, cudaMemcpyHostToDevice);
    }
    // reference
    std::vector<double> rdx(n), rdw(hidden, 0.0);
    for (int r = 0; r < rows; ++r) {
      double dot = 0; for (int i = 0; i < hidden; ++i) dot += bf(hdy[r * hidden + i]) * bf(hw[i]) * bf(hx[r * hidden + i]);
      const double c = dot * hr[r] / hidden;
      for (int i = 0; i < hidden; ++i) { const double xh = bf(hx[r * hidden + i]) * hr[r];
        rdx[r * hidden + i] = hr[r] * bf(hdy[r * hidden + i]) * bf(hw[i]) - xh * c * hr[r]; rdw[i] += bf(hdy[r * hidden + i]) * xh; }
    }
    for (int v : variants) {
      if (v != 0 && (hidden / 8) % (v * 32) != 0) continue;
      if (v != 0 && rows * (hidden / 8 / v) > 1024) continue;
      if (v != 0 && rows > kClusterMaxRows) continue;
      cudaGetLastError();
      launch_variant(v, bs[0], rows, hidden, st);
      cudaError_t err = cudaStreamSynchronize(st);
      if (err != cudaSuccess || cudaGetLastError() != cudaSuccess) { printf("variant %d rows %d hidden %d: error %s\n", v, rows, hidden, cudaGetErrorString(err)); continue; }
      std::vector<T> gdx(n), gdw(hidden);
      cudaMemcpy(gdx.data(), bs[0].dx, n * 2, cudaMemcpyDeviceToHost); cudaMemcpy(gdw.data(), bs[0].dw, hidden * 2, cudaMemcpyDeviceToHost);
      double edx = 0, edw = 0;
      for (size_t i = 0; i < n; ++i) edx = std::max(edx, std::fabs(bf(gdx[i]) - rdx[i]) / (std::fabs(rdx[i]) + 1e-2));
      for (int i = 0; i < hidden; ++i) edw = std::max(edw, std::fabs(bf(gdw[i]) - rdw[i]) / (std::fabs(rdw[i]) + 1e-2));
      // graph of `calls` launches, rotating buffers
      const int calls = 400;
      cudaGraph_t g; cudaGraphExec_t ge;
      cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
      for (int c = 0; c < calls; ++c) launch_variant(v, bs[c % sets], rows, hidden, st);
      cudaStreamEndCapture(st, &g); cudaGraphInstantiate(&ge, g, 0);
      cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
      std::vector<float> t;
      for (int it = 0; it < 25; ++it) {
        cudaEventRecord(e0, st); cudaGraphLaunch(ge, st); cudaEventRecord(e1, st); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (it >= 3) t.push_back(ms * 1e3f / calls);
      }
      std::sort(t.begin(), t.end());
      printf("rows %2d hidden %5d  %-9s us/call %6.2f (min %6.2f)  max rel err dx %.3g dw %.3g  sets %d\n", rows, hidden,
             v == 0 ? "cluster" : (v == 4 ? "col4" : v == 8 ? "col8" : "col16"), t[t.size() / 2], t[0], edx, edw, sets);
      cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    }
    for (auto& b : bs) { cudaFree(b.dx); cudaFree(b.dw); cudaFree(b.dy); cudaFree(b.x); cudaFree(b.w); cudaFree(b.rstd); }
  }
  return 0;
}
