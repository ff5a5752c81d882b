"""llm_ops.rmsnorm on the GPU: forward and backward against a float64 reference."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from _gpu_helpers import DTYPES, assert_matches, nbytes, poison_allocator

pytestmark = [pytest.mark.gpu, pytest.mark.kernel("llm_ops.rmsnorm")]

EPS = 1e-6

# Odd sizes, sizes that are not multiples of 8, leading dimensions, the largest hidden size.
SHAPES = [
    (1, 1),
    (1, 2),
    (3, 7),
    (5, 100),
    (17, 1000),
    (33, 768),
    (1000, 128),
    (64, 2048),
    (2, 3, 4096),
    (257, 4104),
    (7, 5003),
    (4, 8192),
    (2, 12345),
    (1, 16383),
    (3, 16384),
    # Decode batches: the one-launch cluster backwards. Row-split at 1 row (dw stored
    # directly) and where a row does not split into whole warps (9 x 2056); column-split in
    # clusters of 16 (16 x 4096, 13 x 8192, 2 x 3 x 4096) or of 8 (16 x 2048: a 16th of the
    # row is half a warp); odd hidden sizes beside them.
    (1, 4096),
    (16, 4096),
    (16, 2048),
    (9, 2056),
    (13, 8192),
    (16, 4097),
    (1, 4095),
]


# A hidden size of 1 has a vanishing gradient (x / |x|): relative errors mean nothing there.
BACKWARD_SHAPES = [shape for shape in SHAPES if shape[-1] > 1]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x = (torch.randn(shape, device="cuda") * 2 + 0.5).to(dtype)
    w = (torch.rand(shape[-1], device="cuda") + 0.5).to(dtype)
    return x, w


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def _ops(rmsnorm: ModuleType) -> object:
    return getattr(torch.ops, rmsnorm.NAMESPACE)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_float64_reference(
    rmsnorm: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, w = _inputs(shape, dtype)
    x_before = x.clone()
    poison_allocator(*nbytes(x, x))
    y = rmsnorm.rms_norm(x, w, EPS)
    assert y.dtype == dtype
    assert_matches(y, _reference(x, w), dtype, "y")
    assert torch.equal(x, x_before), "the input was modified"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_residual_forward_returns_norm_of_sum_and_the_sum(
    rmsnorm: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, w = _inputs(shape, dtype)
    residual = torch.randn(shape, device="cuda").to(dtype)
    poison_allocator(*nbytes(x, x, x))
    y, h = rmsnorm.rms_norm(x, w, EPS, residual=residual)
    h_ref = x.double() + residual.double()
    assert_matches(h, h_ref, dtype, "new residual")
    assert_matches(y, _reference(h_ref, w), dtype, "y")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=str)
def test_backward_matches_float64_autograd(
    rmsnorm: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, w = _inputs(shape, dtype)
    grad = torch.randn(shape, device="cuda").to(dtype)
    x.requires_grad_()
    w.requires_grad_()
    y = rmsnorm.rms_norm(x, w, EPS)
    poison_allocator(*nbytes(x, w, x, w))
    y.backward(grad)

    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    _reference(x64, w64).backward(grad.double())
    assert x.grad is not None and w.grad is not None
    assert_matches(x.grad, x64.grad, dtype, "grad x")
    assert_matches(w.grad, w64.grad, dtype, "grad weight")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=str)
def test_residual_backward_reaches_x_residual_and_weight(
    rmsnorm: ModuleType, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, w = _inputs(shape, dtype)
    residual = torch.randn(shape, device="cuda").to(dtype)
    grad_y = torch.randn(shape, device="cuda").to(dtype)
    grad_h = torch.randn(shape, device="cuda").to(dtype)
    for t in (x, w, residual):
        t.requires_grad_()
    y, h = rmsnorm.rms_norm(x, w, EPS, residual=residual)
    poison_allocator(*nbytes(x, w, x, w))
    torch.autograd.backward([y, h], [grad_y, grad_h])

    x64, w64, r64 = (t.detach().double().requires_grad_() for t in (x, w, residual))
    h64 = x64 + r64
    torch.autograd.backward([_reference(h64, w64), h64], [grad_y.double(), grad_h.double()])
    assert x.grad is not None and w.grad is not None and residual.grad is not None
    assert_matches(x.grad, x64.grad, dtype, "grad x")
    assert_matches(residual.grad, r64.grad, dtype, "grad residual")
    assert_matches(w.grad, w64.grad, dtype, "grad weight")


def test_non_contiguous_input_gives_the_contiguous_result(rmsnorm: ModuleType) -> None:
    wide, w = _inputs((64, 4096), torch.bfloat16)
    x = wide[:, ::2]
    w = w[: x.shape[-1]]
    assert torch.equal(rmsnorm.rms_norm(x, w, EPS), rmsnorm.rms_norm(x.contiguous(), w, EPS))


def test_empty_batch_gives_empty_output_and_zero_weight_grad(rmsnorm: ModuleType) -> None:
    x, w = _inputs((0, 256), torch.bfloat16)
    x.requires_grad_()
    w.requires_grad_()
    y = rmsnorm.rms_norm(x, w, EPS)
    assert y.shape == (0, 256)
    y.sum().backward()
    assert w.grad is not None and torch.equal(w.grad, torch.zeros_like(w))


def test_hidden_above_max_is_refused_with_a_reason(rmsnorm: ModuleType) -> None:
    hidden = rmsnorm.MAX_HIDDEN + 8
    assert rmsnorm.unsupported_shape_reason((2, hidden), torch.bfloat16) is not None
    x, w = _inputs((2, hidden), torch.bfloat16)
    with pytest.raises(RuntimeError, match="hidden size"):
        rmsnorm.rms_norm(x, w, EPS)


def test_unsupported_dtype_is_refused_with_a_reason(rmsnorm: ModuleType) -> None:
    assert rmsnorm.unsupported_shape_reason((2, 64), torch.float64) is not None
    x, w = _inputs((2, 64), torch.float64)
    with pytest.raises(RuntimeError, match="dtype"):
        rmsnorm.rms_norm(x, w, EPS)


def test_supported_shape_has_no_reason(rmsnorm: ModuleType) -> None:
    assert rmsnorm.unsupported_shape_reason((8, 4096), torch.bfloat16) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_forward(rmsnorm: ModuleType, dtype: torch.dtype) -> None:
    x, w = _inputs((6, 520), dtype)
    x.requires_grad_()
    w.requires_grad_()
    torch.library.opcheck(_ops(rmsnorm).forward.default, (x, w, EPS))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_forward_residual(rmsnorm: ModuleType, dtype: torch.dtype) -> None:
    x, w = _inputs((6, 520), dtype)
    residual = torch.randn_like(x)
    for t in (x, w, residual):
        t.requires_grad_()
    torch.library.opcheck(_ops(rmsnorm).forward_residual.default, (x, residual, w, EPS))


@pytest.mark.parametrize("with_residual_grad", [False, True])
def test_opcheck_backward(rmsnorm: ModuleType, with_residual_grad: bool) -> None:
    x, w = _inputs((6, 520), torch.bfloat16)
    _, rstd = _ops(rmsnorm).forward(x, w, EPS)
    grad = torch.randn_like(x)
    residual_grad = torch.randn_like(x) if with_residual_grad else None
    torch.library.opcheck(_ops(rmsnorm).backward.default, (grad, x, w, rstd, residual_grad))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_nograd_ops(rmsnorm: ModuleType, dtype: torch.dtype) -> None:
    # The ops without an autograd kernel, as the wrapper calls them: nothing requires grad.
    x, w = _inputs((6, 520), dtype)
    residual = torch.randn_like(x)
    torch.library.opcheck(_ops(rmsnorm).forward_nograd.default, (x, w, EPS))
    torch.library.opcheck(_ops(rmsnorm).forward_residual_nograd.default, (x, residual, w, EPS))
    torch.library.opcheck(_ops(rmsnorm).infer.default, (x, w, EPS))
    torch.library.opcheck(_ops(rmsnorm).infer_residual.default, (x, residual, w, EPS))


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_the_three_call_paths_give_one_result(rmsnorm: ModuleType, residual: bool) -> None:
    # llm_ops._dispatch: the infer op (nothing recorded), the autograd.Function (eager graph)
    # and the registered op with its registered autograd formula (what torch.compile traces)
    # must give bit-identical outputs and gradients.
    x, w = _inputs((37, 4096), torch.bfloat16)
    r = torch.randn_like(x)
    grads = [torch.randn_like(x), torch.randn_like(x)]
    ops = _ops(rmsnorm)

    def run(how: str) -> list[torch.Tensor]:
        xs, ws, rs = (t.detach().clone().requires_grad_(how != "plain") for t in (x, w, r))
        if how == "registered":
            outs = (
                ops.forward_residual(xs, rs, ws, EPS)[:2]
                if residual
                else ops.forward(xs, ws, EPS)[:1]
            )
        else:
            got = (
                rmsnorm.rms_norm(xs, ws, EPS, residual=rs)
                if residual
                else rmsnorm.rms_norm(xs, ws, EPS)
            )
            outs = got if residual else (got,)
        result = [o.detach() for o in outs]
        if how != "plain":
            torch.autograd.backward(list(outs), grads[: len(outs)])
            result += [t.grad for t in ((xs, rs, ws) if residual else (xs, ws))]
        return result

    plain, recorded, registered = run("plain"), run("recorded"), run("registered")
    for a, b in zip(plain, recorded, strict=False):
        assert torch.equal(a, b)
    assert len(recorded) == len(registered)
    for a, b in zip(recorded, registered, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)


def test_a_graph_through_only_the_sum_reaches_x_and_residual(rmsnorm: ModuleType) -> None:
    # With only the new residual used, the normalised output gets no gradient (None).
    x, w = _inputs((8, 256), torch.bfloat16)
    r = torch.randn_like(x)
    for t in (x, w, r):
        t.requires_grad_()
    _, h = rmsnorm.rms_norm(x, w, EPS, residual=r)
    grad_h = torch.randn_like(h)
    h.backward(grad_h)
    assert x.grad is not None and r.grad is not None and w.grad is not None
    assert torch.equal(x.grad, grad_h) and torch.equal(r.grad, grad_h)
    assert torch.equal(w.grad, torch.zeros_like(w))
