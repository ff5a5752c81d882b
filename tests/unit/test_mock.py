"""`kernelpack_runtime.stubs.stub_missing`: the seed's `magic_mock_packages`, made safe."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from registry_support import unique_name

from kernelpack import MissingNativeError
from kernelpack_runtime.stubs import BrokenNativeWarning, is_stub, stub_missing


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def package(root: Path, files: dict[str, str] | None = None) -> str:
    """A real package `root/<name>` with `files` (relative path -> text)."""
    name = unique_name("kp_mockpkg")
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for relative, text in (files or {}).items():
        (root / name / relative).write_text(text)
    return name


def test_only_modules_that_fail_to_import_are_stubbed(root: Path) -> None:
    name = package(root, {"present.py": "VALUE = 1\n"})
    assert stub_missing(f"{name}.present", f"{name}._native", "json") == [f"{name}._native"]
    assert importlib.import_module(f"{name}.present").VALUE == 1
    assert not is_stub(sys.modules["json"])


def test_a_stubbed_module_imports_and_hangs_off_its_package(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    parent = importlib.import_module(name)
    native = importlib.import_module(f"{name}._native")
    assert parent._native is native
    assert is_stub(native)


def test_calling_a_stub_raises_missing_native_error_with_the_original_error(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")
    with pytest.raises(MissingNativeError) as info:
        native.gemm(1, 2)
    assert info.value.module == f"{name}._native"
    assert isinstance(info.value.original, ModuleNotFoundError)
    assert f"native module '{name}._native' is not available: ModuleNotFoundError" in str(
        info.value
    )


def test_missing_native_error_is_an_import_error() -> None:
    assert issubclass(MissingNativeError, ImportError)


def test_without_exports_any_name_resolves_to_the_same_stub(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")
    assert native.anything is native.anything
    assert is_stub(native.Plan.Kind.FAST)


def test_exports_restrict_the_names_a_stub_provides(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native", exports={f"{name}._native": ["gemm", "Plan"]})
    native = importlib.import_module(f"{name}._native")
    assert is_stub(native.gemm)
    with pytest.raises(AttributeError, match="exporting only gemm, Plan; 'gemn' is not one"):
        _ = native.gemn
    assert native.__all__ == ["gemm", "Plan"]


def test_from_import_of_an_exported_name_works(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native", exports={f"{name}._native": ["gemm"]})
    namespace: dict[str, object] = {}
    exec(f"from {name}._native import gemm", namespace)
    assert is_stub(namespace["gemm"])


def test_isinstance_against_a_stubbed_class_is_false(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")
    assert isinstance(object(), native.Plan) is False
    assert isinstance(3, (int, native.Plan)) is True


def test_subclassing_a_stubbed_class_works_but_instances_raise(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")

    class FastPlan(native.Plan):  # type: ignore[misc,name-defined]
        def describe(self) -> str:
            return "fast"

    assert issubclass(FastPlan, native.Plan)
    with pytest.raises(MissingNativeError):
        FastPlan()


def test_stubbed_classes_work_in_annotations(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")
    union = native.Plan | None
    assert native.Plan in union.__args__


def test_dunder_lookups_do_not_invent_attributes(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    native = importlib.import_module(f"{name}._native")
    assert not hasattr(native, "__wrapped__")
    assert not hasattr(native.gemm, "__wrapped__")
    assert not hasattr(native.gemm, "_private")


def test_submodules_of_a_stub_import(root: Path) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    sub = importlib.import_module(f"{name}._native.ops.sub")
    assert is_stub(sub)
    namespace: dict[str, object] = {}
    exec(f"import {name}._native.ops.sub\nfrom {name}._native.ops import sub as s", namespace)
    assert namespace["s"] is sub


def test_a_missing_parent_package_is_stubbed_and_listed() -> None:
    top = unique_name("kp_absent")
    try:
        assert stub_missing(f"{top}.language") == [top, f"{top}.language"]
        assert is_stub(importlib.import_module(f"{top}.language").constexpr)
        assert stub_missing(f"{top}.compiler") == [f"{top}.compiler"]
    finally:
        for name in (top, f"{top}.language", f"{top}.compiler"):
            sys.modules.pop(name, None)


def test_a_present_but_broken_so_is_stubbed_with_its_real_error_and_a_warning(root: Path) -> None:
    name = package(root)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (root / name / f"_native{suffix}").write_bytes(b"corrupt" * 1024)
    with pytest.warns(BrokenNativeWarning, match="present but failed to load.*invalid ELF header"):
        assert stub_missing(f"{name}._native") == [f"{name}._native"]
    native = importlib.import_module(f"{name}._native")
    with pytest.raises(MissingNativeError, match="invalid ELF header"):
        native.gemm()


def test_a_module_raising_while_imported_is_reported_not_hidden(root: Path) -> None:
    name = package(root, {"_native.py": "raise RuntimeError('CUDA driver too old')\n"})
    with pytest.warns(BrokenNativeWarning, match="RuntimeError: CUDA driver too old"):
        assert stub_missing(f"{name}._native") == [f"{name}._native"]


def test_a_missing_dependency_inside_a_present_module_is_reported(root: Path) -> None:
    name = package(root, {"_native.py": "import kp_dependency_that_is_not_there\n"})
    with pytest.warns(BrokenNativeWarning, match="kp_dependency_that_is_not_there"):
        stub_missing(f"{name}._native")


def test_a_missing_module_is_stubbed_quietly(root: Path, recwarn: pytest.WarningsRecorder) -> None:
    name = package(root)
    stub_missing(f"{name}._native")
    assert not [w for w in recwarn if issubclass(w.category, BrokenNativeWarning)]


def test_seed_pattern_inside_the_packages_own_init(root: Path) -> None:
    name = unique_name("kp_mockpkg")
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(
        "from kernelpack_runtime.stubs import stub_missing\n"
        f"missing = stub_missing({name!r} + '.conversion_kernels', {name!r} + '.gemm_kernels')\n"
        "from . import conversion_kernels\n"
    )
    (root / name / "gemm_kernels.py").write_text("def gemm():\n    return 'real'\n")
    module = importlib.import_module(name)
    assert module.missing == [f"{name}.conversion_kernels"]
    assert module.gemm_kernels.gemm() == "real"
    with pytest.raises(MissingNativeError):
        module.conversion_kernels.convert()


def test_broken_module_warning_can_be_made_an_error(root: Path) -> None:
    name = package(root, {"_native.py": "raise RuntimeError('CUDA driver too old')\n"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", BrokenNativeWarning)
        with pytest.raises(BrokenNativeWarning, match="CUDA driver too old"):
            stub_missing(f"{name}._native")
