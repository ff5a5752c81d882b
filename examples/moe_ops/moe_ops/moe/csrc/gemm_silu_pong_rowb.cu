// One CUTLASS instantiation: PingpongConfig, B[g] row-major (w as [E, K, N]), SiLU-and-mul epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_silu_pong_rowb, PingpongConfig, RowMajor, true)
