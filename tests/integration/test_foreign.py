"""Real foreign projects, copied unchanged from tests/foreign, built with the real nvcc.

Each kernel-builder project builds from its `build.toml`, its wheel installs into a fresh
venv and, on this CPU machine, its library loads (registering its ops in the recorded
namespace) and the registry reports why it is not usable here. prime-kernels builds from its
repository root. To keep CI short, each kernel-builder copy gets a `pyproject.toml` with
`[tool.kernelpack] arch = "9.0"` (the default set for kernels without `cuda-capabilities`;
the projects' own files are untouched); prime-kernels' copy gets `requires-python` widened
to this interpreter, its only change.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import ahead
import pytest
from buildlog import compiles
from builds import build_env

from kernelpack.backend.wheel import write_wheel
from kernelpack.builder import engine, install
from kernelpack.builder.outputs import BuildResult
from kernelpack.cli import main
from kernelpack.project import buildtoml
from kernelpack.project.locate import locate
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.record import BuiltKernel

pytestmark = pytest.mark.integration
#: The classic-ABI (`torch/extension.h`) and CUTLASS builds: minutes each on 2 cores.
SLOW = pytest.mark.slow

EXAMPLES = ahead.EXAMPLES
FAST_ARCH = ahead.FAST_ARCH
FOREIGN = ahead.FOREIGN
OUTPUTS = {"build", "dist", "pyproject.toml"}


def _tree_digest(root: Path) -> str:
    """Every file below `root` (paths and bytes), leaving out what a build writes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in OUTPUTS or "__pycache__" in rel.parts or not path.is_file():
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Built:
    root: Path
    wheel: Path
    result: BuildResult
    before: str
    """`_tree_digest` of the copy before the build."""


def _build(
    source: Path, base: Path, ccache_dir: Path, *, pyproject: str | None, ahead_name: str = ""
) -> Built:
    root = base / source.name
    shutil.copytree(source, root)
    before = _tree_digest(root)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    ahead.wait(ahead_name)  # the background filled the ccache for it (ahead.py)
    project = locate(root)
    result = engine.build_project(project, environ=build_env(ccache_dir))
    return Built(root, write_wheel(project, result, base / "dist"), result, before)


