"""Elementwise `sq_diff` (benchmark kernel)."""

from . import _C  # noqa: F401
