"""`Toolchain`: the facts of this machine that decide what can be built.

`detect()` never raises for a missing nvcc or torch: those are facts (with reasons), and the
plan turns them into skips. It never initialises CUDA, and it does not import torch into the
calling process: torch is inspected by one `python -c` subprocess
(`kernelpack.toolchain.torchprobe`).

The variables `detect()` honours, as read into a `BuildEnvironment`
(`kernelpack.toolchain.environment`):

- `CUDA_HOME` / `CUDA_PATH`: the CUDA toolkit to use (its `bin/nvcc`).
- `PATH`: where `nvcc`, `sccache` and `ccache` are looked up.
- `KERNELPACK_CUDA`: the CUDA release of the toolkit (default: torch's).

The CUDA toolkit, one rule (`Toolchain.toolkit_line` says which and why): a system toolkit
(`CUDA_HOME`/`CUDA_PATH`, else the one owning the `nvcc` on PATH, else `/usr/local/cuda`)
whose CUDA major is torch's (and whose release is `KERNELPACK_CUDA`'s, when set); else the
CUDA wheels (`kernelpack.toolchain.cudawheels`) already in torch's environment; else those
wheels at torch's CUDA release (or `KERNELPACK_CUDA`'s) from kernelpack's cache
(`kernelpack.toolchain.toolkitcache`), installed there when `detect(provision=True)` (a
build) finds none. Linux on x86_64 and aarch64 only; CUDA 13 and later (CUDA 12 has no nvcc
wheel). A `CUDA_HOME` that holds no nvcc stays the answer (an explicit setting is not
passed over), as does a system toolkit of another major when no wheel toolkit can be had.
- `KERNELPACK_LAUNCHER`: `auto` (the default), `sccache`, `ccache`, a path, or `none`;
  `auto` picks sccache when a remote sccache backend (`SCCACHE_*`) or a farm
  (`KERNELPACK_DIST_SCHEDULER`) is configured, else ccache, else sccache, when on PATH
  (see `kernelpack.toolchain.launcher`).
- `KERNELPACK_JOBS`: the number of parallel compile jobs. Default: the cores this process
  may use. Memory is not budgeted here: the build's job pools (`builder.graph.Pools`)
  bound the compiles by the memory `Toolchain.memory` reports.

Torch's facts are cached below `XDG_CACHE_HOME` (default `~/.cache`; see
`kernelpack.toolchain.torchprobe`, the one owner of asking torch).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernelpack.errors import UsageError
from kernelpack.toolchain import cudawheels, torchprobe
from kernelpack.toolchain.environment import BuildEnvironment
from kernelpack.toolchain.launcher import choose as choose_launcher
from kernelpack.toolchain.toolkitcache import ToolkitCache, ToolkitError
from kernelpack.toolchain.torchprobe import TorchExtension, cache_dir
from kernelpack_runtime.reason import Reason

__all__ = [
    "DEFAULT_CUDA_HOME",
    "TOOLKIT_KINDS",
    "Toolchain",
    "available_memory",
    "cache_dir",
    "detect",
]

#: The toolkit tried last, when neither the environment nor PATH name one.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")

#: Where a toolkit comes from (`Toolchain.toolkit`), as the rule tries them.
TOOLKIT_KINDS = ("system", "environment", "cache")

_TIMEOUT_S = 120
_WRAPPER_DEPTH = 8
_EXEC_RE = re.compile(r"^\s*exec\s+(.+)$")
_NVCC_VERSION_RE = re.compile(r"release\s+(\d+\.\d+)(?:,\s*V(\d+(?:\.\d+)+))?")
_TARGET_RE = re.compile(r"\b(?:sm|compute)_\d+[af]?\b")


@dataclass(frozen=True)
class Toolchain:
    """What is installed: nvcc and its CUDA, torch and its CUDA, launcher, job budget."""

    python: str
    """"3.11"."""
    machine: str
    """`platform.machine()`: "x86_64", "aarch64"."""
    nvcc: Path | None
    """The real nvcc binary (wrapper scripts resolved), None when there is none."""
    cuda_home: Path | None
    nvcc_version: Version | None
    """e.g. Version("13.0.88")."""
    nvcc_targets: frozenset[str]
    """Everything `nvcc --list-gpu-code` and `--list-gpu-arch` print (sm_90, compute_90),
    plus the arch-specific and family codes `nvcc --help` allows (sm_90a, sm_100f)."""
    torch_version: Version | None
    """torch's release without the local part: Version("2.14.1")."""
    torch_cuda: Version | None
    """torch.version.cuda: Version("13.0"); None for a CPU-only torch or no torch."""
    cxx11_abi: bool | None
    torch_dir: Path | None
    """Folder of the torch package (its `include/` and `lib/` are below)."""
    torch_extension: TorchExtension | None
    nvidia_include_dirs: tuple[Path, ...]
    """`site-packages/nvidia/cu*/include` and `nvidia/*/include` shipped by torch's wheels."""
    launcher: Path | None
    """ccache or sccache, None when absent or `KERNELPACK_LAUNCHER=none`."""
    jobs: int
    """Parallel compile jobs: `KERNELPACK_JOBS`, else the usable cores."""
    memory: int | None = None
    """Bytes of memory available to new processes when detected (None: unknown); the job
    pools of the build bound their compiles by it."""
    nvcc_missing: Reason | None = None
    """Why there is no usable nvcc (code `nvcc-missing`), None when there is one."""
    torch_missing: str | None = None
    """Why torch could not be inspected (not installed, broken import), None when it was."""
    torch_extension_missing: str | None = None
    """Why torch's extension helpers gave no flags (e.g. a CPU build), None when they did."""
    launcher_why: str = ""
    """Why `launcher` is the one (`kernelpack.toolchain.launcher.Choice.why`)."""
    toolkit: str | None = None
    """Where the CUDA toolkit comes from (`TOOLKIT_KINDS`): a system toolkit, the CUDA wheels
    in torch's environment, or those in kernelpack's cache; None when there is none."""
    toolkit_why: str = ""
    """Why this toolkit (the rule's reasoning, one clause)."""
    link_dirs: tuple[Path, ...] = ()
    """Library folders the toolkit needs on the link line besides its own (the private
    `libcudart.so` link of a wheel toolkit, `cudawheels.link_dir`)."""

    def toolkit_line(self) -> str:
        """The build's first line: `kernelpack: CUDA toolkit 13.0.88 (system,
        /usr/local/cuda-13.0): nvcc on PATH is CUDA 13.0, as torch`."""
        if self.nvcc_missing is not None or self.nvcc_version is None:
            why = self.nvcc_missing.message if self.nvcc_missing else self.toolkit_why
            return f"kernelpack: no CUDA toolkit: {why}"
        where = f"{self.toolkit or 'system'}, {self.cuda_home or self.nvcc}"
        return f"kernelpack: CUDA toolkit {self.nvcc_version} ({where}): {self.toolkit_why}"

    @property
    def cuda(self) -> Version | None:
        """The toolkit's CUDA release ("13.0") derived from the nvcc version."""
        if self.nvcc_version is None:
            return None
        return Version(f"{self.nvcc_version.major}.{self.nvcc_version.minor}")

    def to_json(self) -> dict[str, Any]:
        """The facts as JSON-ready values (paths and versions as strings)."""
        return {
            "python": self.python,
            "machine": self.machine,
            "nvcc": _str_or_none(self.nvcc),
            "nvcc_version": _str_or_none(self.nvcc_version),
            "cuda": _str_or_none(self.cuda),
            "cuda_home": _str_or_none(self.cuda_home),
            "nvcc_targets": sorted(self.nvcc_targets, key=_target_sort_key),
            "nvcc_missing": None if self.nvcc_missing is None else self.nvcc_missing.to_json(),
            "torch": _str_or_none(self.torch_version),
            "torch_cuda": _str_or_none(self.torch_cuda),
            "cxx11_abi": self.cxx11_abi,
            "torch_dir": _str_or_none(self.torch_dir),
            "torch_missing": self.torch_missing,
            "nvidia_include_dirs": [str(p) for p in self.nvidia_include_dirs],
            "launcher": _str_or_none(self.launcher),
            "launcher_why": self.launcher_why,
            "toolkit": self.toolkit,
            "toolkit_why": self.toolkit_why,
            "link_dirs": [str(p) for p in self.link_dirs],
            "jobs": self.jobs,
            "memory": self.memory,
        }


