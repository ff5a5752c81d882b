"""`Scaffold`: a new kernel package, one kernel in it, ready to build, test and ship.

The files follow docs/release.md: `pyproject.toml` with kernelpack's build backend (pinned to
the running kernelpack's compatible range, see `requirement`), a `.gitignore`, the
package with `kernels.toml`, the registry wired in `__init__.py` in two lines, one kernel
folder (Python surface calling `torch.ops.<namespace from the build record>`, a fake for
`torch.compile`, autograd, and `csrc/<kernel>.cu` registering through `kernelpack/ops.h`), and
a test with the `gpu` and `kernel` markers. Nothing existing is ever overwritten (a folder
that already has a `.gitignore` keeps it).
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from kernelpack import __version__
from kernelpack.errors import UsageError
from kernelpack.project._toml import is_inside
from kernelpack.scaffold import _templates as t
from kernelpack.syntax import toml
from kernelpack_runtime.arch import Arch, InvalidArch

__all__ = ["ABIS", "GITIGNORE", "Scaffold", "requirement"]

#: The ignore file `kernelpack new` writes unless the folder has one.
GITIGNORE = Path(".gitignore")

#: `--abi` choices, as in `kernels.toml`.
ABIS = ("stable", "torch")

# Names the kernel module itself defines or imports: a kernel of that name would shadow them.
_TAKEN = frozenset(
    {
        "torch",
        "Any",
        "annotations",
        "ops_namespace",
        "DTYPES",
        "NAMESPACE",
        "unsupported_shape_reason",
    }
)


def requirement(version: str = __version__) -> str:
    """`kernelpack>=0.1,<0.2` for 0.1.x (a 0.x minor release may break), `kernelpack>=1.2,<2`
    for 1.2.x: the releases compatible with `version`."""
    release = (*Version(version).release, 0)
    major, minor = release[0], release[1]
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"kernelpack>={major}.{minor},<{upper}"


def _identifier(kind: str, name: str) -> str:
    if not (name.isidentifier() and name.isascii()) or keyword.iskeyword(name):
        raise UsageError(f"{kind} {name!r} is not a Python identifier")
    if name.startswith("_"):
        raise UsageError(f"{kind} {name!r} starts with an underscore: it would be private")
    return name


@dataclass(frozen=True)
class Scaffold:
    """What `kernelpack new` writes: a project folder, its package and one kernel."""

    root: Path
    package: str
    kernel: str
    abi: str = "stable"
    archs: tuple[Arch, ...] = (Arch.parse("9.0a"),)

    @classmethod
    def create(
        cls, root: Path, kernel: str, *, abi: str = "stable", arch: str = "9.0a"
    ) -> Scaffold:
        """Validate the names; the package is the folder's name (`-` read as `_`).

        `arch` is one arch or a comma-separated list (`"8.0,9.0a"`). `UsageError` for bad
        input.
        """
        package = _identifier("package name", root.absolute().name.replace("-", "_"))
        kernel = _identifier("kernel name", kernel)
        if kernel in _TAKEN:
            raise UsageError(f"kernel name {kernel!r} would shadow a name its module uses")
        if abi not in ABIS:
            raise UsageError(f"--abi {abi!r}: expected one of {', '.join(ABIS)}")
        try:
            archs = tuple(sorted({Arch.parse(a.strip()) for a in arch.split(",") if a.strip()}))
        except InvalidArch as exc:
            raise UsageError(f"--arch: {exc}") from None
        if not archs:
            raise UsageError("--arch: expected at least one arch, e.g. 9.0a")
        return cls(root=root, package=package, kernel=kernel, abi=abi, archs=archs)

    def files(self) -> dict[Path, str]:
        """Path (relative to `root`) -> text, in writing order."""
        values = {
            "pkg": self.package,
            "name": self.kernel,
            "dist": toml.string(canonicalize_name(self.root.absolute().name)),
            "abi_lines": t.ABI_STABLE if self.abi == "stable" else t.ABI_TORCH,
            "archs": toml.array(str(arch) for arch in self.archs),
            "kernelpack": toml.string(requirement()),
        }
        pkg, kernel = Path(self.package), Path(self.package) / self.kernel
        source = t.CU_STABLE if self.abi == "stable" else t.CU_TORCH
        return {
            GITIGNORE: t.GITIGNORE,
            Path("pyproject.toml"): t.PYPROJECT.substitute(values),
            pkg / "kernels.toml": t.KERNELS_TOML.substitute(values),
            pkg / "__init__.py": t.PACKAGE_INIT.substitute(values),
            kernel / "__init__.py": t.KERNEL_INIT.substitute(values),
            kernel / "csrc" / f"{self.kernel}.cu": source.substitute(values),
            Path("tests") / f"test_{self.kernel}.py": t.TEST.substitute(values),
        }

    def write(self) -> list[Path]:
        """Write every file; `UsageError` (nothing written) when any of them exists."""
        files = self.files()
        if (self.root / GITIGNORE).exists():
            del files[GITIGNORE]
        root = self.root.resolve()
        for path in files if self.root.exists() else ():
            folder = (self.root / path).parent
            while not folder.exists() and folder != self.root:
                folder = folder.parent
            if not is_inside(folder.resolve(), root):
                raise UsageError(
                    f"{folder}: leads to {folder.resolve()}, outside the project {self.root}; "
                    "kernelpack new writes only inside it"
                )
        existing = [path for path in files if (self.root / path).exists()]
        if existing:
            shown = ", ".join(str(self.root / path) for path in existing)
            raise UsageError(f"{shown}: already exists; kernelpack new never overwrites a file")
        written = []
        for path, text in files.items():
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written.append(target)
        return written
