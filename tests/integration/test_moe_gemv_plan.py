"""moe_ops' decode kernel's host-side choices (gemv.cuh: gemv_plan, gemv_plan_split,
gemv_max_splits, gemv_weight_load), compiled into a host program with the system nvcc (no
kernel is instantiated, no GPU needed) and asked about the decode GEMMs of benchmarks/moe.py
and a spread of other shapes. Checks what docs/moe_ops.md says of the split and of the
weight loads."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from benchmark_modules import import_benchmark
from toolkits import host_program

CSRC = Path(__file__).resolve().parents[2] / "examples/moe_ops/moe_ops/moe/csrc"
STREAMING_MAX_BYTES = 256 << 20  # docs/moe_ops.md: "at most 256 MiB"

# First line: the kernel's constants. Then, for each "k_major active n k slots" line: the
# plan (splits slice block_cols col_blocks grid), the largest split, the load (0 plain, 1
# streaming), and the fill of every split from 1 to the largest.
DRIVER = r"""
#include <cstdio>
#include "gemv.cuh"
using namespace moe_ops::gemm;
int main() {
  std::printf("%d %d %d %d %d %d\n", kGemvWarps, kGemvRowGroups, kGemvRowCols, kGemvColStep,
              kGemvColUnroll, kGemvRowUnroll);
  long long active, n, k;
  int k_major, slots;
  while (std::scanf("%d %lld %lld %lld %d", &k_major, &active, &n, &k, &slots) == 5) {
    const GemvPlan p = gemv_plan(k_major != 0, active, n, k, slots);
    const int most = gemv_max_splits(k_major != 0, k);
    std::printf("%d %d %d %d %d %d %d", p.k_splits, p.k_slice, p.block_cols, p.col_blocks,
                p.grid, most, static_cast<int>(gemv_weight_load(active, n, k)));
    for (int s = 1; s <= most; s *= 2) {
      double fill = 0.0;
      gemv_plan_split(k_major != 0, active, n, k, slots, s, &fill);
      std::printf(" %.12f", fill);
    }
    std::printf("\n");
  }
  return 0;
}
"""


@dataclass(frozen=True)
class Answer:
    splits: int
    slice: int
    block_cols: int
    col_blocks: int
    grid: int
    most: int
    streaming: bool
    fills: tuple[float, ...]  # of splits 1, 2, 4, ..., most


@dataclass(frozen=True)
class Kernel:
    warps: int
    row_groups: int
    row_cols: int
    col_step: int
    col_unroll: int
    row_unroll: int


Query = tuple[bool, int, int, int, int]  # k_major, active, n, k, slots
Ask = Callable[[list[Query]], list[Answer]]


@pytest.fixture(scope="module")
def gemv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Ask]]:
    work = tmp_path_factory.mktemp("gemv_plan")
    (work / "driver.cu").write_text(DRIVER)
    binary = host_program(
        [work / "driver.cu"],
        CSRC,
        work / "plan",
        "needs the system CUDA toolkit (nvcc on PATH) for gemv.cuh's CUDA headers",
    )

    def run(lines: str) -> list[str]:
        out = subprocess.run(
            [str(binary)], input=lines, capture_output=True, text=True, check=True, timeout=60
        ).stdout
        return out.splitlines()

    kernel = Kernel(*(int(v) for v in run("")[0].split()))

    def ask(queries: list[Query]) -> list[Answer]:
        lines = "".join(f"{int(km)} {a} {n} {k} {s}\n" for km, a, n, k, s in queries)
        answers = []
        for line in run(lines)[1:]:
            words = line.split()
            splits, slice_, block_cols, col_blocks, grid, most, load = (int(w) for w in words[:7])
            fills = tuple(float(w) for w in words[7:])
            answers.append(
                Answer(splits, slice_, block_cols, col_blocks, grid, most, load == 1, fills)
            )
        return answers

    yield kernel, ask


def decode_queries() -> list[Query]:
    """Every decode GEMM of benchmarks/moe.py, both layouts, as the op plans it (active =
    min(experts, rows)) on 132 SMs of two resident CTAs (row-major) or three (K-major)."""
    moe = import_benchmark("moe")
    queries = []
    for layer in moe.DECODE_LAYERS:
        rows = layer.tokens * layer.top_k
        active = min(layer.experts, rows)
        for n, k in ((2 * layer.inter, layer.hidden), (layer.hidden, layer.inter)):
            queries.append((False, active, n, k, 264))
            queries.append((True, active, n, k, 396))
    return queries


def spread_queries() -> list[Query]:
    rng = random.Random(31)
    return [
        (
            rng.random() < 0.5,
            rng.randint(1, 1024),
            8 * rng.randint(1, 4096),
            8 * rng.randint(1, 4096),
            rng.choice((132, 264, 396, 528)),
        )
        for _ in range(400)
    ]


def test_the_plan_covers_the_gemm_and_fills_best(gemv: tuple[Kernel, Ask]) -> None:
    kernel, ask = gemv
    queries = decode_queries() + spread_queries()
    for (k_major, active, n, k, slots), a in zip(queries, ask(queries), strict=True):
        where = f"k_major={k_major} active={active} n={n} k={k} slots={slots}: {a}"
        units = kernel.warps if k_major else kernel.row_groups
        unit_cols = 2 if k_major else kernel.row_cols
        step = kernel.col_step if k_major else kernel.row_unroll
        min_slice = kernel.col_step * kernel.col_unroll if k_major else 2 * kernel.row_unroll
        # The largest split: a power of two dividing the CTA's groups, each slice at least
        # one unrolled step (the split of 1 always allowed).
        assert a.most & (a.most - 1) == 0 and 1 <= a.most <= units, where
        assert a.most == 1 or k // a.most >= min_slice, where
        assert a.most == units or k // (2 * a.most) < min_slice, where
        # The slices cover K, each the smallest multiple of the step that does.
        assert a.splits in {1 << i for i in range(a.most.bit_length())}, where
        assert a.slice % step == 0 and a.slice * a.splits >= k, where
        assert (a.slice - step) * a.splits < k, where
        # The column blocks cover N; the grid is every task, at most the resident CTAs.
        assert a.block_cols == units // a.splits * unit_cols, where
        assert a.col_blocks == -(-n // a.block_cols), where
        assert a.grid == max(1, min(active * a.col_blocks, slots)), where
        # The fill the plan takes is the best of every allowed split, the smallest on a tie.
        chosen = a.fills[a.splits.bit_length() - 1]
        assert chosen >= max(a.fills) - 1e-9, where
        assert all(f < chosen for f in a.fills[: a.splits.bit_length() - 1]), where


def test_weights_up_to_256_mib_stream(gemv: tuple[Kernel, Ask]) -> None:
    _, ask = gemv
    # One expert of 16384 x 8192 bf16 is 256 MiB exactly; 8 more columns of K is over.
    at, over = ask([(False, 1, 16384, 8192, 264), (True, 1, 16384, 8200, 396)])
    assert at.streaming and not over.streaming
    # The decode GEMMs: streaming exactly where min(experts, rows) x N x K bf16 is at most
    # 256 MiB (Qwen3-30B's one-token gate/up streams, DeepSeek-V3's does not).
    queries = decode_queries()
    answers = ask(queries)
    for (k_major, active, n, k, _), a in zip(queries, answers, strict=True):
        assert a.streaming == (active * n * k * 2 <= STREAMING_MAX_BYTES), (k_major, active, n, k)
    streams = {(q[1], q[2], q[3]) for q, a in zip(queries, answers, strict=True) if a.streaming}
    assert (8, 1536, 2048) in streams and (8, 4096, 7168) not in streams
