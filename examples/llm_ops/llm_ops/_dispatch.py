"""How the wrappers call their ops when no gradient is needed: below the autograd keys.

`torch.library.register_autograd` puts a Python function at the op's Autograd dispatch key;
every call goes from the dispatcher into Python and back, even when nothing requires a
gradient (6-12 us of host time per call on the H200 machine's CPU, measured in
`benchmarks/results/host-overhead-h200-ab.json`). When autograd would
not record anything -- grad mode off, or no input requiring grad -- that function only
re-dispatches below autograd (`torch._library.autograd`'s ``forward_no_grad``); the wrappers
do that step themselves, which skips the round trip. While torch.compile traces, the
wrappers take the ordinary path, so the traced graph is the same as before.
"""

from __future__ import annotations

import torch

__all__ = ["below_autograd", "no_autograd"]

#: Excludes the autograd dispatch keys for the block (what the autograd kernel itself uses).
below_autograd = torch._C._AutoDispatchBelowAutograd


def no_autograd(*tensors: torch.Tensor) -> bool:
    """True when autograd would record nothing for an op on `tensors` (eager mode only)."""
    if torch.compiler.is_compiling():
        return False
    if not torch.is_grad_enabled():
        return True
    return not any(t.requires_grad for t in tensors)
