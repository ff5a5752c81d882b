"""The run-time checks before a kernel is loaded, in order, each giving a `Reason`.

`not-built`, `disabled`, `no-cuda-torch`, `no-device`, `arch-mismatch`, `cuda-mismatch`,
`torch-mismatch`, `driver-too-old`; the next two codes (`load-failed`, `namespace-collision`)
need the kernel to be imported and live in `kernelpack_runtime.loader`; `record-invalid` (a
record that cannot be read) is decided by the registry before any of them (see
docs/runtime.md). Every check is a pure function of the build record and a `Context` whose
facts are gathered lazily: a kernel stopped by an early check never probes the device.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING

from kernelpack_runtime.device import DeviceFacts, Probe
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import BuildRecord, BuiltKernel, KernelRecord
from kernelpack_runtime.torchinfo import TorchFacts, TorchReader

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["CHECKS", "Check", "Context", "disabled_kernels", "first_reason"]


def disabled_kernels(prefix: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Kernel name -> the `NAME=value` setting that disables it.

    Read from `<prefix>_DISABLE` (the prefix the build record stores: `[tool.kernelpack]
    env-prefix`, else the package name upper-cased) and `KERNELPACK_DISABLE`
    (comma-separated kernel names).
    """
    disabled: dict[str, str] = {}
    for variable in (f"{prefix}_DISABLE", "KERNELPACK_DISABLE"):
        value = environ.get(variable, "")
        for name in (part.strip() for part in value.split(",")):
            if name:
                disabled.setdefault(name, f"{variable}={value}")
    return disabled