def detect(
    environ: Mapping[str, str] | None = None,
    *,
    python: str | None = None,
    environment: BuildEnvironment | None = None,
    provision: bool = False,
    say: Callable[[str], None] | None = None,
) -> Toolchain:
    """Inspect this machine (nvcc, CUDA_HOME, torch, launcher, cores, memory).

    The variables come from `environment` (default: read from `environ`, default
    `os.environ`). `python` is the interpreter whose torch the kernels are built against
    (default: this one, whose torch facts are cached; see the module docstring). With
    `provision` (a build), the CUDA wheels the toolkit rule asks for are installed into
    kernelpack's cache when missing, `say` (default: stderr) getting one line about it.
    Raises `UsageError` only for a malformed variable or a `KERNELPACK_LAUNCHER` that is not
    there.
    """
    if environment is None:
        environment = BuildEnvironment.from_environ(os.environ if environ is None else environ)
    env = dict(environment.inherited)
    launcher = choose_launcher(environment)
    system = _nvcc(environment)
    torch = torchprobe.probe(env, cuda_home=system.cuda_home, python=python)
    toolkit = _toolkit(
        environment,
        system,
        _version(torch.cuda),
        torch.nvidia_roots,
        provision=provision,
        say=say or _stderr,
    )
    nvcc = toolkit.nvcc
    if nvcc.cuda_home != system.cuda_home:  # torch's extension flags name the toolkit
        torch = torchprobe.probe(env, cuda_home=nvcc.cuda_home, python=python)
    torch_version = _version(torch.version, public=True)
    torch_missing = torch.error
    if torch_missing is None and torch_version is None:
        torch_missing = f"torch reports an unparsable version {torch.version!r}"
    return Toolchain(
        python=torch.python or _this_python(),
        machine=platform.machine(),
        nvcc=nvcc.path,
        cuda_home=nvcc.cuda_home,
        nvcc_version=nvcc.version,
        nvcc_targets=nvcc.targets,
        torch_version=torch_version,
        torch_cuda=_version(torch.cuda),
        cxx11_abi=torch.cxx11_abi,
        torch_dir=Path(torch.torch_dir) if torch.torch_dir else None,
        torch_extension=torch.extension,
        nvidia_include_dirs=_nvidia_include_dirs(list(torch.nvidia_roots)),
        launcher=launcher.path,
        jobs=environment.jobs or _cores(),
        memory=available_memory(),
        nvcc_missing=nvcc.missing,
        torch_missing=torch_missing,
        torch_extension_missing=torch.extension_error,
        launcher_why=launcher.why,
        toolkit=toolkit.kind if nvcc.missing is None else None,
        toolkit_why=toolkit.why,
        link_dirs=toolkit.link_dirs,
    )


