"""`kernelpack status PKG [--json]` and `PackageStatus`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import built, make_package, skipped, unique_name

from kernelpack.cli import main
from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import fake_probe, no_device_probe


@pytest.fixture
def no_gpu() -> Iterator[None]:
    previous = set_default_probe(no_device_probe("the NVIDIA driver reports no GPU"))
    yield
    set_default_probe(previous)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    return make_package(
        tmp_path,
        name,
        {
            "rmsnorm": built("rmsnorm", name, abi="stable"),
            "flash_moe": skipped("arch-unsupported", "nvcc 12.4 cannot build sm_100a"),
        },
    )


def test_json_has_the_documented_shape(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", package.name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "package": package.name,
        "version": "0.1.0+cu130torch2.14.1",
        "kernels": {
            "rmsnorm": {
                "available": False,
                "reason": {
                    "code": "no-device",
                    "message": "no CUDA device visible: the NVIDIA driver reports no GPU",
                },
                "archs": ["9.0a"],
                "abi": "stable",
            },
            "flash_moe": {
                "available": False,
                "reason": {
                    "code": "not-built",
                    "message": "skipped at build time (arch-unsupported): "
                    "nvcc 12.4 cannot build sm_100a",
                    "cause": {
                        "code": "arch-unsupported",
                        "message": "nvcc 12.4 cannot build sm_100a",
                    },
                },
                "archs": [],
                "abi": None,
            },
        },
    }


def test_json_reason_is_null_for_an_available_kernel(
    package: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous = set_default_probe(fake_probe("9.0"))
    try:
        assert main(["status", package.name, "--json"]) == 0
    finally:
        set_default_probe(previous)
    kernel = json.loads(capsys.readouterr().out)["kernels"]["rmsnorm"]
    assert kernel == {"available": True, "reason": None, "archs": ["9.0a"], "abi": "stable"}


def test_table_lists_kernel_availability_archs_abi_and_reason(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(package)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "kernel" in line)
    assert header.split() == [
        "kernel",
        "available",
        "archs",
        "abi",
        "reason",
    ]
    assert "rmsnorm" in out and "9.0a" in out and "stable" in out and "no-device" in out
    assert "flash_moe" in out and "not-built" in out
    assert out.splitlines()[-1].strip() == "device none (the NVIDIA driver reports no GPU)"


def test_a_package_folder_is_accepted(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(package), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["package"] == package.name


def test_unknown_package_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "kp_no_such_package_anywhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelpack status: error: kp_no_such_package_anywhere: no such package")
    assert len(err.strip().splitlines()) == 1


def test_package_without_build_record_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    make_package(tmp_path, name, {}, record=False)
    assert main(["status", name]) == 1
    assert "has no build record" in capsys.readouterr().err


def test_a_path_that_is_not_a_package_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(tmp_path / "nope")]) == 2
    assert "not a package name, nor a package folder" in capsys.readouterr().err
