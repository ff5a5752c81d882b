// Launchers for the SiLU-and-multiply kernels: plain pointers and sizes, no torch types, so
// that the CUDA translation unit compiles without any torch header.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "dtype.h"

namespace llm_ops::silu_mul {

using llm_ops::DType;

// out[r, i] = silu(x[r, i]) * x[r, d + i] for x of shape [rows, 2d], out of shape [rows, d].
// Returns nullptr on success, else a message naming the CUDA error.
const char* launch_forward(DType dtype, void* out, const void* x, int64_t rows, int64_t d,
                           cudaStream_t stream);

// dx[r, i] = dout * x[r, d + i] * silu'(x[r, i]); dx[r, d + i] = dout * silu(x[r, i]).
const char* launch_backward(DType dtype, void* dx, const void* dout, const void* x,
                            int64_t rows, int64_t d, cudaStream_t stream);

}  // namespace llm_ops::silu_mul
