"""A package from `kernelpack new` builds with the real nvcc, reports `no-device` on a machine
without a GPU, exposes its contract, and its own tests pass (GPU tests skipped with a reason).

One compile (stable-ABI headers only) for the whole module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import toolkits
from buildlog import compiles

pytestmark = pytest.mark.integration


def _kernelpack(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelpack", *argv],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
    )


@pytest.fixture(scope="module")
@compiles("a `kernelpack new` package in place")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if toolkits.nvcc() is None:
        pytest.skip(toolkits.NO_TOOLKIT)
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("new") / "demo-ops"
    for argv in (
        ("new", str(root), "--kernel", "scale"),
        ("check", str(root)),
        ("build", str(root), "--inplace"),
    ):
        result = _kernelpack(*argv)
        assert result.returncode == 0, f"{argv}: {result.stdout}{result.stderr}"
    return root


def test_build_inplace_writes_the_stable_library_and_record(built: Path) -> None:
    record = json.loads((built / "demo_ops" / "_kernelpack.json").read_text())
    kernel = record["kernels"]["scale"]
    assert (kernel["status"], kernel["namespace"]) == ("built", "demo_ops_scale")
    assert (built / "demo_ops" / kernel["library"]).is_file()
    assert record["version"].startswith("0.1.0+cu")


def _has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def test_status_reports_no_device_without_a_gpu(built: Path) -> None:
    if _has_gpu():
        pytest.skip("a GPU is visible")
    result = _kernelpack("status", str(built / "demo_ops"), "--json")
    assert result.returncode == 0, result.stderr
    reason = json.loads(result.stdout)["kernels"]["scale"]["reason"]
    assert reason["code"] == "no-device"


def test_contract_reads_the_schema_the_library_registers(built: Path) -> None:
    result = _kernelpack("contract", str(built / "demo_ops"), "--json")
    assert result.returncode == 0, result.stderr
    kernel = json.loads(result.stdout)["kernels"]["scale"]
    assert kernel["ops"] == {"scale": "scale(Tensor x, float alpha) -> Tensor"}
    assert kernel["constants"]["DTYPES"] == ["torch.float32"]
    assert kernel["functions"]["scale"] == "(x: torch.Tensor, alpha: float = 1.0) -> torch.Tensor"


def test_scaffolded_tests_pass_and_skip_gpu_tests_with_a_reason(built: Path) -> None:
    if _has_gpu():
        pytest.skip("a GPU is visible")
    env = {**os.environ, "PYTHONPATH": str(built)}
    env.pop("KERNELPACK_REQUIRE", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=built,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 2 skipped" in result.stdout
    assert "no-device" in result.stdout or "no CUDA device" in result.stdout
