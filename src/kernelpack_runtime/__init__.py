"""kernelpack-runtime: what a built kernel package needs at run time and in its tests.

Which kernels are usable here and why the others are not (`Registry`), the build record's
types, `Reason`, `stub_missing` for CPU-only machines, `KernelUnavailableError`, and the pytest
plugin (`kernelpack_runtime.testing.plugin`). Light by design: the standard library and
`packaging` only; it reads the build record and asks NVML about devices, and never imports the
builder (`kernelpack`), ninja, setuptools or `torch.cuda`, and never calls nvcc. See
docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelpack_runtime._version import __version__
from kernelpack_runtime.device import Device, DeviceFacts, Probe, set_default_probe
from kernelpack_runtime.errors import KernelUnavailableError, MissingNativeError
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.registry import (
    Api,
    Registry,
    load_first,
    log_status,
    ops_namespace,
    raise_unavailable,
    registry_for,
)
from kernelpack_runtime.torchinfo import TorchFacts

__all__ = [
    "Api",
    "Device",
    "DeviceFacts",
    "KernelUnavailableError",
    "MissingNativeError",
    "Probe",
    "Reason",
    "Registry",
    "TorchFacts",
    "__version__",
    "load_first",
    "log_status",
    "ops_namespace",
    "raise_unavailable",
    "registry_for",
    "set_default_probe",
    "stub_missing",
]


def __getattr__(name: str) -> object:
    # `stub_missing` is for CPU machines' imports: loaded when first asked for.
    if name == "stub_missing":
        from kernelpack_runtime.stubs import stub_missing

        return stub_missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from kernelpack_runtime.stubs import stub_missing
