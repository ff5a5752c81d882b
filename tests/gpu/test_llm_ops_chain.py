"""llm_ops kernels back to back: each launch may start before the one it depends on has
finished (programmatic dependent launch, `csrc/launch.cuh`), and must still read that one's
output and never write over a buffer it still reads.

Each chain feeds every op's output into the next op, frees each input as soon as it is used
(so the caching allocator hands its memory to the next op's output while the op that read it
may still be running), and is compared bit for bit with the same chain run one op at a time
with a device synchronisation after each (where no two kernels can overlap): the kernels
are deterministic, so any overlap that reads early or writes late changes bits. Eager and
CUDA-graph replay, at a decode size (one CTA a row, single wave), a cluster backward (16
rows), and sizes of several waves and two kernels (the staged backward and its dw reduce).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.kernel("llm_ops.rmsnorm"),
    pytest.mark.kernel("llm_ops.silu_mul"),
]

EPS = 1e-6
STEPS = 24
SHAPES = [(1, 4096), (16, 4096), (300, 2048), (4096, 4096)]

Step = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def _steps(rmsnorm: ModuleType, silu_mul: ModuleType) -> list[Step]:
    """One round of the chain: each step takes the state and returns the next one, every
    output an input of a later step."""
    rms_ops = getattr(torch.ops, rmsnorm.NAMESPACE)
    silu_ops = getattr(torch.ops, silu_mul.NAMESPACE)

    def forward(s: list[torch.Tensor]) -> list[torch.Tensor]:
        x, r, w = s
        y, _ = rms_ops.forward(x, w, EPS)
        return [y, r, w]

    def residual(s: list[torch.Tensor]) -> list[torch.Tensor]:
        x, r, w = s
        y, h, _ = rms_ops.forward_residual(x, r, w, EPS)
        return [y, h, w]

    def backward(s: list[torch.Tensor]) -> list[torch.Tensor]:
        x, r, w = s
        _, rstd = rms_ops.forward(r, w, EPS)
        dx, dw = rms_ops.backward(x, r, w, rstd, None)[:2]
        # dw (one row) becomes the weight, kept within [0.5, 1.5]: the next step reads what
        # the backward (or its dw reduce) wrote.
        return [dx, r, (torch.sigmoid(dw.float()) + 0.5).to(dw.dtype)]

    def silu(s: list[torch.Tensor]) -> list[torch.Tensor]:
        x, r, w = s
        out = silu_mul.silu_mul(torch.cat([x, r], dim=-1))
        return [out, r, w]

    def silu_backward(s: list[torch.Tensor]) -> list[torch.Tensor]:
        x, r, w = s
        dxr = silu_ops.backward(x, torch.cat([r, x], dim=-1))
        d = x.shape[-1]
        return [dxr[..., :d].contiguous(), dxr[..., d:].contiguous(), w]

    return [forward, residual, backward, silu, silu_backward]


def _chain(steps: list[Step], state: list[torch.Tensor], sync: bool) -> list[torch.Tensor]:
    for i in range(STEPS):
        state = steps[i % len(steps)](state)
        if sync:
            torch.cuda.synchronize()
    return state


def _inputs(tokens: int, hidden: int) -> list[torch.Tensor]:
    x = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    r = torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16)
    w = (torch.rand(hidden, device="cuda") + 0.5).to(torch.bfloat16)
    return [x, r, w]


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_eager_chain_is_bit_identical_to_the_chain_run_one_kernel_at_a_time(
    rmsnorm: ModuleType, silu_mul: ModuleType, tokens: int, hidden: int
) -> None:
    steps = _steps(rmsnorm, silu_mul)
    inputs = _inputs(tokens, hidden)
    expected = _chain(steps, [t.clone() for t in inputs], sync=True)
    for _ in range(3):
        got = _chain(steps, [t.clone() for t in inputs], sync=False)
        torch.cuda.synchronize()
        for e, g in zip(expected, got, strict=True):
            assert torch.isfinite(g.float()).all()
            assert torch.equal(e, g)


@pytest.mark.parametrize(("tokens", "hidden"), SHAPES)
def test_graph_replay_of_a_chain_is_bit_identical_to_the_chain_run_one_kernel_at_a_time(
    rmsnorm: ModuleType, silu_mul: ModuleType, tokens: int, hidden: int
) -> None:
    steps = _steps(rmsnorm, silu_mul)
    static = _inputs(tokens, hidden)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _chain(steps, [t.clone() for t in static], sync=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _chain(steps, list(static), sync=False)
    for _ in range(3):
        fresh = _inputs(tokens, hidden)
        for s, f in zip(static, fresh, strict=True):
            s.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        expected = _chain(steps, [f.clone() for f in fresh], sync=True)
        for e, g in zip(expected, out, strict=True):
            assert torch.equal(e, g)
