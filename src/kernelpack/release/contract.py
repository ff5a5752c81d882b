"""The host-side contract of a kernel package, and what changed in it between two builds.

What a caller must pass and may rely on: for each kernel, its exported requirement constants
(public UPPERCASE values such as `MAX_HIDDEN`, `ALIGNMENT`), the signatures of its public
functions, and the schemas of the ops it registers with torch. A change to any of them is
silently wrong numbers or a failed call on the caller's side, not a build error, so a bump
compares the contracts: removals and changes are what callers must absorb; additions are not.

Kernel modules are imported directly (not through the registry's device gate): registering
ops needs no GPU, so a CPU machine with a CUDA torch reads the contract of a CUDA build.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelpack.errors import UsageError
from kernelpack.project.locate import locate_package
from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.record import BuildRecord, SkippedKernel
from kernelpack_runtime.registry import registry_for

__all__ = [
    "SCHEMA",
    "Change",
    "Contract",
    "KernelContract",
    "collect",
    "compare",
    "resolve_package",
]

SCHEMA = 1

#: Item kinds of a kernel's contract, in report order.
_KINDS = ("namespace", "constant", "function", "op")


@dataclass(frozen=True)
class KernelContract:
    """One kernel's contract; `error` says why it could not be read (then it is empty)."""

    namespace: str | None = None
    constants: dict[str, Any] = field(default_factory=dict)
    """Name -> JSON value (tuples as lists, other leaves such as dtypes as their str())."""
    functions: dict[str, str] = field(default_factory=dict)
    """Name -> `inspect.signature` text."""
    ops: dict[str, str] = field(default_factory=dict)
    """`name` or `name.overload` -> schema without the namespace (`forward(Tensor x) -> Tensor`)."""
    error: str | None = None

    def items(self, kind: str) -> dict[str, Any]:
        """The items of one kind (`namespace` has a single item named after the kind)."""
        if kind == "namespace":
            return {} if self.namespace is None else {"namespace": self.namespace}
        table: dict[str, Any] = {
            "constant": self.constants,
            "function": self.functions,
            "op": self.ops,
        }[kind]
        return table

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "namespace": self.namespace,
            "constants": self.constants,
            "functions": self.functions,
            "ops": self.ops,
        }
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelContract:
        return cls(
            namespace=data.get("namespace"),
            constants=dict(data.get("constants", {})),
            functions={str(k): str(v) for k, v in dict(data.get("functions", {})).items()},
            ops={str(k): str(v) for k, v in dict(data.get("ops", {})).items()},
            error=data.get("error"),
        )


@dataclass(frozen=True)
class Contract:
    """A package's contract: `<kernel> -> KernelContract`, with the build's version."""

    package: str
    version: str
    kernels: dict[str, KernelContract]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "package": self.package,
            "version": self.version,
            "kernels": {name: k.to_json() for name, k in self.kernels.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Contract:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"contract schema {data.get('schema')!r} is not {SCHEMA}")
        kernels = dict(data["kernels"])
        return cls(
            package=str(data["package"]),
            version=str(data.get("version", "")),
            kernels={str(n): KernelContract.from_json(k) for n, k in kernels.items()},
        )

    @classmethod
    def read(cls, path: Path) -> Contract:
        """Read a contract file; `UsageError` (one line) when it is not one."""
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise UsageError(f"{path}: does not exist") from None
        except RecursionError:
            raise UsageError(f"{path}: not a kernelpack contract (nests too deeply)") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{path}: not a kernelpack contract ({exc})") from None

    def write(self, path: Path) -> None:
        """Write as indented JSON with sorted keys (diffs stay readable), atomically."""
        text = json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"
        write_text_atomic(path, text)


def resolve_package(text: str) -> str:
    """The import name PKG names (see `kernelpack.project.locate.locate_package`)."""
    return locate_package(text)


def _record(package: str) -> BuildRecord:
    registry = registry_for(package)
    if registry.location is None:
        raise UsageError(f"{package}: no such package for {sys.executable}")
    record = registry.record
    if record is None:
        raise UsageError(registry.record_problem or f"{package}: no build record")
    return record


