"""Speed of moe_ops on a GPU: grouped GEMM and the MoE layer forward, against torch.

Shapes are expert layers of real models (bf16), with tokens routed by softmax top-k of random
router logits (so the rows per expert are uneven, as in use):

- ``mixtral``: H 4096, I 14336, E 8, top-2, T in {4096, 16384};
- ``deepseek-v3``: H 7168, I 2048, E 256, top-8, T 4096;
- ``qwen3-30b``: H 2048, I 768, E 128, top-8, T 16384;
- ``gpt-oss-120b``: H 2880, I 2880, E 128, top-4, T 4096;
- ``llama-4``: H 5120, I 8192, E 16, top-1 (Scout's routed experts), T 4096.

``--fp8`` measures the e4m3 grouped GEMM instead: both GEMMs of the five models at 1,024 and
4,096 tokens, ``torch._scaled_grouped_mm`` (row-wise scales) against ``grouped_mm_fp8`` with
row-wise and with block-wise (1x128 / 128x128) scales, in TFLOP/s and as a share of the
H200's dense FP8 peak (1,979 TFLOP/s), and ``moe_forward_fp8`` against ``moe_forward``.

``--decode`` measures the decode regime instead: 1, 8 and 64 tokens through each of the five
models' expert layers (a few rows per expert, most experts empty at 1 token), where the GEMMs
read every active expert's weights once and are bound by memory, not by the tensor cores.

Grouped GEMM (each of the layer's two GEMMs, gate/up [T*k, H] x [E, H, 2I] and down
[T*k, I] x [E, I, H]): ``moe_ops`` (each tile config), ``torch._grouped_mm`` and a loop of
per-expert ``torch.mm`` (cuBLAS), each with the weights as ``[E, K, N]`` row-major and as the
transposed view of ``[E, N, K]``. TFLOP/s counts GEMM FLOPs only (2 * rows * K * N).

MoE forward: ``moe_ops.moe_forward`` against the same layer written with
``torch._grouped_mm`` plus torch ops for the routing, permutation, SiLU-and-mul and combine
(no host synchronisation in either). TFLOP/s counts the two GEMMs' FLOPs only.

Each GEMM also gets a floor from the card's roofline measured at the start of the run
(``roofline.py``: the fastest streaming bandwidth and a dense GEMM's rate): its share of that
floor ("of roof"), and per GEMM torch's time over the floor ("ceiling x"), the most any kernel
could gain over torch there without beating the measured roofs. The closing table lists the
GEMMs whose ceiling is under the 1.2x the targets ask.

Times are medians of single calls timed by CUDA events, L2 flushed before each call by
zeroing a 256 MB buffer (as ``triton.testing.do_bench`` does), the implementations of a GEMM
interleaved call by call in rotating order (``bench_all``: a GPU at its power limit changes
its clocks over a run, and every implementation must see the same ones); each row keeps how
far the medians of the first and second half of its calls were apart (``pass_spread``), and
the run closes with the largest. Before 2026-12-07 each implementation was timed by
``do_bench`` in a block of its own, once in turn and once in reverse order. With
``--clean-l2`` L2 is flushed by reading a 256 MB buffer instead (``L2_FLUSH``). Every timed
implementation is first checked against ``torch._grouped_mm``.

``--models``, ``--tokens`` and ``--configs`` narrow a run to some of its regime's layers and
choose the tile configs forced besides ``auto`` (any the installed moe_ops has, so a build
with a new config is timed by naming it): ``--fp8 --tokens 4096 --models mixtral,llama-4
--configs cooperative,cooperative_2x1``. A name the regime or the package does not have is
refused (exit 2).

Usage: ``python benchmarks/moe.py --out moe.json [--png moe.png] [--quick | --decode | --fp8]
[--clean-l2] [--models M,...] [--tokens T,...] [--configs C,...]``
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import roofline
import torch
import torch.nn.functional as F
from gpu_machine import clock_line, clocks, query

__all__ = ["main"]

BF16 = torch.bfloat16
Fn = Callable[[], Any]


@dataclass(frozen=True)
class Layer:
    """One expert layer: hidden H, intermediate I, experts E, top-k, tokens T."""

    name: str
    hidden: int
    inter: int
    experts: int
    top_k: int
    tokens: int

    @property
    def label(self) -> str:
        if self.tokens < 1024:
            return f"{self.name} T={self.tokens}"
        return f"{self.name} T={self.tokens // 1024}k"

    @property
    def gemm_flops(self) -> float:
        rows = self.tokens * self.top_k
        return 2.0 * rows * self.hidden * 2 * self.inter + 2.0 * rows * self.inter * self.hidden


LAYERS = (
    Layer("mixtral", 4096, 14336, 8, 2, 4096),
    Layer("mixtral", 4096, 14336, 8, 2, 16384),
    Layer("deepseek-v3", 7168, 2048, 256, 8, 4096),
    Layer("qwen3-30b", 2048, 768, 128, 8, 16384),
    Layer("gpt-oss-120b", 2880, 2880, 128, 4, 4096),
    Layer("llama-4", 5120, 8192, 16, 1, 4096),
)
#: The five models' expert layers (hidden, intermediate, experts, top-k).
MODELS = {
    "qwen3-30b": (2048, 768, 128, 8),
    "deepseek-v3": (7168, 2048, 256, 8),
    "mixtral": (4096, 14336, 8, 2),
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "llama-4": (5120, 8192, 16, 1),
}
DECODE_LAYERS = tuple(
    Layer(name, *MODELS[name], tokens) for tokens in (1, 8, 64) for name in MODELS
)
#: The bf16 tile configurations forced by default besides "auto" (the rule's pick, the one
#: the summaries count, always timed); ``--configs`` names others. gemv only at decode sizes
#: (layer_configs).
FORCED = ("cooperative", "cooperative_2x1", "small", "gemv")
#: The FP8 row-wise tile configurations forced by default (--fp8).
FP8_FORCED = ("cooperative", "pingpong")
#: FP8 (--fp8): the five models' two expert GEMMs at 1,024 and 4,096 tokens.
FP8_LAYERS = tuple(Layer(name, *MODELS[name], tokens) for tokens in (1024, 4096) for name in MODELS)
#: The H200's dense e4m3 tensor-core peak (TFLOP/s, without sparsity).
FP8_PEAK_TFLOPS = 1979.0
QUICK_LAYERS = (
    Layer("mixtral", 4096, 14336, 8, 2, 4096),
    Layer("qwen3-30b", 2048, 768, 128, 8, 4096),
)


class SelectionError(ValueError):
    """A --models, --tokens or --configs value that names nothing this run can time."""


def _names(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def _wanted(flag: str, value: str | None, known: Sequence[str]) -> set[str] | None:
    """The names `value` gives (None: no filter), each one of `known` or a SelectionError."""
    names = _names(value)
    if names is None:
        return None
    for name in names:
        if name not in known:
            raise SelectionError(f"{flag}: no {name!r} here (known: {', '.join(known)})")
    return set(names)


def select_layers(
    layers: Sequence[Layer], models: str | None, tokens: str | None
) -> tuple[Layer, ...]:
    """The layers of a regime whose model is in `models` and token count in `tokens`
    (comma-separated; None keeps all). Raises SelectionError for a name or a count the regime
    does not have."""
    names = _wanted("--models", models, sorted({layer.name for layer in layers}))
    counts = _wanted("--tokens", tokens, [str(t) for t in sorted({lay.tokens for lay in layers})])
    chosen = tuple(
        layer
        for layer in layers
        if (names is None or layer.name in names)
        and (counts is None or str(layer.tokens) in counts)
    )
    if not chosen:
        raise SelectionError("--models and --tokens together leave no layer")
    return chosen


def select_configs(
    requested: str | None, default: Sequence[str], known: Sequence[str]
) -> tuple[str, ...]:
    """The tile configs a run forces: `requested` (comma-separated) or `default`, each one the
    installed moe_ops knows (`known`: its CONFIGS or FP8_CONFIGS), "auto" left out (always
    timed). Raises SelectionError for a name the installed package does not have."""
    names = _names(requested)
    chosen = tuple(default) if names is None else names
    for name in chosen:
        if name not in known:
            raise SelectionError(
                f"--configs: the installed moe_ops has no config {name!r} "
                f"(known: {', '.join(known)})"
            )
    return tuple(name for name in chosen if name != "auto")


def layer_configs(forced: Sequence[str], tokens: int) -> tuple[str, ...]:
    """What a bf16 layer times: "auto" and the forced configs. "gemv" reads an expert's
    weights once for every 4 of its rows, so it is timed at decode sizes only (at prefill
    sizes one call would stream the weights a thousand times)."""
    return ("auto", *(c for c in forced if tokens < 1024 or c != "gemv"))


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


#: The speedup over torch the issue asks of every GEMM.
TARGET_X = 1.2


def roof_table(
    layers: Sequence[dict[str, Any]], group: Sequence[str], theirs: str, ours: str
) -> dict[str, Any]:
    """Per GEMM of `layers` (each layer's ``gemms`` rows told apart by the `group` fields),
    torch's (`theirs`) and our (`ours`) share of the roof, ours over torch, and the ceiling
    (torch's time over the floor: the most any kernel could gain there without beating the
    measured roofs); printed, and the GEMMs whose ceiling is under `TARGET_X`."""
    table = {}
    head = ("torch of roof", "ours of roof", "ours x", "ceiling x")
    print(f"\n{'GEMM':40s} {head[0]:>13s} {head[1]:>12s} {head[2]:>7s} {head[3]:>9s}")
    for lay in layers:
        by: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
        for row in lay["gemms"]:
            if "ms" in row:  # not refused
                by.setdefault(tuple(row[f] for f in group), {})[row["impl"]] = row
        for key, impls in by.items():
            if theirs not in impls or ours not in impls:
                continue
            name = " ".join((lay["label"], *key))
            t, o = impls[theirs], impls[ours]
            table[name] = {
                "torch_of_roof": t["of_roof"],
                "ours_of_roof": o["of_roof"],
                "x": t["ms"] / o["ms"],
                "ceiling_x": t["ms"] / t["floor_ms"],
            }
            row = table[name]
            print(
                f"{name:40s} {row['torch_of_roof']:13.1%} {row['ours_of_roof']:12.1%} "
                f"{row['x']:7.2f} {row['ceiling_x']:9.2f}"
            )
    below = sorted(name for name, row in table.items() if row["ceiling_x"] < TARGET_X)
    print(
        f"{len(below)} of {len(table)} GEMMs leave less than {TARGET_X}x over torch under the"
        " measured roofs"
    )
    return {"per_gemm": table, "ceiling_below_target": below}


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None (with a message) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("moe benchmark: no matplotlib, no chart", file=sys.stderr)
        return None
    return plt


# How L2 is flushed before each timed call: "dirty" (do_bench's: a 256 MB buffer zeroed, so
# L2 is full of modified lines that must be written back while the call runs) or "clean" (a
# 256 MB buffer read: L2 holds other data, unmodified, as after a kernel that only read).
# A decode step's GEMM follows kernels that wrote little, so "clean" is nearer to it; at
# decode sizes the write-back of the zeroed buffer (up to L2's size) is a large share of the
# time of every implementation. --clean-l2 sets it.
L2_FLUSH = "dirty"
FLUSH_BYTES = 256 << 20


class Timed(NamedTuple):
    """One implementation's time: the median of its calls (ms), and how far apart the medians
    of the first and the second half of the rounds were (|first - second| / ms): the drift
    the run itself saw."""

    ms: float
    spread: float


#: bench_all's timed GPU time per implementation (ms, the calls alone), as do_bench's two
#: passes of 150 ms had; and the bounds on its rounds.
BUDGET_MS = 300.0
MIN_ROUNDS, MAX_ROUNDS = 20, 2000


def rounds_for(estimates_ms: Sequence[float], budget_ms: float = BUDGET_MS) -> int:
    """Rounds of bench_all for implementations taking `estimates_ms` a call: each gets about
    `budget_ms` of timed calls, within [MIN_ROUNDS, MAX_ROUNDS]."""
    per_round = max(sum(estimates_ms), 1e-6)
    wanted = int(budget_ms * len(estimates_ms) / per_round)
    return max(MIN_ROUNDS, min(MAX_ROUNDS, wanted))


def rotation(names: Sequence[str], round_: int) -> list[str]:
    """The order of round `round_`: `names` rotated by it, so over len(names) rounds each
    implementation is timed once in every position."""
    shift = round_ % len(names)
    return [*names[shift:], *names[:shift]]


def _flush() -> Fn:
    """The L2 flush of one timed call, as L2_FLUSH says: zero a FLUSH_BYTES buffer ("dirty",
    as do_bench does) or read one ("clean")."""
    buffer = torch.ones(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    return buffer.max if L2_FLUSH == "clean" else buffer.zero_


def _timed_calls(order: Sequence[tuple[str, Fn]], flush: Fn) -> list[tuple[str, float]]:
    """(name, ms) of one call of each of `order` in turn, L2 flushed before each, timed by
    CUDA events around the call alone."""
    events = []
    for name, fn in order:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        start.record()
        fn()
        end.record()
        events.append((name, start, end))
    torch.cuda.synchronize()
    return [(name, start.elapsed_time(end)) for name, start, end in events]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return float(ordered[len(ordered) // 2])


def bench_all(impls: dict[str, Fn]) -> dict[str, Timed]:
    """Every implementation of `impls` timed in rounds: each round calls each once (L2
    flushed before each call, as L2_FLUSH says), in an order rotated every round
    (`rotation`).

    A GPU at its power limit slows as it heats and recovers when it idles, so a timing's
    place in a run can matter. Timing each implementation in a block of its own (do_bench),
    even once in turn and once in reverse, did not cancel that: the same kernel, run as
    `auto` and forced, measured 11% apart in one run, each block's two passes within 1.3%.
    Interleaved call by call, every implementation sees the same clocks. Timed: the median
    of each one's calls, and the distance between the medians of the first and second half
    of the rounds."""
    flush = _flush()
    names = list(impls)
    for _ in range(3):  # warm-up: allocations, lazy loading, autotuning
        for fn in impls.values():
            fn()
    estimate: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(3):
        for name, ms in _timed_calls(list(impls.items()), flush):
            estimate[name].append(ms)
    rounds = rounds_for([_median(times) for times in estimate.values()])
    calls: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        order = [(name, impls[name]) for name in rotation(names, round_)]
        for name, ms in _timed_calls(order, flush):
            calls[name].append(ms)
    timed = {}
    half = rounds // 2
    for name, times in calls.items():
        ms = _median(times)
        first, second = _median(times[:half]), _median(times[half:])
        timed[name] = Timed(ms, abs(first - second) / ms if ms > 0 else 0.0)
    return timed


def bench(fn: Fn) -> float:
    """Median milliseconds of `fn` alone, timed as bench_all times each implementation."""
    return bench_all({"fn": fn})["fn"].ms


def largest_spread(layers: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Of every timed row of `layers` (a run's entries, each with "label", "gemms" and
    "forward"), the one whose two passes were furthest apart: {"spread", "impl", "where"};
    None without timed rows. Differences smaller than this are within the run's noise."""
    timed = [
        (lay["label"], row)
        for lay in layers
        for part in ("gemms", "forward")
        for row in lay.get(part, ())
        if "pass_spread" in row
    ]
    if not timed:
        return None
    label, worst = max(timed, key=lambda item: item[1]["pass_spread"])
    where = " ".join([label, *(str(worst[key]) for key in ("gemm", "layout") if key in worst)])
    return {"spread": worst["pass_spread"], "impl": worst["impl"], "where": where}


def spread_line(worst: dict[str, Any] | None) -> str:
    """The closing line on the run's noise (largest_spread)."""
    if worst is None:
        return "no timed rows"
    return (
        f"largest spread between the halves of an implementation's calls: {worst['spread']:.1%} "
        f"({worst['impl']}, {worst['where']})"
    )


def active_groups(offsets: torch.Tensor) -> int:
    """Groups with rows, from cumulative int32 offsets."""
    return int((torch.diff(offsets, prepend=offsets.new_zeros(1)) > 0).sum())


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out64, ref64 = out.double(), ref.double()
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30))


