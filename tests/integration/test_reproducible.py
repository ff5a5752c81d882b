"""Path-independent, reproducible outputs: two clones at different absolute paths, each with
its own empty compiler cache (so both compile for real), give byte-identical libraries and
wheels (with SOURCE_DATE_EPOCH) through no launcher, ccache and sccache alike (with debug
info, `-g`, that names no folder of either clone, except through sccache); a clone in a third
folder sharing the first's cache gets every compile from it (through sccache, all but nvcc's
cudafe++ and cicc steps); corrupt objects in the cache are compiled again, never installed."""

from __future__ import annotations

import io
import os
import shutil
import sysconfig
import zipfile
from pathlib import Path

import pytest

from kernelpack.backend.wheel import write_wheel
from kernelpack.builder import engine
from kernelpack.project.locate import locate

pytestmark = pytest.mark.integration

KPDEMO = Path(__file__).parent / "packages" / "kpdemo"


def _launcher(name: str) -> str:
    if name == "none":
        return "none"
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/bootstrap installs it)")
    return found


def _env(launcher: str, cache: Path, *, debug: bool = False) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCCACHE_", "CCACHE_", "KERNELPACK_", "KPDEMO_"))
    }
    env.update(
        KERNELPACK_LAUNCHER=launcher,
        SCCACHE_DIR=str(cache),
        CCACHE_DIR=str(cache),
        KPDEMO_KERNELS="scale",  # the stable kernel alone: the cheapest real nvcc compile
        SOURCE_DATE_EPOCH="1700000000",
    )
    if debug:  # host debug info: its compilation folder and file names must be the clone's
        env["NVCC_APPEND_FLAGS"] = "-g"
    return env


def _build(checkout: Path, env: dict[str, str], wheels: Path) -> tuple[bytes, bytes, object]:
    root = checkout / "kpdemo"
    shutil.copytree(KPDEMO, root, ignore=shutil.ignore_patterns("build", "*.so", "_kernel*.json"))
    project = locate(root)
    result = engine.build_project(project, environ=env, stream=io.StringIO())
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = env["SOURCE_DATE_EPOCH"]
    try:
        wheel = write_wheel(project, result, wheels, stream=io.StringIO()).read_bytes()
    finally:
        if old is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old
    return result.libraries["scale"].read_bytes(), wheel, result.cache


@pytest.mark.parametrize("launcher", ["none", "ccache", "sccache"])
def test_two_clones_at_different_paths_give_identical_libraries_and_wheels(
    launcher: str, tmp_path: Path
) -> None:
    path = _launcher(launcher)
    # Through sccache, `-g` host objects name sccache's own temporary folder (random, per
    # compile) for nvcc's intermediate host file: identical only without debug info.
    debug = launcher != "sccache"
    first = _build(
        tmp_path / "a", _env(path, tmp_path / "cache-a", debug=debug), tmp_path / "wheels-a"
    )
    second = _build(
        tmp_path / "somewhere" / "deeper" / "b",
        _env(path, tmp_path / "cache-b", debug=debug),
        tmp_path / "wheels-b",
    )
    assert (b".debug_info" in first[0]) == debug, "debug info as asked"
    assert first[0] == second[0], "the libraries differ"
    assert first[1] == second[1], "the wheels differ"
    for library in (first[0], second[0]):
        assert b"/a/kpdemo" not in library and str(tmp_path).encode() not in library
        # __FILE__ (the stable ABI's checks name it) is project-relative
        assert b"\0kpdemo/scale/csrc/scale.cu\0" in library


@pytest.mark.parametrize("launcher", ["ccache", "sccache"])
def test_a_clone_elsewhere_gets_every_compile_from_a_shared_cache(
    launcher: str, tmp_path: Path
) -> None:
    path = _launcher(launcher)
    env = _env(path, tmp_path / "shared")
    first = _build(tmp_path / "a", env, tmp_path / "wheels-a")
    second = _build(tmp_path / "other" / "b", env, tmp_path / "wheels-b")
    stats = second[2]
    assert stats is not None
    # Through sccache, the .cu compile's cudafe++ and cicc steps run again there: nvcc hands
    # them the canonical absolute source path as an argument, which sccache hashes. Its host
    # step and ptxas hit, and so does the module init's compile.
    missed = 1 if launcher == "sccache" else 0
    assert (stats.misses, stats.hits) == (missed, 2 - missed), stats  # type: ignore[attr-defined]
    assert first[0] == second[0]


def test_corrupt_cached_objects_are_compiled_again_not_installed(tmp_path: Path) -> None:
    """sccache's entries are zip files holding the (zstd) object: every object replaced by
    garbage, a fresh clone at the same path counts them as cache errors, compiles them
    again and installs the same library as before."""
    path = _launcher("sccache")
    env = _env(path, tmp_path / "cache")
    first = _build(tmp_path / "a", env, tmp_path / "wheels-a")
    corrupted = 0
    for entry in (tmp_path / "cache").rglob("*"):
        if entry.is_file() and "preprocessor" not in entry.parts and zipfile.is_zipfile(entry):
            with zipfile.ZipFile(entry) as archive:
                members = {name: archive.read(name) for name in archive.namelist()}
            with zipfile.ZipFile(entry, "w") as archive:
                for name, data in members.items():
                    archive.writestr(
                        name, b"\x28\xb5\x2f\xfd" + b"garbage" * 64 if name == "obj" else data
                    )
            corrupted += 1
    assert corrupted > 0
    shutil.rmtree(tmp_path / "a")
    again = _build(tmp_path / "a", env, tmp_path / "wheels-b")
    stats = again[2]
    assert stats is not None
    assert stats.hits == 0 and stats.errors == stats.misses > 0, stats  # type: ignore[attr-defined]
    assert again[0] == first[0]
