"""Builders for the values the pure `plan()` takes, with this machine's facts as defaults."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpack.project.manifest import ANY_PLATFORM, KernelSpec, Manifest
from kernelpack.toolchain.detection import Toolchain
from kernelpack_runtime.arch import Arch

from .nvcc import NVCC_13_0, FakeNvcc

__all__ = ["PACKAGE_DIR", "make_manifest", "make_spec", "make_toolchain", "targets_of"]

PACKAGE_DIR = Path("/pkgs/demo")


def targets_of(nvcc: FakeNvcc) -> frozenset[str]:
    """The `nvcc_targets` a real detect() finds for this nvcc."""
    names = {*nvcc.codes, *nvcc.suffixed}
    return frozenset(names | {name.replace("sm_", "compute_") for name in names})


def make_toolchain(nvcc: FakeNvcc | None = NVCC_13_0, **overrides: Any) -> Toolchain:
    """A toolchain like this machine's (nvcc 13.0, torch 2.14.1+cu130) unless overridden;
    `nvcc=None` is a machine without nvcc."""
    fields: dict[str, Any] = {
        "python": "3.11",
        "machine": "x86_64",
        "nvcc": None,
        "cuda_home": None,
        "nvcc_version": None,
        "nvcc_targets": frozenset(),
        "torch_version": Version("2.14.1"),
        "torch_cuda": Version("13.0"),
        "cxx11_abi": True,
        "torch_dir": Path("/site/torch"),
        "torch_extension": None,
        "nvidia_include_dirs": (),
        "launcher": None,
        "jobs": 2,
    }
    if nvcc is None:
        from kernelpack_runtime.reason import Reason

        fields["nvcc_missing"] = Reason("nvcc-missing", "no nvcc on PATH")
    else:
        home = Path(f"/usr/local/cuda-{nvcc.release}")
        fields.update(
            nvcc=home / "bin" / "nvcc",
            cuda_home=home,
            nvcc_version=Version(nvcc.version),
            nvcc_targets=targets_of(nvcc),
        )
    fields.update(overrides)
    return Toolchain(**fields)


def make_spec(
    name: str = "rmsnorm",
    arch: Iterable[str] | Mapping[str, Iterable[str]] = ("9.0a",),
    **overrides: Any,
) -> KernelSpec:
    """A kernel spec of package `demo`; `arch` as in kernels.toml (a list or a per-platform
    table of arch strings)."""
    if isinstance(arch, Mapping):
        table = {platform: tuple(Arch.parse(a) for a in archs) for platform, archs in arch.items()}
    else:
        table = {ANY_PLATFORM: tuple(Arch.parse(a) for a in arch)}
    folder = PACKAGE_DIR / name
    fields: dict[str, Any] = {
        "name": name,
        "folder": folder,
        "namespace": f"demo_{name}",
        "sources": (folder / "csrc" / f"{name}.cu",),
        "arch": table,
    }
    fields.update(overrides)
    return KernelSpec(**fields)


def make_manifest(*specs: KernelSpec) -> Manifest:
    """The manifest `PACKAGE_DIR/kernels.toml` of package `demo` holding `specs`."""
    return Manifest(
        path=PACKAGE_DIR / "kernels.toml",
        package="demo",
        package_dir=PACKAGE_DIR,
        kernels=specs,
    )
