// kernelpack/ops.h: register a kernel's ops in the namespace kernelpack gives it.
//
// kernelpack compiles every kernel with -DKERNELPACK_NAMESPACE=<op namespace, kernels.toml `ops`>
// (default "<package>_<kernel>"). torch's registration macros paste their namespace argument
// with ##, which would paste the literal token KERNELPACK_NAMESPACE; these wrappers expand it.
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

#ifndef KERNELPACK_NAMESPACE
#error "KERNELPACK_NAMESPACE is not defined: build this kernel with kernelpack (kernelpack build)"
#endif
// The earlier name, kept for kernels that use it.
#define KERNELPACK_NS KERNELPACK_NAMESPACE

#define KP_STRINGIFY_(x) #x
#define KP_STRINGIFY(x) KP_STRINGIFY_(x)
#define KP_NAMESPACE_STR KP_STRINGIFY(KERNELPACK_NAMESPACE)

// One extra level of expansion: KERNELPACK_NAMESPACE becomes the namespace before the torch
// macro (which pastes and stringifies its arguments) sees it.
#define KP_CALL2_(macro, a, b) macro(a, b)
#define KP_CALL3_(macro, a, b, c) macro(a, b, c)

// Fragments, not TORCH_LIBRARY: several translation units of one kernel may each define ops.
#define KP_LIBRARY(m) KP_CALL2_(TORCH_LIBRARY_FRAGMENT, KERNELPACK_NAMESPACE, m)
#define KP_LIBRARY_IMPL(k, m) KP_CALL3_(TORCH_LIBRARY_IMPL, KERNELPACK_NAMESPACE, k, m)

#define KP_STABLE_LIBRARY(m) KP_CALL2_(STABLE_TORCH_LIBRARY_FRAGMENT, KERNELPACK_NAMESPACE, m)
#define KP_STABLE_LIBRARY_IMPL(k, m) KP_CALL3_(STABLE_TORCH_LIBRARY_IMPL, KERNELPACK_NAMESPACE, k, m)
