"""The build's symbol check (`kernelpack.builder.symbols`) on libraries the real g++ links.

Each library is a few lines of C++ (no torch headers: about a second each); the shim table
is read from the installed torch's own headers where torch is installed, and from a small
header written here otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from kernelpack.builder import symbols
from kernelpack.builder.flags import SHARED_LIBSTDCXX

pytestmark = pytest.mark.integration

# A refusal as STD_TORCH_CHECK builds it: a message that formats a number, then a throw.
REFUSE = """
#include <sstream>
#include <stdexcept>
extern "C" void refuse(long got) {
  std::ostringstream os;
  os << "refuse: top_k must be in [1, 8], got " << got;
  throw std::runtime_error(os.str());
}
"""
SHIM_HEADER = """
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError torch_library_impl(
    TorchLibraryHandle self, const char* name, void (*fn)(void), uint64_t version);
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError
torch_get_cuda_stream_from_pool(int32_t device, void** ret);
#endif // USE_CUDA
#endif // TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_11_0
AOTI_TORCH_EXPORT AOTITorchError torch_from_blob(
    void* data, int64_t ndim);
#endif
#ifdef __cplusplus
}
#endif
"""


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not on PATH")
    return gxx


def _link(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source, encoding="utf-8")
    out = tmp_path / f"{name}.so"
    subprocess.run(
        [_gxx(), "-shared", "-fPIC", "-O1", *flags, str(src), "-o", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture
def shims(tmp_path: Path) -> dict[str, Version]:
    header = tmp_path / "include" / symbols.SHIM_HEADERS[0]
    header.parent.mkdir(parents=True)
    header.write_text(SHIM_HEADER, encoding="utf-8")
    return symbols.shim_versions(tmp_path / "include")


def test_shim_versions_come_from_the_guards(shims: dict[str, Version]) -> None:
    assert shims == {
        "torch_library_impl": Version("2.10"),
        "torch_get_cuda_stream_from_pool": Version("2.10"),
        "torch_from_blob": Version("2.11"),
    }


def test_shim_versions_of_the_installed_torch() -> None:
    torch = pytest.importorskip("torch")
    include = Path(torch.__file__).parent / "include"
    versions = symbols.shim_versions(include)
    assert versions["torch_library_impl"] == Version("2.10")
    assert versions["torch_from_blob"] == Version("2.11")
    assert "aoti_torch_empty_strided" not in versions  # older than every stable target


def test_a_static_libstdcxx_is_refused(tmp_path: Path) -> None:
    static = _link(tmp_path, "static", REFUSE, "-static-libstdc++")
    problem = symbols.check_library(
        static, stable_target=None, torch_version=None, shims={}, shown="kernel 'k'"
    )
    assert problem is not None and "\n" not in problem
    assert problem.startswith("kernel 'k': carries its own copy of libstdc++")
    assert "-static-libstdc++" in problem and "set CXX" in problem


def test_the_link_flags_undo_a_static_libstdcxx(tmp_path: Path) -> None:
    # The wrapper's -static-libstdc++ comes first, kernelpack's flags after the objects:
    # what the GPU machine's CXX did, and what kernelpack's link line now survives.
    fixed = _link(tmp_path, "fixed", REFUSE, "-static-libstdc++", *SHARED_LIBSTDCXX)
    assert "libstdc++.so.6" in symbols.read_symbols(fixed).needed
    assert (
        symbols.check_library(fixed, stable_target=Version("2.10"), torch_version=None, shims={})
        is None
    )


def test_an_unstable_torch_symbol_is_refused(tmp_path: Path) -> None:
    library = _link(
        tmp_path,
        "unstable",
        'namespace c10 { void warn_once(int); }\nextern "C" void f() { c10::warn_once(1); }\n',
    )
    stable = symbols.check_library(
        library, stable_target=Version("2.10"), torch_version=Version("2.14.1"), shims={}
    )
    assert stable is not None and "_ZN3c109warn_onceEi" in stable and "torch 2.14.1" in stable
    assert "\n" not in stable
    # The same library built for the classic ABI: linking torch's C++ is its point.
    assert symbols.check_library(library, stable_target=None, torch_version=None, shims={}) is None


def test_a_shim_newer_than_the_target_is_refused(tmp_path: Path, shims: dict[str, Version]) -> None:
    library = _link(
        tmp_path,
        "newer",
        'extern "C" int torch_from_blob(void*, long);\n'
        'extern "C" int torch_library_impl(void*, const char*, void*, unsigned long);\n'
        'extern "C" int f() { return torch_from_blob(0, 1) + torch_library_impl(0, 0, 0, 0); }\n',
    )
    problem = symbols.check_library(
        library, stable_target=Version("2.10"), torch_version=None, shims=shims
    )
    assert problem is not None
    assert "torch_from_blob" in problem and "torch 2.11" in problem and "2.10" in problem
    assert (
        symbols.check_library(
            library, stable_target=Version("2.11"), torch_version=None, shims=shims
        )
        is None
    )
