"""Elementwise `lerp` (benchmark kernel)."""

from . import _C  # noqa: F401
