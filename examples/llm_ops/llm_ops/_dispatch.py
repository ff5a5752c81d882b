"""Which of its three paths a wrapper takes for a call (one rule for every op of llm_ops).

Each op comes from C++ as ``forward``, with its autograd formula registered in Python
(``torch.library.register_autograd``), and as ``forward_nograd``, the same function with
none (rmsnorm also as ``infer``, without the rstd the backward needs).
A Python autograd kernel is a round trip from the dispatcher into Python and back on every
call, graph or not (6-12 us of host time per call on the H200 machine's CPU,
``benchmarks/results/host-overhead-h200-ab.json``); the dispatcher's own C++ autograd
fallback, which ``forward_nograd`` gets, passes a call that records nothing straight on to
the kernel. So, per call:

- `PLAIN` (eager, and autograd records nothing: grad mode off or no input requires grad):
  ``forward_nograd`` (rmsnorm: ``infer``), called directly;
- `RECORD` (eager, and a graph is recorded): the op's ``torch.autograd.Function``, whose
  forward calls ``forward_nograd`` and whose backward is the op's backward kernel, the same
  formula as the registered one with one Python layer instead of the dispatcher's round trip;
- `COMPILING` (torch.compile is tracing): ``forward``, so the traced graph holds the
  registered op with its registered autograd formula.
"""

from __future__ import annotations

import torch

__all__ = ["COMPILING", "PLAIN", "RECORD", "path"]

PLAIN = 0
RECORD = 1
COMPILING = 2


def path(*tensors: torch.Tensor) -> int:
    """`PLAIN`, `RECORD` or `COMPILING` for an op on `tensors` (see the module's text)."""
    if torch.compiler.is_compiling():
        return COMPILING
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return RECORD
    return PLAIN
