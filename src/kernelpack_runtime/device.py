"""The device probe: which GPUs this process would see, asked of NVML, never of CUDA.

`torch.cuda` (or any CUDA call) creates driver state that a later `fork()` cannot carry, so the
registry learns the devices from NVML (`libnvidia-ml.so.1`, loaded with `ctypes`) and applies
`CUDA_VISIBLE_DEVICES` itself. The probe is a plain callable returning `DeviceFacts`, so tests
and unusual machines can inject their own (`Registry(pkg, probe=...)` or `set_default_probe`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Device",
    "DeviceFacts",
    "Probe",
    "default_probe",
    "nvml_probe",
    "set_default_probe",
]


@dataclass(frozen=True)
class Device:
    """One visible GPU."""

    index: int
    """NVML index (PCI bus order)."""
    name: str
    capability: tuple[int, int]

    @property
    def sm(self) -> str:
        """The compute capability as nvcc names it, e.g. `sm_90`."""
        return f"sm_{self.capability[0]}{self.capability[1]}"


@dataclass(frozen=True)
class DeviceFacts:
    """What the probe found: the visible devices and the driver's CUDA version."""

    devices: tuple[Device, ...] = ()
    driver_cuda: tuple[int, int] | None = None
    """The newest CUDA version the installed driver supports, e.g. (13, 0)."""
    problem: str | None = None
    """Why no device is visible, in words, when `devices` is empty."""

    def describe(self) -> str:
        """One line: "0: NVIDIA H200 (sm_90); driver CUDA 13.0", or "none (<problem>)"."""
        if not self.devices:
            return f"none ({self.problem or 'no GPU found'})"
        shown = ", ".join(f"{d.index}: {d.name} ({d.sm})" for d in self.devices)
        if self.driver_cuda is None:
            return shown
        return f"{shown}; driver CUDA {self.driver_cuda[0]}.{self.driver_cuda[1]}"


Probe = Callable[[], DeviceFacts]

_NVML_SUCCESS = 0
_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE, also enough for a UUID


class _Nvml:
    """The few NVML calls the probe needs, through `ctypes`."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib

    def _call(self, name: str, *args: object) -> None:
        ret = int(getattr(self._lib, name)(*args))
        if ret != _NVML_SUCCESS:
            error_string = self._lib.nvmlErrorString
            error_string.restype = ctypes.c_char_p
            text = error_string(ret)
            raise OSError(f"{name}: {text.decode() if text else ret}")

    def init(self) -> None:
        self._call("nvmlInit_v2")

    def shutdown(self) -> None:
        self._lib.nvmlShutdown()

    def driver_cuda(self) -> tuple[int, int]:
        version = ctypes.c_int()
        self._call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version))
        return version.value // 1000, (version.value % 1000) // 10

    def count(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value

    def handle(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def handle_by_uuid(self, uuid: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByUUID", uuid.encode(), ctypes.byref(handle))
        return handle

    def mig_parent(self, handle: ctypes.c_void_p) -> ctypes.c_void_p:
        parent = ctypes.c_void_p()
        self._call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle, ctypes.byref(parent))
        return parent

    def _text(self, name: str, handle: ctypes.c_void_p) -> str:
        buffer = ctypes.create_string_buffer(_BUFFER)
        self._call(name, handle, buffer, ctypes.c_uint(_BUFFER))
        return buffer.value.decode(errors="replace")

    def name(self, handle: ctypes.c_void_p) -> str:
        return self._text("nvmlDeviceGetName", handle)

    def uuid(self, handle: ctypes.c_void_p) -> str:
        return self._text("nvmlDeviceGetUUID", handle)

    def capability(self, handle: ctypes.c_void_p) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call(
            "nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor)
        )
        return major.value, minor.value


def _visible_handles(nvml: _Nvml, visible: str | None) -> list[tuple[int, ctypes.c_void_p]]:
    """NVML (index, handle) pairs that `CUDA_VISIBLE_DEVICES` leaves visible, in its order.

    Follows CUDA's rules: unset means every device; entries are indices or (prefixes of) UUIDs;
    the first entry that names no device ends the list. Indices are taken in PCI bus order,
    which is CUDA's order under `CUDA_DEVICE_ORDER=PCI_BUS_ID` and differs from the default
    order only on machines that mix GPU models.
    """
    count = nvml.count()
    if visible is None:
        return [(i, nvml.handle(i)) for i in range(count)]
    uuids: list[str] | None = None
    chosen: list[tuple[int, ctypes.c_void_p]] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count:
                break
            chosen.append((index, nvml.handle(index)))
        elif entry.startswith("MIG-"):
            try:
                # A MIG instance runs the code its parent GPU runs; NVML answers only some
                # queries for a MIG handle, every one for the parent's.
                chosen.append((-1, nvml.mig_parent(nvml.handle_by_uuid(entry))))
            except OSError:
                break
        elif entry.startswith("GPU-"):
            if uuids is None:
                uuids = [nvml.uuid(nvml.handle(i)) for i in range(count)]
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            chosen.append((matches[0], nvml.handle(matches[0])))
        else:
            break
    return chosen


def _probe_nvml(visible: str | None) -> DeviceFacts:
    if visible is not None and not visible.strip():
        return DeviceFacts(problem="CUDA_VISIBLE_DEVICES is empty")
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return DeviceFacts(problem="no NVIDIA driver: libnvidia-ml.so.1 not found")
    nvml = _Nvml(lib)
    try:
        nvml.init()
    except (OSError, AttributeError) as exc:  # AttributeError: a library without the symbol
        return DeviceFacts(problem=f"the NVIDIA driver did not answer ({exc})")
    try:
        driver = nvml.driver_cuda()
        devices = tuple(
            Device(index, nvml.name(handle), nvml.capability(handle))
            for index, handle in _visible_handles(nvml, visible)
        )
    except (OSError, AttributeError) as exc:
        return DeviceFacts(problem=f"NVML failed ({exc})")
    finally:
        nvml.shutdown()
    if devices:
        return DeviceFacts(devices=devices, driver_cuda=driver)
    if visible is None:
        problem = "the NVIDIA driver reports no GPU"
    else:
        problem = f"CUDA_VISIBLE_DEVICES={visible} names no GPU of this machine"
    return DeviceFacts(driver_cuda=driver, problem=problem)


_lock = threading.Lock()
_cache: dict[str | None, DeviceFacts] = {}


def nvml_probe() -> DeviceFacts:
    """Probe with NVML, honouring `CUDA_VISIBLE_DEVICES`; cached per value of that variable."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    with _lock:
        facts = _cache.get(visible)
        if facts is None:
            facts = _cache[visible] = _probe_nvml(visible)
        return facts


_default: Probe = nvml_probe


def default_probe() -> DeviceFacts:
    """Run the probe that registries built without `probe=` use."""
    return _default()


def set_default_probe(probe: Probe | None) -> Probe:
    """Make `probe` the default for registries built without `probe=`; `None` restores NVML.

    Returns the previous default, so a caller can put it back.
    """
    global _default
    previous = _default
    _default = nvml_probe if probe is None else probe
    return previous
