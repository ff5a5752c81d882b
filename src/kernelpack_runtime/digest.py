"""Library digests: the SHA-256 the build records for every library it installs, and the
check `load()` makes against it before the library is opened.

A byte changed in an installed `_C.abi3.so` (a bad copy, a tampered file) would otherwise go
unnoticed until it crashes or computes wrong numbers. The check reads the very file Python
will import, in chunks (a 100 MB library is never held in memory), and only when a kernel is
about to be loaded: the other answers of the registry never hash. `KERNELPACK_VERIFY=0` turns
it off (for a library patched on purpose, e.g. by a debugger); `kernelpack status --json`
says whether it is on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from kernelpack_runtime._switch import parse_switch
from kernelpack_runtime.errors import UsageError

__all__ = ["VERIFY_VARIABLE", "file_sha256", "mismatch", "verification_enabled"]

#: The variable that turns the check off (`0`, `false`, `no`, `off`).
VERIFY_VARIABLE = "KERNELPACK_VERIFY"

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at `path`, as 64 lower-case hex digits (read in chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verification_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `load()` checks libraries against their recorded digests (default: yes).

    A value of `KERNELPACK_VERIFY` that is not a boolean leaves the check on: a typo must not
    turn a safety check off.
    """
    value = (os.environ if environ is None else environ).get(VERIFY_VARIABLE, "")
    if not value.strip():
        return True
    try:
        return parse_switch(value, VERIFY_VARIABLE)
    except UsageError:
        return True


def mismatch(path: Path, expected: str) -> str | None:
    """None when the file at `path` has the SHA-256 `expected`, else why not, in words."""
    try:
        actual = file_sha256(path)
    except OSError as exc:
        return f"{path} cannot be read to check its digest: {exc.strerror or exc}"
    if actual == expected:
        return None
    return (
        f"{path} is not the library the build installed (sha256 {actual[:12]}…, the build "
        f"record says {expected[:12]}…); reinstall the package, or set {VERIFY_VARIABLE}=0 "
        "to load it anyway"
    )
