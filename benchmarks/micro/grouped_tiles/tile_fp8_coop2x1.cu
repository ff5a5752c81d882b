// One instantiation of the tile experiment: FP8 row-wise, fp8::Coop2x1.
#include "configs.cuh"

MOE_OPS_DEFINE_FP8_GEMM(tiles_fp8_coop2x1, Rowwise<fp8::Coop2x1>)
