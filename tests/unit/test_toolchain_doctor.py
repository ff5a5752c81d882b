"""`kernelpack doctor`: the toolchain, and a package's plan, against fake nvcc and torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes import NVCC_12_4, install_nvcc, install_torch
from fakes.projects import write_tree

from kernelpack.cli import main
from kernelpack.toolchain import detection as toolchain

MANIFEST = """\
[rmsnorm]
sources = ["csrc/rmsnorm.cu"]
arch = ["9.0a"]

[flash_moe]
sources = ["csrc/moe.cu"]
arch = "10.0a"
abi = "stable"
"""


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """nvcc 12.4 (no sm_100a) with a torch built for CUDA 12.4; returns an empty folder."""
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-default-cuda")
    bindir = install_nvcc(tmp_path / "toolkit", NVCC_12_4)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", str(install_torch(tmp_path / "torch", "2.6.0+cu124", "12.4")))
    monkeypatch.setenv("KERNELPACK_LAUNCHER", "none")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for var in ("CUDA_HOME", "CUDA_PATH", "KERNELPACK_KERNELS", "KERNELPACK_REQUIRE"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def package(machine: Path) -> Path:
    files = dict.fromkeys(("rmsnorm/csrc/rmsnorm.cu", "flash_moe/csrc/moe.cu"), "// kernel\n")
    return write_tree(machine / "demo", {**files, "kernels.toml": MANIFEST})


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_carries_nvcc_and_torch_versions(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = doctor_json(capsys, str(package))
    assert code == 0
    assert report["toolchain"]["nvcc_version"] == "12.4.131"
    assert report["toolchain"]["torch"] == "2.6.0"
    assert report["toolchain"]["torch_cuda"] == "12.4"
    assert report["package"] == "demo"


def test_json_carries_each_kernels_decision(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report = doctor_json(capsys, str(package))
    assert report["kernels"]["rmsnorm"] == {
        "decision": "build",
        "reason": None,
        "abi": "torch",
        "archs": ["9.0a"],
        "gencode": ["-gencode=arch=compute_90a,code=sm_90a"],
        "cxx_std": 17,
        "depends": [],
        "depends_include_dirs": [],
        "parts": {},  # a kernels.toml kernel compiles all its sources with its own settings
        "left_out": [],
    }
    assert report["kernels"]["flash_moe"]["decision"] == "skip"
    assert report["kernels"]["flash_moe"]["reason"] == {
        "code": "arch-unsupported",
        "message": "nvcc 12.4 cannot build sm_100a",
    }


def test_prints_plan_table_with_skip_reason(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(package)]) == 0
    out = capsys.readouterr().out
    assert "12.4.131" in out
    assert "1 to build, 1 skipped" in out
    assert "arch-unsupported: nvcc 12.4 cannot build sm_100a" in out


def test_without_a_package_still_prints_the_toolchain(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "12.4.131" in out
    assert "No kernel package" in out


def test_without_a_package_json_has_no_kernels(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = doctor_json(capsys)
    assert code == 0
    assert report["package"] is None and report["kernels"] == {}
    assert report["toolchain"]["cuda"] == "12.4"


def test_explicit_path_without_a_package_is_one_line_exit_2(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(machine / "nowhere")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "does not exist" in captured.err


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_invalid_manifest_is_a_one_line_error(
    package: Path, capsys: pytest.CaptureFixture[str], json_flag: list[str]
) -> None:
    (package / "kernels.toml").write_text(
        '[rmsnorm]\nsources = ["csrc/rmsnorm.cu"]\narch = "9.5"\n'
    )
    assert main(["doctor", str(package), *json_flag]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "[rmsnorm].arch" in captured.err
    if json_flag:  # tools parse stdout: the failure is JSON there too
        error = json.loads(captured.out)["error"]
        assert error["exit_code"] == 2 and "[rmsnorm].arch" in error["message"]
    else:
        assert captured.out == ""


def test_bad_settings_in_the_working_folder_are_a_one_line_error(
    machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (machine / "pyproject.toml").write_text('[tool.kernelpack]\nabi = "classic"\n')
    assert main(["doctor"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "[tool.kernelpack].abi" in captured.err


def test_piped_text_has_no_trailing_padding(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(package)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line != line.rstrip()] == []


def test_depends_not_installed_here_is_a_problem(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNELPACK_CUTLASS_DIR", str(package / "no-cutlass"))
    manifest = package / "kernels.toml"
    manifest.write_text(MANIFEST.replace("[flash_moe]", 'depends = ["cutlass"]\n\n[flash_moe]'))
    code, report = doctor_json(capsys, str(package))
    assert code == 2
    (problem,) = report["problems"]
    assert problem.startswith("rmsnorm: KERNELPACK_CUTLASS_DIR=")


def test_depends_found_here_are_in_the_json(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    include = package.parent / "cutlass" / "include"
    (include / "cutlass").mkdir(parents=True)
    monkeypatch.setenv("KERNELPACK_CUTLASS_DIR", str(include))
    manifest = package / "kernels.toml"
    manifest.write_text(MANIFEST.replace("[flash_moe]", 'depends = ["cutlass"]\n\n[flash_moe]'))
    code, report = doctor_json(capsys, str(package))
    assert code == 0
    rmsnorm = report["kernels"]["rmsnorm"]
    assert rmsnorm["depends"] == ["cutlass"]
    assert rmsnorm["depends_include_dirs"] == [str(include)]


def test_require_with_a_skip_exits_2_listing_it(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DEMO_KERNELS_REQUIRE", "1")
    code, report = doctor_json(capsys, str(package))
    assert code == 2
    assert report["problems"] == [
        "required kernels would be skipped (1): "
        "flash_moe: arch-unsupported, nvcc 12.4 cannot build sm_100a"
    ]


def test_selection_from_environment_marks_others_not_selected(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNELPACK_KERNELS", "flash_moe")
    _, report = doctor_json(capsys, str(package))
    assert report["kernels"]["rmsnorm"]["reason"]["code"] == "not-selected"


def test_no_nvcc_reports_missing_and_skips_every_kernel(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    code, report = doctor_json(capsys, str(package))
    assert code == 0
    assert report["toolchain"]["nvcc_missing"]["code"] == "nvcc-missing"
    reasons = {k["reason"]["code"] for k in report["kernels"].values()}
    assert reasons == {"nvcc-missing"}
