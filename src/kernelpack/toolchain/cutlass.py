"""CUTLASS at an exact version (`depends = ["cutlass_4_0"]`): where its headers come from.

In order, for `cutlass_X_Y` (the release `PINNED_DEPS` names, e.g. 4.0.0):

1. an installed `nvidia-cutlass` wheel whose headers are CUTLASS X.Y (any patch release; the
   version used is in `Headers.origin`);
2. the `nvidia-cutlass` wheel of that release, where PyPI has one (3.3 to 3.8, 4.2), else
   the tagged source archive of NVIDIA/cutlass on GitHub: fetched once into kernelpack's
   cache and checked against the sha256 tables below before anything is unpacked
   (`kernelpack.toolchain.archives`). `KERNELPACK_DEPS_MIRROR` (a folder or URL holding the
   same files under the same names) replaces PyPI and GitHub on machines without internet;
3. with `--allow-nearest` (`KERNELPACK_ALLOW_NEAREST=1`) only, the nearest version at hand
   (installed, cached, or in the mirror; never fetched from the internet), with one warning
   line.

Otherwise a one-line error says what to set. The override variable
(`KERNELPACK_CUTLASS_4_0_DIR`) and `[tool.kernelpack.deps]` come before all of this
(`kernelpack.toolchain.deps`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from packaging.version import InvalidVersion, Version

from kernelpack.errors import DownloadError, UsageError
from kernelpack.project.dependencies import PINNED_DEPS
from kernelpack.toolchain.archives import Archive, ArchiveCache

__all__ = [
    "SOURCE_SHA256",
    "WHEELS",
    "Headers",
    "Sources",
    "cutlass_folders",
    "headers_version",
    "pinned",
    "source_archive",
    "wheel_archive",
]

#: sha256 of GitHub's tag archives `https://github.com/NVIDIA/cutlass/archive/refs/tags/
#: v<version>.tar.gz`, as published by package recipes that download and check them (their
#: build farms verify every digest on each build). A release without a published digest is
#: left out: it needs the override variable, a wheel, or `--allow-nearest`.
SOURCE_SHA256: Mapping[Version, str] = MappingProxyType(
    {
        Version(version): digest
        for version, digest in (
            # Spack (spack/spack-packages, builtin package `cutlass`)
            ("2.10.0", "8f56727c0c7ca59f67f6904972958a6e7e925f72e112056e6df7bb3fdeacefd7"),
            # Spack; conda-forge (cutlass-feedstock, recipe/meta.yaml)
            ("3.3.0", "99876de94a04d0b9cdee81d4f29659bde1426b416926aef4d9a3a3a7869511a3"),
            # Spack; xmake-repo (packages/c/cutlass)
            ("3.4.1", "aebd4f9088bdf2fd640d65835de30788a6c7d3615532fcbdbc626ec3754becd4"),
            # Spack; conda-forge; xmake-repo (each of 3.5.1 to 3.8.0)
            ("3.5.1", "20b7247cda2d257cbf8ba59ba3ca40a9211c4da61a9c9913e32b33a2c5883a36"),
            ("3.6.0", "7576f3437b90d0de5923560ccecebaa1357e5d72f36c0a59ad77c959c9790010"),
            ("3.7.0", "dfcafb7435a1b114ce32faee4f3257e276caf08f55fea04fa8bf3efa3a83c814"),
            ("3.8.0", "14a5e6314f23e41295d8377b6fa6028b35392757a0ee4538a4eacaaa5d7eee37"),
            # Spack; conda-forge
            ("3.9.2", "4b97bd6cece9701664eec3a634a1f2f2061d85bf76d843fa5799e1a692b4db0d"),
            # Spack; xmake-repo
            ("4.0.0", "44a121c5878827875856c175ebe82e955062e37cd61fcdf31ebe2e8874f2fc5c"),
            # conda-forge; Spack (package `py-vllm`, its `cutlass` resource)
            ("4.4.2", "ef62816841b8cbcd0ed3ec45d3ab56cf67d569a0f39329b43eeeebea86f58473"),
            # conda-forge
            ("4.5.2", "7d3ffb03b2d767439189492ab2aa0785632e1b80ba0c5e5618d6c5265d44e008"),
        )
    }
)

_WHEEL_ROOT = "https://files.pythonhosted.org/packages/"

#: The `nvidia-cutlass` wheels on PyPI (version X.Y.Z.0 ships CUTLASS X.Y.Z): file path below
#: files.pythonhosted.org and sha256, as PyPI's JSON API publishes them. Pure Python wheels
#: (`py3-none-any`), one per release.
WHEELS: Mapping[Version, tuple[str, str]] = MappingProxyType(
    {
        Version(version): (path, digest)
        for version, path, digest in (
            (
                "3.3.0",
                "e0/6e/81493d6634a777b61324bac7cb9e3aa1bfd07e592a92d7d81ac108d8a69a",
                "bfae7a8bc6441e42e4171723257ea6cb1ac1cf2f107f5f946a1968503822eccc",
            ),
            (
                "3.4.0",
                "31/8a/1d8aa90a3f70c907dff6a3c244a0c2088d0d08810a36c35720219964a77a",
                "c745344dd6a5a7050925e49110aa2f7f16f687362ad3fd6c0d67cd85005c2b37",
            ),
            (
                "3.4.1",
                "f6/57/8ea96b8637b0e7c297a8657ba45b3ea3a7e126c4e08938c7af2a71c45fc9",
                "743c0ef66233c6ffaf348d9509ddb541d5c68f320ae85076bec0c3e047964f15",
            ),
            (
                "3.5.0",
                "06/dd/aa40fe9b7e46c1a5927f05abc03c696b516bc8dac39dc3e56085a47db1ed",
                "4ec3ab4820dd4ae3ebc2c5ddf23352b0dc90f779435284e7dce822006adc51f6",
            ),
            (
                "3.5.1",
                "11/fe/1c677ffee1482176cccd5975670801301b7420f6678ec8ac8e086ceb929a",
                "cb90ec9fec86504c1602175fa8a96756e9502884b6aac62a03f814e6b1bb35f1",
            ),
            (
                "3.6.0",
                "82/d7/a4f6c3f6d75fab435e31fe90815171bd16702cc59a2d4246e4d3d3f4f9d2",
                "8b51469514e119d771e571ade9623a28de05c9ed01030666d17d4ce0b6737454",
            ),
            (
                "3.7.0",
                "eb/03/af2de9c7b34427ab336306f646d71d184aa3cc04b511dc9dae0d78e4fd0c",
                "0a44b03359686206254d70c7a9ac79b59a14cb23e9ab04012edd78801794e4be",
            ),
            (
                "3.8.0",
                "f6/99/fdf4a720dfa286710151dbd7b86e57d87685193eeff7ec4f942352aaa3f4",
                "013147221a63500205da233ae02e6262463917f3fe39cb09efbca37bfd1c39f9",
            ),
            (
                "4.2.0",
                "21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c",
                "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6",
            ),
        )
    }
)

# Inside a CUTLASS checkout (and the wheel's `cutlass_library/source`): the header folders.
_INCLUDES = (("include",), ("tools", "util", "include"))
_VERSION_DEFINE = re.compile(r"#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)")


@dataclass(frozen=True)
class Headers:
    """The include folders of one CUTLASS, and where they came from."""

    folders: tuple[Path, ...]
    version: Version | None
    """What its `cutlass/version.h` says (None: no such file)."""
    origin: str
    """For messages: `the installed nvidia-cutlass wheel`, `cutlass-4.0.0.tar.gz (cache)`."""


@dataclass(frozen=True)
class Sources:
    """Where releases come from on this machine: the cache, the mirror, the tables."""

    cache: ArchiveCache
    mirror: str | None = None
    installed: Path | None = None
    """The installed wheel's `cutlass_library` folder, if any."""
    source_sha256: Mapping[Version, str] = field(default_factory=lambda: SOURCE_SHA256)
    wheels: Mapping[Version, tuple[str, str]] = field(default_factory=lambda: WHEELS)

    def archives(self, version: Version) -> tuple[Archive, ...]:
        """What may hold `version`, in the order tried: its wheel, its source archive."""
        found = []
        if version in self.wheels:
            found.append(wheel_archive(version, *self.wheels[version]))
        if version in self.source_sha256:
            found.append(source_archive(version, self.source_sha256[version]))
        return tuple(found)

    def versions(self) -> frozenset[Version]:
        """Every release some table holds."""
        return frozenset(self.wheels).union(self.source_sha256)


