"""The registry on broken or hostile records and library files: a reason, never a crash.

Libraries here are small real `.so` files linked by g++ (a stand-in for nvcc's output: the
runtime reads ELF headers and dlopens, whatever compiled them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import (
    TORCH_2141_CU130,
    build_record,
    built,
    make_package,
    skipped,
    unique_name,
)

from kernelpack_runtime import Registry
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.testing.fakes import fake_probe

H200 = fake_probe("9.0", driver_cuda="13.0")
EXT = next(s for s in __import__("importlib.machinery").machinery.EXTENSION_SUFFIXES)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to link a .so")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("KERNELPACK_DISABLE", raising=False)
    return tmp_path


def registry(package: str) -> Registry:
    return Registry(package, probe=H200, read_torch=lambda: TORCH_2141_CU130)


def reason_of(package: str, kernel: str = "k") -> Reason:
    reason = registry(package).unavailable_reason(kernel)
    assert reason is not None
    return reason


@pytest.fixture(scope="module")
def good_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole shared library that loads and registers nothing."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to link a .so")
    folder = tmp_path_factory.mktemp("so")
    source = folder / "good.cpp"
    source.write_text('int table[50000] = {1};\nextern "C" int get(int i) { return table[i]; }\n')
    library = folder / "good.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return library


# -- the record ---------------------------------------------------------------------------------


def _write_record(root: Path, package: str, data: object) -> None:
    (root / package / "_kernelpack.json").write_text(json.dumps(data))


def test_a_wrongly_typed_entry_makes_every_named_kernel_record_invalid(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"a": built("a", package), "b": skipped("nvcc-missing", "x")})
    data = json.loads((root / package / "_kernelpack.json").read_text())
    data["kernels"]["a"]["library"] = 5
    _write_record(root, package, data)
    reg = registry(package)
    status = reg.status()
    assert set(status) == {"a", "b"}
    assert all(value.startswith("record-invalid: ") for value in status.values())
    assert "kernels.a.library: expected a string, got a number" in status["b"]
    assert f"{package}.a" not in sys.modules


def test_a_record_arch_that_does_not_parse_is_record_invalid_not_skipped(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"a": built("a", package, archs=("9.0a",))})
    data = json.loads((root / package / "_kernelpack.json").read_text())
    data["kernels"]["a"]["archs"] = ["9.0a", "sm_90"]
    _write_record(root, package, data)
    reason = reason_of(package, "a")
    assert reason.code == "record-invalid"
    assert "kernels.a.archs[1]: " in reason.message


def test_a_record_naming_no_kernel_gives_record_invalid_for_any_name(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {})
    data = json.loads((root / package / "_kernelpack.json").read_text())
    _write_record(root, package, {**data, "kernels": ["ab"]})
    reg = registry(package)
    assert reg.status() == {}
    assert reason_of(package, "anything").code == "record-invalid"
    assert "kernels: expected an object, got a list" in str(reason_of(package, "anything"))


def test_an_invalid_record_still_refuses_a_name_it_does_not_list(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"a": built("a", package)})
    data = json.loads((root / package / "_kernelpack.json").read_text())
    data["kernels"]["a"]["archs"] = "9.0a"
    _write_record(root, package, data)
    with pytest.raises(ValueError, match="has no kernel 'typo'"):
        registry(package).unavailable_reason("typo")


def test_a_deeply_nested_record_is_record_invalid(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {})
    (root / package / "_kernelpack.json").write_text("[" * 200_000)
    assert reason_of(package, "k").code == "record-invalid"


def test_a_fifo_record_does_not_hang(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {}, record=False)
    os.mkfifo(root / package / "_kernelpack.json")
    reason = reason_of(package, "k")
    assert reason.code == "record-invalid" and "not a regular file" in reason.message


def test_a_record_linked_from_outside_the_package_is_record_invalid(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    outside = root / "elsewhere.json"
    (root / package / "_kernelpack.json").rename(outside)
    (root / package / "_kernelpack.json").symlink_to(outside)
    reason = reason_of(package)
    assert reason.code == "record-invalid" and "leads outside the package" in reason.message


def test_a_custom_env_prefix_in_the_record_disables_with_its_variable(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)}, env_prefix="MYOPS")
    monkeypatch.setenv("MYOPS_DISABLE", "k")
    monkeypatch.setenv(f"{package.upper()}_DISABLE", "")
    reason = reason_of(package)
    assert (reason.code, reason.message) == (
        "disabled",
        "disabled by MYOPS_DISABLE=k; remove 'k' from it to use the kernel",
    )


def test_a_schema_1_record_disables_with_the_package_name_prefix(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    data = json.loads((root / package / "_kernelpack.json").read_text())
    data["schema"] = 1
    del data["env_prefix"]
    _write_record(root, package, data)
    monkeypatch.setenv(f"{package.upper()}_DISABLE", "k")
    assert reason_of(package).code == "disabled"


# -- which file is checked ------------------------------------------------------------------------


@needs_gxx
def test_a_truncated_library_that_import_prefers_is_the_one_checked(
    root: Path, good_so: Path
) -> None:
    # EXTENSION_SUFFIXES order: `_C.cpython-311-….so` shadows `_C.abi3.so`.
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    shutil.copy(good_so, root / package / "k" / "_C.abi3.so")
    shadow = root / package / "k" / f"_C{EXT}"
    shadow.write_bytes(good_so.read_bytes()[:20_000])
    reason = reason_of(package)
    assert reason.code == "load-failed"
    assert reason.message.startswith(f"{shadow} is truncated (20000 bytes; its ELF headers need ")


@needs_gxx
def test_a_whole_library_shadowing_the_recorded_one_is_load_failed(
    root: Path, good_so: Path
) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    shutil.copy(good_so, root / package / "k" / "_C.abi3.so")
    shutil.copy(good_so, root / package / "k" / f"_C{EXT}")
    reason = reason_of(package)
    assert reason.code == "load-failed"
    assert reason.message.startswith(
        f"Python would import {root / package / 'k' / f'_C{EXT}'}, not the recorded "
        f"{root / package / 'k' / '_C.abi3.so'}"
    )
    assert f"{package}.k" not in sys.modules


@needs_gxx
@pytest.mark.parametrize("size", [0, 3, 4, 15, 16, 52, 60, 63, 64, 65, 200, 4096])
def test_a_library_cut_to_a_few_bytes_is_load_failed_not_struct_error(
    root: Path, good_so: Path, size: int
) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.so")})
    (root / package / "k" / "_C.so").write_bytes(good_so.read_bytes()[:size])
    assert reason_of(package).code == "load-failed"


def test_a_fifo_library_does_not_hang(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    os.mkfifo(root / package / "k" / "_C.abi3.so")
    reason = reason_of(package)
    assert reason.code == "load-failed" and "is not a regular file" in reason.message


def test_a_folder_in_place_of_the_library_is_load_failed(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    (root / package / "k" / "_C.abi3.so").mkdir()
    reason = reason_of(package)
    assert reason.code == "load-failed" and "is not a regular file" in reason.message


@needs_gxx
def test_a_library_linked_from_outside_the_package_is_not_opened(root: Path, good_so: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    (root / package / "k" / "_C.abi3.so").symlink_to(good_so)
    reason = reason_of(package)
    assert reason.code == "load-failed" and "leads outside the package" in reason.message


def test_a_kernel_folder_without_init_whose_c_is_text_is_not_available(root: Path) -> None:
    package = unique_name()
    make_package(root, package, {"k": built("k", package, library="k/_C.abi3.so")})
    (root / package / "k" / "__init__.py").unlink()
    (root / package / "k" / "_C.abi3.so").write_text("this is not a library\n" * 100)
    reason = reason_of(package)
    assert reason.code == "load-failed" and "invalid ELF header" in reason.message


# -- the recorded namespace must hold ops after the load ------------------------------------------


def test_a_library_that_registers_no_op_is_load_failed(root: Path) -> None:
    pytest.importorskip("torch")
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    (root / package / "k" / "_C.py").write_text("")
    reason = reason_of(package)
    assert reason.code == "load-failed"
    assert reason.message.startswith(
        f"{package}.k: its library registered no op (the build record names torch.ops.{package}_k)"
    )


def test_a_library_that_registers_elsewhere_is_load_failed_naming_where(root: Path) -> None:
    pytest.importorskip("torch")
    package = unique_name()
    make_package(root, package, {"k": built("k", package)})
    elsewhere = f"{package}_elsewhere"
    (root / package / "k" / "_C.py").write_text(
        "import torch\n"
        f"_lib = torch.library.Library({elsewhere!r}, 'FRAGMENT')\n"
        "_lib.define('relu(Tensor x) -> Tensor')\n"
    )
    reason = reason_of(package)
    assert reason.code == "load-failed"
    assert reason.message.startswith(
        f"{package}.k: its library registered its ops in torch.ops.{elsewhere} "
        f"({elsewhere}::relu), not in torch.ops.{package}_k, the namespace the build record names"
    )


@pytest.fixture
def taken_c_namespace() -> Iterator[str]:
    """A namespace (as `_C` would be) already owned by a library loaded earlier."""
    torch = pytest.importorskip("torch")
    namespace = unique_name("kp_taken")
    library = torch.library.Library(namespace, "DEF")
    library.define("relu(Tensor x) -> Tensor")
    yield namespace
    library._destroy()


@needs_gxx
@pytest.mark.parametrize("recorded", [True, False], ids=["recorded-ns", "no-recorded-ns"])
def test_a_namespace_the_library_symbols_claim_is_checked_before_the_load(
    root: Path, tmp_path: Path, taken_c_namespace: str, recorded: bool
) -> None:
    # The static initialiser of `TORCH_LIBRARY(<ns>, m)` leaves the local symbol
    # `TORCH_LIBRARY_init_<ns>`; loading a second owner of <ns> would abort the process.
    package = unique_name()
    namespace = f"{package}_k" if recorded else None
    kernel = built("k", package, library="k/_C.so")
    if not recorded:
        import dataclasses

        kernel = dataclasses.replace(kernel, namespace=None)
    make_package(root, package, {"k": kernel})
    source = tmp_path / "claims.cpp"
    source.write_text(
        f"static void TORCH_LIBRARY_init_{taken_c_namespace}(int& m) {{ m += 1; }}\n"
        f'extern "C" void (*keep)(int&) = &TORCH_LIBRARY_init_{taken_c_namespace};\n'
    )
    library = root / package / "k" / "_C.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    reason = reason_of(package)
    assert reason.code == "namespace-collision"
    assert reason.message.startswith(
        f"torch.ops.{taken_c_namespace} already holds {taken_c_namespace}::relu from another "
        "library"
    )
    if recorded:
        assert f"own namespace (torch.ops.{namespace})" in reason.message
    assert f"{package}.k" not in sys.modules


def test_a_library_in_the_package_itself_loads_through_its_kernel_module(root: Path) -> None:
    # kernel-builder's layout: kernel `_ops` is `_ops.py`, which imports the package's one
    # library `_relu_1a2b3c4`, whose ops live in the namespace of the same name.
    pytest.importorskip("torch")
    package = unique_name()
    namespace = f"_relu_{package}"
    kernel = built("_ops", package, library=f"{namespace}.py", namespace=namespace)
    make_package(root, package, {}, record=False)
    build_record(package, {"_ops": kernel}).write(root / package / "_kernelpack.json")
    (root / package / "_ops.py").write_text(f"from . import {namespace}\n")
    (root / package / f"{namespace}.py").write_text(
        "import torch\n"
        f"_lib = torch.library.Library({namespace!r}, 'DEF')\n"
        "_lib.define('relu(Tensor x) -> Tensor')\n"
    )
    reg = registry(package)
    assert reg.unavailable_reason("_ops") is None
    assert reg.load("_ops").__name__ == f"{package}._ops"
