"""The bridge: a `.pth` file that makes a venv's packages visible to another interpreter.

Bazel's Python toolchain is often the system interpreter (`/usr/local/bin/python3`), and
`include_system_site_packages = True` exposes *that* interpreter's site-packages, while the
image installed torch and the kernel package into a venv (`/venv`). Python's `site` module
reads every `.pth` file in site-packages at start-up and appends each line that names a
folder to `sys.path`; so one file in the interpreter's purelib, listing the venv's
site-packages, bridges the two.

The file holds plain path lines only. The venv's own `.pth` files (editable installs) are
processed only when asked (`process_pth=True`): their path lines are copied, made absolute,
and their `import` lines, which `site` executes, too. Packages compiled for one Python
(minor version, ABI flags, SOABI) do not load in another, so a mismatch is refused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelpack.errors import KernelpackError, UsageError
from kernelpack.syntax import pth
from kernelpack_runtime._files import write_text_atomic

__all__ = [
    "Bridge",
    "BridgeResult",
    "Interpreter",
    "bridge",
    "default_python",
    "pth_name",
    "unbridge",
]

_PROBE = """\
import json, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({
    "executable": sys.executable,
    "implementation": sys.implementation.name,
    "version": list(sys.version_info[:2]),
    "abiflags": getattr(sys, "abiflags", ""),
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "purelib": paths["purelib"],
    "platlib": paths["platlib"],
}))
"""


@dataclass(frozen=True)
class Interpreter:
    """The facts of a Python interpreter that decide whether a bridge is safe, and where."""

    executable: str
    implementation: str
    version: tuple[int, int]
    abiflags: str
    soabi: str
    purelib: Path
    platlib: Path

    @classmethod
    def probe(cls, python: str) -> Interpreter:
        """Ask `python` itself (a subprocess); `UsageError` when it cannot answer."""
        try:
            done = subprocess.run(
                [python, "-I", "-c", _PROBE],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except OSError as exc:
            raise UsageError(f"{python}: cannot run this interpreter: {exc.strerror}") from None
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"{python}: the interpreter failed to report its paths: {detail}")
        try:
            facts = json.loads(done.stdout)
            return cls(
                executable=str(facts["executable"]),
                implementation=str(facts["implementation"]),
                version=(int(facts["version"][0]), int(facts["version"][1])),
                abiflags=str(facts["abiflags"]),
                soabi=str(facts["soabi"]),
                purelib=Path(facts["purelib"]),
                platlib=Path(facts["platlib"]),
            )
        except (ValueError, KeyError, IndexError, TypeError):
            raise UsageError(f"{python}: unexpected answer to the interpreter probe") from None

    @property
    def site_dirs(self) -> tuple[Path, ...]:
        """purelib, then platlib when it differs (e.g. `lib64`)."""
        return (self.purelib,) if self.platlib == self.purelib else (self.purelib, self.platlib)

    def describe(self) -> str:
        """`cpython 3.11 (cpython-311-x86_64-linux-gnu)`."""
        flags = f", abiflags {self.abiflags!r}" if self.abiflags else ""
        return f"{self.implementation} {self.version[0]}.{self.version[1]} ({self.soabi}{flags})"

    def mismatch(self, other: Interpreter) -> str | None:
        """Why packages installed for `other` cannot load here; None when they can."""
        mine = (self.implementation, self.version, self.abiflags, self.soabi)
        theirs = (other.implementation, other.version, other.abiflags, other.soabi)
        if mine == theirs:
            return None
        return f"the venv has {other.describe()}, the interpreter {self.describe()}"


@dataclass(frozen=True)
class Bridge:
    """What the bridge file for one venv and one interpreter holds."""

    venv: Path
    python: Interpreter
    venv_python: Interpreter
    process_pth: bool = False

    @property
    def path(self) -> Path:
        """The `.pth` file, in the interpreter's purelib."""
        return self.python.purelib / pth_name(self.venv)

    def lines(self) -> list[str]:
        """The file's lines: the venv's site folders, then (if asked) its `.pth` lines;
        `UnsafeValue` for a path `site` would not read back as itself."""
        lines = [
            pth.comment(f"Written by `kernelpack bridge --venv {self.venv}`: the packages of"),
            pth.comment(f"that venv, for {self.python.executable}."),
            pth.comment("Remove with `kernelpack bridge --remove`."),
        ]
        lines += [
            pth.path_line(str(folder), what="a site folder of the venv")
            for folder in self.venv_python.site_dirs
        ]
        if self.process_pth:
            for folder in self.venv_python.site_dirs:
                lines += _pth_lines(folder)
        return list(dict.fromkeys(lines))

    def content(self) -> str:
        """The file's text; `UnsafeValue` when a path would break out of its line."""
        return pth.text(self.lines())


