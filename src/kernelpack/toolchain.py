"""`Toolchain`: the facts of this machine that decide what can be built.

`detect()` never raises for a missing nvcc or torch: those are facts (with reasons), and the
plan turns them into skips. It never initialises CUDA, and it does not import torch into the
calling process: torch is inspected by one `python -c` subprocess.

Environment variables read by `detect()`:

- `CUDA_HOME` / `CUDA_PATH`: the CUDA toolkit to use (its `bin/nvcc`).
- `PATH`: where `nvcc`, `sccache` and `ccache` are looked up.
- `KERNELPACK_LAUNCHER`: `none` turns the compiler launcher off; a path or command name
  forces one. Default: `sccache`, else `ccache`, when on PATH.
- `KERNELPACK_JOBS`: the number of parallel compile jobs. Default: the cores this process
  may use, capped by available memory at about 3 GiB per nvcc job, at least 1.
- `XDG_CACHE_HOME` (default `~/.cache`): the torch facts of this interpreter are cached in
  `kernelpack/torch-<key>.json` below it, keyed by the interpreter, `PYTHONPATH` and the
  modification times of torch's `__init__.py` and `version.py` (a reinstall invalidates it).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kernelpack.errors import UsageError
from kernelpack_runtime.reason import Reason

__all__ = [
    "DEFAULT_CUDA_HOME",
    "JOB_MEMORY_BYTES",
    "Toolchain",
    "available_memory",
    "cache_dir",
    "detect",
]

#: The toolkit tried last, when neither the environment nor PATH name one.
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")

#: Memory budgeted per parallel nvcc job: one with the full ATen headers peaks near 3 GB.
JOB_MEMORY_BYTES = 3 * 1024**3

_TIMEOUT_S = 120
_WRAPPER_DEPTH = 8
_EXEC_RE = re.compile(r"^\s*exec\s+(.+)$")
_NVCC_VERSION_RE = re.compile(r"release\s+(\d+\.\d+)(?:,\s*V(\d+(?:\.\d+)+))?")
_TARGET_RE = re.compile(r"\b(?:sm|compute)_\d+[af]?\b")
_FACTS_MARKER = "KERNELPACK_FACTS="
_CACHE_SCHEMA = 1

# Runs in the interpreter the package is built for. Importing torch does not initialise
# CUDA; `torch.version.cuda` and the ABI flag are compile-time constants.
_TORCH_PROBE = f"""
import json, os, sys
facts = {{"python": "%d.%d" % sys.version_info[:2], "nvidia": []}}
try:
    import nvidia
    facts["nvidia"] = [str(p) for p in getattr(nvidia, "__path__", [])]
except Exception:
    pass
try:
    import torch
    facts["torch"] = {{
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "dir": os.path.dirname(os.path.abspath(torch.__file__)),
    }}
except ModuleNotFoundError as exc:
    facts["torch_error"] = "missing" if exc.name == "torch" else f"{{type(exc).__name__}}: {{exc}}"
except BaseException as exc:
    facts["torch_error"] = f"{{type(exc).__name__}}: {{exc}}"
print("{_FACTS_MARKER}" + json.dumps(facts))
"""


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
    nvidia_include_dirs: tuple[Path, ...]
    """`site-packages/nvidia/cu*/include` and `nvidia/*/include` shipped by torch's wheels."""
    launcher: Path | None
    """ccache or sccache, None when absent or `KERNELPACK_LAUNCHER=none`."""
    jobs: int
    """Parallel compile jobs budgeted by cores and free memory."""
    nvcc_missing: Reason | None = None
    """Why there is no usable nvcc (code `nvcc-missing`), None when there is one."""
    torch_missing: str | None = None
    """Why torch could not be inspected (not installed, broken import), None when it was."""

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
            "jobs": self.jobs,
        }


def detect(environ: Mapping[str, str] = os.environ, *, python: str | None = None) -> Toolchain:
    """Inspect this machine (nvcc, CUDA_HOME, torch, launcher, cores, memory).

    `python` is the interpreter whose torch the kernels are built against (default: this
    one, whose torch facts are cached; see the module docstring). Raises `UsageError` only
    for a malformed `KERNELPACK_JOBS` or `KERNELPACK_LAUNCHER`.
    """
    env = dict(environ)
    nvcc = _nvcc(env)
    torch = _cached_torch_facts(env) if python is None else _torch_facts(python, env)
    torch_info = torch.get("torch")
    torch_version = torch_cuda = None
    cxx11_abi = None
    torch_dir = None
    torch_missing: str | None = None
    if isinstance(torch_info, dict):
        torch_version = _version(torch_info.get("version"), public=True)
        torch_cuda = _version(torch_info.get("cuda"))
        cxx11_abi = bool(torch_info.get("cxx11_abi"))
        torch_dir = Path(str(torch_info["dir"]))
        if torch_version is None:
            torch_missing = f"torch reports an unparsable version {torch_info.get('version')!r}"
    else:
        torch_missing = str(torch.get("torch_error", "torch could not be inspected"))
    return Toolchain(
        python=str(torch.get("python") or _this_python()),
        machine=platform.machine(),
        nvcc=nvcc.path,
        cuda_home=nvcc.cuda_home,
        nvcc_version=nvcc.version,
        nvcc_targets=nvcc.targets,
        torch_version=torch_version,
        torch_cuda=torch_cuda,
        cxx11_abi=cxx11_abi,
        torch_dir=torch_dir,
        nvidia_include_dirs=_nvidia_include_dirs(torch.get("nvidia", [])),
        launcher=_launcher(env),
        jobs=_jobs(env),
        nvcc_missing=nvcc.missing,
        torch_missing=torch_missing,
    )


