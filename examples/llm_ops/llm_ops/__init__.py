"""llm_ops: RMSNorm and SiLU-and-multiply CUDA kernels, built and gated by kernelpack.

Ask before use, and load through the registry::

    import llm_ops
    if llm_ops.is_available("rmsnorm"):
        rmsnorm = llm_ops.load("rmsnorm")
        y = rmsnorm.rms_norm(x, weight)
"""

from __future__ import annotations

from kernelpack_runtime import Registry

status, is_available, unavailable_reason, load = Registry(__name__).api()

__all__ = ["is_available", "load", "status", "unavailable_reason"]
