"""Kernel speed of llm_ops against torch eager and torch.compile, as a fraction of copy speed.

For each op and shape, three implementations run on the same inputs (bf16):

- ``llm_ops``: the package's CUDA kernels (loaded through its registry);
- ``eager``: the same math in plain torch ops;
- ``compile``: ``torch.compile`` of that torch code, with static shapes (one compile per
  shape: its best case).

Achieved bandwidth is the op's minimum traffic (each input read once, each output written
once) over its time. Times come from CUDA events around replays of a CUDA graph that holds one
call per input set; input sets are rotated so that together they are at least 3x the L2 cache
(no call finds its inputs in L2), and the median of many replays is kept. Graph replay removes
the Python and launch overhead from every implementation alike, so the numbers compare GPU
work. The copy ceiling is a device-to-device copy measured the same way in the same run.

Backward ops are timed as functions of (grad, saved tensors): the llm_ops backward op, and the
closed-form backward written in torch ops (eager and compiled), each given the same saved
rstd that autograd would keep.

Calls in such a graph follow each other, so a kernel launched with programmatic dependent
launch (llm_ops' kernels, see docs/llm_ops.md) overlaps its launch with the end of the call
before it. ``--after-foreign`` also times each call behind a kernel that is not ours (a
one-element add, as a model runs some other library's kernel before a norm): the graph
holds that kernel before every call, and the time of a graph of the foreign kernels alone
is subtracted (``us_after_foreign``).

Usage: ``python benchmarks/kernels.py --out results.json [--png chart.png] [--quick]``
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from gpu_machine import clock_line, clocks, driver

__all__ = ["main"]

EPS = 1e-6
DTYPE = torch.bfloat16
TOKENS = (1024, 4096, 16384, 65536)
HIDDEN = (2048, 4096, 8192)
QUICK_TOKENS = (4096, 65536)
QUICK_HIDDEN = (4096, 8192)
L2_ROTATION_BYTES = 3 * 64 * 2**20
IMPLS = ("llm_ops", "eager", "compile")

Fn = Callable[..., Any]


@dataclass(frozen=True)
class OpCase:
    """One benchmarked op: input maker, its implementations and its minimum traffic."""

    name: str
    make_inputs: Callable[[int, int], tuple[torch.Tensor, ...]]
    bytes_moved: Callable[[int, int], int]
    impls: dict[str, Fn]


# -- the torch versions ---------------------------------------------------------------------


def torch_rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


def torch_rmsnorm_residual(
    x: torch.Tensor, r: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + r
    return torch.nn.functional.rms_norm(h, (h.shape[-1],), w, EPS), h


def torch_rmsnorm_backward(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r = rstd.unsqueeze(-1)
    xhat = x.float() * r
    g = dy.float() * w.float()
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = (dy.float() * xhat).sum(0)
    return dx.to(x.dtype), dw.to(w.dtype)


def torch_silu_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def torch_silu_mul_backward(dout: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    a = x[..., :d].float()
    b = x[..., d:].float()
    g = dout.float()
    s = torch.sigmoid(a)
    da = g * b * s * (1 + a * (1 - s))
    db = g * a * s
    return torch.cat([da, db], dim=-1).to(x.dtype)


# -- cases -----------------------------------------------------------------------------------


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(DTYPE)


def _weight(hidden: int) -> torch.Tensor:
    return (torch.rand(hidden, device="cuda") + 0.5).to(DTYPE)


def _compiled(fn: Fn) -> Fn:
    # Static shapes (a compile per shape): torch.compile's best case, tuned for each size.
    return torch.compile(fn, dynamic=False)


def make_cases(rmsnorm: Any, silu_mul: Any) -> list[OpCase]:
    """The benchmarked ops, bound to the loaded llm_ops kernel modules."""
    rms_ops = getattr(torch.ops, rmsnorm.NAMESPACE)
    silu_ops = getattr(torch.ops, silu_mul.NAMESPACE)
    s = torch.empty((), dtype=DTYPE).element_size()

    def rms_fwd_inputs(t: int, h: int) -> tuple[torch.Tensor, ...]:
        return _randn(t, h), _weight(h)

    def rms_res_inputs(t: int, h: int) -> tuple[torch.Tensor, ...]:
        return _randn(t, h), _randn(t, h), _weight(h)

    def rms_bwd_inputs(t: int, h: int) -> tuple[torch.Tensor, ...]:
        x, w = _randn(t, h), _weight(h)
        _, rstd = rms_ops.forward(x, w, EPS)
        return _randn(t, h), x, w, rstd

    def silu_fwd_inputs(t: int, h: int) -> tuple[torch.Tensor, ...]:
        return (_randn(t, 2 * h),)

    def silu_bwd_inputs(t: int, h: int) -> tuple[torch.Tensor, ...]:
        return _randn(t, h), _randn(t, 2 * h)

    return [
        OpCase(
            "rmsnorm_fwd",
            rms_fwd_inputs,
            lambda t, h: (2 * t * h + h) * s,
            {
                "llm_ops": lambda x, w: rmsnorm.rms_norm(x, w, EPS),
                "eager": torch_rmsnorm,
                "compile": _compiled(torch_rmsnorm),
            },
        ),
        OpCase(
            "rmsnorm_residual_fwd",
            rms_res_inputs,
            lambda t, h: (4 * t * h + h) * s,
            {
                "llm_ops": lambda x, r, w: rmsnorm.rms_norm(x, w, EPS, residual=r),
                "eager": torch_rmsnorm_residual,
                "compile": _compiled(torch_rmsnorm_residual),
            },
        ),
        OpCase(
            "rmsnorm_bwd",
            rms_bwd_inputs,
            lambda t, h: (3 * t * h + 2 * h) * s + 4 * t,
            {
                "llm_ops": lambda dy, x, w, rstd: rms_ops.backward(dy, x, w, rstd, None),
                "eager": torch_rmsnorm_backward,
                "compile": _compiled(torch_rmsnorm_backward),
            },
        ),
        OpCase(
            "silu_mul_fwd",
            silu_fwd_inputs,
            lambda t, h: 3 * t * h * s,
            {
                "llm_ops": silu_mul.silu_mul,
                "eager": torch_silu_mul,
                "compile": _compiled(torch_silu_mul),
            },
        ),
        OpCase(
            "silu_mul_bwd",
            silu_bwd_inputs,
            lambda t, h: 5 * t * h * s,
            {
                "llm_ops": lambda dout, x: silu_ops.backward(dout, x),
                "eager": torch_silu_mul_backward,
                "compile": _compiled(torch_silu_mul_backward),
            },
        ),
    ]


# -- timing ----------------------------------------------------------------------------------


def rotation(set_bytes: int) -> int:
    """Input sets to rotate through so that together they overflow the L2 cache."""
    return max(2, min(64, math.ceil(L2_ROTATION_BYTES / max(set_bytes, 1))))


def time_calls(
    fn: Fn,
    arg_sets: Sequence[tuple[torch.Tensor, ...]],
    min_replays: int,
    before: Callable[[], Any] | None = None,
) -> float:
    """Median seconds of one call of `fn`, from CUDA-graph replays of one call per input set
    (each preceded by `before()` when given)."""

    def call(args: tuple[torch.Tensor, ...]) -> Any:
        if before is not None:
            before()
        return fn(*args)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            for args in arg_sets:
                call(args)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = [call(args) for args in arg_sets]
    graph.replay()
    torch.cuda.synchronize()

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-6)
    replays = max(min_replays, min(200, int(0.1 / once)))
    samples = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    del outputs, graph
    return statistics.median(samples) / len(arg_sets)


def copy_time(nbytes: int, min_replays: int) -> float:
    """Median seconds of one device-to-device copy of `nbytes`, rotated like the ops.

    The faster of two copies is kept: ``copy_`` (in a CUDA graph it becomes a memcpy node,
    which large sizes run on the copy engines, far below what SMs reach: about 2.7 TB/s here
    from 512 MiB up) and an elementwise kernel that reads and writes every element.
    """
    n = nbytes // torch.empty((), dtype=DTYPE).element_size()
    sets = [
        (torch.empty(n, dtype=DTYPE, device="cuda").normal_(),) for _ in range(rotation(nbytes))
    ]
    outs = {id(a): torch.empty_like(a) for (a,) in sets}
    memcpy = time_calls(lambda a: outs[id(a)].copy_(a), sets, min_replays)
    kernel = time_calls(lambda a: torch.mul(a, 1, out=outs[id(a)]), sets, min_replays)
    return min(memcpy, kernel)


def copy_sweep(min_replays: int) -> dict[str, float]:
    """Copy bandwidth (bytes read + written per second) over buffer sizes, and by a plain loop.

    The ceiling is the best of these. "loop" copies one 2 GiB buffer back to back without a
    graph or rotation (how a copy is usually timed), to cross-check the graph method.
    """
    sweep: dict[str, float] = {}
    for mib in (64, 256, 512, 1024, 2048, 4096):
        nbytes = mib * 2**20
        sweep[f"{mib} MiB"] = 2 * nbytes / copy_time(nbytes, min_replays)
    n = 2**30
    src = torch.empty(n, dtype=DTYPE, device="cuda").normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(10):
        start.record()
        for _ in range(10):
            dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / 10)
    sweep["2048 MiB loop"] = 2 * 2 * n / statistics.median(samples)
    del src, dst
    torch.cuda.empty_cache()
    return sweep


# -- the run ---------------------------------------------------------------------------------


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def run(
    tokens: Sequence[int],
    hiddens: Sequence[int],
    min_replays: int,
    ops: Sequence[str] | None = None,
    impls: Sequence[str] = IMPLS,
    copy_ceiling: float | None = None,
    after_foreign: bool = False,
) -> dict[str, Any]:
    """Measure every case (or the `ops` named); returns the JSON-ready result. With
    `after_foreign`, each call is also timed behind a foreign kernel (``us_after_foreign``)."""
    import llm_ops

    for name, value in (("recompile_limit", 1024), ("cache_size_limit", 1024)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    torch._dynamo.config.automatic_dynamic_shapes = False
    rmsnorm = llm_ops.load("rmsnorm")
    silu_mul = llm_ops.load("silu_mul")
    cases = [c for c in make_cases(rmsnorm, silu_mul) if ops is None or c.name in ops]

    sweep = {"given": copy_ceiling * 1e12} if copy_ceiling else copy_sweep(min_replays)
    peak = max(sweep.values())
    for size, bw in sweep.items():
        print(f"device-to-device copy {size:>10}: {bw / 1e12:.2f} TB/s", flush=True)

    bump = torch.zeros(1, device="cuda")

    def foreign() -> None:
        bump.add_(1)  # one small kernel of torch's own

    rows: list[dict[str, Any]] = []
    for case in cases:
        for hidden in hiddens:
            for t in tokens:
                began = time.perf_counter()
                probe = case.make_inputs(t, hidden)
                set_bytes = sum(a.numel() * a.element_size() for a in probe)
                sets = [probe] + [
                    case.make_inputs(t, hidden) for _ in range(rotation(set_bytes) - 1)
                ]
                moved = case.bytes_moved(t, hidden)
                copy_s = copy_time(moved // 2, min_replays)
                foreign_s = (
                    time_calls(lambda *a: None, sets, min_replays, before=foreign)
                    if after_foreign
                    else 0.0
                )
                row: dict[str, Any] = {
                    "op": case.name,
                    "tokens": t,
                    "hidden": hidden,
                    "bytes": moved,
                    "input_sets": len(sets),
                    "copy_same_bytes_tbps": moved / copy_s / 1e12,
                    "impls": {},
                }
                for impl, fn in case.impls.items():
                    if impl not in impls:
                        continue
                    try:
                        seconds = time_calls(fn, sets, min_replays)
                    except Exception as exc:  # a failing baseline is reported, not fatal
                        row["impls"][impl] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                        continue
                    row["impls"][impl] = {
                        "us": seconds * 1e6,
                        "tbps": moved / seconds / 1e12,
                        "fraction_of_copy": moved / seconds / peak,
                    }
                    if after_foreign:
                        behind = time_calls(fn, sets, min_replays, before=foreign)
                        row["impls"][impl]["us_after_foreign"] = (behind - foreign_s) * 1e6
                rows.append(row)
                del sets, probe
                torch.cuda.empty_cache()
                print(_row_line(row, time.perf_counter() - began), flush=True)

    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": driver(),
        # Sampled as the timing ends, while the GPU still runs at its clocks under load.
        "clocks": clocks(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "llm_ops": _version("llm_ops"),
        # llm_ops' launches use programmatic dependent launch unless LLM_OPS_PDL=0.
        "llm_ops_pdl": os.environ.get("LLM_OPS_PDL", "1") != "0",
        "dtype": str(DTYPE).removeprefix("torch."),
        "copy_peak_tbps": peak / 1e12,
        "copy_sweep_tbps": {size: bw / 1e12 for size, bw in sweep.items()},
        "method": (
            "bytes = minimum traffic (inputs read once, outputs written once); time = median "
            "over CUDA-graph replays of one call per input set, inputs rotated over >= 3x L2; "
            "fraction_of_copy = achieved / measured device-to-device copy bandwidth"
        ),
        "results": rows,
        "summary": summarise(rows),
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per op: geomean fraction of copy per implementation, speedups of llm_ops."""
    summary: dict[str, Any] = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        op_rows = [r for r in rows if r["op"] == op]
        entry: dict[str, Any] = {}
        for impl in IMPLS:
            fracs = [
                r["impls"][impl]["fraction_of_copy"]
                for r in op_rows
                if "us" in r["impls"].get(impl, {})
            ]
            entry[f"{impl}_geomean_fraction_of_copy"] = geomean(fracs)
        for base in ("eager", "compile"):
            ratios = [
                r["impls"][base]["us"] / r["impls"]["llm_ops"]["us"]
                for r in op_rows
                if "us" in r["impls"].get(base, {}) and "us" in r["impls"].get("llm_ops", {})
            ]
            entry[f"speedup_vs_{base}_geomean"] = geomean(ratios)
            entry[f"speedup_vs_{base}_min"] = min(ratios) if ratios else math.nan
        largest = max(op_rows, key=lambda r: r["bytes"])
        entry["largest"] = {
            "tokens": largest["tokens"],
            "hidden": largest["hidden"],
            "fraction_of_copy": {
                impl: largest["impls"].get(impl, {}).get("fraction_of_copy") for impl in IMPLS
            },
        }
        summary[op] = entry
    return summary


