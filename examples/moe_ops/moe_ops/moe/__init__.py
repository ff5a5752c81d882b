"""Grouped GEMM and a fused mixture-of-experts forward on CUTLASS 3.x sm90 kernels (Hopper).

``grouped_mm(x, w, offsets)`` is ``torch._grouped_mm(x, w, offs=offsets)`` for a 2-D ``x``
and a 3-D ``w``: rows ``offsets[g-1]:offsets[g]`` of ``x`` (``offsets[-1]`` = 0) times ``w[g]``,
bf16 in, fp32 accumulation, bf16 out. ``w`` is ``[E, K, N]``, either contiguous per expert or
the transposed view of a contiguous ``[E, N, K]`` (``w_t.transpose(-2, -1)``). Rows past
``offsets[-1]`` are left unwritten, as in torch.

Offsets must be non-decreasing within ``[0, M]``. The ops cannot look at them without a
host sync, so the device clamps bad ones (group ``g`` gets rows ``[c[g-1], c[g])`` with
``c[g] = min(max(0, offsets[:g+1]), M)``: nothing outside ``x`` and the output is read or
written) and raises the error later: the next `grouped_mm` or `grouped_mm_silu_mul` call on
that device raises ``RuntimeError`` once that bad call has finished on the device, and
`check_offsets_errors` (which synchronises) raises it at a point of the caller's choosing.

``moe_forward(x, router_logits, w_gate_up, w_down, top_k)`` is the forward of a
Mixtral/DeepSeek-style expert layer: softmax top-k routing renormalised over the k chosen,
the permutation of tokens into expert order, the gate/up grouped GEMM with SiLU-and-multiply
fused into its epilogue, the down grouped GEMM and the weighted combine. ``w_gate_up`` is
``[E, H, 2I]`` with the gate in columns ``:I`` and up in ``I:``; the fused epilogue needs the
two interleaved (column ``2j`` gate ``j``, ``2j+1`` up ``j``), which `interleave_gate_up` does
once at load time (pass ``gate_up_interleaved=True`` then); otherwise every call interleaves a
copy. ``w_down`` is ``[E, I, H]``. Both take either layout, as in ``grouped_mm``.

``grouped_mm_fp8(x, w, x_scale, w_scale, offsets)`` is the FP8 (e4m3) grouped GEMM with
bf16 output and fp32 accumulation, with the offsets (and their checks) of ``grouped_mm``.
``w`` is the transposed view of a contiguous ``[E, N, K]`` e4m3 tensor, as for
``torch._scaled_grouped_mm``. The scale shapes pick the layout: row-wise (``x_scale [M]``,
``w_scale [E, N]``: ``torch._scaled_grouped_mm``'s) or DeepSeek-V3's blocks (``x_scale
[M, K/128]`` per 1x128 activation block, ``w_scale [E, N/128, K/128]`` per 128x128 weight
block). `quantize_fp8_activations` and `quantize_fp8_weights` make such operands.
``moe_forward_fp8`` is ``moe_forward`` with e4m3 weights in either layout: the activations are
quantised to e4m3 per row (or per 1x128 block) on the device before each GEMM.

Every op runs without a host synchronisation (per-group pointers and shapes are computed on
the device), so it works under ``torch.compile(fullgraph=True)`` and CUDA-graph capture.

Requirements, exported so callers never hard-code them: bfloat16 CUDA tensors, ``K`` and
``N`` multiples of `ALIGNMENT`, at most `MAX_EXPERTS` experts and `MAX_TOP_K` chosen per
token. `unsupported_shape_reason` and `moe_unsupported_shape_reason` say in words what is
wrong with a shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kernelpack_runtime import ops_namespace

from . import _C  # noqa: F401  (loading the library registers the ops with torch)

__all__ = [
    "ALIGNMENT",
    "CONFIGS",
    "DTYPE",
    "FP8_ALIGNMENT",
    "FP8_BLOCK",
    "FP8_CONFIGS",
    "FP8_DTYPE",
    "FP8_LAYOUTS",
    "MAX_EXPERTS",
    "MAX_TOP_K",
    "NAMESPACE",
    "ROUTER_DTYPES",
    "check_offsets_errors",
    "fp8_unsupported_shape_reason",
    "grouped_mm",
    "grouped_mm_fp8",
    "grouped_mm_silu_mul",
    "interleave_gate_up",
    "moe_forward",
    "moe_forward_fp8",
    "moe_unsupported_shape_reason",
    "quantize_fp8_activations",
    "quantize_fp8_weights",
    "unsupported_shape_reason",
]

#: Elements: K, N (and the intermediate size I) must be multiples of this (16-byte TMA rows).
ALIGNMENT = 8
#: The one dtype of activations and weights.
DTYPE = torch.bfloat16
#: Dtypes the router logits may have.
ROUTER_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Most experts `moe_forward` routes to (grouped_mm has no limit of its own).
MAX_EXPERTS = 1024
#: Largest top-k of `moe_forward`.
MAX_TOP_K = 8
#: Kernel configurations; the others force one, "auto" picks by a rule on what the host
#: knows (rows, experts, N, K, SMs; gemm_rule.cpp's gemm_config_for, explained in
#: docs/moe_ops.md): "gemv" (the weight-streaming kernel) at most one row an expert on
#: average where the experts with rows would fill at most 384 cooperative tiles, "small" when
#: the cooperative tiles would fill less than half the SMs, "cooperative_2x1" (the
#: cooperative tile in a 2x1 cluster, which multicasts the weights' tile to two row tiles)
#: over 64 to 192 rows an expert on average with K >= 4096, else "cooperative" (the fastest
#: or within 3% of it on every other prefill layer benchmarked). Every config but "gemv" is
#: bit-identical to torch._grouped_mm.
CONFIGS = {"auto": 0, "cooperative": 1, "small": 2, "gemv": 3, "cooperative_2x1": 4}
#: Tile configurations of the FP8 ops (moe.h's Fp8Config): "auto" takes "pingpong" (64x128
#: tile) for row-wise scales over 64 experts or more of up to 64 rows each on average, else
#: "cooperative" (128x128); block-wise scales always run "cooperative" (fp8_config_for in
#: fp8.cu, docs/moe_ops.md).
FP8_CONFIGS = {"auto": 0, "cooperative": 1, "pingpong": 2}
#: The FP8 operands' dtype (x and w of `grouped_mm_fp8`, the weights of `moe_forward_fp8`).
FP8_DTYPE = torch.float8_e4m3fn
#: Elements: K and N of the FP8 ops must be multiples of this (16-byte TMA rows of e4m3).
FP8_ALIGNMENT = 16
#: The block of the block-wise layout: 1x128 activation blocks, 128x128 weight blocks (K and
#: N must then be multiples of it).
FP8_BLOCK = 128
#: The scale layouts of the FP8 ops: one scale per row of x and per column of w[g], or blocks.
FP8_LAYOUTS = ("rowwise", "blockwise")
_E4M3_MAX = 448.0

#: The torch.ops namespace of these ops, from the build record.
NAMESPACE = ops_namespace(__name__)
_ops: Any = getattr(torch.ops, NAMESPACE)
_grouped_mm = _ops.grouped_mm.default
_grouped_mm_silu_mul = _ops.grouped_mm_silu_mul.default
_moe_forward = _ops.moe_forward.default
_grouped_mm_fp8 = _ops.grouped_mm_fp8.default
_moe_forward_fp8 = _ops.moe_forward_fp8.default
_check_offsets_errors = _ops.check_offsets_errors.default


def _dims_reason(name: str, value: int, step: int = ALIGNMENT, why: str = "") -> str | None:
    if value <= 0 or value % step:
        return f"{name} = {value} must be a positive multiple of {step}{why}"
    return None


def _operands_reason(x_shape: Sequence[int], w_shape: Sequence[int]) -> str | None:
    """Why x [M, K] and w [E, K, N] are not the operands of a grouped GEMM, or None."""
    if len(x_shape) != 2 or len(w_shape) != 3:
        return "x must be 2-D [M, K] and w 3-D [E, K, N]"
    if x_shape[1] != w_shape[1]:
        return f"x's K ({x_shape[1]}) differs from w's K ({w_shape[1]})"
    if w_shape[0] < 1:
        return "w must hold at least one expert"
    return None


def unsupported_shape_reason(
    x_shape: Sequence[int], w_shape: Sequence[int], dtype: torch.dtype = DTYPE
) -> str | None:
    """None when `grouped_mm` supports x of `x_shape` and w of `w_shape`, else why not."""
    if dtype != DTYPE:
        return f"dtype {dtype} is not supported (only {DTYPE})"
    return (
        _operands_reason(x_shape, w_shape)
        or _dims_reason("K", int(w_shape[1]))
        or _dims_reason("N", int(w_shape[2]))
    )


def moe_unsupported_shape_reason(
    x_shape: Sequence[int],
    w_gate_up_shape: Sequence[int],
    w_down_shape: Sequence[int],
    top_k: int,
    dtype: torch.dtype = DTYPE,
) -> str | None:
    """None when `moe_forward` supports these shapes, else why not, in words."""
    if dtype != DTYPE:
        return f"dtype {dtype} is not supported (only {DTYPE})"
    if len(x_shape) != 2 or len(w_gate_up_shape) != 3 or len(w_down_shape) != 3:
        return "x must be [T, H], w_gate_up [E, H, 2I] and w_down [E, I, H]"
    experts, hidden, two_i = (int(d) for d in w_gate_up_shape)
    if not 1 <= experts <= MAX_EXPERTS:
        return f"{experts} experts is outside [1, {MAX_EXPERTS}]"
    if not 1 <= top_k <= min(MAX_TOP_K, experts):
        return f"top_k = {top_k} is outside [1, {min(MAX_TOP_K, experts)}]"
    if x_shape[1] != hidden:
        return f"x's hidden size ({x_shape[1]}) differs from w_gate_up's ({hidden})"
    if two_i % 2:
        return f"w_gate_up's last dimension ({two_i}) must be even (gate and up)"
    inter = two_i // 2
    if tuple(int(d) for d in w_down_shape) != (experts, inter, hidden):
        return f"w_down must be [{experts}, {inter}, {hidden}], got {tuple(w_down_shape)}"
    return _dims_reason("H", hidden) or _dims_reason("I", inter)


def fp8_unsupported_shape_reason(
    x_shape: Sequence[int], w_shape: Sequence[int], layout: str = "rowwise"
) -> str | None:
    """None when `grouped_mm_fp8` supports x of `x_shape`, w of `w_shape` and scales in
    `layout` ("rowwise" or "blockwise"), else why not, in words."""
    if layout not in FP8_LAYOUTS:
        return f"layout must be one of {', '.join(FP8_LAYOUTS)}, got {layout!r}"
    step = FP8_BLOCK if layout == "blockwise" else FP8_ALIGNMENT
    why = f" ({layout} scales)"
    return (
        _operands_reason(x_shape, w_shape)
        or _dims_reason("K", int(w_shape[1]), step, why)
        or _dims_reason("N", int(w_shape[2]), step, why)
    )


def _config(config: str, known: dict[str, int] = CONFIGS) -> int:
    try:
        return known[config]
    except KeyError:
        raise ValueError(f"config must be one of {', '.join(known)}, got {config!r}") from None


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_contiguous() else x.contiguous()


def grouped_mm(
    x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *, config: str = "auto"
) -> torch.Tensor:
    """``torch._grouped_mm(x, w, offs=offsets)`` for 2-D x [M, K] and 3-D w [E, K, N]."""
    return _grouped_mm(_rows(x), w, offsets, _config(config))  # type: ignore[no-any-return]


def grouped_mm_silu_mul(
    x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *, config: str = "auto"
) -> torch.Tensor:
    """``silu(g) * u`` of the grouped GEMM with interleaved columns (g = 2j, u = 2j + 1):
    ``[M, N/2]``. `interleave_gate_up` makes such a w from gate | up halves."""
    return _grouped_mm_silu_mul(_rows(x), w, offsets, _config(config))  # type: ignore[no-any-return]


def check_offsets_errors(device: torch.device | str | int | None = None) -> None:
    """Raise ``RuntimeError`` if a `grouped_mm` or `grouped_mm_silu_mul` call on `device` (the
    current CUDA device by default) got offsets that were not non-decreasing within [0, M].

    Synchronises the device first, so every call made before this one is seen (not usable
    inside CUDA-graph capture). The report is given once: the flags are then cleared.
    """
    index = _cuda_index(device)
    torch.cuda.synchronize(index)
    _check_offsets_errors(index)


def _cuda_index(device: torch.device | str | int | None) -> int:
    if device is None:
        return torch.cuda.current_device()
    resolved = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if resolved.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device!r}")
    return torch.cuda.current_device() if resolved.index is None else resolved.index


def interleave_gate_up(w_gate_up: torch.Tensor) -> torch.Tensor:
    """[E, K, 2I] with gate | up halves -> the same shape with columns interleaved
    (2j: gate j, 2j+1: up j), in the layout of the input (row-major or transposed view)."""
    experts, k, two_i = w_gate_up.shape
    gate, up = w_gate_up[..., : two_i // 2], w_gate_up[..., two_i // 2 :]
    interleaved = torch.stack((gate, up), dim=-1).reshape(experts, k, two_i)
    if w_gate_up.stride(-2) == 1 and w_gate_up.stride(-1) != 1:
        # The transposed view of [E, 2I, K]: keep that storage.
        return interleaved.transpose(-2, -1).contiguous().transpose(-2, -1)
    return interleaved.contiguous()


def moe_forward(
    x: torch.Tensor,
    router_logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    *,
    gate_up_interleaved: bool = False,
    config: str = "auto",
) -> torch.Tensor:
    """The expert layer's forward: [T, H] -> [T, H] (see the module's docstring)."""
    if not gate_up_interleaved:
        w_gate_up = interleave_gate_up(w_gate_up)
    return _moe_forward(  # type: ignore[no-any-return]
        _rows(x), _rows(router_logits), w_gate_up, w_down, top_k, _config(config)
    )


def _amax_scale(amax: torch.Tensor) -> torch.Tensor:
    # The kernels' rule: scale = amax / 448, and 1 for an all-zero block.
    return torch.where(amax > 0, amax / _E4M3_MAX, torch.ones_like(amax))


def quantize_fp8_activations(
    x: torch.Tensor, layout: str = "rowwise"
) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] -> (e4m3 [M, K], float32 scales) with x ~ q * scale: one scale per row ([M]) or
    per 1x128 block ([M, K/128]). The rule `moe_forward_fp8` applies on the device."""
    m, k = x.shape
    xf = x.float()
    if layout == "rowwise":
        scale = _amax_scale(xf.abs().amax(dim=1))
        q = xf / scale[:, None]
    elif layout == "blockwise":
        if k % FP8_BLOCK:
            raise ValueError(f"K = {k} must be a multiple of {FP8_BLOCK} for block scales")
        blocks = xf.reshape(m, k // FP8_BLOCK, FP8_BLOCK)
        scale = _amax_scale(blocks.abs().amax(dim=2))
        q = (blocks / scale[..., None]).reshape(m, k)
    else:
        raise ValueError(f"layout must be one of {', '.join(FP8_LAYOUTS)}, got {layout!r}")
    return q.clamp(-_E4M3_MAX, _E4M3_MAX).to(FP8_DTYPE), scale.contiguous()


def quantize_fp8_weights(
    w: torch.Tensor, layout: str = "rowwise"
) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, K, N] (any strides) -> (e4m3 [E, K, N] as the transposed view of a contiguous
    [E, N, K], float32 scales) with w[g] ~ q[g] * scale: one scale per output column
    ([E, N]) or per 128x128 block ([E, N/128, K/128]). The experts are quantised a few at a
    time (float32 temporaries of about 1 GiB at most), so a 15 GB bf16 weight needs little
    more than its 7.5 GB of e4m3."""
    if layout not in FP8_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(FP8_LAYOUTS)}, got {layout!r}")
    experts, k, n = w.shape
    if layout == "blockwise" and (k % FP8_BLOCK or n % FP8_BLOCK):
        raise ValueError(f"K = {k} and N = {n} must be multiples of {FP8_BLOCK}")
    q = torch.empty(experts, n, k, dtype=FP8_DTYPE, device=w.device)
    if layout == "rowwise":
        scale = torch.empty(experts, n, dtype=torch.float32, device=w.device)
    else:
        scale = torch.empty(
            experts, n // FP8_BLOCK, k // FP8_BLOCK, dtype=torch.float32, device=w.device
        )
    step = max(1, (1 << 28) // max(1, k * n))  # experts a chunk: <= 2^28 float32 elements
    for e0 in range(0, experts, step):
        e1 = min(experts, e0 + step)
        wt = w[e0:e1].transpose(-2, -1).float()  # [e, N, K]
        if layout == "rowwise":
            s = _amax_scale(wt.abs().amax(dim=2))
            chunk = wt / s[..., None]
        else:
            blocks = wt.reshape(e1 - e0, n // FP8_BLOCK, FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK)
            s = _amax_scale(blocks.abs().amax(dim=(2, 4)))
            chunk = (blocks / s[:, :, None, :, None]).reshape(e1 - e0, n, k)
        q[e0:e1] = chunk.clamp(-_E4M3_MAX, _E4M3_MAX).to(FP8_DTYPE)
        scale[e0:e1] = s
    return q.transpose(-2, -1), scale


def grouped_mm_fp8(
    x_fp8: torch.Tensor,
    w_fp8: torch.Tensor,
    x_scale: torch.Tensor,
    w_scale: torch.Tensor,
    offsets: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    config: str = "auto",
) -> torch.Tensor:
    """The FP8 grouped GEMM: rows ``offsets[g-1]:offsets[g]`` of ``x_fp8`` [M, K] times
    ``w_fp8[g]`` [K, N] (the transposed view of a contiguous [E, N, K]), fp32 accumulation,
    scaled and rounded once to bf16 [M, N]. Row-wise (``x_scale [M]``, ``w_scale [E, N]``):
    ``(x @ w[g]) * x_scale[:, None] * w_scale[g][None, :]``, torch._scaled_grouped_mm's
    semantics; block-wise (``x_scale [M, K/128]``, ``w_scale [E, N/128, K/128]``): each
    128-deep K block's product scaled by its two blocks' scales. `config` is one of
    `FP8_CONFIGS`."""
    if out_dtype != torch.bfloat16:
        raise ValueError(f"out_dtype must be torch.bfloat16, got {out_dtype}")
    return _grouped_mm_fp8(  # type: ignore[no-any-return]
        x_fp8, w_fp8, x_scale, w_scale, offsets, _config(config, FP8_CONFIGS)
    )


def moe_forward_fp8(
    x: torch.Tensor,
    router_logits: torch.Tensor,
    w_gate_up_fp8: torch.Tensor,
    w_gate_up_scale: torch.Tensor,
    w_down_fp8: torch.Tensor,
    w_down_scale: torch.Tensor,
    top_k: int,
    *,
    config: str = "auto",
) -> torch.Tensor:
    """`moe_forward` with e4m3 weights: ``w_gate_up_fp8`` [E, H, 2I] (gate in columns :I, up in
    I:, not interleaved) and ``w_down_fp8`` [E, I, H], each the transposed view of a contiguous
    [E, N, K] (what `quantize_fp8_weights` returns), with scales in one layout, row-wise or
    block-wise. x (bf16) is permuted, quantised to e4m3 in that layout, multiplied by the
    gate/up weights into bf16; silu(gate) * up is quantised again for the down GEMM; the
    combine is `moe_forward`'s. [T, H] bf16 -> [T, H] bf16. `config` (one of `FP8_CONFIGS`)
    is both GEMMs'."""
    return _moe_forward_fp8(  # type: ignore[no-any-return]
        _rows(x),
        _rows(router_logits),
        w_gate_up_fp8,
        w_gate_up_scale,
        w_down_fp8,
        w_down_scale,
        top_k,
        _config(config, FP8_CONFIGS),
    )


@torch.library.register_fake(f"{NAMESPACE}::grouped_mm_fp8")
def _grouped_mm_fp8_fake(
    x: torch.Tensor,
    w: torch.Tensor,
    x_scale: torch.Tensor,
    w_scale: torch.Tensor,
    offsets: torch.Tensor,
    config: int = 0,
) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[2]), dtype=torch.bfloat16)


@torch.library.register_fake(f"{NAMESPACE}::moe_forward_fp8")
def _moe_forward_fp8_fake(
    x: torch.Tensor,
    router_logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_gate_up_scale: torch.Tensor,
    w_down: torch.Tensor,
    w_down_scale: torch.Tensor,
    top_k: int,
    config: int = 0,
) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(f"{NAMESPACE}::grouped_mm")
def _grouped_mm_fake(
    x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, config: int = 0
) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[2]))


@torch.library.register_fake(f"{NAMESPACE}::grouped_mm_silu_mul")
def _grouped_mm_silu_mul_fake(
    x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, config: int = 0
) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[2] // 2))


@torch.library.register_fake(f"{NAMESPACE}::moe_forward")
def _moe_forward_fake(
    x: torch.Tensor,
    router_logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
    config: int = 0,
) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)
