"""Importing a kernel module: the `load-failed` and `namespace-collision` checks.

Whether a `.so` loads is only known by loading it, so a kernel that passes every other check is
imported (which dlopens its `_C`; no CUDA context is created). The outcome is cached for the
process, shared by every registry: a module is imported at most once, and a failure is not
retried into a different, misleading error.

Before anything is opened, the file checked is the one Python's import system would load for
the recorded library's module (`rmsnorm/_C.abi3.so` is `<pkg>.rmsnorm._C`; extension suffixes
in `importlib.machinery.EXTENSION_SUFFIXES` order, so a stale `_C.cpython-311-….so` beside the
recorded `_C.abi3.so` is the one looked at). It must
be the recorded library, a regular file, inside the package, and a whole ELF file: dlopen of a
truncated library dies of SIGBUS rather than failing.

A C++ `TORCH_LIBRARY` that meets a namespace already registered throws from a static
initialiser while the `.so` is being opened, which aborts the process rather than raising. So
the namespaces are checked *before* the import: the recorded one, and every one the library's
symbols say it registers (kernel-builder's stock `registration.h` registers in
`TORCH_EXTENSION_NAME`, `_C`); ops already present there belong to another library. After the
import, the recorded namespace must hold ops the import registered; otherwise the kernel is
`load-failed`, naming where its ops went.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kernelpack_runtime import _elf
from kernelpack_runtime._paths import inside
from kernelpack_runtime.reason import Reason

__all__ = [
    "Library",
    "demangle",
    "import_kernel",
    "library_module",
    "library_problem",
    "ops_in_namespace",
]

_locks_lock = threading.Lock()
_locks: dict[str, threading.RLock] = {}
_outcomes: dict[str, ModuleType | Reason] = {}

_MANGLED = re.compile(r"\b_Z[A-Za-z0-9_$.]+")
_COLLISIONS = (
    "Only a single TORCH_LIBRARY can be used to register the namespace",
    "with the same name and overload name multiple times",
    "already has a fake impl registered",
    "already has an implementation for this device type",
)


def _all_ops() -> frozenset[str]:
    import torch

    return frozenset(torch._C._dispatch_get_all_op_names())


def ops_in_namespace(namespace: str) -> list[str]:
    """The ops (`ns::name`) torch's dispatcher already knows in `namespace`."""
    prefix = f"{namespace}::"
    return sorted(op for op in _all_ops() if op.startswith(prefix))


def _registered_at(op: str) -> str | None:
    """Where `op` was registered (the source file torch recorded), if torch says."""
    import torch

    try:
        dump = str(torch._C._dispatch_dump(op))
    except (AttributeError, RuntimeError):
        return None
    match = re.search(r"registered at (\S+)", dump)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Library:
    """The library a kernel's import would load, and what its headers say."""

    module: str
    """Its import name: `llm_ops.rmsnorm._C` for `rmsnorm/_C.abi3.so`."""
    path: Path
    extension: bool
    """A native extension module (else a Python module standing in for one, as in tests)."""
    namespaces: tuple[str, ...] = ()
    """The op namespaces its static initialisers register (from its symbols)."""


def library_module(package: str, recorded: str) -> str:
    """The import name of the recorded library `recorded` (relative to package `package`)."""
    *folders, name = recorded.split("/")
    return ".".join([package, *folders, name.partition(".")[0]])


def _find(module: str, folder: Path) -> Path | None:
    """The file `import <module>` would load, found without importing its parent (which
    lives in `folder`): the import system's own finders, in their order."""
    parent = sys.modules.get(module.rpartition(".")[0])
    locations = [str(p) for p in getattr(parent, "__path__", None) or []]
    if not locations:
        if not folder.is_dir():
            return None
        locations = [str(folder)]
    spec = importlib.machinery.PathFinder.find_spec(module, locations)
    if spec is None or not spec.origin or not spec.has_location:
        return None
    return Path(spec.origin)


def library_problem(
    package: str, *, package_dir: Path, recorded: str
) -> tuple[Library | None, str | None]:
    """The library Python would load for the recorded one, or why it must not be opened.

    `recorded` is the build record's `library` (relative to `package_dir`), whose module is
    `library_module(package, recorded)`. Nothing here executes or maps the file: it is found
    through the import system's finders, then `stat`ed and, for an extension, its ELF
    headers read.
    """
    expected = package_dir / recorded
    module = library_module(package, recorded)
    try:
        picked = _find(module, expected.parent)
    except (ImportError, OSError, ValueError) as exc:
        return None, f"{module} cannot be looked up: {exc}"
    if picked is None:  # the finders skip what is not a regular file
        if os.path.lexists(expected):
            return None, f"{expected} is not a regular file (import cannot load it)"
        return None, f"{expected} is missing (the build record lists it)"
    if not inside(picked, package_dir):
        return None, f"{picked} leads outside the package ({os.path.realpath(picked)})"
    try:
        info = os.stat(picked)
    except OSError as exc:
        return None, f"{picked} cannot be read: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{picked} is not a regular file"
    extension = picked.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    elf = None
    if extension:
        try:
            elf = _elf.inspect_library(picked)
        except OSError as exc:
            return None, f"{picked} cannot be read: {exc.strerror or exc}"
        if elf is not None and elf.problem is not None:
            return None, f"{picked} {elf.problem}"
    if os.path.realpath(picked) != os.path.realpath(expected):
        return None, (
            f"Python would import {picked}, not the recorded {expected} (a library left from "
            "another build?); remove it"
        )
    namespaces = elf.namespaces if elf else ()
    return Library(module, picked, extension=extension, namespaces=namespaces), None


