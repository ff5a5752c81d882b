"""The build record `<pkg>/_kernelpack.json`: the contract between build time and run time.

Written by the build (atomically), read by the registry, `kernelpack status`, the pytest
plugin, pins, contracts and the Bazel generator. Nothing re-derives what the build decided.
Kept free of build imports: the runtime reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.reason import Reason

__all__ = [
    "FILENAME",
    "RUNTIME_REQUIREMENT",
    "SCHEMA",
    "BuildRecord",
    "KernelRecord",
    "SelectionRecord",
    "ToolchainRecord",
]

FILENAME = "_kernelpack.json"
SCHEMA = 1

#: The kernelpack-runtime releases that read records of `SCHEMA`: what every kernel wheel
#: requires. Raise the floor to the first release whose reader reads a new `SCHEMA`.
RUNTIME_REQUIREMENT = "kernelpack-runtime>=0.1,<0.2"


@dataclass(frozen=True)
class ToolchainRecord:
    """The toolchain a package was built with."""

    nvcc: str | None
    cuda: str | None
    torch: str | None
    torch_cuda: str | None
    cxx11_abi: bool | None
    python: str
    machine: str

    def to_json(self) -> dict[str, Any]:
        return {
            "nvcc": self.nvcc,
            "cuda": self.cuda,
            "torch": self.torch,
            "torch_cuda": self.torch_cuda,
            "cxx11_abi": self.cxx11_abi,
            "python": self.python,
            "machine": self.machine,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolchainRecord:
        return cls(
            nvcc=data.get("nvcc"),
            cuda=data.get("cuda"),
            torch=data.get("torch"),
            torch_cuda=data.get("torch_cuda"),
            cxx11_abi=data.get("cxx11_abi"),
            python=str(data.get("python", "")),
            machine=str(data.get("machine", "")),
        )


@dataclass(frozen=True)
class KernelRecord:
    """One kernel: built (with what it needs at run time) or skipped (with its reason)."""

    status: str
    """"built" or "skipped"."""
    reason: Reason | None = None
    abi: str | None = None
    stable_target: str | None = None
    archs: tuple[str, ...] = ()
    ptx: bool = False
    library: str | None = None
    """Path of the `.so` relative to the package folder, e.g. `rmsnorm/_C.abi3.so`."""
    sources_sha256: str | None = None
    namespace: str | None = None

    @property
    def built(self) -> bool:
        return self.status == "built"

    def to_json(self) -> dict[str, Any]:
        if not self.built:
            assert self.reason is not None
            data: dict[str, Any] = {"status": self.status, "reason": self.reason.to_json()}
            if self.namespace is not None:
                data["namespace"] = self.namespace
            return data
        return {
            "status": self.status,
            "abi": self.abi,
            "stable_target": self.stable_target,
            "archs": list(self.archs),
            "ptx": self.ptx,
            "library": self.library,
            "sources_sha256": self.sources_sha256,
            "namespace": self.namespace,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelRecord:
        reason = data.get("reason")
        return cls(
            status=str(data["status"]),
            reason=Reason.from_json(reason) if isinstance(reason, dict) else None,
            abi=data.get("abi"),
            stable_target=data.get("stable_target"),
            archs=tuple(data.get("archs", ())),
            ptx=bool(data.get("ptx", False)),
            library=data.get("library"),
            sources_sha256=data.get("sources_sha256"),
            namespace=data.get("namespace"),
        )


@dataclass(frozen=True)
class SelectionRecord:
    """The build-time variables of the field that shaped the build (optional `"selection"`).

    Values as the build saw them, None when unset; `native` lists the compute capabilities
    `KERNELPACK_ARCH=native` found ("9.0").
    """

    max_jobs: int | None = None
    torch_cuda_arch_list: str | None = None
    kernelpack_arch: str | None = None
    native: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "max_jobs": self.max_jobs,
            "torch_cuda_arch_list": self.torch_cuda_arch_list,
            "kernelpack_arch": self.kernelpack_arch,
            "native": list(self.native),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SelectionRecord:
        max_jobs = data.get("max_jobs")
        return cls(
            max_jobs=max_jobs if isinstance(max_jobs, int) else None,
            torch_cuda_arch_list=data.get("torch_cuda_arch_list"),
            kernelpack_arch=data.get("kernelpack_arch"),
            native=tuple(str(c) for c in data.get("native", ())),
        )


@dataclass(frozen=True)
class BuildRecord:
    """The whole `_kernelpack.json`."""

    package: str
    version: str
    toolchain: ToolchainRecord
    kernels: dict[str, KernelRecord] = field(default_factory=dict)
    schema: int = SCHEMA
    selection: SelectionRecord | None = None
    """Present when `MAX_JOBS`, `TORCH_CUDA_ARCH_LIST` or `KERNELPACK_ARCH` was set."""

    def to_json(self) -> dict[str, Any]:
        data = {
            "schema": self.schema,
            "package": self.package,
            "version": self.version,
            "toolchain": self.toolchain.to_json(),
            "kernels": {name: k.to_json() for name, k in self.kernels.items()},
        }
        if self.selection is not None:
            data["selection"] = self.selection.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildRecord:
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"build record schema {schema!r} is not supported (expected {SCHEMA})")
        selection = data.get("selection")
        return cls(
            schema=SCHEMA,
            selection=SelectionRecord.from_json(selection) if isinstance(selection, dict) else None,
            package=str(data["package"]),
            version=str(data["version"]),
            toolchain=ToolchainRecord.from_json(dict(data.get("toolchain", {}))),
            kernels={
                str(name): KernelRecord.from_json(k) for name, k in dict(data["kernels"]).items()
            },
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def read(cls, path: Path) -> BuildRecord:
        """Read a record; `ValueError` when it is not valid JSON or not schema 1."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return cls.from_json(data)

    def write(self, path: Path) -> None:
        """Write atomically: a reader sees the old record or the new one, never half."""
        write_text_atomic(path, self.dumps())