def _row_line(row: dict[str, Any], seconds: float) -> str:
    parts = [f"{row['op']:<21} {row['tokens']:>6}x{row['hidden']:<5}"]
    for impl in IMPLS:
        res = row["impls"].get(impl, {})
        if "us" in res:
            parts.append(f"{impl} {res['us']:9.1f}us {res['fraction_of_copy']:5.2f}")
            if "us_after_foreign" in res:
                parts.append(f"(after foreign {res['us_after_foreign']:.1f}us)")
        elif "error" in res:
            parts.append(f"{impl} failed")
    parts.append(f"copy@size {row['copy_same_bytes_tbps']:.2f}TB/s ({seconds:.1f}s)")
    return "  ".join(parts)


def chart(result: dict[str, Any], path: Path) -> bool:
    """Bar chart of the fraction of copy bandwidth, per shape and op; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ops = list(dict.fromkeys(r["op"] for r in result["results"]))
    fig, axes = plt.subplots(len(ops), 1, figsize=(12, 3.2 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops, strict=True):
        rows = [r for r in result["results"] if r["op"] == op]
        labels = [f"{r['tokens'] // 1024}k x {r['hidden']}" for r in rows]
        width = 0.8 / len(IMPLS)
        for i, impl in enumerate(IMPLS):
            values = [r["impls"].get(impl, {}).get("fraction_of_copy", 0.0) for r in rows]
            ax.bar([j + i * width for j in range(len(rows))], values, width, label=impl)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks([j + width for j in range(len(rows))], labels, rotation=45, fontsize=7)
        ax.set_ylabel("fraction of copy BW")
        ax.set_title(op)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"llm_ops vs torch {result['torch']} on {result['gpu']} "
        f"(copy {result['copy_peak_tbps']:.2f} TB/s, bf16)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def markdown_table(result: dict[str, Any]) -> str:
    """The results as a Markdown table: time and fraction of copy bandwidth per implementation."""
    lines = [
        "| op | tokens x hidden | llm_ops us | eager us | compile us "
        "| llm_ops / copy | eager / copy | compile / copy | vs eager | vs compile |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["results"]:
        impls = row["impls"]

        def cell(impl: str, key: str, fmt: str, impls: dict[str, Any] = impls) -> str:
            value = impls.get(impl, {}).get(key)
            return format(value, fmt) if value is not None else "-"

        def ratio(base: str, impls: dict[str, Any] = impls) -> str:
            if "us" in impls.get(base, {}) and "us" in impls.get("llm_ops", {}):
                return f"{impls[base]['us'] / impls['llm_ops']['us']:.2f}x"
            return "-"

        lines.append(
            f"| {row['op']} | {row['tokens']} x {row['hidden']} "
            f"| {cell('llm_ops', 'us', '.1f')} | {cell('eager', 'us', '.1f')} "
            f"| {cell('compile', 'us', '.1f')} | {cell('llm_ops', 'fraction_of_copy', '.2f')} "
            f"| {cell('eager', 'fraction_of_copy', '.2f')} "
            f"| {cell('compile', 'fraction_of_copy', '.2f')} | {ratio('eager')} "
            f"| {ratio('compile')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument(
        "--table", type=Path, help="print the Markdown table of an existing results file"
    )
    parser.add_argument("--png", type=Path, help="bar chart (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="fewer shapes (a smoke run)")
    parser.add_argument("--tokens", help="comma-separated token counts (overrides the default)")
    parser.add_argument("--hidden", help="comma-separated hidden sizes (overrides the default)")
    parser.add_argument("--ops", help="comma-separated ops to run (default: all)")
    parser.add_argument("--impls", default=",".join(IMPLS), help="comma-separated implementations")
    parser.add_argument("--copy-ceiling", type=float, help="TB/s; skips the copy sweep")
    parser.add_argument("--min-replays", type=int, default=20)
    parser.add_argument(
        "--after-foreign",
        action="store_true",
        help="also time each call behind a kernel that is not ours (us_after_foreign)",
    )
    args = parser.parse_args(argv)
    if args.table is not None:
        print(markdown_table(json.loads(args.table.read_text(encoding="utf-8"))), end="")
        return 0
    if args.out is None:
        parser.error("--out is required")
    if not torch.cuda.is_available():
        print("kernels.py: no CUDA device", file=sys.stderr)
        return 2
    tokens = QUICK_TOKENS if args.quick else TOKENS
    hiddens = QUICK_HIDDEN if args.quick else HIDDEN
    if args.tokens:
        tokens = tuple(int(v) for v in args.tokens.split(","))
    if args.hidden:
        hiddens = tuple(int(v) for v in args.hidden.split(","))
    ops = args.ops.split(",") if args.ops else None
    result = run(
        tokens,
        hiddens,
        args.min_replays,
        ops,
        args.impls.split(","),
        args.copy_ceiling,
        args.after_foreign,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["summary"], indent=2))
    print(
        f"\n{result['gpu']}, driver {result['driver']}, torch {result['torch']}; "
        f"{clock_line(result.get('clocks'))}\n"
    )
    print(markdown_table(result), end="")
    if args.png is not None and not chart(result, args.png):
        print("kernels.py: matplotlib is not installed; no chart written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
