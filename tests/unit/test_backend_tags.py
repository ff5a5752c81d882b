"""The wheel's platform tag, judged from real shared libraries by auditwheel's policies.

The libraries are compiled here with the host C compiler (a few milliseconds each)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelpack.backend.tags import platform_tag

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

MACHINE = platform.machine()


def _library(folder: Path, name: str, code: str, *link: str) -> Path:
    source = folder / f"{name}.c"
    source.write_text(code)
    output = folder / f"{name}.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", output, source, f"-L{folder}", *link], check=True
    )
    return output


def test_library_needing_only_glibc_is_tagged_manylinux(tmp_path: Path) -> None:
    library = _library(tmp_path, "plain", "#include <string.h>\nint f(char *s){return strlen(s);}")
    tag = platform_tag([library])
    assert re.fullmatch(rf"manylinux_2_\d+_{MACHINE}", tag.name)
    assert tag.warning is None


def test_torch_and_cuda_libraries_do_not_count_as_external(tmp_path: Path) -> None:
    # A stand-in libc10.so: the kernel links it, torch's wheel provides it at run time.
    _library(tmp_path, "libc10", "int c10_answer(void){return 42;}")
    library = _library(
        tmp_path, "kernel", "int c10_answer(void);\nint g(void){return c10_answer();}", "-lc10"
    )
    assert re.fullmatch(rf"manylinux_2_\d+_{MACHINE}", platform_tag([library]).name)


def test_library_linking_what_no_policy_allows_is_linux_with_a_warning(tmp_path: Path) -> None:
    code = "const char *BZ2_bzlibVersion(void);\nconst char *v(void){return BZ2_bzlibVersion();}"
    library = _library(tmp_path, "zipper", code, "-lbz2")  # libbz2: in no policy's list
    tag = platform_tag([library])
    assert tag.name == f"linux_{MACHINE}"
    assert tag.warning is not None
    assert "\n" not in tag.warning
    assert "libbz2.so.1.0" in tag.warning and "PyPI refuses" in tag.warning


def test_wheel_without_libraries_gets_the_lowest_policy() -> None:
    assert re.fullmatch(rf"manylinux_2_\d+_{MACHINE}", platform_tag([]).name)
