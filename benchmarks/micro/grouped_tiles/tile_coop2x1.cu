// One instantiation of the tile experiment: gemm::Coop2x1, B row-major, plain epilogue.
#include "configs.cuh"

MOE_OPS_DEFINE_GEMM(tiles_coop2x1, Coop2x1, RowMajor, false)
