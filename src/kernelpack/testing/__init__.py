"""`kernelpack.testing` is `kernelpack_runtime.testing` (kept for code written before the
split); `kernelpack.testing.fakes` is the runtime's module."""

from __future__ import annotations

from kernelpack._alias import alias

alias(f"{__name__}.fakes", "kernelpack_runtime.testing.fakes")
alias(__name__, "kernelpack_runtime.testing")
