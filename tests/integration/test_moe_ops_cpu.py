"""examples/moe_ops on a machine without a GPU: the CUTLASS sm90 package builds, installs,
imports and says why it cannot run.

The build is the real one: ten translation units, eight of them CUTLASS 3.x grouped-GEMM
instantiations (minutes on two cores), with the CUTLASS headers of the `nvidia-cutlass`
wheel (`depends = ["cutlass"]`). Without those headers the module skips, with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from buildlog import compiles

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "moe_ops"


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.fixture(scope="module")
@compiles("the moe_ops wheel (CUTLASS)")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    if importlib.util.find_spec("cutlass_library") is None:
        pytest.skip("the CUTLASS headers are absent (pip install --no-deps nvidia-cutlass)")
    pytest.importorskip("torch")
    project = tmp_path_factory.mktemp("src") / "moe_ops"
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
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = out.glob("moe_ops-*.whl")
    return built


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        timeout=300,
    )
    return target


def _python(site: Path, code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=site,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_wheel_is_tagged_for_the_stable_abi_and_holds_sm90a_code(wheel: Path) -> None:
    assert re.fullmatch(
        r"moe_ops-0\.1\.0\+cu\d+stable2\.10-cp\d+-abi3-manylinux_2_\d+_x86_64\.whl", wheel.name
    )
    archive = zipfile.ZipFile(wheel)
    assert {"moe_ops/moe/_C.abi3.so", "moe_ops/_kernelpack.json"} <= set(archive.namelist())
    record = json.loads(archive.read("moe_ops/_kernelpack.json"))
    assert "moe" in json.dumps(record) and "9.0a" in json.dumps(record)
    library = archive.read("moe_ops/moe/_C.abi3.so")
    # Stable ABI: no C++ torch symbol (mangled at::/c10:: names) is imported.
    assert b"_ZN3c10" not in library and b"_ZN2at" not in library
    assert b"sm_90a" in library


def test_installed_package_reports_no_device(site: Path) -> None:
    if _has_gpu():
        pytest.skip("this machine has a GPU")
    status = json.loads(_python(site, "import json, moe_ops; print(json.dumps(moe_ops.status()))"))
    assert set(status) == {"moe"}
    assert status["moe"].startswith("no-device"), status


def test_fakes_give_shapes_on_meta_and_requirements_are_exported(site: Path) -> None:
    out = _python(
        site,
        """
        import json, torch
        from moe_ops import moe
        bf16 = torch.bfloat16
        x = torch.empty(100, 256, device="meta", dtype=bf16)
        w = torch.empty(8, 256, 512, device="meta", dtype=bf16)
        w_down = torch.empty(8, 256, 256, device="meta", dtype=bf16)
        offsets = torch.empty(8, device="meta", dtype=torch.int32)
        logits = torch.empty(100, 8, device="meta")
        shapes = [
            list(moe.grouped_mm(x, w, offsets).shape),
            list(moe.grouped_mm_silu_mul(x, w, offsets).shape),
            list(moe.moe_forward(x, logits, w, w_down, 2, gate_up_interleaved=True).shape),
        ]
        print(json.dumps([shapes, moe.ALIGNMENT, moe.MAX_TOP_K, moe.MAX_EXPERTS,
                          moe.unsupported_shape_reason((100, 256), (8, 256, 512)),
                          moe.unsupported_shape_reason((100, 250), (8, 250, 512)) is not None]))
        """,
    )
    assert json.loads(out) == [[[100, 512], [100, 256], [100, 256]], 8, 8, 1024, None, True]
