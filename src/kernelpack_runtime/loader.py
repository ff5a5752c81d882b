"""Importing a kernel module: the `load-failed` and `namespace-collision` checks.

Whether a `.so` loads is only known by loading it, so a kernel that passes every other check is
imported (which dlopens its `_C`; no CUDA context is created). The outcome is cached for the
process, shared by every registry: a module is imported at most once, and a failure is not
retried into a different, misleading error.

A C++ `TORCH_LIBRARY` that meets a namespace already registered throws from a static
initialiser while the `.so` is being opened, which aborts the process rather than raising. So
the namespace is checked *before* the import: ops already present in `torch.ops.<ns>` belong to
another library.
"""

from __future__ import annotations

import importlib
import os
import re
import struct
import sys
import threading
from pathlib import Path
from types import ModuleType

from kernelpack_runtime.reason import Reason

__all__ = ["demangle", "elf_problem", "import_kernel", "ops_in_namespace"]

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


def ops_in_namespace(namespace: str) -> list[str]:
    """The ops (`ns::name`) torch's dispatcher already knows in `namespace`."""
    import torch

    prefix = f"{namespace}::"
    return sorted(op for op in torch._C._dispatch_get_all_op_names() if op.startswith(prefix))


def _registered_at(op: str) -> str | None:
    """Where `op` was registered (the source file torch recorded), if torch says."""
    import torch

    try:
        dump = str(torch._C._dispatch_dump(op))
    except (AttributeError, RuntimeError):
        return None
    match = re.search(r"registered at (\S+)", dump)
    return match.group(1) if match else None


_PT_LOAD = 1


def elf_problem(path: Path) -> str | None:
    """Why `path` cannot be a whole ELF library, or None (including when it is no ELF at all:
    dlopen says best what that is).

    Checked before dlopen because a truncated library is not an error there: the loader maps
    pages past the end of the file, and the first touch kills the process with SIGBUS. Reads
    only the headers (the runtime does not depend on pyelftools, a test-time dependency).
    """
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            header = fh.read(64)
            if len(header) < 52 or header[:4] != b"\x7fELF":
                return None
            wide, order = header[4] == 2, "<" if header[5] == 1 else ">"
            if wide:
                phoff, shoff = struct.unpack_from(f"{order}QQ", header, 32)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHH", header, 54)
            else:
                phoff, shoff = struct.unpack_from(f"{order}II", header, 28)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(f"{order}HHHH", header, 42)
            # The section table usually ends the file: any truncation cuts it.
            needed = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError as exc:
        return f"{path} cannot be read: {exc}"
    if len(table) == phentsize * phnum:
        for entry in range(phnum):
            at = entry * phentsize
            if struct.unpack_from(f"{order}I", table, at)[0] != _PT_LOAD:
                continue
            if wide:
                (offset,) = struct.unpack_from(f"{order}Q", table, at + 8)
                (filesz,) = struct.unpack_from(f"{order}Q", table, at + 32)
            else:
                (offset,) = struct.unpack_from(f"{order}I", table, at + 4)
                (filesz,) = struct.unpack_from(f"{order}I", table, at + 16)
            needed = max(needed, offset + filesz)
    if size < needed:
        return f"{path} is truncated ({size} bytes; its ELF headers need {needed})"
    return None


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


def _collision(namespace: str, ops: list[str]) -> Reason:
    shown = ", ".join(ops[:3]) + (", …" if len(ops) > 3 else "")
    where = _registered_at(ops[0])
    by = f" (registered at {where})" if where else ""
    return Reason(
        "namespace-collision",
        f"torch.ops.{namespace} already holds {shown} from another library{by}; uninstall it "
        "or set another ops namespace for this kernel in kernels.toml",
    )


def import_kernel(
    module: str, *, library: Path | None, namespace: str | None, hint: str
) -> ModuleType | Reason:
    """Import kernel module `module`, or say why it cannot be.

    `library` is the `.so` the build record names; `namespace` the op namespace to check for
    foreign ops first (None: no check, e.g. when a sibling kernel sharing it is loaded).
    `hint` ("built for …, running …") ends a `load-failed` message.
    """
    with _locks_lock:
        lock = _locks.setdefault(module, threading.RLock())
    with lock:  # one lock per module: loading one kernel never waits for another
        outcome = _outcomes.get(module)
        if outcome is None:
            outcome = _outcomes[module] = _import(module, library, namespace, hint)
        return outcome


def _library_problem(library: Path) -> str | None:
    """Why the recorded library cannot be dlopened safely, found without opening it."""
    if not library.exists():
        return f"{library} is missing (the build record lists it)"
    return elf_problem(library)


def _import(
    module: str, library: Path | None, namespace: str | None, hint: str
) -> ModuleType | Reason:
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    problem = _library_problem(library) if library is not None else None
    if problem is not None:
        return Reason("load-failed", f"{problem}; rebuild or reinstall; {hint}")
    try:
        if namespace:
            ops = ops_in_namespace(namespace)  # imports torch, which may itself fail
            if ops:
                return _collision(namespace, ops)
        return importlib.import_module(module)
    except Exception as exc:
        message = _one_line(exc)
        if any(marker in message for marker in _COLLISIONS):
            return Reason("namespace-collision", f"{message}; give this kernel its own namespace")
        return Reason("load-failed", f"{demangle(message)}; {hint}")
