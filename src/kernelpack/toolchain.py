"""`Toolchain`: the facts of this machine that decide what can be built.

`detect()` never raises for a missing nvcc or torch: those are facts (with reasons), and the
plan turns them into skips. It never initialises CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from kernelpack.reason import Reason

__all__ = ["Toolchain", "detect"]


@dataclass(frozen=True)
class Toolchain:
    """What is installed: nvcc and its CUDA, torch and its CUDA, launcher, job budget."""

    python: str
    """"3.11"."""
    machine: str
    """`platform.machine()`: "x86_64", "aarch64"."""
    nvcc: Path | None
    """The real nvcc binary (wrapper scripts resolved), None when there is none."""
    cuda_home: Path | None
    nvcc_version: Version | None
    """e.g. Version("13.0.88")."""
    nvcc_targets: frozenset[str]
    """Everything `nvcc --list-gpu-code` and `--list-gpu-arch` print: sm_90a, compute_90a…"""
    torch_version: Version | None
    """torch's release without the local part: Version("2.14.1")."""
    torch_cuda: Version | None
    """torch.version.cuda: Version("13.0"); None for a CPU-only torch or no torch."""
    cxx11_abi: bool | None
    torch_dir: Path | None
    """Folder of the torch package (its `include/` and `lib/` are below)."""
    nvidia_include_dirs: tuple[Path, ...]
    """`site-packages/nvidia/cu*/include` and `nvidia/*/include` shipped by torch's wheels."""
    launcher: Path | None
    """ccache or sccache, None when absent or `KERNELPACK_LAUNCHER=none`."""
    jobs: int
    """Parallel compile jobs budgeted by cores and free memory."""
    nvcc_missing: Reason | None = None
    """Why there is no usable nvcc (code `nvcc-missing`), None when there is one."""
    torch_missing: str | None = None
    """Why torch could not be inspected (not installed, broken import), None when it was."""

    @property
    def cuda(self) -> Version | None:
        """The toolkit's CUDA release ("13.0") derived from the nvcc version."""
        if self.nvcc_version is None:
            return None
        return Version(f"{self.nvcc_version.major}.{self.nvcc_version.minor}")


def detect() -> Toolchain:
    """Inspect this machine (nvcc, CUDA_HOME, torch, launcher, cores, memory)."""
    raise NotImplementedError
