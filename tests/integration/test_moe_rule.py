"""moe_ops' `auto` rule (gemm_rule.cpp, plain host C++) compiled alone with the system nvcc and
asked for its pick on every GEMM of benchmarks/moe.py: decode, prefill and the FP8 sizes, both
weight layouts, on 132 SMs (H100 SXM, H200). Checks what docs/moe_ops.md says of the rule."""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from benchmark_modules import import_benchmark
from toolkits import host_program

CSRC = Path(__file__).resolve().parents[2] / "examples/moe_ops/moe_ops/moe/csrc"
SMS = 132


def _config_names() -> dict[int, str]:
    """moe.h's GemmConfig values by the names moe_ops.moe.CONFIGS gives them, read from the
    package's source (importing it needs the built library)."""
    tree = ast.parse((CSRC.parent / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CONFIGS" for t in node.targets
        ):
            return {value: name for name, value in ast.literal_eval(node.value).items()}
    raise AssertionError("moe_ops/moe/__init__.py has no CONFIGS")


CONFIGS = _config_names()

# Reads "m_total groups n k k_major config sm_count" lines, prints the config each resolves to.
DRIVER = r"""
#include <cstdio>
#include "moe.h"
int main() {
  long long m, g, n, k;
  int k_major, config, sms;
  while (std::scanf("%lld %lld %lld %lld %d %d %d", &m, &g, &n, &k, &k_major, &config, &sms) ==
         7) {
    moe_ops::GroupedGemmArgs args{};
    args.m_total = m;
    args.groups = g;
    args.n = n;
    args.k = k;
    args.b_k_major = k_major != 0;
    args.config = config;
    std::printf("%d\n", static_cast<int>(moe_ops::gemm_config_for(args, sms)));
  }
  return 0;
}
"""

Query = tuple[int, int, int, int, bool, int]  # m_total, groups, n, k, k_major, config
Rule = Callable[[list[Query]], list[str]]


@pytest.fixture(scope="module")
def rule(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rule]:
    work = tmp_path_factory.mktemp("moe_rule")
    (work / "driver.cpp").write_text(DRIVER)
    binary = host_program(
        [CSRC / "gemm_rule.cpp", work / "driver.cpp"],
        CSRC,
        work / "rule",
        "needs the system CUDA toolkit (nvcc on PATH) for moe.h's CUDA headers",
    )

    def picks(queries: list[Query]) -> list[str]:
        lines = "".join(
            f"{m} {g} {n} {k} {int(k_major)} {c} {SMS}\n" for m, g, n, k, k_major, c in queries
        )
        out = subprocess.run(
            [str(binary)], input=lines, capture_output=True, text=True, check=True, timeout=60
        ).stdout.split()
        return [CONFIGS[int(v)] for v in out]

    yield picks


def gemms(layers: tuple[Any, ...]) -> Iterator[tuple[str, int, int, int, int, bool]]:
    """(label, m_total, groups, n, k, k_major) of each layer's two GEMMs in both layouts."""
    for layer in layers:
        rows = layer.tokens * layer.top_k
        for gemm, n, k in (
            ("gate_up", 2 * layer.inter, layer.hidden),
            ("down", layer.hidden, layer.inter),
        ):
            for k_major in (False, True):
                label = f"{layer.label} {gemm} {'K-major' if k_major else 'row-major'}"
                yield label, rows, layer.experts, n, k, k_major


def auto_picks(rule: Rule, layers: tuple[Any, ...]) -> dict[str, str]:
    shapes = list(gemms(layers))
    picked = rule([(m, g, n, k, k_major, 0) for _, m, g, n, k, k_major in shapes])
    return {label: pick for (label, *_), pick in zip(shapes, picked, strict=True)}


def test_decode_picks_follow_the_documented_rule(rule: Rule) -> None:
    moe = import_benchmark("moe")
    picks = auto_picks(rule, moe.DECODE_LAYERS)
    assert len(picks) == 60
    # Every one-token GEMM of the five models: the weight-streaming kernel.
    one_token = {label: p for label, p in picks.items() if " T=1 " in label}
    assert len(one_token) == 20 and set(one_token.values()) == {"gemv"}, one_token
    # At 64 tokens every model has more rows than experts: never gemv.
    assert all(p != "gemv" for label, p in picks.items() if " T=64 " in label)
    # At 8 tokens, gemv up to 384 cooperative tiles, the tile beyond (both layouts).
    for layout in ("row-major", "K-major"):
        assert picks[f"llama-4 T=8 down {layout}"] == "gemv"  # 160 tiles
        assert picks[f"deepseek-v3 T=8 down {layout}"] == "cooperative"  # 1792 tiles
        assert picks[f"gpt-oss-120b T=8 gate_up {layout}"] == "cooperative"  # 736 tiles
        assert picks[f"llama-4 T=8 gate_up {layout}"] == "cooperative"  # 512 tiles
    # Nor the 2x1 cluster (a few rows an expert: its second row tile would be empty).
    assert "cooperative_2x1" not in picks.values()


def test_prefill_and_fp8_sizes_take_a_cooperative_tile(rule: Rule) -> None:
    moe = import_benchmark("moe")
    picks = auto_picks(rule, moe.LAYERS + moe.FP8_LAYERS)
    # The 2x1 cluster where an expert has 64-192 rows on average over K >= 4096: of these,
    # DeepSeek-V3's gate/up at 4k tokens (128 rows, K 7168); its down GEMM (K 2048) and
    # gpt-oss-120b's (128 rows, K 2880) keep the 1x2 cluster, as do the larger experts.
    two_by_one = {label for label, p in picks.items() if p == "cooperative_2x1"}
    assert two_by_one == {
        "deepseek-v3 T=4k gate_up row-major",
        "deepseek-v3 T=4k gate_up K-major",
    }, picks
    assert {p for label, p in picks.items() if label not in two_by_one} == {"cooperative"}


def test_the_bounds_of_the_streaming_kernel(rule: Rule) -> None:
    # One row for each of 128 experts: 384 tiles at N 768 is gemv, 388 at N 776 is not. One row
    # more than the experts is not gemv (128 tiles, not under half the SMs: cooperative). Up
    # to 4 rows an expert over 32 tiles is small (3 and 8 rows over 2 experts); 9 is not.
    queries: list[Query] = [
        (128, 128, 768, 2048, False, 0),
        (128, 128, 776, 2048, False, 0),
        (129, 128, 256, 2048, True, 0),
        (3, 2, 4096, 2048, False, 0),
        (8, 2, 4096, 2048, True, 0),
        (9, 2, 4096, 2048, True, 0),
    ]
    assert rule(queries) == ["gemv", "cooperative", "cooperative", "small", "small", "cooperative"]


def test_the_bounds_of_the_2x1_cluster(rule: Rule) -> None:
    # 256 experts: over 64 rows an expert on average (16384 rows) and at most 192 (49152),
    # with K at least 4096; either layout.
    queries: list[Query] = [
        (16384, 256, 4096, 7168, False, 0),
        (16385, 256, 4096, 7168, True, 0),
        (49152, 256, 4096, 4096, False, 0),
        (49153, 256, 4096, 7168, False, 0),
        (32768, 256, 4096, 4088, True, 0),
    ]
    assert rule(queries) == [
        "cooperative",
        "cooperative_2x1",
        "cooperative_2x1",
        "cooperative",
        "cooperative",
    ]


def test_a_forced_config_is_what_runs(rule: Rule) -> None:
    shapes = [(1, 8, 4096, 14336, False), (4096, 8, 14336, 4096, True), (64, 256, 7168, 2048, True)]
    for config, name in CONFIGS.items():
        if name == "auto":
            continue
        picked = rule([(m, g, n, k, k_major, config) for m, g, n, k, k_major in shapes])
        assert picked == [name] * len(shapes)
