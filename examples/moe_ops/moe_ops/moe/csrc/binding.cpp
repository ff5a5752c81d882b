// torch ops of moe_ops, through the LibTorch stable ABI (no C++ torch symbol is linked).
//
//   grouped_mm(x, w, offsets, config)           torch._grouped_mm's 2-D x 3-D case
//   grouped_mm_silu_mul(x, w, offsets, config)  the same with SiLU-and-mul on interleaved
//                                               gate/up columns fused into the epilogue
//   grouped_mm_fp8(x, w, x_scale, w_scale, offsets, config)
//                                               torch._scaled_grouped_mm's 2-D x 3-D case on
//                                               e4m3 (row-wise scales), or DeepSeek-style
//                                               1x128 / 128x128 block scales; bf16 out
//   moe_forward(x, router_logits, w_gate_up, w_down, top_k, config)
//   moe_forward_fp8(x, router_logits, w_gate_up, w_gate_up_scale, w_down, w_down_scale,
//                   top_k, config)              the same with e4m3 weights; the activations
//                                               are quantised on the fly
//   check_offsets_errors(device)                raises what the device reported about earlier
//                                               grouped_mm calls' offsets (after a sync)
//
// Outputs and workspaces come from torch's caching allocator (aoti_torch_empty_strided);
// nothing synchronises with the host, so every op can be captured in a CUDA graph.
#include <kernelpack/ops.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>

#include "moe.h"

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

cudaStream_t current_stream(int32_t device) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  return static_cast<cudaStream_t>(stream);
}

int sm_count(int32_t device) {
  static int cached[64] = {};
  if (device >= 0 && device < 64 && cached[device] > 0) {
    return cached[device];
  }
  int count = 0;
  STD_TORCH_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) ==
                      cudaSuccess,
                  "moe_ops: cannot read the multiprocessor count");
  if (device >= 0 && device < 64) {
    cached[device] = count;
  }
  return count;
}

// Offsets the kernel cannot trust. grouped_mm's offsets live on the device, and looking at
// them from the host would cost a sync per call. Instead the setup kernel clamps them into
// non-decreasing groups within [0, M] (nothing outside x and the output is ever touched) and
// reports what was wrong in kOffsetsErrorWords int32 words of pinned host memory mapped into
// the device's address space, one block of words per device. The host reads the words
// without a sync at the start of the next grouped_mm (it sees what the kernels before it
// have finished writing) and in check_offsets_errors (which Python calls after syncing the
// device), raises once and clears them.
constexpr int32_t kMaxDevices = 64;

struct OffsetsErrorWords {
  std::atomic<int32_t*> host{nullptr};  // published after `device` is set
  int32_t* device = nullptr;
};

OffsetsErrorWords& offsets_error_words(int32_t device) {
  static std::array<OffsetsErrorWords, kMaxDevices> words;
  STD_TORCH_CHECK(device >= 0 && device < kMaxDevices, "moe_ops: device index ", device,
                  " is outside [0, ", kMaxDevices, ")");
  return words[static_cast<size_t>(device)];
}

