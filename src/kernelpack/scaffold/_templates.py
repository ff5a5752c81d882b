"""The files `kernelpack new` writes, as `string.Template`s (`$pkg`, `$name`, ...).

`$` placeholders leave C++ and f-string braces alone, so each template reads as the file it
becomes.
"""

from __future__ import annotations

from string import Template

__all__ = [
    "ABI_STABLE",
    "ABI_TORCH",
    "CU_STABLE",
    "CU_TORCH",
    "GITIGNORE",
    "KERNELS_TOML",
    "KERNEL_INIT",
    "PACKAGE_INIT",
    "PYPROJECT",
    "TEST",
]

PYPROJECT = Template("""\
[build-system]
# The kernelpack releases that build this project as this one did (new releases may change
# what a build makes; widen the range when you move on).
requires = [$kernelpack]
build-backend = "kernelpack.backend"

[project]
name = $dist
version = "0.1.0"
description = "CUDA kernels for PyTorch, built with kernelpack"
requires-python = ">=3.10"
# kernelpack adds kernelpack-runtime and the torch the kernels are built for to the wheel.
dependencies = []

[tool.kernelpack]
manifest = "$pkg/kernels.toml"

[tool.pytest.ini_options]
testpaths = ["tests"]
""")

GITIGNORE = """\
# What kernelpack builds: the build folder (object files, compile_commands.json for clangd),
# wheels and sdists, the compiled libraries and the build record of in-place builds
/build/
/dist/
*.so
_kernelpack.json
# Caches of Python, its tools and clangd
__pycache__/
*.egg-info/
.pytest_cache/
.mypy_cache/
.ruff_cache/
.cache/
"""

KERNELS_TOML = Template("""\
# The kernels of $pkg: one table per kernel, named like its folder. Paths are relative to
# the kernel's folder. Ops register in the namespace "${pkg}_<kernel>" unless `ops` says else.

[$name]
description = "y = x * alpha (a starting point: replace it with your kernel)"
sources = ["csrc/$name.cu"]
$abi_lines
arch = $archs
""")

ABI_STABLE = '''\
abi = "stable"             # LibTorch stable ABI: one wheel for every torch >= stable-target
stable-target = "2.10"'''

ABI_TORCH = """\
abi = "torch"              # classic ABI: imports only under the torch it was built with"""

PACKAGE_INIT = Template('''\
"""$pkg: CUDA kernels, built and gated by kernelpack.

Ask before use, and load through the registry::

    import $pkg
    if $pkg.is_available("$name"):
        $name = $pkg.load("$name")
"""

from __future__ import annotations

from kernelpack_runtime import Registry

status, is_available, unavailable_reason, load = Registry(__name__).api()

__all__ = ["is_available", "load", "status", "unavailable_reason"]
''')

KERNEL_INIT = Template('''\
"""$name: ``y = x * alpha`` on CUDA, differentiable (a starting point).

Requirements, exported so callers never hard-code them: a CUDA tensor of a dtype in
`DTYPES`. `unsupported_shape_reason` says in words what is wrong with an input.
"""

from __future__ import annotations

from typing import Any

import torch
from kernelpack_runtime import ops_namespace

from . import _C  # noqa: F401  (loading the library registers the ops with torch)

__all__ = ["DTYPES", "NAMESPACE", "$name", "unsupported_shape_reason"]

#: Supported dtypes.
DTYPES = (torch.float32,)

#: The torch.ops namespace of these ops, from the build record.
NAMESPACE = ops_namespace(__name__)
_ops: Any = getattr(torch.ops, NAMESPACE)


def unsupported_shape_reason(
    shape: tuple[int, ...] | torch.Size, dtype: torch.dtype
) -> str | None:
    """None when an input of `shape` and `dtype` is supported, else why not, in words."""
    if dtype not in DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in DTYPES)
        return f"dtype {dtype} is not supported (supported: {names})"
    return None


def $name(x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """``x * alpha``."""
    return _ops.$name(x.contiguous(), alpha)


@torch.library.register_fake(f"{NAMESPACE}::$name")
def _${name}_fake(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.alpha = inputs[1]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return _ops.$name(grad.contiguous(), ctx.alpha), None


torch.library.register_autograd(
    f"{NAMESPACE}::$name", _backward, setup_context=_setup_context
)
''')

