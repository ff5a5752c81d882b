"""Release-grade kernel wheels, built with the real nvcc and installed by the real pip.

A classic-ABI and an all-stable wheel of kpdemo are built once per session. They install with
`pip install --no-index --find-links DIST` into a fresh venv that holds only torch and what
torch itself requires (linked from this interpreter's site-packages, so nothing is
downloaded); DIST holds the kernelpack-runtime wheel built from this checkout and its one
dependency, packaging.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest
from buildlog import compiles
from packaging.metadata import Metadata
from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version
from venvs import installed, new_venv, pip, pip_env
from venvs import torch_venv as make_torch_venv

from kernelpack.abitag import AbiTag
from kernelpack.backend.metadata import torch_requirement
from kernelpack.backend.sdist import write_sdist
from kernelpack.backend.tags import EXTERNAL_LIBRARIES
from kernelpack.backend.wheel import write_wheel
from kernelpack.builder import engine
from kernelpack.cli import main
from kernelpack.errors import UsageError
from kernelpack.project.locate import locate
from kernelpack_runtime.record import RUNTIME_REQUIREMENT

pytestmark = pytest.mark.integration

PACKAGE = Path(__file__).parent / "packages" / "kpdemo"
REPO = Path(__file__).parents[2]
IGNORE = shutil.ignore_patterns("build", "dist", "*.so", "_kernel*", "__pycache__")
CLASSIC = "0.3.0+cu130torch2.14.1"
STABLE = "0.3.0+cu130stable2.10"
# Distributions installing a kernel wheel may add to a venv that holds torch.
KERNEL_WHEEL_ADDS = {"kpdemo", "kernelpack-runtime", "packaging"}
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d")


def _env(ccache_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPDEMO_", "KERNELPACK_"))}
    env["CCACHE_DIR"] = str(ccache_dir)
    env.update(extra)
    return env


_pip = pip


def _copy(destination: Path) -> Path:
    shutil.copytree(PACKAGE, destination, ignore=IGNORE)
    return destination


@pytest.fixture(scope="session")
def ccache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "kp-ccache"


@pytest.fixture(scope="session")
@compiles("kpdemo")
def built_root(tmp_path_factory: pytest.TempPathFactory, ccache_dir: Path) -> Path:
    """kpdemo, copied and compiled once (its build folder then serves every wheel)."""
    root = _copy(tmp_path_factory.mktemp("relsrc") / "kpdemo")
    engine.build_project(locate(root), environ=_env(ccache_dir))
    return root


@pytest.fixture(scope="session")
def dist(built_root: Path, ccache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The classic and the stable kpdemo wheel, the runtime wheel and packaging's wheel."""
    folder = tmp_path_factory.mktemp("reldist")
    project = locate(built_root)
    for env in ({}, {"KPDEMO_KERNELS": "scale"}):
        result = engine.build_project(project, environ=_env(ccache_dir, **env))
        write_wheel(project, result, folder)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", folder, REPO / "src"],
        check=True,
        capture_output=True,
    )
    packaging_version = importlib.metadata.version("packaging")
    subprocess.run(
        [*PIP_DOWNLOAD, folder, f"packaging<={packaging_version}"],
        check=True,
        capture_output=True,
    )
    return folder


def _wheel(dist: Path, version: str) -> Path:
    (found,) = [p for p in dist.glob("kpdemo-*.whl") if p.name.split("-")[1] == version]
    return found


