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
- ``nograd op``: ``forward_nograd``, the same function registered without an autograd
  kernel (the dispatcher's C++ fallback), which the wrappers call when nothing is recorded;
- ``op, grad``: the op with a graph recorded through its registered (Python) autograd kernel;
- ``torch.empty_like``, ``torch.neg``: an allocation and a one-kernel aten op, for scale.

Each wrapper is also set against the eager torch code it replaces, with gradients off (no
input requires grad) and on (``x`` and ``weight`` require grad, so every call records a graph):
``overhead_us`` is wrapper minus eager, against the target of at most 1 us. Then
``torch.profiler`` records 200 calls of each pair and splits each call into host time (the
CPU time of the outermost op, from the profiler's own events) and GPU time (the CUDA kernel
time of those calls), so what the loop timing shows as host cost is not GPU work.

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
from gpu_machine import driver

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


#: Pairs of (wrapper, the eager torch code it replaces), gradients off and on.
PAIRS = (
    ("rmsnorm", "rmsnorm wrapper", "F.rms_norm"),
    ("rmsnorm, grad", "rmsnorm wrapper, grad", "F.rms_norm, grad"),
    ("rmsnorm residual", "rmsnorm residual wrapper", "F.rms_norm(x + r)"),
    ("rmsnorm residual, grad", "rmsnorm residual wrapper, grad", "F.rms_norm(x + r), grad"),
    ("silu_mul", "silu_mul wrapper", "F.silu(a) * b"),
    ("silu_mul, grad", "silu_mul wrapper, grad", "F.silu(a) * b, grad"),
)
#: The most host time a wrapper may add to the eager op it replaces (microseconds).
TARGET_US = 1.0


def overheads(results: dict[str, float]) -> dict[str, dict[str, float]]:
    """Wrapper minus eager for each pair of `PAIRS` present in `results`."""
    table: dict[str, dict[str, float]] = {}
    for name, ours, eager in PAIRS:
        if ours in results and eager in results:
            table[name] = {
                "wrapper_us": results[ours],
                "eager_us": results[eager],
                "overhead_us": results[ours] - results[eager],
            }
    return table


def profile(variants: dict[str, Loop], names: Sequence[str], calls: int = 200) -> dict[str, Any]:
    """Host and GPU microseconds per call of each named variant, from torch.profiler.

    Host time per call is the wall time of the profiled loop over `calls`, less nothing: the
    profiler adds its own cost to every op, so these figures are compared with each other,
    not with `measure`'s. GPU time per call is the summed CUDA kernel time over `calls`.
    """
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out: dict[str, Any] = {}
    for name in names:
        loop = variants[name]
        loop(50)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            began = time.perf_counter()
            loop(calls)
            host = (time.perf_counter() - began) / calls * 1e6
            torch.cuda.synchronize()
        events = prof.key_averages()
        gpu = sum(getattr(e, "self_device_time_total", 0.0) for e in events) / calls
        top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
        out[name] = {
            "host_us_per_call_profiled": host,
            "gpu_us_per_call": gpu,
            "top_self_cpu_us_per_call": {e.key: e.self_cpu_time_total / calls for e in top},
        }
    return out


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
    r = torch.randn_like(x)
    xg, wg, rg = (t.clone().requires_grad_() for t in (x, w, r))
    xsg = xs.clone().requires_grad_()
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
        "rmsnorm wrapper, grad": repeat(lambda: rmsnorm.rms_norm(xg, wg)),
        "F.rms_norm, grad": repeat(lambda: F.rms_norm(xg, (2048,), wg, 1e-6)),
        "rmsnorm residual wrapper": repeat(lambda: rmsnorm.rms_norm(x, w, residual=r)),
        "F.rms_norm(x + r)": repeat(lambda: eager_residual(x, r, w)),
        "rmsnorm residual wrapper, grad": repeat(lambda: rmsnorm.rms_norm(xg, wg, residual=rg)),
        "F.rms_norm(x + r), grad": repeat(lambda: eager_residual(xg, rg, wg)),
        "silu_mul wrapper, grad": repeat(lambda: silu_mul.silu_mul(xsg)),
        "F.silu(a) * b, grad": repeat(lambda: F.silu(xsg[:, :2048]) * xsg[:, 2048:]),
        # The registered autograd kernel with a graph recorded: the wrappers' graph path
        # before they had their own autograd.Function.
        "rmsnorm op, grad": repeat(lambda: fwd(xg, wg, 1e-6)),
        "silu_mul op, grad": repeat(lambda: silu_fwd(xsg)),
        "torch.empty_like": repeat(lambda: torch.empty_like(x)),
        "torch.neg": repeat(lambda: torch.neg(x)),
        "x.contiguous()": repeat(lambda: x.contiguous()),
    }
    if hasattr(ops, "forward_nograd"):  # the op without an autograd kernel (llm_ops._dispatch)
        nograd = ops.forward_nograd.default
        silu_nograd = silu_ops.forward_nograd.default
        variants["rmsnorm nograd op"] = repeat(lambda: nograd(x, w, 1e-6))
        variants["silu_mul nograd op"] = repeat(lambda: silu_nograd(xs))
    if hasattr(ops, "infer"):  # rmsnorm without the rstd output (what the wrapper calls)
        infer = ops.infer.default
        variants["rmsnorm infer op"] = repeat(lambda: infer(x, w, 1e-6))
    results = measure(variants)
    for name, us in results.items():
        print(f"{args.label:8s} {name:32s} {us:7.2f} us/call", flush=True)
    table = overheads(results)
    print(f"\n| op | wrapper us | eager us | overhead us (target <= {TARGET_US:g}) |")
    print("|---|---|---|---|")
    for name, row in table.items():
        print(
            f"| {name} | {row['wrapper_us']:.2f} | {row['eager_us']:.2f} "
            f"| {row['overhead_us']:+.2f} |"
        )
    profiled = profile(variants, [n for pair in PAIRS for n in pair[1:]])
    print("\n| variant | host us/call (profiled) | GPU us/call |")
    print("|---|---|---|")
    for name, row in profiled.items():
        print(f"| {name} | {row['host_us_per_call_profiled']:.2f} | {row['gpu_us_per_call']:.2f} |")
    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "driver": driver(),
        "python": sys.version.split()[0],
    }
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "environment": env,
                    "label": args.label,
                    "target_us": TARGET_US,
                    "us_per_call": results,
                    "overhead": table,
                    "profiler": profiled,
                },
                indent=1,
            )
        )
    return 0


def eager_residual(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The eager torch code `rms_norm(x, w, residual=r)` replaces."""
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h


if __name__ == "__main__":
    sys.exit(main())
