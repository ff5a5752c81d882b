"""Small kernel wheels made without a compiler, for tests of the release channels.

`kernel_wheel` writes a wheel laid out as kernelpack writes one (the registry wiring, a kernel
folder, its library, the build record, core metadata with the exact Requires-Dist): what the
channels and the installers read. The library's bytes are not a real ELF file; tests that load
a kernel build real wheels.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from packaging.version import Version
from wheel.wheelfile import WheelFile

from kernelpack.abitag import AbiTag
from kernelpack_runtime.record import (
    RUNTIME_REQUIREMENT,
    BuildRecord,
    BuiltKernel,
    ReleaseRecord,
    ToolchainRecord,
)

__all__ = ["kernel_wheel", "members", "sdist"]

_INIT = (
    "from kernelpack_runtime import Registry\n\n"
    "status, is_available, unavailable_reason, load = Registry(__name__).api()\n"
)


def kernel_wheel(
    folder: Path,
    label: str,
    *,
    name: str = "kpsyn",
    version: str = "0.2.0",
    tag: str = "cp310-abi3-manylinux_2_34_x86_64",
    archs: tuple[str, ...] = ("9.0a",),
    index_url: str | None = None,
    readme: bool = True,
) -> Path:
    """Write `<name>-<version>+<label>-<tag>.whl` into `folder` and return it."""
    abi = AbiTag.parse(label)
    full = f"{version}+{label}"
    major = abi.cuda_major
    cuda = f"{major}.{abi.cuda[-1]}"
    torch = "2.14.1" if abi.kind == "stable" else str(abi.torch)
    record = BuildRecord(
        package=name,
        version=full,
        toolchain=ToolchainRecord(
            nvcc=f"{cuda}.88",
            cuda=cuda,
            torch=torch,
            torch_cuda=cuda,
            cxx11_abi=True,
            python="3.11",
            machine="x86_64",
        ),
        kernels={
            "scale": BuiltKernel(
                abi="stable" if abi.kind == "stable" else "torch",
                archs=archs,
                library="scale/_C.abi3.so" if abi.kind == "stable" else "scale/_C.so",
                namespace=f"{name}_scale",
                stable_target=str(abi.torch) if abi.kind == "stable" else None,
            )
        },
        release=ReleaseRecord(index_url) if index_url else None,
    )
    torch_req = f"torch>={abi.torch}" if abi.kind == "stable" else f"torch=={abi.torch}"
    metadata = [
        "Metadata-Version: 2.4",
        f"Name: {name}",
        f"Version: {full}",
        "Summary: A synthetic kernel package",
        "License-Expression: MIT",
        "Requires-Python: >=3.10",
        f"Requires-Dist: {RUNTIME_REQUIREMENT}",
        f"Requires-Dist: {torch_req}",
    ]
    if readme:
        metadata += ["Description-Content-Type: text/markdown", "", f"# {name}", ""]
    dist_info = f"{name}-{Version(full)}.dist-info"
    path = folder / f"{name}-{Version(full)}-{tag}.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with WheelFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", _INIT)
        wheel.writestr(f"{name}/scale/__init__.py", "from . import _C\n")
        wheel.writestr(f"{name}/{record.kernels['scale'].library}", b"\x7fELF not a library")  # type: ignore[union-attr]
        wheel.writestr(f"{name}/_kernelpack.json", record.dumps())
        wheel.writestr(f"{dist_info}/METADATA", "\n".join(metadata) + "\n")
        wheel.writestr(
            f"{dist_info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: kernelpack\nRoot-Is-Purelib: false\nTag: {tag}\n",
        )
    return path


def sdist(folder: Path, *, name: str = "kpsyn", version: str = "0.2.0") -> Path:
    """A minimal sdist of `name` (PKG-INFO, pyproject.toml)."""
    import io
    import tarfile

    path = folder / f"{name}-{version}.tar.gz"
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "PKG-INFO": (
            f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
            "Summary: A synthetic kernel package\nRequires-Python: >=3.10\n"
            "Description-Content-Type: text/markdown\n\n# kpsyn\n"
        ),
        "pyproject.toml": f'[project]\nname = "{name}"\nversion = "{version}"\n',
    }
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def members(wheel: Path) -> dict[str, bytes]:
    """Every member of `wheel` with its bytes."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}
