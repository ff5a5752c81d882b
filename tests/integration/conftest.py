"""Builds shared by the integration modules (each made once per session)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from buildlog import compiles

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llm_ops"


@pytest.fixture(scope="session")
@compiles("the llm_ops wheel")
def llm_ops_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/llm_ops built with the real nvcc into its stable-ABI wheel, once."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    pytest.importorskip("torch")
    project = tmp_path_factory.mktemp("src") / "llm_ops"
    shutil.copytree(
        EXAMPLE,
        project,
        ignore=shutil.ignore_patterns("build", "*.so", "_kernelpack.json", "__pycache__"),
    )
    out = tmp_path_factory.mktemp("wheels")
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack", "build", str(project), "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("llm_ops-*.whl")
    return built
