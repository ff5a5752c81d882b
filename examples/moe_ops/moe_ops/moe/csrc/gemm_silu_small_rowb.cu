// One CUTLASS instantiation: SmallConfig, B[g] row-major (w as [E, K, N]), SiLU-and-mul epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_silu_small_rowb, SmallConfig, RowMajor, true)