@dataclass(frozen=True)
class _Toolkit:
    nvcc: _Nvcc
    kind: str
    why: str
    link_dirs: tuple[Path, ...] = ()


def _toolkit(
    environment: BuildEnvironment,
    system: _Nvcc,
    torch_cuda: Version | None,
    nvidia_roots: tuple[str, ...],
    *,
    provision: bool,
    say: Callable[[str], None],
) -> _Toolkit:
    """The toolkit rule of the module docstring."""
    wanted = environment.cuda
    if wanted is not None and torch_cuda is not None and wanted.major != torch_cuda.major:
        raise UsageError(
            f"KERNELPACK_CUDA={wanted}: torch is built with CUDA {torch_cuda}; the toolkit's "
            f"CUDA major must be torch's ({torch_cuda.major})"
        )
    target = wanted or (Version(f"{torch_cuda.major}.{torch_cuda.minor}") if torch_cuda else None)
    origin = _origin(environment, system)
    if target is None:
        return _Toolkit(system, "system", f"{origin}; torch has no CUDA to match")
    if system.missing is None and system.version is not None:
        cuda = Version(f"{system.version.major}.{system.version.minor}")
        if cuda.major == target.major and (wanted is None or cuda == wanted):
            asked = f"KERNELPACK_CUDA={wanted}" if wanted else f"torch's CUDA {torch_cuda}"
            return _Toolkit(system, "system", f"{origin} is CUDA {cuda}, as {asked} asks")
        passed = f"{origin} is CUDA {cuda}, not {target if wanted else f'{target.major}.x'}"
    elif environment.cuda_home is not None:
        return _Toolkit(system, "system", origin)  # an explicit CUDA_HOME without nvcc
    else:
        passed = origin
    failed = system.missing.message if system.missing else passed
    problem = cudawheels.unsupported(target)
    if problem is not None:
        return _fallback(system, failed, passed, problem)
    env = dict(environment.inherited)
    cache = cache_dir(env)
    root = cudawheels.root_in(nvidia_roots, target.major)
    if root is not None:
        found = _probe_nvcc(root / "bin" / "nvcc", root, env)
        if found.version is not None and (wanted is None or _release(found.version) == wanted):
            why = f"{passed}; the CUDA wheels in torch's environment are CUDA {found.version}"
            return _Toolkit(found, "environment", why, _links(root, cache))
    toolkits = ToolkitCache.of(cache)
    toolkit, problem = toolkits.find(target)
    if toolkit is None and provision:
        try:
            toolkit = toolkits.install(target, env, say=say, timeout=environment.lock_timeout)
        except ToolkitError as exc:
            say(f"kernelpack: {exc}")
            return _fallback(system, failed, passed, str(exc))
    if toolkit is None:
        hint = (
            f"the CUDA {target} wheels are not in kernelpack's cache ({toolkits.root}"
            f"{'; ' + problem if problem else ''}): a build installs them, as does "
            f"`kernelpack toolchain install`"
        )
        return _fallback(system, failed, passed, hint)
    found = _probe_nvcc(toolkit.root / "bin" / "nvcc", toolkit.root, env)
    why = f"{passed}; the CUDA {target} wheels in kernelpack's cache"
    return _Toolkit(found, "cache", why, _links(toolkit.root, cache))


