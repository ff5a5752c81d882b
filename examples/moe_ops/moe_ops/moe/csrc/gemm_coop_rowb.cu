// One CUTLASS instantiation: CooperativeConfig, B[g] row-major (w as [E, K, N]), bf16 TMA-store epilogue.
#include "grouped_gemm.cuh"

MOE_OPS_DEFINE_GEMM(gemm_coop_rowb, CooperativeConfig, RowMajor, false)
