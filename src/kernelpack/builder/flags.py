"""Compiler and linker flag sets: one `KernelFlags` per kernel.

torch's include/library paths, its cxx11-ABI choice and its nvcc defaults come from the
toolchain (`Toolchain.torch_extension`, asked of torch's own `torch.utils.cpp_extension` by
`kernelpack.toolchain.torchprobe` and cached there); this module only assembles them.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from kernelpack.errors import BuildError
from kernelpack.plan import KernelPlan, PartPlan
from kernelpack.project.manifest import KernelSpec
from kernelpack.toolchain.detection import Toolchain
from kernelpack.toolchain.torchprobe import TorchExtension

__all__ = [
    "INCLUDE_DIR",
    "KERNEL_BUILDER_DROPPED",
    "KERNEL_BUILDER_TORCH_CMAKE",
    "SHARED_LIBSTDCXX",
    "KernelFlags",
    "kernel_flags",
    "limited_api_hex",
    "shared_libstdcxx",
    "stable_target_hex",
]

#: Folder holding `kernelpack/ops.h`; always on the include path.
INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"

#: Last on every kernel's link line: the shared libstdc++, the one torch's process runs,
#: named before the compiler driver's own `-lstdc++`. A driver that links it statically
#: (`-static-libstdc++`, added by some compiler wrappers) then finds nothing left to take
#: from `libstdc++.a`. A library with its own copy crashes (SIGSEGV, GCC 13) or loses the
#: text of the first `STD_TORCH_CHECK` message that formats a number (GCC 12) instead of
#: raising; `kernelpack.builder.symbols` refuses such a library when a flag still forces it.
#: `-lstdc++` is the fallback: a compiler whose own folder holds only `libstdc++.a` resolves
#: it to the archive, so the file torch's process loaded is named by path when it is known.
SHARED_LIBSTDCXX = ("-Wl,--push-state,-Bdynamic,--no-as-needed", "-lstdc++", "-Wl,--pop-state")


def shared_libstdcxx(loaded: str | None) -> tuple[str, ...]:
    """The link flags that bind a library to the shared libstdc++: the file torch's process
    loaded (`loaded`, as the torch probe saw it), else whatever `-lstdc++` finds."""
    if loaded is None:
        return SHARED_LIBSTDCXX
    return (SHARED_LIBSTDCXX[0], loaded, SHARED_LIBSTDCXX[2])


#: torch's nvcc defines kernel-builder drops for CUDA >= 11.8 (it adds `-DENABLE_FP8`):
#: half and bfloat16 keep their operators and conversions.
KERNEL_BUILDER_DROPPED = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
)

#: The CUDA flags every CMake project that finds torch inherits (`CMAKE_CUDA_FLAGS`, set by
#: torch's `share/cmake/Caffe2/public/cuda.cmake`), so kernel-builder's builds have them:
#: device lambdas in ATen's headers need `--expt-extended-lambda`.
KERNEL_BUILDER_TORCH_CMAKE = (
    "-DONNX_NAMESPACE=onnx_c2",
    "-Xcudafe",
    # nvcc splits an -X value at its commas: one cudafe option per diagnostic
    ",".join(
        f"--diag_suppress={diagnostic}"
        for diagnostic in (
            "cc_clobber_ignored",
            "field_without_dll_interface",
            "base_class_has_different_dll_interface",
            "dll_interface_conflict_none_assumed",
            "dll_interface_conflict_dllexport_assumed",
            "bad_friend_decl",
        )
    ),
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
)


def stable_target_hex(target: Version) -> str:
    """`TORCH_TARGET_VERSION` for a stable target: 2.10 -> `0x020a000000000000`."""
    return f"0x{target.major:02x}{target.minor:02x}{target.micro:02x}0000000000"


def limited_api_hex(python: tuple[int, int]) -> str:
    """`Py_LIMITED_API` for a CPython floor: (3, 10) -> `0x030a0000`."""
    return f"0x{python[0]:02x}{python[1]:02x}0000"


@dataclass(frozen=True)
class KernelFlags:
    """Every flag one kernel's compile and link steps get (everything but in/out paths)."""

    defines: tuple[str, ...]
    """`-D…` for both compilers."""
    include_dirs: tuple[str, ...]
    nvcc: tuple[str, ...]
    """nvcc-only flags: gencode, std, host-compiler switches, manifest `nvcc-flags`."""
    cxx: tuple[str, ...]
    """Host C++ compiler flags: std, PIC, manifest `cxx-flags`."""
    cc: tuple[str, ...]
    """Flags for the generated C module init."""
    ldflags: tuple[str, ...]
    """Library folders and libraries, after the objects on the link line."""
    heavy: bool
    """Compiles include ATen (about 3 GB of memory per nvcc job) rather than headers only."""
    threads: int = 1
    """nvcc threads one compile asks for: one per arch target. The graph writes them as
    `--threads N`, fewer when memory is short (`kernelpack.builder.graph.Pools`)."""


def nvcc_threads(gencode_flags: tuple[str, ...]) -> int:
    """nvcc threads for a kernel with these `-gencode` targets: one each, 1 for a single one.

    The count follows the kernel, not this machine's cores, so the command line (and with it
    ninja's rebuild decision and ccache's key) is the same on every machine that has the
    memory for it; only a machine whose free memory cannot hold one compile with all its
    threads runs fewer (`kernelpack.builder.graph.Pools.for_memory`)."""
    return max(1, len(gencode_flags))


