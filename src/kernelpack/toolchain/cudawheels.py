"""The CUDA wheels: NVIDIA's CUDA compiler published as Python wheels (CUDA 13 and later).

Five wheels make a toolkit that compiles kernels with no CUDA installed on the machine:
`nvidia-cuda-nvcc` (nvcc, cudafe++, ptxas, fatbinary, nvlink), `nvidia-nvvm` (cicc,
libdevice), `nvidia-cuda-crt`, `nvidia-cuda-cccl` and `nvidia-cuda-runtime` (headers and
`libcudart.so.13`). Installed, they form the folder `nvidia/cu<major>` of a site-packages,
laid out like a toolkit root (`bin/nvcc`, `nvvm/`, `include/`, `lib/`); nvcc finds its
tools, libdevice and headers relative to itself. CUDA 12's wheels ship ptxas alone: there is
no CUDA 12 nvcc wheel. They exist for Linux on x86_64 and aarch64 (Grace Hopper).

This module knows the wheels; `kernelpack.toolchain.toolkitcache` installs them into
kernelpack's cache, and `kernelpack.toolchain.detection` applies the toolkit rule.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from packaging.version import Version

__all__ = [
    "FIRST_MAJOR",
    "PACKAGES",
    "PLATFORMS",
    "by_hand",
    "link_dir",
    "requirements",
    "root_in",
    "unsupported",
]

#: The wheels of one toolkit, in the order a person would install them.
PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
)

#: The first CUDA major with an nvcc wheel.
FIRST_MAJOR = 13

#: The machines (`platform.machine()`) the wheels are published for, on Linux.
PLATFORMS = ("x86_64", "aarch64")


def requirements(cuda: Version) -> tuple[str, ...]:
    """The requirement of each wheel at CUDA `cuda`'s minor release: `nvidia-cuda-nvcc==13.0.*`
    (each wheel has its own patch numbers: nvcc 13.0.88 comes with cccl 13.0.85)."""
    return tuple(f"{name}=={cuda.major}.{cuda.minor}.*" for name in PACKAGES)


def unsupported(cuda: Version, system: str = sys.platform, machine: str = "") -> str | None:
    """Why there is no wheel toolkit for CUDA `cuda` on this platform; None when there is."""
    machine = machine or platform.machine()
    if cuda.major < FIRST_MAJOR:
        return (
            f"CUDA {cuda.major} has no nvcc wheel (only CUDA {FIRST_MAJOR} and later): install "
            f"the CUDA {cuda.major}.{cuda.minor} toolkit and set CUDA_HOME"
        )
    if not system.startswith("linux") or machine not in PLATFORMS:
        return (
            f"the CUDA wheels are published for Linux on {' and '.join(PLATFORMS)}, not "
            f"{system} on {machine}: install the CUDA {cuda.major}.{cuda.minor} toolkit"
        )
    return None


def by_hand(cuda: Version) -> str:
    """The command that installs the wheels into the current environment."""
    return "pip install " + " ".join(shlex.quote(r) for r in requirements(cuda))


def root_in(nvidia_roots: Iterable[str | Path], major: int) -> Path | None:
    """The toolkit root (`<site>/nvidia/cu<major>`) of CUDA wheels installed in an
    environment whose `nvidia` namespace package has the folders `nvidia_roots`; None when
    none holds a whole compiler (nvcc and cicc)."""
    for base in nvidia_roots:
        root = Path(base) / f"cu{major}"
        nvcc, cicc = root / "bin" / "nvcc", root / "nvvm" / "bin" / "cicc"
        if _executable(nvcc) and _executable(cicc):
            return root
    return None


def link_dir(lib: Path, cache: Path) -> Path | None:
    """A private folder of `lib<name>.so` links to the toolkit's `lib<name>.so.<N>`, for
    those of the toolkit folder `lib` that have no unversioned name (the wheels ship
    `libcudart.so.13` only, so `-lcudart` would find nothing). Linking through it keeps the
    library's NEEDED entry its soname (`libcudart.so.13`). The folder lives in kernelpack's
    cache (`cache`), keyed by `lib` and its files; made atomically; None when none is needed."""
    wanted: dict[str, str] = {}
    for entry in sorted(lib.glob("lib*.so.*")) if lib.is_dir() else []:
        stem = entry.name.split(".so.", 1)[0] + ".so"
        if not (lib / stem).exists() and stem not in wanted:
            wanted[stem] = entry.name
    if not wanted:
        return None
    key = hashlib.sha256(repr((str(lib), sorted(wanted.items()))).encode()).hexdigest()[:16]
    folder = cache / "links" / key
    if all((folder / stem).resolve() == lib / name for stem, name in wanted.items()):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    for stem, name in wanted.items():
        (staging / stem).symlink_to(lib / name)
    try:
        staging.rename(folder)
    except OSError:  # another build made it first (the same links)
        for link in staging.iterdir():
            link.unlink()
        staging.rmdir()
    return folder


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
