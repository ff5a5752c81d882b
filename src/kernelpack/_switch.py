"""`kernelpack._switch` is `kernelpack_runtime._switch` (kept for code written before the split)."""

from __future__ import annotations

from kernelpack._alias import alias
from kernelpack_runtime._switch import *  # noqa: F403  (for type checkers)

alias(__name__, "kernelpack_runtime._switch")
