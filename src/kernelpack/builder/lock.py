"""The build-tree lock: concurrent builds of one tree take turns.

`filelock` takes an `flock` on `<build dir>/.lock`; the kernel drops it when its holder dies,
so a killed build never blocks the next one. The holder writes its pid next to the lock so a
waiter can say whom it waits for, and a timeout names that pid.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from kernelpack.errors import BuildError

__all__ = ["DEFAULT_TIMEOUT", "build_lock"]

#: Seconds to wait for another build of the same tree (`KERNELPACK_LOCK_TIMEOUT`).
DEFAULT_TIMEOUT = 1800.0


@contextmanager
def build_lock(build_dir: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the lock of `build_dir` for the duration of the block."""
    if timeout is None:
        timeout = float(os.environ.get("KERNELPACK_LOCK_TIMEOUT", DEFAULT_TIMEOUT))
    build_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(build_dir / ".lock"))
    holder_file = build_dir / ".lock.holder"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = _holder(holder_file)
        print(
            f"kernelpack: waiting for the build lock on {build_dir} (held by {holder})",
            file=sys.stderr,
        )
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise BuildError(
                f"{build_dir} is locked by another build ({_holder(holder_file)}); "
                f"gave up after {timeout:g} s (KERNELPACK_LOCK_TIMEOUT)"
            ) from None
    try:
        holder_file.write_text(f"{os.getpid()}\n", encoding="utf-8")
        yield
    finally:
        holder_file.unlink(missing_ok=True)
        lock.release()


def _holder(holder_file: Path) -> str:
    try:
        pid = holder_file.read_text(encoding="utf-8").strip()
    except OSError:
        return "an unknown process"
    return f"pid {pid}" if pid else "an unknown process"
