"""moe_ops.moe.grouped_mm_fp8 and moe_forward_fp8 on the GPU.

grouped_mm_fp8 is checked against a float64 GEMM of the dequantised operands (x_fp8 * x_scale,
w_fp8 * w_scale): e4m3 values times float32 scales are exact in float64, so what is left is
the kernel's fp32 accumulation order and one rounding of the output to bf16.

- norm-wise: ||out - ref|| / ||ref|| <= 2^-7. bf16 keeps 8 significant bits, so rounding alone
  is at most 2^-9 relative per element (about 2^-10 rms); fp32 accumulation (with CUTLASS's
  promotion of the wgmma accumulators every 4 k-blocks) adds far less. 2^-7 leaves a 4-8x
  margin, and any wrong scale, group or layout gives an error of order 1.
- element-wise: |out - ref| <= 2^-8 |ref| + 2^-10 (|x| @ |w|): one bf16 rounding (half an ulp
  is <= 2^-9 |ref|, doubled) plus the accumulation error, which scales with the sum of the
  absolute products, not with the (possibly cancelled) result. Hopper's FP8 wgmma keeps
  about 14 bits while it accumulates inside each 128-deep K block before CUTLASS adds the
  block into fp32 (DeepSeek-V3's report), so a few 2^-14 per block, summed: 2^-10 is loose
  for that and still far below the error of any wrong scale or group.

moe_forward_fp8 is checked against the bf16 moe_forward with the unquantised weights: four
e4m3 roundings (x, w_gate_up, silu(gate) * up, w_down) with 3 mantissa bits, each about 3%
rms relative, make about 6.4% norm-wise (measured in a float simulation of the same
quantisation over the layers below: 5.9-6.4%); the bound is 10%.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from _gpu_helpers import rel_error
from _moe_reference import offsets_from_counts, weights

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("moe_ops.moe")]

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
LAYOUTS = ["rowwise", "blockwise"]
NORM_BOUND = 2.0**-7
# opcheck without test_schema: its mutation check compares each input before and after with
# `mul`, which torch has no e4m3 kernel for ("mul_cuda" not implemented for 'Float8_e4m3fn',
# torch 2.11 on the H200). The fake-tensor, autograd-registration and AOT checks all run.
OPCHECK_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
MOE_BOUND = 0.10

# (rows per group, K, N): one group of one row, empty groups, odd and uneven M, many groups,
# 256 experts, DeepSeek-V3-like gate/up (K = 7168, N = 2048) and down (K = 2048, N = 7168).
CASES = [
    ([1], 128, 128),
    ([0, 0, 5, 0], 256, 256),
    ([3, 0, 200, 1, 77], 512, 384),
    ([300] * 16, 1024, 256),
    ([g % 7 for g in range(256)], 256, 128),
    ([37, 0, 512, 129, 1000, 3, 0, 251], 7168, 2048),
    ([64, 0, 333, 7], 2048, 7168),
]
# Row-wise only: K and N multiples of 16 but not of 128.
ROWWISE_CASES = [([5, 11], 16, 32), ([9, 0, 40], 48, 80), ([1, 2, 3], 7184, 2064)]


def _operands(
    moe: ModuleType, counts: list[int], k: int, n: int, layout: str, m: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = sum(counts) if m is None else m
    x = torch.randn(rows, k, device="cuda").to(BF16)
    w = weights(len(counts), k, n, transposed=False, scale=k**-0.5)
    x_fp8, x_scale = moe.quantize_fp8_activations(x, layout)
    w_fp8, w_scale = moe.quantize_fp8_weights(w, layout)
    return x_fp8, w_fp8, x_scale, w_scale


def _dequantised(
    x_fp8: torch.Tensor, w_fp8: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 x [M, K] and w [E, K, N] that the FP8 operands stand for."""
    x, w = x_fp8.double(), w_fp8.double()
    if x_scale.dim() == 1:
        return x * x_scale.double()[:, None], w * w_scale.double()[:, None, :]
    b = 128
    xs = x_scale.double().repeat_interleave(b, dim=1)  # [M, K]
    ws = w_scale.double().repeat_interleave(b, dim=1).repeat_interleave(b, dim=2)  # [E, N, K]
    return x * xs, w * ws.transpose(-2, -1)


