// One CUTLASS instantiation: e4m3 x e4m3 -> bf16, row-wise scales in an epilogue visitor tree,
// the pingpong 64x128x128 tile (groups of up to 64 rows).
#include "grouped_gemm_fp8.cuh"

MOE_OPS_DEFINE_FP8_GEMM(gemm_fp8_rowwise_pong, Rowwise<fp8::PingpongTile>)
