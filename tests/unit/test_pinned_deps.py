"""`depends = ["cutlass_4_0"]`: CUTLASS at the exact release kernel-builder names, found in an
installed wheel, a mirror or the cache, checked against a digest table; a nearer release only
with `--allow-nearest`. Archives are small ones the tests write; the digest tables are the
tests' own, handed in as kernelpack's would be."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

import pytest
from archive_support import cutlass_tarball, cutlass_wheel, digest, served, version_header
from packaging.version import Version

from kernelpack.errors import ArchiveError, DownloadError, UsageError
from kernelpack.project.dependencies import (
    KERNEL_BUILDER_DEPS,
    PINNED_DEPS,
    is_known,
)
from kernelpack.project.settings import Settings
from kernelpack.toolchain import cutlass, deps
from kernelpack.toolchain.archives import ArchiveCache
from kernelpack.toolchain.environment import BuildEnvironment

KERNELPACK = Path(sys.executable).parent / "kernelpack"


def _environment(tmp_path: Path, **variables: str) -> BuildEnvironment:
    return BuildEnvironment.from_environ({"XDG_CACHE_HOME": str(tmp_path / "xdg"), **variables})


def _resolve(
    name: str,
    environment: BuildEnvironment,
    *,
    sources: Mapping[Version, str] | None = None,
    wheels: Mapping[Version, tuple[str, str]] | None = None,
    installed: Path | None = None,
    settings: Settings | None = None,
    root: Path | None = None,
    warnings: list[str] | None = None,
) -> tuple[Path, ...]:
    where = deps.sources_for(environment, source_sha256=sources or {}, wheels=wheels or {})
    return deps.resolve(
        name,
        settings or Settings(),
        root or Path("/nonexistent"),
        environment,
        warn=(warnings if warnings is not None else []).append,
        sources=replace(where, installed=installed),
    )


def _table(*archives: Path) -> dict[Version, str]:
    """A source digest table of the tarballs `cutlass-<version>.tar.gz`."""
    found = (re.fullmatch(r"cutlass-(.+)\.tar\.gz", a.name) for a in archives)
    return {Version(m.group(1)): digest(a) for m, a in zip(found, archives, strict=True) if m}


def _installed_wheel(site: Path, version: str) -> Path:
    """An installed `nvidia-cutlass` wheel's `cutlass_library` folder with these headers."""
    source = site / "cutlass_library" / "source"
    (source / "include" / "cutlass").mkdir(parents=True)
    (source / "include" / "cutlass" / "version.h").write_text(version_header(version))
    (source / "tools" / "util" / "include").mkdir(parents=True)
    return site / "cutlass_library"


def test_pinned_release_from_a_mirror_folder(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(tmp_path / "mirror"))
    folders = _resolve("cutlass_4_0", environment, sources=_table(tarball))
    entry = tmp_path / "xdg" / "kernelpack" / "deps" / f"cutlass-4.0.0-{digest(tarball)[:16]}"
    top = entry / "cutlass-4.0.0"
    assert folders == (top / "include", top / "tools" / "util" / "include")


def test_pinned_release_from_an_http_mirror(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "3.9.2")
    with served(tmp_path / "mirror") as url:
        environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=url)
        folders = _resolve("cutlass_3_9", environment, sources=_table(tarball))
    assert cutlass.headers_version(folders[0]) == Version("3.9.2")


def test_the_release_wheel_comes_before_the_source_archive(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "3.8.0")
    wheel = cutlass_wheel(tmp_path / "mirror", "3.8.0")
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(tmp_path / "mirror"))
    wheels = {Version("3.8.0"): ("ab/cd/ef", digest(wheel))}
    folders = _resolve("cutlass_3_8", environment, sources=_table(tarball), wheels=wheels)
    assert folders[0].parts[-3:] == ("cutlass_library", "source", "include")
    assert folders[0].parents[2].name.startswith("nvidia_cutlass-3.8.0.0-py3-none-any-")


def test_an_installed_wheel_of_the_pinned_release_is_used_quietly(tmp_path: Path) -> None:
    package = _installed_wheel(tmp_path / "site", "4.0.0")
    warnings: list[str] = []
    folders = _resolve("cutlass_4_0", _environment(tmp_path), installed=package, warnings=warnings)
    assert folders == (package / "source" / "include", package / "source" / "tools/util/include")
    assert warnings == []
    assert not (tmp_path / "xdg").exists()


