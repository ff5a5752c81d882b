"""float32 references of moe_ops' ops, and the inputs the moe GPU tests and benchmark share."""

from __future__ import annotations

import torch

__all__ = ["grouped_reference", "moe_reference", "offsets_from_counts", "weights"]


def offsets_from_counts(counts: list[int], device: str = "cuda") -> torch.Tensor:
    """torch._grouped_mm's offsets: int32 cumulative row ends of each group."""
    ends = torch.tensor(counts, dtype=torch.int64).cumsum(0)
    return ends.to(device=device, dtype=torch.int32)


def weights(experts: int, k: int, n: int, *, transposed: bool, scale: float) -> torch.Tensor:
    """Random bf16 [E, K, N]: contiguous, or the transposed view of a contiguous [E, N, K]."""
    if transposed:
        w = (torch.randn(experts, n, k, device="cuda") * scale).to(torch.bfloat16)
        return w.transpose(-2, -1)
    return (torch.randn(experts, k, n, device="cuda") * scale).to(torch.bfloat16)


def grouped_reference(x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """float32 x[g rows] @ w[g] per group (rows past the last group: zeros)."""
    out = torch.zeros(x.shape[0], w.shape[2], device=x.device, dtype=torch.float32)
    start = 0
    for g, m in enumerate(counts):
        if m:
            out[start : start + m] = x[start : start + m].float() @ w[g].float()
        start += m
    return out


def moe_reference(
    x: torch.Tensor,
    logits: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """The expert layer in float32: softmax top-k (renormalised), SwiGLU experts, combine.

    The intermediate activation is rounded to bf16 between the two GEMMs, as every bf16
    implementation (torch._grouped_mm's included) stores it."""
    probs = torch.softmax(logits.float(), dim=-1)
    top_w, top_e = probs.topk(top_k, dim=-1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    inter = w_gate_up.shape[2] // 2
    out = torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    xf = x.float()
    for e in range(w_gate_up.shape[0]):
        token, slot = (top_e == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        gate_up = xf[token] @ w_gate_up[e].float()
        h = torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        y = h.to(torch.bfloat16).float() @ w_down[e].float()
        out.index_add_(0, token, y * top_w[token, slot, None])
    return out
