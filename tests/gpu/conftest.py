"""Fixtures of the GPU tests: the llm_ops and moe_ops kernels, loaded through the packages'
registries.

These tests run on a machine with an NVIDIA GPU (the `gpu` marker) and installed packages.
kernelpack's pytest plugin skips a test whose `kernel(...)` is unavailable, with the reason,
and `--kernels-require` turns that skip into a failure on GPU runners. The fixtures below skip
on their own too, so the files also run where the plugin is not installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device-log",
        metavar="DIR",
        help="after each test, append the CUDA device it ran on (current device, its UUID, "
        "CUDA_VISIBLE_DEVICES, the xdist worker) as a JSON line to a file under DIR "
        "(scripts/gpu-check checks them against the --kernels-gpus layout)",
    )


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


@pytest.fixture(autouse=True)
def _device_log(request: pytest.FixtureRequest) -> Iterator[None]:
    """With `--device-log DIR`: where the test ran, read after it (CUDA is initialised then)."""
    yield
    folder = request.config.getoption("device_log", None)
    if folder is None:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    record: dict[str, object] = {
        "test": request.node.nodeid,
        "worker": worker,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device": None,
        "uuid": None,
    }
    if torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        record["device"] = index
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        record["uuid"] = None if uuid is None else str(uuid)
    Path(folder).mkdir(parents=True, exist_ok=True)
    with (Path(folder) / f"{worker}-{os.getpid()}.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
