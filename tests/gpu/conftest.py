"""Fixtures of the GPU tests: the llm_ops kernels, loaded through the package's registry.

These tests run on a machine with an NVIDIA GPU (the `gpu` marker) and an installed llm_ops.
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


def _load(kernel: str) -> ModuleType:
    llm_ops = pytest.importorskip("llm_ops")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    reason = llm_ops.unavailable_reason(kernel)
    if reason is not None:
        pytest.skip(f"llm_ops.{kernel}: {reason}")
    module: ModuleType = llm_ops.load(kernel)
    return module


@pytest.fixture(scope="session")
def rmsnorm() -> ModuleType:
    """The `llm_ops.rmsnorm` kernel module."""
    return _load("rmsnorm")


@pytest.fixture(scope="session")
def silu_mul() -> ModuleType:
    """The `llm_ops.silu_mul` kernel module."""
    return _load("silu_mul")


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    """Fresh random data per test, reproducible per test."""
    torch.manual_seed(0x5EED)
    yield
