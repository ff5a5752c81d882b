// One instantiation of the tile experiment: FP8 row-wise, fp8::CoopFast.
#include "configs.cuh"

MOE_OPS_DEFINE_FP8_GEMM(tiles_fp8_coop_fast, Rowwise<fp8::CoopFast>)
