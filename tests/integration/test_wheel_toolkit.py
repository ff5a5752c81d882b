"""Builds with the CUDA toolkit from NVIDIA's wheels (real wheels from the index, the real
nvcc in them) and the system CUDA hidden: no nvcc on PATH, CUDA_HOME unset, no
/usr/local/cuda. The wheels are installed once a run into the run's own kernelpack cache
(`wheel_cache`); pip's cache makes that a copy after the first run on a machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from builds import build_env, copy_package
from packaging.version import Version

from kernelpack.backend.sdist import write_sdist
from kernelpack.builder import engine
from kernelpack.builder.outputs import BuildResult
from kernelpack.plan import plan_project
from kernelpack.project.locate import locate
from kernelpack.toolchain import cudawheels, detection
from kernelpack.toolchain.toolkitcache import ToolkitCache, ToolkitError
from kernelpack_runtime.record import BuiltKernel

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CUDA wheels are Linux"),
]

SRC = Path(__file__).resolve().parents[2] / "src"
#: Runs the CLI with the default toolkit folder hidden as well (it is not a variable).
_HIDDEN_CLI = (
    "import sys; from pathlib import Path; from kernelpack.toolchain import detection; "
    "detection.DEFAULT_CUDA_HOME = Path('/nonexistent/cuda'); "
    "from kernelpack.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An `XDG_CACHE_HOME` whose kernelpack cache holds the CUDA 13.0 wheel toolkit."""
    pytest.importorskip("torch")
    home = tmp_path_factory.mktemp("xdg-cache")
    cache = ToolkitCache.of(home / "kernelpack")
    try:
        cache.install(Version("13.0"), dict(os.environ), say=lambda line: None)
    except ToolkitError as exc:
        pytest.skip(f"the CUDA 13.0 wheels cannot be installed here: {exc}")
    return home


def hidden_environ(cache_home: Path, ccache_dir: Path) -> dict[str, str]:
    """A build environment without the system CUDA: PATH without any folder holding an nvcc,
    no CUDA_HOME/CUDA_PATH, kernelpack's cache at `cache_home`."""
    env = build_env(ccache_dir, without=("CUDA_HOME", "CUDA_PATH"))
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(f for f in folders if f and not os.path.exists(f"{f}/nvcc"))
    env["XDG_CACHE_HOME"] = str(cache_home)
    return env


@contextmanager
def system_cuda_hidden() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(detection, "DEFAULT_CUDA_HOME", Path("/nonexistent/cuda"))
        yield


@pytest.fixture(scope="module")
def kpdemo_with_wheels(
    wheel_cache: Path, ccache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, BuildResult]:
    root = copy_package("kpdemo", tmp_path_factory.mktemp("wheel-kpdemo") / "kpdemo")
    with system_cuda_hidden():
        result = engine.build_project(locate(root), environ=hidden_environ(wheel_cache, ccache_dir))
    return root, result


