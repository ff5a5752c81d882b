"""`kernelpack.runtime` is `kernelpack_runtime` (kept for code written before the split); its
submodules (`kernelpack.runtime.registry`, …) are the runtime's own modules."""

from __future__ import annotations

from kernelpack._alias import alias
from kernelpack_runtime import *  # noqa: F403  (for type checkers)

for _name in ("checks", "device", "loader", "registry", "status", "torchinfo"):
    alias(f"{__name__}.{_name}", f"kernelpack_runtime.{_name}")
alias(__name__, "kernelpack_runtime")
