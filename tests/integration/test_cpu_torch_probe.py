"""The torch probe against a CPU-only torch (torch 2.13.0+cpu in a venv of its own)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelpack.toolchain.torchprobe import probe

pytestmark = pytest.mark.integration


def test_a_cpu_only_torch_gives_the_flags_of_its_cpu_extensions(cpu_torch_venv: Path) -> None:
    # Without CUDA_HOME, torch's CUDA helpers raise on a CPU-only torch; its CPU side answers.
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    found = probe(env, python=str(cpu_torch_venv))
    assert found.cuda is None
    assert found.extension is not None, found.extension_error
    assert found.extension.libraries == ("c10", "torch", "torch_cpu", "torch_python")
    assert found.extension.stable_libraries == ("c10", "torch", "torch_cpu")
    assert any(d.endswith("torch/include") for d in found.extension.include_dirs)
