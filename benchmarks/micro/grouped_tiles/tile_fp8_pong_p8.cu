// One instantiation of the tile experiment: FP8 row-wise, fp8::PongPromote<8>.
#include "configs.cuh"

MOE_OPS_DEFINE_FP8_GEMM(tiles_fp8_pong_p8, Rowwise<fp8::PongPromote<8>>)
