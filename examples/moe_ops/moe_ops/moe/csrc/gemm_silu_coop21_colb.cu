// One CUTLASS instantiation: Cooperative2x1Config, B[g] K-major (w as the transposed view of [E, N, K]), SiLU-and-mul epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_silu_coop21_colb, Cooperative2x1Config, ColumnMajor, true)