def collect(package: str) -> Contract:
    """Import every built kernel of `package` and read its contract.

    A kernel the build skipped, or whose module fails to import, gets an `error` instead.
    """
    record = _record(package)
    kernels = {}
    for name, entry in record.kernels.items():
        if isinstance(entry, SkippedKernel):
            why = entry.reason.message
            kernels[name] = KernelContract(namespace=entry.namespace, error=f"not built: {why}")
            continue
        try:
            module = importlib.import_module(f"{package}.{name}")
        except Exception as exc:
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            kernels[name] = KernelContract(namespace=entry.namespace, error=message)
            continue
        kernels[name] = KernelContract(
            namespace=entry.namespace,
            constants=_constants(module),
            functions=_functions(module),
            ops=_ops(entry.namespace) if entry.namespace else {},
        )
    return Contract(package=record.package, version=record.version, kernels=kernels)


def _public(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in vars(module) if not name.startswith("_")]
    return sorted(str(name) for name in names)


def _constants(module: ModuleType) -> dict[str, Any]:
    found = {}
    for name in _public(module):
        value = getattr(module, name, None)
        if name.isupper() and isinstance(value, (bool, int, float, str, tuple, frozenset)):
            found[name] = _json_value(value)
    return found


def _json_value(value: object) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(_json_value(item) for item in value)
    return str(value)  # e.g. torch.float32: its name is what a caller compares against


class _Annotation:
    """An annotation written as a string (PEP 563), shown without quotes."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature(function: Any) -> str:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return "(...)"

    def plain(annotation: Any) -> Any:
        return _Annotation(annotation) if isinstance(annotation, str) else annotation

    parameters = [p.replace(annotation=plain(p.annotation)) for p in signature.parameters.values()]
    shown = signature.replace(
        parameters=parameters, return_annotation=plain(signature.return_annotation)
    )
    return str(shown)


def _functions(module: ModuleType) -> dict[str, str]:
    listed = hasattr(module, "__all__")
    found = {}
    for name in _public(module):
        value = getattr(module, name, None)
        if not inspect.isfunction(value):
            continue
        own = value.__module__ == module.__name__ or value.__module__.startswith(
            module.__name__ + "."
        )
        if listed or own:
            found[name] = _signature(value)
    return found


def _ops(namespace: str) -> dict[str, str]:
    import torch

    from kernelpack_runtime.loader import ops_in_namespace

    found = {}
    prefix = f"{namespace}::"
    for qualified in ops_in_namespace(namespace):
        op = qualified.removeprefix(prefix)
        base, _, overload = op.partition(".")
        packet = getattr(getattr(torch.ops, namespace), base)
        schema = str(getattr(packet, overload or "default")._schema)
        found[op] = schema.removeprefix(prefix)
    return found


@dataclass(frozen=True)
class Change:
    """One difference between two contracts."""

    kernel: str
    kind: str
    """`kernel`, `namespace`, `constant`, `function` or `op`."""
    name: str
    change: str
    """`added`, `removed` or `changed`."""
    old: Any = None
    new: Any = None

    @property
    def breaking(self) -> bool:
        """Whether callers must absorb it: everything but an addition."""
        return self.change != "added"

    def __str__(self) -> str:
        where = (
            self.kernel if self.kind in ("kernel", "namespace") else f"{self.kernel}.{self.name}"
        )
        head = f"{self.change} {self.kind} {where}"
        if self.change == "changed":
            return f"{head}: was {_show(self.old)}; now {_show(self.new)}"
        shown = self.new if self.change == "added" else self.old
        return head if shown is None else f"{head}: {_show(shown)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "kind": self.kind,
            "name": self.name,
            "change": self.change,
            "old": self.old,
            "new": self.new,
            "breaking": self.breaking,
        }


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def compare(old: Contract, new: Contract) -> list[Change]:
    """Every added, removed and changed item from `old` to `new`, kernel by kernel."""
    changes: list[Change] = []
    for kernel in sorted(old.kernels.keys() | new.kernels.keys()):
        before, after = old.kernels.get(kernel), new.kernels.get(kernel)
        if before is None or after is None:
            change = "added" if before is None else "removed"
            changes.append(Change(kernel, "kernel", kernel, change))
            continue
        if after.error is not None and before.error is None:
            changes.append(Change(kernel, "kernel", kernel, "changed", "readable", after.error))
            continue
        if before.error is not None:
            continue  # nothing to compare against
        for kind in _KINDS:
            changes += _diff(kernel, kind, before.items(kind), after.items(kind))
    return changes


def _diff(kernel: str, kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    found = []
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            found.append(Change(kernel, kind, name, "removed", old=old[name]))
        elif name not in old:
            found.append(Change(kernel, kind, name, "added", new=new[name]))
        elif old[name] != new[name]:
            found.append(Change(kernel, kind, name, "changed", old[name], new[name]))
    return found
