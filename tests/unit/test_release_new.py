"""`kernelpack new`: a kernel package that `kernelpack check` accepts, written without
overwriting anything."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

import kernelpack
from kernelpack.cli import main
from kernelpack.project.locate import locate
from kernelpack.scaffold import new

RUFF = Path(sys.executable).with_name("ruff")


def _new(root: Path, *argv: str) -> int:
    return main(["new", str(root), *argv])


def test_writes_a_package_that_check_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "my-ops"
    assert _new(root, "--kernel", "scale") == 0
    capsys.readouterr()
    assert main(["check", str(root)]) == 0
    assert "1 kernel" in capsys.readouterr().out


def test_layout_follows_docs(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    _new(root, "--kernel", "scale")
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert written == [
        ".gitignore",
        "my_ops/__init__.py",
        "my_ops/kernels.toml",
        "my_ops/scale/__init__.py",
        "my_ops/scale/csrc/scale.cu",
        "pyproject.toml",
        "tests/test_scale.py",
    ]


def test_pyproject_uses_kernelpack_backend_and_names_the_manifest(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    _new(root, "--kernel", "scale")
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert data["build-system"]["build-backend"] == "kernelpack.backend"
    assert data["project"]["name"] == "my-ops"
    project = locate(root)
    assert (project.package, project.env_prefix) == ("my_ops", "MY_OPS")


def test_build_requirement_is_the_running_kernelpacks_compatible_range(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    _new(root, "--kernel", "scale")
    data = tomllib.loads((root / "pyproject.toml").read_text())
    (line,) = data["build-system"]["requires"]
    requirement = Requirement(line)
    assert requirement.name == "kernelpack"
    assert requirement.specifier.contains(kernelpack.__version__)
    assert line == new.requirement(kernelpack.__version__)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.1.0", "kernelpack>=0.1,<0.2"),
        ("0.12.3.dev1", "kernelpack>=0.12,<0.13"),
        ("1.2.0", "kernelpack>=1.2,<2"),
        ("2", "kernelpack>=2.0,<3"),
    ],
)
def test_compatible_range_of_a_release(version: str, expected: str) -> None:
    assert new.requirement(version) == expected
    assert Requirement(expected).specifier.contains(version, prereleases=True)


def _ignored(root: Path, *paths: str) -> set[str]:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    subprocess.run([git, "init", "-q", str(root)], check=True)
    done = subprocess.run(
        [git, "-C", str(root), "check-ignore", "--no-index", *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    return set(done.stdout.split())


def test_gitignore_keeps_build_outputs_and_caches_out_of_git(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    _new(root, "--kernel", "scale")
    outputs = [
        "build/kernelpack/build.ninja",
        "build/compile_commands.json",
        "dist/my_ops-0.1.0.tar.gz",
        "my_ops/scale/_C.abi3.so",
        "my_ops/_kernelpack.json",
        "my_ops/__pycache__/x.pyc",
        ".pytest_cache/v/x",
        ".cache/clangd/index/x",
    ]
    sources = ["my_ops/scale/csrc/scale.cu", "pyproject.toml", "tests/test_scale.py"]
    assert _ignored(root, *outputs, *sources) == set(outputs)


def test_an_existing_gitignore_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "my-ops"
    root.mkdir()
    (root / ".gitignore").write_text("mine\n")
    assert _new(root, "--kernel", "scale") == 0
    assert (root / ".gitignore").read_text() == "mine\n"
    assert (root / "pyproject.toml").is_file()


def test_stable_kernel_registers_through_kernelpack_stable_macros(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale")
    source = (root / "ops" / "scale" / "csrc" / "scale.cu").read_text()
    assert "#include <kernelpack/ops.h>" in source
    assert "KP_STABLE_LIBRARY(m)" in source and "KP_STABLE_LIBRARY_IMPL(CUDA, m)" in source
    spec = locate(root).load_manifest().kernels[0]
    assert (spec.abi, str(spec.stable_target)) == ("stable", "2.10")


def test_torch_kernel_registers_through_kernelpack_classic_macros(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale", "--abi", "torch", "--arch", "9.0a,8.0")
    source = (root / "ops" / "scale" / "csrc" / "scale.cu").read_text()
    assert "KP_LIBRARY(m)" in source and "KP_LIBRARY_IMPL(CUDA, m)" in source
    spec = locate(root).load_manifest().kernels[0]
    assert spec.abi == "torch"
    assert [str(a) for a in spec.archs_for("x86_64") or ()] == ["8.0", "9.0a"]


def test_package_wires_the_registry_in_two_lines(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale")
    init = (root / "ops" / "__init__.py").read_text()
    assert "from kernelpack_runtime import Registry\n" in init
    assert "status, is_available, unavailable_reason, load = Registry(__name__).api()\n" in init


def test_kernel_module_gets_its_namespace_from_the_build_record(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale")
    module = (root / "ops" / "scale" / "__init__.py").read_text()
    assert "from . import _C" in module
    assert "NAMESPACE = ops_namespace(__name__)" in module
    assert '@torch.library.register_fake(f"{NAMESPACE}::scale")' in module
    assert "torch.ops.ops_scale" not in module


def test_test_file_uses_gpu_and_kernel_markers(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale")
    test = (root / "tests" / "test_scale.py").read_text()
    assert '@pytest.mark.gpu\n@pytest.mark.kernel("ops.scale")' in test


@pytest.mark.skipif(not RUFF.exists(), reason="ruff is not installed next to python")
def test_generated_python_is_lint_and_format_clean(tmp_path: Path) -> None:
    root = tmp_path / "ops"
    _new(root, "--kernel", "scale")
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [str(RUFF), *command, "--isolated", "."], cwd=root, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_refuses_to_overwrite_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ops"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_scale.py").write_text("# mine\n")
    assert _new(root, "--kernel", "scale") == 2
    assert "test_scale.py: already exists" in capsys.readouterr().err
    assert not (root / "pyproject.toml").exists()
    assert (root / "tests" / "test_scale.py").read_text() == "# mine\n"


@pytest.mark.parametrize(
    ("root", "argv", "message"),
    [
        ("ops", ["--kernel", "class"], "'class' is not a Python identifier"),
        ("ops", ["--kernel", "_private"], "starts with an underscore"),
        ("ops", ["--kernel", "torch"], "would shadow"),
        ("9ops", ["--kernel", "scale"], "package name '9ops'"),
        ("ops", ["--kernel", "scale", "--arch", "9.5"], "--arch: "),
    ],
    ids=["keyword", "private", "shadow", "bad-package", "bad-arch"],
)
def test_bad_names_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], root: str, argv: list[str], message: str
) -> None:
    assert _new(tmp_path / root, *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / root).exists()
