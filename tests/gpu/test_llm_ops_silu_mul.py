"""llm_ops.silu_mul on the GPU: forward and backward against a float64 reference."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from _gpu_helpers import DTYPES, assert_matches, nbytes, poison_allocator

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("llm_ops.silu_mul")]

# Shapes of x ([..., 2d]): odd d, d not a multiple of 8, leading dimensions, large rows.
SHAPES = [
    (1, 2),
    (3, 14),
    (5, 202),
    (17, 2000),
    (1000, 256),
    (64, 4096),
    (2, 3, 8192),
    (9, 8198),
    (7, 10006),
    (4, 16384),
    (3, 2 * 14336),
    (70000, 16),
    # Decode batches (one vector a thread on small CTAs), odd d beside them.
    (1, 8192),
    (16, 8192),
    (16, 8194),
    (1, 4098),
]


def _reference(x: torch.Tensor) -> torch.Tensor:
    x64 = x.double()
    gate, up = x64.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def _input(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(shape, device="cuda") * 3).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_float64_reference(
    silu_mul: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = _input(shape, dtype)
    x_before = x.clone()
    poison_allocator(*nbytes(x))
    out = silu_mul.silu_mul(x)
    assert out.dtype == dtype
    assert_matches(out, _reference(x), dtype, "out")
    assert torch.equal(x, x_before), "the input was modified"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backward_matches_float64_autograd(
    silu_mul: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = _input(shape, dtype).requires_grad_()
    out = silu_mul.silu_mul(x)
    grad = torch.randn_like(out)
    poison_allocator(*nbytes(x))
    out.backward(grad)

    x64 = x.detach().double().requires_grad_()
    _reference(x64).backward(grad.double())
    assert x.grad is not None
    assert_matches(x.grad, x64.grad, dtype, "grad x")


def test_non_contiguous_input_gives_the_contiguous_result(silu_mul: ModuleType) -> None:
    x = _input((64, 8192), torch.bfloat16)[:, ::2]
    assert torch.equal(silu_mul.silu_mul(x), silu_mul.silu_mul(x.contiguous()))


def test_empty_batch_gives_empty_output(silu_mul: ModuleType) -> None:
    x = _input((0, 64), torch.bfloat16)
    assert silu_mul.silu_mul(x).shape == (0, 32)


def test_odd_last_dimension_is_refused_with_a_reason(silu_mul: ModuleType) -> None:
    assert silu_mul.unsupported_shape_reason((4, 7), torch.bfloat16) is not None
    with pytest.raises(RuntimeError, match="even"):
        silu_mul.silu_mul(_input((4, 7), torch.bfloat16))


def test_unsupported_dtype_is_refused_with_a_reason(silu_mul: ModuleType) -> None:
    assert silu_mul.unsupported_shape_reason((4, 8), torch.float64) is not None
    with pytest.raises(RuntimeError, match="dtype"):
        silu_mul.silu_mul(_input((4, 8), torch.float64))


def test_supported_shape_has_no_reason(silu_mul: ModuleType) -> None:
    assert silu_mul.unsupported_shape_reason((8, 28672), torch.bfloat16) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_forward(silu_mul: ModuleType, dtype: torch.dtype) -> None:
    x = _input((6, 1030), dtype).requires_grad_()
    torch.library.opcheck(getattr(torch.ops, silu_mul.NAMESPACE).forward.default, (x,))


def test_opcheck_backward(silu_mul: ModuleType) -> None:
    x = _input((6, 1030), torch.bfloat16)
    grad = torch.randn((6, 515), device="cuda").to(torch.bfloat16)
    torch.library.opcheck(getattr(torch.ops, silu_mul.NAMESPACE).backward.default, (grad, x))


def test_nograd_op_and_both_graph_paths_give_one_result(silu_mul: ModuleType) -> None:
    # llm_ops._dispatch: the nograd op, the autograd.Function and the registered op with its
    # registered autograd formula give bit-identical outputs and gradients.
    ops = getattr(torch.ops, silu_mul.NAMESPACE)
    x = torch.randn(37, 2 * 1408, device="cuda").to(torch.bfloat16)
    grad = torch.randn(37, 1408, device="cuda").to(torch.bfloat16)
    torch.library.opcheck(ops.forward_nograd.default, (x,))
    plain = silu_mul.silu_mul(x)
    results = []
    for fn in (silu_mul.silu_mul, ops.forward.default):
        xs = x.clone().requires_grad_()
        out = fn(xs)
        out.backward(grad)
        results.append((out.detach(), xs.grad))
    (a, ga), (b, gb) = results
    assert torch.equal(plain, a) and torch.equal(a, b)
    assert ga is not None and gb is not None and torch.equal(ga, gb)