@pytest.fixture(scope="session")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A fresh venv holding only torch and what torch requires (see `venvs.torch_venv`).
    Returns its python and the distributions it holds."""
    python = make_torch_venv(tmp_path_factory.mktemp("torchvenv") / "v")
    return python, _installed(python)


_installed = installed


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        meta = Metadata.from_email(zf.read(name).decode(), validate=True)
    return [str(r) for r in meta.requires_dist or []]


# --- what a kernel wheel requires -------------------------------------------------------------


def test_classic_wheel_requires_the_runtime_and_exactly_the_build_torch(dist: Path) -> None:
    assert _requires_dist(_wheel(dist, CLASSIC)) == [
        str(Requirement(RUNTIME_REQUIREMENT)),
        "torch==2.14.1",
    ]


def test_stable_wheel_requires_the_runtime_and_torch_from_its_target(dist: Path) -> None:
    assert _requires_dist(_wheel(dist, STABLE)) == [
        str(Requirement(RUNTIME_REQUIREMENT)),
        "torch>=2.10",
    ]


@pytest.mark.parametrize("version", [CLASSIC, STABLE], ids=["classic", "stable"])
def test_wheel_installs_beside_torch_alone_and_adds_no_build_tool(
    dist: Path, torch_venv: tuple[Path, set[str]], tmp_path: Path, version: str
) -> None:
    python, before = torch_venv
    _pip(python, "install", "-q", "--no-index", "--find-links", dist, f"kpdemo=={version}")
    after = _installed(python)
    assert after - before == KERNEL_WHEEL_ADDS
    assert not after & {"kernelpack", "ninja", "rich", "wheel", "auditwheel", "pyproject-metadata"}
    assert _pip(python, "check").returncode == 0
    code = (
        "import json; from kernelpack_runtime import Registry;"
        "status, _, reason, _ = Registry('kpdemo').api();"
        "print(json.dumps({k: [v, getattr(reason(k), 'code', None)] for k, v in status().items()}))"
    )
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    ).stdout
    report = json.loads(out)
    assert set(report) == {"scale", "addone"}
    # No GPU here: each kernel answers with a reason, the unselected one with its build reason.
    codes = {kernel: code for kernel, (_, code) in report.items()}
    if version == CLASSIC:
        assert codes == {"scale": "no-device", "addone": "no-device"}
    else:
        assert codes == {"scale": "no-device", "addone": "not-built"}
    assert all(text for text, _ in report.values())


def _fake_torch(site: Path, version: str) -> None:
    """An installed torch distribution of `version` (metadata only): what a resolver sees."""
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n")


@pytest.mark.parametrize(
    ("installed", "version", "accepted"),
    [
        ("2.13.0", CLASSIC, False),
        ("2.14.1+cu130", CLASSIC, True),
        ("2.14.1", CLASSIC, True),
        ("2.13.0", STABLE, True),
        ("2.9.1", STABLE, False),
    ],
)
def test_resolver_accepts_the_wheel_only_beside_a_torch_it_loads_under(
    dist: Path, tmp_path: Path, installed: str, version: str, accepted: bool
) -> None:
    python, site = new_venv(tmp_path / "v")
    _fake_torch(site, installed)
    wheel = _wheel(dist, version)
    run = _pip(
        python, "install", "--dry-run", "--no-index", "--find-links", dist, wheel, check=False
    )
    assert (run.returncode == 0) == accepted, run.stdout + run.stderr
    if not accepted:
        requirement = torch_requirement(AbiTag.of_version(Version(version)))
        assert str(requirement) in run.stdout + run.stderr


# --- platform tag ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [CLASSIC, STABLE], ids=["classic", "stable"])
def test_platform_tag_is_manylinux_and_auditwheel_show_agrees(dist: Path, version: str) -> None:
    wheel = _wheel(dist, version)
    (tag,) = parse_wheel_filename(wheel.name)[3]
    assert re.fullmatch(r"manylinux_2_\d+_x86_64", tag.platform)
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", "--json", wheel],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(show.stdout)
    assert report["sym_tag"] == tag.platform
    assert not (report["ucs2"] or report["pyfpe"] or report["unsupported_isa"])
    # What keeps auditwheel's own verdict at linux_*: torch's and CUDA's libraries only.
    external = set(report["external_libs"])
    assert external
    assert all(any(fnmatch(lib, p) for p in EXTERNAL_LIBRARIES) for lib in external)


# --- what the archives hold ---------------------------------------------------------------------


def test_classic_wheel_holds_exactly_the_package_libraries_record_and_metadata(
    dist: Path,
) -> None:
    wheel = _wheel(dist, CLASSIC)
    info = f"kpdemo-{CLASSIC}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
    assert names == sorted(
        [
            "kpdemo/__init__.py",
            "kpdemo/kernels.toml",
            "kpdemo/_kernelpack.json",
            "kpdemo/addone/__init__.py",
            "kpdemo/addone/_C.cpython-311-x86_64-linux-gnu.so",
            "kpdemo/scale/__init__.py",
            "kpdemo/scale/_C.abi3.so",
            f"{info}/METADATA",
            f"{info}/WHEEL",
            f"{info}/RECORD",
        ]
    )


def _hostile_tree(root: Path, outside: Path) -> None:
    """Leftovers of interrupted writes, and links, in a kpdemo tree."""
    package = root / "kpdemo"
    (package / "scale" / "._C.abi3.so.k3j4l5m6").write_bytes(b"\x7fELF partial")
    (package / ".record.json.a1b2c3d4").write_text("{")
    (package / ".kpdemo-0.3.0-x.whl.partial").mkdir()
    (package / ".kpdemo-0.3.0-x.whl.partial" / "x.whl").write_bytes(b"PK")
    (package / "data").mkdir()
    (package / "data" / "table.txt").write_text("1 2 3\n")
    (package / "linked_table.txt").symlink_to(package / "data" / "table.txt")  # absolute
    (package / "data_view").symlink_to("data")  # a linked folder, inside
    (root / "LICENSE").write_text("Apache License 2.0\n")
    outside.write_text("secret\n")


def test_wheel_ships_linked_files_inside_the_package_as_files_and_no_temp_file(
    built_root: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    root = _copy(tmp_path / "kpdemo")
    shutil.copytree(built_root / "build", root / "build")
    _hostile_tree(root, tmp_path / "outside.txt")
    project = locate(root)
    result = engine.build_project(project, environ=_env(ccache_dir))
    wheel = write_wheel(project, result, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert zf.read("kpdemo/linked_table.txt") == b"1 2 3\n"
        assert zf.read("kpdemo/data_view/table.txt") == b"1 2 3\n"
        assert all(info.external_attr >> 28 != 0o12 for info in zf.infolist())  # no links
    package = {n for n in names if not n.startswith("kpdemo-")}
    assert package == {
        "kpdemo/__init__.py",
        "kpdemo/kernels.toml",
        "kpdemo/_kernelpack.json",
        "kpdemo/addone/__init__.py",
        "kpdemo/addone/_C.cpython-311-x86_64-linux-gnu.so",
        "kpdemo/scale/__init__.py",
        "kpdemo/scale/_C.abi3.so",
        "kpdemo/data/table.txt",
        "kpdemo/linked_table.txt",
        "kpdemo/data_view/table.txt",
    }
    assert f"kpdemo-{CLASSIC}.dist-info/licenses/LICENSE" in names


@pytest.mark.parametrize("link", ["file", "folder"])
def test_symlink_out_of_the_package_is_a_one_line_error_writing_nothing(
    built_root: Path, ccache_dir: Path, tmp_path: Path, link: str
) -> None:
    root = _copy(tmp_path / "kpdemo")
    shutil.copytree(built_root / "build", root / "build")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("secret\n")
    target = secret / "key.txt" if link == "file" else secret
    (root / "kpdemo" / "leak").symlink_to(target)
    project = locate(root)
    result = engine.build_project(project, environ=_env(ccache_dir))
    with pytest.raises(UsageError, match=r"kpdemo/leak: a symlink to .*secret.*, outside") as exc:
        write_wheel(project, result, tmp_path / "dist")
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "dist").exists()
    with pytest.raises(UsageError, match=r"kpdemo/leak: a symlink to .*secret.*, outside"):
        write_sdist(project, tmp_path / "sdist")
    assert not (tmp_path / "sdist").exists()


def test_sdist_holds_exactly_the_project_files_with_no_link_and_no_temp_file(
    tmp_path: Path,
) -> None:
    root = _copy(tmp_path / "kpdemo")
    _hostile_tree(root, tmp_path / "outside.txt")
    (root / "build" / "kernelpack").mkdir(parents=True)
    (root / "build" / "kernelpack" / "build.ninja").write_text("x\n")
    (root / "kpdemo" / "_kernelpack.json").write_text("{}\n")
    (root / "kpdemo" / "scale" / "_C.abi3.so").write_bytes(b"\x7fELF")
    path = write_sdist(locate(root), tmp_path / "sdist")
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        linked = tar.extractfile("kpdemo-0.3.0/kpdemo/linked_table.txt")
        assert linked is not None and linked.read() == b"1 2 3\n"
    assert all(m.isfile() for m in members)
    assert sorted(m.name.removeprefix("kpdemo-0.3.0/") for m in members) == sorted(
        [
            "LICENSE",
            "PKG-INFO",
            "pyproject.toml",
            "kpdemo/__init__.py",
            "kpdemo/kernels.toml",
            "kpdemo/addone/__init__.py",
            "kpdemo/addone/csrc/addone.cu",
            "kpdemo/addone/csrc/binding.cpp",
            "kpdemo/scale/__init__.py",
            "kpdemo/scale/csrc/scale.cu",
            "kpdemo/scale/csrc/scale.h",
            "kpdemo/data/table.txt",
            "kpdemo/linked_table.txt",
            "kpdemo/data_view/table.txt",
        ]
    )


def test_sdist_is_byte_identical_across_builds_with_source_date_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(tmp_path / "kpdemo")
    (root / "LICENSE").write_text("Apache License 2.0\n")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    first = write_sdist(locate(root), tmp_path / "one").read_bytes()
    for file in root.rglob("*"):
        os.utime(file, (time.time(), time.time() + 5))
    second = write_sdist(locate(root), tmp_path / "two").read_bytes()
    assert first == second
    with tarfile.open(tmp_path / "one" / "kpdemo-0.3.0.tar.gz") as tar:
        assert {m.mtime for m in tar.getmembers()} == {1700000000}
        pkg_info = tar.extractfile("kpdemo-0.3.0/PKG-INFO")
        assert pkg_info is not None
        meta = Metadata.from_email(pkg_info.read().decode(), validate=True)
    assert meta.license_files is None or "LICENSE" in meta.license_files
    assert meta.dynamic == ["requires-dist"]


# --- interrupted and concurrent writes -----------------------------------------------------------

_SLOW_WRITE = """
import sys, time
from pathlib import Path
from wheel.wheelfile import WheelFile
from kernelpack.backend.wheel import write_wheel
from kernelpack.builder import engine
from kernelpack.project.locate import locate

