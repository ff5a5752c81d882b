"""Reading the tables every `build.toml` format shares, with one-line errors.

A format reader names the keys its tables may hold (unknown keys are errors, as serde's
`deny_unknown_fields` makes them in kernel-builder) and calls these helpers; each error names
the file, the table and the key. The `[kernel.<name>]` tables are the same in every format.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from kernelpack.errors import ManifestError
from kernelpack.project._toml import Table, describe, display_path, path_too_long, quote
from kernelpack.project.buildtoml.model import BACKENDS, Kernel, Noarch, Project, Torch

__all__ = ["KERNEL_BACKENDS", "Tables", "one_of"]

#: The backends a `[kernel.<name>]` table may name, and the keys of each.
_COMMON_KERNEL_KEYS = ("backend", "depends", "src", "include", "cxx-flags")
KERNEL_BACKENDS: Mapping[str, tuple[str, ...]] = {
    "cuda": (*_COMMON_KERNEL_KEYS, "cuda-capabilities", "cuda-flags", "cuda-minver"),
    "cpu": _COMMON_KERNEL_KEYS,
    "metal": _COMMON_KERNEL_KEYS,
    "rocm": (*_COMMON_KERNEL_KEYS, "rocm-archs", "hip-flags"),
    "xpu": (*_COMMON_KERNEL_KEYS, "sycl-flags"),
}
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_\-]*", re.IGNORECASE)
_KERNEL_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
# kernel-builder reads capabilities as strings and compares them as versions: "8.0", "9.0a",
# "10.0f", "12.0+PTX", and ones no GPU has ("11.8"), which its intersection then drops.
_CAPABILITY_RE = re.compile(r"\d{1,2}\.\d{1,2}[af]?(\+PTX)?")


class Tables:
    """The parsed file of one `build.toml`, read table by table."""

    def __init__(self, path: Path, data: Mapping[str, Any]) -> None:
        self.path = path
        self.shown = display_path(path)
        self.data = data

    def table(self, name: str | None, data: Mapping[str, Any]) -> Table:
        return Table(self.shown, name, data)

    def top(self, known: tuple[str, ...]) -> Table:
        top = self.table(None, self.data)
        top.check_keys(known)
        return top

    def sub_table(self, parent: Table, key: str, known: tuple[str, ...]) -> Table | None:
        """`parent.key` as a table whose keys are among `known`; None when absent."""
        value = parent.data.get(key)
        if value is None:
            return None
        name = f"{parent.name}.{key}" if parent.name else key
        if not isinstance(value, dict):
            raise parent.error(key, f"got {describe(value)}", f"expected a [{name}] table")
        table = self.table(name, value)
        table.check_keys(known)
        return table

    def required_table(self, parent: Table, key: str, known: tuple[str, ...]) -> Table:
        table = self.sub_table(parent, key, known)
        if table is None:
            raise parent.error(key, "is missing", f"expected a [{key}] table")
        return table

    # -- [general] ----------------------------------------------------------------------------

    def name(self, general: Table) -> str:
        name = general.string("name", expected='a kernel name such as "relu"')
        if name is None:
            raise general.error("name", "is missing", 'expected e.g. name = "relu"')
        python_name = name.replace("-", "_")
        if not _NAME_RE.fullmatch(name) or not python_name.isidentifier():
            raise general.error(
                "name", f"{quote(name)} is not a kernel name", 'expected e.g. "relu"'
            )
        too_long = path_too_long(python_name)  # it names the package folder
        if too_long is not None:
            raise general.error("name", f"{quote(name)} {too_long}", 'expected e.g. "relu"')
        return name

    def version(self, general: Table, *, required: bool) -> int:
        """`version`: the kernel's major version (1 when optional and absent)."""
        value = general.data.get("version")
        if value is None and not required:
            return 1
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            got = "is missing" if value is None else f"got {describe(value)}"
            raise general.error("version", got, "expected the major version, e.g. version = 1")
        return value

    def license(self, general: Table, *, required: bool) -> str | None:
        value = general.string("license", expected='an SPDX expression such as "Apache-2.0"')
        if value is None and required:
            raise general.error("license", "is missing", 'expected e.g. license = "Apache-2.0"')
        return value

    def backends(self, general: Table) -> tuple[str, ...]:
        if "backends" not in general.data:
            raise general.error("backends", "is missing", 'expected e.g. backends = ["cuda"]')
        names = general.strings("backends", expected="backend names", allow_empty=False)
        for name in names:
            if name not in BACKENDS:
                raise general.error(
                    "backends", f"unknown backend {quote(name)}", one_of("expected", BACKENDS, name)
                )
        return tuple(dict.fromkeys(names))

    def cuda_range(self, cuda: Table | None) -> tuple[Version | None, Version | None]:
        """`[general.cuda]`'s minver and maxver."""
        if cuda is None:
            return None, None
        low = cuda.version("minver", example="12.8")
        high = cuda.version("maxver", example="12.9")
        if low is not None and high is not None and low > high:
            raise cuda.error(
                "maxver", f'"{high}" is below minver "{low}"', "expected maxver >= minver"
            )
        return low, high

    def python_depends(self, table: Table | None) -> tuple[str, ...]:
        if table is None:
            return ()
        return table.strings("python-depends", expected="Python dependency names")

    def hub(self, general: Table) -> None:
        hub = self.sub_table(general, "hub", ("repo-id", "branch"))
        if hub is not None:
            hub.string("repo-id", expected="a Hub repository such as kernels-community/relu")
            hub.string("branch", expected="a branch name")

    def urls(self, general: Table, keys: tuple[str, ...]) -> str | None:
        found = [general.string(key, expected="a git URL") for key in keys]
        return found[0] if found else None

    # -- frameworks ---------------------------------------------------------------------------

    def project(
        self,
        top: Table,
        general: Table,
        cuda: Table | None,
        framework: Torch | Noarch,
        *,
        format: str,
        required: bool,
        urls: tuple[str, ...],
    ) -> Project:
        """The project model of a file whose `[general]` holds name, version, license and
        backends (edition 5, v4, v3); `required`: version and license must be there. The
        reader has checked its own tables (`framework` included) before."""
        low, high = self.cuda_range(cuda)
        return Project(
            path=self.path,
            format=format,
            name=self.name(general),
            version=self.version(general, required=required),
            license=self.license(general, required=required),
            backends=self.backends(general),
            framework=framework,
            kernels=self.kernels(top),
            cuda_minver=low,
            cuda_maxver=high,
            python_depends=self.python_depends(general),
            cuda_python_depends=self.python_depends(cuda),
            upstream=self.urls(general, urls),
        )

    def framework(
        self,
        top: Table,
        torch_keys: tuple[str, ...],
        noarch_keys: tuple[str, ...] | None,
        *,
        stable_abi: str | None,
    ) -> Torch | Noarch:
        """The one framework table: `[torch]` or `[torch-noarch]` (`[tvm-ffi]` is refused);
        `noarch_keys` None: the format has no `[torch-noarch]`, and no framework table
        means a Python-only project (v3)."""
        names = (
            ("torch", "tvm-ffi") if noarch_keys is None else ("torch", "torch-noarch", "tvm-ffi")
        )
        present = [name for name in names if name in top.data]
        if not present and noarch_keys is None:
            return Noarch()
        if len(present) != 1:
            problem = "has no framework table" if not present else "has several frameworks"
            raise top.error(
                None,
                f"{problem} ({', '.join(f'[{f}]' for f in present) or 'none'})",
                "expected exactly one of [torch] (compiled) or [torch-noarch]",
            )
        if present[0] == "tvm-ffi":
            raise top.error(
                "tvm-ffi",
                "is not supported by kernelpack (it builds Torch extensions)",
                "expected a [torch] or [torch-noarch] project",
            )
        if present[0] == "torch-noarch":
            assert noarch_keys is not None
            return self.noarch(top, noarch_keys)
        return self.torch(top, torch_keys, stable_abi, required=True)

    def torch(
        self, top: Table, known: tuple[str, ...], stable_abi: str | None, *, required: bool
    ) -> Torch:
        """`[torch]`; `stable_abi` is how the format spells `stable-abi`: `"version"` (one
        target), `"either"` (a target or a per-backend table), None (no such key)."""
        torch = self.required_table(top, "torch", known)
        if required and "src" not in torch.data:
            raise torch.error(
                "src", "is missing", 'expected e.g. src = ["torch-ext/torch_binding.cpp"]'
            )
        low = torch.version("minver", example="2.10")
        high = torch.version("maxver", example="2.12")
        if low is not None and high is not None and low > high:
            raise torch.error(
                "maxver", f'"{high}" is below minver "{low}"', "expected maxver >= minver"
            )
        return Torch(
            src=self.files(torch, "src"),
            include=self.files(torch, "include"),
            minver=low,
            maxver=high,
            pyext=self.pyext(torch),
            cxx_flags=torch.strings("cxx-flags", expected="C++ compiler flags"),
            stable_abi=self.stable_abi(torch, per_backend=stable_abi == "either")
            if stable_abi is not None
            else {},
        )

    def stable_abi(self, torch: Table, *, per_backend: bool) -> dict[str, Version]:
        """`stable-abi = "2.9"` (every backend) or, where the format has it (`per_backend`),
        `[torch.stable-abi] cuda = "2.10"`."""
        value = torch.data.get("stable-abi")
        if value is None:
            return {}
        if isinstance(value, dict) and per_backend:
            table = self.table("torch.stable-abi", value)
            table.check_keys(BACKENDS)
            targets = {backend: table.version(backend, example="2.10") for backend in value}
            return {backend: v for backend, v in targets.items() if v is not None}
        target = torch.version("stable-abi", example="2.10")
        assert target is not None
        return dict.fromkeys(BACKENDS, target)

    def noarch(self, top: Table, known: tuple[str, ...]) -> Noarch:
        table = self.required_table(top, "torch-noarch", known)
        capabilities = None
        if "cuda-capabilities" in table.data:
            capabilities = self.capabilities(table, "cuda-capabilities")
        rocm = (
            table.strings("rocm-archs", expected="ROCm archs")
            if "rocm-archs" in table.data
            else None
        )
        return Noarch(pyext=self.pyext(table), cuda_capabilities=capabilities, rocm_archs=rocm)

    def pyext(self, table: Table) -> tuple[str, ...] | None:
        if "pyext" not in table.data:
            return None
        extensions = table.strings("pyext", expected='file extensions such as "py"')
        for extension in extensions:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", extension):
                raise table.error(
                    "pyext", f"{quote(extension)} is not a file extension", 'expected e.g. "json"'
                )
        return extensions

    # -- [kernel.<name>] ----------------------------------------------------------------------

    def kernels(self, top: Table) -> tuple[Kernel, ...]:
        value = top.data.get("kernel", {})
        if not isinstance(value, dict):
            raise top.error("kernel", f"got {describe(value)}", "expected [kernel.<name>] tables")
        return tuple(self.kernel(name, table) for name, table in value.items())

    def kernel(self, name: str, value: object) -> Kernel:
        label = f"kernel.{name}"
        if not isinstance(value, dict):
            raise ManifestError(
                self.shown,
                f"got {describe(value)}",
                kernel=label,
                expected=f"expected a [{label}] table",
            )
        if not _KERNEL_NAME_RE.fullmatch(name):
            raise ManifestError(
                self.shown,
                f"{quote(name)} is not a kernel name",
                kernel=label,
                expected='expected e.g. "relu"',
            )
        kernel = self.table(label, value)
        backend = kernel.data.get("backend")
        if backend is None:
            raise kernel.error("backend", "is missing", 'expected e.g. backend = "cuda"')
        if not isinstance(backend, str) or backend not in KERNEL_BACKENDS:
            shown = backend if isinstance(backend, str) else describe(backend)
            raise kernel.error(
                "backend",
                f'unknown backend "{shown}"',
                one_of("expected", tuple(KERNEL_BACKENDS), str(shown)),
            )
        kernel.check_keys(KERNEL_BACKENDS[backend])
        if "depends" not in kernel.data:
            raise kernel.error("depends", "is missing", 'expected e.g. depends = ["torch"]')
        if "src" not in kernel.data:
            raise kernel.error("src", "is missing", 'expected e.g. src = ["relu_cuda/relu.cu"]')
        for key in ("rocm-archs", "hip-flags", "sycl-flags"):
            kernel.strings(key, expected="strings")
        capabilities = None
        if "cuda-capabilities" in kernel.data:
            capabilities = self.capabilities(kernel, "cuda-capabilities")
        return Kernel(
            name=name,
            backend=backend,
            src=self.files(kernel, "src", allow_empty=False),
            depends=kernel.strings("depends", expected="dependency names"),
            include=self.files(kernel, "include"),
            cxx_flags=kernel.strings("cxx-flags", expected="C++ compiler flags"),
            cuda_capabilities=capabilities,
            cuda_flags=kernel.strings("cuda-flags", expected="nvcc flags"),
            cuda_minver=kernel.version("cuda-minver", example="12.8"),
        )

    def capabilities(self, table: Table, key: str) -> tuple[str, ...]:
        values = table.strings(key, expected='capabilities such as "9.0"', allow_empty=False)
        for value in values:
            if not _CAPABILITY_RE.fullmatch(value):
                raise table.error(
                    key,
                    f"{quote(value)} is not a CUDA capability",
                    'expected e.g. "8.0", "9.0a" or "12.0+PTX"',
                )
        return values

    def files(self, table: Table, key: str, *, allow_empty: bool = True) -> tuple[str, ...]:
        """Paths as written (checked against the project folder by the translation)."""
        return table.strings(key, expected="paths relative to build.toml", allow_empty=allow_empty)


def one_of(prefix: str, known: tuple[str, ...], got: str) -> str:
    """`did you mean "x"? expected one of a, b, c`."""
    close = difflib.get_close_matches(got, list(known), n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    return f"{hint}{prefix} one of {', '.join(known)}"
