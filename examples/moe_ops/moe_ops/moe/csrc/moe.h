// The launchers of moe_ops' kernels, as the torch binding sees them (no torch or CUTLASS types).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moe_ops {

// Tile configurations of the grouped GEMM (the `config` argument of the ops).
enum class GemmConfig : int {
  kAuto = 0,         // chosen from the shape (gemm_config_for)
  kCooperative = 1,  // 128x256x64 tile, two consumer warpgroups on one tile, cluster 1x2
  kSmall = 2,        // 64x64x128 pingpong tile, cluster 1x1: for a few rows an expert
                     // (decode), where the GEMM streams the weights and the number of
                     // tiles (CTAs reading them) sets the bandwidth
  kGemv = 3,         // no CUTLASS tile: a weight-streaming kernel (gemv.cuh) for one or two
                     // rows an expert; fp32 accumulation in its own order
  kCooperative2x1 = 4,  // the cooperative tile in a 2x1 cluster: the two CTAs of a cluster
                        // take the same weight columns of two row tiles, so B's tile is
                        // multicast (read once from L2 for both) instead of A's
};

// `kAuto` takes kSmall when the rows an expert average at most this (m_total <= groups *
// kSmallRowsPerGroup) and the cooperative tiles of the experts that can have rows would
// fill less than half the SMs; else kCooperative (gemm_config_for; docs/moe_ops.md).
constexpr int64_t kSmallRowsPerGroup = 4;
// `kAuto` takes kGemv at most kGemvRowsPerGroup rows an expert on average when the experts
// with rows fill at most kGemvMaxCoopTiles cooperative tiles (about three waves on 132 SMs;
// beyond that the CUTLASS tile streams the weights as fast and is exact). Measured on an H200
// and an H100 (docs/moe_ops.md): the best bound of 0, 128, 224, 256, 384, 512, 768 and 1024
// on both cards' decode runs.
constexpr int64_t kGemvRowsPerGroup = 1;
constexpr int64_t kGemvMaxCoopTiles = 384;
// `kAuto` takes kCooperative2x1 when the rows an expert average more than
// kCoop2x1MinRowsPerGroup and at most kCoop2x1MaxRowsPerGroup (one or two 128-row tiles an
// expert: the weights are most of the bytes) and K is at least kCoop2x1MinK (long main
// loops). Measured on an H100 (docs/moe_ops.md): DeepSeek-V3's prefill gate/up (128 rows an
// expert, K 7168) 1.25x / 1.12x the 1x2 cluster (row-major / K-major weights); no other
// prefill GEMM of the benchmark gained in both layouts.
constexpr int64_t kCoop2x1MinRowsPerGroup = 64;
constexpr int64_t kCoop2x1MaxRowsPerGroup = 192;
constexpr int64_t kCoop2x1MinK = 4096;

// Elements (bf16) that K, N and every row start must be a multiple of: 16-byte TMA rows.
constexpr int64_t kAlignment = 8;

// What the device reports about offsets it was given: kinds of invalid offsets, one int32
// word each per op (OffsetsErrorOp's order), set to 1 when seen.
enum class OffsetsError : int {
  kNegative = 0,    // offsets[g] < 0
  kDecreasing = 1,  // offsets[g] < offsets[g-1]
  kPastEnd = 2,     // offsets[g] > m_total
};
constexpr int kOffsetsErrorKinds = 3;
// The ops that take offsets from the caller, in the order of their words.
enum class OffsetsErrorOp : int { kGroupedMm = 0, kGroupedMmSiluMul = 1, kGroupedMmFp8 = 2 };
constexpr int kOffsetsErrorOps = 3;
constexpr int kOffsetsErrorWords = kOffsetsErrorOps * kOffsetsErrorKinds;

