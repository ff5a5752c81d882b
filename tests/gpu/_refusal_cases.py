"""Bad input for every op of llm_ops and moe_ops, run in a child process by test_refusals.

`python _refusal_cases.py PACKAGE` prints one JSON line per case, flushed as it goes:
{"case": name, "raised": "RuntimeError" | None, "message": first line}. A crash (the bug
these guard against: SIGSEGV instead of an exception) ends the output early; the parent
reports the case that was running. Each case goes straight to the torch op (no Python
pre-check), so the message is the kernel's own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch

Case = tuple[str, Callable[[], object]]

#: Case -> a fragment of the message it must raise, per package.
EXPECTED: dict[str, dict[str, str]] = {
    "llm_ops": {
        "rmsnorm-float64": "rmsnorm: dtype must be",
        "rmsnorm-cpu": "rmsnorm: x must be a CUDA tensor",
        "rmsnorm-weight-cpu": "rmsnorm: weight must be a CUDA tensor",
        "rmsnorm-weight-dtype": "weight must have the dtype of x",
        "rmsnorm-weight-shape": "weight must have shape [hidden] = [64]",
        "rmsnorm-non-contiguous": "rmsnorm: x must be contiguous",
        "rmsnorm-hidden": "hidden size must be in [1, ",
        "rmsnorm-residual-shape": "residual must have the shape of x",
        "silu_mul-float64": "silu_mul: dtype must be",
        "silu_mul-cpu": "silu_mul: x must be a CUDA tensor",
        "silu_mul-odd": "the last dimension of x must be even, got 7",
        "silu_mul-non-contiguous": "silu_mul: x must be contiguous",
    },
    "moe_ops": {
        "grouped_mm-float16": "grouped_mm: x must be bfloat16",
        "grouped_mm-float32": "grouped_mm: x must be bfloat16",
        "grouped_mm-cpu": "grouped_mm: x must be a CUDA tensor",
        "grouped_mm-non-contiguous": "grouped_mm: x must be contiguous",
        "grouped_mm-misaligned": "x must be 16-byte aligned",
        "grouped_mm-k": "x's last dimension (12) must be a multiple of 8",
        "grouped_mm-weight-k": "w must have 64 rows (K) per expert, got 32",
        "grouped_mm-offsets-int64": "grouped_mm: offsets must be int32",
        "grouped_mm-offsets-length": "offsets must be a contiguous [4] tensor",
        "grouped_mm-offsets-cpu": "offsets must be on the device of x",
        "grouped_mm_silu_mul-n": "N must be a multiple of 16",
        "moe_forward-top_k-high": "top_k must be in [1, min(8, experts)], got 9",
        "moe_forward-top_k-zero": "got 0",
        "moe_forward-experts": "the number of experts must be in [1, 1024], got 2000",
        "moe_forward-logits-float64": "router_logits must be float32, bfloat16 or float16",
        "moe_forward-cpu": "moe_forward: x must be a CUDA tensor",
        "moe_forward-experts-mismatch": "w_gate_up must have one matrix per expert (4), got 3",
        "grouped_mm-offsets-decreasing": "grouped_mm: an earlier call on cuda:0 got offsets that"
        " were not non-decreasing within [0, M] (an offset below the one before it)",
        "grouped_mm-offsets-negative": "within [0, M] (a negative offset)",
        "grouped_mm-offsets-past-m": "within [0, M] (an offset above M)",
        "grouped_mm_silu_mul-offsets-decreasing": "grouped_mm_silu_mul: an earlier call on cuda:0",
        "grouped_mm_fp8-bf16-x": "grouped_mm_fp8: x must be float8_e4m3fn",
        "grouped_mm_fp8-e5m2": "grouped_mm_fp8: x must be float8_e4m3fn",
        "grouped_mm_fp8-weight-dtype": "grouped_mm_fp8: w must be float8_e4m3fn",
        "grouped_mm_fp8-cpu": "grouped_mm_fp8: x must be a CUDA tensor",
        "grouped_mm_fp8-k": "grouped_mm_fp8: K (24) must be a multiple of 16",
        "grouped_mm_fp8-weight-row-major": "w must be the transposed view of a contiguous"
        " [E, N, K]",
        "grouped_mm_fp8-weight-k": "grouped_mm_fp8: w must have 128 rows (K) per expert, got 64",
        "grouped_mm_fp8-x-scale-shape": "grouped_mm_fp8: x_scale must be a contiguous float32 [M]"
        " or [M, K/128] tensor",
        "grouped_mm_fp8-x-scale-dtype": "grouped_mm_fp8: x_scale must be a contiguous float32 [M]",
        "grouped_mm_fp8-x-scale-cpu": "grouped_mm_fp8: x_scale must be on the device of x",
        "grouped_mm_fp8-w-scale-shape": "grouped_mm_fp8: w_scale must be a contiguous float32"
        " [E, N] = [4, 128] or [E, N/128, K/128] tensor",
        "grouped_mm_fp8-block-w-scale-shape": "w_scale must be a contiguous float32"
        " [E, N/128, K/128] = [4, 1, 1] tensor",
        "grouped_mm_fp8-block-k": "[M, K/128] needs K % 128 == 0",
        "grouped_mm_fp8-mixed-layouts": "x_scale is row-wise [M] but w_scale is block-wise: both"
        " must use one layout",
        "grouped_mm_fp8-offsets-int64": "grouped_mm_fp8: offsets must be int32",
        "grouped_mm_fp8-offsets-decreasing": "grouped_mm_fp8: an earlier call on cuda:0 got"
        " offsets that were not non-decreasing within [0, M] (an offset below the one before it)",
        "moe_forward_fp8-cpu": "moe_forward_fp8: x must be a CUDA tensor",
        "moe_forward_fp8-weight-bf16": "moe_forward_fp8: w_gate_up must be float8_e4m3fn",
        "moe_forward_fp8-mixed-layouts": "moe_forward_fp8: w_gate_up_scale is row-wise but"
        " w_down_scale is block-wise",
        "moe_forward_fp8-top_k-high": "moe_forward_fp8: top_k must be in [1, min(8, experts)]",
    },
}


def bf16(*shape: int, device: str = "cuda") -> torch.Tensor:
    return torch.randn(*shape, device=device).to(torch.bfloat16)


def reported_later(ops: Any, call: Callable[[], object]) -> None:
    """Offsets the kernel cannot trust are reported after the call: run it, wait for it on the
    device, then ask for the report (what `moe_ops.moe.check_offsets_errors` does)."""
    call()
    torch.cuda.synchronize()
    ops.check_offsets_errors(torch.cuda.current_device())


def llm_ops_cases() -> list[Case]:
    import llm_ops

    rms: Any = getattr(torch.ops, llm_ops.load("rmsnorm").NAMESPACE)
    silu: Any = getattr(torch.ops, llm_ops.load("silu_mul").NAMESPACE)
    x, w = bf16(4, 64), bf16(64)
    big = llm_ops.load("rmsnorm").MAX_HIDDEN + 8
    return [
        ("rmsnorm-float64", lambda: rms.forward(x.double(), w.double(), 1e-6)),
        ("rmsnorm-cpu", lambda: rms.forward(x.cpu(), w.cpu(), 1e-6)),
        ("rmsnorm-weight-cpu", lambda: rms.forward(x, w.cpu(), 1e-6)),
        ("rmsnorm-weight-dtype", lambda: rms.forward(x, w.float(), 1e-6)),
        ("rmsnorm-weight-shape", lambda: rms.forward(x, bf16(32), 1e-6)),
        ("rmsnorm-non-contiguous", lambda: rms.forward(bf16(64, 4).t(), bf16(4), 1e-6)),
        ("rmsnorm-hidden", lambda: rms.forward(bf16(2, big), bf16(big), 1e-6)),
        ("rmsnorm-residual-shape", lambda: rms.forward_residual(x, bf16(4, 32), w, 1e-6)),
        ("silu_mul-float64", lambda: silu.forward(x.double())),
        ("silu_mul-cpu", lambda: silu.forward(x.cpu())),
        ("silu_mul-odd", lambda: silu.forward(bf16(4, 7))),
        ("silu_mul-non-contiguous", lambda: silu.forward(bf16(64, 4).t())),
    ]


def moe_ops_cases() -> list[Case]:
    import moe_ops

    moe: Any = getattr(torch.ops, moe_ops.load("moe").NAMESPACE)
    x, w = bf16(16, 64), bf16(4, 64, 32)
    offsets = torch.tensor([4, 8, 12, 16], device="cuda", dtype=torch.int32)
    buffer = bf16(16 * 64 + 1)
    misaligned = buffer[1:].view(16, 64)
    logits = torch.randn(16, 4, device="cuda")
    w_up, w_down = bf16(4, 64, 64), bf16(4, 32, 64)
    many = torch.randn(16, 2000, device="cuda")
    fwd = moe.moe_forward
    decreasing, negative, past_m = (
        torch.tensor(values, device="cuda", dtype=torch.int32)
        for values in ([4, 12, 8, 16], [-4, 8, 12, 16], [4, 8, 12, 100])
    )
    cpu = [t.cpu() for t in (x, logits, w_up, w_down)]

    def fp8(*shape: int) -> torch.Tensor:
        return bf16(*shape).to(torch.float8_e4m3fn)

    def fp8_k_major(experts: int, k: int, n: int) -> torch.Tensor:
        return fp8(experts, n, k).transpose(1, 2)  # [E, K, N], K-major

    def ones(*shape: int) -> torch.Tensor:
        return torch.ones(*shape, device="cuda")

    mm8 = moe.grouped_mm_fp8
    xq, wq = fp8(16, 128), fp8_k_major(4, 128, 128)
    xs, ws, xsb, wsb = ones(16), ones(4, 128), ones(16, 1), ones(4, 1, 1)
    xh = bf16(16, 128)
    up8, down8 = fp8_k_major(4, 128, 256), fp8_k_major(4, 128, 128)
    fwd8 = moe.moe_forward_fp8
    up_s, down_s = ones(4, 256), ones(4, 128)
    fp8_cases: list[Case] = [
        ("grouped_mm_fp8-bf16-x", lambda: mm8(xh, wq, xs, ws, offsets)),
        ("grouped_mm_fp8-e5m2", lambda: mm8(xh.to(torch.float8_e5m2), wq, xs, ws, offsets)),
        ("grouped_mm_fp8-weight-dtype", lambda: mm8(xq, bf16(4, 128, 128), xs, ws, offsets)),
        ("grouped_mm_fp8-cpu", lambda: mm8(*(t.cpu() for t in (xq, wq, xs, ws, offsets)))),
        ("grouped_mm_fp8-k", lambda: mm8(fp8(16, 24), fp8_k_major(4, 24, 128), xs, ws, offsets)),
        ("grouped_mm_fp8-weight-row-major", lambda: mm8(xq, fp8(4, 128, 128), xs, ws, offsets)),
        ("grouped_mm_fp8-weight-k", lambda: mm8(xq, fp8_k_major(4, 64, 128), xs, ws, offsets)),
        ("grouped_mm_fp8-x-scale-shape", lambda: mm8(xq, wq, ones(8), ws, offsets)),
        ("grouped_mm_fp8-x-scale-dtype", lambda: mm8(xq, wq, xs.double(), ws, offsets)),
        ("grouped_mm_fp8-x-scale-cpu", lambda: mm8(xq, wq, xs.cpu(), ws, offsets)),
        ("grouped_mm_fp8-w-scale-shape", lambda: mm8(xq, wq, xs, ones(4, 64), offsets)),
        ("grouped_mm_fp8-block-w-scale-shape", lambda: mm8(xq, wq, xsb, ones(4, 1, 2), offsets)),
        (
            "grouped_mm_fp8-block-k",
            lambda: mm8(fp8(16, 144), fp8_k_major(4, 144, 128), xsb, wsb, offsets),
        ),
        ("grouped_mm_fp8-mixed-layouts", lambda: mm8(xq, wq, xs, wsb, offsets)),
        ("grouped_mm_fp8-offsets-int64", lambda: mm8(xq, wq, xs, ws, offsets.long())),
        (
            "grouped_mm_fp8-offsets-decreasing",
            lambda: reported_later(moe, lambda: mm8(xq, wq, xs, ws, decreasing)),
        ),
        (
            "moe_forward_fp8-cpu",
            lambda: fwd8(*(t.cpu() for t in (xh, logits, up8, up_s, down8, down_s)), 2),
        ),
        (
            "moe_forward_fp8-weight-bf16",
            lambda: fwd8(xh, logits, bf16(4, 128, 256), up_s, down8, down_s, 2),
        ),
        (
            "moe_forward_fp8-mixed-layouts",
            lambda: fwd8(xh, logits, up8, up_s, down8, wsb, 2),
        ),
        ("moe_forward_fp8-top_k-high", lambda: fwd8(xh, logits, up8, up_s, down8, down_s, 9)),
    ]
    bf16_cases: list[Case] = [
        ("grouped_mm-float16", lambda: moe.grouped_mm(x.half(), w.half(), offsets)),
        ("grouped_mm-float32", lambda: moe.grouped_mm(x.float(), w.float(), offsets)),
        ("grouped_mm-cpu", lambda: moe.grouped_mm(x.cpu(), w.cpu(), offsets.cpu())),
        ("grouped_mm-non-contiguous", lambda: moe.grouped_mm(bf16(64, 16).t(), w, offsets)),
        ("grouped_mm-misaligned", lambda: moe.grouped_mm(misaligned, w, offsets)),
        ("grouped_mm-k", lambda: moe.grouped_mm(bf16(16, 12), bf16(4, 12, 32), offsets)),
        ("grouped_mm-weight-k", lambda: moe.grouped_mm(x, bf16(4, 32, 32), offsets)),
        ("grouped_mm-offsets-int64", lambda: moe.grouped_mm(x, w, offsets.long())),
        ("grouped_mm-offsets-length", lambda: moe.grouped_mm(x, w, offsets[:3])),
        ("grouped_mm-offsets-cpu", lambda: moe.grouped_mm(x, w, offsets.cpu())),
        ("grouped_mm_silu_mul-n", lambda: moe.grouped_mm_silu_mul(x, bf16(4, 64, 8), offsets)),
        ("moe_forward-top_k-high", lambda: fwd(x, logits, w_up, w_down, 9)),
        ("moe_forward-top_k-zero", lambda: fwd(x, logits, w_up, w_down, 0)),
        ("moe_forward-experts", lambda: fwd(x, many, w_up, w_down, 2)),
        ("moe_forward-logits-float64", lambda: fwd(x, logits.double(), w_up, w_down, 2)),
        ("moe_forward-cpu", lambda: fwd(*cpu, 2)),
        ("moe_forward-experts-mismatch", lambda: fwd(x, logits, bf16(3, 64, 64), w_down, 2)),
        (
            "grouped_mm-offsets-decreasing",
            lambda: reported_later(moe, lambda: moe.grouped_mm(x, w, decreasing)),
        ),
        (
            "grouped_mm-offsets-negative",
            lambda: reported_later(moe, lambda: moe.grouped_mm(x, w, negative)),
        ),
        (
            "grouped_mm-offsets-past-m",
            lambda: reported_later(moe, lambda: moe.grouped_mm(x, w, past_m)),
        ),
        (
            "grouped_mm_silu_mul-offsets-decreasing",
            lambda: reported_later(moe, lambda: moe.grouped_mm_silu_mul(x, w_up, decreasing)),
        ),
    ]
    return [*bf16_cases, *fp8_cases]


CASES: dict[str, Callable[[], list[Case]]] = {"llm_ops": llm_ops_cases, "moe_ops": moe_ops_cases}


def main(package: str) -> None:
    for name, call in CASES[package]():
        print(json.dumps({"case": name, "start": True}), flush=True)
        try:
            call()
        except RuntimeError as exc:
            raised, message = type(exc).__name__, (str(exc).splitlines() or [""])[0]
        else:
            raised, message = None, ""
        torch.cuda.synchronize()
        print(json.dumps({"case": name, "raised": raised, "message": message}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
