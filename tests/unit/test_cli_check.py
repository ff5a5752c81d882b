"""`kernelpack check [PATH] [--json]`, run as users run it: the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELPACK = Path(sys.executable).parent / "kernelpack"

PYPROJECT = '[project]\nname = "llm-ops"\nversion = "0.1.0"\n\n[tool.kernelpack]\n'
KERNELS = """\
[rmsnorm]
sources = ["csrc/*.cu", "csrc/binding.cpp"]
include-dirs = ["csrc"]
arch = "9.0a"
abi = "stable"

[flash_moe]
sources = ["csrc/flash_moe.cu"]
arch = { x86_64 = ["10.0a"], aarch64 = ["10.0a", "10.3a"] }
cxx-std = 17
"""


def run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KERNELPACK), "check", *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder holding pyproject.toml and the llm_ops package."""
    root = tmp_path / "proj"
    files = [
        "llm_ops/rmsnorm/csrc/rmsnorm.cu",
        "llm_ops/rmsnorm/csrc/binding.cpp",
        "llm_ops/flash_moe/csrc/flash_moe.cu",
    ]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("// x\n")
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "llm_ops" / "kernels.toml").write_text(KERNELS)
    return root


def test_valid_project_exits_zero_with_summary(project: Path) -> None:
    result = run(cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "llm_ops (llm-ops 0.1.0): 2 kernels in llm_ops/kernels.toml: ok"
    assert any(line.split()[:2] == ["rmsnorm", "abi=stable"] for line in lines)
    assert any("x86_64:10.0a aarch64:10.0a,10.3a" in line for line in lines)
    assert result.stderr == ""


@pytest.mark.parametrize(
    "path", ["proj", "proj/llm_ops", "proj/llm_ops/kernels.toml", "proj/pyproject.toml"]
)
def test_every_kind_of_path_is_accepted(project: Path, path: str) -> None:
    result = run(path, cwd=project.parent)
    assert result.returncode == 0, result.stderr


def test_needs_no_compiler(project: Path) -> None:
    no_cuda = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(project / "none")}
    result = run(cwd=project, env=no_cuda)
    assert result.returncode == 0, result.stderr


def test_json_reports_package_manifest_and_kernels(project: Path) -> None:
    result = run("--json", cwd=project)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["package"] == "llm_ops"
    assert report["manifest"] == str(project / "llm_ops" / "kernels.toml")
    assert list(report["kernels"]) == ["rmsnorm", "flash_moe"]
    rmsnorm = report["kernels"]["rmsnorm"]
    assert rmsnorm["abi"] == "stable"
    assert rmsnorm["arch"] == {"*": ["9.0a"]}
    assert rmsnorm["namespace"] == "llm_ops_rmsnorm"
    assert rmsnorm["sources"] == ["csrc/binding.cpp", "csrc/rmsnorm.cu"]
    assert report["kernels"]["flash_moe"]["arch"] == {
        "x86_64": ["10.0a"],
        "aarch64": ["10.0a", "10.3a"],
    }


def _assert_bad_input(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        pytest.param('"9.0a"', '"9.5"', ('[rmsnorm].arch: "9.5" is not a CUDA arch',), id="arch"),
        pytest.param('"9.0a"', '"9.0a', ("[rmsnorm].arch: invalid TOML at line 4",), id="syntax"),
        pytest.param("cxx-std", "cxx_std", ("[flash_moe].cxx_std: unknown key",), id="typo"),
        pytest.param('"csrc/binding.cpp"', '"../../x.cu"', ("[rmsnorm].sources",), id="escape"),
        pytest.param('abi = "stable"', 'abi = "abi3"', ("[rmsnorm].abi",), id="abi"),
    ],
)
def test_bad_manifest_is_one_stderr_line_exit_2(
    project: Path, old: str, new: str, fragments: tuple[str, ...]
) -> None:
    manifest = project / "llm_ops" / "kernels.toml"
    manifest.write_text(KERNELS.replace(old, new, 1))
    result = run(cwd=project)
    _assert_bad_input(result, "kernelpack check: error: llm_ops/kernels.toml: ", *fragments)


def test_missing_sources_are_an_error_for_check(project: Path) -> None:
    (project / "llm_ops" / "flash_moe" / "csrc" / "flash_moe.cu").unlink()
    result = run(cwd=project)
    _assert_bad_input(result, '[flash_moe].sources: "csrc/flash_moe.cu" does not exist')


def test_depends_are_checked_by_name_without_looking_for_headers(project: Path) -> None:
    # No compiler and nothing of this machine: headers not installed here are doctor's and
    # build's concern, so check answers the same on every machine.
    pyproject = PYPROJECT + '[tool.kernelpack.deps]\nmylib = "third_party/mylib"\n'
    (project / "pyproject.toml").write_text(pyproject)
    manifest = project / "llm_ops" / "kernels.toml"
    manifest.write_text(KERNELS + 'depends = ["mylib", "cutlass"]\n')
    result = run("--json", cwd=project, env={"KERNELPACK_CUTLASS_DIR": str(project / "none")})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kernels"]["flash_moe"]["depends"] == ["mylib", "cutlass"]


def test_unknown_depends_name_is_an_error_for_check(project: Path) -> None:
    manifest = project / "llm_ops" / "kernels.toml"
    manifest.write_text(KERNELS + 'depends = ["mylib"]\n')
    result = run(cwd=project)
    _assert_bad_input(result, '[flash_moe].depends: unknown dependency "mylib"')


def test_bad_settings_are_one_stderr_line_exit_2(project: Path) -> None:
    (project / "pyproject.toml").write_text(PYPROJECT + 'arch = "sm_90a"\n')
    result = run(cwd=project)
    _assert_bad_input(result, 'pyproject.toml: [tool.kernelpack].arch: "sm_90a"', 'write "9.0a"')


def test_path_that_is_not_a_project_exits_2(tmp_path: Path) -> None:
    result = run(tmp_path / "nowhere", cwd=tmp_path)
    _assert_bad_input(result, "nowhere: does not exist; expected a kernels.toml")


def test_json_keeps_every_kernel_field_it_always_had(project: Path) -> None:
    # Tools read these; the shape may grow, never lose or rename one.
    result = run("--json", cwd=project)
    kernel = json.loads(result.stdout)["kernels"]["rmsnorm"]
    assert {
        "namespace", "abi", "stable_target", "arch", "ptx", "sources", "include_dirs", "cxx_std",
        "min_cuda", "platforms", "depends", "defines", "libraries", "nvcc_flags", "cxx_flags",
        "description",
    } <= set(kernel)  # fmt: skip
    assert kernel["stable_target"] == "2.10"
    assert kernel["include_dirs"] == ["csrc"]


def test_every_problem_of_a_project_is_listed_in_file_order(project: Path) -> None:
    manifest = project / "llm_ops" / "kernels.toml"
    manifest.write_text(KERNELS.replace('"9.0a"', '"9.5"').replace("cxx-std = 17", "cxx-std = 14"))
    result = run(cwd=project)
    assert result.returncode == 2
    assert [line.split(": ")[3] for line in result.stderr.splitlines()] == [
        "[rmsnorm].arch",
        "[flash_moe].cxx-std",
    ]