def wheel_archive(version: Version, path: str, digest: str) -> Archive:
    """The `nvidia-cutlass` wheel of CUTLASS `version` on PyPI."""
    filename = f"nvidia_cutlass-{version}.0-py3-none-any.whl"
    return Archive(filename, digest, f"{_WHEEL_ROOT}{path}/{filename}")


def source_archive(version: Version, digest: str) -> Archive:
    """GitHub's archive of the tag `v<version>` of NVIDIA/cutlass."""
    url = f"https://github.com/NVIDIA/cutlass/archive/refs/tags/v{version}.tar.gz"
    return Archive(f"cutlass-{version}.tar.gz", digest, url)


def pinned(
    name: str, sources: Sources, *, allow_nearest: bool, warn: Callable[[str], None]
) -> Headers:
    """The headers of the pinned dependency `name` (`cutlass_4_0`), found as the module
    says; `UsageError` (one line) when no source has them. `warn` gets one line when
    another release than the pinned one is used (another patch of an installed wheel, or
    the nearest release)."""
    wanted = PINNED_DEPS[name]
    installed = _installed(sources.installed)
    if installed is not None and _same_minor(installed.version, wanted):
        if installed.version != wanted:
            warn(f"kernelpack: {name}: using CUTLASS {installed.version} ({installed.origin})")
        return installed
    tried: list[str] = []
    for archive in sources.archives(wanted):
        try:
            return _unpacked(archive, sources)
        except DownloadError as exc:
            tried.append(str(exc))
    why = "; ".join(tried) or "kernelpack has no sha256 of its archive"
    if allow_nearest:
        nearest = _nearest(wanted, sources, installed)
        if nearest is not None:
            warn(
                f"kernelpack: warning: {name}: CUTLASS {wanted} is not available here ({why}); "
                f"using CUTLASS {nearest.version} ({nearest.origin}) instead (--allow-nearest)"
            )
            return nearest
    files = " or ".join(archive.filename for archive in sources.archives(wanted))
    mirror = f"KERNELPACK_DEPS_MIRROR to a folder or URL holding {files}, or " if files else ""
    raise UsageError(
        f"dependency {name!r}: CUTLASS {wanted} is not available here ({why}); set {mirror}"
        f"KERNELPACK_{name.upper()}_DIR to a CUTLASS {wanted} checkout, or pass "
        "--allow-nearest (KERNELPACK_ALLOW_NEAREST=1)"
    )


