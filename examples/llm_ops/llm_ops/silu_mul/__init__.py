"""SiLU-and-multiply (the SwiGLU activation), forward and backward (CUDA).

``silu_mul(x)`` is ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2d]``; the
result has shape ``[..., d]``. Differentiable, and works under ``torch.compile`` and CUDA
graphs.

Requirements, exported so callers never hard-code them: a CUDA tensor of a dtype in `DTYPES`
whose last dimension is even. When ``d`` elements are a multiple of `ALIGNMENT` bytes the
kernel uses 16-byte vector accesses; other sizes (odd ``d`` too) work, more slowly.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelpack_runtime import ops_namespace

from .._dispatch import PLAIN, RECORD, path
from . import _C  # noqa: F401  (loading the library registers the ops with torch)

__all__ = [
    "ALIGNMENT",
    "DTYPES",
    "NAMESPACE",
    "silu_mul",
    "unsupported_shape_reason",
    "vectorised",
]

#: Bytes: halves (`d` elements) aligned to this use 16-byte vector loads and stores.
ALIGNMENT = 16
#: Supported dtypes.
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: The torch.ops namespace of these ops, from the build record.
NAMESPACE = ops_namespace(__name__)
_ops: Any = getattr(torch.ops, NAMESPACE)
# The overloads, resolved once (calling the packet re-matches the schemas on every call).
_forward = _ops.forward.default
_forward_nograd = _ops.forward_nograd.default
_backward_op = _ops.backward.default


def unsupported_shape_reason(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> str | None:
    """None when an input of `shape` and `dtype` is supported, else why not, in words."""
    if dtype not in DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in DTYPES)
        return f"dtype {dtype} is not supported (supported: {names})"
    if len(shape) == 0:
        return "x must have at least one dimension"
    if shape[-1] % 2 != 0:
        return f"the last dimension ({shape[-1]}) must be even: [..., 2d]"
    return None


def vectorised(d: int, dtype: torch.dtype) -> bool:
    """Whether halves of `d` elements of `dtype` take the 16-byte vector path."""
    return (d * dtype.itemsize) % ALIGNMENT == 0


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for `x` of shape ``[..., 2d]``."""
    x = x.contiguous()
    how = path(x)
    if how == PLAIN:
        return _forward_nograd(x)  # type: ignore[no-any-return]
    if how == RECORD:
        return _SiluMul.apply(x)  # type: ignore[no-any-return]
    return _forward(x)  # type: ignore[no-any-return]


class _SiluMul(torch.autograd.Function):
    """The eager graph-recording path of ``silu_mul`` (`llm_ops._dispatch`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return _forward_nograd(x)  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return _backward(ctx, grad)


@torch.library.register_fake(f"{NAMESPACE}::forward_nograd")
@torch.library.register_fake(f"{NAMESPACE}::forward")
def _forward_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.register_fake(f"{NAMESPACE}::backward")
def _backward_fake(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    grad_x: torch.Tensor = _backward_op(grad.contiguous(), x)
    return grad_x


torch.library.register_autograd(f"{NAMESPACE}::forward", _backward, setup_context=_setup_context)
