"""Parts of the build engine that need no nvcc: the lock, ops.h, flag values, module init."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.version import Version

from kernelpack.builder import modinit
from kernelpack.builder.flags import INCLUDE_DIR, limited_api_hex, stable_target_hex
from kernelpack.builder.graph import Pools
from kernelpack.builder.install import install_file
from kernelpack.builder.lock import build_lock
from kernelpack.errors import BuildError

_HOLD = """
import sys, time
from pathlib import Path
from kernelpack.builder.lock import build_lock
with build_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(build_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(build_dir)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_timeout_names_the_holder_pid(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    try:
        with pytest.raises(BuildError, match=f"pid {proc.pid}"), build_lock(tmp_path, 0.2):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_dead_holder_never_blocks_the_next_build(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    started = time.monotonic()
    with build_lock(tmp_path, 5):
        pass
    assert time.monotonic() - started < 1


def test_stable_target_hex_matches_torch_target_version() -> None:
    assert stable_target_hex(Version("2.10")) == "0x020a000000000000"


def test_limited_api_hex_for_python_310() -> None:
    assert limited_api_hex((3, 10)) == "0x030a0000"


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("KP_LIBRARY(m)", "TORCH_LIBRARY_FRAGMENT_init_mypkg_myk_"),
        ("KP_LIBRARY_IMPL(CUDA, m)", "TORCH_LIBRARY_IMPL_init_mypkg_myk_CUDA_"),
        ("KP_STABLE_LIBRARY(m)", "STABLE_FRAGMENT_init_mypkg_myk_"),
        ("KP_STABLE_LIBRARY_IMPL(CUDA, m)", "STABLE_IMPL_init_mypkg_myk_CUDA_"),
        ("KP_NAMESPACE_STR", '"mypkg_myk"'),
    ],
)
def test_ops_h_expands_the_namespace_inside_token_pasting(
    tmp_path: Path, macro: str, expected: str
) -> None:
    # Stand-ins with torch's shape: they paste `ns` with ##, as the real macros do.
    source = tmp_path / "x.cpp"
    source.write_text(
        "#define TORCH_LIBRARY_FRAGMENT(ns, m) TORCH_LIBRARY_FRAGMENT_init_##ns##_\n"
        "#define TORCH_LIBRARY_IMPL(ns, k, m) TORCH_LIBRARY_IMPL_init_##ns##_##k##_\n"
        "#define STABLE_TORCH_LIBRARY_FRAGMENT(ns, m) STABLE_FRAGMENT_init_##ns##_\n"
        "#define STABLE_TORCH_LIBRARY_IMPL(ns, k, m) STABLE_IMPL_init_##ns##_##k##_\n"
        f"#include <kernelpack/ops.h>\n{macro}\n"
    )
    out = subprocess.run(
        ["c++", "-E", "-P", "-DKERNELPACK_NS=mypkg_myk", f"-I{INCLUDE_DIR}", str(source)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert expected in out.split()


def test_ops_h_without_namespace_is_a_clear_error(tmp_path: Path) -> None:
    source = tmp_path / "x.cpp"
    source.write_text("#include <kernelpack/ops.h>\n")
    proc = subprocess.run(
        ["c++", "-E", f"-I{INCLUDE_DIR}", str(source)], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "KERNELPACK_NS is not defined" in proc.stderr


@pytest.mark.parametrize(
    "text",
    ["PYBIND11_MODULE(_C, m) {}", "PyMODINIT_FUNC PyInit__C(void)", "REGISTER_EXTENSION(_C)"],
)
def test_detects_a_module_init_in_the_sources(tmp_path: Path, text: str) -> None:
    source = tmp_path / "a.cpp"
    source.write_text(f"// x\n{text}\n")
    assert modinit.defines_module_init([source])


def test_no_module_init_when_sources_only_register_ops(tmp_path: Path) -> None:
    source = tmp_path / "a.cu"
    source.write_text('KP_STABLE_LIBRARY(m) { m.def("f(Tensor x) -> Tensor"); }\n')
    assert not modinit.defines_module_init([source])


def test_install_replaces_the_file_atomically_and_skips_an_identical_one(tmp_path: Path) -> None:
    source = tmp_path / "staged.so"
    source.write_bytes(b"new")
    destination = tmp_path / "pkg" / "_C.so"
    assert install_file(source, destination)
    assert destination.read_bytes() == b"new"
    assert not install_file(source, destination)
    assert [p.name for p in destination.parent.iterdir()] == ["_C.so"]


def test_memory_bounds_the_aten_compiles_but_not_the_light_ones() -> None:
    pools = Pools.for_memory(jobs=8, available_bytes=7 * 1024**3)
    assert (pools.heavy, pools.light) == (2, 7)


def test_pools_keep_at_least_one_slot_when_memory_is_short() -> None:
    pools = Pools.for_memory(jobs=4, available_bytes=512 * 1024**2)
    assert (pools.heavy, pools.light) == (1, 1)


def test_pools_never_exceed_the_jobs() -> None:
    pools = Pools.for_memory(jobs=2, available_bytes=64 * 1024**3)
    assert (pools.heavy, pools.light) == (2, 2)
