// The grouped GEMM's `auto` rule: which configuration a call runs, from what the host knows
// without a sync. Plain host C++ (no kernels), so a test compiles it alone.
#include "moe.h"

namespace moe_ops {

GemmConfig gemm_config_for(const GroupedGemmArgs& args, int sm_count) {
  if (args.config == static_cast<int>(GemmConfig::kCooperative) ||
      args.config == static_cast<int>(GemmConfig::kSmall) ||
      args.config == static_cast<int>(GemmConfig::kGemv) ||
      args.config == static_cast<int>(GemmConfig::kCooperative2x1)) {
    return static_cast<GemmConfig>(args.config);
  }
  // Measured on an H200 and an H100 (docs/moe_ops.md). Of what the host knows without a sync,
  // the rule reads m_total, the group count, N and K (the weight layout did not change the
  // best pick). With a few rows an expert (decode), at most active = min(groups, m_total)
  // experts have rows, each one 128x256 tile high.
  const int64_t active = args.m_total < args.groups ? args.m_total : args.groups;
  const int64_t coop_tiles = active * ((args.n + 255) / 256);
  // The weight-streaming kernel: one row an expert or less and at most about three waves of
  // cooperative tiles. There every tile holds one or two real rows of its 128, and gemv reads
  // the weights once with every SM busy (it splits K where the column blocks are few).
  if (args.m_total <= args.groups * kGemvRowsPerGroup && coop_tiles <= kGemvMaxCoopTiles) {
    return GemmConfig::kGemv;
  }
  // When the cooperative tiles would fill less than half the SMs, the small tile's four times
  // as many CTAs stream the weights faster.
  if (args.m_total <= args.groups * kSmallRowsPerGroup && 2 * coop_tiles < sm_count) {
    return GemmConfig::kSmall;
  }
  // One or two row tiles an expert over a long K: the weights are most of the bytes, and the
  // 2x1 cluster multicasts their tile to both row tiles.
  if (args.m_total > args.groups * kCoop2x1MinRowsPerGroup &&
      args.m_total <= args.groups * kCoop2x1MaxRowsPerGroup && args.k >= kCoop2x1MinK) {
    return GemmConfig::kCooperative2x1;
  }
  // Otherwise the cooperative tile: the fastest or within 3% of it on every other prefill
  // layer benchmarked.
  return GemmConfig::kCooperative;
}

}  // namespace moe_ops
