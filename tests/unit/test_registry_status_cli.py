"""`kernelpack status PKG|PATH [--json] [--require]` and `PackageStatus`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from registry_support import build_record, built, make_package, status_package, unique_name

from kernelpack.cli import main
from kernelpack_runtime import set_default_probe
from kernelpack_runtime.testing.fakes import fake_probe


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return status_package(tmp_path, monkeypatch)


def test_json_has_the_documented_shape(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", package.name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "package": package.name,
        "install": "in-place",
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
        "verify_libraries": {"enabled": True, "reason": None},
    }


def test_json_says_when_library_digests_are_not_checked(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPACK_VERIFY", "0")
    assert main(["status", package.name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verify_libraries"] == {"enabled": False, "reason": "KERNELPACK_VERIFY=0"}


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
    assert "nope: no such package or project folder" in capsys.readouterr().err


# -- PKG|PATH, --require, invalid records, edited sources ----------------------------------------


def _project(tmp_path: Path, name: str) -> Path:
    """A source tree as `kernelpack build` takes it: pyproject.toml + <name>/kernels.toml,
    with an in-place build's record whose hash is that of the sources as they are now."""
    from kernelpack.builder.outputs import sources_sha256
    from kernelpack.project.locate import locate

    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n[tool.kernelpack]\narch = ["9.0a"]\n'
    )
    kernel = built("rmsnorm", name, abi="stable")
    make_package(root, name, {"rmsnorm": kernel})
    (root / name / "rmsnorm" / "csrc").mkdir()
    (root / name / "rmsnorm" / "csrc" / "rmsnorm.cu").write_text("// v1\n")
    (root / name / "kernels.toml").write_text(
        '[rmsnorm]\nabi = "stable"\nsources = ["csrc/rmsnorm.cu"]\n'
    )
    manifest = locate(root).load_manifest()
    digest = sources_sha256(manifest.kernel("rmsnorm"), root / name)
    record = build_record(name, {"rmsnorm": dataclasses.replace(kernel, sources_sha256=digest)})
    record.write(root / name / "_kernelpack.json")
    return root


def test_the_project_folder_that_build_accepts_is_accepted(
    tmp_path: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name()
    root = _project(tmp_path, name)
    for target in (root, root / name, root / name / "kernels.toml"):
        assert main(["status", str(target), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["package"] == name


def test_require_exits_1_when_any_kernel_is_unavailable(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(package), "--json", "--require"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["kernels"]["rmsnorm"]["available"] is False
    assert captured.err.strip() == (
        "kernelpack status: unavailable under --require: rmsnorm, flash_moe"
    )


def test_require_exits_0_when_every_kernel_is_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name = unique_name()
    make_package(tmp_path, name, {"rmsnorm": built("rmsnorm", name, abi="stable")})
    previous = set_default_probe(fake_probe("9.0"))
    try:
        assert main(["status", name, "--require"]) == 0
    finally:
        set_default_probe(previous)


def test_an_invalid_record_is_record_invalid_for_each_kernel_without_a_traceback(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    path = package / "_kernelpack.json"
    data = json.loads(path.read_text())
    data["kernels"]["rmsnorm"]["library"] = 5
    path.write_text(json.dumps(data))
    assert main(["status", str(package), "--json"]) == 1
    captured = capsys.readouterr()
    kernels = json.loads(captured.out)["kernels"]
    assert {name: k["reason"]["code"] for name, k in kernels.items()} == {
        "rmsnorm": "record-invalid",
        "flash_moe": "record-invalid",
    }
    assert (
        "kernels.rmsnorm.library: expected a string, got a number"
        in (kernels["rmsnorm"]["reason"]["message"])
    )
    assert captured.err.startswith("kernelpack status: error: ")
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text", ['{"schema": 2, "kernels": ["ab"]}', "[" * 100_000, '{"schema": 2'], ids=str.__len__
)
def test_a_record_naming_no_kernel_is_one_error_line(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (package / "_kernelpack.json").write_text(text)
    assert main(["status", str(package)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kernelpack status: error: {package.name}'s build record is invalid: ")
    assert len(err.strip().splitlines()) == 1


def test_in_place_build_with_edited_sources_is_flagged(
    tmp_path: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name()
    root = _project(tmp_path, name)
    assert main(["status", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels"]["rmsnorm"]["sources_changed"] is False
    (root / name / "rmsnorm" / "csrc" / "rmsnorm.cu").write_text("// v2\n")
    assert main(["status", str(root), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["kernels"]["rmsnorm"]["sources_changed"] is True
    assert captured.err.strip() == (
        "kernelpack status: rmsnorm: sources changed since this in-place build; "
        "rebuild with `kernelpack build --inplace`"
    )


def test_an_installed_package_has_no_sources_changed_field(
    package: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(package), "--json"]) == 0
    assert "sources_changed" not in json.loads(capsys.readouterr().out)["kernels"]["rmsnorm"]