def _same_minor(found: Version | None, wanted: Version) -> bool:
    return found is not None and found.release[:2] == wanted.release[:2]


def _nearest(wanted: Version, sources: Sources, installed: Headers | None) -> Headers | None:
    """The release nearest to `wanted` (same major first, then the nearest minor, then
    patch; a newer one before an older one at equal distance) among those at hand: the
    installed wheel, the cache's entries and the mirror's files. Nothing is looked for on
    the internet: on a machine without it, each attempt could wait for a timeout."""
    offers: dict[Version, Headers | None] = {v: None for v in sources.versions() if v != wanted}
    if installed is not None and installed.version is not None:
        offers[installed.version] = installed
    for version in sorted(offers, key=lambda v: _distance(wanted, v)):
        found = offers[version]
        if found is not None:
            return found
        for archive in sources.archives(version):
            if sources.mirror is None and not sources.cache.has(archive):
                continue
            try:
                return _unpacked(archive, sources)
            except DownloadError:
                continue
    return None


def _distance(wanted: Version, other: Version) -> tuple[int, ...]:
    a = (*wanted.release, 0, 0)[:3]
    b = (*other.release, 0, 0)[:3]
    return (abs(a[0] - b[0]), abs(a[1] - b[1]), abs(a[2] - b[2]), int(other < wanted))


def _unpacked(archive: Archive, sources: Sources) -> Headers:
    folder = sources.cache.unpacked(archive, sources.mirror)
    root = _checkout_root(folder)
    folders = cutlass_folders(root) if root is not None else ()
    if not folders:
        raise DownloadError(f"{archive.filename}: no CUTLASS headers inside ({folder})")
    return Headers(folders, headers_version(folders[0]), f"{archive.filename} in {folder}")


def _checkout_root(folder: Path) -> Path | None:
    """Where the headers sit in an unpacked archive: the wheel's `cutlass_library/source`,
    or the one top folder of a source archive (`cutlass-4.0.0/`)."""
    for candidate in _candidates(folder):
        if (candidate / "include" / "cutlass").is_dir():
            return candidate
    return None


def _candidates(folder: Path) -> Iterator[Path]:
    yield folder / "cutlass_library" / "source"
    yield folder
    yield from sorted(p for p in folder.iterdir() if p.is_dir())


def _installed(package: Path | None) -> Headers | None:
    if package is None:
        return None
    folders = cutlass_folders(package / "source")
    if not folders:
        return None
    version = headers_version(folders[0])
    shown = f"nvidia-cutlass {version}" if version is not None else "nvidia-cutlass"
    return Headers(folders, version, f"the installed {shown} wheel")


def cutlass_folders(root: Path) -> tuple[Path, ...]:
    """CUTLASS's include folders below a checkout or the wheel's `source/` folder (or `root`
    itself when it is an include folder); () when there are none."""
    if (root / "cutlass").is_dir():
        return (root.absolute(),)
    found = tuple(root.joinpath(*parts) for parts in _INCLUDES)
    if not found[0].joinpath("cutlass").is_dir():
        return ()
    return tuple(p.absolute() for p in found if p.is_dir())


def headers_version(include: Path) -> Version | None:
    """The CUTLASS version `include/cutlass/version.h` declares; None without one."""
    try:
        text = (include / "cutlass" / "version.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    parts = dict(_VERSION_DEFINE.findall(text))
    try:
        return Version(f"{parts['MAJOR']}.{parts['MINOR']}.{parts.get('PATCH', '0')}")
    except (KeyError, InvalidVersion):
        return None
