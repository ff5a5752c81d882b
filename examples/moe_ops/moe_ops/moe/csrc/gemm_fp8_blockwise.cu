// One CUTLASS instantiation: e4m3 x e4m3 -> bf16, 1x128 / 128x128 block scales in the main loop.
#include "grouped_gemm_fp8.cuh"

MOE_OPS_DEFINE_FP8_GEMM(gemm_fp8_blockwise, Blockwise)
