"""Elementwise `axpy` (benchmark kernel)."""

from . import _C  # noqa: F401
