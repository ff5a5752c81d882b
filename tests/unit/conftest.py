"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import no_device_probe


@pytest.fixture
def no_gpu() -> Iterator[None]:
    """The registry's device probe says the driver reports no GPU, for the test's length."""
    previous = set_default_probe(no_device_probe("the NVIDIA driver reports no GPU"))
    yield
    set_default_probe(previous)
