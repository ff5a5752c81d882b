"""Host time per call of llm_ops' ops on a tiny input, and where it goes.

Each variant is called many times on a [1, 2048] bf16 input (microseconds of GPU work, so the
host is the bottleneck) and timed with ``time.perf_counter`` around a loop of 1000 calls,
after a warm-up, with a synchronisation at the end; the variants take turns for 15 rounds and
the median per variant is kept. The variants peel the layers off one at a time:

- ``F.rms_norm``: torch's own op (the reference);
- ``wrapper``: ``llm_ops.rmsnorm.rms_norm`` as users call it;
- ``op packet``: ``torch.ops.<ns>.forward(...)``, which matches the overloads on every call;
- ``op``: the raw ``torch.ops.<ns>.forward.default`` (dispatcher, autograd kernel, binding);
- ``op, no_grad`` / ``op, inference_mode``: the same with autograd off / excluded;
- ``op, below autograd``: the same with the autograd dispatch keys skipped (what is left is
  the stable-ABI boxing, the binding and the kernel launch);
- ``torch.empty_like``, ``torch.neg``: an allocation and a one-kernel aten op, for scale.

Usage: ``python benchmarks/host_overhead.py [--out host.json] [--label after]``
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

CALLS = 1000
ROUNDS = 15

#: A variant runs `n` calls (inside whatever context it needs).
Loop = Callable[[int], None]


def measure(
    variants: dict[str, Loop], rounds: int = ROUNDS, calls: int = CALLS
) -> dict[str, float]:
    """Median microseconds per call of each variant; the variants take turns (round robin)
    so that drift of the machine (clocks, other load) spreads over all of them alike."""
    for loop in variants.values():
        loop(200)
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, loop in variants.items():
            began = time.perf_counter()
            loop(calls)
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - began) / calls * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def repeat(fn: Callable[[], Any], context: Callable[[], Any] | None = None) -> Loop:
    def loop(n: int) -> None:
        if context is None:
            for _ in range(n):
                fn()
            return
        with context():
            for _ in range(n):
                fn()

    return loop


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--label", default="", help="a name for this build (in the JSON)")
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
    silu_fwd = silu_ops.forward.default
    below = torch._C._AutoDispatchBelowAutograd
    variants: dict[str, Loop] = {
        "F.rms_norm": repeat(lambda: F.rms_norm(x, (2048,), w, 1e-6)),
        "rmsnorm wrapper": repeat(lambda: rmsnorm.rms_norm(x, w)),
        "rmsnorm op packet": repeat(lambda: ops.forward(x, w, 1e-6)),
        "rmsnorm op": repeat(lambda: fwd(x, w, 1e-6)),
        "rmsnorm op, no_grad": repeat(lambda: fwd(x, w, 1e-6), torch.no_grad),
        "rmsnorm op, inference_mode": repeat(lambda: fwd(x, w, 1e-6), torch.inference_mode),
        "rmsnorm op, below autograd": repeat(lambda: fwd(x, w, 1e-6), below),
        "silu_mul wrapper": repeat(lambda: silu_mul.silu_mul(xs)),
        "silu_mul op, below autograd": repeat(lambda: silu_fwd(xs), below),
        "F.silu(a) * b": repeat(lambda: F.silu(xs[:, :2048]) * xs[:, 2048:]),
        "torch.empty_like": repeat(lambda: torch.empty_like(x)),
        "torch.neg": repeat(lambda: torch.neg(x)),
        "x.contiguous()": repeat(lambda: x.contiguous()),
    }
    results = measure(variants)
    for name, us in results.items():
        print(f"{args.label:8s} {name:30s} {us:7.2f} us/call", flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.out:
        args.out.write_text(
            json.dumps({"environment": env, "label": args.label, "us_per_call": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
