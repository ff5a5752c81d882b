"""Stand-in device probes, for testing code that gates on kernel availability without a GPU.

from kernelpack_runtime import Registry
from kernelpack_runtime.testing.fakes import fake_probe

registry = Registry("llm_ops", probe=fake_probe("8.0"))   # an A100: sm_90a kernels say why not
"""

from __future__ import annotations

from kernelpack_runtime.device import Device, DeviceFacts, Probe

__all__ = ["fake_probe", "no_device_probe"]


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def fake_probe(*capabilities: str, driver_cuda: str = "13.0", name: str = "NVIDIA H200") -> Probe:
    """A probe reporting one device per compute capability ("9.0" when none is given)."""
    devices = tuple(
        Device(index, name, _version(capability))
        for index, capability in enumerate(capabilities or ("9.0",))
    )
    facts = DeviceFacts(devices=devices, driver_cuda=_version(driver_cuda))
    return lambda: facts


def no_device_probe(problem: str = "the NVIDIA driver reports no GPU") -> Probe:
    """A probe reporting no visible device, for `problem`."""
    facts = DeviceFacts(problem=problem)
    return lambda: facts
