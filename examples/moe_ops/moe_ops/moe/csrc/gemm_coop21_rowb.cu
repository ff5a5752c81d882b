// One CUTLASS instantiation: Cooperative2x1Config, B[g] row-major (w as [E, K, N]), bf16 TMA-store epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_coop21_rowb, Cooperative2x1Config, RowMajor, false)
