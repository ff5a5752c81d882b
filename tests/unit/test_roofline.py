"""benchmarks/roofline.py's arithmetic: a grouped GEMM's least bytes and its floor (no GPU)."""

from __future__ import annotations

from types import ModuleType

import pytest
from benchmark_modules import import_benchmark

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def roofline() -> ModuleType:
    return import_benchmark("roofline")


def test_bytes_count_active_weights_input_and_bf16_output_once(roofline: ModuleType) -> None:
    # 3 active experts of [K=4, N=8] weights, 5 input rows of K in 2-byte elements, and the
    # [5, 8] output in bf16 whatever the input's element size.
    assert roofline.gemm_bytes(3, 5, 4, 8, 2) == (3 * 4 * 8 + 5 * 4) * 2 + 5 * 8 * 2
    assert roofline.gemm_bytes(3, 5, 4, 8, 1) == (3 * 4 * 8 + 5 * 4) + 5 * 8 * 2


def test_floor_is_the_slower_of_memory_and_compute(roofline: ModuleType) -> None:
    roofs = roofline.Roofs(
        read_bytes_per_s=2e12, copy_bytes_per_s=3e12, dense_bf16_flops=5e14, dense_fp8_flops=1e15
    )
    assert roofs.stream_bytes_per_s == 3e12  # the faster of the two streams
    # Memory-bound: 3e9 bytes at 3e12 B/s is 1 ms; 1e9 FLOPs is far less.
    assert roofline.floor_ms(3_000_000_000, 1e9, roofs, fp8=False) == pytest.approx(1.0)
    # Compute-bound: 1e12 FLOPs at 5e14 (bf16) is 2 ms, at 1e15 (e4m3) 1 ms.
    assert roofline.floor_ms(1000, 1e12, roofs, fp8=False) == pytest.approx(2.0)
    assert roofline.floor_ms(1000, 1e12, roofs, fp8=True) == pytest.approx(1.0)
    assert roofs.as_dict()["stream_bytes_per_s"] == 3e12


def test_a_grouped_gemm_floor_counts_its_bytes_and_flops(roofline: ModuleType) -> None:
    roofs = roofline.Roofs(
        read_bytes_per_s=1e12, copy_bytes_per_s=1e12, dense_bf16_flops=1e14, dense_fp8_flops=2e14
    )
    for fp8, elem in ((False, 2), (True, 1)):
        want = roofline.floor_ms(
            roofline.gemm_bytes(3, 64, 256, 512, elem), 2.0 * 64 * 256 * 512, roofs, fp8
        )
        assert roofline.gemm_floor_ms(roofs, 3, 64, 256, 512, fp8) == want


def test_the_roof_table_pairs_each_gemm_and_names_the_ones_without_room() -> None:
    moe = import_benchmark("moe")

    def row(gemm: str, layout: str, impl: str, ms: float) -> dict[str, object]:
        return {
            "gemm": gemm,
            "layout": layout,
            "impl": impl,
            "ms": ms,
            "floor_ms": 1.0,
            "of_roof": 1.0 / ms,
        }

    layer = {
        "label": "m T=1",
        "gemms": [
            row("gate_up", "row-major", "torch", 2.0),
            row("gate_up", "row-major", "ours", 1.6),
            row("down", "row-major", "torch", 1.1),  # ceiling 1.1x: no room for 1.2x
            row("down", "row-major", "ours", 1.0),
            row("down", "transposed", "torch", 3.0),  # ours refused: not paired
            {"gemm": "down", "layout": "transposed", "impl": "ours", "refused": "no"},
        ],
    }
    out = moe.roof_table([layer], ("gemm", "layout"), "torch", "ours")
    assert set(out["per_gemm"]) == {"m T=1 gate_up row-major", "m T=1 down row-major"}
    first = out["per_gemm"]["m T=1 gate_up row-major"]
    assert first["x"] == pytest.approx(1.25) and first["ceiling_x"] == pytest.approx(2.0)
    assert first["torch_of_roof"] == pytest.approx(0.5)
    assert out["ceiling_below_target"] == ["m T=1 down row-major"]