original = WheelFile.write
def slow_write(self, *args, **kwargs):
    original(self, *args, **kwargs)
    if Path(self.filename).parent.parent == Path(sys.argv[3]):  # the wheel, not a probe
        Path(sys.argv[2]).touch()
        time.sleep(600)
WheelFile.write = slow_write
project = locate(Path(sys.argv[1]))
write_wheel(project, engine.build_project(project), Path(sys.argv[3]))
"""


def test_staging_folder_of_a_killed_wheel_write_is_removed_by_the_next_write(
    built_root: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    out, ready = tmp_path / "dist", tmp_path / "ready"
    writer = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITE, str(built_root), str(ready), str(out)],
        env=_env(ccache_dir),
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the writer never started writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    (left,) = [p for p in out.iterdir() if p.name.endswith(".partial")]
    project = locate(built_root)
    wheel = write_wheel(project, engine.build_project(project, environ=_env(ccache_dir)), out)
    assert [p.name for p in out.iterdir()] == [wheel.name]
    assert not left.exists()
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None


def test_concurrent_cli_wheel_builds_of_one_tree_all_succeed(
    built_root: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dist"
    cli = "import sys; from kernelpack.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", cli, "build", str(built_root)]
    builds = [
        subprocess.Popen(
            [*command, "--wheel-dir", str(out)],
            env=_env(ccache_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [(b.wait(timeout=300), *b.communicate()) for b in builds]
    assert [code for code, _, _ in results] == [0, 0, 0, 0], [err for _, _, err in results]
    (wheel,) = out.iterdir()
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None


# --- what the build says it did -------------------------------------------------------------------


def test_build_that_compiled_nothing_names_the_skips_and_the_wheel_truthfully(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(tmp_path / "kpdemo")
    no_toolkit = tmp_path / "no-cuda"
    no_toolkit.mkdir()
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin")
    monkeypatch.setenv("CUDA_HOME", str(no_toolkit))
    assert main(["build", str(root), "--wheel-dir", str(tmp_path / "dist")]) == 0
    err = capfd.readouterr().err
    assert "up to date" not in err
    (wheel,) = (tmp_path / "dist").iterdir()
    assert (
        "wrote a wheel with no kernels built (skipped scale (nvcc-missing), "
        f"addone (nvcc-missing)): {wheel}"
    ) in err


def test_build_with_nothing_left_to_compile_says_so_and_names_its_kernels(
    built_root: Path,
    ccache_dir: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    for var in [v for v in os.environ if v.startswith(("KPDEMO_", "KERNELPACK_"))]:
        monkeypatch.delenv(var)
    assert main(["build", str(built_root), "--wheel-dir", str(tmp_path / "dist")]) == 0
    err = capfd.readouterr().err
    (wheel,) = (tmp_path / "dist").iterdir()
    assert "nothing to do: every library is up to date" in err
    assert f"wrote {wheel} (2 kernel(s): scale, addone)" in err


# --- an sdist built in pip's isolated build environment --------------------------------------


@pytest.mark.skipif(
    os.environ.get("KERNELPACK_TEST_ISOLATED_BUILD") != "1",
    reason="installs a CUDA torch into an isolated build environment (about 6 min, 6 GB): "
    "set KERNELPACK_TEST_ISOLATED_BUILD=1",
)
def test_sdist_builds_a_wheel_in_an_isolated_environment_with_only_find_links(
    tmp_path: Path, ccache_dir: Path
) -> None:
    """pip's default isolation, `--no-index --find-links` holding the kernelpack and runtime
    wheels of this checkout and what they need, torch included (the backend asks for it)."""
    links = tmp_path / "links"
    pip = (sys.executable, "-m", "pip")
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "-w", links, REPO, REPO / "src"],
        check=True,
        capture_output=True,
    )
    (kernelpack_wheel,) = links.glob("kernelpack-*.whl")
    download = [*pip, "download", "-q", "-d", links, "--find-links", links]
    subprocess.run(
        [*download, kernelpack_wheel, "torch==2.14.1"],
        check=True,
        capture_output=True,
    )
    sdist = write_sdist(locate(_copy(tmp_path / "kpdemo")), tmp_path / "sdist")
    out = tmp_path / "out"
    build = subprocess.run(
        [*pip, "wheel", "--no-index", "--find-links", links, "--no-deps", "-w", out, sdist],
        capture_output=True,
        text=True,
        env={**pip_env(), "CCACHE_DIR": str(ccache_dir)},
        timeout=1500,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith(f"kpdemo-{CLASSIC}-cp311-cp311-manylinux_2_")
    assert _requires_dist(wheel) == [str(Requirement(RUNTIME_REQUIREMENT)), "torch==2.14.1"]


def test_prepared_metadata_is_the_built_wheels_metadata(
    built_root: Path, dist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelpack import backend

    monkeypatch.chdir(built_root)
    for var in [v for v in os.environ if v.startswith(("KPDEMO_", "KERNELPACK_"))]:
        monkeypatch.delenv(var)
    info = backend.prepare_metadata_for_build_wheel(str(tmp_path))
    with zipfile.ZipFile(_wheel(dist, CLASSIC)) as zf:
        built = zf.read(f"{info}/METADATA")
    assert (tmp_path / info / "METADATA").read_bytes() == built


def test_wheel_is_byte_identical_across_writes_with_source_date_epoch(
    built_root: Path, ccache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    project = locate(built_root)
    result = engine.build_project(project, environ=_env(ccache_dir))
    first = write_wheel(project, result, tmp_path / "one").read_bytes()
    for file in (built_root / "kpdemo").rglob("*.py"):
        os.utime(file, (time.time(), time.time() + 5))
    second = write_wheel(project, result, tmp_path / "two").read_bytes()
    assert first == second


def test_wheel_with_a_source_date_epoch_that_is_not_a_number_is_one_line(
    built_root: Path, ccache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = locate(built_root)
    result = engine.build_project(project, environ=_env(ccache_dir))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1.5e9")
    with pytest.raises(UsageError, match=r"SOURCE_DATE_EPOCH='1.5e9': expected seconds"):
        write_wheel(project, result, tmp_path / "dist")
    assert not (tmp_path / "dist").exists()
