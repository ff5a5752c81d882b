// One CUTLASS instantiation: SmallConfig, B[g] K-major (w as the transposed view of [E, N, K]), bf16 TMA-store epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_small_colb, SmallConfig, ColumnMajor, false)
