"""RMSNorm, with an optional fused residual add, forward and backward (CUDA).

``rms_norm(x, weight, eps)`` is ``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last
dimension. With ``residual``, it first forms ``h = x + residual`` (rounded to the dtype) and
returns ``(rms_norm(h), h)``: the pre-norm transformer step in one pass over memory. Both are
differentiable (gradients reach ``x``, ``residual`` and ``weight``) and work under
``torch.compile`` and CUDA graphs.

Requirements, exported so callers never hard-code them: CUDA tensors of one dtype in
`DTYPES`, ``weight`` of shape ``[hidden]``, ``1 <= hidden <= MAX_HIDDEN``. Rows whose bytes
are a multiple of `ALIGNMENT` (and 16-byte aligned pointers) take the vectorised path; others
work, more slowly. `unsupported_shape_reason` says in words what is wrong with a shape.
"""

from __future__ import annotations

from typing import Any, overload

import torch

from kernelpack_runtime import ops_namespace

from .._dispatch import PLAIN, RECORD, path
from . import _C  # noqa: F401  (loading the library registers the ops with torch)

__all__ = [
    "ALIGNMENT",
    "DTYPES",
    "MAX_HIDDEN",
    "NAMESPACE",
    "rms_norm",
    "unsupported_shape_reason",
    "vectorised",
]

#: Bytes: rows and pointers aligned to this use 16-byte vector loads and stores.
ALIGNMENT = 16
#: Largest hidden size (the last dimension): a row is held in registers.
MAX_HIDDEN = 16384
#: Supported dtypes (x, residual and weight share one).
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: The torch.ops namespace of these ops, from the build record.
NAMESPACE = ops_namespace(__name__)
_ops: Any = getattr(torch.ops, NAMESPACE)
# The overloads, resolved once: calling the packet (`_ops.forward(...)`) resolves the
# overload on every call (under 1 us, but for nothing).
_forward = _ops.forward.default
_forward_residual = _ops.forward_residual.default
_forward_nograd = _ops.forward_nograd.default
_forward_residual_nograd = _ops.forward_residual_nograd.default
_infer = _ops.infer.default
_infer_residual = _ops.infer_residual.default
_backward_op = _ops.backward.default


def unsupported_shape_reason(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> str | None:
    """None when an input of `shape` and `dtype` is supported, else why not, in words."""
    if dtype not in DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in DTYPES)
        return f"dtype {dtype} is not supported (supported: {names})"
    if len(shape) == 0:
        return "x must have at least one dimension (the hidden dimension)"
    hidden = shape[-1]
    if not 1 <= hidden <= MAX_HIDDEN:
        return f"hidden size {hidden} is outside [1, {MAX_HIDDEN}]"
    return None


def vectorised(hidden: int, dtype: torch.dtype) -> bool:
    """Whether rows of `hidden` elements of `dtype` take the 16-byte vector path."""
    return (hidden * dtype.itemsize) % ALIGNMENT == 0


@overload
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = ..., residual: None = ...
) -> torch.Tensor: ...
@overload
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = ..., *, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]: ...
def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of `x` over its last dimension.

    With `residual`: ``(rms_norm(x + residual), x + residual)``, in one pass.
    """
    x, weight = x.contiguous(), weight.contiguous()
    if residual is None:
        how = path(x, weight)
        if how == PLAIN:
            return _infer(x, weight, eps)  # type: ignore[no-any-return]
        if how == RECORD:
            return _RMSNorm.apply(x, weight, eps)  # type: ignore[no-any-return]
        return _forward(x, weight, eps)[0]  # type: ignore[no-any-return]
    residual = residual.contiguous()
    how = path(x, residual, weight)
    if how == PLAIN:
        y, new_residual = _infer_residual(x, residual, weight, eps)
    elif how == RECORD:
        y, new_residual = _RMSNormResidual.apply(x, residual, weight, eps)
    else:
        y, new_residual, _ = _forward_residual(x, residual, weight, eps)
    return y, new_residual


class _RMSNorm(torch.autograd.Function):
    """The eager graph-recording path of ``rms_norm`` (`llm_ops._dispatch`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = _forward_nograd(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        return _backward_forward(ctx, grad_y, None)


class _RMSNormResidual(torch.autograd.Function):
    """The eager graph-recording path of ``rms_norm(..., residual=)``."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, new_residual, rstd = _forward_residual_nograd(x, residual, weight, eps)
        ctx.save_for_backward(new_residual, weight, rstd)
        ctx.set_materialize_grads(False)
        return y, new_residual

    @staticmethod
    def backward(
        ctx: Any, grad_y: torch.Tensor | None, grad_new_residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        if grad_y is None:  # only the sum was used
            grad_y = torch.zeros_like(ctx.saved_tensors[0])
        return _backward_forward_residual(ctx, grad_y, grad_new_residual, None)


def _rows_like(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.register_fake(f"{NAMESPACE}::infer")
def _infer_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.register_fake(f"{NAMESPACE}::infer_residual")
def _infer_residual_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.register_fake(f"{NAMESPACE}::forward_nograd")
@torch.library.register_fake(f"{NAMESPACE}::forward")
def _forward_fake(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), _rows_like(x)


@torch.library.register_fake(f"{NAMESPACE}::forward_residual_nograd")
@torch.library.register_fake(f"{NAMESPACE}::forward_residual")
def _forward_residual_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x), _rows_like(x)


@torch.library.register_fake(f"{NAMESPACE}::backward")
def _backward_fake(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    residual_grad: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _setup_forward(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    x, weight, _ = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)


def _backward_forward(
    ctx: Any, grad_y: torch.Tensor, grad_rstd: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, None]:
    x, weight, rstd = ctx.saved_tensors
    grad_x, grad_weight = _backward_op(grad_y.contiguous(), x, weight, rstd, None)
    return grad_x, grad_weight, None


def _setup_forward_residual(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _, _, weight, _ = inputs
    _, new_residual, rstd = output
    ctx.save_for_backward(new_residual, weight, rstd)


def _backward_forward_residual(
    ctx: Any,
    grad_y: torch.Tensor,
    grad_new_residual: torch.Tensor | None,
    grad_rstd: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
    h, weight, rstd = ctx.saved_tensors
    residual_grad = None if grad_new_residual is None else grad_new_residual.contiguous()
    grad_h, grad_weight = _backward_op(grad_y.contiguous(), h, weight, rstd, residual_grad)
    # h = x + residual: both receive the gradient of h.
    return grad_h, grad_h, grad_weight, None


torch.library.register_autograd(
    f"{NAMESPACE}::forward", _backward_forward, setup_context=_setup_forward
)
torch.library.register_autograd(
    f"{NAMESPACE}::forward_residual",
    _backward_forward_residual,
    setup_context=_setup_forward_residual,
)
