// One instantiation of the tile experiment: gemm::Coop2x2, B row-major, plain epilogue.
#include "configs.cuh"

MOE_OPS_DEFINE_GEMM(tiles_coop2x2, Coop2x2, RowMajor, false)