CU_STABLE = Template("""\
// $name: y = x * alpha through the LibTorch stable ABI (a starting point).
// Ops register in the namespace kernelpack gives this kernel (see kernelpack/ops.h); the
// Python module init is generated, so `from . import _C` needs no binding code.
#include <cuda_runtime.h>
#include <kernelpack/ops.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void ${name}_kernel(const float* x, float* y, float alpha, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * alpha;
}

torch::stable::Tensor $name(torch::stable::Tensor x, double alpha) {
  STD_TORCH_CHECK(x.is_cuda(), "$name: x must be a CUDA tensor");
  STD_TORCH_CHECK(x.is_contiguous(), "$name: x must be contiguous");
  STD_TORCH_CHECK(x.scalar_type() == torch::headeronly::ScalarType::Float,
                  "$name: x must be float32");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  torch::stable::Tensor y = torch::stable::empty_like(x);
  const int64_t n = x.numel();
  if (n > 0) {
    void* stream = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(x.get_device_index(), &stream));
    const auto blocks = static_cast<unsigned int>((n + kThreads - 1) / kThreads);
    ${name}_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const float*>(x.const_data_ptr()), static_cast<float*>(y.mutable_data_ptr()),
        static_cast<float>(alpha), n);
    const cudaError_t err = cudaGetLastError();
    STD_TORCH_CHECK(err == cudaSuccess, "$name: CUDA error: ", cudaGetErrorString(err));
  }
  return y;
}

}  // namespace

KP_STABLE_LIBRARY(m) { m.def("$name(Tensor x, float alpha) -> Tensor"); }

KP_STABLE_LIBRARY_IMPL(CUDA, m) { m.impl("$name", TORCH_BOX(&$name)); }
""")

CU_TORCH = Template("""\
// $name: y = x * alpha through the classic ATen ABI (a starting point).
// Ops register in the namespace kernelpack gives this kernel (see kernelpack/ops.h); the
// Python module init is generated, so `from . import _C` needs no binding code.
#include <cuda_runtime.h>
#include <kernelpack/ops.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void ${name}_kernel(const float* x, float* y, float alpha, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * alpha;
}

at::Tensor $name(const at::Tensor& x, double alpha) {
  TORCH_CHECK(x.is_cuda(), "$name: x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous(), "$name: x must be contiguous");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "$name: x must be float32");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t n = x.numel();
  if (n > 0) {
    const auto blocks = static_cast<unsigned int>((n + kThreads - 1) / kThreads);
    ${name}_kernel<<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.const_data_ptr<float>(), y.mutable_data_ptr<float>(), static_cast<float>(alpha), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}

}  // namespace

KP_LIBRARY(m) { m.def("$name(Tensor x, float alpha) -> Tensor"); }

KP_LIBRARY_IMPL(CUDA, m) { m.impl("$name", &$name); }
""")

TEST = Template('''\
"""$pkg.$name: CPU checks run everywhere; the GPU checks skip themselves (with the reason)
where the kernel is unavailable, and fail instead under `pytest --kernels-require`."""

from __future__ import annotations

import pytest
import torch

import $pkg


def test_${name}_is_available_or_says_why() -> None:
    reason = $pkg.unavailable_reason("$name")
    assert reason is None or reason.message


@pytest.mark.gpu
@pytest.mark.kernel("$pkg.$name")
def test_${name}_matches_torch() -> None:
    kernel = $pkg.load("$name")
    x = torch.randn(4097, device="cuda")
    torch.testing.assert_close(kernel.$name(x, 3.0), x * 3.0)


@pytest.mark.gpu
@pytest.mark.kernel("$pkg.$name")
def test_${name}_gradient_is_alpha_times_the_incoming_gradient() -> None:
    kernel = $pkg.load("$name")
    x = torch.randn(33, device="cuda", requires_grad=True)
    kernel.$name(x, 3.0).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
''')
