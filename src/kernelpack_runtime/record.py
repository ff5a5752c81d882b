"""The build record `<pkg>/_kernelpack.json`: the contract between build time and run time.

Written by the build (atomically), read by the registry, `kernelpack status`, the pytest
plugin, pins, contracts and the Bazel generator. Nothing re-derives what the build decided.
Kept free of build imports: the runtime reads it.

The record is untrusted input at run time: `BuildRecord.read` opens only a regular file,
bounds its size and nesting, and checks every field's type through one strict reader that
raises one error type, `InvalidRecord`, naming the key path (`kernels.rmsnorm.library: …`).
Schema 2 is written; schema 1 (no `env_prefix`) is still read.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from kernelpack_runtime._version import __version__
from kernelpack_runtime.arch import Arch, InvalidArch
from kernelpack_runtime.reason import Reason

__all__ = [
    "FILENAME",
    "MAX_BYTES",
    "RUNTIME_REQUIREMENT",
    "SCHEMA",
    "SCHEMAS_READ",
    "BuildRecord",
    "BuiltKernel",
    "CacheRecord",
    "InvalidRecord",
    "KernelRecord",
    "ReleaseRecord",
    "SelectionRecord",
    "SkippedKernel",
    "ToolchainRecord",
    "default_env_prefix",
]

FILENAME = "_kernelpack.json"
SCHEMA = 2
#: Schemas this reader understands (1: before `env_prefix` was recorded).
SCHEMAS_READ = (1, 2)
#: A record is a few kB; anything much larger is not one (and must not cost a slow parse).
MAX_BYTES = 4 * 1024 * 1024

#: The first kernelpack-runtime release whose reader reads records of `SCHEMA`: raise it to
#: the release that brings a new `SCHEMA`.
_READS_SCHEMA_FROM = "0.1"
_MAJOR, _MINOR = __version__.split(".")[:2]
#: The kernelpack-runtime releases that read records of `SCHEMA`: what every kernel wheel
#: requires (`kernelpack-runtime>=0.1,<0.2`), up to the next minor release of this one.
RUNTIME_REQUIREMENT = f"kernelpack-runtime>={_READS_SCHEMA_FROM},<{_MAJOR}.{int(_MINOR) + 1}"

Abi = Literal["torch", "stable"]
_HEX = "0123456789abcdef"
_ABIS: tuple[Abi, ...] = ("torch", "stable")
Backend = Literal["cuda", "cpu"]
_BACKENDS: tuple[Backend, ...] = ("cuda", "cpu")


class InvalidRecord(ValueError):
    """A build record that cannot be read or does not validate; the message says where.

    `kernels` holds the kernel names the record lists when it could be parsed that far (the
    registry reports `record-invalid` for each of them).
    """

    def __init__(self, message: str, kernels: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kernels = kernels


def default_env_prefix(package: str) -> str:
    """The environment-variable prefix a package gets by default: `llm_ops` -> `LLM_OPS`."""
    return re.sub(r"[^A-Za-z0-9]", "_", package).upper()


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class _Object:
    """Strict typed access to one JSON object, each error naming its key path."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise InvalidRecord(f"{where or 'the record'}: expected an object, got {_kind(data)}")
        self.data: dict[str, Any] = data
        self.where = where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _fail(self, key: str, expected: str, value: object) -> InvalidRecord:
        return InvalidRecord(f"{self._path(key)}: expected {expected}, got {_kind(value)}")

    def required(self, key: str) -> object:
        if key not in self.data:
            raise InvalidRecord(f"{self._path(key)}: missing")
        return self.data[key]

    def string(self, key: str) -> str:
        value = self.required(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def optional_string(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string or null", value)
        return value

    def optional_bool(self, key: str, default: bool | None) -> bool | None:
        value = self.data.get(key, default)
        if value is not None and not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, "a list of strings", value)
        return tuple(value)

    def object(self, key: str) -> _Object:
        return _Object(self.required(key), self._path(key))

    def integer(self, key: str) -> int:
        value = self.required(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._fail(key, "an integer", value)
        return value


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
    def from_json(cls, data: object, where: str = "toolchain") -> ToolchainRecord:
        """Read a `toolchain` object; `InvalidRecord` when a field has the wrong type."""
        table = _Object(data, where)
        return cls(
            nvcc=table.optional_string("nvcc"),
            cuda=table.optional_string("cuda"),
            torch=table.optional_string("torch"),
            torch_cuda=table.optional_string("torch_cuda"),
            cxx11_abi=table.optional_bool("cxx11_abi", None),
            python=table.optional_string("python") or "",
            machine=table.optional_string("machine") or "",
        )


def _library(table: _Object) -> str:
    """The `library` path: relative, POSIX, inside the package, naming an importable module
    (`rmsnorm/_C.abi3.so` is `<pkg>.rmsnorm._C`; a kernel-builder project's library lies in the
    package itself: `_relu_1a2b3c4.abi3.so`)."""
    text = table.string("library")
    parts = text.split("/")
    if not all(part.isidentifier() for part in (*parts[:-1], parts[-1].partition(".")[0])):
        raise InvalidRecord(
            f"{table._path('library')}: {text!r} is not a library path inside the package "
            "(expected e.g. 'rmsnorm/_C.abi3.so')"
        )
    return text


def _sha256(table: _Object, key: str) -> str | None:
    digest = table.optional_string(key)
    if digest is not None and not (len(digest) == 64 and set(digest) <= set(_HEX)):
        raise InvalidRecord(f"{table._path(key)}: not a SHA-256 hex digest")
    return digest


@dataclass(frozen=True)
class BuiltKernel:
    """A kernel the build compiled: what it needs at run time."""

    abi: Abi
    archs: tuple[Arch, ...]
    """The archs its library holds code for (parsed when the record is read)."""
    library: str
    """Path of the `.so` relative to the package folder, e.g. `rmsnorm/_C.abi3.so`."""
    namespace: str | None
    """The torch.ops namespace its library registers in (`ops` in kernels.toml)."""
    stable_target: str | None = None
    ptx: bool = False
    sources_sha256: str | None = None
    """SHA-256 over the kernel's sources and headers when it was built (see
    `kernelpack status`, which flags an in-place build whose sources changed since)."""
    backend: Backend = "cuda"
    """`cuda` (nvcc, needs a GPU) or `cpu` (host C++ only, usable without a GPU)."""
    library_sha256: str | None = None
    """SHA-256 of the installed library: `load()` checks the file against it before dlopen."""
    parts: Mapping[str, tuple[Arch, ...]] = field(default_factory=dict)
    """The kernels compiled into this library with archs of their own (a kernel-builder
    project's), name -> archs; `archs` is their union. Empty for a kernels.toml kernel."""

    status: ClassVar[Literal["built"]] = "built"
    built: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "abi": self.abi,
            "stable_target": self.stable_target,
            "archs": [str(arch) for arch in self.archs],
            "ptx": self.ptx,
            "library": self.library,
            "sources_sha256": self.sources_sha256,
            "namespace": self.namespace,
            "backend": self.backend,
            "library_sha256": self.library_sha256,
            **(
                {"parts": {name: [str(a) for a in archs] for name, archs in self.parts.items()}}
                if self.parts
                else {}
            ),
        }

    def parts_on(self, capability: tuple[int, int]) -> dict[str, bool]:
        """Whether each part's code runs on a device of `capability` (empty: no parts)."""
        return {
            name: any(a.runs_on(capability, ptx=self.ptx) for a in archs)
            for name, archs in self.parts.items()
        }

    @classmethod
    def from_table(cls, table: _Object) -> BuiltKernel:
        abi = table.string("abi")
        if abi not in _ABIS:
            raise InvalidRecord(f"{table._path('abi')}: {abi!r} is not one of torch, stable")
        digest = _sha256(table, "sources_sha256")
        library_digest = _sha256(table, "library_sha256")
        backend = table.optional_string("backend") or "cuda"
        if backend not in _BACKENDS:
            raise InvalidRecord(f"{table._path('backend')}: {backend!r} is not one of cuda, cpu")
        namespace = table.optional_string("namespace")
        if namespace is not None and not namespace.isidentifier():
            raise InvalidRecord(f"{table._path('namespace')}: {namespace!r} is not an identifier")
        return cls(
            abi="stable" if abi == "stable" else "torch",
            archs=_archs(table),
            library=_library(table),
            namespace=namespace,
            stable_target=table.optional_string("stable_target"),
            ptx=bool(table.optional_bool("ptx", False)),
            sources_sha256=digest,
            backend="cpu" if backend == "cpu" else "cuda",
            library_sha256=library_digest,
            parts=_parts(table),
        )


def _archs(table: _Object, key: str = "archs") -> tuple[Arch, ...]:
    archs = []
    for index, text in enumerate(table.strings(key)):
        try:
            archs.append(Arch.parse(text))
        except InvalidArch as exc:
            raise InvalidRecord(f"{table._path(key)}[{index}]: {exc}") from None
    return tuple(archs)


def _parts(table: _Object) -> dict[str, tuple[Arch, ...]]:
    """The optional `parts` object: kernel name -> archs."""
    if "parts" not in table.data:
        return {}
    parts = table.object("parts")
    return {name: _archs(parts, name) for name in parts.data}


@dataclass(frozen=True)
class SkippedKernel:
    """A kernel the build skipped, with the build's reason."""

    reason: Reason
    namespace: str | None = None

    status: ClassVar[Literal["skipped"]] = "skipped"
    built: ClassVar[bool] = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "reason": self.reason.to_json()}
        if self.namespace is not None:
            data["namespace"] = self.namespace
        return data

    @classmethod
    def from_table(cls, table: _Object) -> SkippedKernel:
        return cls(
            reason=_reason(table.object("reason")), namespace=table.optional_string("namespace")
        )


