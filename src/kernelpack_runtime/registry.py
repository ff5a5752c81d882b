"""`Registry`: which kernels of a package are usable here, why the others are not, and loading.

A kernel package wires it into its `__init__.py` in two lines::

    from kernelpack_runtime import Registry
    status, is_available, unavailable_reason, load = Registry(__name__).api()

The registry reads the build record `<pkg>/_kernelpack.json` (never the manifest, never build
code), runs the checks of `kernelpack_runtime.checks` in order, and imports a kernel only once
it has passed them all (see docs/runtime.md). A record that cannot be read or does not
validate makes every kernel it names `record-invalid`; no record content makes the registry
raise, abort or hang. Answers are cached per registry and safe to ask from several threads;
none of them initialises CUDA.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple, NoReturn, Protocol

from kernelpack_runtime import device, torchinfo
from kernelpack_runtime._paths import inside
from kernelpack_runtime.checks import Context, first_reason
from kernelpack_runtime.device import Probe
from kernelpack_runtime.errors import KernelUnavailableError
from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import FILENAME, BuildRecord, BuiltKernel, InvalidRecord
from kernelpack_runtime.torchinfo import TorchReader

if TYPE_CHECKING:
    from kernelpack_runtime.loader import Library

__all__ = [
    "Api",
    "Registry",
    "load_first",
    "log_status",
    "ops_namespace",
    "raise_unavailable",
    "registry_for",
    "status_line",
]


class _StatusFn(Protocol):
    def __call__(self) -> dict[str, str]: ...


class _ReasonFn(Protocol):
    def __call__(self, kernel: str) -> Reason | None: ...


class _AvailableFn(Protocol):
    def __call__(self, kernel: str) -> bool: ...


class _LoadFn(Protocol):
    def __call__(self, kernel: str) -> ModuleType: ...


class Api(NamedTuple):
    """The four functions a kernel package exports, in the order a package unpacks them."""

    status: _StatusFn
    is_available: _AvailableFn
    unavailable_reason: _ReasonFn
    load: _LoadFn


def status_line(reason: Reason | None) -> str:
    """The `status()` value of one kernel: "available" or "<word>: <message>".

    The word is "skipped" for a kernel the build skipped (followed by the build's own
    message), else the reason's code.
    """
    if reason is None:
        return "available"
    if reason.code == "not-built" and reason.cause is not None:
        return f"skipped: {reason.cause.message}"
    return f"{reason.code}: {reason.message}"


class Registry:
    """The run-time view of one kernel package's build record.

    `probe` replaces the NVML device probe and `read_torch` the reading of the running torch
    (both for tests and unusual machines); by default the module-level default probe is used
    (see `kernelpack_runtime.device.set_default_probe`).
    """

    def __init__(
        self,
        package: str,
        *,
        probe: Probe | None = None,
        read_torch: TorchReader | None = None,
    ) -> None:
        self.package = package
        self._probe = probe
        self._read_torch = read_torch or torchinfo.read_torch
        self._lock = threading.RLock()
        # Kernel modules read the record while they are imported (under `_lock`, or in
        # another thread): the record has its own lock, never held across an import.
        self._record_lock = threading.Lock()
        self._record: BuildRecord | None = None
        self._record_problem: str | None = None
        self._invalid: InvalidRecord | None = None
        self._loaded_record = False
        self._context: Context | None = None
        self._reasons: dict[str, Reason | None] = {}
        self._modules: dict[str, ModuleType] = {}
        self._logged = False
        with _registries_lock:
            _registries.setdefault(package, self)

    def __repr__(self) -> str:
        return f"Registry({self.package!r})"

    # -- the build record ---------------------------------------------------------------------

    @property
    def location(self) -> Path | None:
        """The package's folder, found without importing it (or its kernels)."""
        module = sys.modules.get(self.package)
        paths = list(getattr(module, "__path__", None) or [])
        if not paths:
            try:
                spec = importlib.util.find_spec(self.package)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.submodule_search_locations:
                paths = list(spec.submodule_search_locations)
        return Path(paths[0]) if paths else None

    @property
    def record_path(self) -> Path | None:
        location = self.location
        return location / FILENAME if location is not None else None

    @property
    def record(self) -> BuildRecord | None:
        """The build record, or None when there is none or it is invalid (see
        `record_problem`)."""
        with self._record_lock:
            if not self._loaded_record:
                self._record, self._record_problem, self._invalid = self._read_record()
                self._loaded_record = True
            return self._record

    @property
    def record_problem(self) -> str | None:
        """Why there is no usable build record, in words."""
        _ = self.record
        return self._record_problem

    @property
    def record_invalid(self) -> bool:
        """Whether a build record exists but cannot be read or does not validate."""
        _ = self.record
        return self._invalid is not None

    def _read_record(self) -> tuple[BuildRecord | None, str | None, InvalidRecord | None]:
        path = self.record_path
        if path is None:
            return None, f"package {self.package!r} is not installed", None
        missing = (
            f"{self.package} has no build record ({path}); build it with "
            f"`kernelpack build --inplace` or install a built wheel"
        )
        if not os.path.lexists(path):
            return None, missing, None
        location = self.location
        if location is not None and not inside(path, location):
            error = InvalidRecord(f"{path}: leads outside the package ({os.path.realpath(path)})")
            return None, f"{self.package}'s build record is invalid: {error}", error
        try:
            return BuildRecord.read(path), None, None
        except FileNotFoundError:
            return None, missing, None
        except InvalidRecord as exc:
            return None, f"{self.package}'s build record is invalid: {exc}", exc

    def kernels(self) -> tuple[str, ...]:
        """The kernel names the build record lists (none without a record; those it still
        names when it is invalid)."""
        record = self.record
        if record is not None:
            return tuple(record.kernels)
        return self._invalid.kernels if self._invalid is not None else ()

    # -- the answers --------------------------------------------------------------------------

    def unavailable_reason(self, kernel: str) -> Reason | None:
        """None when `kernel` is usable here, else the `Reason` it is not (str() = message).

        Raises `ValueError` for a name the build record does not list.
        """
        with self._lock:
            if kernel not in self._reasons:
                self._reasons[kernel] = self._decide(kernel)
            return self._reasons[kernel]

    def is_available(self, kernel: str) -> bool:
        """`unavailable_reason(kernel) is None`."""
        return self.unavailable_reason(kernel) is None

    def load(self, kernel: str) -> ModuleType:
        """The kernel's module; `KernelUnavailableError` (with `.kernel`, `.reason`) otherwise."""
        reason = self.unavailable_reason(kernel)
        if reason is not None:
            raise KernelUnavailableError(kernel, reason)
        return self._modules[kernel]

    def status(self) -> dict[str, str]:
        """Every kernel -> "available" or "<word>: <message>" (see `status_line`)."""
        return {name: status_line(self.unavailable_reason(name)) for name in self.kernels()}

    def api(self) -> Api:
        """`(status, is_available, unavailable_reason, load)`, bound to this registry."""
        return Api(self.status, self.is_available, self.unavailable_reason, self.load)

    def log_status(self, logger: logging.Logger | None = None) -> None:
        """Log the status once (later calls do nothing): one INFO line for the package."""
        with self._lock:
            if self._logged:
                return
            self._logged = True
        log = logger or logging.getLogger(self.package)
        status = self.status()
        if not status:
            log.warning("%s: no kernels: %s", self.package, self.record_problem)
            return
        usable = sum(value == "available" for value in status.values())
        details = "; ".join(f"{name}: {value}" for name, value in status.items())
        log.info("%s kernels: %d/%d available (%s)", self.package, usable, len(status), details)

    # -- deciding -----------------------------------------------------------------------------

    def _decide(self, kernel: str) -> Reason | None:
        record = self.record
        if record is None:
            problem = self._record_problem or "no build record"
            if self._invalid is None:
                return Reason("not-built", problem)
            if self._invalid.kernels and kernel not in self._invalid.kernels:
                raise ValueError(self._unknown(kernel, self._invalid.kernels))
            return Reason("record-invalid", f"{problem}; rebuild or reinstall the package")
        entry = record.kernels.get(kernel)
        if entry is None:
            raise ValueError(self._unknown(kernel, tuple(record.kernels)))
        if self._context is None:
            self._context = Context(
                record, probe=self._probe or device.default_probe, read_torch=self._read_torch
            )
        reason = first_reason(kernel, entry, self._context)
        if reason is not None or not isinstance(entry, BuiltKernel):
            return reason
        return self._import(kernel, entry, record)

    def capability(self) -> tuple[int, int] | None:
        """The compute capability of the first visible GPU (None: none, or no record)."""
        with self._lock:
            record = self.record
            if record is None:
                return None
            if self._context is None:
                self._context = Context(
                    record, probe=self._probe or device.default_probe, read_torch=self._read_torch
                )
            devices = self._context.device.devices
            return devices[0].capability if devices else None

    def import_library(self, kernel: str) -> Reason | None:
        """Import built `kernel`'s library even where it cannot run (no device, another
        arch), as a package whose import registers its ops does: its library is still
        checked (present, whole, the recorded file and digest, its namespace free) first.
        None when imported; the reason otherwise (`not-built` for a skipped kernel)."""
        with self._lock:
            record = self.record
            entry = record.kernels.get(kernel) if record is not None else None
            if record is None or not isinstance(entry, BuiltKernel):
                return self.unavailable_reason(kernel) or Reason(
                    "not-built", f"{self.package}: {kernel!r} was not built"
                )
            if self._context is None:
                self._context = Context(
                    record, probe=self._probe or device.default_probe, read_torch=self._read_torch
                )
            return self._import(kernel, entry, record)

    def _import(self, kernel: str, entry: BuiltKernel, record: BuildRecord) -> Reason | None:
        if kernel in self._modules:
            return None
        location = self.location
        if location is None:
            return Reason("load-failed", f"package {self.package!r} is not installed")
        # Only a kernel that passed every check is loaded: the loader (and its ELF reader) is
        # imported then, which keeps `import pkg; pkg.status()` light on a GPU-less machine.
        from kernelpack_runtime import loader

        module = f"{self.package}.{kernel}"
        library, trouble = loader.library_problem(
            self.package, package_dir=location, recorded=entry.library
        )
        if trouble is not None:
            return Reason("load-failed", f"{trouble}; rebuild or reinstall; {self._hint()}")
        modified = _modified(library, entry)
        if modified is not None:
            return Reason("library-modified", modified)
        if library is not None and not _has_module(location, kernel):
            # A library with no kernel module of its own (a build.toml project's CPU build,
            # beside `_ops.py`): the kernel's module is the library's.
            module = library.module
        shared = entry.namespace is not None and any(
            other != kernel
            and built.namespace == entry.namespace
            and f"{self.package}.{other}" in sys.modules
            for other, built in record.kernels.items()
        )
        outcome = loader.import_kernel(
            module, library=library, namespace=entry.namespace, shared=shared, hint=self._hint()
        )
        if isinstance(outcome, Reason):
            return outcome
        self._modules[kernel] = outcome
        return None

    def _unknown(self, kernel: str, known: tuple[str, ...]) -> str:
        return (
            f"{self.package} has no kernel {kernel!r} (its kernels: {', '.join(known) or 'none'})"
        )

    def _hint(self) -> str:
        assert self._context is not None
        built = self._context.built_with()
        return f"built for {built}, running torch {self._context.torch.describe()}"


