"""The roofline of the GPU a benchmark runs on, measured in the same run, and a GEMM's floor.

A grouped GEMM at decode sizes streams every active expert's weights once and is bound by
memory; at prefill sizes it is bound by the tensor cores. Its floor is the larger of

- its minimum bytes (each active expert's weights, the input rows, the output rows, each
  once) over the fastest streaming bandwidth measured here, and
- its FLOPs over a dense GEMM's rate measured here (``torch.mm`` at 8192^3 in bf16,
  ``torch._scaled_mm`` with row-wise scales in e4m3: the same kind of kernel, no groups).

These roofs are what the best of a few plain kernels reach on this card, not the data
sheet's: a faster kernel could beat them, so "of roof" can exceed 1. What they say is how
much room a GEMM leaves: ``torch time / floor`` is the most any implementation could gain
over torch at that shape unless it beat the measured roofs.

Streaming bandwidth is the faster of a 1 GiB read (``torch.sum`` in fp32) counted as the
bytes read, and a 1 GiB device-to-device copy counted as the bytes read and written. All
times are ``triton.testing.do_bench`` medians (L2 flushed before each call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

__all__ = ["Roofs", "floor_ms", "gemm_bytes", "gemm_floor_ms", "measure"]

GIB = 2**30
DENSE = 8192


@dataclass(frozen=True)
class Roofs:
    """Measured rates: bytes/s of streaming, FLOP/s of a dense bf16 and e4m3 GEMM."""

    read_bytes_per_s: float
    copy_bytes_per_s: float
    dense_bf16_flops: float
    dense_fp8_flops: float

    @property
    def stream_bytes_per_s(self) -> float:
        return max(self.read_bytes_per_s, self.copy_bytes_per_s)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stream_bytes_per_s"] = self.stream_bytes_per_s
        return out


def _ms(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=100, return_mode="median"))


def _streaming() -> tuple[float, float]:
    """Bytes/s of a 1 GiB read and of a 1 GiB copy (read and written)."""
    src = torch.empty(GIB // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    read = GIB / (_ms(lambda: src.sum(dtype=torch.float32)) / 1e3)
    copy = 2 * GIB / (_ms(lambda: dst.copy_(src)) / 1e3)
    return read, copy


def _dense() -> tuple[float, float]:
    """FLOP/s of a dense 8192^3 GEMM in bf16 and in e4m3 with row-wise scales."""
    a = torch.randn(DENSE, DENSE, device="cuda").to(torch.bfloat16)
    b = torch.randn(DENSE, DENSE, device="cuda").to(torch.bfloat16)
    flops = 2.0 * DENSE**3
    bf16 = flops / (_ms(lambda: torch.mm(a, b)) / 1e3)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    sa = torch.ones(DENSE, 1, device="cuda")
    sb = torch.ones(1, DENSE, device="cuda")
    fp8 = flops / (_ms(lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16)) / 1e3)
    return bf16, fp8


def measure() -> Roofs:
    """The four rates on the current CUDA device (a few seconds, about 2 GiB of memory)."""
    read, copy = _streaming()
    bf16, fp8 = _dense()
    torch.cuda.empty_cache()
    return Roofs(read, copy, bf16, fp8)


def gemm_bytes(active_groups: int, rows: int, k: int, n: int, elem: int) -> int:
    """Least bytes a grouped GEMM moves: the active groups' [K, N] weights and the [rows, K]
    input in `elem`-byte elements, and the [rows, N] bf16 output, each once."""
    return (active_groups * k * n + rows * k) * elem + rows * n * 2


def floor_ms(nbytes: int, flops: float, roofs: Roofs, fp8: bool) -> float:
    """The least time of a GEMM moving `nbytes` and doing `flops` under `roofs` (ms)."""
    rate = roofs.dense_fp8_flops if fp8 else roofs.dense_bf16_flops
    return max(nbytes / roofs.stream_bytes_per_s, flops / rate) * 1e3


def gemm_floor_ms(roofs: Roofs, active_groups: int, rows: int, k: int, n: int, fp8: bool) -> float:
    """The floor of a grouped GEMM of `rows` x `k` x `n` over `active_groups` groups with rows,
    its operands in e4m3 (`fp8`) or bf16 (ms)."""
    nbytes = gemm_bytes(active_groups, rows, k, n, 1 if fp8 else 2)
    return floor_ms(nbytes, 2.0 * rows * k * n, roofs, fp8)
