"""Fixtures of the GPU tests: the llm_ops and moe_ops kernels, loaded through the packages'
registries.

These tests run on a machine with an NVIDIA GPU (the `gpu` marker) and installed packages.
kernelpack's pytest plugin skips a test whose `kernel(...)` is unavailable, with the reason,
and `--kernels-require` turns that skip into a failure on GPU runners. The fixtures below skip
on their own too, so the files also run where the plugin is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")


def pytest_configure(config: pytest.Config) -> None:
    # Harmless when kernelpack's plugin registers them too; needed under --strict-markers
    # where it is not installed.
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU")
    config.addinivalue_line("markers", "kernel(name): needs kernel `package.kernel` to be usable")


def _load(kernel: str, package: str = "llm_ops") -> ModuleType:
    pkg = pytest.importorskip(package)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    reason = pkg.unavailable_reason(kernel)
    if reason is not None:
        pytest.skip(f"{package}.{kernel}: {reason}")
    module: ModuleType = pkg.load(kernel)
    return module


@pytest.fixture(scope="session")
def rmsnorm() -> ModuleType:
    """The `llm_ops.rmsnorm` kernel module."""
    return _load("rmsnorm")


@pytest.fixture(scope="session")
def silu_mul() -> ModuleType:
    """The `llm_ops.silu_mul` kernel module."""
    return _load("silu_mul")


@pytest.fixture(scope="session")
def moe() -> ModuleType:
    """The `moe_ops.moe` kernel module."""
    return _load("moe", "moe_ops")


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    """Fresh random data per test, reproducible per test."""
    torch.manual_seed(0x5EED)
    yield
