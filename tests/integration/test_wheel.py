"""Wheels, sdists and the PEP 517/660 backend, with real builds and real installers.

A fresh venv reuses this interpreter's packages (torch, kernelpack) through a `.pth` that
adds its site-packages, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from builds import BuiltPackage, build_env, copy_built, copy_package, source_of
from fakes.fake_torch import install_torch
from venvs import overlay_venv

from kernelpack import backend
from kernelpack.backend.wheel import package_files, write_wheel
from kernelpack.builder import engine
from kernelpack.builder.outputs import BuildResult
from kernelpack.errors import UsageError
from kernelpack.project.locate import locate

pytestmark = pytest.mark.integration

PIP = (sys.executable, "-m", "pip")
EDITABLE = ("--no-build-isolation", "-e")


@pytest.fixture(scope="session")
def project_root(tmp_path_factory: pytest.TempPathFactory, built_package: BuiltPackage) -> Path:
    """A private copy of kpdemo built once a run (conftest.py): its build folder serves every
    wheel (the copied in-place libraries and record never ship: a wheel takes the build's)."""
    return copy_built(built_package("kpdemo")[0], tmp_path_factory.mktemp("wheelsrc") / "kpdemo")


def _wheel(root: Path, ccache_dir: Path, out: Path, **env: str) -> tuple[Path, BuildResult]:
    project = locate(root)
    result = engine.build_project(project, environ=build_env(ccache_dir, **env))
    return write_wheel(project, result, out), result


@pytest.fixture(scope="session")
def classic_wheel(
    project_root: Path, ccache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return _wheel(project_root, ccache_dir, tmp_path_factory.mktemp("dist"))[0]


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _metadata_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(name).decode()
    return next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Version:"))


def _run_in(venv: Path, code: str, cwd: Path) -> str:
    return subprocess.run(
        [venv / "bin" / "python", "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


# --- the wheel -----------------------------------------------------------------------------


def test_classic_wheel_is_tagged_for_this_cpython_and_manylinux(classic_wheel: Path) -> None:
    assert re.search(r"-cp311-cp311-manylinux_2_\d+_x86_64\.whl$", classic_wheel.name)
    assert "+cu130torch2.14.1-" in classic_wheel.name


def test_wheel_version_in_file_name_equals_metadata(classic_wheel: Path) -> None:
    assert classic_wheel.name.split("-")[1] == _metadata_version(classic_wheel)


def test_wheel_holds_python_files_libraries_and_record(classic_wheel: Path) -> None:
    names = _names(classic_wheel)
    assert "kpdemo/__init__.py" in names
    assert "kpdemo/scale/__init__.py" in names
    assert "kpdemo/scale/_C.abi3.so" in names
    assert any(n.startswith("kpdemo/addone/_C.cpython-311") for n in names)
    assert "kpdemo/_kernelpack.json" in names


def test_wheel_holds_no_sources(classic_wheel: Path) -> None:
    names = _names(classic_wheel)
    assert [n for n in names if "csrc" in n or n.endswith((".cu", ".cpp", ".h", ".c"))] == []


def test_all_stable_wheel_is_abi3_with_the_stable_tag(
    project_root: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    wheel, _ = _wheel(project_root, ccache_dir, tmp_path, KPDEMO_KERNELS="scale")
    assert re.fullmatch(
        r"kpdemo-0\.3\.0\+cu130stable2\.10-cp310-abi3-manylinux_2_\d+_x86_64\.whl", wheel.name
    )
    assert _metadata_version(wheel) == "0.3.0+cu130stable2.10"
    # The kernel left out ships no library, only the stand-in that raises its reason.
    names = _names(wheel)
    assert [n for n in names if n.startswith("kpdemo/addone/_C")] == ["kpdemo/addone/_C.py"]


def test_wheel_installs_into_a_fresh_venv_and_imports(
    classic_wheel: Path, fresh_venv: Path, tmp_path: Path
) -> None:
    pip = [fresh_venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip, "--force-reinstall", classic_wheel], check=True)
    out = _run_in(
        fresh_venv,
        "import json, torch, kpdemo.scale, kpdemo.addone, importlib.resources as r;"
        "print(json.loads(r.files('kpdemo').joinpath('_kernelpack.json').read_text())['version']);"
        "print(torch.ops.kpdemo_scale.scale, torch.ops.kpdemo_addone.addone)",
        cwd=tmp_path,
    )
    assert "0.3.0+cu130torch2.14.1" in out
    assert "kpdemo_scale.scale" in out


# --- the backend through real front ends ---------------------------------------------------


def test_pip_wheel_without_build_isolation(
    project_root: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    subprocess.run(
        [*PIP, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp_path, project_root],
        env=build_env(ccache_dir),
        check=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("kpdemo-0.3.0+cu130torch2.14.1-cp311-cp311-")


def test_pip_install_editable_compiles_in_place(
    ccache_dir: Path, fresh_venv: Path, tmp_path: Path
) -> None:
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    subprocess.run(
        [fresh_venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", *EDITABLE, root],
        env=build_env(ccache_dir),
        check=True,
    )
    out = _run_in(fresh_venv, "import kpdemo.scale as s; print(s._C.__file__)", cwd=tmp_path)
    assert out.strip() == str(root / "kpdemo" / "scale" / "_C.abi3.so")
    assert (root / "kpdemo" / "_kernelpack.json").is_file()


def test_uv_pip_install_editable(ccache_dir: Path, fresh_venv: Path, tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).is_file():
        pytest.skip("uv is not installed")
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    python = fresh_venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "--offline", "--no-deps", *EDITABLE, root, "--python", python],
        env=build_env(ccache_dir),
        check=True,
        capture_output=True,
    )
    out = _run_in(fresh_venv, "import kpdemo.addone as a; print(a._C.__file__)", cwd=tmp_path)
    assert out.strip().startswith(str(root / "kpdemo" / "addone" / "_C.cpython-311"))


# --- sdist and hooks -----------------------------------------------------------------------


def test_sdist_holds_the_sources_and_pkg_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    monkeypatch.chdir(root)
    name = backend.build_sdist(str(tmp_path / "sdist"))
    with tarfile.open(tmp_path / "sdist" / name) as tar:
        members = tar.getnames()
    assert name == "kpdemo-0.3.0.tar.gz"
    assert "kpdemo-0.3.0/PKG-INFO" in members
    assert "kpdemo-0.3.0/kpdemo/scale/csrc/scale.cu" in members
    assert "kpdemo-0.3.0/pyproject.toml" in members


def test_sdist_leaves_out_build_outputs_but_not_a_subpackage_named_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    for name in ("build/kernelpack/build.ninja", "dist/old.tar.gz", "kpdemo/build/__init__.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x\n")
    monkeypatch.chdir(root)
    with tarfile.open(tmp_path / "sdist" / backend.build_sdist(str(tmp_path / "sdist"))) as tar:
        members = {name.split("/", 1)[1] for name in tar.getnames()}
    assert "kpdemo/build/__init__.py" in members
    assert not {m for m in members if m.startswith(("build/", "dist/"))}


def test_wheel_ships_a_subpackage_named_build(tmp_path: Path) -> None:
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    (root / "kpdemo" / "build").mkdir()
    (root / "kpdemo" / "build" / "__init__.py").write_text("")
    names = {arcname for _, arcname in package_files(locate(root))}
    assert "kpdemo/build/__init__.py" in names
    assert not {n for n in names if "/csrc/" in n}


def test_prepare_metadata_matches_the_built_wheel_version(
    project_root: Path, classic_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project_root)
    for var in [v for v in os.environ if v.startswith(("KPDEMO_", "KERNELPACK_"))]:
        monkeypatch.delenv(var)
    info = backend.prepare_metadata_for_build_wheel(str(tmp_path))
    text = (tmp_path / info / "METADATA").read_text()
    assert f"Version: {_metadata_version(classic_wheel)}" in text


def test_build_requirements_are_kernelpack_and_ninja() -> None:
    names = [r.split(">")[0].split("=")[0] for r in backend.get_requires_for_build_wheel()]
    assert names == ["kernelpack", "ninja"]
    assert backend.get_requires_for_build_sdist() == []


def test_wheel_record_lists_every_file(classic_wheel: Path) -> None:
    with zipfile.ZipFile(classic_wheel) as zf:
        (record,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        listed = {line.split(",")[0] for line in zf.read(record).decode().splitlines()}
        assert listed == set(zf.namelist())


def test_record_in_wheel_is_the_build_record(classic_wheel: Path) -> None:
    with zipfile.ZipFile(classic_wheel) as zf:
        data = json.loads(zf.read("kpdemo/_kernelpack.json"))
    assert data["schema"] == 2
    assert data["version"] == _metadata_version(classic_wheel)
    assert set(data["kernels"]) == {"scale", "addone"}


def test_missing_torch_error_says_to_build_without_isolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack.errors import PlanError

    # What an isolated build environment looks like: no torch to import.
    monkeypatch.setenv("PYTHONPATH", str(install_torch(tmp_path / "env", missing=True)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(copy_package("kpdemo", tmp_path / "kpdemo"))
    with pytest.raises(PlanError, match="--no-build-isolation"):
        backend.prepare_metadata_for_build_wheel(str(tmp_path))


def test_config_setting_require_must_be_a_boolean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(source_of("kpdemo"))
    with pytest.raises(UsageError, match="config setting require=maybe is not a boolean"):
        backend.prepare_metadata_for_build_wheel(str(tmp_path), {"require": "maybe"})


def test_config_setting_kernels_must_name_a_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(source_of("kpdemo"))
    with pytest.raises(UsageError, match="config setting kernels ',' names no kernel"):
        backend.prepare_metadata_for_build_wheel(str(tmp_path), {"kernels": ","})


# --- editable installs rebuild on import ---------------------------------------------------

SCALE_CU = Path("kpdemo", "scale", "csrc", "scale.cu")
NEW_OP = 'KP_STABLE_LIBRARY(m) { m.def("scale(Tensor x, float factor) -> Tensor"); }'
HAS_NEW_OP = "import torch, kpdemo.scale; print(hasattr(torch.ops.kpdemo_scale, 'scale_twice'))"


def _says_it_rebuilt_scale(stderr: str, files: int = 1) -> bool:
    """The two lines of a rebuilding import: as the compile starts, and when it is done."""
    noun = "file" if files == 1 else "files"
    lines = stderr.strip().splitlines()
    return len(lines) == 2 and (
        lines[0] == f"kernelpack: rebuilding scale ({files} {noun})…"
        and re.fullmatch(rf"kernelpack: rebuilt scale \({files} {noun}, \d+\.\d s\)", lines[1])
        is not None
    )


@pytest.fixture(scope="module")
def editable(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> tuple[Path, Path]:
    """(venv, project root): kpdemo installed with `pip install --no-build-isolation -e`."""
    where = tmp_path_factory.mktemp("editable")
    venv, root = overlay_venv(where / "v"), copy_package("kpdemo", where / "kpdemo")
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", *EDITABLE, root],
        env=build_env(ccache_dir),
        check=True,
    )
    return venv, root


def _import(venv: Path, code: str, cwd: Path, ccache_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv / "bin" / "python", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=build_env(ccache_dir),
        check=False,
    )


@contextmanager
def _edited(path: Path, old: str, new: str) -> Iterator[None]:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    try:
        yield
    finally:
        path.write_text(text)


def test_editable_import_rebuilds_an_edited_kernel_and_says_so_as_it_starts_and_ends(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, root = editable
    before = _import(venv, HAS_NEW_OP, tmp_path, ccache_dir)
    assert (before.stdout.strip(), before.stderr) == ("False", "")
    new = NEW_OP.replace("); }", '); m.def("scale_twice(Tensor x) -> Tensor"); }')
    with _edited(root / SCALE_CU, NEW_OP, new):
        after = _import(venv, HAS_NEW_OP, tmp_path, ccache_dir)
        assert after.stdout.strip() == "True", after.stderr
        assert _says_it_rebuilt_scale(after.stderr), after.stderr
    restored = _import(venv, HAS_NEW_OP, tmp_path, ccache_dir)
    assert restored.stdout.strip() == "False"


def test_editable_noop_import_prints_nothing_and_compiles_nothing(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, root = editable
    _import(venv, "import kpdemo", tmp_path, ccache_dir)  # settle any earlier edit
    library = root / "kpdemo" / "scale" / "_C.abi3.so"
    mtime = library.stat().st_mtime_ns
    again = _import(venv, "import kpdemo", tmp_path, ccache_dir)
    assert (again.returncode, again.stderr) == (0, "")
    assert library.stat().st_mtime_ns == mtime


def test_editable_header_edit_rebuilds_its_includer_through_the_depfile(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, root = editable
    header = root / "kpdemo" / "scale" / "csrc" / "scale.h"
    with _edited(header, "256", "128"):
        out = _import(venv, "import kpdemo", tmp_path, ccache_dir)
    assert _says_it_rebuilt_scale(out.stderr), out.stderr


def test_editable_manifest_flag_change_rebuilds_that_kernel(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, root = editable
    manifest = root / "kpdemo" / "kernels.toml"
    old = 'sources = ["csrc/scale.cu"]'
    with _edited(manifest, old, old + '\ndefines = { KPDEMO_EDITABLE = "1" }'):
        out = _import(venv, "import kpdemo", tmp_path, ccache_dir)
    # the define reaches the kernel's source and its generated module init
    assert _says_it_rebuilt_scale(out.stderr, files=2), out.stderr


def test_editable_compile_error_raises_import_error_with_the_compilers_line(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, root = editable
    line = (root / SCALE_CU).read_text().splitlines().index(NEW_OP) + 2  # 1-based, next line
    broken = NEW_OP + "\nint broken = undefined_name;"
    with _edited(root / SCALE_CU, NEW_OP, broken):
        out = _import(venv, "import kpdemo", tmp_path, ccache_dir)
    assert out.returncode == 1
    error = next(ln for ln in out.stderr.splitlines() if ln.startswith("ImportError: "))
    assert error.startswith("ImportError: kernelpack: rebuilding kpdemo failed: kernel 'scale'")
    assert f'{root / SCALE_CU}({line}): error: identifier "undefined_name"' in out.stderr
    assert "int broken = undefined_name;" in out.stderr  # the compiler's own lines follow


def test_editable_noop_check_costs_well_under_50_ms(
    editable: tuple[Path, Path], ccache_dir: Path, tmp_path: Path
) -> None:
    venv, _ = editable
    _import(venv, "import kpdemo", tmp_path, ccache_dir)
    # CPU time (the check's own and its `ninja -n`'s), not wall time: on a loaded machine a
    # process waits to be scheduled, which says nothing about what the check costs.
    code = (
        "import resource, sys, statistics\n"
        "f = next(m for m in sys.meta_path if type(m).__name__ == 'EditableFinder')\n"
        "def cpu():\n"
        "    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)\n"
        "    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, who))\n"
        "times = []\n"
        "for _ in range(7):\n"
        "    t = cpu(); assert not f.stale(); times.append(cpu() - t)\n"
        "print(statistics.median(times) * 1000)\n"
    )
    out = _import(venv, code, tmp_path, ccache_dir)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 50.0


def test_uv_editable_import_rebuilds_an_edited_kernel(ccache_dir: Path, tmp_path: Path) -> None:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).is_file():
        pytest.skip("uv is not installed")
    venv, root = overlay_venv(tmp_path / "v"), copy_package("kpdemo", tmp_path / "kpdemo")
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--offline",
            "--no-deps",
            *EDITABLE,
            root,
            "--python",
            venv / "bin" / "python",
        ],
        env=build_env(ccache_dir),
        check=True,
        capture_output=True,
    )
    new = NEW_OP.replace("); }", '); m.def("scale_twice(Tensor x) -> Tensor"); }')
    with _edited(root / SCALE_CU, NEW_OP, new):
        out = _import(venv, HAS_NEW_OP, tmp_path, ccache_dir)
    assert out.stdout.strip() == "True", out.stderr
    assert _says_it_rebuilt_scale(out.stderr), out.stderr
