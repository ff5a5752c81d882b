"""`python -m kernelpack_runtime status PKG [--json] [--require]`: the status table where
only the runtime is installed, with the exit codes and table of `kernelpack status`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from registry_support import status_package

from kernelpack.cli import main as kernelpack_main
from kernelpack_runtime.__main__ import main

RUNTIME = Path(__file__).parents[2] / "src"


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return status_package(tmp_path, monkeypatch)


def test_json_is_what_kernelpack_status_prints(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", package.name, "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert kernelpack_main(["status", package.name, "--json"]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert theirs.pop("install") == "in-place"  # what only the builder's status can tell
    assert ours == theirs


def test_table_has_the_columns_and_one_row_per_kernel(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", package.name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{package.name} 0.1.0+cu130torch2.14.1"
    assert lines[1].split() == ["kernel", "available", "archs", "abi", "reason"]
    rows = {line.split()[0]: line.split(maxsplit=4) for line in lines[2:4]}
    assert rows["rmsnorm"][1:4] == ["no", "9.0a", "stable"]
    assert rows["rmsnorm"][4].startswith("no-device: no CUDA device visible")
    assert rows["flash_moe"][1:4] == ["no", "-", "-"]
    assert lines[-1].startswith("device none")


def test_require_exits_1_naming_the_unavailable_kernels(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", package.name, "--require"]) == 1
    assert kernelpack_main(["status", package.name, "--require"]) == 1
    err = capsys.readouterr().err
    assert "unavailable under --require: rmsnorm, flash_moe" in err


def test_a_package_that_is_not_installed_is_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "no_such_kp_package", "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["code"] == 2
    assert captured.err.count("\n") == 1
    assert "no_such_kp_package: no such package" in captured.err


def test_runs_as_a_module_without_the_builder(package: Path) -> None:
    # Only the runtime's folder and the package's are on the path: `kernelpack` cannot import.
    code = (
        "import runpy, sys; sys.modules['kernelpack'] = None;"
        f"sys.argv = ['x', 'status', {package.name!r}, '--json'];"
        "runpy.run_module('kernelpack_runtime', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{RUNTIME}:{package.parent}", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["kernels"]) == {"rmsnorm", "flash_moe"}
    assert "kernelpack." not in result.stderr
