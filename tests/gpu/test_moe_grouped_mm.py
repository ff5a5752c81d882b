"""moe_ops.moe.grouped_mm (and its SiLU-and-mul epilogue) on the GPU against float32."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from _gpu_helpers import assert_matches, nbytes, poison_allocator
from _moe_reference import grouped_reference, offsets_from_counts, weights

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("moe_ops.moe")]

BF16 = torch.bfloat16

# (rows per group, K, N): empty groups, one row, uneven splits, rows past the last offset
# are not part of any group (torch semantics), sizes around the 64/128/256 tiles.
CASES = [
    ([1], 64, 64),
    ([0, 0, 5, 0], 128, 256),
    ([3, 0, 200, 1, 77], 256, 512),
    ([64, 128, 256, 63, 129], 512, 256),
    ([1000, 1, 0, 700], 1024, 1536),
    ([300] * 16, 2048, 384),
    ([7, 9, 11, 13, 15, 17, 19, 21] * 8, 192, 136),
    ([4096, 2048], 128, 4096),
]
CONFIGS = ["auto", "cooperative", "pingpong"]


def _x(rows: int, k: int) -> torch.Tensor:
    return torch.randn(rows, k, device="cuda").to(BF16)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}g-k{c[1]}-n{c[2]}")
def test_grouped_mm_matches_float32(
    moe: ModuleType, case: tuple[list[int], int, int], transposed: bool, config: str
) -> None:
    counts, k, n = case
    x = _x(sum(counts), k)
    w = weights(len(counts), k, n, transposed=transposed, scale=k**-0.5)
    offsets = offsets_from_counts(counts)
    poison_allocator(x.shape[0] * n * 2)
    out = moe.grouped_mm(x, w, offsets, config=config)
    assert out.shape == (x.shape[0], n) and out.dtype == BF16
    assert_matches(out, grouped_reference(x, w, counts), BF16, "grouped_mm")


@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
def test_grouped_mm_equals_torch_grouped_mm(moe: ModuleType, transposed: bool) -> None:
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    counts = [0, 37, 500, 3, 128, 0, 901, 64]
    x = _x(sum(counts), 512)
    w = weights(len(counts), 512, 768, transposed=transposed, scale=512**-0.5)
    offsets = offsets_from_counts(counts)
    ours = moe.grouped_mm(x, w, offsets).float()
    theirs = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16).float()
    # Both accumulate in fp32 and round once; only the summation order differs.
    assert (ours - theirs).norm() / theirs.norm() < 4e-3


def test_rows_past_the_last_offset_are_untouched(moe: ModuleType) -> None:
    counts = [10, 20]
    x = _x(64, 64)
    w = weights(2, 64, 64, transposed=False, scale=0.1)
    out = moe.grouped_mm(x, w, offsets_from_counts(counts))
    ref = grouped_reference(x, w, counts)
    assert_matches(out[:30], ref[:30], BF16, "grouped rows")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
@pytest.mark.parametrize("case", CASES[:6], ids=lambda c: f"{len(c[0])}g-k{c[1]}-n{c[2]}")
def test_silu_mul_epilogue_matches_float32(
    moe: ModuleType, case: tuple[list[int], int, int], transposed: bool, config: str
) -> None:
    counts, k, n = case
    x = _x(sum(counts), k)
    w = weights(len(counts), k, n, transposed=transposed, scale=k**-0.5)
    offsets = offsets_from_counts(counts)
    poison_allocator(*nbytes(x))
    out = moe.grouped_mm_silu_mul(x, moe.interleave_gate_up(w), offsets, config=config)
    gate_up = grouped_reference(x, w, counts)
    ref = torch.nn.functional.silu(gate_up[:, : n // 2]) * gate_up[:, n // 2 :]
    assert out.shape == (x.shape[0], n // 2)
    assert_matches(out, ref, BF16, "grouped_mm_silu_mul")


def test_interleave_keeps_the_layout(moe: ModuleType) -> None:
    for transposed in (False, True):
        w = weights(3, 16, 32, transposed=transposed, scale=1.0)
        inter = moe.interleave_gate_up(w)
        assert inter.shape == w.shape
        assert (inter.stride(-2) == 1) == transposed
        assert torch.equal(inter[..., 0::2], w[..., :16])
        assert torch.equal(inter[..., 1::2], w[..., 16:])


def test_opcheck(moe: ModuleType) -> None:
    counts = [5, 0, 40, 19]
    x = _x(sum(counts), 64)
    w = weights(4, 64, 128, transposed=False, scale=0.1)
    offsets = offsets_from_counts(counts)
    ops = getattr(torch.ops, moe.NAMESPACE)
    torch.library.opcheck(ops.grouped_mm.default, (x, w, offsets, 0))
    torch.library.opcheck(ops.grouped_mm_silu_mul.default, (x, w, offsets, 2))


def test_compile_fullgraph_and_graph_capture(moe: ModuleType) -> None:
    counts = [100, 0, 28, 128]
    x = _x(sum(counts), 256)
    w = weights(4, 256, 512, transposed=True, scale=0.05)
    offsets = offsets_from_counts(counts)
    eager = moe.grouped_mm(x, w, offsets)

    compiled = torch.compile(lambda a, b, o: moe.grouped_mm(a, b, o) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, offsets), eager * 2)

    static_x = x.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.grouped_mm(static_x, w, offsets)
    new_x = _x(sum(counts), 256)
    static_x.copy_(new_x)
    graph.replay()
    torch.testing.assert_close(static_out, moe.grouped_mm(new_x, w, offsets))


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "dtype", "needle"),
    [
        ((4, 60), (2, 60, 64), BF16, "multiple of 8"),
        ((4, 64), (2, 64, 100), BF16, "multiple of 8"),
        ((4, 64), (2, 32, 64), BF16, "differs"),
        ((4, 64), (2, 64, 64), torch.float16, "not supported"),
    ],
)
def test_bad_shapes_are_explained_and_refused(
    moe: ModuleType,
    x_shape: tuple[int, int],
    w_shape: tuple[int, int, int],
    dtype: torch.dtype,
    needle: str,
) -> None:
    reason = moe.unsupported_shape_reason(x_shape, w_shape, dtype)
    assert reason is not None and needle in reason
    x = torch.randn(x_shape, device="cuda").to(dtype)
    w = torch.randn(w_shape, device="cuda").to(dtype)
    offsets = torch.tensor([2, 4], dtype=torch.int32, device="cuda")
    with pytest.raises(RuntimeError, match="grouped_mm"):
        moe.grouped_mm(x, w, offsets)
    assert moe.unsupported_shape_reason((4, 64), (2, 64, 64)) is None
