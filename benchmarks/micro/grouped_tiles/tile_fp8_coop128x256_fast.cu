// One instantiation of the tile experiment: FP8 row-wise, fp8::Coop128x256Fast.
#include "configs.cuh"

MOE_OPS_DEFINE_FP8_GEMM(tiles_fp8_coop128x256_fast, Rowwise<fp8::Coop128x256Fast>)