KernelRecord = BuiltKernel | SkippedKernel
"""One kernel of the record: built or skipped (`.status`, `.built` tell which)."""


def _reason(table: _Object, depth: int = 0) -> Reason:
    code, message = table.string("code"), table.string("message")
    cause = None
    if table.data.get("cause") is not None:
        if depth > 2:
            raise InvalidRecord(f"{table._path('cause')}: nested too deeply")
        cause = _reason(table.object("cause"), depth + 1)
    try:
        return Reason(code, message, cause)
    except ValueError as exc:
        raise InvalidRecord(f"{table._path('code')}: {exc}") from None


def kernel_from_json(data: object, name: str) -> KernelRecord:
    """Read one kernel entry (`kernels.<name>`); `InvalidRecord` when it does not validate."""
    table = _Object(data, f"kernels.{name}")
    status = table.string("status")
    if status == "built":
        return BuiltKernel.from_table(table)
    if status == "skipped":
        return SkippedKernel.from_table(table)
    raise InvalidRecord(f"kernels.{name}.status: {status!r} is not one of built, skipped")


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
    def from_json(cls, data: object, where: str = "selection") -> SelectionRecord:
        """Read a `selection` object; `InvalidRecord` when a field has the wrong type."""
        table = _Object(data, where)
        max_jobs = table.data.get("max_jobs")
        if max_jobs is not None and (not isinstance(max_jobs, int) or isinstance(max_jobs, bool)):
            raise table._fail("max_jobs", "an integer or null", max_jobs)
        return cls(
            max_jobs=max_jobs,
            torch_cuda_arch_list=table.optional_string("torch_cuda_arch_list"),
            kernelpack_arch=table.optional_string("kernelpack_arch"),
            native=table.strings("native"),
        )