def _has_module(location: Path, kernel: str) -> bool:
    return (location / kernel).is_dir() or (location / f"{kernel}.py").is_file()


def _modified(library: Library | None, entry: BuiltKernel) -> str | None:
    """Why the library about to be opened is not the one the build recorded, or None (also
    when the record has no digest or `KERNELPACK_VERIFY=0`). Only here, right before the
    import, is a library hashed."""
    from kernelpack_runtime import digest

    if library is None or entry.library_sha256 is None or not digest.verification_enabled():
        return None
    return digest.mismatch(library.path, entry.library_sha256)


_registries_lock = threading.Lock()
_registries: dict[str, Registry] = {}


def registry_for(package: str) -> Registry:
    """The first registry made for `package` in this process (the package's own), or a new one."""
    with _registries_lock:
        registry = _registries.get(package)
    return registry if registry is not None else Registry(package)


def log_status(package: str, logger: logging.Logger | None = None) -> None:
    """Log `package`'s kernel status once per process (see `Registry.log_status`)."""
    registry_for(package).log_status(logger)


def ops_namespace(module_name: str) -> str:
    """The torch.ops namespace the build gave kernel module `module_name` ("llm_ops.rmsnorm").

    Kernel modules call it with `__name__`, so no namespace string is ever hard-coded in
    Python; `ImportError` (naming the module and what is wrong) when the record lacks it.
    """
    package, _, kernel = module_name.rpartition(".")
    registry = registry_for(package)
    record = registry.record
    entry = record.kernels.get(kernel) if record is not None else None
    if entry is None or not entry.namespace:
        problem = registry.record_problem or f"the build record has no namespace for {kernel!r}"
        raise ImportError(f"{module_name}: {problem}")
    return entry.namespace