class Context:
    """The facts the checks compare a build record against; each gathered on first use."""

    def __init__(
        self,
        record: BuildRecord,
        *,
        probe: Probe,
        read_torch: TorchReader,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.record = record
        self._probe = probe
        self._read_torch = read_torch
        self.disabled = disabled_kernels(
            record.env_prefix, os.environ if environ is None else environ
        )

    @cached_property
    def torch(self) -> TorchFacts:
        return self._read_torch()

    @cached_property
    def device(self) -> DeviceFacts:
        return self._probe()

    def built_with(self) -> str:
        """The build's torch, e.g. "torch 2.14.1 (CUDA 13.0)"."""
        toolchain = self.record.toolchain
        cuda = f"CUDA {toolchain.torch_cuda}" if toolchain.torch_cuda else "CPU-only"
        return f"torch {toolchain.torch} ({cuda})"


Check = Callable[[str, BuiltKernel, Context], "Reason | None"]
"""One check of a built kernel (a skipped one stops at `not-built`)."""


def _not_built(name: str, kernel: KernelRecord, ctx: Context) -> Reason | None:
    if isinstance(kernel, BuiltKernel):
        return None
    cause = kernel.reason
    return Reason("not-built", f"skipped at build time ({cause.code}): {cause.message}", cause)


def _disabled(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    setting = ctx.disabled.get(name)
    if setting is None:
        return None
    return Reason("disabled", f"disabled by {setting}; remove {name!r} from it to use the kernel")


def _no_cuda_torch(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    torch = ctx.torch
    wanted = ctx.record.toolchain.torch_cuda or ctx.record.toolchain.cuda
    install = (
        f"install a CUDA {wanted} build of torch" if wanted else "install a CUDA build of torch"
    )
    if not torch.installed:
        return Reason("no-cuda-torch", f"torch is not installed; {install}")
    if torch.cuda is None:
        return Reason("no-cuda-torch", f"torch {torch.version} is a CPU-only build; {install}")
    return None


def _no_device(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    device = ctx.device
    if device.devices:
        return None
    return Reason("no-device", f"no CUDA device visible: {device.problem or 'no GPU found'}")


def _built_for(kernel: BuiltKernel) -> str:
    targets = ", ".join(arch.sm for arch in kernel.archs) or "no arch"
    if kernel.ptx and kernel.archs:
        targets += f" + PTX {max(kernel.archs).compute}"
    return targets


def _arch_mismatch(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    # The record's archs are parsed (a bad one makes the record invalid); the PTX, when
    # built, is that of the highest arch.
    archs = kernel.archs
    highest = max(archs, default=None)
    for device in ctx.device.devices:
        if not any(a.runs_on(device.capability, ptx=kernel.ptx and a == highest) for a in archs):
            which = f"device {device.index}" if device.index >= 0 else "the MIG device"
            return Reason(
                "arch-mismatch",
                f"{which} ({device.name}) is {device.sm}; {name} was built for "
                f"{_built_for(kernel)}; rebuild with arch "
                f'"{device.capability[0]}.{device.capability[1]}" (or its "a"/"f" form) added',
            )
    return None


def _version(text: str | None) -> Version | None:
    from packaging.version import InvalidVersion, Version

    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _torch_mismatch(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    running, built = ctx.torch, ctx.record.toolchain
    running_version = _version(running.version)
    if running_version is None:
        return None
    running_release = ".".join(str(p) for p in running_version.release)
    if kernel.abi == "stable":
        target = _version(kernel.stable_target)
        if target is not None and running_version.release < target.release:
            return Reason(
                "torch-mismatch",
                f"built for torch >= {kernel.stable_target} (stable ABI), running "
                f"{running_release}; upgrade torch to {kernel.stable_target} or newer",
            )
        return None
    built_version = _version(built.torch)
    if built_version is not None and built_version.release != running_version.release:
        wanted = built_version.base_version
        return Reason(
            "torch-mismatch",
            f"built for torch {wanted}, running {running_release}; "
            f"install torch=={wanted} or rebuild against this torch",
        )
    return None


def _cuda_mismatch(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    running, built = ctx.torch, ctx.record.toolchain
    wanted = built.torch_cuda or built.cuda
    if not wanted or not running.cuda or _major(wanted) == _major(running.cuda):
        return None
    return Reason(
        "cuda-mismatch",
        f"{name} was built for CUDA {wanted}, torch {running.version} has CUDA {running.cuda} "
        f"(the library would not load); {_other_build(ctx, running.cuda, running.version)}",
    )


def _other_build(ctx: Context, cuda: str, torch: str | None) -> str:
    """What to install instead: the exact pip line when the record names the project's
    variant index (`release.index-url`), else the two ways out."""
    from packaging.version import InvalidVersion, Version

    record = ctx.record
    cuda_tuple = _cuda_tuple(cuda)
    label = f"cu{cuda_tuple[0]}{cuda_tuple[1]}" if cuda_tuple else None
    url = record.release.url_for(label) if record.release and label else None
    try:
        version = Version(record.version)
    except InvalidVersion:
        version = None
    if url is None or version is None or label is None:
        return f"install a CUDA {_major(cuda)} build of {record.package}, or a CUDA " + (
            f"{_major(record.toolchain.torch_cuda or record.toolchain.cuda or '')} torch"
        )
    rest = re.sub(r"^cu\d+", "", version.local or "")
    if rest.startswith("torch") and torch:
        rest = "torch" + ".".join(str(p) for p in Version(torch).release)
    pinned = f"{record.package}=={version.public}+{label}{rest}" if rest else record.package
    command = f"pip install --force-reinstall --no-deps --extra-index-url {url} {pinned}"
    return f"install its {label} build: {command}"


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _cuda_tuple(version: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def _driver_too_old(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
    driver = ctx.device.driver_cuda
    cuda = ctx.record.toolchain.cuda
    needed = _cuda_tuple(cuda) if cuda else None
    if driver is None or needed is None or driver >= needed:
        return None
    return Reason(
        "driver-too-old",
        f"the NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, {name} was built with "
        f"CUDA {cuda}; upgrade the driver (or rebuild with CUDA {driver[0]}.{driver[1]})",
    )


def _cuda_only(check: Check) -> Check:
    """`check`, applied to CUDA kernels only: a CPU kernel needs no CUDA torch, device or
    driver."""

    def checked(name: str, kernel: BuiltKernel, ctx: Context) -> Reason | None:
        return check(name, kernel, ctx) if kernel.backend == "cuda" else None

    checked.__name__ = check.__name__
    return checked


#: The checks before loading, in the order of docs/runtime.md.
CHECKS: tuple[Check, ...] = (
    _not_built,
    _disabled,
    _cuda_only(_no_cuda_torch),
    _cuda_only(_no_device),
    _cuda_only(_arch_mismatch),
    _cuda_only(_cuda_mismatch),
    _torch_mismatch,
    _cuda_only(_driver_too_old),
)


def first_reason(name: str, kernel: KernelRecord, ctx: Context) -> Reason | None:
    """The first check that fails for `kernel`, or None when it may be loaded."""
    if not isinstance(kernel, BuiltKernel):
        return _not_built(name, kernel, ctx)
    for check in CHECKS:
        reason = check(name, kernel, ctx)
        if reason is not None:
            return reason
    return None
