"""Elementwise `relu_mul` (benchmark kernel)."""

from . import _C  # noqa: F401
