"""kernelpack's command lines for a kernel-builder project, held against kernel-builder's own
flag lists: the graph is planned with the real toolchain (nvcc, torch) and read back with
the real ninja (`ninja -t commands`), without compiling.

`KERNEL_BUILDER` is kernel-builder's flag rules written as data, read from its CMake
templates (`kernel-builder/src/pyproject/templates/`): `utils.cmake`
(`get_torch_gpu_compiler_flags`, `define_gpu_extension_target`, `set_gencode_flags_for_srcs`),
`torch/preamble.cmake` (definitions and default capabilities), `kernel.cmake` (the kernel
components' per-source options), `torch/torch-extension.cmake` (`-fno-gnu-unique`).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import ninja
import pytest
from fakes.projects import write_tree

from kernelpack.builder import graph, nodes
from kernelpack.plan import plan_project
from kernelpack.project.locate import locate
from kernelpack.toolchain.detection import detect

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

KERNEL_BUILDER = {
    # get_torch_gpu_compiler_flags: torch's COMMON_NVCC_FLAGS without these (CUDA >= 11.8) ...
    "nvcc_removed": (
        "-D__CUDA_NO_HALF_OPERATORS__",
        "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__",
    ),
    # ... plus these
    "nvcc_added": ("-DENABLE_FP8", "--expt-relaxed-constexpr"),
    # preamble.cmake add_compile_definitions for CUDA; define_gpu_extension_target
    "cuda_definitions": ("-DUSE_CUDA=1", "-DCUDA_KERNEL=1"),
    "cpu_definitions": ("-DCPU_KERNEL=1",),
    # torch-extension.cmake: C++ sources only (its GPU_LANGUAGE generator expression never
    # matches a CUDA source)
    "cxx_only": ("-fno-gnu-unique",),
    # define_gpu_extension_target: CXX_STANDARD 17 below torch 2.12, else 20
    "cxx_standard": {(2, 11): "-std=c++17", (2, 14): "-std=c++20"},
    # define_gpu_extension_target: target_include_directories(... PRIVATE csrc ...), for
    # every source of the target
    "target_include": "csrc",
    # find_package(Torch): torch's share/cmake/Caffe2/public/cuda.cmake appends these to
    # CMAKE_CUDA_FLAGS, which every CUDA source of the project gets
    "torch_cmake_cuda": (
        "-DONNX_NAMESPACE=onnx_c2",
        "--expt-relaxed-constexpr",
        "--expt-extended-lambda",
    ),
    # (its SUPPRESS_WARNING_FLAGS: one --diag_suppress= per diagnostic, joined by commas)
    "torch_cmake_cudafe": "--diag_suppress=cc_clobber_ignored,"
    "--diag_suppress=field_without_dll_interface,"
    "--diag_suppress=base_class_has_different_dll_interface,"
    "--diag_suppress=dll_interface_conflict_none_assumed,"
    "--diag_suppress=dll_interface_conflict_dllexport_assumed,"
    "--diag_suppress=bad_friend_decl",
}

BUILD_TOML = """\
[general]
name = "two-kernels"
version = 1
license = "Apache-2.0"
backends = ["cuda", "cpu"]

[torch]
src = ["torch-ext/torch_binding.cpp"]
cxx-flags = ["-DTORCH_SIDE"]

[kernel.fast]
backend = "cuda"
depends = ["torch"]
src = ["fast/fast.cu", "fast/fast_host.cpp", "shared/shared.cu"]
include = ["fast/include"]
cuda-capabilities = ["9.0a", "10.0"]
cuda-flags = ["-DFAST_ONLY", "--use_fast_math"]
cxx-flags = ["-DFAST_HOST"]

[kernel.wide]
backend = "cuda"
depends = ["torch"]
src = ["wide/wide.cu", "shared/shared.cu"]

