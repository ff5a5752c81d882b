"""Stand-ins for native modules that cannot be imported, so a kernel package imports anywhere.

    from kernelpack_runtime.stubs import stub_missing

    missing = stub_missing("llm_ops._native", "triton.language",
                           exports={"llm_ops._native": ["gemm", "Plan"]})

`stub_missing` tries each real import first and stubs only the ones that fail. Unlike a
`MagicMock`, a stub cannot be used by accident: calling anything it provides raises
`MissingNativeError` naming the module and carrying the original import error; `isinstance(x,
stub.Plan)` is False rather than an error; a class may still subclass a stubbed class (the
subclass cannot be instantiated); with `exports` only the declared names exist. A module that is
present but fails to load (a broken or mismatched `.so`) is stubbed too, but never silently: a
`BrokenNativeWarning` carries its real error.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from kernelpack_runtime.errors import MissingNativeError

__all__ = ["BrokenNativeWarning", "is_stub", "stub_missing"]


class BrokenNativeWarning(RuntimeWarning):
    """A native module exists but failed to load; it was stubbed, and this says why."""


class _StubMeta(type):
    """The type of stubbed names: classes, so they subclass and `isinstance` cleanly."""

    __kp_module__: str
    __kp_error__: BaseException | None

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise MissingNativeError(cls.__kp_module__, cls.__kp_error__)

    def __instancecheck__(cls, instance: Any) -> bool:
        return False

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _stub_name(f"{cls.__qualname__}.{name}", cls.__kp_module__, cls.__kp_error__)

    def __repr__(cls) -> str:
        return f"<stub {cls.__kp_module__}.{cls.__qualname__} (native module unavailable)>"


def _stub_name(qualname: str, module: str, error: BaseException | None) -> _StubMeta:
    namespace = {
        "__module__": module,
        "__qualname__": qualname,
        "__kp_module__": module,
        "__kp_error__": error,
        "__doc__": f"Stub of {module}.{qualname}: the native module could not be imported.",
    }
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), namespace)


class _StubModule(types.ModuleType):
    """A module standing in for a native one that failed to import."""

    def __init__(
        self, name: str, error: BaseException | None, exports: Sequence[str] | None
    ) -> None:
        super().__init__(name, f"Stub of {name}: the native module could not be imported.")
        self.__kp_error__ = error
        self.__kp_exports__ = tuple(exports) if exports is not None else None
        self.__kp_names__: dict[str, _StubMeta] = {}
        self.__path__: list[str] = []
        self.__spec__ = importlib.machinery.ModuleSpec(name, _FINDER, is_package=True)
        self.__loader__ = _FINDER
        if exports is not None:
            self.__all__ = list(exports)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        exports = self.__kp_exports__
        if exports is not None and name not in exports:
            shown = ", ".join(exports) or "nothing"
            raise AttributeError(
                f"module {self.__name__!r} is a stub exporting only {shown}; "
                f"{name!r} is not one of them"
            )
        stub = self.__kp_names__.get(name)
        if stub is None:
            stub = self.__kp_names__[name] = _stub_name(name, self.__name__, self.__kp_error__)
        return stub

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__kp_exports__ or ()))

    def __repr__(self) -> str:
        return f"<stub module {self.__name__!r} (native module unavailable)>"


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `a.b.c` below a stubbed `a.b`, so `import a.b.c` works like `a.b.c` attribute use."""

    def __init__(self) -> None:
        self.exports: dict[str, Sequence[str]] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        parent = sys.modules.get(fullname.rpartition(".")[0])
        if not isinstance(parent, _StubModule):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        parent = sys.modules[spec.name.rpartition(".")[0]]
        assert isinstance(parent, _StubModule)
        return _StubModule(spec.name, parent.__kp_error__, self.exports.get(spec.name))

    def exec_module(self, module: types.ModuleType) -> None:
        return None


_FINDER = _StubFinder()
_lock = threading.Lock()


def is_stub(obj: object) -> bool:
    """Whether `obj` is a stub module or a stubbed name."""
    return isinstance(obj, (_StubModule, _StubMeta))


def _install(name: str, error: BaseException | None, exports: Sequence[str] | None) -> None:
    module = _StubModule(name, error, exports)
    sys.modules[name] = module
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None:
        setattr(parent, child, module)


def _missing_itself(error: ImportError, name: str) -> bool:
    """Whether `error` says `name` (or a package above it) does not exist, as opposed to a
    module that exists but failed while loading."""
    if not isinstance(error, ModuleNotFoundError) or error.name is None:
        return False
    return name == error.name or name.startswith(f"{error.name}.")


def stub_missing(*modules: str, exports: Mapping[str, Iterable[str]] | None = None) -> list[str]:
    """Import each of `modules`; stub the ones that fail; return the names stubbed.

    A package above a module that is missing too is stubbed with it (and listed). `exports`
    maps a module name to the only names its stub provides; without an entry, any name
    resolves to a stub. A module found but failing to load warns `BrokenNativeWarning` with
    its real error.
    """
    declared = {name: tuple(names) for name, names in (exports or {}).items()}
    stubbed: list[str] = []
    with _lock:
        _FINDER.exports.update(declared)
        if _FINDER not in sys.meta_path:
            sys.meta_path.append(_FINDER)
        for name in modules:
            parts = name.split(".")
            prefixes = [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
            if any(isinstance(sys.modules.get(prefix), _StubModule) for prefix in prefixes):
                importlib.import_module(name)  # below a stub: made by the finder
                stubbed.append(name)
                continue
            try:
                importlib.import_module(name)
                continue
            except Exception as exc:
                error: BaseException = exc
            if isinstance(error, ImportError) and _missing_itself(error, name):
                missing_from = error.name or name
            else:
                missing_from = name
                warnings.warn(
                    f"native module {name!r} is present but failed to load, so it is stubbed: "
                    f"{type(error).__name__}: {error}",
                    BrokenNativeWarning,
                    stacklevel=2,
                )
            for prefix in prefixes[missing_from.count(".") :]:
                _install(prefix, error, declared.get(prefix))
                if prefix not in stubbed:
                    stubbed.append(prefix)
    return stubbed
