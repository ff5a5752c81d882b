"""Small CUTLASS-shaped archives written by the tests, and a mirror to serve them from."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from packaging.version import Version

__all__ = ["add_file", "cutlass_tarball", "cutlass_wheel", "digest", "served", "version_header"]


def version_header(version: str) -> str:
    major, minor, patch = Version(version).release[:3]
    return (
        f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n"
        f"#define CUTLASS_PATCH {patch}\n"
    )


def add_file(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def cutlass_tarball(folder: Path, version: str) -> Path:
    """`folder/cutlass-<version>.tar.gz` laid out as GitHub's tag archive (headers only)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cutlass-{version}.tar.gz"
    top = f"cutlass-{version}"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, f"{top}/include/cutlass/version.h", version_header(version))
        add_file(tar, f"{top}/include/cute/tensor.hpp", "// cute\n")
        add_file(tar, f"{top}/tools/util/include/cutlass/util/packed_stride.hpp", "// util\n")
        add_file(tar, f"{top}/README.md", "CUTLASS\n")
    return path


def cutlass_wheel(folder: Path, version: str) -> Path:
    """`folder/nvidia_cutlass-<version>.0-py3-none-any.whl` with the wheel's header layout."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nvidia_cutlass-{version}.0-py3-none-any.whl"
    source = "cutlass_library/source"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{source}/include/cutlass/version.h", version_header(version))
        wheel.writestr(f"{source}/tools/util/include/cutlass/util/packed_stride.hpp", "// u\n")
        wheel.writestr("cutlass_library/__init__.py", "")
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def served(folder: Path, requests: list[str] | None = None, delay: float = 0.0) -> Iterator[str]:
    """`folder` served over HTTP on 127.0.0.1 (a free port) while the block runs: its URL.
    Each GET's path is appended to `requests`, and answered after `delay` seconds."""
    handler = functools.partial(
        _QuietHandler, directory=str(folder), requests=requests, delay=delay
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mirror"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves `directory` at `/mirror/…`, without a log line per request."""

    def __init__(self, *args: Any, requests: list[str] | None, delay: float, **kwargs: Any) -> None:
        self.requests = requests
        self.delay = delay
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        if self.requests is not None:
            self.requests.append(self.path)
        time.sleep(self.delay)
        super().do_GET()

    def translate_path(self, path: str) -> str:
        return super().translate_path(path.removeprefix("/mirror"))

    def log_message(self, format: str, *args: object) -> None:
        del format, args
