"""The run-time half of kernelpack: which kernels are usable here, and why the others are not.

Light by design: it reads the build record and asks NVML about devices; it never imports build
code, ninja, setuptools or torch.cuda, and never calls nvcc.
"""

from __future__ import annotations

from kernelpack.runtime.device import Device, DeviceFacts, Probe, set_default_probe
from kernelpack.runtime.registry import Api, Registry, log_status, ops_namespace, registry_for
from kernelpack.runtime.torchinfo import TorchFacts

__all__ = [
    "Api",
    "Device",
    "DeviceFacts",
    "Probe",
    "Registry",
    "TorchFacts",
    "log_status",
    "ops_namespace",
    "registry_for",
    "set_default_probe",
]
