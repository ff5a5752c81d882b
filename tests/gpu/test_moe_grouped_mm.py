"""moe_ops.moe.grouped_mm (and its SiLU-and-mul epilogue) on the GPU against float32."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from _gpu_helpers import assert_matches, nbytes, poison_allocator
from _moe_reference import grouped_reference, offsets_from_counts, weights

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("moe_ops.moe")]

BF16 = torch.bfloat16

# (rows per group, K, N): empty groups, one row, uneven splits, rows past the last offset
# are not part of any group (torch semantics), sizes around the 64/128/256 tiles; for gemv,
# a group of 6 rows (a 4-row pass and a 2-row one) beside one-row groups, and one row
# through a long K over few column blocks (K split 32 ways in a CTA).
CASES = [
    ([1], 64, 64),
    ([3, 0, 6], 4096, 320),
    ([0, 0, 5, 0], 128, 256),
    ([3, 0, 200, 1, 77], 256, 512),
    ([64, 128, 256, 63, 129], 512, 256),
    ([1000, 1, 0, 700], 1024, 1536),
    ([300] * 16, 2048, 384),
    ([7, 9, 11, 13, 15, 17, 19, 21] * 8, 192, 136),
    ([4096, 2048], 128, 4096),
    ([1], 8192, 640),
]
CONFIGS = ["auto", "cooperative", "small", "gemv", "cooperative_2x1"]


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


@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
def test_every_config_equals_torch_at_decode_sizes(moe: ModuleType, transposed: bool) -> None:
    # A few rows an expert (8 tokens, top-2 of 64 experts): every tile configuration runs
    # torch's algorithm (fp32 accumulation over K in order, one rounding), so bit-identical;
    # the weight-streaming kernel accumulates in fp32 too, in another order, so within bf16's
    # rounding of the same sums.
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    counts = [0] * 64
    for e in [3, 3, 7, 9, 12, 12, 12, 20, 33, 41, 41, 50, 51, 60, 63, 63]:
        counts[e] += 1
    x = _x(sum(counts), 2048)
    w = weights(len(counts), 2048, 1536, transposed=transposed, scale=2048**-0.5)
    offsets = offsets_from_counts(counts)
    theirs = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16)
    for config in ("cooperative", "small", "cooperative_2x1"):
        assert torch.equal(moe.grouped_mm(x, w, offsets, config=config), theirs), config
    gemv = moe.grouped_mm(x, w, offsets, config="gemv")
    err = (gemv.float() - theirs.float()).norm() / theirs.float().norm()
    assert 0 < err < 4e-3, err  # another summation order, the same fp32 sums
    # "auto" runs one of them, whichever its rule picks: exactly that one's output.
    auto = moe.grouped_mm(x, w, offsets)
    assert torch.equal(auto, theirs) or torch.equal(auto, gemv)


@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
def test_auto_takes_the_streaming_kernel_only_where_its_rule_says(
    moe: ModuleType, transposed: bool
) -> None:
    # moe.h's rule, worked out for 132 SMs: gemv at most a row an expert over at most 384
    # cooperative (128x256) tiles. One token, top-8 of 128 experts, Qwen3-30B's gate/up (N
    # 1536: 48 tiles), and one token, top-2 of Mixtral's experts, its down GEMM (K 14336, N
    # 4096: 32 tiles): gemv. Three rows over Mixtral's two experts: the small tile (more than
    # a row an expert, 32 tiles under half the SMs). A row for each of 128 experts at N 1024:
    # 512 tiles, the cooperative tile. gemv's sums run in another order than the tiles', so
    # the output tells which kernel ran.
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the expected pick is worked out for 132 SMs (H100 SXM, H200)")
    qwen3 = [0] * 128
    for e in [2, 9, 17, 40, 41, 77, 100, 127]:
        qwen3[e] = 1
    cases = [
        (qwen3, 2048, 1536, "gemv"),
        ([1, 1], 14336, 4096, "gemv"),
        ([2, 1], 14336, 4096, "small"),
        ([1] * 128, 256, 1024, "cooperative"),
    ]
    for counts, k, n, expected in cases:
        x = _x(sum(counts), k)
        w = weights(len(counts), k, n, transposed=transposed, scale=k**-0.5)
        offsets = offsets_from_counts(counts)
        auto = moe.grouped_mm(x, w, offsets)
        picked = moe.grouped_mm(x, w, offsets, config=expected)
        other = moe.grouped_mm(x, w, offsets, config="small" if expected == "gemv" else "gemv")
        assert torch.equal(auto, picked), (k, n, expected)
        assert not torch.equal(auto, other), (k, n, "the two kernels must differ to tell")


def test_rows_past_the_last_offset_are_untouched(moe: ModuleType) -> None:
    counts = [10, 20]
    x = _x(64, 64)
    w = weights(2, 64, 64, transposed=False, scale=0.1)
    out = moe.grouped_mm(x, w, offsets_from_counts(counts))
    ref = grouped_reference(x, w, counts)
    assert_matches(out[:30], ref[:30], BF16, "grouped rows")


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
@pytest.mark.parametrize("case", CASES[:7], ids=lambda c: f"{len(c[0])}g-k{c[1]}-n{c[2]}")
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


# Offsets the kernel cannot trust: (offsets, M, what the report names). The groups the kernel
# takes from them are those of `_clamped_counts`.
BAD_OFFSETS = {
    "decreasing": ([16, 48, 32, 64], 64, ["an offset below the one before it"]),
    "negative-first": ([-8, 24, 40, 64], 64, ["a negative offset"]),
    "negative-later": ([16, -4, 40, 64], 64, ["a negative offset", "below the one before it"]),
    "past-m": ([16, 32, 100, 120], 64, ["an offset above M"]),
    "past-m-then-back": ([16, 200, 40, 64], 64, ["above M", "below the one before it"]),
    "all-negative": ([-1, -1, -1, -1], 64, ["a negative offset"]),
}
REPORT = r"an earlier call on cuda:\d+ got offsets that were not non-decreasing within \[0, M\]"


def _clamped_counts(offsets: list[int], m: int) -> list[int]:
    """Rows per group as the kernel takes them: group g is [c[g-1], c[g]) with
    c[g] = min(max(0, offsets[:g+1]), m), so the groups are disjoint and inside x."""
    ends, top = [], 0
    for offset in offsets:
        top = max(top, offset)
        ends.append(min(top, m))
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def _x_among_nans(rows: int, k: int, pad: int = 32) -> torch.Tensor:
    """Random bf16 [rows, k] inside a NaN-filled buffer: a row read from outside x is NaN."""
    buffer = torch.full((rows + 2 * pad, k), float("nan"), device="cuda", dtype=BF16)
    x = buffer[pad : pad + rows]
    x.copy_(_x(rows, k))
    return x


def _offsets(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


@pytest.fixture
def no_report_left(moe: ModuleType) -> Iterator[None]:
    """The test starts with no report pending on the device, and leaves none behind."""
    moe.check_offsets_errors()
    yield
    moe.check_offsets_errors()


def test_clamped_counts_follow_the_running_max() -> None:
    assert _clamped_counts([16, 48, 32, 64], 64) == [16, 32, 0, 16]
    assert _clamped_counts([-8, 24, 40, 64], 64) == [0, 24, 16, 24]
    assert _clamped_counts([16, 200, 40, 64], 64) == [16, 48, 0, 0]
    assert _clamped_counts([3, 5], 64) == [3, 2]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
@pytest.mark.parametrize("case", sorted(BAD_OFFSETS))
def test_bad_offsets_read_nothing_outside_x_and_are_reported(
    moe: ModuleType, no_report_left: None, case: str, transposed: bool, config: str
) -> None:
    values, m, kinds = BAD_OFFSETS[case]
    k, n = 128, 256
    x = _x_among_nans(m, k)
    w = weights(len(values), k, n, transposed=transposed, scale=k**-0.5)
    out = moe.grouped_mm(x, w, _offsets(values), config=config)
    counts = _clamped_counts(values, m)
    covered = sum(counts)
    if covered:
        # Rows outside every group are left unwritten (as torch leaves rows past the last
        # offset); the rows of the clamped groups are exact, with no NaN from outside x.
        ref = grouped_reference(x, w, counts)
        assert_matches(out[:covered], ref[:covered], BF16, f"grouped_mm, {case}")
    with pytest.raises(RuntimeError, match=REPORT) as raised:
        moe.check_offsets_errors()
    message = str(raised.value)
    # torch's stable-ABI check puts its function and file:line before the op's words
    # ("raise_offsets_errors, .../binding.cpp:155, grouped_mm: ..."; seen on the H200)
    assert "grouped_mm: an earlier call" in message, message
    assert all(kind in message for kind in kinds), message
    moe.check_offsets_errors()  # reported once: the flags are clear again


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
def test_bad_offsets_of_silu_mul_are_clamped_and_reported_under_its_name(
    moe: ModuleType, no_report_left: None, transposed: bool, config: str
) -> None:
    values, m, _ = BAD_OFFSETS["past-m-then-back"]
    k, n = 128, 256
    x = _x_among_nans(m, k)
    w = weights(len(values), k, n, transposed=transposed, scale=k**-0.5)
    out = moe.grouped_mm_silu_mul(x, moe.interleave_gate_up(w), _offsets(values), config=config)
    counts = _clamped_counts(values, m)
    gate_up = grouped_reference(x, w, counts)
    ref = torch.nn.functional.silu(gate_up[:, : n // 2]) * gate_up[:, n // 2 :]
    covered = sum(counts)
    assert_matches(out[:covered], ref[:covered], BF16, "grouped_mm_silu_mul")
    with pytest.raises(RuntimeError, match="grouped_mm_silu_mul: " + REPORT):
        moe.check_offsets_errors()


@pytest.mark.parametrize("transposed", [False, True], ids=["w_row_major", "w_transposed"])
def test_the_2x1_cluster_equals_torch_over_several_row_tiles(
    moe: ModuleType, transposed: bool
) -> None:
    # cooperative_2x1 pairs two row tiles of an expert in a cluster (the weights' tile is
    # multicast to both): groups of one to six 128-row tiles, one ending mid-tile, some
    # with an odd tile count (the cluster's second tile is past the group's rows), and
    # empty ones. The same algorithm as torch's: bit-identical.
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    counts = [129, 0, 256, 700, 1, 383, 0, 640]
    x = _x(sum(counts), 1024)
    w = weights(len(counts), 1024, 768, transposed=transposed, scale=1024**-0.5)
    offsets = offsets_from_counts(counts)
    theirs = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16)
    assert torch.equal(moe.grouped_mm(x, w, offsets, config="cooperative_2x1"), theirs)
    assert torch.equal(moe.grouped_mm(x, w, offsets, config="cooperative"), theirs)
    # Where `auto` takes it (100-205 rows an expert, K 4096: gemm_rule.cpp), the same.
    counts = [100 + 7 * i for i in range(16)]
    x = _x(sum(counts), 4096)
    w = weights(len(counts), 4096, 256, transposed=transposed, scale=4096**-0.5)
    offsets = offsets_from_counts(counts)
    theirs = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16)
    assert torch.equal(moe.grouped_mm(x, w, offsets), theirs)


def test_the_next_call_raises_once_and_valid_calls_stay_exact(
    moe: ModuleType, no_report_left: None
) -> None:
    counts = [0, 37, 500, 3, 128, 0, 300, 64]
    x = _x(sum(counts), 512)
    w = weights(len(counts), 512, 256, transposed=False, scale=512**-0.5)
    offsets = offsets_from_counts(counts)
    before = moe.grouped_mm(x, w, offsets)

    moe.grouped_mm(x, w, _offsets([100, 50, -3, 2000, 40, 0, 1032, 1032]))
    torch.cuda.synchronize()  # the report is on the host once the bad call has finished
    with pytest.raises(RuntimeError, match="grouped_mm: " + REPORT):
        moe.grouped_mm(x, w, offsets)  # raises instead of running
    after = moe.grouped_mm(x, w, offsets)
    assert torch.equal(after, before)
    if hasattr(torch, "_grouped_mm"):
        theirs = torch._grouped_mm(x, w, offs=offsets, out_dtype=BF16)
        assert torch.equal(after, theirs)  # the same CUTLASS kernel family, bit for bit


@pytest.mark.parametrize(
    "counts",
    [[0, 0, 10, 0, 54], [5, 5, 0], [64], [0] * 4],
    ids=["empty-groups", "short-of-m", "one-group", "no-rows-used"],
)
def test_valid_offsets_are_not_reported(
    moe: ModuleType, no_report_left: None, counts: list[int]
) -> None:
    x = _x(64, 64)
    w = weights(len(counts), 64, 128, transposed=False, scale=0.1)
    moe.grouped_mm(x, w, offsets_from_counts(counts))
    moe.grouped_mm_silu_mul(x, w, offsets_from_counts(counts))
    moe.check_offsets_errors()


@pytest.mark.parametrize("drop_at", [1023, 1024, 2047], ids=lambda g: f"drop-at-{g}")
def test_running_max_carries_across_the_setup_chunks(
    moe: ModuleType, no_report_left: None, drop_at: int
) -> None:
    # More groups than the setup block has threads (1024): the running max of one chunk
    # carries into the next.
    groups = 2500
    counts = [1 if g % 3 == 0 else 0 for g in range(groups)]
    values = torch.tensor(counts).cumsum(0).tolist()
    m = values[-1]
    values[drop_at] = values[drop_at - 1] - 5
    x = _x_among_nans(m, 64)
    w = weights(groups, 64, 64, transposed=False, scale=0.1)
    out = moe.grouped_mm(x, w, _offsets(values))
    clamped = _clamped_counts(values, m)
    assert sum(clamped) == m
    assert_matches(out, grouped_reference(x, w, clamped), BF16, "grouped_mm, 2500 groups")
    with pytest.raises(RuntimeError, match="an offset below the one before it"):
        moe.check_offsets_errors()


def test_bad_offsets_replayed_in_a_cuda_graph_are_reported(
    moe: ModuleType, no_report_left: None
) -> None:
    counts = [100, 0, 28, 128]
    x = _x(sum(counts), 256)
    w = weights(4, 256, 512, transposed=True, scale=0.05)
    static_offsets = offsets_from_counts(counts)
    moe.grouped_mm(x, w, static_offsets)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.grouped_mm(x, w, static_offsets)
    moe.check_offsets_errors()  # capturing launched nothing

    bad = [100, 50, 300, 256]
    static_offsets.copy_(_offsets(bad))
    graph.replay()
    clamped = _clamped_counts(bad, x.shape[0])
    ref = grouped_reference(x, w, clamped)
    covered = sum(clamped)
    assert_matches(static_out[:covered], ref[:covered], BF16, "replayed grouped_mm")
    with pytest.raises(RuntimeError, match="grouped_mm: " + REPORT):
        moe.check_offsets_errors()

    static_offsets.copy_(offsets_from_counts(counts))
    graph.replay()
    moe.check_offsets_errors()
    assert torch.equal(static_out, moe.grouped_mm(x, w, static_offsets))


def test_the_flags_are_made_by_a_first_call_inside_graph_capture(moe: ModuleType) -> None:
    """A process whose first grouped_mm is captured: the flags' pinned memory is allocated
    during the capture (outside the graph), and the replay reports into it."""
    child = textwrap.dedent(
        """
        import torch
        import moe_ops

        moe = moe_ops.load("moe")
        bf16 = torch.bfloat16
        x = torch.randn(64, 64, device="cuda").to(bf16)
        w = torch.randn(2, 64, 64, device="cuda").to(bf16)
        offsets = torch.tensor([32, 64], dtype=torch.int32, device="cuda")
        # The same CUTLASS kernel through moe_forward, whose own offsets need no flags: all
        # that is new inside the capture below is the flags' allocation and the checked setup.
        logits = torch.randn(64, 2, device="cuda")
        w_down = torch.randn(2, 32, 64, device="cuda").to(bf16)
        moe.moe_forward(x, logits, w, w_down, 1, gate_up_interleaved=True)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = moe.grouped_mm(x, w, offsets)
        offsets.copy_(torch.tensor([40, 20], dtype=torch.int32))
        graph.replay()
        try:
            moe.check_offsets_errors()
        except RuntimeError as exc:
            print("raised:", exc)
        offsets.copy_(torch.tensor([32, 64], dtype=torch.int32))
        graph.replay()
        moe.check_offsets_errors()
        print("equal:", torch.equal(out, moe.grouped_mm(x, w, offsets)))
        """
    )
    here = Path(__file__).resolve().parent
    result = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=300,
        # The driver's lazy loading of kernels under capture is not what this tests.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(here), *sys.path]),
            "CUDA_MODULE_LOADING": "EAGER",
        },
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("raised: ") and "grouped_mm: an earlier call on cuda:0" in line
        for line in lines
    ), result.stdout
    assert "equal: True" in lines, result.stdout