@dataclass(frozen=True)
class BridgeResult:
    """What `bridge()` / `unbridge()` did."""

    path: Path
    action: Literal["wrote", "unchanged", "removed", "absent"]
    paths: tuple[str, ...] = ()
    imports: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "pth": str(self.path),
            "action": self.action,
            "paths": list(self.paths),
            "imports": self.imports,
        }


def pth_name(venv: Path) -> str:
    """`kernelpack-bridge-<12 hex digits of the venv's resolved path>.pth`."""
    digest = hashlib.sha256(str(venv.resolve()).encode()).hexdigest()[:12]
    return f"kernelpack-bridge-{digest}.pth"


def default_python() -> str:
    """`python3` on PATH; `UsageError` when there is none."""
    found = shutil.which("python3")
    if found is None:
        raise UsageError("no python3 on PATH; pass --python PY")
    return found


def bridge(venv: Path, python: str, *, process_pth: bool = False) -> BridgeResult:
    """Make `venv`'s packages visible to `python`; idempotent. Refuses another Python/ABI.

    A path holding a line break (any that `str.splitlines()` knows) or a NUL is refused: in a
    `.pth` file it would end its line, and a next line starting with `import` is code that
    `site` runs at every start-up (`kernelpack.syntax.pth`).
    """
    pth.path_line(str(venv.absolute()), what="--venv")
    pth.path_line(str(Path(python).absolute()), what="--python")
    venv_python = _venv_python(venv)
    target = Interpreter.probe(python)
    source = Interpreter.probe(str(venv_python))
    why = target.mismatch(source)
    if why is not None:
        raise UsageError(
            f"cannot bridge {venv} into {python}: {why}; "
            "compiled packages load only in the Python and ABI they were built for"
        )
    if set(target.site_dirs) & set(source.site_dirs):
        raise UsageError(f"{python} is the venv's own interpreter; nothing to bridge")
    plan = Bridge(venv.resolve(), target, source, process_pth)
    lines = plan.lines()
    paths = tuple(line for line in lines if not line.startswith(("#", "import ", "import\t")))
    imports = sum(1 for line in lines if line.startswith(("import ", "import\t")))
    content = plan.content()
    try:
        if plan.path.is_file() and plan.path.read_text(encoding="utf-8") == content:
            return BridgeResult(plan.path, "unchanged", paths, imports)
        write_text_atomic(plan.path, content)
    except OSError as exc:
        raise KernelpackError(f"{plan.path}: cannot write the bridge: {exc.strerror}") from None
    return BridgeResult(plan.path, "wrote", paths, imports)


def unbridge(venv: Path, python: str) -> BridgeResult:
    """Remove the bridge of `venv` from `python`'s purelib (the venv need not exist)."""
    path = Interpreter.probe(python).purelib / pth_name(venv)
    try:
        path.unlink()
    except FileNotFoundError:
        return BridgeResult(path, "absent")
    except OSError as exc:
        raise KernelpackError(f"{path}: cannot remove the bridge: {exc.strerror}") from None
    return BridgeResult(path, "removed")


def _venv_python(venv: Path) -> Path:
    if not (venv / "pyvenv.cfg").is_file():
        raise UsageError(f"{venv}: not a virtual environment (no pyvenv.cfg)")
    for name in ("bin/python3", "bin/python", "Scripts/python.exe"):
        if (venv / name).exists():
            return venv / name
    raise UsageError(f"{venv}: no interpreter in the venv (bin/python3)")


def _pth_lines(site_dir: Path) -> list[str]:
    """The lines `site` would act on in `site_dir`'s own `.pth` files, paths made absolute."""
    lines: list[str] = []
    for pth_file in sorted(site_dir.glob("*.pth")):
        if pth_file.name.startswith("kernelpack-bridge-"):
            continue
        for raw in pth_file.read_text(encoding="utf-8", errors="replace").splitlines():
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                lines.append(line)
            else:
                lines.append(pth.path_line(str((site_dir / line).resolve()), what=str(pth_file)))
    return lines