def test_an_installed_wheel_of_another_patch_is_used_and_named(tmp_path: Path) -> None:
    package = _installed_wheel(tmp_path / "site", "3.5.0")
    warnings: list[str] = []
    folders = _resolve("cutlass_3_5", _environment(tmp_path), installed=package, warnings=warnings)
    assert folders[0] == package / "source" / "include"
    assert len(warnings) == 1
    assert "cutlass_3_5" in warnings[0]
    assert "CUTLASS 3.5.0" in warnings[0]
    assert not (tmp_path / "xdg").exists()


def test_an_installed_wheel_of_another_minor_is_not_used(tmp_path: Path) -> None:
    package = _installed_wheel(tmp_path / "site", "4.2.0")
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(tmp_path / "mirror"))
    folders = _resolve("cutlass_4_0", environment, sources=_table(tarball), installed=package)
    assert cutlass.headers_version(folders[0]) == Version("4.0.0")


def test_the_override_variable_wins(tmp_path: Path) -> None:
    checkout = tmp_path / "cutlass-4.0.0"
    (checkout / "include" / "cutlass").mkdir(parents=True)
    (checkout / "tools" / "util" / "include").mkdir(parents=True)
    package = _installed_wheel(tmp_path / "site", "4.0.0")
    environment = _environment(tmp_path, KERNELPACK_CUTLASS_4_0_DIR=str(checkout))
    folders = _resolve("cutlass_4_0", environment, installed=package)
    assert folders == (checkout / "include", checkout / "tools" / "util" / "include")


def test_a_project_deps_entry_wins(tmp_path: Path) -> None:
    (tmp_path / "third_party" / "cutlass" / "include").mkdir(parents=True)
    settings = Settings(deps={"cutlass_3_6": "third_party/cutlass/include"})
    folders = _resolve(
        "cutlass_3_6", _environment(tmp_path), settings=settings, root=tmp_path.resolve()
    )
    assert folders == (tmp_path.resolve() / "third_party" / "cutlass" / "include",)


def test_an_unavailable_release_is_one_line_saying_what_to_set(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(tmp_path / "mirror"))
    with pytest.raises(UsageError) as excinfo:
        _resolve("cutlass_4_5", environment, sources={Version("4.5.2"): "0" * 64})
    message = str(excinfo.value)
    assert "\n" not in message
    assert excinfo.value.exit_code == 2
    assert "CUTLASS 4.5.2" in message
    assert "KERNELPACK_DEPS_MIRROR" in message
    assert "cutlass-4.5.2.tar.gz" in message
    assert "KERNELPACK_CUTLASS_4_5_DIR" in message
    assert "--allow-nearest" in message


def test_a_release_without_a_digest_needs_the_override_variable(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as excinfo:
        _resolve("cutlass_4_5", _environment(tmp_path))
    message = str(excinfo.value)
    assert "kernelpack has no sha256 of its archive" in message
    assert "KERNELPACK_DEPS_MIRROR" not in message
    assert "KERNELPACK_CUTLASS_4_5_DIR" in message


def test_a_mirror_without_the_archive_names_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(tmp_path / "mirror"))
    table = {Version("4.0.0"): "0" * 64}
    with pytest.raises(UsageError) as excinfo:
        _resolve("cutlass_4_0", environment, sources=table)
    assert str(tmp_path / "mirror" / "cutlass-4.0.0.tar.gz") in str(excinfo.value)