def _fallback(system: _Nvcc, failed: str, passed: str, problem: str) -> _Toolkit:
    """No wheel toolkit: the system one of another release when there is one (the plan
    then says what it cannot build), else none, saying why."""
    if system.missing is None:
        return _Toolkit(system, "system", f"{passed}; {problem}")
    return _Toolkit(_Nvcc(missing=_missing(f"{failed}; {problem}")), "cache", passed)


def _origin(environment: BuildEnvironment, system: _Nvcc) -> str:
    """How the system toolkit was found, for the toolkit line."""
    if environment.cuda_home is not None:
        var, home = environment.cuda_home
        return f"{var}={home}"
    if system.origin:
        return system.origin
    return "no system CUDA toolkit"


def _links(root: Path, cache: Path) -> tuple[Path, ...]:
    folder = cudawheels.link_dir(root / "lib", cache)
    return () if folder is None else (folder,)


def _release(version: Version) -> Version:
    return Version(f"{version.major}.{version.minor}")


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class _Nvcc:
    path: Path | None = None
    cuda_home: Path | None = None
    version: Version | None = None
    targets: frozenset[str] = frozenset()
    missing: Reason | None = None
    origin: str = ""
    """How it was found, for the toolkit line: "the nvcc on PATH (/usr/local/bin/nvcc)"."""


def _nvcc(environment: BuildEnvironment) -> _Nvcc:
    env = dict(environment.inherited)
    if environment.cuda_home is not None:
        var, home = environment.cuda_home
        candidate = home / "bin" / "nvcc"
        if not _is_executable(candidate):
            return _Nvcc(
                cuda_home=home,
                missing=_missing(f"{var}={home} has no bin/nvcc; point {var} at a CUDA toolkit"),
            )
        return _probe_nvcc(_resolve_wrappers(candidate), home, env)
    on_path = shutil.which("nvcc", path=environment.path)
    if on_path is not None:
        real = _resolve_wrappers(Path(on_path))
        found = _probe_nvcc(real, _toolkit_root(real), env)
        return dataclasses.replace(found, origin=f"the nvcc on PATH ({on_path})")
    fallback = DEFAULT_CUDA_HOME / "bin" / "nvcc"
    if _is_executable(fallback):
        real = _resolve_wrappers(fallback)
        found = _probe_nvcc(real, _toolkit_root(real) or DEFAULT_CUDA_HOME, env)
        return dataclasses.replace(found, origin=str(DEFAULT_CUDA_HOME))
    return _Nvcc(
        missing=_missing(
            f"no nvcc on PATH, CUDA_HOME is unset and {fallback} does not exist; "
            "install the CUDA toolkit or set CUDA_HOME"
        ),
        origin=f"no system toolkit (no nvcc on PATH, CUDA_HOME unset, no {DEFAULT_CUDA_HOME})",
    )


