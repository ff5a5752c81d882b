"""Fakes at the edges of the toolchain, shared by kernelpack's tests: `nvcc` scripts, a
stand-in `torch` package, and builders for the values the pure `plan()` takes."""

from __future__ import annotations

from .cudawheels import local_index, write_cuda_wheels
from .fake_torch import install_torch
from .nvcc import NVCC_12_4, NVCC_12_8, NVCC_13_0, NVCC_13_2, FakeNvcc, install_nvcc
from .values import PACKAGE_DIR, make_manifest, make_spec, make_toolchain, targets_of

__all__ = [
    "NVCC_12_4",
    "NVCC_12_8",
    "NVCC_13_0",
    "NVCC_13_2",
    "PACKAGE_DIR",
    "FakeNvcc",
    "install_nvcc",
    "install_torch",
    "local_index",
    "make_manifest",
    "make_spec",
    "make_toolchain",
    "targets_of",
    "write_cuda_wheels",
]