def _reference(x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> tuple[torch.Tensor, ...]:
    """float64 grouped GEMM and the sum of absolute products (rows past the groups: 0)."""
    out = torch.zeros(x.shape[0], w.shape[2], device=x.device, dtype=torch.float64)
    size = torch.zeros_like(out)
    start = 0
    for g, m in enumerate(counts):
        if m:
            rows = slice(start, start + m)
            out[rows] = x[rows] @ w[g]
            size[rows] = x[rows].abs() @ w[g].abs()
        start += m
    return out, size


def _assert_close(out: torch.Tensor, ref: torch.Tensor, size: torch.Tensor, what: str) -> None:
    assert out.dtype == BF16 and out.shape == ref.shape, f"{what}: {out.dtype} {out.shape}"
    if ref.numel() == 0:
        return
    err = rel_error(out, ref)
    assert err <= NORM_BOUND, f"{what}: relative error {err:.3g} > {NORM_BOUND:.3g}"
    excess = (out.double() - ref).abs() - (2.0**-8 * ref.abs() + 2.0**-10 * size)
    worst = excess.max().item()
    assert worst <= 0, f"{what}: an element is {worst:.3g} past its bound"


def _check(
    moe: ModuleType, counts: list[int], k: int, n: int, layout: str, config: str = "auto"
) -> None:
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, k, n, layout)
    offsets = offsets_from_counts(counts)
    out = moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets, config=config)
    ref, size = _reference(*_dequantised(x_fp8, w_fp8, x_scale, w_scale), counts)
    what = f"grouped_mm_fp8 {layout} [{config}], {len(counts)} groups, k{k} n{n}"
    _assert_close(out, ref, size, what)


@pytest.mark.parametrize("config", ["auto", "cooperative", "pingpong"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}g-k{c[1]}-n{c[2]}")
def test_grouped_mm_fp8_matches_dequantised_float64(
    moe: ModuleType, case: tuple[list[int], int, int], layout: str, config: str
) -> None:
    _check(moe, *case, layout, config)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_auto_runs_exactly_one_of_the_tile_configs(moe: ModuleType, layout: str) -> None:
    # 64 experts of 4 rows (the pingpong side of the rule: >= 64 experts of <= 64 rows), 8 of
    # 32 and 4 of 300 (the cooperative side): auto is bit-for-bit the config its rule names
    # (the two tiles sum alike, so this holds either way: it checks that auto runs a tile
    # config, not which); block-wise scales run the cooperative tile whatever is asked.
    for counts in ([4] * 64, [32] * 8, [300] * 4):
        x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, 512, 256, layout)
        offsets = offsets_from_counts(counts)
        runs = {
            c: moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets, config=c)
            for c in moe.FP8_CONFIGS
        }
        small = len(counts) >= 64 and sum(counts) <= 64 * len(counts)
        expected = "pingpong" if small and layout == "rowwise" else "cooperative"
        assert torch.equal(runs["auto"], runs[expected]), (counts, layout)
        if layout == "blockwise":
            assert torch.equal(runs["pingpong"], runs["cooperative"])


def test_an_unknown_fp8_config_is_refused(moe: ModuleType) -> None:
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, [4], 128, 128, "rowwise")
    with pytest.raises(ValueError, match="config must be one of auto, cooperative, pingpong"):
        moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets_from_counts([4]), config="x")


@pytest.mark.parametrize("case", ROWWISE_CASES, ids=lambda c: f"{len(c[0])}g-k{c[1]}-n{c[2]}")
def test_rowwise_takes_k_and_n_multiples_of_16(
    moe: ModuleType, case: tuple[list[int], int, int]
) -> None:
    _check(moe, *case, "rowwise")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rows_past_the_last_offset_are_not_part_of_any_group(moe: ModuleType, layout: str) -> None:
    counts = [10, 20]
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, 128, 128, layout, m=64)
    out = moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets_from_counts(counts))
    ref, size = _reference(*_dequantised(x_fp8, w_fp8, x_scale, w_scale), counts)
    _assert_close(out[:30], ref[:30], size[:30], f"grouped_mm_fp8 {layout}, rows past the end")