def route(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax top-k renormalised: (weights [T, k] fp32, experts [T, k] int64)."""
    probs = torch.softmax(logits.float(), dim=-1)
    top_w, top_e = probs.topk(top_k, dim=-1)
    return top_w / top_w.sum(-1, keepdim=True), top_e


def torch_moe(
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """The expert layer in torch ops around torch._grouped_mm (no host synchronisation)."""
    experts = logits.shape[1]
    inter = w_gate_up.shape[2] // 2
    top_w, top_e = route(logits, top_k)
    flat_e = top_e.flatten()
    order = flat_e.argsort(stable=True)
    counts = torch.zeros(experts, dtype=torch.int32, device=x.device)
    counts.scatter_add_(0, flat_e, torch.ones_like(flat_e, dtype=torch.int32))
    offsets = counts.cumsum(0, dtype=torch.int32)
    token_of = order // top_k
    gate_up = torch._grouped_mm(x[token_of], w_gate_up, offs=offsets, out_dtype=BF16)
    h = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    y = torch._grouped_mm(h, w_down, offs=offsets, out_dtype=BF16)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, token_of, y.float() * top_w.flatten()[order, None])
    return out.to(BF16)


def cublas_loop(x: torch.Tensor, w: torch.Tensor, counts: Sequence[int]) -> Fn:
    """Per-expert torch.mm into one output (host-known split sizes, as a loop would have)."""
    out = torch.empty(x.shape[0], w.shape[2], dtype=BF16, device=x.device)
    bounds = []
    start = 0
    for g, m in enumerate(counts):
        if m:
            bounds.append((g, start, start + m))
        start += m

    def run() -> torch.Tensor:
        for g, a, b in bounds:
            torch.mm(x[a:b], w[g], out=out[a:b])
        return out

    return run


def _weights(experts: int, k: int, n: int, transposed: bool) -> torch.Tensor:
    # Drawn in bf16 and scaled in place: DeepSeek-V3's 15 GB weight would pass through two
    # 30 GB fp32 temporaries otherwise.
    shape = (experts, n, k) if transposed else (experts, k, n)
    w = torch.randn(shape, device="cuda", dtype=BF16).mul_(k**-0.5)
    return w.transpose(-2, -1) if transposed else w


def gemm_rows(
    moe: Any,
    name: str,
    x: torch.Tensor,
    w: torch.Tensor,
    offsets: torch.Tensor,
    counts: Sequence[int],
    layout: str,
    quick: bool,
    configs: Sequence[str],
    roofs: roofline.Roofs,
) -> list[dict[str, Any]]:
    rows_total, k = x.shape
    n = w.shape[2]
    flops = 2.0 * rows_total * k * n
    floor = roofline.gemm_floor_ms(roofs, active_groups(offsets), rows_total, k, n, fp8=False)
    ref = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16)
    impls: dict[str, Fn] = {
        "torch._grouped_mm": lambda: torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16),
    }
    for config in configs:
        impls[f"moe_ops[{config}]"] = lambda c=config: moe.grouped_mm(x, w, offsets, config=c)
    if not quick:
        impls["cublas-loop"] = cublas_loop(x, w, counts)
    errors = {impl: rel(fn(), ref) for impl, fn in impls.items()}
    times = bench_all(impls)
    result = []
    for impl, err in errors.items():
        ms, spread = times[impl]
        result.append(
            {
                "gemm": name,
                "layout": layout,
                "impl": impl,
                "M": rows_total,
                "K": k,
                "N": n,
                "ms": ms,
                "tflops": flops / ms / 1e9,
                "floor_ms": floor,
                "of_roof": floor / ms,
                "rel_err_vs_torch": err,
                "pass_spread": spread,
            }
        )
        print(
            f"  {name:8s} {layout:10s} {impl:22s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s"
            f" {floor / ms:6.1%} of roof  err {err:.1e}",
            flush=True,
        )
    return result


def forward_rows(
    moe: Any,
    layer: Layer,
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    layout: str,
    configs: Sequence[str],
) -> list[dict[str, Any]]:
    """The layer forward, ours (each config) against torch's, on the same weights."""
    k = layer.top_k
    interleaved = moe.interleave_gate_up(w_gate_up)  # once, as at load time
    ref = torch_moe(x, logits, w_gate_up, w_down, k)
    impls: dict[str, Fn] = {
        "torch ops + torch._grouped_mm": lambda: torch_moe(x, logits, w_gate_up, w_down, k),
    }
    for config in configs:
        impls[f"moe_ops.moe_forward[{config}]"] = lambda c=config: moe.moe_forward(
            x, logits, interleaved, w_down, k, gate_up_interleaved=True, config=c
        )
    errors = {impl: rel(fn(), ref) for impl, fn in impls.items()}
    times = bench_all(impls)
    rows = []
    for impl, err in errors.items():
        ms, spread = times[impl]
        tflops = layer.gemm_flops / ms / 1e9
        rows.append(
            {
                "layout": layout,
                "impl": impl,
                "ms": ms,
                "tflops": tflops,
                "rel_err_vs_torch": err,
                "pass_spread": spread,
            }
        )
        print(
            f"  forward  {layout:10s} {impl:32s} {ms:8.3f} ms {tflops:7.1f} TFLOP/s  err {err:.1e}",
            flush=True,
        )
    return rows


def run_layer(
    moe: Any, layer: Layer, quick: bool, roofs: roofline.Roofs, configs: Sequence[str]
) -> dict[str, Any]:
    """Both GEMMs of a layer in both weight layouts and its forward, each of `configs`
    (layer_configs) against torch."""
    torch.manual_seed(0)
    t, h, i, e, k = layer.tokens, layer.hidden, layer.inter, layer.experts, layer.top_k
    print(f"{layer.label}: H {h} I {i} E {e} top-{k} T {t}", flush=True)
    x = torch.randn(t, h, device="cuda").to(BF16)
    logits = torch.randn(t, e, device="cuda")
    _, top_e = route(logits, k)
    counts_t = torch.bincount(top_e.flatten(), minlength=e)
    counts = [int(c) for c in counts_t.tolist()]
    offsets = counts_t.cumsum(0).to(torch.int32)
    order = top_e.flatten().argsort(stable=True)
    x_sorted = x[order // k]
    h_sorted = (torch.randn(t * k, i, device="cuda")).to(BF16)
    gemms: list[dict[str, Any]] = []
    forward: list[dict[str, Any]] = []
    for layout in ("row-major", "transposed"):
        transposed = layout == "transposed"
        w_gate_up = _weights(e, h, 2 * i, transposed)
        w_down = _weights(e, i, h, transposed)
        gemms += gemm_rows(
            moe, "gate_up", x_sorted, w_gate_up, offsets, counts, layout, quick, configs, roofs
        )
        gemms += gemm_rows(
            moe, "down", h_sorted, w_down, offsets, counts, layout, quick, configs, roofs
        )
        forward += forward_rows(moe, layer, x, logits, w_gate_up, w_down, layout, configs)
        torch.cuda.empty_cache()
    return {
        "layer": layer.__dict__,
        "label": layer.label,
        "counts_min": min(counts),
        "counts_max": max(counts),
        "gemms": gemms,
        "forward": forward,
    }


def breakdown(moe: Any, layer: Layer) -> dict[str, float]:
    """Where moe_forward's time goes (row-major weights, auto config): the whole layer, the
    fused gate/up GEMM, the same GEMM with a plain bf16 epilogue, the down GEMM; the rest
    (routing, permutation, combine) is the difference."""
    torch.manual_seed(0)
    t, h, i, e, k = layer.tokens, layer.hidden, layer.inter, layer.experts, layer.top_k
    x = torch.randn(t, h, device="cuda").to(BF16)
    logits = torch.randn(t, e, device="cuda")
    _, top_e = route(logits, k)
    offsets = torch.bincount(top_e.flatten(), minlength=e).cumsum(0).to(torch.int32)
    x_sorted = x[top_e.flatten().argsort(stable=True) // k]
    w_gate_up = moe.interleave_gate_up(_weights(e, h, 2 * i, False))
    w_down = _weights(e, i, h, False)
    h_sorted = moe.grouped_mm_silu_mul(x_sorted, w_gate_up, offsets)
    ms = {
        "moe_forward": bench(
            lambda: moe.moe_forward(x, logits, w_gate_up, w_down, k, gate_up_interleaved=True)
        ),
        "gate_up_silu_mul": bench(lambda: moe.grouped_mm_silu_mul(x_sorted, w_gate_up, offsets)),
        "gate_up_plain": bench(lambda: moe.grouped_mm(x_sorted, w_gate_up, offsets)),
        "down": bench(lambda: moe.grouped_mm(h_sorted, w_down, offsets)),
    }
    ms["rest"] = ms["moe_forward"] - ms["gate_up_silu_mul"] - ms["down"]
    print(f"{layer.label}: " + ", ".join(f"{name} {v:.3f} ms" for name, v in ms.items()))
    return ms


def fp8_gemm_rows(
    moe: Any,
    name: str,
    x: torch.Tensor,
    w: torch.Tensor,
    offsets: torch.Tensor,
    roofs: roofline.Roofs,
    forced: Sequence[str],
) -> list[dict[str, Any]]:
    """One GEMM in e4m3: torch._scaled_grouped_mm (row-wise scales) against grouped_mm_fp8 in
    both scale layouts (row-wise also with each tile config forced); the bf16 grouped_mm of
    the unquantised operands is the reference (the error column is FP8's quantisation error)
    and a row of its own."""
    rows_total, k = x.shape
    n = w.shape[2]
    flops = 2.0 * rows_total * k * n
    floor = roofline.gemm_floor_ms(roofs, active_groups(offsets), rows_total, k, n, fp8=True)
    ref = moe.grouped_mm(x, w, offsets)
    impls: dict[str, Fn] = {"moe_ops.grouped_mm (bf16)": lambda: moe.grouped_mm(x, w, offsets)}
    xq_r, xs_r = moe.quantize_fp8_activations(x, "rowwise")
    wq_r, ws_r = moe.quantize_fp8_weights(w, "rowwise")
    impls["torch._scaled_grouped_mm rowwise"] = lambda: torch._scaled_grouped_mm(
        xq_r, wq_r, xs_r, ws_r, offs=offsets, out_dtype=BF16
    )
    impls["moe_ops rowwise"] = lambda: moe.grouped_mm_fp8(xq_r, wq_r, xs_r, ws_r, offsets)
    # Each tile config forced ("moe_ops rowwise" is "auto", the one the summary counts).
    for config in forced:
        impls[f"moe_ops rowwise[{config}]"] = lambda c=config: moe.grouped_mm_fp8(
            xq_r, wq_r, xs_r, ws_r, offsets, config=c
        )
    if moe.fp8_unsupported_shape_reason(x.shape, w.shape, "blockwise") is None:
        xq_b, xs_b = moe.quantize_fp8_activations(x, "blockwise")
        wq_b, ws_b = moe.quantize_fp8_weights(w, "blockwise")
        impls["moe_ops blockwise"] = lambda: moe.grouped_mm_fp8(xq_b, wq_b, xs_b, ws_b, offsets)
    result = []
    errors: dict[str, float] = {}
    for impl, fn in impls.items():
        try:
            errors[impl] = rel(fn(), ref)
        except (RuntimeError, NotImplementedError) as exc:  # torch's kernel may refuse a shape
            print(f"  {name:8s} {impl:34s} refused: {str(exc).splitlines()[0]}", flush=True)
            result.append({"gemm": name, "impl": impl, "refused": str(exc).splitlines()[0]})
    times = bench_all({impl: impls[impl] for impl in errors})
    for impl, err in errors.items():
        ms, spread = times[impl]
        tflops = flops / ms / 1e9
        result.append(
            {
                "gemm": name,
                "impl": impl,
                "M": rows_total,
                "K": k,
                "N": n,
                "ms": ms,
                "tflops": tflops,
                "of_fp8_peak": tflops / FP8_PEAK_TFLOPS,
                "floor_ms": floor,
                "of_roof": floor / ms,
                "rel_err_vs_bf16": err,
                "pass_spread": spread,
            }
        )
        print(
            f"  {name:8s} {impl:34s} {ms:8.3f} ms {tflops:7.1f} TFLOP/s"
            f" ({tflops / FP8_PEAK_TFLOPS:5.1%} of FP8 peak)  err vs bf16 {err:.1e}",
            flush=True,
        )
    return result


def run_fp8_layer(
    moe: Any, layer: Layer, roofs: roofline.Roofs, forced: Sequence[str] = FP8_FORCED
) -> dict[str, Any]:
    """Both GEMMs of a layer in e4m3 (row-wise also with each of `forced` tile configs), and
    moe_forward_fp8 against moe_forward (bf16)."""
    torch.manual_seed(0)
    t, h, i, e, k = layer.tokens, layer.hidden, layer.inter, layer.experts, layer.top_k
    print(f"{layer.label} (fp8): H {h} I {i} E {e} top-{k} T {t}", flush=True)
    x = torch.randn(t, h, device="cuda").to(BF16)
    logits = torch.randn(t, e, device="cuda")
    _, top_e = route(logits, k)
    offsets = torch.bincount(top_e.flatten(), minlength=e).cumsum(0).to(torch.int32)
    x_sorted = x[top_e.flatten().argsort(stable=True) // k]
    h_sorted = torch.randn(t * k, i, device="cuda").to(BF16)
    w_gate_up = _weights(e, h, 2 * i, False)
    w_down = _weights(e, i, h, False)
    gemms = fp8_gemm_rows(moe, "gate_up", x_sorted, w_gate_up, offsets, roofs, forced)
    gemms += fp8_gemm_rows(moe, "down", h_sorted, w_down, offsets, roofs, forced)
    interleaved = moe.interleave_gate_up(w_gate_up)
    ref = moe.moe_forward(x, logits, interleaved, w_down, k, gate_up_interleaved=True)
    forward = []
    impls: dict[str, Fn] = {
        "moe_forward (bf16)": lambda: moe.moe_forward(
            x, logits, interleaved, w_down, k, gate_up_interleaved=True
        )
    }
    for scales in ("rowwise", "blockwise"):
        if moe.fp8_unsupported_shape_reason(x_sorted.shape, w_gate_up.shape, scales) is None:
            gu, gu_s = moe.quantize_fp8_weights(w_gate_up, scales)
            dn, dn_s = moe.quantize_fp8_weights(w_down, scales)
            impls[f"moe_forward_fp8 {scales}"] = lambda gu=gu, gu_s=gu_s, dn=dn, dn_s=dn_s: (
                moe.moe_forward_fp8(x, logits, gu, gu_s, dn, dn_s, k)
            )
    errors = {impl: rel(fn(), ref) for impl, fn in impls.items()}
    times = bench_all(impls)
    for impl, err in errors.items():
        ms, spread = times[impl]
        tflops = layer.gemm_flops / ms / 1e9
        forward.append(
            {
                "impl": impl,
                "ms": ms,
                "tflops": tflops,
                "rel_err_vs_bf16": err,
                "pass_spread": spread,
            }
        )
        print(f"  forward  {impl:34s} {ms:8.3f} ms {tflops:7.1f} TFLOP/s  err {err:.1e}")
    torch.cuda.empty_cache()
    return {"layer": layer.__dict__, "label": layer.label, "gemms": gemms, "forward": forward}


#: The FP8 row-wise implementation the summary counts ("auto"); a forced tile config's is
#: "moe_ops rowwise[<config>]".
FP8_ROWWISE_AUTO = "moe_ops rowwise"
FP8_FORCED_PREFIX = "moe_ops rowwise["


def fp8_summary(layers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per GEMM: torch row-wise ms / ours row-wise ms (auto); geomean and min over the GEMMs;
    the same for each tile config forced (those the rows have) and for the best of them per
    GEMM (what a perfect rule would give)."""
    per_config: dict[str, dict[str, float]] = {"auto": {}}
    for lay in layers:
        for gemm in ("gate_up", "down"):
            ms = {r["impl"]: r.get("ms") for r in lay["gemms"] if r["gemm"] == gemm}
            theirs = ms.get("torch._scaled_grouped_mm rowwise")
            if not theirs:
                continue
            key = f"{lay['label']}|{gemm}"
            forced: list[float] = []
            for impl, time in ms.items():
                if not time:
                    continue
                if impl == FP8_ROWWISE_AUTO:
                    per_config["auto"][key] = theirs / time
                elif impl.startswith(FP8_FORCED_PREFIX) and impl.endswith("]"):
                    name = impl[len(FP8_FORCED_PREFIX) : -1]
                    per_config.setdefault(name, {})[key] = theirs / time
                    forced.append(theirs / time)
            if forced:
                per_config.setdefault("best", {})[key] = max(forced)
    ratios = per_config["auto"]
    out: dict[str, Any] = {"rowwise_vs_torch_per_gemm": ratios}
    if ratios:
        out["geomean"] = geomean(list(ratios.values()))
        out["min"] = min(ratios.values())
    out["configs"] = {
        name: {"geomean": geomean(list(v.values())), "min": min(v.values()), "per_gemm": v}
        for name, v in per_config.items()
        if v
    }
    return out


def fp8_chart(result: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    impls = (
        "torch._scaled_grouped_mm rowwise",
        "moe_ops rowwise",
        "moe_ops blockwise",
        "moe_ops.grouped_mm (bf16)",
    )
    labels = [f"{lay['label']} {g}" for lay in result["fp8"] for g in ("gate_up", "down")]
    fig, ax = plt.subplots(figsize=(14, 4.5))
    width = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        values = [
            next(
                (r.get("tflops", 0.0) for r in lay["gemms"] if (r["gemm"], r["impl"]) == (g, impl)),
                0.0,
            )
            for lay in result["fp8"]
            for g in ("gate_up", "down")
        ]
        ax.bar([p + j * width for p in range(len(labels))], values, width, label=impl)
    ax.axhline(FP8_PEAK_TFLOPS, color="grey", linestyle="--", linewidth=0.8, label="FP8 peak")
    ax.set_title("FP8 grouped GEMM, TFLOP/s")
    ax.set_xticks(
        [p + 0.4 for p in range(len(labels))], labels, fontsize=7, rotation=45, ha="right"
    )
    ax.legend(fontsize=8)
    fig.suptitle(f"{result['environment']['gpu']}, torch {result['environment']['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def summarise(layer: dict[str, Any]) -> dict[str, Any]:
    """Both GEMMs together per implementation and layout; the speedups the targets name."""
    out: dict[str, Any] = {}
    by: dict[tuple[str, str], float] = {}
    for row in layer["gemms"]:
        key = (row["layout"], row["impl"])
        by[key] = by.get(key, 0.0) + row["ms"]
    flops = Layer(**layer["layer"]).gemm_flops
    both = {
        f"{lay}|{impl}": {"ms": ms, "tflops": flops / ms / 1e9} for (lay, impl), ms in by.items()
    }
    out["grouped_mm_both_gemms"] = both

    def best(prefix: str, table: dict[str, dict[str, float]]) -> tuple[str, float]:
        cands = {k: v["ms"] for k, v in table.items() if k.split("|")[1].startswith(prefix)}
        name = min(cands, key=cands.__getitem__)
        return name, cands[name]

    ours_name, ours = best("moe_ops[auto]", both)
    torch_name, theirs = best("torch._grouped_mm", both)
    out["grouped_mm_speedup"] = {"ours": ours_name, "torch": torch_name, "x": theirs / ours}
    per_gemm: dict[str, float] = {}
    for gemm in ("gate_up", "down"):
        for lay in ("row-major", "transposed"):
            rows = {
                r["impl"]: r["ms"]
                for r in layer["gemms"]
                if (r["gemm"], r["layout"]) == (gemm, lay)
            }
            if "moe_ops[auto]" in rows and "torch._grouped_mm" in rows:
                per_gemm[f"{gemm}|{lay}"] = rows["torch._grouped_mm"] / rows["moe_ops[auto]"]
    out["grouped_mm_speedup_per_gemm"] = per_gemm
    fwd = {f"{r['layout']}|{r['impl']}": r for r in layer["forward"]}
    ours_name, ours = best("moe_ops.moe_forward[auto]", fwd)
    torch_name, theirs = best("torch ops", fwd)
    out["forward_speedup"] = {"ours": ours_name, "torch": torch_name, "x": theirs / ours}
    return out


def environment() -> dict[str, Any]:
    return {
        "gpu": torch.cuda.get_device_name(),
        "nvidia_smi": query("name,driver_version") or "",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "l2_flush": L2_FLUSH,
    }


def chart(result: dict[str, Any], path: Path) -> bool:
    plt = _pyplot()
    if plt is None:
        return False
    layers = result["layers"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [lay["label"] for lay in layers]
    series = {
        "moe_ops grouped_mm": lambda s: s["grouped_mm_both_gemms"][s["grouped_mm_speedup"]["ours"]],
        "torch._grouped_mm": lambda s: s["grouped_mm_both_gemms"][s["grouped_mm_speedup"]["torch"]],
        "cublas loop": lambda s: s["grouped_mm_both_gemms"].get("row-major|cublas-loop"),
    }
    width = 0.8 / len(series)
    for j, (name, pick) in enumerate(series.items()):
        values = [(pick(lay["summary"]) or {"tflops": 0})["tflops"] for lay in layers]
        axes[0].bar([p + j * width for p in range(len(layers))], values, width, label=name)
    axes[0].set_title("Grouped GEMM (both layer GEMMs), TFLOP/s")
    axes[0].set_xticks([p + width for p in range(len(layers))], labels, fontsize=8)
    axes[0].legend(fontsize=8)
    for j, name in enumerate(("moe_ops.moe_forward", "torch ops + torch._grouped_mm")):
        values = []
        for lay in layers:
            key = lay["summary"]["forward_speedup"]["ours" if j == 0 else "torch"]
            row = next(r for r in lay["forward"] if f"{r['layout']}|{r['impl']}" == key)
            values.append(row["tflops"])
        axes[1].bar([p + j * 0.4 for p in range(len(layers))], values, 0.4, label=name)
    axes[1].set_title("MoE layer forward, GEMM TFLOP/s")
    axes[1].set_xticks([p + 0.2 for p in range(len(layers))], labels, fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"{result['environment']['gpu']}, torch {result['environment']['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument("--png", type=Path, help="bar chart (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="two small layers (a smoke run)")
    parser.add_argument(
        "--breakdown", action="store_true", help="only where moe_forward's time goes, per layer"
    )
    parser.add_argument(
        "--decode", action="store_true", help="the decode regime: 1, 8 and 64 tokens a layer"
    )
    parser.add_argument(
        "--fp8", action="store_true", help="the FP8 grouped GEMM and forward (1k and 4k tokens)"
    )
    parser.add_argument(
        "--clean-l2",
        action="store_true",
        help="flush L2 by reading a 256 MB buffer, not by zeroing one (see L2_FLUSH)",
    )
    parser.add_argument(
        "--models", help="only these models' layers (comma-separated, e.g. mixtral,llama-4)"
    )
    parser.add_argument("--tokens", help="only the layers of these token counts (e.g. 4096)")
    parser.add_argument(
        "--configs",
        help="the tile configs forced besides auto (comma-separated, any of the installed "
        "moe_ops' CONFIGS, or FP8_CONFIGS with --fp8); default: "
        f"{','.join(FORCED)} (gemv at decode sizes only), {','.join(FP8_FORCED)} with --fp8",
    )
    args = parser.parse_args(argv)
    regime = LAYERS
    if args.fp8:
        regime = FP8_LAYERS
    elif args.quick:
        regime = QUICK_LAYERS
    elif args.decode:
        regime = DECODE_LAYERS
    try:
        layers = select_layers(regime, args.models, args.tokens)
    except SelectionError as exc:
        print(f"benchmarks/moe.py: {exc}", file=sys.stderr)
        return 2
    global L2_FLUSH
    L2_FLUSH = "clean" if args.clean_l2 else "dirty"
    import moe_ops

    reason = moe_ops.unavailable_reason("moe")
    if reason is not None:
        print(f"moe benchmark: moe_ops.moe is unavailable: {reason}", file=sys.stderr)
        return 1
    moe = moe_ops.load("moe")
    try:
        forced = select_configs(
            args.configs,
            FP8_FORCED if args.fp8 else FORCED,
            tuple(moe.FP8_CONFIGS if args.fp8 else moe.CONFIGS),
        )
    except SelectionError as exc:
        print(f"benchmarks/moe.py: {exc}", file=sys.stderr)
        return 2
    if args.breakdown:
        parts = {layer.label: breakdown(moe, layer) for layer in layers}
        if args.out:
            args.out.write_text(json.dumps({"environment": environment(), "breakdown": parts}))
        return 0
    roofs = roofline.measure()
    print(
        f"roofs: stream {roofs.stream_bytes_per_s / 1e12:.2f} TB/s (read "
        f"{roofs.read_bytes_per_s / 1e12:.2f}, copy {roofs.copy_bytes_per_s / 1e12:.2f}), "
        f"dense bf16 {roofs.dense_bf16_flops / 1e12:.0f} TFLOP/s, "
        f"dense e4m3 {roofs.dense_fp8_flops / 1e12:.0f} TFLOP/s",
        flush=True,
    )
    if args.fp8:
        fp8: dict[str, Any] = {
            "environment": environment(),
            "roofs": roofs.as_dict(),
            "fp8": [run_fp8_layer(moe, lay, roofs, forced) for lay in layers],
        }
        fp8["summary"] = fp8_summary(fp8["fp8"])
        fp8["largest_pass_spread"] = largest_spread(fp8["fp8"])
        fp8["clocks"] = clocks()  # as the timing ends, at the clocks under load
        fp8["roofline"] = roof_table(
            fp8["fp8"], ("gemm",), "torch._scaled_grouped_mm rowwise", "moe_ops rowwise"
        )
        print(f"\n{fp8['environment']}; {clock_line(fp8['clocks'])}")
        print(spread_line(fp8["largest_pass_spread"]))
        if "geomean" in fp8["summary"]:
            print(
                f"grouped_mm_fp8 rowwise vs torch._scaled_grouped_mm over "
                f"{len(fp8['summary']['rowwise_vs_torch_per_gemm'])} GEMMs: geomean "
                f"{fp8['summary']['geomean']:.2f}x, min {fp8['summary']['min']:.2f}x"
            )
            for name, entry in fp8["summary"]["configs"].items():
                print(f"  {name:12s} geomean {entry['geomean']:.2f}x, min {entry['min']:.2f}x")
        if args.out:
            args.out.write_text(json.dumps(fp8, indent=1))
        if args.png:
            fp8_chart(fp8, args.png)
        return 0
    result: dict[str, Any] = {"environment": environment(), "roofs": roofs.as_dict(), "layers": []}
    for layer in layers:
        # The cuBLAS loop launches one GEMM per expert: at decode sizes it measures launches.
        configs = layer_configs(forced, layer.tokens)
        entry = run_layer(moe, layer, args.quick or args.decode, roofs, configs)
        entry["summary"] = summarise(entry)
        result["layers"].append(entry)
        torch.cuda.empty_cache()
    result["clocks"] = clocks()  # as the timing ends, at the clocks under load
    result["largest_pass_spread"] = largest_spread(result["layers"])
    print(f"\n{result['environment']}; {clock_line(result['clocks'])}")
    print(spread_line(result["largest_pass_spread"]))
    print(f"{'layer':22s} {'grouped_mm x torch':>20s} {'forward x torch':>16s}")
    for lay in result["layers"]:
        gemm_x = lay["summary"]["grouped_mm_speedup"]["x"]
        forward_x = lay["summary"]["forward_speedup"]["x"]
        print(f"{lay['label']:22s} {gemm_x:20.2f} {forward_x:16.2f}")
    per_gemm = [
        x
        for lay in result["layers"]
        for x in lay["summary"]["grouped_mm_speedup_per_gemm"].values()
    ]
    result["roofline"] = roof_table(
        result["layers"], ("gemm", "layout"), "torch._grouped_mm", "moe_ops[auto]"
    )
    if per_gemm:
        result["grouped_mm_per_gemm_geomean"] = geomean(per_gemm)
        result["grouped_mm_per_gemm_min"] = min(per_gemm)
        print(
            f"grouped_mm vs torch._grouped_mm over {len(per_gemm)} GEMMs (auto config): "
            f"geomean {result['grouped_mm_per_gemm_geomean']:.2f}x, "
            f"min {result['grouped_mm_per_gemm_min']:.2f}x"
        )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    if args.png:
        chart(result, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
