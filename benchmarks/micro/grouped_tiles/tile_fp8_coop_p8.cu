// One instantiation of the tile experiment: FP8 row-wise, fp8::CoopPromote<8>.
#include "configs.cuh"

MOE_OPS_DEFINE_FP8_GEMM(tiles_fp8_coop_p8, Rowwise<fp8::CoopPromote<8>>)