def test_rowwise_equals_torch_scaled_grouped_mm(moe: ModuleType) -> None:
    if not hasattr(torch, "_scaled_grouped_mm"):
        pytest.skip("this torch has no torch._scaled_grouped_mm")
    # Group sizes torch's kernels take on every version (multiples of 16), one empty group.
    counts = [0, 48, 512, 16, 128, 0, 896, 64]
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, 1024, 768, "rowwise")
    offsets = offsets_from_counts(counts)
    ours = moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets)
    try:
        theirs = torch._scaled_grouped_mm(
            x_fp8, w_fp8, x_scale, w_scale, offs=offsets, out_dtype=BF16
        )
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"torch._scaled_grouped_mm refuses these operands here: {exc}")
    # Both round fp32 sums once to bf16: they differ by summation order (and torch's choice
    # of accumulation), far below the bf16 rounding bound.
    err = rel_error(ours, theirs.float())
    assert err <= NORM_BOUND, f"against torch._scaled_grouped_mm: {err:.3g}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_opcheck(moe: ModuleType, layout: str) -> None:
    counts = [5, 0, 40, 19]
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, 256, 128, layout)
    ops = getattr(torch.ops, moe.NAMESPACE)
    torch.library.opcheck(
        ops.grouped_mm_fp8.default,
        (x_fp8, w_fp8, x_scale, w_scale, offsets_from_counts(counts)),
        test_utils=OPCHECK_UTILS,
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_compile_fullgraph_and_graph_capture(moe: ModuleType, layout: str) -> None:
    counts = [100, 0, 28, 128]
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, counts, 256, 256, layout)
    offsets = offsets_from_counts(counts)
    eager = moe.grouped_mm_fp8(x_fp8, w_fp8, x_scale, w_scale, offsets)

    compiled = torch.compile(
        lambda a, b, sa, sb, o: moe.grouped_mm_fp8(a, b, sa, sb, o) * 2, fullgraph=True
    )
    torch.testing.assert_close(compiled(x_fp8, w_fp8, x_scale, w_scale, offsets), eager * 2)

    static_x, static_scale = x_fp8.clone(), x_scale.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.grouped_mm_fp8(static_x, w_fp8, static_scale, w_scale, offsets)
    new_x, _, new_scale, _ = _operands(moe, counts, 256, 256, layout)
    static_x.copy_(new_x)
    static_scale.copy_(new_scale)
    graph.replay()
    torch.testing.assert_close(
        static_out, moe.grouped_mm_fp8(new_x, w_fp8, new_scale, w_scale, offsets)
    )


def test_out_dtype_other_than_bf16_is_refused(moe: ModuleType) -> None:
    x_fp8, w_fp8, x_scale, w_scale = _operands(moe, [4], 128, 128, "rowwise")
    with pytest.raises(ValueError, match=r"out_dtype must be torch\.bfloat16"):
        moe.grouped_mm_fp8(
            x_fp8, w_fp8, x_scale, w_scale, offsets_from_counts([4]), out_dtype=torch.float32
        )


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "layout", "needle"),
    [
        ((4, 40), (2, 40, 64), "rowwise", "multiple of 16"),
        ((4, 64), (2, 64, 100), "rowwise", "multiple of 16"),
        ((4, 192), (2, 192, 128), "blockwise", "multiple of 128"),
        ((4, 128), (2, 128, 144), "blockwise", "multiple of 128"),
        ((4, 64), (2, 32, 64), "rowwise", "differs"),
        ((4, 64), (2, 64, 64), "tensorwise", "layout must be one of"),
    ],
)
def test_bad_shapes_are_explained(
    moe: ModuleType,
    x_shape: tuple[int, int],
    w_shape: tuple[int, int, int],
    layout: str,
    needle: str,
) -> None:
    reason = moe.fp8_unsupported_shape_reason(x_shape, w_shape, layout)
    assert reason is not None and needle in reason, reason
    assert moe.fp8_unsupported_shape_reason((4, 128), (2, 128, 256), "blockwise") is None
    assert moe.fp8_unsupported_shape_reason((4, 16), (2, 16, 32), "rowwise") is None


REPORT = r"an earlier call on cuda:\d+ got offsets that were not non-decreasing within \[0, M\]"


def _clamped_counts(offsets: list[int], m: int) -> list[int]:
    """Rows per group as the kernel takes them (test_moe_grouped_mm's rule)."""
    ends, top = [], 0
    for offset in offsets:
        top = max(top, offset)
        ends.append(min(top, m))
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


