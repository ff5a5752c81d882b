"""Tiny kernel packages with build records made of `kernelpack_runtime.record`'s types.

A built kernel's `_C` is a Python module here (the record names `<kernel>/_C.py`) that
registers one op, `noop`, in the kernel's namespace, as a real library's static initialiser
would; so loading works without a compiler. Tests that need a real dlopen error write a broken
`_C*.so`. `tests/unit/test_record.py` alone pins the record's JSON wire format.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kernelpack_runtime import TorchFacts
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import (
    FILENAME,
    BuildRecord,
    BuiltKernel,
    KernelRecord,
    SkippedKernel,
    ToolchainRecord,
)

TORCH_2141_CU130 = TorchFacts(version="2.14.1+cu130", cuda="13.0")

_counter = itertools.count()

INIT = """\
from kernelpack_runtime import Registry
status, is_available, unavailable_reason, load = Registry(__name__).api()
"""

#: What a library's static initialiser does: register the kernel's ops in its namespace.
REGISTER = """\
import torch
_library = torch.library.Library({namespace!r}, "FRAGMENT")
_library.define("noop(Tensor x) -> Tensor")
"""


def unique_name(stem: str = "kp_pkg") -> str:
    """A package name no other test uses (imports and load outcomes are process-wide)."""
    return f"{stem}_{next(_counter)}_{id(_counter) % 9973}"


def built(
    name: str,
    package: str,
    *,
    abi: str = "torch",
    archs: tuple[str, ...] = ("9.0a",),
    ptx: bool = False,
    stable_target: str | None = None,
    library: str | None = None,
    namespace: str | None = None,
) -> BuiltKernel:
    """A built kernel's record entry."""
    return BuiltKernel(
        abi="stable" if abi == "stable" else "torch",
        stable_target=stable_target if abi != "stable" else (stable_target or "2.10"),
        archs=tuple(Arch.parse(arch) for arch in archs),
        ptx=ptx,
        library=library or f"{name}/_C.py",
        sources_sha256="00" * 32,
        namespace=namespace or f"{package}_{name}",
    )


def skipped(code: str, message: str) -> SkippedKernel:
    """A skipped kernel's record entry."""
    return SkippedKernel(reason=Reason(code, message))


def toolchain(**overrides: Any) -> ToolchainRecord:
    """The toolchain of a CUDA 13.0 / torch 2.14.1 build, with `overrides`."""
    return dataclasses.replace(
        ToolchainRecord("13.0.88", "13.0", "2.14.1", "13.0", True, "3.11", "x86_64"), **overrides
    )


def build_record(
    package: str,
    kernels: Mapping[str, KernelRecord],
    *,
    tool: ToolchainRecord | None = None,
    env_prefix: str = "",
) -> BuildRecord:
    """The build record of `package`."""
    return BuildRecord(
        package=package,
        version="0.1.0+cu130torch2.14.1",
        toolchain=tool or toolchain(),
        kernels=dict(kernels),
        env_prefix=env_prefix,
    )


def make_package(
    root: Path,
    package: str,
    kernels: Mapping[str, KernelRecord],
    *,
    tool: ToolchainRecord | None = None,
    kernel_init: str = "from . import _C\n",
    c_module: str = "",
    record: bool = True,
    env_prefix: str = "",
) -> Path:
    """Write `root/package` with its build record and one folder per built kernel.

    Each Python `_C` registers `noop` in the kernel's namespace, then runs `c_module`.
    """
    folder = root / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(INIT)
    if record:
        build_record(package, kernels, tool=tool, env_prefix=env_prefix).write(folder / FILENAME)
    for name, entry in kernels.items():
        if not isinstance(entry, BuiltKernel):
            continue
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(kernel_init)
        if entry.library.endswith(".py"):
            register = REGISTER.format(namespace=entry.namespace) if entry.namespace else ""
            (folder / entry.library).write_text(register + c_module)
    return folder


def status_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package of one built stable kernel (rmsnorm) and one skipped
    (flash_moe): what the status tests of both CLIs print."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    return make_package(
        tmp_path,
        name,
        {
            "rmsnorm": built("rmsnorm", name, abi="stable"),
            "flash_moe": skipped("arch-unsupported", "nvcc 12.4 cannot build sm_100a"),
        },
    )