@dataclass(frozen=True)
class _Nvcc:
    path: Path | None = None
    cuda_home: Path | None = None
    version: Version | None = None
    targets: frozenset[str] = frozenset()
    missing: Reason | None = None


def _nvcc(env: dict[str, str]) -> _Nvcc:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if home:
            candidate = Path(home) / "bin" / "nvcc"
            if not _is_executable(candidate):
                return _Nvcc(
                    cuda_home=Path(home),
                    missing=_missing(
                        f"{var}={home} has no bin/nvcc; point {var} at a CUDA toolkit"
                    ),
                )
            return _probe_nvcc(_resolve_wrappers(candidate), Path(home), env)
    on_path = shutil.which("nvcc", path=env.get("PATH", ""))
    if on_path is not None:
        real = _resolve_wrappers(Path(on_path))
        return _probe_nvcc(real, _toolkit_root(real), env)
    fallback = DEFAULT_CUDA_HOME / "bin" / "nvcc"
    if _is_executable(fallback):
        real = _resolve_wrappers(fallback)
        return _probe_nvcc(real, _toolkit_root(real) or DEFAULT_CUDA_HOME, env)
    return _Nvcc(
        missing=_missing(
            f"no nvcc on PATH, CUDA_HOME is unset and {fallback} does not exist; "
            "install the CUDA toolkit or set CUDA_HOME"
        )
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


def _cached_torch_facts(env: dict[str, str]) -> dict[str, Any]:
    """This interpreter's torch facts, from the cache while torch's files are unchanged."""
    path = _cache_path(env)
    if path is not None:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cached = None
        if isinstance(cached, dict) and isinstance(cached.get("torch"), dict):
            return cached
    facts = _torch_facts(sys.executable, env)
    if path is not None and "torch" in facts:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            temp.write_text(json.dumps(facts), encoding="utf-8")
            os.replace(temp, path)
        except OSError:
            pass
    return facts


def _cache_path(env: dict[str, str]) -> Path | None:
    # The probe's sys.path is PYTHONPATH, then this interpreter's own entries.
    extra = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    spec = importlib.machinery.PathFinder.find_spec("torch", [*extra, *sys.path])
    if spec is None or spec.origin is None:
        return None
    init = Path(spec.origin)
    stamps = [
        f"{file}:{file.stat().st_mtime_ns}"
        for file in (init, init.parent / "version.py")
        if file.is_file()
    ]
    key = json.dumps([_CACHE_SCHEMA, sys.executable, env.get("PYTHONPATH", ""), *stamps])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return cache_dir(env) / f"torch-{digest}.json"


def cache_dir(environ: Mapping[str, str]) -> Path:
    """This machine's kernelpack cache: `$XDG_CACHE_HOME/kernelpack` (`~/.cache/kernelpack`).

    It holds facts about installed tools, keyed by what they are derived from, so that
    builds of any project, fresh clones included, need not import torch to learn them."""
    home = environ.get("HOME") or str(Path.home())
    return Path(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")) / "kernelpack"


def _torch_facts(python: str, env: dict[str, str]) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [python, "-c", _TORCH_PROBE],
            env=env,
            # `-c` puts the working folder first on sys.path: run where no `torch/` can shadow.
            cwd=os.path.dirname(shutil.which(python) or python) or None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"torch_error": f"could not run {python}: {exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_FACTS_MARKER):
            facts: dict[str, Any] = json.loads(line[len(_FACTS_MARKER) :])
            if facts.get("torch_error") == "missing":
                facts["torch_error"] = f"torch is not installed for {python}; pip install torch"
            elif "torch_error" in facts:
                facts["torch_error"] = f"import torch failed: {facts['torch_error']}"
            return facts
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"torch_error": f"import torch crashed {python} (exit {proc.returncode}): {last}"}


def _nvidia_include_dirs(roots: object) -> tuple[Path, ...]:
    found: list[Path] = []
    for root in roots if isinstance(roots, list) else []:
        base = Path(str(root))
        for pattern in ("cu*/include", "*/include"):
            for include in sorted(base.glob(pattern)):
                if include.is_dir() and include not in found:
                    found.append(include)
    return tuple(found)


def _launcher(env: dict[str, str]) -> Path | None:
    search = env.get("PATH", "")
    forced = env.get("KERNELPACK_LAUNCHER", "").strip()
    if forced.lower() == "none":
        return None
    if forced:
        path = shutil.which(forced, path=search)
        if path is None:
            raise UsageError(
                f"KERNELPACK_LAUNCHER={forced} is not an executable; "
                "give a path or command on PATH, or 'none'"
            )
        return Path(path)
    for name in ("sccache", "ccache"):
        path = shutil.which(name, path=search)
        if path is not None:
            return Path(path)
    return None


def _jobs(env: dict[str, str]) -> int:
    forced = env.get("KERNELPACK_JOBS", "").strip()
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise UsageError(f"KERNELPACK_JOBS={forced} is not a positive integer")
        return int(forced)
    cores = _cores()
    available = available_memory()
    if available is None:
        return cores
    return max(1, min(cores, available // JOB_MEMORY_BYTES))


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