// The device's pointer to the words of `device` (current), allocated on first use: once per
// device and process, never freed (a kernel of a captured graph may write them at any time).
int32_t* offsets_error_flags(int32_t device, const char* op) {
  OffsetsErrorWords& words = offsets_error_words(device);
  if (words.host.load(std::memory_order_acquire) != nullptr) {
    return words.device;
  }
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  if (words.host.load(std::memory_order_relaxed) != nullptr) {
    return words.device;
  }
  // The first call may come inside CUDA-graph capture, whose default (global) mode refuses
  // cudaHostAlloc; relaxed mode allows it, and it happens at once, outside the graph.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  void* host = nullptr;
  void* mapped = nullptr;
  constexpr size_t kBytes = moe_ops::kOffsetsErrorWords * sizeof(int32_t);
  cudaError_t err = cudaHostAlloc(&host, kBytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (err == cudaSuccess) {
    err = cudaHostGetDevicePointer(&mapped, host, 0);
    if (err != cudaSuccess) {
      cudaFreeHost(host);
    }
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error for the launches' checks to find
    STD_TORCH_CHECK(false, op, ": cannot allocate the flags for invalid offsets (",
                    cudaGetErrorString(err), ")");
  }
  std::memset(host, 0, kBytes);
  words.device = static_cast<int32_t*>(mapped);
  words.host.store(static_cast<int32_t*>(host), std::memory_order_release);
  return words.device;
}

// Raises, once, what the device reported about earlier calls' offsets on `device`.
void raise_offsets_errors(int32_t device) {
  int32_t* host = offsets_error_words(device).host.load(std::memory_order_acquire);
  if (host == nullptr) {
    return;
  }
  bool any = false;
  for (int i = 0; i < moe_ops::kOffsetsErrorWords; ++i) {
    any = any || __atomic_load_n(&host[i], __ATOMIC_RELAXED) != 0;
  }
  if (!any) {
    return;
  }
  // In the order of the words (moe.h's OffsetsErrorOp, then OffsetsError).
  constexpr std::array<const char*, moe_ops::kOffsetsErrorOps> kOps = {
      "grouped_mm", "grouped_mm_silu_mul", "grouped_mm_fp8"};
  constexpr std::array<const char*, moe_ops::kOffsetsErrorKinds> kKinds = {
      "a negative offset", "an offset below the one before it", "an offset above M"};
  std::string message;
  for (size_t op = 0; op < kOps.size(); ++op) {
    std::string kinds;
    for (size_t kind = 0; kind < kKinds.size(); ++kind) {
      const size_t word = op * kKinds.size() + kind;
      if (__atomic_exchange_n(&host[word], 0, __ATOMIC_RELAXED) != 0) {
        kinds += (kinds.empty() ? "" : ", ") + std::string(kKinds[kind]);
      }
    }
    if (!kinds.empty()) {
      message += (message.empty() ? "" : "; ") + std::string(kOps[op]) +
                 ": an earlier call on cuda:" + std::to_string(device) +
                 " got offsets that were not non-decreasing within [0, M] (" + kinds +
                 "); its groups were clamped into [0, M] and made non-decreasing, so nothing"
                 " outside its tensors was read or written but its output is not"
                 " torch._grouped_mm's (reported once)";
    }
  }
  STD_TORCH_CHECK(message.empty(), message);
}

// A contiguous CUDA tensor straight from the allocator (no dispatcher lookup by name).
template <size_t N>
Tensor empty(const std::array<int64_t, N>& sizes, int32_t dtype, int32_t device) {
  std::array<int64_t, N> strides{};
  int64_t stride = 1;
  for (size_t i = N; i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 0 ? sizes[i] : 1;
  }
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(N), sizes.data(),
                                                  strides.data(), dtype,
                                                  aoti_torch_device_type_cuda(), device,
                                                  &handle));
  return Tensor(handle);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_cuda_bf16(const Tensor& t, const char* op, const char* name, int64_t dim) {
  STD_TORCH_CHECK(t.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  STD_TORCH_CHECK(t.scalar_type() == ScalarType::BFloat16, op, ": ", name, " must be bfloat16");
  STD_TORCH_CHECK(t.dim() == dim, op, ": ", name, " must have ", dim, " dimensions, got ",
                  t.dim());
}

// The activations operand: [M, K] row-major, 16-byte aligned rows.
void check_rows(const Tensor& x, const char* op, const char* name) {
  check_cuda_bf16(x, op, name, 2);
  STD_TORCH_CHECK(x.size(0) == 0 || x.size(1) == 0 || (x.stride(1) == 1 && x.stride(0) == x.size(1)),
                  op, ": ", name, " must be contiguous");
  STD_TORCH_CHECK(x.size(1) % moe_ops::kAlignment == 0, op, ": ", name, "'s last dimension (",
                  x.size(1), ") must be a multiple of ", moe_ops::kAlignment);
  STD_TORCH_CHECK(x.size(0) < std::numeric_limits<int32_t>::max(), op, ": ", name,
                  " has too many rows");
  STD_TORCH_CHECK(aligned16(x.const_data_ptr()), op, ": ", name, " must be 16-byte aligned");
}

// The weights operand [E, K, N]: row-major per expert, or the transposed view of [E, N, K].
void describe_weights(const Tensor& w, int64_t k, const char* op, const char* name,
                      moe_ops::GroupedGemmArgs& args) {
  check_cuda_bf16(w, op, name, 3);
  STD_TORCH_CHECK(w.size(1) == k, op, ": ", name, " must have ", k, " rows (K) per expert, got ",
                  w.size(1));
  const int64_t n = w.size(2);
  STD_TORCH_CHECK(n % moe_ops::kAlignment == 0 && n > 0, op, ": ", name, "'s N (", n,
                  ") must be a positive multiple of ", moe_ops::kAlignment);
  const bool row_major = w.stride(2) == 1 && w.stride(1) == n;
  const bool k_major = w.stride(1) == 1 && w.stride(2) == k;
  STD_TORCH_CHECK(row_major || k_major, op, ": ", name,
                  " must be [E, K, N] with each expert contiguous, or the transposed view of a"
                  " contiguous [E, N, K]");
  STD_TORCH_CHECK(w.stride(0) % moe_ops::kAlignment == 0 && aligned16(w.const_data_ptr()), op,
                  ": ", name, " must be 16-byte aligned per expert");
  args.b = w.const_data_ptr();
  args.n = n;
  args.b_group_stride = w.stride(0);
  args.b_k_major = !row_major;
  args.groups = w.size(0);
}

void check_offsets(const Tensor& offsets, const Tensor& x, int64_t groups, const char* op) {
  STD_TORCH_CHECK(offsets.is_cuda() && offsets.get_device_index() == x.get_device_index(), op,
                  ": offsets must be on the device of x");
  STD_TORCH_CHECK(offsets.scalar_type() == ScalarType::Int, op, ": offsets must be int32");
  STD_TORCH_CHECK(offsets.dim() == 1 && offsets.size(0) == groups && offsets.is_contiguous(), op,
                  ": offsets must be a contiguous [", groups, "] tensor (one end per expert)");
}

void run_gemm(const moe_ops::GroupedGemmArgs& args, int32_t device, cudaStream_t stream,
              const char* op) {
  const int sms = sm_count(device);
  const size_t bytes = moe_ops::grouped_gemm_workspace_size(args, sms);
  Tensor workspace = empty<1>({static_cast<int64_t>(bytes)}, aoti_torch_dtype_uint8(), device);
  const char* err = moe_ops::grouped_gemm(args, workspace.mutable_data_ptr(), bytes, sms, stream);
  STD_TORCH_CHECK(err == nullptr, op, ": ", err);
}

Tensor grouped_impl(const Tensor& x, const Tensor& w, const Tensor& offsets, int64_t config,
                    bool silu_mul, const char* op) {
  check_rows(x, op, "x");
  moe_ops::GroupedGemmArgs args{};
  describe_weights(w, x.size(1), op, "w", args);
  check_offsets(offsets, x, args.groups, op);
  STD_TORCH_CHECK(w.get_device_index() == x.get_device_index(), op,
                  ": w must be on the device of x");
  STD_TORCH_CHECK(!silu_mul || args.n % (2 * moe_ops::kAlignment) == 0, op,
                  ": with SiLU-and-mul, N must be a multiple of ", 2 * moe_ops::kAlignment);
  const int32_t device = x.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  raise_offsets_errors(device);
  const int64_t m = x.size(0);
  const int64_t n_out = silu_mul ? args.n / 2 : args.n;
  Tensor out = empty<2>({m, n_out}, aoti_torch_dtype_bfloat16(), device);
  if (m == 0 || x.size(1) == 0) {
    // K == 0 is an empty sum; torch gives zeros there too.
    if (m > 0) {
      torch::stable::zero_(out);
    }
    return out;
  }
  args.a = x.const_data_ptr();
  args.d = out.mutable_data_ptr();
  args.offsets = static_cast<const int32_t*>(offsets.const_data_ptr());
  args.offsets_errors = offsets_error_flags(device, op);
  args.m_total = m;
  args.k = x.size(1);
  args.silu_mul = silu_mul;
  args.config = static_cast<int>(config);
  run_gemm(args, device, current_stream(device), op);
  return out;
}

Tensor grouped_mm(Tensor x, Tensor w, Tensor offsets, int64_t config) {
  return grouped_impl(x, w, offsets, config, false, "grouped_mm");
}

Tensor grouped_mm_silu_mul(Tensor x, Tensor w, Tensor offsets, int64_t config) {
  return grouped_impl(x, w, offsets, config, true, "grouped_mm_silu_mul");
}

// The router logits of moe_forward(_fp8) and the top_k asked for: their element type and the
// number of experts.
struct Router {
  moe_ops::LogitType logit_type;
  int64_t experts;
};

Router check_router(const Tensor& router_logits, int64_t tokens, int64_t top_k, const char* op) {
  STD_TORCH_CHECK(router_logits.is_cuda() && router_logits.dim() == 2 &&
                      router_logits.size(0) == tokens && router_logits.is_contiguous(),
                  op, ": router_logits must be a contiguous CUDA [tokens, experts] tensor");
  moe_ops::LogitType logit_type = moe_ops::LogitType::kFloat32;
  switch (router_logits.scalar_type()) {
    case ScalarType::Float:
      logit_type = moe_ops::LogitType::kFloat32;
      break;
    case ScalarType::BFloat16:
      logit_type = moe_ops::LogitType::kBFloat16;
      break;
    case ScalarType::Half:
      logit_type = moe_ops::LogitType::kFloat16;
      break;
    default:
      STD_TORCH_CHECK(false, op, ": router_logits must be float32, bfloat16 or float16");
  }
  const int64_t experts = router_logits.size(1);
  STD_TORCH_CHECK(experts >= 1 && experts <= moe_ops::kMaxExperts, op,
                  ": the number of experts must be in [1, ", moe_ops::kMaxExperts, "], got ",
                  experts);
  STD_TORCH_CHECK(top_k >= 1 && top_k <= moe_ops::kMaxTopK && top_k <= experts, op,
                  ": top_k must be in [1, min(", moe_ops::kMaxTopK, ", experts)], got ", top_k);
  return {logit_type, experts};
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// An expert layer's w_gate_up [E, H, 2I] and w_down [E, I, H] (H = x's columns), each
// described into `up` / `down` by `describe` (describe_weights or describe_fp8_weights), 2I a
// multiple of 2 * `alignment`, all inputs on x's device; returns I. moe_forward and
// moe_forward_fp8 check their layers with it.
template <class Args>
int64_t describe_layer(const Tensor& x, const Tensor& router_logits, const Tensor& w_gate_up,
                       const Tensor& w_down, int64_t experts, int64_t alignment,
                       void (*describe)(const Tensor&, int64_t, const char*, const char*, Args&),
                       const char* op, Args& up, Args& down) {
  const int64_t hidden = x.size(1);
  describe(w_gate_up, hidden, op, "w_gate_up", up);
  STD_TORCH_CHECK(up.groups == experts, op, ": w_gate_up must have one matrix per expert (",
                  experts, "), got ", up.groups);
  STD_TORCH_CHECK(up.n % (2 * alignment) == 0, op, ": w_gate_up's 2*I must be a multiple of ",
                  2 * alignment);
  const int64_t inter = up.n / 2;
  describe(w_down, inter, op, "w_down", down);
  STD_TORCH_CHECK(down.groups == experts && down.n == hidden, op, ": w_down must be [", experts,
                  ", ", inter, ", ", hidden, "]");
  const int32_t device = x.get_device_index();
  STD_TORCH_CHECK(router_logits.get_device_index() == device &&
                      w_gate_up.get_device_index() == device &&
                      w_down.get_device_index() == device,
                  op, ": all inputs must be on one device");
  return inter;
}

Tensor moe_forward(Tensor x, Tensor router_logits, Tensor w_gate_up, Tensor w_down,
                   int64_t top_k, int64_t config) {
  const char* op = "moe_forward";
  check_rows(x, op, "x");
  const int64_t tokens = x.size(0);
  const int64_t hidden = x.size(1);
  const Router router = check_router(router_logits, tokens, top_k, op);
  const moe_ops::LogitType logit_type = router.logit_type;
  const int64_t experts = router.experts;
  moe_ops::GroupedGemmArgs up{};
  moe_ops::GroupedGemmArgs down{};
  const int64_t inter = describe_layer(x, router_logits, w_gate_up, w_down, experts,
                                       moe_ops::kAlignment, describe_weights, op, up, down);
  const int32_t device = x.get_device_index();
  const int64_t rows = tokens * top_k;
  STD_TORCH_CHECK(rows < std::numeric_limits<int32_t>::max(), op, ": too many tokens");

  const torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  Tensor out = empty<2>({tokens, hidden}, aoti_torch_dtype_bfloat16(), device);
  if (tokens == 0) {
    return out;
  }
  const int sms = sm_count(device);
  up.config = down.config = static_cast<int>(config);
  up.silu_mul = true;
  up.m_total = down.m_total = rows;
  up.k = hidden;
  down.k = inter;

  // One allocation for everything: routing scratch, the two GEMMs' arrays, the activations.
  const size_t e = static_cast<size_t>(experts);
  const size_t r = static_cast<size_t>(rows);
  const size_t counts_b = round_up(2 * e * sizeof(int32_t));
  const size_t offsets_b = round_up(e * sizeof(int32_t));
  const size_t weights_b = round_up(r * sizeof(float));
  const size_t rows_b = round_up(r * sizeof(int32_t));
  const size_t ws_up_b = round_up(moe_ops::grouped_gemm_workspace_size(up, sms));
  const size_t ws_down_b = round_up(moe_ops::grouped_gemm_workspace_size(down, sms));
  const size_t sorted_b = round_up(r * static_cast<size_t>(hidden) * 2);  // x, then y
  const size_t h_b = round_up(r * static_cast<size_t>(inter) * 2);
  const size_t total =
      counts_b + offsets_b + weights_b + rows_b + ws_up_b + ws_down_b + sorted_b + h_b;
  Tensor workspace = empty<1>({static_cast<int64_t>(total)}, aoti_torch_dtype_uint8(), device);
  char* p = static_cast<char*>(workspace.mutable_data_ptr());
  auto carve = [&p](size_t bytes) {
    char* q = p;
    p += bytes;
    return q;
  };
  auto* counts = reinterpret_cast<int32_t*>(carve(counts_b));
  auto* offsets = reinterpret_cast<int32_t*>(carve(offsets_b));
  auto* weights = reinterpret_cast<float*>(carve(weights_b));
  auto* slot_rows = reinterpret_cast<int32_t*>(carve(rows_b));
  void* ws_up = carve(ws_up_b);
  void* ws_down = carve(ws_down_b);
  void* sorted = carve(sorted_b);
  void* h = carve(h_b);

  moe_ops::RouteArgs route{};
  route.logits = router_logits.const_data_ptr();
  route.logit_type = logit_type;
  route.x = x.const_data_ptr();
  route.tokens = tokens;
  route.experts = experts;
  route.hidden = hidden;
  route.top_k = static_cast<int>(top_k);
  route.counts = counts;
  route.offsets = offsets;
  route.weights = weights;
  route.rows = slot_rows;
  route.x_sorted = sorted;
  const char* err = moe_ops::route_and_permute(route, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (routing): ", err);

  // The offsets of our own scan are valid by construction: no checked setup, no flags.
  up.a = sorted;
  up.d = h;
  up.offsets = offsets;
  err = moe_ops::grouped_gemm(up, ws_up, ws_up_b, sms, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (gate/up GEMM): ", err);

  down.a = h;
  down.d = sorted;  // x_sorted is dead after the first GEMM: y_sorted reuses it
  down.offsets = offsets;
  err = moe_ops::grouped_gemm(down, ws_down, ws_down_b, sms, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (down GEMM): ", err);

  err = moe_ops::combine(sorted, weights, slot_rows, out.mutable_data_ptr(), tokens, hidden,
                         static_cast<int>(top_k), stream);
  STD_TORCH_CHECK(err == nullptr, op, " (combine): ", err);
  return out;
}

// ---- FP8 ----

const char* scaling_name(moe_ops::Fp8Scaling scaling) {
  return scaling == moe_ops::Fp8Scaling::kBlockwise ? "block-wise" : "row-wise";
}

bool is_float32(const Tensor& t, std::initializer_list<int64_t> sizes) {
  if (t.scalar_type() != ScalarType::Float || t.dim() != static_cast<int64_t>(sizes.size()) ||
      !t.is_contiguous()) {
    return false;
  }
  int64_t d = 0;
  for (const int64_t size : sizes) {
    if (t.size(d++) != size) {
      return false;
    }
  }
  return true;
}

// The FP8 activations operand: e4m3 [M, K] row-major, K a multiple of 16, 16-byte aligned.
void check_fp8_rows(const Tensor& x, const char* op, const char* name) {
  STD_TORCH_CHECK(x.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  STD_TORCH_CHECK(x.scalar_type() == ScalarType::Float8_e4m3fn, op, ": ", name,
                  " must be float8_e4m3fn");
  STD_TORCH_CHECK(x.dim() == 2, op, ": ", name, " must have 2 dimensions, got ", x.dim());
  STD_TORCH_CHECK(x.size(0) == 0 || x.size(1) == 0 || (x.stride(1) == 1 && x.stride(0) == x.size(1)),
                  op, ": ", name, " must be contiguous");
  STD_TORCH_CHECK(x.size(1) % moe_ops::kFp8Alignment == 0, op, ": K (", x.size(1),
                  ") must be a multiple of ", moe_ops::kFp8Alignment);
  STD_TORCH_CHECK(x.size(0) < std::numeric_limits<int32_t>::max(), op, ": ", name,
                  " has too many rows");
  STD_TORCH_CHECK(aligned16(x.const_data_ptr()), op, ": ", name, " must be 16-byte aligned");
}

// The FP8 weights [E, K, N]: the transposed view of a contiguous [E, N, K] (K-major), what
// torch._scaled_grouped_mm takes.
void describe_fp8_weights(const Tensor& w, int64_t k, const char* op, const char* name,
                          moe_ops::Fp8GemmArgs& args) {
  STD_TORCH_CHECK(w.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  STD_TORCH_CHECK(w.scalar_type() == ScalarType::Float8_e4m3fn, op, ": ", name,
                  " must be float8_e4m3fn");
  STD_TORCH_CHECK(w.dim() == 3, op, ": ", name, " must have 3 dimensions, got ", w.dim());
  STD_TORCH_CHECK(w.size(1) == k, op, ": ", name, " must have ", k, " rows (K) per expert, got ",
                  w.size(1));
  const int64_t n = w.size(2);
  STD_TORCH_CHECK(n > 0 && n % moe_ops::kFp8Alignment == 0, op, ": ", name, "'s N (", n,
                  ") must be a positive multiple of ", moe_ops::kFp8Alignment);
  STD_TORCH_CHECK(w.size(0) >= 1, op, ": ", name, " must hold at least one expert");
  STD_TORCH_CHECK(w.stride(1) == 1 && w.stride(2) == k, op, ": ", name,
                  " must be the transposed view of a contiguous [E, N, K] (K-major, as for"
                  " torch._scaled_grouped_mm)");
  STD_TORCH_CHECK(w.stride(0) % moe_ops::kFp8Alignment == 0 && aligned16(w.const_data_ptr()), op,
                  ": ", name, " must be 16-byte aligned per expert");
  args.b = w.const_data_ptr();
  args.n = n;
  args.k = k;
  args.b_group_stride = w.stride(0);
  args.groups = w.size(0);
}

// The weights' scales, whose shape says the layout: [E, N] row-wise, [E, N/128, K/128] blocks.
moe_ops::Fp8Scaling check_fp8_weight_scale(const Tensor& s, const moe_ops::Fp8GemmArgs& args,
                                           int32_t device, const char* op, const char* name) {
  const int64_t e = args.groups;
  const int64_t b = moe_ops::kFp8Block;
  STD_TORCH_CHECK(s.is_cuda() && s.get_device_index() == device, op, ": ", name,
                  " must be on the device of x");
  moe_ops::Fp8Scaling scaling;
  if (is_float32(s, {e, args.n})) {
    scaling = moe_ops::Fp8Scaling::kRowwise;
  } else if (s.dim() == 3) {
    scaling = moe_ops::Fp8Scaling::kBlockwise;
    STD_TORCH_CHECK(args.k % b == 0 && args.n % b == 0, op, ": with block scales, K (", args.k,
                    ") and N (", args.n, ") must be multiples of ", b);
    STD_TORCH_CHECK(is_float32(s, {e, args.n / b, args.k / b}), op, ": ", name,
                    " must be a contiguous float32 [E, N/128, K/128] = [", e, ", ", args.n / b,
                    ", ", args.k / b, "] tensor");
  } else {
    STD_TORCH_CHECK(false, op, ": ", name, " must be a contiguous float32 [E, N] = [", e, ", ",
                    args.n, "] or [E, N/128, K/128] tensor");
  }
  STD_TORCH_CHECK(aligned16(s.const_data_ptr()), op, ": ", name, " must be 16-byte aligned");
  return scaling;
}

Tensor grouped_mm_fp8(Tensor x, Tensor w, Tensor x_scale, Tensor w_scale, Tensor offsets,
                      int64_t config) {
  const char* op = "grouped_mm_fp8";
  check_fp8_rows(x, op, "x");
  const int64_t m = x.size(0);
  const int64_t k = x.size(1);
  const int32_t device = x.get_device_index();
  moe_ops::Fp8GemmArgs args{};
  describe_fp8_weights(w, k, op, "w", args);
  STD_TORCH_CHECK(w.get_device_index() == device, op, ": w must be on the device of x");
  check_offsets(offsets, x, args.groups, op);
  STD_TORCH_CHECK(x_scale.is_cuda() && x_scale.get_device_index() == device, op,
                  ": x_scale must be on the device of x");
  const bool rowwise = is_float32(x_scale, {m});
  STD_TORCH_CHECK(rowwise || (x_scale.dim() == 2 && k % moe_ops::kFp8Block == 0 &&
                              is_float32(x_scale, {m, k / moe_ops::kFp8Block})),
                  op, ": x_scale must be a contiguous float32 [M] or [M, K/128] tensor (M = ", m,
                  ", K = ", k, k % moe_ops::kFp8Block == 0 ? "" : "; [M, K/128] needs K % 128 == 0",
                  ")");
  args.scaling = check_fp8_weight_scale(w_scale, args, device, op, "w_scale");
  STD_TORCH_CHECK((args.scaling == moe_ops::Fp8Scaling::kRowwise) == rowwise, op,
                  ": x_scale is ", rowwise ? "row-wise [M]" : "block-wise [M, K/128]",
                  " but w_scale is ", scaling_name(args.scaling),
                  ": both must use one layout");
  const torch::stable::accelerator::DeviceGuard guard(device);
  raise_offsets_errors(device);
  Tensor out = empty<2>({m, args.n}, aoti_torch_dtype_bfloat16(), device);
  if (m == 0) {
    return out;
  }
  args.a = x.const_data_ptr();
  args.a_scale = static_cast<const float*>(x_scale.const_data_ptr());
  args.b_scale = static_cast<const float*>(w_scale.const_data_ptr());
  args.d = out.mutable_data_ptr();
  args.offsets = static_cast<const int32_t*>(offsets.const_data_ptr());
  args.offsets_errors = offsets_error_flags(device, op);
  args.m_total = m;
  args.config = static_cast<int>(config);
  const int sms = sm_count(device);
  const size_t bytes = moe_ops::grouped_gemm_fp8_workspace_size(args, sms);
  Tensor workspace = empty<1>({static_cast<int64_t>(bytes)}, aoti_torch_dtype_uint8(), device);
  const char* err =
      moe_ops::grouped_gemm_fp8(args, workspace.mutable_data_ptr(), bytes, sms,
                                current_stream(device));
  STD_TORCH_CHECK(err == nullptr, op, ": ", err);
  return out;
}

// moe_forward with e4m3 weights (K-major, as grouped_mm_fp8 takes them; gate in columns :I,
// up in I: of w_gate_up) and their scales, row-wise or block-wise (both the same). The
// permuted activations and silu(gate) * up are quantised to e4m3 in the weights' layout
// (per row, or per 1x128 block), the GEMMs write bf16, the combine is moe_forward's.
Tensor moe_forward_fp8(Tensor x, Tensor router_logits, Tensor w_gate_up, Tensor w_gate_up_scale,
                       Tensor w_down, Tensor w_down_scale, int64_t top_k, int64_t config) {
  const char* op = "moe_forward_fp8";
  check_rows(x, op, "x");
  const int64_t tokens = x.size(0);
  const int64_t hidden = x.size(1);
  const Router router = check_router(router_logits, tokens, top_k, op);
  const int64_t experts = router.experts;
  const int32_t device = x.get_device_index();
  STD_TORCH_CHECK(hidden % moe_ops::kFp8Alignment == 0, op, ": H (", hidden,
                  ") must be a multiple of ", moe_ops::kFp8Alignment);
  moe_ops::Fp8GemmArgs up{};
  moe_ops::Fp8GemmArgs down{};
  const int64_t inter = describe_layer(x, router_logits, w_gate_up, w_down, experts,
                                       moe_ops::kFp8Alignment, describe_fp8_weights, op, up,
                                       down);
  up.scaling = check_fp8_weight_scale(w_gate_up_scale, up, device, op, "w_gate_up_scale");
  down.scaling = check_fp8_weight_scale(w_down_scale, down, device, op, "w_down_scale");
  STD_TORCH_CHECK(up.scaling == down.scaling, op, ": w_gate_up_scale is ",
                  scaling_name(up.scaling), " but w_down_scale is ", scaling_name(down.scaling),
                  ": both must use one layout");
  STD_TORCH_CHECK(up.scaling == moe_ops::Fp8Scaling::kRowwise || inter % moe_ops::kFp8Block == 0,
                  op, ": with block scales, I (", inter, ") must be a multiple of ",
                  moe_ops::kFp8Block);
  const bool blocks = up.scaling == moe_ops::Fp8Scaling::kBlockwise;
  const int64_t rows = tokens * top_k;
  STD_TORCH_CHECK(rows < std::numeric_limits<int32_t>::max(), op, ": too many tokens");

  const torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  Tensor out = empty<2>({tokens, hidden}, aoti_torch_dtype_bfloat16(), device);
  if (tokens == 0) {
    return out;
  }
  const int sms = sm_count(device);
  up.m_total = down.m_total = rows;
  up.config = down.config = static_cast<int>(config);

  const size_t e = static_cast<size_t>(experts);
  const size_t r = static_cast<size_t>(rows);
  const size_t h = static_cast<size_t>(hidden);
  const size_t i = static_cast<size_t>(inter);
  const size_t b = static_cast<size_t>(moe_ops::kFp8Block);
  const size_t sizes[] = {
      round_up(2 * e * sizeof(int32_t)),                                  // counts
      round_up(e * sizeof(int32_t)),                                      // offsets
      round_up(r * sizeof(float)),                                        // routing weights
      round_up(r * sizeof(int32_t)),                                      // rows
      round_up(moe_ops::grouped_gemm_fp8_workspace_size(up, sms)),        // gate/up arrays
      round_up(moe_ops::grouped_gemm_fp8_workspace_size(down, sms)),      // down arrays
      round_up(r * h * 2),                                                // x sorted, then y
      round_up(r * h),                                                    // x sorted, e4m3
      round_up(r * (blocks ? h / b : 1) * sizeof(float)),                 // its scales
      round_up(r * 2 * i * 2),                                            // gate | up, bf16
      round_up(r * i),                                                    // silu(g) * u, e4m3
      round_up(r * (blocks ? i / b : 1) * sizeof(float)),                 // its scales
  };
  size_t total = 0;
  for (const size_t s : sizes) {
    total += s;
  }
  Tensor workspace = empty<1>({static_cast<int64_t>(total)}, aoti_torch_dtype_uint8(), device);
  char* p = static_cast<char*>(workspace.mutable_data_ptr());
  std::array<char*, sizeof(sizes) / sizeof(sizes[0])> parts{};
  for (size_t j = 0; j < parts.size(); ++j) {
    parts[j] = p;
    p += sizes[j];
  }
  auto* offsets = reinterpret_cast<int32_t*>(parts[1]);
  auto* weights = reinterpret_cast<float*>(parts[2]);
  auto* slot_rows = reinterpret_cast<int32_t*>(parts[3]);
  void* sorted = parts[6];

  moe_ops::RouteArgs route{};
  route.logits = router_logits.const_data_ptr();
  route.logit_type = router.logit_type;
  route.x = x.const_data_ptr();
  route.tokens = tokens;
  route.experts = experts;
  route.hidden = hidden;
  route.top_k = static_cast<int>(top_k);
  route.counts = reinterpret_cast<int32_t*>(parts[0]);
  route.offsets = offsets;
  route.weights = weights;
  route.rows = slot_rows;
  route.x_sorted = sorted;
  const char* err = moe_ops::route_and_permute(route, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (routing): ", err);

  moe_ops::QuantizeArgs quant{};
  quant.src = sorted;
  quant.dst = parts[7];
  quant.scale = reinterpret_cast<float*>(parts[8]);
  quant.rows = rows;
  quant.cols = hidden;
  quant.scaling = up.scaling;
  err = moe_ops::quantize_fp8(quant, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (quantising x): ", err);

  // The offsets of our own scan are valid by construction: no checked setup, no flags.
  up.a = parts[7];
  up.a_scale = quant.scale;
  up.b_scale = static_cast<const float*>(w_gate_up_scale.const_data_ptr());
  up.d = parts[9];
  up.offsets = offsets;
  err = moe_ops::grouped_gemm_fp8(up, parts[4], sizes[4], sms, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (gate/up GEMM): ", err);

  quant.src = parts[9];
  quant.dst = parts[10];
  quant.scale = reinterpret_cast<float*>(parts[11]);
  quant.cols = inter;
  quant.silu_mul = true;
  err = moe_ops::quantize_fp8(quant, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (SiLU-and-mul, quantising): ", err);

  down.a = parts[10];
  down.a_scale = quant.scale;
  down.b_scale = static_cast<const float*>(w_down_scale.const_data_ptr());
  down.d = sorted;  // x_sorted (bf16) is dead after its quantisation: y_sorted reuses it
  down.offsets = offsets;
  err = moe_ops::grouped_gemm_fp8(down, parts[5], sizes[5], sms, stream);
  STD_TORCH_CHECK(err == nullptr, op, " (down GEMM): ", err);

  err = moe_ops::combine(sorted, weights, slot_rows, out.mutable_data_ptr(), tokens, hidden,
                         static_cast<int>(top_k), stream);
  STD_TORCH_CHECK(err == nullptr, op, " (combine): ", err);
  return out;
}

void check_offsets_errors(int64_t device) {
  STD_TORCH_CHECK(device >= 0 && device < kMaxDevices, "check_offsets_errors: device index ",
                  device, " is outside [0, ", kMaxDevices, ")");
  raise_offsets_errors(static_cast<int32_t>(device));
}

}  // namespace

KP_STABLE_LIBRARY(m) {
  m.def("grouped_mm(Tensor x, Tensor w, Tensor offsets, int config=0) -> Tensor");
  m.def("grouped_mm_silu_mul(Tensor x, Tensor w, Tensor offsets, int config=0) -> Tensor");
  m.def(
      "moe_forward(Tensor x, Tensor router_logits, Tensor w_gate_up, Tensor w_down, int top_k,"
      " int config=0) -> Tensor");
  m.def(
      "grouped_mm_fp8(Tensor x, Tensor w, Tensor x_scale, Tensor w_scale, Tensor offsets,"
      " int config=0) -> Tensor");
  m.def(
      "moe_forward_fp8(Tensor x, Tensor router_logits, Tensor w_gate_up, Tensor w_gate_up_scale,"
      " Tensor w_down, Tensor w_down_scale, int top_k, int config=0) -> Tensor");
  m.def("check_offsets_errors(int device) -> ()");
}

// No tensor argument to dispatch on: the one kernel serves every backend.
KP_STABLE_LIBRARY_IMPL(CompositeExplicitAutograd, m) {
  m.impl("check_offsets_errors", TORCH_BOX(&check_offsets_errors));
}

KP_STABLE_LIBRARY_IMPL(CUDA, m) {
  m.impl("grouped_mm", TORCH_BOX(&grouped_mm));
  m.impl("grouped_mm_silu_mul", TORCH_BOX(&grouped_mm_silu_mul));
  m.impl("moe_forward", TORCH_BOX(&moe_forward));
  m.impl("grouped_mm_fp8", TORCH_BOX(&grouped_mm_fp8));
  m.impl("moe_forward_fp8", TORCH_BOX(&moe_forward_fp8));
}

// CPU tensors reach the same functions, whose first checks refuse them with the op's own
// message ("... must be a CUDA tensor") rather than the dispatcher's "Could not run".
KP_STABLE_LIBRARY_IMPL(CPU, m) {
  m.impl("grouped_mm", TORCH_BOX(&grouped_mm));
  m.impl("grouped_mm_silu_mul", TORCH_BOX(&grouped_mm_silu_mul));
  m.impl("moe_forward", TORCH_BOX(&moe_forward));
  m.impl("grouped_mm_fp8", TORCH_BOX(&grouped_mm_fp8));
  m.impl("moe_forward_fp8", TORCH_BOX(&moe_forward_fp8));
}