def _needed(library: Path) -> list[str]:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with library.open("rb") as handle:
        for section in ELFFile(handle).iter_sections():
            if isinstance(section, DynamicSection):
                return [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return []


def test_kpdemo_builds_with_the_wheel_toolkit_when_no_system_cuda_is_visible(
    kpdemo_with_wheels: tuple[Path, BuildResult], wheel_cache: Path
) -> None:
    _, result = kpdemo_with_wheels
    toolchain = result.plan.toolchain
    assert toolchain.toolkit == "cache"
    assert toolchain.nvcc is not None and str(toolchain.nvcc).startswith(str(wheel_cache))
    assert sorted(name for name, k in result.record.kernels.items() if k.built) == [
        "addone",
        "scale",
    ]
    for library in result.libraries.values():
        assert "libcudart.so.13" in _needed(library)


def test_compile_commands_name_the_wheel_nvcc_and_its_headers(
    kpdemo_with_wheels: tuple[Path, BuildResult], wheel_cache: Path
) -> None:
    _, result = kpdemo_with_wheels
    commands = json.loads((result.build_dir / "compile_commands.json").read_text())
    nvcc = [c for c in commands if c["file"].endswith(".cu")]
    assert nvcc and all(str(result.plan.toolchain.nvcc) in c["command"] for c in nvcc)
    root = result.plan.toolchain.cuda_home
    assert root is not None and all(f"-I{root}/include" in c["command"] for c in nvcc)


def test_the_wheel_and_system_toolkits_never_share_a_cached_object(
    kpdemo_with_wheels: tuple[Path, BuildResult],
    built_package: Callable[[str], tuple[Path, BuildResult]],
) -> None:
    """kpdemo was built with the system toolkit into the run's ccache (`built_package`);
    the wheel toolkit's build of a copy reused none of its nvcc objects."""
    if shutil.which("nvcc") is None or shutil.which("ccache") is None:
        pytest.skip("needs the system CUDA toolkit (nvcc on PATH) and ccache")
    _, system = built_package("kpdemo")
    _, wheel = kpdemo_with_wheels
    assert system.plan.toolchain.toolkit == "system"
    assert wheel.cache is not None and wheel.cache.launcher == "ccache"
    cu_compiles = [s for s in wheel.compiled if s.output.endswith(".cu.o")]
    assert len(cu_compiles) == 2  # ninja ran them; ccache answered none of them from the cache
    assert wheel.cache.misses >= len(cu_compiles)
    assert system.plan.toolchain.nvcc != wheel.plan.toolchain.nvcc


def test_kpdemo_builds_and_archs_match_the_system_toolkit(
    kpdemo_with_wheels: tuple[Path, BuildResult],
    built_package: Callable[[str], tuple[Path, BuildResult]],
) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("needs the system CUDA toolkit (nvcc on PATH) to compare with")
    _, system = built_package("kpdemo")
    _, wheel = kpdemo_with_wheels
    assert wheel.record.version == system.record.version
    assert _archs(wheel) == _archs(system)


def _archs(result: BuildResult) -> dict[str, list[str]]:
    return {
        name: [str(a) for a in kernel.archs]
        for name, kernel in result.record.kernels.items()
        if isinstance(kernel, BuiltKernel)
    }


def test_llm_ops_wheel_from_the_wheel_toolkit_matches_the_system_one(
    wheel_cache: Path, ccache_dir: Path, tmp_path: Path, llm_ops_wheel: Path
) -> None:
    """Same file name (version with its ABI tag, Python and manylinux tags) and same archs
    in the build record, whichever toolkit compiled it."""
    project = copy_package("llm_ops", tmp_path / "llm_ops")
    out = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-c", _HIDDEN_CLI, "build", str(project), "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**hidden_environ(wheel_cache, ccache_dir), "PYTHONPATH": str(SRC)},
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    assert build.stderr.splitlines()[0].startswith("kernelpack: CUDA toolkit 13.0.")
    assert "(cache, " in build.stderr.splitlines()[0]
    (wheel,) = out.glob("llm_ops-*.whl")
    assert wheel.name == llm_ops_wheel.name
    assert _record_archs(wheel) == _record_archs(llm_ops_wheel)


def _record_archs(wheel: Path) -> dict[str, list[str]]:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith("/_kernelpack.json")]
        record = json.loads(zf.read(name))
    return {k: v.get("archs", []) for k, v in sorted(record["kernels"].items())}


