"""kernelpack's pytest plugin (entry point `pytest11`)."""

from __future__ import annotations
