"""What the torch a package builds against says about itself: one probe, one cache.

One `python -c` subprocess asks torch both questions a build has: who it is (version, CUDA,
C++ ABI, folder, the `nvidia-*` wheels' header folders) and how to compile against it (its
extension helpers' include and library folders, libraries and nvcc defaults, from
`torch.utils.cpp_extension`). It never initialises CUDA and never imports torch into the
calling process. For the running interpreter the answer is cached in this machine's kernelpack
cache (`$XDG_CACHE_HOME/kernelpack/torch-<key>.json`), keyed by the interpreter, `PYTHONPATH`,
the modification times of torch's `__init__.py` and `version.py`, the CUDA toolkit and the
probe itself, so that no-op builds and fresh clones need not import torch.

`TorchExtension` is the build-side fact "how to compile against this torch"; the run time's
`kernelpack_runtime.TorchFacts` ("which torch is running") is a different thing.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpack_runtime._files import write_text_atomic

__all__ = ["TorchExtension", "TorchProbe", "cache_dir", "probe"]

_TIMEOUT_S = 120
_MARKER = "KERNELPACK_FACTS="
_CACHE_SCHEMA = 2

# Runs in the interpreter the package is built for. Importing torch does not initialise
# CUDA; `torch.version.cuda` and the ABI flag are compile-time constants. The libraries come
# from torch's own extension factory: a classic extension links torch_python, a
# `py_limited_api` one does not.
_PROBE = f"""
import json, os, sys
facts = {{"python": "%d.%d" % sys.version_info[:2], "nvidia": []}}
try:
    import nvidia
    facts["nvidia"] = [str(p) for p in getattr(nvidia, "__path__", [])]
except Exception:
    pass
try:
    import torch
    facts["torch"] = {{
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "dir": os.path.dirname(os.path.abspath(torch.__file__)),
    }}
except ModuleNotFoundError as exc:
    facts["torch_error"] = "missing" if exc.name == "torch" else f"{{type(exc).__name__}}: {{exc}}"
except BaseException as exc:
    facts["torch_error"] = f"{{type(exc).__name__}}: {{exc}}"
if "torch" in facts:
    try:
        import torch.utils.cpp_extension as ce
        # A CPU-only torch has no CUDA side to ask about (its helpers then want CUDA_HOME).
        if torch.version.cuda:
            device, Extension = "cuda", ce.CUDAExtension
        else:
            device, Extension = "cpu", ce.CppExtension
        facts["extension"] = {{
            "include_dirs": ce.include_paths(device_type=device),
            "library_dirs": [d for d in ce.library_paths(device_type=device) if os.path.isdir(d)],
            "libraries": Extension("_C", []).libraries,
            "stable_libraries": Extension("_C", [], py_limited_api=True).libraries,
            "nvcc_flags": list(ce.COMMON_NVCC_FLAGS),
            "libstdcxx": next(
                (line.split(None, 5)[5].strip() for line in open("/proc/self/maps")
                 if len(line.split(None, 5)) == 6
                 and os.path.basename(line.split(None, 5)[5].strip()).startswith("libstdc++.so")),
                None,
            ) if os.path.exists("/proc/self/maps") else None,
        }}
    except BaseException as exc:
        facts["extension_error"] = f"{{type(exc).__name__}}: {{exc}}"
