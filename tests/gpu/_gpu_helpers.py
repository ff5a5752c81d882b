"""Helpers shared by the GPU tests: poisoned outputs, relative errors, tolerances."""

from __future__ import annotations

import math

import torch

__all__ = [
    "DTYPES",
    "ELEMENT_TOLERANCE",
    "TOLERANCE",
    "assert_matches",
    "nbytes",
    "poison_allocator",
    "rel_error",
]


def poison_allocator(*sizes: int) -> None:
    """Leave blocks of these sizes, every byte 0xFF, free in torch's caching allocator.

    0xFF bytes are NaN in float32, float16 and bfloat16. The outputs an op allocates next
    reuse these blocks, so any element a kernel fails to write reads back as NaN, and the
    comparison with the reference fails (NaN never passes `rel_error`).
    """
    blocks = [torch.full((n,), 0xFF, dtype=torch.uint8, device="cuda") for n in sizes]
    del blocks


def nbytes(*tensors: torch.Tensor) -> list[int]:
    """The byte sizes of `tensors`, for `poison_allocator`."""
    return [t.numel() * t.element_size() for t in tensors]


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN or inf anywhere gives inf."""
    out64 = out.detach().double()
    ref64 = ref.detach().double()
    if not bool(torch.isfinite(out64).all()):
        return math.inf
    denom = ref64.norm().item()
    return (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)


#: ||out - ref|| / ||ref|| allowed per dtype (bf16 <= 1e-2 as the issue demands).
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

#: Largest |out - ref| / (|ref| + mean |ref|) allowed for any one element: catches a few wrong
#: or unwritten elements that the norm-wise error would average away.
ELEMENT_TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}


def assert_matches(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """`out` is `ref` (float64) within the tolerances of `dtype`, norm-wise and element-wise."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = rel_error(out, ref)
    assert err <= TOLERANCE[dtype], f"{what}: relative error {err:.3g} > {TOLERANCE[dtype]}"
    if ref.numel() == 0:
        return
    ref64 = ref.detach().double()
    scale = ref64.abs().mean() + torch.finfo(torch.float64).tiny
    worst = ((out.detach().double() - ref64).abs() / (ref64.abs() + scale)).max().item()
    limit = ELEMENT_TOLERANCE[dtype]
    assert worst <= limit, f"{what}: worst element error {worst:.3g} > {limit}"
