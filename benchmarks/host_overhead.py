"""Host time per call of llm_ops' ops on a tiny input, and where it goes.

Each variant is called many times on a [1, 2048] bf16 input (microseconds of GPU work, so the
host is the bottleneck) and timed with ``time.perf_counter`` around the loop, after a warm-up,
with a synchronisation at the end; the median over several loops is kept. The variants peel
the layers off one at a time:

- ``F.rms_norm``: torch's own op (the reference);
- ``wrapper``: ``llm_ops.rmsnorm.rms_norm`` as users call it;
- ``op packet``: ``torch.ops.<ns>.forward(...)``, which matches the overloads on every call;
- ``op``: the raw ``torch.ops.<ns>.forward.default`` (dispatcher, autograd kernel, binding);
- ``op, no_grad`` / ``op, inference_mode``: the same with autograd off / excluded;
- ``op, below autograd``: the same with the autograd dispatch keys skipped (what is left is
  the stable-ABI boxing, the binding and the kernel launch);
- ``torch.empty_like``, ``torch.neg``: an allocation and a one-kernel aten op, for scale.

Usage: ``python benchmarks/host_overhead.py [--out host.json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["main"]

CALLS = 2000
LOOPS = 7


def per_call_us(fn: Callable[[], Any], calls: int = CALLS, loops: int = LOOPS) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(loops):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(samples)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import llm_ops

    rmsnorm = llm_ops.load("rmsnorm")
    silu_mul = llm_ops.load("silu_mul")
    ops = getattr(torch.ops, rmsnorm.NAMESPACE)
    silu_ops = getattr(torch.ops, silu_mul.NAMESPACE)
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    xs = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    fwd = ops.forward.default
    silu_fwd = next(getattr(silu_ops, n) for n in ("forward", "silu_mul") if hasattr(silu_ops, n))
    results: dict[str, float] = {}

    def measure(name: str, fn: Callable[[], Any]) -> None:
        results[name] = per_call_us(fn)
        print(f"{name:34s} {results[name]:7.2f} us/call", flush=True)

    measure("F.rms_norm", lambda: F.rms_norm(x, (2048,), w, 1e-6))
    measure("rmsnorm wrapper", lambda: rmsnorm.rms_norm(x, w))
    measure("rmsnorm op packet", lambda: ops.forward(x, w, 1e-6))
    measure("rmsnorm op", lambda: fwd(x, w, 1e-6))
    with torch.no_grad():
        measure("rmsnorm op, no_grad", lambda: fwd(x, w, 1e-6))
    with torch.inference_mode():
        measure("rmsnorm op, inference_mode", lambda: fwd(x, w, 1e-6))
    with torch._C._AutoDispatchBelowAutograd():
        measure("rmsnorm op, below autograd", lambda: fwd(x, w, 1e-6))
    measure("silu_mul wrapper", lambda: silu_mul.silu_mul(xs))
    with torch._C._AutoDispatchBelowAutograd():
        measure("silu_mul op, below autograd", lambda: silu_fwd.default(xs))
    measure("F.silu(a) * b", lambda: F.silu(xs[:, :2048]) * xs[:, 2048:])
    measure("torch.empty_like", lambda: torch.empty_like(x))
    measure("torch.neg", lambda: torch.neg(x))
    measure("x.contiguous()", lambda: x.contiguous())
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.out:
        args.out.write_text(json.dumps({"environment": env, "us_per_call": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
