// Launchers for the RMSNorm kernels: plain pointers and sizes, no torch types, so that
// the CUDA translation unit compiles without any torch header.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "dtype.h"

namespace llm_ops::rmsnorm {

using llm_ops::DType;

// Largest supported hidden size: a row is held in registers, at most 16 elements a
// thread and 1024 threads a row.
constexpr int64_t kMaxHidden = 16384;

// y = x / rms(x) * w, row by row, and rstd[row] = 1 / rms(row) in fp32. With `residual`
// set, the row normalised is h = x + residual (rounded to the dtype), written to `h`.
struct ForwardArgs {
  DType dtype;
  void* y;
  void* h;  // nullptr unless `residual` is set
  float* rstd;  // nullptr: not written (inference)
  const void* x;
  const void* residual;  // may be nullptr
  const void* w;
  int64_t rows;
  int64_t hidden;
  float eps;
};

// dx = rstd * (g - xhat * mean(g * xhat)) (+ dresidual), with g = dy * w, xhat = x * rstd;
// dw = the sum over rows of dy * xhat: per-CTA partial sums, then one reduction.
struct BackwardArgs {
  DType dtype;
  void* dx;
  void* dw;
  const void* dy;
  const void* x;
  const void* w;
  const float* rstd;
  const void* dresidual;  // may be nullptr: added to dx when set
  int64_t rows;
  int64_t hidden;
};

// Returns nullptr on success, else a message naming the CUDA error.
const char* launch_forward(const ForwardArgs& args, cudaStream_t stream);

// Rows of the fp32 [partials, hidden] workspace that `launch_backward` needs (>= 1); with
// one, the backward writes dw itself and takes no workspace (nullptr).
int backward_partials(const BackwardArgs& args);

const char* launch_backward(const BackwardArgs& args, float* workspace, int partials,
                            cudaStream_t stream);

}  // namespace llm_ops::rmsnorm
