"""Write a wheel that is another wheel under a new version: same members, RECORD rewritten.

PyPI refuses local versions, and PEP 825 variants of one release share one version, so the
channels re-version a built wheel (`0.1.0+cu130stable2.10` -> `0.1.0`): its `.dist-info`
folder is renamed, METADATA's `Version:` line changed, and every other member is copied byte
for byte with its date and mode; `wheel.wheelfile.WheelFile` writes the new RECORD. A member
may also be dropped, replaced or added (the null variant and `variant.json`).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from wheel.wheelfile import WheelFile

__all__ = ["repack", "with_version"]

_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")


def with_version(metadata: bytes, version: str) -> bytes:
    """`metadata` (METADATA or PKG-INFO) with its `Version:` header set to `version`; every
    other byte unchanged."""
    head, sep, body = metadata.partition(b"\n\n")
    new, count = re.subn(
        rb"^Version:[^\r\n]*", f"Version: {version}".encode(), head, count=1, flags=re.M
    )
    if count != 1:
        raise ValueError("core metadata without a Version header")
    return new + sep + body


def repack(
    source: Path,
    destination: Path,
    *,
    dist_info: tuple[str, str],
    version: str,
    drop: frozenset[str] = frozenset(),
    replace: Mapping[str, bytes] | None = None,
    add: Mapping[str, bytes] | None = None,
) -> None:
    """Write `destination` from the wheel `source`.

    `dist_info` is (old folder, new folder); `drop`, `replace` and `add` name members by their
    new paths. `destination`'s name may carry a PEP 825 variant label: the wheel is written
    under the plain name in a temporary folder beside it, then renamed.
    """
    replace = dict(replace or {})
    add = dict(add or {})
    old, new = dist_info
    plain = f"{new[: -len('.dist-info')]}-py3-none-any.whl"
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=".repack-") as folder:
        staged = Path(folder) / plain
        with zipfile.ZipFile(source) as original, WheelFile(staged, "w") as wheel:
            for info in original.infolist():
                name = info.filename
                if name.startswith(f"{old}/"):
                    name = f"{new}/{name[len(old) + 1 :]}"
                if name in drop or name in {f"{new}/{s}" for s in _SIGNATURES}:
                    continue
                data = original.read(info)
                if name == f"{new}/METADATA":
                    data = with_version(data, version)
                data = replace.pop(name, data)
                copy = zipfile.ZipInfo(name, date_time=info.date_time)
                copy.external_attr = info.external_attr
                copy.compress_type = info.compress_type
                wheel.writestr(copy, data)
            for name, data in {**replace, **add}.items():
                copy = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                copy.external_attr = 0o644 << 16
                copy.compress_type = zipfile.ZIP_DEFLATED
                wheel.writestr(copy, data)
        shutil.move(staged, destination)
