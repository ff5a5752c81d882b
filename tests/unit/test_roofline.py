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
