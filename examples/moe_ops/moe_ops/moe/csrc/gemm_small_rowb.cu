// One CUTLASS instantiation: SmallConfig, B[g] row-major (w as [E, K, N]), bf16 TMA-store epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_small_rowb, SmallConfig, RowMajor, false)
