"""CPU kernels, library digests and skipped libraries, as the registry sees them.

A CPU kernel (`backend = "cpu"`) is usable without a GPU; a library whose bytes differ from
the record's `library_sha256` is never imported (`library-modified`, naming the file) unless
`KERNELPACK_VERIFY=0`; only loading hashes; a skipped library's stand-in module raises
`KernelUnavailableError` with the build's reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

import pytest
from registry_support import TORCH_2141_CU130, built, make_package, skipped, unique_name

from kernelpack.builder.outputs import unavailable_stub, unavailable_stub_path
from kernelpack.plan import KernelPlan
from kernelpack.project.manifest import KernelSpec
from kernelpack_runtime import KernelUnavailableError, Registry, digest
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import FILENAME, BuildRecord
from kernelpack_runtime.testing.fakes import no_device_probe

NO_GPU = no_device_probe("the NVIDIA driver reports no GPU")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("KERNELPACK_VERIFY", raising=False)
    monkeypatch.delenv("KERNELPACK_DISABLE", raising=False)
    return tmp_path


def _registry(package: str) -> Registry:
    return Registry(package, probe=NO_GPU, read_torch=lambda: TORCH_2141_CU130)


def _cpu_package(root: Path, *, record_digest: bool = True) -> tuple[str, Path]:
    """A package with one CPU kernel `k` whose record holds its library's digest."""
    package = unique_name()
    kernel = dataclasses.replace(built("k", package, archs=()), backend="cpu")
    folder = make_package(root, package, {"k": kernel})
    library = folder / kernel.library
    if record_digest:
        sha = hashlib.sha256(library.read_bytes()).hexdigest()
        record = BuildRecord.read(folder / FILENAME)
        kernels = {"k": dataclasses.replace(kernel, library_sha256=sha)}
        dataclasses.replace(record, kernels=kernels).write(folder / FILENAME)
    return package, library


def test_a_cpu_kernel_is_available_and_loads_without_a_gpu(root: Path) -> None:
    package, _ = _cpu_package(root)
    registry = _registry(package)
    assert registry.status() == {"k": "available"}
    assert registry.load("k").__name__ == f"{package}.k"


def test_a_cuda_kernel_of_the_same_package_shape_needs_a_device(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    reason = _registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "no-device"


def test_a_modified_library_is_not_loaded_and_the_reason_names_it(root: Path) -> None:
    package, library = _cpu_package(root)
    library.write_text(library.read_text() + "# one byte more\n")
    reason = _registry(package).unavailable_reason("k")
    assert reason is not None and reason.code == "library-modified"
    assert str(library) in reason.message and "KERNELPACK_VERIFY=0" in reason.message
    assert f"{package}.k._C" not in sys.modules  # never imported
    with pytest.raises(KernelUnavailableError) as raised:
        _registry(package).load("k")
    assert raised.value.reason.code == "library-modified"


def test_verify_off_loads_a_modified_library(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package, library = _cpu_package(root)
    library.write_text(library.read_text() + "# patched on purpose\n")
    monkeypatch.setenv("KERNELPACK_VERIFY", "0")
    assert _registry(package).status() == {"k": "available"}


def test_a_record_without_a_digest_is_not_checked(root: Path) -> None:
    package, library = _cpu_package(root, record_digest=False)
    library.write_text(library.read_text() + "# no digest to compare with\n")
    assert _registry(package).is_available("k")


def test_only_loading_hashes_a_library(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[Path] = []
    real = digest.file_sha256

    def counting(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(digest, "file_sha256", counting)
    package = unique_name()
    kernel = dataclasses.replace(built("k", package), library_sha256="ab" * 32)
    make_package(root, package, {"k": kernel})
    # A CUDA kernel on a machine without a GPU: the checks stop it before any load.
    assert _registry(package).status()["k"].startswith("no-device: ")
    assert hashed == []
    cpu, library = _cpu_package(root)
    assert _registry(cpu).status() == {"k": "available"}  # loading it: hashed once, first
    assert hashed == [library]


@pytest.mark.parametrize(
    ("value", "enabled"), [("", True), ("0", False), ("off", False), ("1", True), ("maybe", True)]
)
def test_verification_is_on_unless_turned_off_with_a_boolean(value: str, enabled: bool) -> None:
    assert digest.verification_enabled({"KERNELPACK_VERIFY": value}) is enabled


def test_a_skipped_librarys_stand_in_raises_with_the_builds_reason(root: Path) -> None:
    package = unique_name()
    folder = make_package(
        root, package, {"k": skipped("platform-excluded", "platforms = [aarch64] excludes x86_64")}
    )
    (folder / "k").mkdir()
    (folder / "k" / "__init__.py").write_text("from . import _C\n")
    reason = Reason("platform-excluded", "platforms = [aarch64] excludes x86_64")
    spec = KernelSpec(
        name="k", folder=folder / "k", namespace="ns", sources=(folder / "k" / "k.cpp",), arch={}
    )
    plan = KernelPlan(spec=spec, skip=reason)
    stub = folder / unavailable_stub_path(plan, folder)
    assert stub == folder / "k" / "_C.py"  # where `from . import _C` looks
    stub.write_text(unavailable_stub(plan, folder))
    with pytest.raises(KernelUnavailableError) as raised:
        __import__(f"{package}.k")
    assert raised.value.kernel == "k"
    assert raised.value.reason.code == "not-built"
    assert "platforms = [aarch64] excludes x86_64" in str(raised.value)