def raise_unavailable(package: str, kernel: str) -> NoReturn:
    """Raise `KernelUnavailableError` for `package`'s `kernel` with the registry's reason.

    The build installs a module that calls this in place of a library it did not build, so
    importing that library says why (e.g. the build's skip reason) rather than failing as a
    missing name of a partially initialised package.
    """
    registry = registry_for(package)
    reason = registry.unavailable_reason(kernel) or Reason(
        "load-failed", f"{package}: the library of {kernel!r} is not installed"
    )
    raise KernelUnavailableError(kernel, reason)


def load_first(package: str, kernels: tuple[str, ...]) -> str:
    """Load the first of `kernels` usable here; return its recorded op namespace.

    For a package with one library per backend (a `build.toml` project's CUDA and CPU
    builds, CUDA first). None usable: the first one built is imported all the same (its ops
    registered, as a kernel-builder package's are on a machine without a GPU); none built, or
    its library unfit to open: `KernelUnavailableError` with the reason.
    """
    registry = registry_for(package)
    record = registry.record
    recorded = record.kernels if record is not None else {}
    for kernel in kernels:
        if registry.is_available(kernel):
            registry.load(kernel)
            return recorded[kernel].namespace or kernel
    built = [k for k in kernels if k in recorded and recorded[k].built]
    if built:
        # Not usable here (no device, another arch): the package still imports and its ops
        # exist, as a kernel-builder package's do; calling one says what torch says.
        reason = registry.import_library(built[0])
        if reason is None:
            return recorded[built[0]].namespace or built[0]
        raise KernelUnavailableError(built[0], reason)
    raise_unavailable(package, kernels[0])
