"""moe_ops: a Hopper CUTLASS grouped GEMM and a fused mixture-of-experts forward.

Ask before use, and load through the registry::

    import moe_ops
    if moe_ops.is_available("moe"):
        moe = moe_ops.load("moe")
        out = moe.grouped_mm(x, w, offsets)
"""

from __future__ import annotations

from kernelpack_runtime import Registry

status, is_available, unavailable_reason, load = Registry(__name__).api()

__all__ = ["is_available", "load", "status", "unavailable_reason"]