def kernel_flags(
    kernel: KernelPlan,
    toolchain: Toolchain,
    *,
    limited_api: tuple[int, int] = (3, 10),
    part: PartPlan | None = None,
) -> KernelFlags:
    """The flags for one planned kernel, or for one of its parts (its archs, flags and
    include folders instead of the kernel's own); `BuildError` when torch gave no extension
    flags."""
    torch = toolchain.torch_extension
    if torch is None:
        why = toolchain.torch_missing or toolchain.torch_extension_missing or "unknown"
        raise BuildError(f"torch's extension flags are needed to build kernels: {why}")
    spec = kernel.spec
    stable = spec.abi == "stable"
    cpu = spec.backend == "cpu"
    defines = [f"-DKERNELPACK_NAMESPACE={spec.namespace}", f"-DTORCH_EXTENSION_NAME={spec.module}"]
    if stable:
        defines += [f"-DTORCH_TARGET_VERSION={stable_target_hex(spec.stable_target)}"]
        defines += [] if cpu else ["-DUSE_CUDA"]
        defines += [f"-DPy_LIMITED_API={limited_api_hex(limited_api)}"]
    else:
        defines += [
            "-DTORCH_API_INCLUDE_EXTENSION_H",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(bool(toolchain.cxx11_abi))}",
        ]
    defines += [f"-D{name}={value}" for name, value in sorted(spec.defines.items())]

    own_includes = part.part.include_dirs if part is not None else spec.include_dirs
    includes = [str(INCLUDE_DIR)]
    includes += [str(d) for d in own_includes]
    includes += [str(d) for d in kernel.dep_include_dirs]
    includes += list(torch.include_dirs)
    includes += [str(d) for d in toolchain.nvidia_include_dirs]
    includes.append(sysconfig.get_paths()["include"])

    std = f"-std=c++{kernel.cxx_std}"
    gencode = part.gencode_flags if part is not None else kernel.gencode_flags
    kernel_builder = spec.compile_rules == "kernel-builder"
    nvcc = [*gencode, std, "-O3", "-Xcompiler", "-fPIC"]
    if kernel_builder:
        nvcc += [f for f in torch.nvcc_flags if f not in KERNEL_BUILDER_DROPPED]
        nvcc += [f for f in KERNEL_BUILDER_TORCH_CMAKE if f not in nvcc or f == "-Xcudafe"]
        nvcc += ["-DENABLE_FP8"]
    else:
        nvcc += list(torch.nvcc_flags) if not stable else ["--expt-relaxed-constexpr"]
    nvcc += list(part.part.nvcc_flags if part is not None else spec.nvcc_flags)
    cxx = [std, "-O3", "-fPIC"]
    if kernel_builder:
        # kernel-builder: keeps template statics of two loaded extensions apart
        cxx.append("-fno-gnu-unique")
    cxx += list(part.part.cxx_flags if part is not None else spec.cxx_flags)
    cc = ["-O2", "-fPIC"]

    ldflags = _link_flags(spec, toolchain, torch, stable=stable, cpu=cpu)
    return KernelFlags(
        defines=tuple(defines),
        include_dirs=tuple(dict.fromkeys(includes)),
        nvcc=tuple(nvcc),
        cxx=tuple(cxx),
        cc=tuple(cc),
        ldflags=tuple(ldflags),
        heavy=not stable,
        threads=nvcc_threads(gencode),
    )


def _link_flags(
    spec: KernelSpec, toolchain: Toolchain, torch: TorchExtension, *, stable: bool, cpu: bool
) -> list[str]:
    """Library folders and libraries, after the objects on the link line."""
    library_dirs = [*torch.library_dirs, *map(str, toolchain.link_dirs)]
    library_dirs += [
        str(d.parent / "lib") for d in toolchain.nvidia_include_dirs if (d.parent / "lib").is_dir()
    ]
    ldflags = [f"-L{d}" for d in dict.fromkeys(library_dirs)]
    if stable:
        # Only torch's extern "C" shim is used; --as-needed drops the libraries it does not
        # touch, and nothing ties the .so to one torch's C++ symbols.
        libraries = [f"-l{lib}" for lib in _for_backend(torch.stable_libraries, cpu=cpu)]
        ldflags += ["-Wl,--as-needed", *libraries, "-Wl,--no-as-needed"]
    else:
        ldflags += [f"-l{lib}" for lib in _for_backend(torch.libraries, cpu=cpu)]
    ldflags += [f"-l{lib}" for lib in spec.libraries]
    ldflags += list(shared_libstdcxx(torch.libstdcxx))
    return ldflags


def _for_backend(libraries: tuple[str, ...], *, cpu: bool) -> tuple[str, ...]:
    """torch's extension libraries for a backend: a CPU kernel links none of the CUDA ones
    (`cudart`, `c10_cuda`, `torch_cuda`), as `CppExtension` does, so it loads under a
    CPU-only torch too."""
    if not cpu:
        return libraries
    return tuple(lib for lib in libraries if "cuda" not in lib)
