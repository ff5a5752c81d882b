// The element types the llm_ops kernels take, as the launchers see them (no torch types).
#pragma once

namespace llm_ops {

enum class DType { kFloat32, kFloat16, kBFloat16 };

}  // namespace llm_ops
