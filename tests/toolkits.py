"""Which CUDA toolkit the tests' builds get here, by kernelpack's own rule (docs/build.md,
Toolchains): a system toolkit, or NVIDIA's CUDA wheels in torch's environment or in
kernelpack's cache (`scripts/bootstrap` installs them on a machine with no CUDA). Tests that
build skip without either; tests about the system toolkit itself say so in their reason."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["NO_TOOLKIT", "SYSTEM_ONLY", "host_program", "nvcc", "system_nvcc"]

#: The skip reason of a test that builds, on a machine without a CUDA toolkit.
NO_TOOLKIT = (
    "needs a CUDA toolkit: a system one (nvcc on PATH, CUDA_HOME) or the CUDA wheels in "
    "kernelpack's cache (`kernelpack toolchain install`; scripts/bootstrap does it)"
)
#: The skip reason of a test about the system toolkit itself.
SYSTEM_ONLY = "needs the system CUDA toolkit (nvcc on PATH); the CUDA wheels do not stand in"


def system_nvcc() -> str | None:
    """The system toolkit's nvcc on PATH, if any."""
    return shutil.which("nvcc")


def host_program(sources: Sequence[Path], include: Path, output: Path, reason: str) -> Path:
    """`sources` (host C++ or CUDA) compiled by the system nvcc into the program `output`,
    C++17, `include` on the include path; the calling test skips with `reason` without it."""
    found = system_nvcc()
    if found is None:
        pytest.skip(reason)
    subprocess.run(
        [found, "-std=c++17", f"-I{include}", *map(str, sources), "-o", str(output)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return output


@functools.cache
def nvcc() -> Path | None:
    """The nvcc a build here compiles with (nothing is installed to find it), or None."""
    from kernelpack.errors import KernelpackError
    from kernelpack.toolchain.detection import detect

    try:
        toolchain = detect()
    except KernelpackError:
        return None
    return toolchain.nvcc if toolchain.nvcc_missing is None else None