print("{_MARKER}" + json.dumps(facts))
"""


@dataclass(frozen=True)
class TorchExtension:
    """What torch's own extension helpers say about compiling against it."""

    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]
    """Only the folders that exist."""
    libraries: tuple[str, ...]
    """What `CUDAExtension` links a classic extension against (torch_python included)."""
    stable_libraries: tuple[str, ...]
    """What it links a `py_limited_api` extension against."""
    nvcc_flags: tuple[str, ...]
    """torch's `COMMON_NVCC_FLAGS` (half/bfloat16 operator switches, relaxed constexpr)."""
    libstdcxx: str | None = None
    """The shared libstdc++ file torch's process has loaded (None: not seen)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TorchExtension:
        return cls(
            include_dirs=tuple(str(d) for d in data["include_dirs"]),
            library_dirs=tuple(str(d) for d in data["library_dirs"]),
            libraries=tuple(str(lib) for lib in data["libraries"]),
            stable_libraries=tuple(str(lib) for lib in data["stable_libraries"]),
            nvcc_flags=tuple(str(flag) for flag in data["nvcc_flags"]),
            libstdcxx=str(data["libstdcxx"]) if data.get("libstdcxx") else None,
        )


@dataclass(frozen=True)
class TorchProbe:
    """The probe's answer, as read from the subprocess (strings; the toolchain parses)."""

    python: str | None
    """The interpreter's "3.11"."""
    nvidia_roots: tuple[str, ...]
    """The `nvidia` namespace package's folders (torch's CUDA wheels)."""
    version: str | None = None
    cuda: str | None = None
    cxx11_abi: bool | None = None
    torch_dir: str | None = None
    error: str | None = None
    """Why torch could not be inspected; None when it was."""
    extension: TorchExtension | None = None
    extension_error: str | None = None
    """Why torch's extension helpers gave no answer (e.g. a CPU build without a toolkit)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TorchProbe:
        torch = data.get("torch")
        info = torch if isinstance(torch, dict) else {}
        extension = data.get("extension")
        ext_error = data.get("extension_error")
        parsed_extension: TorchExtension | None = None
        if isinstance(extension, dict):
            try:
                parsed_extension = TorchExtension.from_json(extension)
            except (KeyError, TypeError):
                ext_error = "torch's extension helpers gave an unreadable answer"
        return cls(
            python=str(data["python"]) if data.get("python") else None,
            nvidia_roots=tuple(str(p) for p in data.get("nvidia", []) if isinstance(p, str)),
            version=str(info["version"]) if info.get("version") else None,
            cuda=str(info["cuda"]) if info.get("cuda") else None,
            cxx11_abi=bool(info["cxx11_abi"]) if "cxx11_abi" in info else None,
            torch_dir=str(info["dir"]) if info.get("dir") else None,
            error=None if info else str(data.get("torch_error", "torch could not be inspected")),
            extension=parsed_extension,
            extension_error=None if parsed_extension else (str(ext_error) if ext_error else None),
        )


def probe(
    env: Mapping[str, str], *, cuda_home: Path | None = None, python: str | None = None
) -> TorchProbe:
    """Ask the torch of `python` (default: this interpreter, answered from the cache while
    torch's files are unchanged) who it is and how to compile against it."""
    run_env = dict(env)
    if cuda_home is not None:
        run_env["CUDA_HOME"] = str(cuda_home)
    if python is not None:
        return TorchProbe.from_json(_run(python, run_env))
    path = _cache_path(run_env, cuda_home)
    if path is not None:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cached = None
        if isinstance(cached, dict) and isinstance(cached.get("torch"), dict):
            return TorchProbe.from_json(cached)
    facts = _run(sys.executable, run_env)
    if path is not None and "torch" in facts:
        # An unwritable cache only costs the next build this probe.
        with contextlib.suppress(OSError):
            write_text_atomic(path, json.dumps(facts))
    return TorchProbe.from_json(facts)


def cache_dir(environ: Mapping[str, str]) -> Path:
    """This machine's kernelpack cache: `$XDG_CACHE_HOME/kernelpack` (`~/.cache/kernelpack`).

    It holds facts about installed tools, keyed by what they are derived from, so that
    builds of any project, fresh clones included, need not import torch to learn them."""
    home = environ.get("HOME") or str(Path.home())
    return Path(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")) / "kernelpack"


def _cache_path(env: Mapping[str, str], cuda_home: Path | None) -> Path | None:
    # The probe's sys.path is PYTHONPATH, then this interpreter's own entries.
    extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    spec = importlib.machinery.PathFinder.find_spec("torch", [*extra, *sys.path])
    if spec is None or spec.origin is None:
        return None
    init = Path(spec.origin)
    stamps = [
        f"{file}:{file.stat().st_mtime_ns}"
        for file in (init, init.parent / "version.py")
        if file.is_file()
    ]
    probe_hash = hashlib.sha256(_PROBE.encode()).hexdigest()[:12]
    pythonpath = env.get("PYTHONPATH", "")
    key = json.dumps(
        [_CACHE_SCHEMA, sys.executable, pythonpath, str(cuda_home), probe_hash, *stamps]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_dir(env) / f"torch-{digest}.json"


def _run(python: str, env: dict[str, str]) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE],
            env=env,
            # `-c` puts the working folder first on sys.path: run where no `torch/` can shadow.
            cwd=os.path.dirname(shutil.which(python) or python) or None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"torch_error": f"could not run {python}: {exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARKER):
            facts: dict[str, Any] = json.loads(line[len(_MARKER) :])
            if facts.get("torch_error") == "missing":
                facts["torch_error"] = f"torch is not installed for {python}; pip install torch"
            elif "torch_error" in facts:
                facts["torch_error"] = f"import torch failed: {facts['torch_error']}"
            return facts
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"torch_error": f"import torch crashed {python} (exit {proc.returncode}): {last}"}
