// One instantiation of the tile experiment: gemm::Coop256x128c21, B row-major, plain epilogue.
#include "configs.cuh"

MOE_OPS_DEFINE_GEMM(tiles_coop256x128c21, Coop256x128c21, RowMajor, false)