def _probe_nvcc(nvcc: Path, cuda_home: Path | None, env: dict[str, str]) -> _Nvcc:
    version_out = _run([str(nvcc), "--version"], env)
    version = _nvcc_version(version_out or "")
    if version is None:
        return _Nvcc(
            path=nvcc,
            cuda_home=cuda_home,
            missing=_missing(f"{nvcc} --version failed or printed no CUDA release"),
        )
    if cuda_home is None:
        # A wrapper we could not read through (e.g. `exec "$(dirname "$0")/…/nvcc"`).
        cuda_home = _ask_toolkit_root(nvcc, env)
        if cuda_home is not None and _is_executable(cuda_home / "bin" / "nvcc"):
            nvcc = cuda_home / "bin" / "nvcc"
    targets: set[str] = set()
    # --list-gpu-* print only the base archs (sm_90, not sm_90a); the allowed values of
    # --gpu-code in --help include the arch-specific and family variants.
    for flag in ("--list-gpu-code", "--list-gpu-arch", "--help"):
        targets.update(_TARGET_RE.findall(_run([str(nvcc), flag], env) or ""))
    return _Nvcc(path=nvcc, cuda_home=cuda_home, version=version, targets=frozenset(targets))


def _resolve_wrappers(path: Path) -> Path:
    """Follow symlinks and `exec /abs/nvcc "$@"` wrapper scripts to the real binary."""
    current = path.resolve()
    for _ in range(_WRAPPER_DEPTH):
        target = _exec_target(current)
        if target is None or target.resolve() == current:
            return current
        current = target.resolve()
    return current


def _exec_target(path: Path) -> Path | None:
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    for line in head.decode("utf-8", "replace").splitlines():
        match = _EXEC_RE.match(line)
        if match is None:
            continue
        try:
            words = shlex.split(match.group(1), comments=True)
        except ValueError:
            continue
        if words and os.path.isabs(words[0]) and _is_executable(Path(words[0])):
            return Path(words[0])
    return None


def _toolkit_root(nvcc: Path) -> Path | None:
    root = nvcc.parent.parent
    if nvcc.parent.name == "bin" and _looks_like_toolkit(root):
        return root
    return None


def _looks_like_toolkit(root: Path) -> bool:
    return (root / "include" / "cuda_runtime.h").is_file() or (root / "nvvm").is_dir()


def _ask_toolkit_root(nvcc: Path, env: dict[str, str]) -> Path | None:
    """nvcc prints the folder it runs from as `#$ _HERE_=<toolkit>/bin` in a dry run."""
    out = _run([str(nvcc), "--dryrun", "-x", "cu", "-E", os.devnull], env, stderr=True)
    for line in (out or "").splitlines():
        if line.startswith("#$ _HERE_="):
            here = Path(line.split("=", 1)[1].strip())
            if _looks_like_toolkit(here.parent):
                return here.parent.resolve()
    return None


def _nvcc_version(text: str) -> Version | None:
    match = _NVCC_VERSION_RE.search(text)
    if match is None:
        return None
    return _version(match.group(2) or match.group(1))


def _nvidia_include_dirs(roots: object) -> tuple[Path, ...]:
    found: list[Path] = []
    for root in roots if isinstance(roots, list) else []:
        base = Path(str(root))
        for pattern in ("cu*/include", "*/include"):
            for include in sorted(base.glob(pattern)):
                if include.is_dir() and include not in found:
                    found.append(include)
    return tuple(found)


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory available to new processes (`MemAvailable`), None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _run(argv: list[str], env: dict[str, str], *, stderr: bool = False) -> str | None:
    try:
        proc = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 and not stderr:
        return None
    return proc.stdout


def _version(text: object, *, public: bool = False) -> Version | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return Version(version.public) if public else version


def _missing(message: str) -> Reason:
    return Reason("nvcc-missing", message)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _str_or_none(value: object) -> str | None:
    return None if value is None else str(value)


def _target_sort_key(target: str) -> tuple[str, int, str]:
    kind, _, rest = target.partition("_")
    digits = rest.rstrip("af")
    return (kind, int(digits) if digits.isdigit() else 0, rest[len(digits) :])
