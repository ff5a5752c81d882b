"""moe_ops.moe.moe_forward on the GPU against a float32 expert layer."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from _gpu_helpers import assert_matches, nbytes, poison_allocator
from _moe_reference import moe_reference, weights

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("moe_ops.moe")]

BF16 = torch.bfloat16

# (tokens, hidden, intermediate, experts): one token (most experts empty), few tokens,
# many experts, and a mid-size layer.
LAYERS = [
    (1, 256, 128, 8),
    (7, 128, 64, 64),
    (300, 512, 256, 16),
    (1024, 256, 128, 256),
    (2048, 1024, 512, 8),
]
TOP_K = [1, 2, 6, 8]


def _layer(
    tokens: int, hidden: int, inter: int, experts: int, *, transposed: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(tokens, hidden, device="cuda").to(BF16)
    logits = torch.randn(tokens, experts, device="cuda")
    w_gate_up = weights(experts, hidden, 2 * inter, transposed=transposed, scale=hidden**-0.5)
    w_down = weights(experts, inter, hidden, transposed=transposed, scale=inter**-0.5)
    return x, logits, w_gate_up, w_down


@pytest.mark.parametrize("top_k", TOP_K)
@pytest.mark.parametrize("layer", LAYERS, ids=lambda c: "t{}-h{}-i{}-e{}".format(*c))
def test_moe_forward_matches_float32(
    moe: ModuleType, layer: tuple[int, int, int, int], top_k: int
) -> None:
    experts = layer[3]
    if top_k > experts:
        pytest.skip("top_k > experts")
    x, logits, w_gate_up, w_down = _layer(*layer, transposed=False)
    poison_allocator(*nbytes(x))
    out = moe.moe_forward(x, logits, w_gate_up, w_down, top_k)
    assert out.shape == x.shape and out.dtype == BF16
    assert_matches(out, moe_reference(x, logits, w_gate_up, w_down, top_k), BF16, "moe_forward")


@pytest.mark.parametrize("config", ["cooperative", "small", "gemv", "cooperative_2x1"])
def test_transposed_weights_interleaved_once_and_uneven_routing(
    moe: ModuleType, config: str
) -> None:
    x, logits, w_gate_up, w_down = _layer(777, 256, 192, 32, transposed=True)
    logits[:, 3] += 4.0  # almost every token picks expert 3: very uneven splits
    logits[:, 5:9] -= 8.0  # and experts 5-8 are (almost) never picked
    interleaved = moe.interleave_gate_up(w_gate_up)
    out = moe.moe_forward(
        x, logits, interleaved, w_down, 6, gate_up_interleaved=True, config=config
    )
    assert_matches(out, moe_reference(x, logits, w_gate_up, w_down, 6), BF16, "moe_forward")


def test_bf16_router_logits(moe: ModuleType) -> None:
    x, _, w_gate_up, w_down = _layer(64, 128, 64, 16, transposed=False)
    # Distinct values per row (exact in bf16): the top-k has no ties to break.
    logits = torch.stack([torch.randperm(16, device="cuda") for _ in range(64)]).float() / 4
    out = moe.moe_forward(x, logits.to(BF16), w_gate_up, w_down, 2)
    assert_matches(out, moe_reference(x, logits, w_gate_up, w_down, 2), BF16, "moe_forward")


def test_no_tokens(moe: ModuleType) -> None:
    x, logits, w_gate_up, w_down = _layer(0, 128, 64, 8, transposed=False)
    assert moe.moe_forward(x, logits, w_gate_up, w_down, 2).shape == (0, 128)


def test_opcheck_compile_and_graph_capture(moe: ModuleType) -> None:
    x, logits, w_gate_up, w_down = _layer(200, 256, 128, 16, transposed=False)
    interleaved = moe.interleave_gate_up(w_gate_up)
    ops = getattr(torch.ops, moe.NAMESPACE)
    torch.library.opcheck(ops.moe_forward.default, (x, logits, interleaved, w_down, 2, 0))

    eager = moe.moe_forward(x, logits, interleaved, w_down, 2, gate_up_interleaved=True)
    # Routing and GEMM rows depend on atomics only for row order: the result is deterministic.
    again = moe.moe_forward(x, logits, interleaved, w_down, 2, gate_up_interleaved=True)
    assert torch.equal(eager, again)

    def layer(a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return moe.moe_forward(a, r, w_gate_up, w_down, 2) + a

    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(x, logits), eager + x)

    static_x, static_logits = x.clone(), logits.clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = moe.moe_forward(
            static_x, static_logits, interleaved, w_down, 2, gate_up_interleaved=True
        )
    new_x, new_logits, _, _ = _layer(200, 256, 128, 16, transposed=False)
    static_x.copy_(new_x)
    static_logits.copy_(new_logits)
    graph.replay()
    expected = moe.moe_forward(new_x, new_logits, interleaved, w_down, 2, gate_up_interleaved=True)
    assert torch.equal(static_out, expected)


def test_bad_shapes_are_explained_and_refused(moe: ModuleType) -> None:
    assert moe.moe_unsupported_shape_reason((4, 128), (8, 128, 128), (8, 64, 128), 2) is None
    reason = moe.moe_unsupported_shape_reason((4, 128), (8, 128, 128), (8, 64, 128), 9)
    assert reason is not None and "top_k" in reason
    reason = moe.moe_unsupported_shape_reason((4, 128), (8, 128, 120), (8, 60, 128), 2)
    assert reason is not None and "multiple of 8" in reason
    x, logits, w_gate_up, w_down = _layer(4, 128, 64, 8, transposed=False)
    with pytest.raises(RuntimeError, match="top_k"):
        moe.moe_forward(x, logits, w_gate_up, w_down, 9)