@dataclass(frozen=True)
class CacheRecord:
    """What the compiler cache did in the build that compiled the libraries (optional
    `"cache"`): the launcher, where hits came from ("local", "redis", "s3", "gha",
    "local+redis"...) and the counts (sccache counts each step of an nvcc compile)."""

    launcher: str
    backend: str
    hits: int
    misses: int
    remote_hits: int = 0
    local_hits: int = 0
    errors: int = 0
    read_only: bool = False
    fallback: str | None = None
    """Why the configured backend was not used, when it was not."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "launcher": self.launcher,
            "backend": self.backend,
            "hits": self.hits,
            "misses": self.misses,
            "remote_hits": self.remote_hits,
            "local_hits": self.local_hits,
            "errors": self.errors,
            "read_only": self.read_only,
        }
        if self.fallback is not None:
            data["fallback"] = self.fallback
        return data

    @classmethod
    def from_json(cls, data: object, where: str = "cache") -> CacheRecord:
        """Read a `cache` object; `InvalidRecord` when a field has the wrong type."""
        table = _Object(data, where)
        return cls(
            launcher=table.string("launcher"),
            backend=table.string("backend"),
            hits=table.integer("hits"),
            misses=table.integer("misses"),
            remote_hits=table.integer("remote_hits"),
            local_hits=table.integer("local_hits"),
            errors=table.integer("errors"),
            read_only=bool(table.optional_bool("read_only", False)),
            fallback=table.optional_string("fallback"),
        )


@dataclass(frozen=True)
class ReleaseRecord:
    """Where the project publishes its variants (optional `"release"`, from
    `[tool.kernelpack.release]`): `index_url` holds `{cuda}` for the CUDA label (`cu130`), so
    a run-time `cuda-mismatch` can name the exact install line."""

    index_url: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index-url": self.index_url}

    def url_for(self, cuda_label: str) -> str | None:
        """The index of `cuda_label` (`cu128`), or None when none is recorded."""
        if self.index_url is None:
            return None
        return self.index_url.replace("{cuda}", cuda_label)

    @classmethod
    def from_json(cls, data: object, where: str = "release") -> ReleaseRecord:
        """Read a `release` object; `InvalidRecord` when a field has the wrong type."""
        table = _Object(data, where)
        url = table.optional_string("index-url")
        if url is not None and (not url.startswith(("https://", "http://")) or len(url) > 2048):
            raise InvalidRecord(f"{where}.index-url: {url[:80]!r} is not an http(s) URL")
        return cls(index_url=url)


@dataclass(frozen=True)
class BuildRecord:
    """The whole `_kernelpack.json`."""

    package: str
    version: str
    toolchain: ToolchainRecord
    kernels: Mapping[str, KernelRecord] = field(default_factory=dict)
    env_prefix: str = ""
    """Prefix of the package's variables (`<PREFIX>_DISABLE`, from `[tool.kernelpack]
    env-prefix`); left empty, the package's default (`default_env_prefix`), as for schema-1
    records, which did not store it."""
    schema: int = SCHEMA
    selection: SelectionRecord | None = None
    """Present when `MAX_JOBS`, `TORCH_CUDA_ARCH_LIST` or `KERNELPACK_ARCH` was set."""
    cache: CacheRecord | None = None
    """Present when a compiler cache (sccache, ccache) compiled the libraries."""
    release: ReleaseRecord | None = None
    """Present when the project declares `[tool.kernelpack.release] index-url`."""

    def __post_init__(self) -> None:
        if not self.env_prefix:
            object.__setattr__(self, "env_prefix", default_env_prefix(self.package))

    def to_json(self) -> dict[str, Any]:
        data = {
            "schema": self.schema,
            "package": self.package,
            "version": self.version,
            "env_prefix": self.env_prefix,
            "toolchain": self.toolchain.to_json(),
            "kernels": {name: k.to_json() for name, k in self.kernels.items()},
        }
        if self.selection is not None:
            data["selection"] = self.selection.to_json()
        if self.cache is not None:
            data["cache"] = self.cache.to_json()
        if self.release is not None:
            data["release"] = self.release.to_json()
        return data

    @classmethod
    def from_json(cls, data: object) -> BuildRecord:
        """Validate a parsed record; `InvalidRecord` (with the key path) when it does not."""
        table = _Object(data, "")
        schema = table.integer("schema")
        if schema not in SCHEMAS_READ:
            raise InvalidRecord(
                f"schema {schema!r} is not supported (this kernelpack-runtime reads "
                f"{', '.join(map(str, SCHEMAS_READ))}); upgrade kernelpack-runtime"
            )
        prefix = table.string("env_prefix") if schema >= 2 else ""
        if prefix and not (prefix.isascii() and prefix.isidentifier()):
            raise InvalidRecord(f"env_prefix: {prefix!r} is not a variable-name prefix")
        kernels_table = table.object("kernels")
        kernels: dict[str, KernelRecord] = {}
        for name, entry in kernels_table.data.items():
            if not name.isidentifier():
                raise InvalidRecord(f"kernels: {name!r} is not a kernel name (an identifier)")
            kernels[name] = kernel_from_json(entry, name)
        return cls(
            schema=SCHEMA,
            package=table.string("package"),
            version=table.string("version"),
            env_prefix=prefix,
            toolchain=ToolchainRecord.from_json(table.required("toolchain")),
            kernels=kernels,
            selection=(
                SelectionRecord.from_json(table.data["selection"])
                if table.data.get("selection") is not None
                else None
            ),
            cache=(
                CacheRecord.from_json(table.data["cache"])
                if table.data.get("cache") is not None
                else None
            ),
            release=(
                ReleaseRecord.from_json(table.data["release"])
                if table.data.get("release") is not None
                else None
            ),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def loads(cls, text: str | bytes) -> BuildRecord:
        """Parse and validate record text; `InvalidRecord` for anything that is not one."""
        try:
            data = json.loads(text)
        except RecursionError:
            raise InvalidRecord("nested too deeply to be a build record") from None
        except (ValueError, TypeError) as exc:  # JSON, UTF-8, over-long integers
            raise InvalidRecord(f"not valid JSON ({' '.join(str(exc).split())})") from None
        try:
            return cls.from_json(data)
        except InvalidRecord as exc:
            raise InvalidRecord(str(exc), _names(data)) from None

    @classmethod
    def read(cls, path: Path) -> BuildRecord:
        """Read and validate `path`: `InvalidRecord` naming the file and the problem.

        Only a regular file is read (a FIFO or a device named `_kernelpack.json` would block
        or never end), at most `MAX_BYTES` of it. A missing file is `FileNotFoundError`.
        """
        try:
            return cls.loads(read_regular_file(path, MAX_BYTES))
        except InvalidRecord as exc:
            raise InvalidRecord(f"{path}: {exc}", exc.kernels) from None
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise InvalidRecord(f"{path}: {_unreadable(path, exc)}") from None

    def write(self, path: Path) -> None:
        """Write atomically (mode 0644 under the usual umask): a reader sees the old record or
        the new one, never half."""
        from kernelpack_runtime._files import write_text_atomic  # the build's, not run time's

        write_text_atomic(path, self.dumps())


def _names(data: object) -> tuple[str, ...]:
    """The kernel names a record that failed validation still lists, if any."""
    kernels = data.get("kernels") if isinstance(data, dict) else None
    if not isinstance(kernels, dict):
        return ()
    return tuple(name for name in kernels if isinstance(name, str))


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes, else `OSError`.

    Opened with `O_NONBLOCK` and checked again after opening, so a file swapped for a FIFO
    between the check and the open cannot block the reader.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size} bytes, more than {limit}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"more than {limit} bytes")
        return data
    finally:
        os.close(fd)


def _unreadable(path: Path, error: OSError) -> str:
    """Why `path` cannot be read, with what a user needs to fix a permission problem."""
    if isinstance(error, PermissionError):
        try:
            info = os.stat(path)
        except OSError:
            return "cannot be read: permission denied"
        return (
            f"cannot be read: permission denied (mode {stat.S_IMODE(info.st_mode):04o}, owner "
            f"uid {info.st_uid}, this process runs as uid {os.geteuid()}); make it readable "
            f"(chmod 644) or rebuild"
        )
    return f"cannot be read: {error.strerror or error}"
