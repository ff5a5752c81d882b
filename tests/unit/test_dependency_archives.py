"""`kernelpack.toolchain.archives`: dependency archives are checked before anything is
unpacked, never write outside their cache entry, and fill the cache atomically."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path
from typing import BinaryIO

import pytest
from archive_support import add_file, cutlass_tarball, digest, served

from kernelpack.errors import ArchiveError, DownloadError
from kernelpack.toolchain.archives import Archive, ArchiveCache, open_source


def _archive(path: Path, sha256: str | None = None) -> Archive:
    return Archive(path.name, sha256 or digest(path), f"https://example.invalid/{path.name}")


def _left_in(cache: Path) -> list[str]:
    """What a cache folder holds besides lock files."""
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock"))


def test_unpacks_a_verified_archive_from_a_mirror_folder(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    cache = ArchiveCache(tmp_path / "cache")
    folder = cache.unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert folder == tmp_path / "cache" / f"cutlass-4.0.0-{digest(tarball)[:16]}"
    assert (folder / "cutlass-4.0.0" / "include" / "cutlass" / "version.h").is_file()
    assert _left_in(tmp_path / "cache") == [folder.name]


def test_a_filled_entry_is_not_fetched_again(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    opened: list[str] = []
    announced: list[str] = []

    def opener(source: str) -> BinaryIO:
        opened.append(source)
        return open_source(source)

    cache = ArchiveCache(tmp_path / "cache", opener=opener, announce=announced.append)
    first = cache.unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert cache.unpacked(_archive(tarball), str(tmp_path / "mirror")) == first
    assert opened == [str(tmp_path / "mirror" / "cutlass-4.0.0.tar.gz")]
    assert len(announced) == 1
    assert "fetching cutlass-4.0.0.tar.gz" in announced[0]


def test_wrong_digest_is_one_line_naming_the_archive_and_both_digests(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    expected = "0" * 64
    with pytest.raises(ArchiveError) as excinfo:
        ArchiveCache(tmp_path / "cache").unpacked(
            _archive(tarball, expected), str(tmp_path / "mirror")
        )
    message = str(excinfo.value)
    assert "\n" not in message
    assert "cutlass-4.0.0.tar.gz" in message
    assert digest(tarball) in message
    assert expected in message
    assert excinfo.value.exit_code == 2
    assert _left_in(tmp_path / "cache") == []


def test_digest_is_checked_before_anything_is_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("opened the archive before checking its digest")

    monkeypatch.setattr(tarfile, "open", refuse)
    with pytest.raises(ArchiveError):
        ArchiveCache(tmp_path / "cache").unpacked(
            _archive(tarball, "f" * 64), str(tmp_path / "mirror")
        )


def _hostile(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cutlass-{kind}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, "cutlass-9.9.9/include/cutlass/version.h", "// fine\n")
        if kind == "absolute":
            add_file(tar, "/tmp/kernelpack-escape.h", "// out\n")
        elif kind == "dotdot":
            add_file(tar, "cutlass-9.9.9/../../escape.h", "// out\n")
        elif kind in ("symlink", "hardlink", "fifo"):
            info = tarfile.TarInfo("cutlass-9.9.9/include/link.h")
            info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}.get(
                kind, tarfile.FIFOTYPE
            )
            info.linkname = "../../../outside.h" if kind == "symlink" else "/etc/passwd"
            tar.addfile(info)
    return path


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink", "hardlink", "fifo"])
def test_hostile_members_refuse_the_whole_archive(tmp_path: Path, kind: str) -> None:
    tarball = _hostile(tmp_path / "mirror", kind)
    with pytest.raises(ArchiveError) as excinfo:
        ArchiveCache(tmp_path / "cache").unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert "\n" not in str(excinfo.value)
    assert tarball.name in str(excinfo.value)
    assert _left_in(tmp_path / "cache") == []
    assert not (tmp_path / "outside.h").exists()
    assert not Path("/tmp/kernelpack-escape.h").exists()


def test_a_symlink_inside_the_archive_is_unpacked(tmp_path: Path) -> None:
    path = tmp_path / "mirror" / "cutlass-1.0.0.tar.gz"
    path.parent.mkdir()
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, "cutlass-1.0.0/include/cutlass/version.h", "// v\n")
        info = tarfile.TarInfo("cutlass-1.0.0/include/cutlass/alias.h")
        info.type = tarfile.SYMTYPE
        info.linkname = "version.h"
        tar.addfile(info)
    folder = ArchiveCache(tmp_path / "cache").unpacked(_archive(path), str(tmp_path / "mirror"))
    assert (folder / "cutlass-1.0.0/include/cutlass/alias.h").read_text() == "// v\n"


@pytest.mark.parametrize("name", ["../escape.h", "/abs/escape.h"])
def test_a_wheel_member_leaving_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "mirror" / "nvidia_cutlass-1.0.0.0-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("cutlass_library/__init__.py", "")
        wheel.writestr(name, "// out\n")
    with pytest.raises(ArchiveError, match="nothing was unpacked"):
        ArchiveCache(tmp_path / "cache").unpacked(_archive(path), str(tmp_path / "mirror"))
    assert _left_in(tmp_path / "cache") == []


def test_two_concurrent_fills_both_succeed_and_fetch_once(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    opened: list[str] = []
    both_started = threading.Barrier(2)

    def slow_opener(source: str) -> BinaryIO:
        opened.append(source)
        time.sleep(0.3)  # the other fill reaches the lock meanwhile
        return io.BytesIO(tarball.read_bytes())

    results: list[Path] = []
    errors: list[BaseException] = []

    def fill() -> None:
        try:
            both_started.wait(timeout=10)
            cache = ArchiveCache(tmp_path / "cache", opener=slow_opener)
            results.append(cache.unpacked(_archive(tarball), str(tmp_path / "mirror")))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fill) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(results) == 2
    assert results[0] == results[1]
    assert len(opened) == 1
    assert _left_in(tmp_path / "cache") == [results[0].name]


_FILL = """
import sys
from pathlib import Path
from kernelpack.toolchain.archives import Archive, ArchiveCache
archive = Archive(sys.argv[1], sys.argv[2], "https://example.invalid/")
print(ArchiveCache(Path(sys.argv[3])).unpacked(archive, sys.argv[4]))
"""


def test_two_processes_filling_at_once_both_succeed_with_one_download(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    requests: list[str] = []
    with served(tmp_path / "mirror", requests, delay=0.5) as url:
        args = [tarball.name, digest(tarball), str(tmp_path / "cache"), url]
        fills = [
            subprocess.Popen(
                [sys.executable, "-c", _FILL, *args], stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outputs = [fill.communicate(timeout=60)[0].strip() for fill in fills]
    assert [fill.returncode for fill in fills] == [0, 0]
    assert outputs[0] == outputs[1]
    assert requests == ["/mirror/cutlass-4.0.0.tar.gz"]
    assert _left_in(tmp_path / "cache") == [Path(outputs[0]).name]


class _Broken(io.BytesIO):
    """A download that fails half-way."""

    def read(self, size: int | None = -1) -> bytes:
        if self.tell() > 0:
            raise ConnectionResetError("connection reset by peer")
        return super().read(64)


def test_an_interrupted_download_leaves_nothing_and_the_next_fill_succeeds(
    tmp_path: Path,
) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    broken = ArchiveCache(tmp_path / "cache", opener=lambda _: _Broken(tarball.read_bytes()))
    with pytest.raises(DownloadError, match="connection reset"):
        broken.unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert _left_in(tmp_path / "cache") == []
    folder = ArchiveCache(tmp_path / "cache").unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert folder.is_dir()


def test_leftovers_of_a_killed_fill_are_removed_by_the_next(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    archive = _archive(tarball)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f".{archive.entry}.k1ll3d00").write_bytes(b"half a download")
    (cache / f".{archive.entry}.k1ll3d01").mkdir()
    (cache / f".{archive.entry}.k1ll3d01" / "half.h").write_text("// half\n")
    ArchiveCache(cache).unpacked(archive, str(tmp_path / "mirror"))
    assert _left_in(cache) == [archive.entry]


def test_an_interrupt_while_unpacking_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tarfile.TarFile, "extractall", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ArchiveCache(tmp_path / "cache").unpacked(_archive(tarball), str(tmp_path / "mirror"))
    assert _left_in(tmp_path / "cache") == []


def test_mirror_over_http(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "mirror", "4.0.0")
    with served(tmp_path / "mirror") as url:
        folder = ArchiveCache(tmp_path / "cache").unpacked(_archive(tarball), url)
    assert (folder / "cutlass-4.0.0" / "include" / "cutlass" / "version.h").is_file()


def test_a_missing_file_on_an_http_mirror_is_a_download_error(tmp_path: Path) -> None:
    tarball = cutlass_tarball(tmp_path / "elsewhere", "4.0.0")
    (tmp_path / "mirror").mkdir()
    with served(tmp_path / "mirror") as url, pytest.raises(DownloadError) as excinfo:
        ArchiveCache(tmp_path / "cache").unpacked(_archive(tarball), url)
    assert "404" in str(excinfo.value)
    assert f"{url}/cutlass-4.0.0.tar.gz" in str(excinfo.value)
    assert _left_in(tmp_path / "cache") == []
