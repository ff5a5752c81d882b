"""llm_ops' two kernels together: torch.compile(fullgraph=True) and CUDA-graph replay."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch
from _gpu_helpers import assert_matches

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.kernel("llm_ops.rmsnorm"),
    pytest.mark.kernel("llm_ops.silu_mul"),
]

EPS = 1e-6
TOKENS, HIDDEN, FFN = 96, 1024, 1536

Block = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _block(rmsnorm: ModuleType, silu_mul: ModuleType) -> Block:
    """A pre-norm MLP step: fused residual + RMSNorm, up-projection, SiLU-and-multiply."""

    def block(
        x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, up: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = rmsnorm.rms_norm(x, w, EPS, residual=residual)
        return silu_mul.silu_mul(y @ up), h

    return block


def _reference_block(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x.double() + residual.double()
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    gate, lin = (y @ up.double()).chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * lin, h


def _block_inputs(dtype: torch.dtype, requires_grad: bool) -> list[torch.Tensor]:
    x = torch.randn(TOKENS, HIDDEN, device="cuda").to(dtype)
    residual = torch.randn(TOKENS, HIDDEN, device="cuda").to(dtype)
    w = (torch.rand(HIDDEN, device="cuda") + 0.5).to(dtype)
    up = (torch.randn(HIDDEN, 2 * FFN, device="cuda") / HIDDEN**0.5).to(dtype)
    return [t.requires_grad_(requires_grad) for t in (x, residual, w, up)]


def test_compiled_block_with_fullgraph_matches_eager_forward_and_backward(
    rmsnorm: ModuleType, silu_mul: ModuleType
) -> None:
    torch._dynamo.reset()
    block = _block(rmsnorm, silu_mul)
    compiled = torch.compile(block, fullgraph=True)
    eager_inputs = _block_inputs(torch.bfloat16, requires_grad=True)
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]

    eager_out, eager_h = block(*eager_inputs)
    out, h = compiled(*compiled_inputs)
    ref_out, ref_h = _reference_block(*eager_inputs)
    assert_matches(out, ref_out, torch.bfloat16, "compiled out")
    assert_matches(h, ref_h, torch.bfloat16, "compiled new residual")

    grads = [torch.randn_like(out), torch.randn_like(h)]
    torch.autograd.backward([eager_out, eager_h], grads)
    torch.autograd.backward([out, h], grads)
    for name, eager_t, compiled_t in zip(
        ("x", "residual", "weight", "up"), eager_inputs, compiled_inputs, strict=True
    ):
        assert eager_t.grad is not None and compiled_t.grad is not None
        torch.testing.assert_close(compiled_t.grad, eager_t.grad, msg=f"grad {name}")


def test_cuda_graph_replay_recomputes_both_ops_on_new_inputs(
    rmsnorm: ModuleType, silu_mul: ModuleType
) -> None:
    block = _block(rmsnorm, silu_mul)
    static = _block_inputs(torch.bfloat16, requires_grad=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            block(*static)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_h = block(*static)

    for _ in range(3):
        fresh = _block_inputs(torch.bfloat16, requires_grad=False)
        for dst, src in zip(static, fresh, strict=True):
            dst.copy_(src)
        static_out.fill_(float("nan"))
        static_h.fill_(float("nan"))
        graph.replay()
        eager_out, eager_h = block(*fresh)
        assert torch.equal(static_out, eager_out)
        assert torch.equal(static_h, eager_h)


def test_cuda_graph_replay_of_backward_ops(rmsnorm: ModuleType, silu_mul: ModuleType) -> None:
    rms_ops = getattr(torch.ops, rmsnorm.NAMESPACE)
    silu_ops = getattr(torch.ops, silu_mul.NAMESPACE)
    x, residual, w, _ = _block_inputs(torch.bfloat16, requires_grad=False)
    grad_y = torch.randn_like(x)

    def step() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, h, rstd = rms_ops.forward_residual(x, residual, w, EPS)
        grad_x, grad_w = rms_ops.backward(grad_y, h, w, rstd, grad_y)
        return grad_x, grad_w, silu_ops.backward(grad_y[:, : HIDDEN // 2].contiguous(), y)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = step()

    x.copy_(torch.randn_like(x))
    grad_y.copy_(torch.randn_like(grad_y))
    for t in static:
        t.fill_(float("nan"))
    graph.replay()
    for got, want in zip(static, step(), strict=True):
        assert torch.equal(got, want)
