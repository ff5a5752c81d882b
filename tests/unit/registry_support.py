"""Tiny kernel packages with hand-written build records, for the runtime's unit tests.

A built kernel's `_C` is a Python module here (the record names `<kernel>/_C.py`), so loading
works without a compiler; tests that need a real dlopen error write a broken `_C*.so`.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from kernelpack_runtime import TorchFacts

TORCH_2141_CU130 = TorchFacts(version="2.14.1+cu130", cuda="13.0")

_counter = itertools.count()

INIT = """\
from kernelpack_runtime import Registry
status, is_available, unavailable_reason, load = Registry(__name__).api()
"""


def unique_name(stem: str = "kp_pkg") -> str:
    """A package name no other test uses (imports and load outcomes are process-wide)."""
    return f"{stem}_{next(_counter)}_{id(_counter) % 9973}"


def built(
    name: str,
    package: str,
    *,
    abi: str = "torch",
    archs: tuple[str, ...] = ("9.0a",),
    ptx: bool = False,
    stable_target: str | None = None,
    library: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A built kernel's record entry."""
    return {
        "status": "built",
        "abi": abi,
        "stable_target": stable_target if abi != "stable" else (stable_target or "2.10"),
        "archs": list(archs),
        "ptx": ptx,
        "library": library or f"{name}/_C.py",
        "sources_sha256": "00" * 32,
        "namespace": namespace or f"{package}_{name}",
    }


def skipped(code: str, message: str) -> dict[str, Any]:
    """A skipped kernel's record entry."""
    return {"status": "skipped", "reason": {"code": code, "message": message}}


def toolchain(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "nvcc": "13.0.88",
        "cuda": "13.0",
        "torch": "2.14.1",
        "torch_cuda": "13.0",
        "cxx11_abi": True,
        "python": "3.11",
        "machine": "x86_64",
    }
    data.update(overrides)
    return data


def make_package(
    root: Path,
    package: str,
    kernels: dict[str, dict[str, Any]],
    *,
    tool: dict[str, Any] | None = None,
    kernel_init: str = "from . import _C\n",
    c_module: str = "OPS = ['noop']\n",
    record: bool = True,
) -> Path:
    """Write `root/package` with its build record and one folder per built kernel."""
    folder = root / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(INIT)
    if record:
        data = {
            "schema": 1,
            "package": package,
            "version": "0.1.0+cu130torch2.14.1",
            "toolchain": tool or toolchain(),
            "kernels": kernels,
        }
        (folder / "_kernelpack.json").write_text(json.dumps(data, indent=2))
    for name, entry in kernels.items():
        if entry["status"] != "built":
            continue
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(kernel_init)
        if str(entry["library"]).endswith(".py"):
            (folder / entry["library"]).write_text(c_module)
    return folder