// One grouped GEMM, torch._grouped_mm's 2-D x 3-D case: for each group g, rows
// [offsets[g-1], offsets[g]) of A (offsets[-1] = 0) times B[g] into the same rows of D.
// Offsets that are not non-decreasing within [0, m_total] never make it read or write outside
// A and D: group g gets rows [c(g-1), c(g)) with c(g) = min(max(0, offsets[0..g]), m_total),
// which for valid offsets is exactly [offsets[g-1], offsets[g]).
struct GroupedGemmArgs {
  const void* a;            // [m_total, k] bf16, row-major (row stride k)
  const void* b;            // [groups, k, n] bf16: element (g, k, n) at b[g*b_group_stride + ...]
  void* d;                  // [m_total, n] bf16 row-major; [m_total, n/2] with silu_mul
  const int32_t* offsets;   // [groups] int32, cumulative row ends
  int32_t* offsets_errors;  // kOffsetsErrorWords words (device-visible) where invalid offsets
                            // are reported (all ops' words: the launch picks its own);
                            // nullptr when the offsets are valid by construction
                            // (moe_forward's own scan): no running max, no checks
  int64_t groups;
  int64_t m_total;
  int64_t n;                // columns of B (2I for the gate/up GEMM)
  int64_t k;
  int64_t b_group_stride;   // elements between B[g] and B[g+1]
  bool b_k_major;           // false: B[g] is k x n row-major (stride n, 1); true: the
                            // transposed view (stride 1, k), i.e. stored n x k
  bool silu_mul;            // D = silu(B cols 2j) * (B cols 2j+1): interleaved gate/up
  int config;               // GemmConfig
};

// The configuration `kAuto` resolves to for these arguments on a device of `sm_count` SMs.
GemmConfig gemm_config_for(const GroupedGemmArgs& args, int sm_count);

// Bytes of device workspace the grouped GEMM needs (pointer/stride/shape arrays + CUTLASS's).
size_t grouped_gemm_workspace_size(const GroupedGemmArgs& args, int sm_count);

// Launches the grouped GEMM on `stream`; nullptr on success, else a message. No host sync.
const char* grouped_gemm(const GroupedGemmArgs& args, void* workspace, size_t workspace_bytes,
                         int sm_count, cudaStream_t stream);

// One CUTLASS instantiation: each lives in its own translation unit (gemm_*.cu).
#define MOE_OPS_DECLARE_GEMM(NAME)                                                   \
  size_t NAME##_workspace_size(int64_t groups, int sm_count);                       \
  const char* NAME##_run(const GroupedGemmArgs& args, void* workspace, size_t bytes, \
                         int sm_count, cudaStream_t stream);
MOE_OPS_DECLARE_GEMM(gemm_coop_rowb)
MOE_OPS_DECLARE_GEMM(gemm_coop_colb)
MOE_OPS_DECLARE_GEMM(gemm_silu_coop_rowb)
MOE_OPS_DECLARE_GEMM(gemm_silu_coop_colb)
MOE_OPS_DECLARE_GEMM(gemm_small_rowb)
MOE_OPS_DECLARE_GEMM(gemm_small_colb)
MOE_OPS_DECLARE_GEMM(gemm_silu_small_rowb)
MOE_OPS_DECLARE_GEMM(gemm_silu_small_colb)
MOE_OPS_DECLARE_GEMM(gemm_coop21_rowb)
MOE_OPS_DECLARE_GEMM(gemm_coop21_colb)
MOE_OPS_DECLARE_GEMM(gemm_silu_coop21_rowb)
MOE_OPS_DECLARE_GEMM(gemm_silu_coop21_colb)
#undef MOE_OPS_DECLARE_GEMM

// ---- FP8 (e4m3) grouped GEMM: bf16 out, fp32 accumulation, two scale layouts ----

enum class Fp8Scaling : int {
  kRowwise = 0,  // a_scale [m_total] (per row), b_scale [groups, n] (per output column):
                 // D = (A B[g]) * a_scale[:, None] * b_scale[g][None, :] in the epilogue
  kBlockwise = 1,  // a_scale [m_total, k/128] (1x128 blocks), b_scale [groups, n/128, k/128]
                   // (128x128 blocks), applied in the main loop per 128-deep K block
};

// K (and N) must be multiples of these: 16-byte TMA rows of e4m3 (row-wise), the 128-wide
// scale blocks (block-wise).
constexpr int64_t kFp8Alignment = 16;
constexpr int64_t kFp8Block = 128;

// Tile configurations of the FP8 grouped GEMM (grouped_gemm_fp8.cuh; the `config` argument of
// grouped_mm_fp8 and moe_forward_fp8). Block-wise scales run the cooperative tile whatever
// is asked.
enum class Fp8Config : int {
  kAuto = 0,         // chosen from the shape (fp8_config_for)
  kCooperative = 1,  // 128x128x128, cluster 1x2
  kPingpong = 2,     // 64x128x128, cluster 1x2: groups of up to 64 rows
};
// `kAuto` takes kPingpong (row-wise scales) when the rows an expert average at most
// kFp8PingpongRowsPerGroup (a 128-row tile would be half empty) over at least
// kFp8PingpongMinGroups experts.
constexpr int64_t kFp8PingpongRowsPerGroup = 64;
constexpr int64_t kFp8PingpongMinGroups = 64;

