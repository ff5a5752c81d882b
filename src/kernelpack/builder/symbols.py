"""The symbol check of a linked kernel library: what it imports and what it carries.

Run on every staged library before it is installed (`check_library`); a problem is one line
naming the library, the symbol and what to change. Three rules:

- **Its own libstdc++.** A library that defines libstdc++'s internals (`__cxa_throw`,
  `std::locale::classic()`) was linked with `-static-libstdc++` (some compiler wrappers add
  it). torch's process already runs the shared libstdc++; the second copy's iostreams see
  the first copy's locale, so the first `STD_TORCH_CHECK` / `TORCH_CHECK` message that
  formats a number crashes the process (SIGSEGV, GCC 13) or loses its text (GCC 12) instead
  of raising. Every library, stable or not.
- **Unstable torch C++.** A stable-ABI library imports only torch's `extern "C"` shim: an
  undefined `c10::`, `at::` or `torch::` symbol ties it to the one torch it was built with.
- **A shim newer than the target.** A stable-ABI library of target 2.10 that imports a shim
  function torch declares only for `TORCH_FEATURE_VERSION >= 2.12` fails to load on torch
  2.10 and 2.11. The version of each shim function is read from the building torch's own
  headers (`shim_versions`), so the table is never stale.

`nm -D` and kernel-builder's `check-abi` ask the same questions; this reads `.dynsym` with
pyelftools (already the builder's ELF reader) and needs no binutils.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from packaging.version import Version

__all__ = [
    "SHIM_HEADERS",
    "LibrarySymbols",
    "check_library",
    "read_symbols",
    "shim_versions",
]

#: The C shim headers (below torch's `include` folder) whose declarations a stable library
#: may import, each guarded by the torch version that added it.
SHIM_HEADERS = (
    "torch/csrc/stable/c/shim.h",
    "torch/csrc/inductor/aoti_torch/c/shim.h",
    "torch/csrc/inductor/aoti_torch/c/shim_cpu.h",
)

#: Defined only by libstdc++ itself: a library defining one carries its own copy.
_LIBSTDCXX_OWN = ("__cxa_throw", "_ZNSt6locale7classicEv", "_ZNSt8ios_base4InitC1Ev")
#: A mangled name whose outermost namespace is c10, at or torch (functions, const methods,
#: typeinfo, vtables): `_ZN3c105Error…`, `_ZNK2at10TensorBase…`, `_ZTIN5torch…`.
_UNSTABLE = re.compile(r"^_Z(?:T[ISV])?NK?(?:3c10|2at|5torch)")
_GUARD = re.compile(r"TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_(\d+)")
_DECLARED = re.compile(r"\b((?:aoti_torch|torch)_\w+)\s*\(")


@dataclass(frozen=True)
class LibrarySymbols:
    """What a library's dynamic symbol table and dynamic section say."""

    undefined: frozenset[str]
    defined: frozenset[str]
    needed: tuple[str, ...]


def read_symbols(path: Path) -> LibrarySymbols:
    """The dynamic symbols of the shared library `path` (`OSError`/`ELFError` if unreadable)."""
    undefined: set[str] = set()
    defined: set[str] = set()
    needed: list[str] = []
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags("DT_NEEDED"):
                    needed.append(str(getattr(tag, "needed", "")))
            elif isinstance(section, SymbolTableSection) and section.name == ".dynsym":
                for symbol in section.iter_symbols():
                    if not symbol.name:
                        continue
                    if symbol["st_shndx"] == "SHN_UNDEF":
                        undefined.add(symbol.name)
                    else:
                        defined.add(symbol.name)
    return LibrarySymbols(frozenset(undefined), frozenset(defined), tuple(needed))


