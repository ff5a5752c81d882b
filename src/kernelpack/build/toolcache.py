"""A cached `toolchain.detect()` for repeated builds of one tree.

Detection imports torch in a subprocess (about 1.5 s), which would dominate a no-op build.
The answer is kept in the build folder, keyed by everything it is derived from that can be
checked without importing torch: the interpreter, the environment variables detection reads,
the torch install (found with `importlib.util.find_spec`, its version file's mtime), the
`nvcc` and launchers on PATH and the resolved nvcc binary. Any change re-detects.
`KERNELPACK_TOOLCHAIN_CACHE=0` turns the cache off.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpack import toolchain
from kernelpack.reason import Reason
from kernelpack.toolchain import Toolchain

__all__ = ["FILENAME", "detect"]

FILENAME = "toolchain.json"

# Variables `toolchain.detect()` reads (directly or through the tools it runs).
_VARIABLES = ("PATH", "CUDA_HOME", "CUDA_PATH", "KERNELPACK_LAUNCHER", "KERNELPACK_JOBS", "CXX")


def detect(environ: Mapping[str, str], cache_dir: Path) -> Toolchain:
    """`toolchain.detect(environ)`, answered from `cache_dir` when nothing it reads changed."""
    if environ.get("KERNELPACK_TOOLCHAIN_CACHE", "1") == "0":
        return toolchain.detect(environ)
    path = cache_dir / FILENAME
    key = _key(environ)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") == key:
            cached = _from_json(data["toolchain"])
            if _stamp(cached.nvcc) == data.get("nvcc_stamp"):
                return cached
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = toolchain.detect(environ)
    if found.nvcc is not None and found.torch_dir is not None:
        payload = {"key": key, "nvcc_stamp": _stamp(found.nvcc), "toolchain": found.to_json()}
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, path)
    return found


def _stamp(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return f"{path}:{stat.st_mtime_ns}:{stat.st_size}"


def _key(environ: Mapping[str, str]) -> str:
    parts: list[Any] = [sys.executable, [environ.get(v) for v in _VARIABLES]]
    spec = importlib.util.find_spec("torch")
    origin = Path(spec.origin) if spec and spec.origin else None
    parts.append(_stamp(origin.parent / "version.py") if origin else None)
    search = environ.get("PATH", "")
    for tool in ("nvcc", "ccache", "sccache"):
        found = shutil.which(tool, path=search)
        parts.append(_stamp(Path(found)) if found else None)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _path(value: Any) -> Path | None:
    return None if value is None else Path(value)


def _version(value: Any) -> Version | None:
    return None if value is None else Version(value)


def _from_json(data: dict[str, Any]) -> Toolchain:
    missing = data.get("nvcc_missing")
    return Toolchain(
        python=str(data["python"]),
        machine=str(data["machine"]),
        nvcc=_path(data["nvcc"]),
        cuda_home=_path(data["cuda_home"]),
        nvcc_version=_version(data["nvcc_version"]),
        nvcc_targets=frozenset(data["nvcc_targets"]),
        torch_version=_version(data["torch"]),
        torch_cuda=_version(data["torch_cuda"]),
        cxx11_abi=data["cxx11_abi"],
        torch_dir=_path(data["torch_dir"]),
        nvidia_include_dirs=tuple(Path(p) for p in data["nvidia_include_dirs"]),
        launcher=_path(data["launcher"]),
        jobs=int(data["jobs"]),
        nvcc_missing=Reason.from_json(missing) if isinstance(missing, dict) else None,
        torch_missing=data.get("torch_missing"),
    )