def test_allow_nearest_uses_the_nearest_release_with_one_warning(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    table = _table(cutlass_tarball(mirror, "3.9.2"), cutlass_tarball(mirror, "4.4.2"))
    table[Version("4.5.2")] = "0" * 64  # in the table, missing from the mirror
    environment = _environment(
        tmp_path, KERNELPACK_DEPS_MIRROR=str(mirror), KERNELPACK_ALLOW_NEAREST="1"
    )
    warnings: list[str] = []
    folders = _resolve("cutlass_4_5", environment, sources=table, warnings=warnings)
    assert cutlass.headers_version(folders[0]) == Version("4.4.2")
    assert len(warnings) == 1
    assert "\n" not in warnings[0]
    assert "warning" in warnings[0]
    assert "cutlass_4_5" in warnings[0]
    assert "4.5.2" in warnings[0]
    assert "4.4.2" in warnings[0]


def test_without_allow_nearest_no_other_release_is_used(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    table = _table(cutlass_tarball(mirror, "4.4.2"))
    environment = _environment(tmp_path, KERNELPACK_DEPS_MIRROR=str(mirror))
    with pytest.raises(UsageError, match="--allow-nearest"):
        _resolve("cutlass_4_5", environment, sources=table)


def test_a_wrong_digest_is_an_error_even_with_allow_nearest(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    table = _table(cutlass_tarball(mirror, "4.4.2"), cutlass_tarball(mirror, "4.5.2"))
    table[Version("4.5.2")] = "0" * 64
    environment = _environment(
        tmp_path, KERNELPACK_DEPS_MIRROR=str(mirror), KERNELPACK_ALLOW_NEAREST="1"
    )
    with pytest.raises(ArchiveError, match=re.escape("cutlass-4.5.2.tar.gz")):
        _resolve("cutlass_4_5", environment, sources=table)


def test_an_unknown_name_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as excinfo:
        _resolve("cutlass_9_9", _environment(tmp_path))
    message = str(excinfo.value)
    assert "\n" not in message
    assert "'cutlass_9_9'" in message
    assert "cutlass, cutlass_2_10" in message
    assert "cutlass_4_5" in message


def test_kernel_builder_names_are_known() -> None:
    for name in ("cutlass_2_10", "cutlass_3_6", "cutlass_3_8", "cutlass_3_9", "cutlass_4_0"):
        assert is_known(name)
        assert name in KERNEL_BUILDER_DEPS
    assert is_known("cutlass")
    assert is_known("mylib", {"mylib": "third_party"})
    assert not is_known("cutlass_9_9")
    assert "torch" in KERNEL_BUILDER_DEPS


def test_every_pinned_release_has_a_wheel_or_a_published_digest() -> None:
    for name, version in PINNED_DEPS.items():
        assert version in cutlass.WHEELS or version in cutlass.SOURCE_SHA256, name
    for table_digest in [*cutlass.SOURCE_SHA256.values(), *(d for _, d in cutlass.WHEELS.values())]:
        assert re.fullmatch(r"[0-9a-f]{64}", table_digest)


def test_kernel_builder_releases() -> None:
    wanted = {
        "cutlass_2_10": "2.10.0",
        "cutlass_3_5": "3.5.1",
        "cutlass_3_6": "3.6.0",
        "cutlass_3_8": "3.8.0",
        "cutlass_3_9": "3.9.2",
        "cutlass_4_0": "4.0.0",
        "cutlass_4_4": "4.4.2",
        "cutlass_4_5": "4.5.2",
    }
    assert {name: str(PINNED_DEPS[name]) for name in wanted} == wanted


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KERNELPACK_DEPS_MIRROR", "ftp://example.org/x"), ("KERNELPACK_ALLOW_NEAREST", "maybe")],
)
def test_bad_variables_are_one_line_usage_errors(variable: str, value: str) -> None:
    with pytest.raises(UsageError, match=variable):
        BuildEnvironment.from_environ({variable: value})


PYPROJECT = '[project]\nname = "llm-ops"\nversion = "0.1.0"\n\n[tool.kernelpack]\n'


def _check(tmp_path: Path, depends: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "llm_ops" / "gemm").mkdir(parents=True)
    (tmp_path / "llm_ops" / "gemm" / "gemm.cu").write_text("// x\n")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "llm_ops" / "kernels.toml").write_text(
        f'[gemm]\nsources = ["gemm.cu"]\narch = "9.0a"\ndepends = {depends}\n'
    )
    return subprocess.run(
        [str(KERNELPACK), "check", str(tmp_path)],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_accepts_a_pinned_release(tmp_path: Path) -> None:
    result = _check(tmp_path, '["cutlass_4_0"]')
    assert result.returncode == 0, result.stderr


def test_check_refuses_an_unknown_dependency_in_one_line(tmp_path: Path) -> None:
    result = _check(tmp_path, '["cutlass_9_9"]')
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1
    assert "cutlass_9_9" in errors[0]
    assert "cutlass_4_0" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("verb", ["build", "doctor"])
def test_allow_nearest_is_an_option_of(verb: str) -> None:
    result = subprocess.run(
        [str(KERNELPACK), verb, "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "--allow-nearest" in result.stdout


def test_allow_nearest_takes_a_cached_release_and_fetches_no_other(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    table = _table(cutlass_tarball(mirror, "4.4.2"), cutlass_tarball(mirror, "4.0.0"))
    table[Version("4.5.2")] = "0" * 64
    cache = ArchiveCache(tmp_path / "cache")
    cache.unpacked(cutlass.source_archive(Version("4.0.0"), table[Version("4.0.0")]), str(mirror))
    opened: list[str] = []

    def offline(source: str) -> BinaryIO:
        opened.append(source)
        raise DownloadError(f"{source}: network unreachable")

    sources = cutlass.Sources(cache=replace(cache, opener=offline), source_sha256=table)
    warnings: list[str] = []
    found = cutlass.pinned("cutlass_4_5", sources, allow_nearest=True, warn=warnings.append)
    assert found.version == Version("4.0.0")
    assert opened == ["https://github.com/NVIDIA/cutlass/archive/refs/tags/v4.5.2.tar.gz"]
    assert len(warnings) == 1