def shim_versions(include_dir: Path) -> dict[str, Version]:
    """Shim function -> the torch version whose headers first declare it, read from the
    `#if TORCH_FEATURE_VERSION >= TORCH_VERSION_X_Y_Z` guards around each declaration in
    `SHIM_HEADERS` below `include_dir`. Unguarded declarations (older than the first stable
    release) are left out: every stable target has them."""
    versions: dict[str, Version] = {}
    for name in SHIM_HEADERS:
        try:
            text = (include_dir / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for function, version in _guarded_declarations(text.splitlines()):
            versions.setdefault(function, version)
    return versions


def _guarded_declarations(lines: Iterable[str]) -> Iterable[tuple[str, Version]]:
    stack: list[Version | None] = []  # one entry per open #if: its version guard or None
    pending = False  # inside an AOTI_TORCH_EXPORT declaration whose name is still to come
    for line in lines:
        directive = line.strip()
        if directive.startswith("#"):
            word = directive[1:].strip().split(maxsplit=1)
            keyword = word[0] if word else ""
            if keyword in ("if", "ifdef", "ifndef"):
                guard = _GUARD.search(directive) if keyword == "if" else None
                stack.append(Version(".".join(guard.groups())) if guard else None)
            elif keyword in ("else", "elif") and stack:
                stack[-1] = None  # the other branch of a version guard is no newer
            elif keyword == "endif" and stack:
                stack.pop()
            continue
        if "AOTI_TORCH_EXPORT" in line:
            pending = True
        if not pending:
            continue
        declared = _DECLARED.search(line.split("AOTI_TORCH_EXPORT", 1)[-1])
        if declared is None:
            continue
        pending = False
        guards = [v for v in stack if v is not None]
        if guards:
            yield declared.group(1), max(guards)


def check_library(
    path: Path,
    *,
    stable_target: Version | None,
    torch_version: Version | None,
    shims: Mapping[str, Version],
    shown: str | None = None,
) -> str | None:
    """The one-line problem of the linked library `path` (a stable-ABI one when
    `stable_target` is set), or None when it passes every rule. `shims` is `shim_versions`
    of the building torch; `shown` is how the line names the library."""
    name = shown or str(path)
    try:
        symbols = read_symbols(path)
    except (OSError, ELFError) as exc:
        return f"{name}: cannot read its symbols ({exc})"
    own = sorted(s for s in _LIBSTDCXX_OWN if s in symbols.defined)
    if own:
        return (
            f"{name}: carries its own copy of libstdc++ (defines {_demangle(own[0])}; linked "
            "with -static-libstdc++?): in torch's process a refused input would crash instead "
            "of raising; link with a compiler that uses the shared libstdc++ (set CXX)"
        )
    if stable_target is None:
        return None
    built = f"torch {torch_version}" if torch_version else "the building torch"
    for symbol in sorted(symbols.undefined):
        if _UNSTABLE.match(symbol):
            return (
                f"{name}: the stable-ABI library references {_demangle(symbol)}, a C++ symbol "
                f"of {built} (not part of the stable ABI): use torch/csrc/stable and "
                'torch/headeronly instead of ATen/c10 headers, or abi = "torch"'
            )
    target = Version(f"{stable_target.major}.{stable_target.minor}")
    for symbol in sorted(symbols.undefined):
        introduced = shims.get(symbol)
        if introduced is not None and introduced > target:
            return (
                f"{name}: the stable-ABI library references {symbol}, a shim function of "
                f"torch {introduced.major}.{introduced.minor} and newer, but its stable-target "
                f"is {target}: raise stable-target to {introduced.major}.{introduced.minor} "
                "or stop calling it"
            )
    return None


def _demangle(symbol: str) -> str:
    """`symbol` as c++filt reads it (with the mangled name), or as is without c++filt."""
    if not symbol.startswith("_Z"):
        return symbol
    tool = shutil.which("c++filt")
    if tool is None:
        return symbol
    try:
        out = subprocess.run(
            [tool, symbol], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return symbol
    return f"{out} ({symbol})" if out and out != symbol else symbol