@pytest.fixture(scope="session")
@compiles("kernel-builder relu")
def relu(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Built:
    base = tmp_path_factory.mktemp("relu")
    return _build(EXAMPLES / "relu", base, ccache_dir, pyproject=FAST_ARCH, ahead_name="relu")


@pytest.fixture(scope="session")
@compiles("kernel-builder relu-torch-stable-abi")
def relu_stable(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Built:
    base = tmp_path_factory.mktemp("relu_stable")
    return _build(EXAMPLES / "relu-torch-stable-abi", base, ccache_dir, pyproject=FAST_ARCH)


@pytest.fixture(scope="session")
@compiles("kernel-builder cutlass-gemm")
def cutlass_gemm(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Built:
    if importlib_find("cutlass_library") is None:
        pytest.skip("CUTLASS headers not installed (pip install --no-deps nvidia-cutlass)")
    base = tmp_path_factory.mktemp("cutlass_gemm")
    return _build(
        EXAMPLES / "cutlass-gemm", base, ccache_dir, pyproject=FAST_ARCH, ahead_name="cutlass_gemm"
    )


@pytest.fixture(scope="session")
@compiles("prime-kernels")
def prime(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Built:
    base = tmp_path_factory.mktemp("prime")
    root = base / "prime-kernels"
    shutil.copytree(FOREIGN / "prime-kernels", root)
    before = _tree_digest(root)
    ahead.widen_python(root)
    ahead.wait("prime")
    project = locate(root)
    result = engine.build_project(project, environ=build_env(ccache_dir))
    return Built(root, write_wheel(project, result, base / "dist"), result, before)


def importlib_find(module: str) -> object:
    import importlib.util

    return importlib.util.find_spec(module)


def _install(venv: Path, wheel: Path) -> None:
    subprocess.run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--force-reinstall",
            wheel,
        ],
        check=True,
    )


# Run in the venv, from a neutral folder: what the registry says, and the ops the library
# registered in its recorded namespace once the package is imported.
_REPORT = """
import json, sys, torch
from kernelpack_runtime import Registry
package = sys.argv[1]
registry = Registry(package)
status = registry.status()
record = registry.record
namespaces = {k.namespace for k in record.kernels.values() if k.namespace}
__import__(package)
ops = sorted(
    op for op in torch._C._dispatch_get_all_op_names()
    if op.split("::")[0] in namespaces
)
print(json.dumps({"status": status, "ops": ops, "file": sys.modules[package].__file__}))
"""


def _report(python: Path, package: str, cwd: Path, path: Path | None = None) -> dict[str, object]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    out = subprocess.run(
        [python, "-c", _REPORT, package],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        env=env,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


# --- kernel-builder projects ---------------------------------------------------------------


@pytest.mark.parametrize("name", [pytest.param("relu", marks=SLOW), "relu_stable"])
def test_kernel_builder_project_builds_unchanged_into_one_library(
    name: str, request: pytest.FixtureRequest
) -> None:
    built: Built = request.getfixturevalue(name)
    record = built.result.record
    library = record.kernels[buildtoml.KERNEL]
    assert library.status == "built"
    assert library.archs == (Arch.parse("9.0"),)
    suffix = ".abi3.so" if name == "relu_stable" else sysconfig.get_config_var("EXT_SUFFIX")
    assert library.library == f"{library.namespace}{suffix}"  # in the package itself
    assert _tree_digest(built.root) == built.before  # sources, torch-ext, tests: untouched


@SLOW
def test_other_backends_are_in_the_record_as_skipped(relu: Built) -> None:
    kernels = relu.result.record.kernels
    assert {name for name, k in kernels.items() if k.status == "skipped"} == {
        "relu_xpu",
        "relu_metal",
        "relu_rocm",
    }
    reason = kernels["relu_metal"].reason
    assert reason is not None and reason.code == "platform-excluded"


@SLOW
def test_cpu_kernels_build_into_the_cpu_library_with_the_host_compiler(relu: Built) -> None:
    cpu = relu.result.record.kernels[buildtoml.CPU_KERNEL]
    assert isinstance(cpu, BuiltKernel)
    assert cpu.backend == "cpu" and cpu.archs == ()
    cuda = relu.result.record.kernels[buildtoml.KERNEL]
    assert cpu.namespace == f"{cuda.namespace}_cpu"
    compiled = {step.output: step.tool for step in relu.result.compiled}
    cpu_steps = {out: tool for out, tool in compiled.items() if "/_ops_cpu/" in out}
    assert cpu_steps and set(cpu_steps.values()) == {"c++"}  # no nvcc, one graph


def test_wheel_holds_the_package_generated_ops_py_and_the_library(relu_stable: Built) -> None:
    names = _names(relu_stable.wheel)
    namespace = relu_stable.result.record.kernels[buildtoml.KERNEL].namespace
    package = "relu_torch_stable_abi"
    assert f"{package}/__init__.py" in names
    assert f"{package}/layers/__init__.py" in names
    assert f"{package}/_ops.py" in names
    assert f"{package}/{namespace}.abi3.so" in names
    assert f"{package}/_kernelpack.json" in names
    assert not [n for n in names if n.endswith((".cu", ".cpp", ".h"))]
    assert "-cp310-abi3-" in relu_stable.wheel.name


@pytest.mark.parametrize(
    ("name", "package", "op"),
    [
        pytest.param("relu", "relu", "relu", marks=SLOW),
        ("relu_stable", "relu_torch_stable_abi", "relu"),
        pytest.param("cutlass_gemm", "cutlass_gemm", "cutlass_gemm", marks=SLOW),
    ],
)
def test_wheel_installs_loads_its_ops_and_reports_on_cpu(
    name: str,
    package: str,
    op: str,
    request: pytest.FixtureRequest,
    fresh_venv: Path,
    tmp_path: Path,
) -> None:
    built: Built = request.getfixturevalue(name)
    _install(fresh_venv, built.wheel)
    report = _report(fresh_venv / "bin" / "python", package, tmp_path)
    kernels = built.result.record.kernels
    namespace = kernels[buildtoml.KERNEL].namespace
    status = report["status"]
    assert isinstance(status, dict)
    assert status[buildtoml.KERNEL].startswith("no-device: ")
    if buildtoml.CPU_KERNEL in kernels:
        # No GPU: `_ops.py` loads the CPU library, usable here.
        assert report["ops"] == [f"{namespace}_cpu::{op}"]
        assert status[buildtoml.CPU_KERNEL] == "available"
    else:
        # Only a CUDA library: it is imported all the same and its ops are registered.
        assert report["ops"] == [f"{namespace}::{op}"]
    assert "site-packages" in str(report["file"])


def test_no_op_rebuild_runs_nothing_and_one_edit_recompiles_that_file(
    relu_stable: Built, ccache_dir: Path
) -> None:
    project = locate(relu_stable.root)
    again = engine.build_project(project, environ=build_env(ccache_dir))
    assert again.steps == ()
    kernel = relu_stable.root / "relu_cuda" / "relu.cu"
    kernel.write_text(kernel.read_text() + "\n// edited\n")
    edited = engine.build_project(project, environ=build_env(ccache_dir))
    assert sorted(step.output for step in edited.compiled) == ["obj/_ops/_root/relu_cuda/relu.cu.o"]


def test_build_cli_says_it_used_build_toml(
    relu_stable: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["build", str(relu_stable.root), "--inplace"]) == 0
    err = capsys.readouterr().err
    assert "kernelpack build: using " in err and "build.toml (kernel-builder)" in err
    package = relu_stable.root / "torch-ext" / "relu_torch_stable_abi"
    assert (package / "_ops.py").is_file() and (package / "_kernelpack.json").is_file()


# --- kernelpack migrate ----------------------------------------------------------------------


def test_migrated_project_builds_and_behaves_the_same(
    tmp_path: Path, ccache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    direct = tmp_path / "direct" / "relu-torch-stable-abi"
    moved = tmp_path / "moved" / "relu-torch-stable-abi"
    for root in (direct, moved):
        shutil.copytree(EXAMPLES / "relu-torch-stable-abi", root)
        (root / "pyproject.toml").write_text(FAST_ARCH)
    # The project's own pyproject.toml (here only [tool.kernelpack] arch) is replaced.
    assert main(["migrate", str(moved), "--force"]) == 0
    migrated = capsys.readouterr().out
    assert "note: [kernel.relu_xpu] is not carried over" in migrated
    assert "the CPU library" in migrated and "is not carried over" in migrated
    assert 'build-backend = "kernelpack.backend"' in (moved / "pyproject.toml").read_text()
    kernels = (moved / "torch-ext" / "relu_torch_stable_abi" / "kernels.toml").read_text()
    assert 'arch = ["9.0"]' in kernels

    records = {}
    reports = {}
    for root in (direct, moved):
        project = locate(root)
        assert project.is_build_toml == (root == direct)
        result = engine.build_project(project, environ=build_env(ccache_dir))
        install.install_inplace(result)
        records[root] = result.record
        reports[root] = _report(
            Path(sys.executable), "relu_torch_stable_abi", tmp_path, root / "torch-ext"
        )
    a, b = (records[direct].kernels["_ops"], records[moved].kernels["_ops"])
    assert (a.status, a.abi, a.stable_target, a.archs, a.namespace) == (
        b.status,
        b.abi,
        b.stable_target,
        b.archs,
        b.namespace,
    )
    # The CUDA library's ops are the same in both. Without a GPU, the build.toml package
    # serves its CPU library's ops (`_ops.py` loads the first usable library, CUDA first);
    # `migrate` says it does not carry the CPU library over, so the moved one has none.
    assert reports[moved]["ops"] == [f"{a.namespace}::relu"]
    cpu = records[direct].kernels.get(buildtoml.CPU_KERNEL)
    assert isinstance(cpu, BuiltKernel) and cpu.namespace != a.namespace
    assert reports[direct]["ops"] == [f"{cpu.namespace}::relu"]
    assert reports[direct]["status"]["_ops"] == reports[moved]["status"]["_ops"]  # type: ignore[index]


def test_migrate_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "relu"
    shutil.copytree(EXAMPLES / "relu", root)
    assert main(["migrate", str(root)]) == 0
    kernels = root / "torch-ext" / "relu" / "kernels.toml"
    kernels.write_text("# mine\n")
    capsys.readouterr()
    assert main(["migrate", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "exists" in err and "--force" in err
    assert kernels.read_text() == "# mine\n"  # nothing half-written
    assert main(["migrate", str(root), "--force"]) == 0
    assert kernels.read_text().startswith("# Migrated from build.toml")


# --- prime-kernels (the seed's repository) ----------------------------------------------------


@SLOW
def test_prime_kernels_builds_from_its_repository_root(prime: Built) -> None:
    record = prime.result.record
    assert set(record.kernels) == {"flash_moe"}
    flash = record.kernels["flash_moe"]
    assert (flash.status, flash.archs, flash.namespace) == (
        "built",
        (Arch.parse("10.0a"),),
        "prime_moe",
    )


@SLOW
def test_prime_kernels_wheel_installs_and_reports_on_cpu(
    prime: Built, fresh_venv: Path, tmp_path: Path
) -> None:
    _install(fresh_venv, prime.wheel)
    report = _report(fresh_venv / "bin" / "python", "prime_kernels", tmp_path)
    status = report["status"]
    assert isinstance(status, dict) and status["flash_moe"].startswith("no-device: ")
