"""Compiler and linker flag sets: torch's own facts, then one `KernelFlags` per kernel.

torch's include/library paths, its cxx11-ABI choice and its nvcc defaults are asked of torch
itself (`torch.utils.cpp_extension`) once, in a subprocess, and cached on this machine keyed
by the torch install, so no-op builds and fresh clones do not pay for `import torch`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpack.errors import BuildError
from kernelpack.plan import KernelPlan
from kernelpack.toolchain import Toolchain, cache_dir

__all__ = [
    "INCLUDE_DIR",
    "KernelFlags",
    "TorchFacts",
    "kernel_flags",
    "limited_api_hex",
    "stable_target_hex",
]

#: Folder holding `kernelpack/ops.h`; always on the include path.
INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"

# The libraries come from torch's own extension factory: a classic extension links
# torch_python, a `py_limited_api` one does not.
_QUERY = """
import json, torch, torch.utils.cpp_extension as ce
print(json.dumps({
    "include_dirs": ce.include_paths(device_type="cuda"),
    "library_dirs": ce.library_paths(device_type="cuda"),
    "libraries": ce.CUDAExtension("_C", []).libraries,
    "stable_libraries": ce.CUDAExtension("_C", [], py_limited_api=True).libraries,
    "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
    "nvcc_flags": list(ce.COMMON_NVCC_FLAGS),
}))
"""


@dataclass(frozen=True)
class TorchFacts:
    """What torch's own extension helpers say about compiling against it."""

    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]
    libraries: tuple[str, ...]
    """What `CUDAExtension` links a classic extension against (torch_python included)."""
    stable_libraries: tuple[str, ...]
    """What it links a `py_limited_api` extension against."""
    cxx11_abi: bool
    nvcc_flags: tuple[str, ...]
    """torch's `COMMON_NVCC_FLAGS` (half/bfloat16 operator switches, relaxed constexpr)."""

    @classmethod
    def query(cls, toolchain: Toolchain, environ: Mapping[str, str] | None = None) -> TorchFacts:
        """Ask torch (in a subprocess, with CUDA_HOME set to the toolchain's toolkit).

        The answer is cached in this machine's kernelpack cache (`toolchain.cache_dir`),
        keyed by the interpreter, the torch folder and its version file's mtime, the toolkit
        and this query, so builds of other projects and fresh clones do not import torch.
        """
        if toolchain.torch_dir is None:
            raise BuildError(f"torch is needed to build kernels: {toolchain.torch_missing}")
        env = dict(os.environ if environ is None else environ)
        key = _cache_key(toolchain)
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        cache = cache_dir(env) / f"torch-ext-{digest}.json"
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            if data.get("key") == key:
                return cls._from_json(data["facts"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if toolchain.cuda_home is not None:
            env["CUDA_HOME"] = str(toolchain.cuda_home)
        proc = subprocess.run(
            [sys.executable, "-c", _QUERY], capture_output=True, text=True, env=env, check=False
        )
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise BuildError(f"could not ask torch for its extension flags: {last[0]}")
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"key": key, "facts": facts}), encoding="utf-8")
            os.replace(tmp, cache)
        except OSError:
            pass  # an unwritable cache only costs the next build this query
        return cls._from_json(facts)

    @classmethod
    def _from_json(cls, data: dict[str, Any]) -> TorchFacts:
        return cls(
            include_dirs=tuple(data["include_dirs"]),
            library_dirs=tuple(data["library_dirs"]),
            libraries=tuple(data["libraries"]),
            stable_libraries=tuple(data["stable_libraries"]),
            cxx11_abi=bool(data["cxx11_abi"]),
            nvcc_flags=tuple(data["nvcc_flags"]),
        )


def _cache_key(toolchain: Toolchain) -> str:
    assert toolchain.torch_dir is not None
    version_file = toolchain.torch_dir / "version.py"
    mtime = version_file.stat().st_mtime_ns if version_file.exists() else 0
    query = hashlib.sha256(_QUERY.encode()).hexdigest()[:12]
    return f"{sys.executable}|{toolchain.torch_dir}|{mtime}|{toolchain.cuda_home}|{query}"


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


def kernel_flags(
    kernel: KernelPlan,
    toolchain: Toolchain,
    torch: TorchFacts,
    *,
    dep_include_dirs: tuple[Path, ...] = (),
    limited_api: tuple[int, int] = (3, 10),
) -> KernelFlags:
    """The flags for one planned kernel."""
    spec = kernel.spec
    stable = spec.abi == "stable"
    defines = [f"-DKERNELPACK_NS={spec.ops}", "-DTORCH_EXTENSION_NAME=_C"]
    if stable:
        defines += [
            f"-DTORCH_TARGET_VERSION={stable_target_hex(spec.stable_target)}",
            "-DUSE_CUDA",
            f"-DPy_LIMITED_API={limited_api_hex(limited_api)}",
        ]
    else:
        defines += [
            "-DTORCH_API_INCLUDE_EXTENSION_H",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.cxx11_abi)}",
        ]
    defines += [f"-D{name}={value}" for name, value in sorted(spec.defines.items())]

    includes = [str(INCLUDE_DIR)]
    includes += [str(d) for d in spec.include_dirs]
    includes += [str(d) for d in dep_include_dirs]
    includes += list(torch.include_dirs)
    includes += [str(d) for d in toolchain.nvidia_include_dirs]
    includes.append(sysconfig.get_paths()["include"])

    std = f"-std=c++{kernel.cxx_std}"
    nvcc = [*kernel.gencode_flags, std, "-O3", "-Xcompiler", "-fPIC"]
    nvcc += list(torch.nvcc_flags) if not stable else ["--expt-relaxed-constexpr"]
    nvcc += list(spec.nvcc_flags)
    cxx = [std, "-O3", "-fPIC", *spec.cxx_flags]
    cc = ["-O2", "-fPIC"]

    library_dirs = [d for d in torch.library_dirs if Path(d).is_dir()]
    library_dirs += [
        str(d.parent / "lib") for d in toolchain.nvidia_include_dirs if (d.parent / "lib").is_dir()
    ]
    ldflags = [f"-L{d}" for d in dict.fromkeys(library_dirs)]
    if stable:
        # Only torch's extern "C" shim is used; --as-needed drops the libraries it does not
        # touch, and nothing ties the .so to one torch's C++ symbols.
        libraries = [f"-l{lib}" for lib in torch.stable_libraries]
        ldflags += ["-Wl,--as-needed", *libraries, "-Wl,--no-as-needed"]
    else:
        ldflags += [f"-l{lib}" for lib in torch.libraries]
    ldflags += [f"-l{lib}" for lib in spec.libraries]
    return KernelFlags(
        defines=tuple(defines),
        include_dirs=tuple(dict.fromkeys(includes)),
        nvcc=tuple(nvcc),
        cxx=tuple(cxx),
        cc=tuple(cc),
        ldflags=tuple(ldflags),
        heavy=not stable,
    )
