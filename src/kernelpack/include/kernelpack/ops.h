// kernelpack/ops.h: register a kernel's ops in the namespace kernelpack gives it.
//
// kernelpack compiles every kernel with -DKERNELPACK_NS=<ops namespace from kernels.toml>
// (default "<package>_<kernel>"). torch's registration macros paste their namespace argument
// with ## , which would paste the literal token KERNELPACK_NS; these wrappers expand it first.
//
//   abi = "torch":   #include <torch/library.h>
//                    KP_LIBRARY(m) { m.def("rmsnorm(Tensor x) -> Tensor"); }
//                    KP_LIBRARY_IMPL(CUDA, m) { m.impl("rmsnorm", &rmsnorm_cuda); }
//   abi = "stable":  #include <torch/csrc/stable/library.h>
//                    KP_STABLE_LIBRARY(m) { m.def("rmsnorm(Tensor x) -> Tensor"); }
//                    KP_STABLE_LIBRARY_IMPL(CUDA, m) { m.impl("rmsnorm", TORCH_BOX(&fn)); }
//
// KP_NAMESPACE_STR is the namespace as a string literal ("llm_ops_rmsnorm").
#pragma once

#ifndef KERNELPACK_NS
#error "KERNELPACK_NS is not defined: build this kernel with kernelpack (kernelpack build)"
#endif

#define KP_STRINGIFY_(x) #x
#define KP_STRINGIFY(x) KP_STRINGIFY_(x)
#define KP_NAMESPACE_STR KP_STRINGIFY(KERNELPACK_NS)

// One extra level of expansion: KERNELPACK_NS becomes the namespace before the torch macro
// (which pastes and stringifies its arguments) sees it.
#define KP_CALL2_(macro, a, b) macro(a, b)
#define KP_CALL3_(macro, a, b, c) macro(a, b, c)

// Fragments, not TORCH_LIBRARY: several translation units of one kernel may each define ops.
#define KP_LIBRARY(m) KP_CALL2_(TORCH_LIBRARY_FRAGMENT, KERNELPACK_NS, m)
#define KP_LIBRARY_IMPL(k, m) KP_CALL3_(TORCH_LIBRARY_IMPL, KERNELPACK_NS, k, m)

#define KP_STABLE_LIBRARY(m) KP_CALL2_(STABLE_TORCH_LIBRARY_FRAGMENT, KERNELPACK_NS, m)
#define KP_STABLE_LIBRARY_IMPL(k, m) KP_CALL3_(STABLE_TORCH_LIBRARY_IMPL, KERNELPACK_NS, k, m)