def demangle(text: str) -> str:
    """`text` with its mangled C++ symbols demangled by `c++filt` (unchanged without it)."""
    symbols = sorted(set(_MANGLED.findall(text)), key=len, reverse=True)
    if not symbols:
        return text
    import shutil
    import subprocess

    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return text
    try:
        result = subprocess.run(
            [cxxfilt],
            input="\n".join(symbols) + "\n",
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return text
    for symbol, plain in zip(symbols, result.stdout.splitlines(), strict=False):
        if plain and plain != symbol:
            text = text.replace(symbol, plain)
    return text


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}" if not isinstance(error, ImportError) else str(error)
    return " ".join(text.split())


def _shown(ops: list[str]) -> str:
    return ", ".join(ops[:3]) + (", …" if len(ops) > 3 else "")


def _collision(namespace: str, ops: list[str], recorded: str | None) -> Reason:
    where = _registered_at(ops[0])
    by = f" (registered at {where})" if where else ""
    fix = (
        "set another ops namespace for this kernel in kernels.toml"
        if namespace == recorded
        else f"register this kernel's ops in its own namespace (torch.ops.{recorded}) instead"
        if recorded
        else "give this kernel its own ops namespace"
    )
    return Reason(
        "namespace-collision",
        f"torch.ops.{namespace} already holds {_shown(ops)} from another library{by}; "
        f"uninstall it or {fix}",
    )


def import_kernel(
    module: str,
    *,
    library: Library | None,
    namespace: str | None,
    shared: bool,
    hint: str,
) -> ModuleType | Reason:
    """Import kernel module `module` (and its library's module), or say why it cannot be.

    `library` is what `library_problem` found; `namespace` the recorded op namespace;
    `shared` says a sibling kernel that shares it is loaded already (its ops are no
    collision). `hint` ("built for …, running …") ends a `load-failed` message.
    """
    with _locks_lock:
        lock = _locks.setdefault(module, threading.RLock())
    with lock:  # one lock per module: loading one kernel never waits for another
        outcome = _outcomes.get(module)
        if outcome is None:
            outcome = _outcomes[module] = _import(module, library, namespace, shared, hint)
        return outcome


def _import(
    module: str, library: Library | None, namespace: str | None, shared: bool, hint: str
) -> ModuleType | Reason:
    loaded = sys.modules.get(module)
    if loaded is not None and (library is None or library.module in sys.modules):
        return loaded
    checked = [] if shared or not namespace else [namespace]
    for other in library.namespaces if library is not None else ():
        if other not in checked and not (shared and other == namespace):
            checked.append(other)
    watch = bool(namespace) or bool(checked)
    try:
        before = _all_ops() if watch else frozenset()  # imports torch, which may itself fail
        for name in checked:
            prefix = f"{name}::"
            taken = sorted(op for op in before if op.startswith(prefix))
            if taken:
                return _collision(name, taken, namespace)
        imported = importlib.import_module(module)
        if library is not None:  # a kernel folder need not import its library itself
            importlib.import_module(library.module)
        after = _all_ops() if watch else frozenset()
    except Exception as exc:
        message = _one_line(exc)
        if any(marker in message for marker in _COLLISIONS):
            return Reason("namespace-collision", f"{message}; give this kernel its own namespace")
        return Reason("load-failed", f"{demangle(message)}; {hint}")
    if namespace and not shared:
        problem = _unregistered(namespace, sorted(after - before))
        if problem is not None:
            return Reason("load-failed", f"{module}: {problem}; {hint}")
    return imported


def _unregistered(namespace: str, new: list[str]) -> str | None:
    """Why the ops the import registered (`new`) do not put `namespace` in use, or None."""
    if any(op.startswith(f"{namespace}::") for op in new):
        return None
    elsewhere = sorted({op.partition("::")[0] for op in new})
    if not elsewhere:
        return f"its library registered no op (the build record names torch.ops.{namespace})"
    where = ", ".join(f"torch.ops.{ns}" for ns in elsewhere)
    return (
        f"its library registered its ops in {where} ({_shown(new)}), not in torch.ops."
        f"{namespace}, the namespace the build record names; register them with "
        "KP_LIBRARY / KP_STABLE_LIBRARY (namespace KERNELPACK_NAMESPACE) or set ops in kernels.toml"
    )
