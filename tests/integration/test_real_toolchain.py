"""Toolchain detection and planning against this machine's real nvcc 13.0 and torch 2.14.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import make_manifest, make_spec
from packaging.version import Version
from toolkits import SYSTEM_ONLY, system_nvcc

from kernelpack.plan import make_plan
from kernelpack.toolchain.detection import Toolchain, detect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(system_nvcc() is None, reason=SYSTEM_ONLY),
]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Toolchain:
    environ = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))  # probe torch for real
    return detect(environ)


def test_resolves_cuda_home_to_the_toolkit_not_the_wrapper_folder(real: Toolchain) -> None:
    assert real.cuda_home == Path("/usr/local/cuda-13.0")
    assert real.nvcc == Path("/usr/local/cuda-13.0/bin/nvcc")


def test_reads_nvcc_13_0(real: Toolchain) -> None:
    assert real.nvcc_missing is None
    assert real.cuda == Version("13.0")


def test_lists_arch_specific_targets(real: Toolchain) -> None:
    assert {"sm_90a", "sm_100a", "compute_90a", "sm_120f"} <= real.nvcc_targets


def test_reads_torch_2_14_1_built_for_cuda_13_with_cxx11_abi(real: Toolchain) -> None:
    assert real.torch_version == Version("2.14.1")
    assert real.torch_cuda == Version("13.0")
    assert real.cxx11_abi is True
    assert real.torch_dir is not None and (real.torch_dir / "include" / "torch").is_dir()


def test_nvidia_wheel_include_dirs_provide_cublas(real: Toolchain) -> None:
    assert any((folder / "cublas_v2.h").is_file() for folder in real.nvidia_include_dirs)


def test_plans_sm90a_and_sm100a_kernels_for_build(real: Toolchain) -> None:
    manifest = make_manifest(make_spec("rmsnorm", ["9.0a"]), make_spec("flash_moe", ["10.0a"]))
    result = make_plan(manifest, real)
    assert [k.name for k in result.to_build] == ["rmsnorm", "flash_moe"]
    assert result.version_tag() == "cu130torch2.14.1"


def test_project_venv_imports_torch_without_the_numpy_warning() -> None:
    # scripts/bootstrap installs numpy next to torch; without it every torch import warns.
    proc = subprocess.run(
        [sys.executable, "-c", "import torch; torch.zeros(1)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Failed to initialize NumPy" not in proc.stderr