// One FP8 grouped GEMM, torch._scaled_grouped_mm's 2-D x 3-D case, with grouped_mm's offsets
// (same clamping and reporting).
struct Fp8GemmArgs {
  const void* a;            // [m_total, k] e4m3 row-major
  const void* b;            // [groups] x [n, k] e4m3 K-major: the transposed view of B[g] (k x n)
  const float* a_scale;     // see Fp8Scaling
  const float* b_scale;
  void* d;                  // [m_total, n] bf16 row-major
  const int32_t* offsets;   // [groups] int32, cumulative row ends
  int32_t* offsets_errors;  // as in GroupedGemmArgs (all ops' words), or nullptr
  int64_t groups;
  int64_t m_total;
  int64_t n;
  int64_t k;
  int64_t b_group_stride;   // elements between B[g] and B[g+1]
  Fp8Scaling scaling;
  int config;               // Fp8Config
};

// The configuration `kAuto` resolves to for these arguments on a device of `sm_count` SMs.
Fp8Config fp8_config_for(const Fp8GemmArgs& args, int sm_count);

size_t grouped_gemm_fp8_workspace_size(const Fp8GemmArgs& args, int sm_count);
const char* grouped_gemm_fp8(const Fp8GemmArgs& args, void* workspace, size_t workspace_bytes,
                             int sm_count, cudaStream_t stream);

#define MOE_OPS_DECLARE_FP8_GEMM(NAME)                                               \
  size_t NAME##_workspace_size(int64_t groups, int sm_count);                       \
  const char* NAME##_run(const Fp8GemmArgs& args, void* workspace, size_t bytes,    \
                         int sm_count, cudaStream_t stream);
MOE_OPS_DECLARE_FP8_GEMM(gemm_fp8_rowwise)
MOE_OPS_DECLARE_FP8_GEMM(gemm_fp8_rowwise_pong)
MOE_OPS_DECLARE_FP8_GEMM(gemm_fp8_blockwise)
#undef MOE_OPS_DECLARE_FP8_GEMM

// Quantises bf16 rows to e4m3 with fp32 scales (scale = amax / 448, q = x / scale, so
// q * scale ~ x), per row (Fp8Scaling::kRowwise: scale [rows]) or per 1x128 block
// (kBlockwise: scale [rows, cols/128]). With `silu_mul`, src is [rows, 2 * cols] with gate in
// columns :cols and up in cols: and the quantised value is silu(gate) * up.
struct QuantizeArgs {
  const void* src;   // bf16 [rows, cols] (or [rows, 2 * cols] with silu_mul), row-major
  void* dst;         // e4m3 [rows, cols]
  float* scale;      // [rows] or [rows, cols / 128]
  int64_t rows;
  int64_t cols;      // a multiple of 8 (row-wise) or 128 (block-wise)
  bool silu_mul;
  Fp8Scaling scaling;
};
const char* quantize_fp8(const QuantizeArgs& args, cudaStream_t stream);

// Router logits' element type.
enum class LogitType { kFloat32, kBFloat16, kFloat16 };

constexpr int kMaxExperts = 1024;
constexpr int kMaxTopK = 8;

// Top-k routing and the permutation into expert order.
struct RouteArgs {
  const void* logits;    // [tokens, experts]
  LogitType logit_type;
  const void* x;         // [tokens, hidden] bf16
  int64_t tokens;
  int64_t experts;
  int64_t hidden;
  int top_k;
  // outputs (device buffers the caller allocates)
  int32_t* counts;       // [2 * experts] scratch: per-expert counts, then fill cursors
  int32_t* offsets;      // [experts] cumulative row ends of each expert's block (int32)
  float* weights;        // [tokens, top_k] renormalised routing weights
  int32_t* rows;         // [tokens, top_k] the permuted row of each (token, slot)
  void* x_sorted;        // [tokens * top_k, hidden] bf16: x's rows in expert order
};

// Softmax top-k (renormalised over the k chosen), counting sort by expert, gather of x.
const char* route_and_permute(const RouteArgs& args, cudaStream_t stream);

// out[t] = sum_j weights[t, j] * y_sorted[rows[t, j]] (fp32 sum, bf16 out).
const char* combine(const void* y_sorted, const float* weights, const int32_t* rows, void* out,
                    int64_t tokens, int64_t hidden, int top_k, cudaStream_t stream);

}  // namespace moe_ops