@pytest.fixture
def no_report_left(moe: ModuleType) -> object:
    moe.check_offsets_errors()
    yield
    moe.check_offsets_errors()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("values", "kinds"),
    [
        ([16, 48, 32, 64], ["an offset below the one before it"]),
        ([16, -4, 40, 64], ["a negative offset", "below the one before it"]),
        ([16, 200, 40, 64], ["above M", "below the one before it"]),
    ],
    ids=["decreasing", "negative", "past-m-then-back"],
)
def test_bad_offsets_read_nothing_outside_x_and_are_reported_under_its_name(
    moe: ModuleType, no_report_left: object, values: list[int], kinds: list[str], layout: str
) -> None:
    m, k, n, pad = 64, 256, 128, 32
    # x inside a buffer of e4m3 NaN (0x7f): a row read from outside x would be NaN.
    buffer = torch.full(((m + 2 * pad) * k,), 0x7F, dtype=torch.uint8, device="cuda")
    x_fp8 = buffer.view(E4M3).view(m + 2 * pad, k)[pad : pad + m]
    new_x, w_fp8, x_scale, w_scale = _operands(moe, [m, 0, 0, 0], k, n, layout)
    x_fp8.copy_(new_x)
    out = moe.grouped_mm_fp8(
        x_fp8, w_fp8, x_scale, w_scale, torch.tensor(values, dtype=torch.int32, device="cuda")
    )
    counts = _clamped_counts(values, m)
    covered = sum(counts)
    ref, size = _reference(*_dequantised(x_fp8, w_fp8, x_scale, w_scale), counts)
    _assert_close(out[:covered], ref[:covered], size[:covered], "grouped_mm_fp8, bad offsets")
    with pytest.raises(RuntimeError, match=REPORT) as raised:
        moe.check_offsets_errors()
    message = str(raised.value)
    assert "grouped_mm_fp8: an earlier call" in message, message
    assert all(kind in message for kind in kinds), message
    assert "grouped_mm: an earlier call" not in message, message  # only its own words
    moe.check_offsets_errors()  # reported once


# (tokens, hidden, intermediate, experts, top_k): one token, few tokens and many experts, a
# mid-size layer, and 256 experts.
LAYERS = [
    (1, 256, 128, 8, 1),
    (7, 128, 128, 64, 8),
    (300, 512, 256, 16, 6),
    (512, 1024, 512, 8, 2),
    (1024, 256, 128, 256, 8),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: "t{}-h{}-i{}-e{}-k{}".format(*c))
def test_moe_forward_fp8_is_moe_forward_within_fp8_quantisation(
    moe: ModuleType, layer: tuple[int, int, int, int, int], layout: str
) -> None:
    tokens, hidden, inter, experts, top_k = layer
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    logits = torch.randn(tokens, experts, device="cuda")
    w_gate_up = weights(experts, hidden, 2 * inter, transposed=False, scale=hidden**-0.5)
    w_down = weights(experts, inter, hidden, transposed=False, scale=inter**-0.5)
    gate_up_fp8, gate_up_scale = moe.quantize_fp8_weights(w_gate_up, layout)
    down_fp8, down_scale = moe.quantize_fp8_weights(w_down, layout)
    out = moe.moe_forward_fp8(x, logits, gate_up_fp8, gate_up_scale, down_fp8, down_scale, top_k)
    assert out.shape == x.shape and out.dtype == BF16
    bf16 = moe.moe_forward(x, logits, w_gate_up, w_down, top_k)
    err = rel_error(out, bf16.float())
    assert err <= MOE_BOUND, f"moe_forward_fp8 {layout}: {err:.3g} from moe_forward"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_moe_forward_fp8_graph_capture_and_fake(moe: ModuleType, layout: str) -> None:
    tokens, hidden, inter, experts, top_k = 96, 256, 128, 8, 2
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    logits = torch.randn(tokens, experts, device="cuda")
    gate_up_fp8, gate_up_scale = moe.quantize_fp8_weights(
        weights(experts, hidden, 2 * inter, transposed=False, scale=hidden**-0.5), layout
    )
    down_fp8, down_scale = moe.quantize_fp8_weights(
        weights(experts, inter, hidden, transposed=False, scale=inter**-0.5), layout
    )
    args = (x, logits, gate_up_fp8, gate_up_scale, down_fp8, down_scale, top_k)
    eager = moe.moe_forward_fp8(*args)
    ops = getattr(torch.ops, moe.NAMESPACE)
    torch.library.opcheck(ops.moe_forward_fp8.default, args, test_utils=OPCHECK_UTILS)

    static_x = x.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.moe_forward_fp8(static_x, *args[1:])
    graph.replay()
    torch.testing.assert_close(static_out, eager)