[kernel.host]
backend = "cpu"
depends = ["torch"]
src = ["host/host.cpp"]
cxx-flags = ["-mavx2"]
"""


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Source path (relative to the project) -> its compile command, as ninja runs it."""
    root = tmp_path_factory.mktemp("kb") / "two-kernels"
    write_tree(
        root,
        {
            "build.toml": BUILD_TOML,
            "torch-ext/torch_binding.cpp": "// binding\n",
            "torch-ext/two_kernels/__init__.py": "",
            "fast/fast.cu": "// fast\n",
            "fast/fast_host.cpp": "// host side of fast\n",
            "fast/include/fast.h": "// header\n",
            "wide/wide.cu": "// wide\n",
            "shared/shared.cu": "// listed by fast and by wide\n",
            "csrc/common.h": "// the target's own include folder\n",
            "host/host.cpp": "// cpu\n",
        },
    )
    project = locate(root)
    plan = plan_project(project, environ={}, tools=detect({}))
    build_dir = root / "build"
    build_dir.mkdir()
    kernels = nodes.nodes_of(plan, build_dir, root)
    text = graph.render(
        kernels,
        build_dir=build_dir,
        root=root,
        nvcc=Path("nvcc"),
        cxx="c++",
        cc="cc",
        launcher=None,
        pools=graph.Pools(heavy=1, light=1),
    )
    (build_dir / graph.FILENAME).write_text(text)
    out = subprocess.run(
        [str(Path(ninja.BIN_DIR) / "ninja"), "-C", str(build_dir), "-t", "commands"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found = {}
    for line in out.splitlines():
        words = shlex.split(line)
        if "-c" in words:
            source = words[words.index("-c") + 1]
            if source.startswith("../"):  # the project's sources (not a generated module init)
                found.setdefault(source.removeprefix("../"), []).extend(words)
    return found


def _gencode(words: list[str]) -> list[str]:
    return sorted(w for w in words if w.startswith("-gencode="))


def test_each_cuda_kernel_compiles_for_its_own_capabilities(
    commands: dict[str, list[str]],
) -> None:
    assert _gencode(commands["fast/fast.cu"]) == [
        "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_90a,code=sm_90a",
    ]
    wide = _gencode(commands["wide/wide.cu"])  # no capabilities: kernel-builder's default set
    assert "-gencode=arch=compute_75,code=sm_75" in wide
    assert "-gencode=arch=compute_90,code=sm_90" in wide
    assert "-gencode=arch=compute_90a,code=sm_90a" not in wide


def test_nvcc_gets_kernel_builders_defines_not_buildextensions(
    commands: dict[str, list[str]],
) -> None:
    for source in ("fast/fast.cu", "wide/wide.cu"):
        words = commands[source]
        for flag in KERNEL_BUILDER["nvcc_removed"]:
            assert flag not in words, (source, flag)
        for flag in (*KERNEL_BUILDER["nvcc_added"], *KERNEL_BUILDER["cuda_definitions"]):
            assert flag in words, (source, flag)


def test_cuda_flags_and_includes_reach_only_their_kernels_sources(
    commands: dict[str, list[str]],
) -> None:
    fast, wide = commands["fast/fast.cu"], commands["wide/wide.cu"]
    assert "-DFAST_ONLY" in fast and "--use_fast_math" in fast
    assert "-DFAST_ONLY" not in wide
    assert any(w.endswith("fast/include") for w in fast if w.startswith("-I"))
    assert not any(w.endswith("fast/include") for w in wide if w.startswith("-I"))
    # cuda-flags are for .cu sources; cxx-flags for the kernel's C++ sources only
    host_side = commands["fast/fast_host.cpp"]
    assert "-DFAST_HOST" in host_side and "-DFAST_ONLY" not in host_side
    assert "-DFAST_HOST" not in fast


def test_torch_cxx_flags_reach_the_binding_only(commands: dict[str, list[str]]) -> None:
    # the CUDA and the CPU library each compile the binding (both commands, joined)
    binding = commands["torch-ext/torch_binding.cpp"]
    assert binding.count("-DTORCH_SIDE") == 2
    assert "-DCUDA_KERNEL=1" in binding and "-DCPU_KERNEL=1" in binding
    assert "-DTORCH_SIDE" not in commands["fast/fast_host.cpp"]


def test_cxx_only_flags_and_the_cxx_standard(commands: dict[str, list[str]]) -> None:
    torch_version = detect({}).torch_version
    assert torch_version is not None
    minor = (2, 11) if torch_version.release < (2, 12) else (2, 14)
    standard = KERNEL_BUILDER["cxx_standard"][minor]  # type: ignore[index]
    for source, words in commands.items():
        assert standard in words, source
        for flag in KERNEL_BUILDER["cxx_only"]:
            assert (flag in words) == source.endswith(".cpp"), (source, flag)


def test_cpu_kernels_get_their_own_flags_and_definitions(
    commands: dict[str, list[str]],
) -> None:
    host = commands["host/host.cpp"]
    assert "-mavx2" in host
    assert all(flag in host for flag in KERNEL_BUILDER["cpu_definitions"])
    assert "-DUSE_CUDA=1" not in host
    assert "-mavx2" not in commands["fast/fast_host.cpp"]


def test_nvcc_gets_the_cuda_flags_of_torchs_cmake(commands: dict[str, list[str]]) -> None:
    for source in ("fast/fast.cu", "wide/wide.cu", "shared/shared.cu"):
        words = commands[source]
        for flag in KERNEL_BUILDER["torch_cmake_cuda"]:
            assert flag in words, (source, flag)
        cudafe = words.index(KERNEL_BUILDER["torch_cmake_cudafe"])  # type: ignore[arg-type]
        assert words[cudafe - 1] == "-Xcudafe"
    assert "--expt-extended-lambda" not in commands["fast/fast_host.cpp"]


def test_csrc_is_on_the_include_path_of_every_source(commands: dict[str, list[str]]) -> None:
    target = f"/{KERNEL_BUILDER['target_include']}"
    for source, words in commands.items():
        assert any(w.startswith("-I") and w.endswith(target) for w in words), source


def test_a_source_of_two_kernels_compiles_once_with_both_kernels_settings(
    commands: dict[str, list[str]],
) -> None:
    shared = commands["shared/shared.cu"]
    assert shared.count("-c") == 1
    # the union of fast's capabilities and wide's default set
    assert set(_gencode(shared)) == set(_gencode(commands["fast/fast.cu"])) | set(
        _gencode(commands["wide/wide.cu"])
    )
    assert "-DFAST_ONLY" in shared and "--use_fast_math" in shared
    # include folders are a set property: the last kernel's (wide lists none)
    assert not any(w.endswith("fast/include") for w in shared if w.startswith("-I"))