def test_moe_ops_plans_the_same_archs_and_abi_tag_with_either_toolkit(
    wheel_cache: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    """moe_ops (CUTLASS, classic ABI) is planned alike; its compile is the benchmark's."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs the system CUDA toolkit (nvcc on PATH) to compare with")
    project = locate(copy_package("moe_ops", tmp_path / "moe_ops"))
    system = plan_project(project, build_env(ccache_dir), strict=False)
    with system_cuda_hidden():
        wheel = plan_project(project, hidden_environ(wheel_cache, ccache_dir), strict=False)
    assert (system.toolchain.toolkit, wheel.toolchain.toolkit) == ("system", "cache")
    assert [(k.name, k.archs, k.skip) for k in wheel.kernels] == [
        (k.name, k.archs, k.skip) for k in system.kernels
    ]
    assert wheel.toolchain.cuda == system.toolchain.cuda


# --- isolated PEP 517 builds on a machine with no CUDA (pip, uv) ---------------------------

ISOLATED = pytest.mark.skipif(
    os.environ.get("KERNELPACK_TEST_ISOLATED_BUILD") != "1",
    reason="installs a CUDA torch into isolated build environments (minutes, GBs): "
    "set KERNELPACK_TEST_ISOLATED_BUILD=1",
)
UV = Path(sys.executable).with_name("uv")


def without_cuda(argv: list[str | Path]) -> list[str]:
    """`argv` run where the system CUDA does not exist: bubblewrap mounts an empty folder
    over the toolkit and hides every nvcc on PATH (the front end's build processes inherit
    it; kernelpack's rule cannot be told otherwise, as on a machine without CUDA)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("needs bubblewrap (bwrap) to hide this machine's CUDA toolkit")
    hide = ["--tmpfs", os.path.realpath("/usr/local/cuda")]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if folder and os.path.exists(f"{folder}/nvcc"):
            hide += ["--ro-bind", "/dev/null", f"{folder}/nvcc"]
    return [bwrap, "--bind", "/", "/", "--dev", "/dev", *hide, "--", *map(str, argv)]


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kernelpack's wheels of this checkout, and torch, its requirements and the CUDA wheels
    from the index: what an isolated build installs."""
    folder = tmp_path_factory.mktemp("links")
    pip = [sys.executable, "-m", "pip"]
    repo = SRC.parent
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", folder, repo, SRC], check=True)
    (kernelpack,) = folder.glob("kernelpack-*.whl")
    wanted = [kernelpack, "ninja>=1.11", "torch==2.14.1"]
    wanted += [f"{name}==13.0.*" for name in cudawheels.PACKAGES]
    download = [*pip, "download", "-q", "-d", folder, "--find-links", folder]
    subprocess.run([*download, *wanted], check=True)
    return folder


@ISOLATED
@pytest.mark.parametrize("front_end", ["pip", "uv"])
def test_an_sdist_builds_in_isolation_on_a_machine_without_cuda(
    front_end: str, links: Path, ccache_dir: Path, tmp_path: Path
) -> None:
    """pip (with `KERNELPACK_CUDA=13.0`: the backend asks for the CUDA wheels, which go into
    the build environment) and uv (torch's release unknown when the backend is asked: the
    build installs the wheels into kernelpack's empty cache)."""
    sdist = write_sdist(locate(copy_package("kpdemo", tmp_path / "kpdemo")), tmp_path / "sdist")
    out = tmp_path / "out"
    env = hidden_environ(tmp_path / "empty-cache", ccache_dir)
    if front_end == "pip":
        env["KERNELPACK_CUDA"] = "13.0"
        command: list[str | Path] = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps"]
        command += ["--no-index", "--find-links", links, "-w", out, sdist]
        toolkit = "(environment, "
    else:
        if not UV.is_file():
            pytest.skip("uv is not installed")
        # `uv build --wheel` of the sdist's unpacked tree: uv refuses to build a wheel from an
        # sdist file (or an sdist it made) whose version differs from the wheel's, and a
        # kernel wheel's version carries its ABI label (`0.3.0+cu130torch2.14.1`; uv 0.13.9,
        # `build_frontend.rs` VersionMismatch). docs/build.md says so.
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp_path / "unpacked", filter="data")
        (tree,) = (tmp_path / "unpacked").iterdir()
        command = [UV, "build", "--wheel", "--no-index", "--find-links", links, "-o", out, tree]
        # uv's build environments have no pip: the backend installs the wheels with uv's
        # (found on PATH), from the same folder.
        env.update(UV_NO_INDEX="1", UV_FIND_LINKS=str(links))
        env["PATH"] = f"{UV.parent}{os.pathsep}{env['PATH']}"
        toolkit = "(cache, "
    build = subprocess.run(
        without_cuda(command), capture_output=True, text=True, env=env, timeout=1800
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-4000:]
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("kpdemo-0.3.0+cu130torch2.14.1-cp311-cp311-manylinux_2_")
    line = next(line for line in log.splitlines() if "kernelpack: CUDA toolkit 13.0." in line)
    assert toolkit in line
