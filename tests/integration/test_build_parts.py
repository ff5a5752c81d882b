"""Parts of the build engine that need no nvcc: the lock, ops.h, flag values, module init."""

from __future__ import annotations

import json
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
from kernelpack.builder.install import (
    LIBRARY_TEMP,
    install_file,
    install_library,
    library_problem,
    remove_stale_temps,
)
from kernelpack.builder.lock import build_lock
from kernelpack.errors import BuildError
from kernelpack.processes import TOKEN_VARIABLE

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
    # Well under the 5 s the lock would wait for a live holder; not the instant it takes on
    # an idle machine (a loaded CI machine can take seconds to schedule this process again).
    assert time.monotonic() - started < 4


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
        # the earlier name of the define, still there for kernels that use it
        (
            "KP_CALL2_(TORCH_LIBRARY_FRAGMENT, KERNELPACK_NS, m)",
            "TORCH_LIBRARY_FRAGMENT_init_mypkg_myk_",
        ),
        ("KP_STRINGIFY(KERNELPACK_NS)", '"mypkg_myk"'),
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
        ["c++", "-E", "-P", "-DKERNELPACK_NAMESPACE=mypkg_myk", f"-I{INCLUDE_DIR}", str(source)],
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
    assert "KERNELPACK_NAMESPACE is not defined" in proc.stderr


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


# --- staged libraries, stale temporary files, the lock's guard -----------------------------


@pytest.fixture(scope="module")
def shared_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real shared library from the host C compiler."""
    folder = tmp_path_factory.mktemp("so")
    source = folder / "x.c"
    source.write_text("int kp_answer(void) { return 42; }\nchar kp_blob[65536] = {1};\n")
    library = folder / "_C.abi3.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_whole_shared_library_passes_the_check(shared_library: Path) -> None:
    assert library_problem(shared_library) is None


@pytest.mark.parametrize("keep", [0, 16, 60, 64, 1000, 0.5, -1])
def test_truncated_library_is_reported_and_never_installed(
    shared_library: Path, tmp_path: Path, keep: float
) -> None:
    data = shared_library.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    staged = tmp_path / "staged" / "_C.abi3.so"
    staged.parent.mkdir()
    staged.write_bytes(data[:cut])
    installed = tmp_path / "pkg" / "_C.abi3.so"
    installed.parent.mkdir()
    installed.write_bytes(data)
    assert library_problem(staged) is not None
    with pytest.raises(BuildError, match="not installed over"):
        install_library(staged, installed)
    assert installed.read_bytes() == data


def test_library_check_never_opens_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "_C.abi3.so"
    os.mkfifo(fifo)
    assert library_problem(fifo) == "not a regular file"


def test_stale_temp_removal_takes_only_temporary_copies(tmp_path: Path) -> None:
    names = ["._C.abi3.so.k3j9x_2a", "._C.cpython-311-x86_64-linux-gnu.so.0a1b2c3d"]
    kept = ["_C.abi3.so", ".notes.txt", "._C.abi3.so.bak", "._C.abi3.so.TOOLONG99", "x.py"]
    for name in names + kept:
        (tmp_path / name).write_text("x")
    removed = remove_stale_temps(tmp_path, LIBRARY_TEMP)
    assert sorted(p.name for p in removed) == sorted(names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def test_lock_that_is_a_folder_is_a_one_line_build_error(tmp_path: Path) -> None:
    (tmp_path / ".lock" / "inside").mkdir(parents=True)
    with pytest.raises(BuildError) as error, build_lock(tmp_path, 1):
        pass
    assert "\n" not in str(error.value)
    assert str(error.value).startswith(f"{tmp_path / '.lock'}: cannot take the build lock")


def test_build_folder_that_is_a_file_is_a_one_line_build_error(tmp_path: Path) -> None:
    (tmp_path / "build").write_text("not a folder\n")
    with pytest.raises(BuildError) as error, build_lock(tmp_path / "build" / "kernelpack", 1):
        pass
    assert "\n" not in str(error.value)
    assert "cannot make the build folder" in str(error.value)


def test_holder_file_of_any_content_never_breaks_the_lock(tmp_path: Path) -> None:
    for content in (b"\xff\xfe\x00", b"[" * 100_000, b'{"ninja": {"pid": 1, "start": "x"}}'):
        (tmp_path / ".lock.holder").write_bytes(content)
        with build_lock(tmp_path, 1):
            pass


_ORPHAN = """
import os, signal, subprocess, sys, time
# A stand-in for a compile a killed build left behind: it ignores SIGTERM, as some do.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(os.getpid(), flush=True)
time.sleep(60)
"""


def test_next_holder_kills_what_a_killed_build_left_running(tmp_path: Path) -> None:
    token = "0123456789abcdef"
    env = {**os.environ, TOKEN_VARIABLE: token}
    orphan = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN], env=env, stdout=subprocess.PIPE, text=True
    )
    assert orphan.stdout is not None
    assert int(orphan.stdout.readline()) == orphan.pid
    # The record a killed holder leaves: its ninja (gone) and the run's token and session.
    record = {"pid": 999999, "ninja": {"pid": 999999, "start": 1}, "token": token}
    record["session"] = os.getsid(orphan.pid)
    (tmp_path / ".lock.holder").write_text(json.dumps(record))
    started = time.monotonic()
    with build_lock(tmp_path, 1):
        assert orphan.wait(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - started < 5
