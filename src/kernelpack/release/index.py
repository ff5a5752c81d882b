"""`kernelpack index`: one release's wheels, published through three channels in one folder.

```
SITE/cu130/simple/<project>/     every cu130 wheel as built (+cu130stable2.10, +cu130torch2.14.1)
SITE/cu128/simple/<project>/     (one static PEP 503 index per CUDA label, as PyTorch's own)
SITE/pypi/                       the default variant's wheels and the sdist, plain version
SITE/variants/simple/<project>/  PEP 825 variant wheels, the null variant, the index file
                                 <name>-<version>-variants.json, and the plain default wheels
                                 (for installers that do not read variants)
SITE/kernelpack-index.json       what was written (project, version, default, labels)
```

Everything is read and checked before anything is written; the site is assembled in a
temporary folder beside SITE and renamed into place, so SITE is whole or untouched. SITE may
be missing, empty, or a site this command wrote before (it is replaced); a folder holding
anything else is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.release.distfiles import KernelWheel, Release, read_release
from kernelpack.release.repack import repack
from kernelpack.release.simple import IndexFile, write_project, write_root
from kernelpack.release.variants import (
    NULL,
    Properties,
    merged,
    null_record,
    properties,
    variant_json,
    variants_json,
)
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import BuiltKernel

__all__ = ["MARKER", "Site", "build_site", "choose_default"]

#: The file that marks a folder as a site `kernelpack index` wrote (and may replace).
MARKER = "kernelpack-index.json"


@dataclass(frozen=True)
class Site:
    """What `build_site` wrote."""

    root: Path
    project: str
    version: str
    default: str
    cuda: tuple[str, ...]
    """The CUDA labels with an index (`cu128`, `cu130`)."""
    pypi: tuple[str, ...]
    """File names under `pypi/`."""
    variants: tuple[str, ...]
    """Variant labels under `variants/`, `null` included."""

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "version": self.version,
            "default": self.default,
            "cuda": list(self.cuda),
            "pypi": list(self.pypi),
            "variants": list(self.variants),
        }


def choose_default(release: Release, wanted: str | None) -> str:
    """The default variant label: `wanted` (which a wheel must have), else the only label."""
    labels = release.labels
    if wanted is not None:
        if wanted not in labels:
            raise UsageError(
                f"--default {wanted}: no wheel has this variant label (the wheels have: "
                f"{', '.join(labels)})"
            )
        return wanted
    if len(labels) == 1:
        return labels[0]
    raise UsageError(
        f"{release.name} {release.version} has several variants ({', '.join(labels)}): name the "
        "one PyPI gets with --default LABEL or [tool.kernelpack.release] default"
    )


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(
            f"{out}: exists and holds other files; give a new or empty folder (a site written "
            "by kernelpack index is replaced)"
        )


def _dist(wheel: KernelWheel) -> str:
    return wheel.path.name.split("-")[0]


def _plain_name(wheel: KernelWheel, version: str, label: str | None = None) -> str:
    suffix = f"-{label}" if label else ""
    return f"{_dist(wheel)}-{version}-{wheel.tag}{suffix}.whl"


def _duplicates(wheels: Sequence[KernelWheel]) -> None:
    seen: dict[tuple[str, str], Path] = {}
    for wheel in wheels:
        key = (wheel.label, wheel.tag)
        if key in seen:
            raise UsageError(
                f"{wheel.path}: a second {wheel.label} wheel for {wheel.tag} "
                f"(the first: {seen[key]})"
            )
        seen[key] = wheel.path


def _install_hints(release: Release, default: KernelWheel) -> list[str]:
    url = default.record.release.url_for(default.cuda) if default.record.release else None
    if url is not None:
        return [f"pip install --extra-index-url {url} {release.name}=={release.version}"]
    return [
        f"install the {default.label} build of {release.name} {release.version} (from its "
        f"{default.cuda} index or PyPI)"
    ]


def _wheel_text(data: bytes) -> bytes:
    """A WHEEL file made pure: `Root-Is-Purelib: true`, one tag `py3-none-any`."""
    lines = [
        line
        for line in data.decode().splitlines()
        if not line.startswith(("Tag:", "Root-Is-Purelib:"))
    ]
    return ("\n".join([*lines, "Root-Is-Purelib: true", "Tag: py3-none-any"]) + "\n").encode()


def _write_cuda(site: Path, release: Release) -> list[str]:
    labels = sorted({wheel.cuda for wheel in release.wheels})
    for cuda in labels:
        simple = site / cuda / "simple"
        folder = simple / release.name
        folder.mkdir(parents=True)
        files = []
        for wheel in (w for w in release.wheels if w.cuda == cuda):
            shutil.copyfile(wheel.path, folder / wheel.path.name)
            files.append(IndexFile(wheel.path.name, wheel.requires_python, wheel.metadata))
        write_project(folder, release.name, files)
        write_root(simple, [release.name])
    return labels


def _write_pypi(site: Path, release: Release, default: str) -> tuple[list[str], list[IndexFile]]:
    folder = site / "pypi"
    folder.mkdir()
    version = str(release.version)
    written: list[IndexFile] = []
    for wheel in (w for w in release.wheels if w.label == default):
        name = _plain_name(wheel, version)
        repack(
            wheel.path,
            folder / name,
            dist_info=(wheel.dist_info, f"{_dist(wheel)}-{version}.dist-info"),
            version=version,
        )
        written.append(IndexFile(name, wheel.requires_python, _metadata_of(folder / name)))
    names = [item.filename for item in written]
    if release.sdist is not None:
        shutil.copyfile(release.sdist.path, folder / release.sdist.path.name)
        names.append(release.sdist.path.name)
    return sorted(names), written


def _metadata_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(member)


def _write_variants(
    site: Path, release: Release, default: str, plain: Sequence[IndexFile]
) -> list[str]:
    folder = site / "variants" / "simple" / release.name
    folder.mkdir(parents=True)
    version = str(release.version)
    table: dict[str, Properties] = {
        label: merged(properties(w) for w in release.wheels if w.label == label)
        for label in release.labels
    }
    table[NULL] = {}
    files: list[IndexFile] = []
    for wheel in release.wheels:
        name = _plain_name(wheel, version, wheel.label)
        new_info = f"{_dist(wheel)}-{version}.dist-info"
        repack(
            wheel.path,
            folder / name,
            dist_info=(wheel.dist_info, new_info),
            version=version,
            add={f"{new_info}/variant.json": variant_json(table, wheel.label)},
        )
        files.append(IndexFile(name, wheel.requires_python, _metadata_of(folder / name)))
    source = min((w for w in release.wheels if w.label == default), key=lambda w: w.path.name)
    files.append(_write_null(folder, release, source, table))
    for item in plain:  # the default wheels, for installers that do not read variants
        shutil.copyfile(site / "pypi" / item.filename, folder / item.filename)
        files.append(item)
    index_name = f"{_dist(source)}-{version}-variants.json"
    (folder / index_name).write_bytes(variants_json(table))
    files.append(IndexFile(index_name))
    write_project(folder, release.name, files)
    write_root(folder.parent, [release.name])
    return sorted(table)


def _write_null(
    folder: Path, release: Release, source: KernelWheel, table: dict[str, Properties]
) -> IndexFile:
    version = str(release.version)
    new_info = f"{_dist(source)}-{version}.dist-info"
    libraries = frozenset(
        f"{source.package}/{kernel.library}"
        for kernel in source.record.kernels.values()
        if isinstance(kernel, BuiltKernel)
    )
    record = null_record(source.record, version, _install_hints(release, source))
    name = f"{_dist(source)}-{version}-py3-none-any-{NULL}.whl"
    with zipfile.ZipFile(source.path) as archive:
        wheel_file = archive.read(f"{source.dist_info}/WHEEL")
    repack(
        source.path,
        folder / name,
        dist_info=(source.dist_info, new_info),
        version=version,
        drop=libraries,
        replace={
            f"{source.package}/{RECORD_FILENAME}": record.dumps().encode(),
            f"{new_info}/WHEEL": _wheel_text(wheel_file),
        },
        add={f"{new_info}/variant.json": variant_json(table, NULL)},
    )
    return IndexFile(name, source.requires_python, _metadata_of(folder / name))


def build_site(paths: Sequence[Path], out: Path, default: str | None = None) -> Site:
    """Read the release in `paths`, write its three channels to `out` (see the module
    docstring); `UsageError` (exit 2, nothing written) for bad input."""
    release = read_release(paths)
    label = choose_default(release, default)
    _duplicates(release.wheels)
    _check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    try:
        cuda = _write_cuda(staging, release)
        pypi, plain = _write_pypi(staging, release, label)
        variants = _write_variants(staging, release, label, plain)
        site = Site(
            out,
            release.name,
            str(release.version),
            label,
            tuple(cuda),
            tuple(pypi),
            tuple(variants),
        )
        (staging / MARKER).write_text(json.dumps(site.to_json(), indent=2) + "\n")
        os.chmod(staging, 0o755)
        _swap(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return site


def _swap(staging: Path, out: Path) -> None:
    """Put `staging` at `out`; a previous site (or an empty folder) there is removed."""
    if not out.exists():
        staging.rename(out)
        return
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
