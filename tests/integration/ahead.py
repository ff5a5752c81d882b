"""Builds ahead: the run's slowest package builds start in the background when the first
integration test runs, at the lowest CPU priority, and fill the run's ccache (and the
CPU-torch venv, mostly a download, is made there too: `ready_venv`).

The fixture that needs one of them (`test_foreign.py`'s kernel-builder and prime-kernels
projects, the moe_ops wheel) waits for it (`wait`), then runs its own build of the same copy,
which is the tested one: every compile is a ccache hit there (the compile commands are the
same in any folder). Nothing depends on the background for correctness: a build it did not
finish, or that failed, is compiled by the fixture as before. It only uses the CPU the
foreground leaves idle (single-threaded tests, the unit suite, pip, servers): those
consumers run last (`conftest.py` orders them), so the background has the rest of the run.

    python tests/integration/ahead.py CCACHE_DIR DONE_DIR NAME...

builds each NAME in turn (`prepare` makes its copy) and touches `DONE_DIR/NAME` after it,
built or not; a NAME whose consumer asked for it first is left to the consumer (`wait`).
Its output goes to `DONE_DIR/log`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CONSUMERS",
    "FAST_ARCH",
    "FOREIGN",
    "Background",
    "consumers_last",
    "prepare",
    "start",
    "wait",
    "wanted",
    "widen_python",
]

HERE = Path(__file__).resolve().parent
FOREIGN = HERE.parent / "foreign"
EXAMPLES = FOREIGN / "hf-kernels" / "examples"
#: kernel-builder copies build for 9.0 only (the projects' own files are left untouched).
FAST_ARCH = '[tool.kernelpack]\narch = "9.0"\n'
#: Test file -> the builds ahead its fixtures consume, in the order they ask for them. Besides
#: package builds, `cpu_torch_venv` is the venv of conftest's fixture of that name (mostly
#: a download: no compile).
CONSUMERS: dict[str, tuple[str, ...]] = {
    "test_hub_export.py": ("cpu_torch_venv",),
    "test_runtime.py": ("cpu_torch_venv",),
    "test_foreign.py": ("relu", "cutlass_gemm", "prime"),
    "test_moe_ops_cpu.py": ("moe_ops",),
}
CPU_TORCH_VENV = "cpu_torch_venv"
#: The longest a consumer waits for the background (then it builds by itself).
WAIT_S = 3600.0


def cpu_torch_requirements() -> list[str]:
    """What the CPU-torch venv holds: the CPU-only torch 2.13.0, packaging, Hugging Face's
    `kernels` (this environment's version) and pytest."""
    import importlib.metadata

    return [
        "torch==2.13.0",
        "packaging",
        f"kernels=={importlib.metadata.version('kernels')}",
        "pytest",
    ]


def make_cpu_torch_venv(venv: Path) -> subprocess.CompletedProcess[str]:
    """Create the CPU-torch venv at `venv`; pip's outcome."""
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    return subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", *cpu_torch_requirements()],
        capture_output=True,
        text=True,
    )


def ready_venv() -> Path | None:
    """The interpreter of the background's CPU-torch venv, once it is done and whole."""
    current = _current
    if current is None or not wait(CPU_TORCH_VENV):
        return None
    python = current.done / CPU_TORCH_VENV / "bin" / "python"
    return python if (current.done / f"{CPU_TORCH_VENV}.ok").exists() else None


def widen_python(root: Path) -> None:
    """prime-kernels pins `~=3.12.0`: widen `requires-python` to this interpreter."""
    pyproject = root / "pyproject.toml"
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    text = pyproject.read_text()
    pyproject.write_text(
        text.replace('requires-python = "~=3.12.0"', f'requires-python = ">={this}"')
    )


def prepare(name: str, base: Path) -> Path | None:
    """A copy of build `name` in `base`, as its fixture builds it (None: nothing to build
    here, such as CUTLASS without its headers)."""
    if name in ("relu", "cutlass_gemm"):
        if name == "cutlass_gemm" and importlib.util.find_spec("cutlass_library") is None:
            return None
        source = EXAMPLES / name.replace("_", "-")
        root = base / source.name
        shutil.copytree(source, root)
        (root / "pyproject.toml").write_text(FAST_ARCH)
        return root
    if name == "prime":
        root = base / "prime-kernels"
        shutil.copytree(FOREIGN / "prime-kernels", root)
        widen_python(root)
        return root
    if name == "moe_ops":
        if importlib.util.find_spec("cutlass_library") is None:
            return None
        from builds import copy_package

        return copy_package(name, base / name)
    raise LookupError(f"no build ahead named {name!r}")


@dataclass
class Background:
    """The background builder of this run."""

    process: subprocess.Popen[bytes]
    done: Path
    names: tuple[str, ...]

    def stop(self) -> None:
        """End it (its whole process group) if it still runs."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


_current: Background | None = None


def _lowest_priority() -> None:
    """In the child: a process group of its own (`stop` ends it whole) in the same session,
    and the lowest priority. Not a session of its own: with the kernel's autogroups, a new
    session is a new scheduling group with a fair share of the CPU, whatever its nice value."""
    os.setpgid(0, 0)
    os.nice(19)


def wanted(modules: set[str]) -> tuple[str, ...]:
    """The builds ahead that the collected test files (`modules`, file names) consume."""
    names = (name for module, names in CONSUMERS.items() if module in modules for name in names)
    return tuple(dict.fromkeys(names))


def consumers_last(modules: list[str]) -> list[int]:
    """Indexes of `modules` (one file name per collected test), consumers of builds ahead
    moved to the end (stable), so the background has the rest of the run to work in."""
    order = range(len(modules))
    return sorted(order, key=lambda i: modules[i] in CONSUMERS)


def start(names: tuple[str, ...], ccache_dir: Path, done: Path) -> Background:
    """Start the background builder of `names` (see the module's docstring)."""
    global _current
    _claim(done, names[0], "background")  # before any test can: it starts with that one
    log = (done / "log").open("wb")
    process = subprocess.Popen(
        [sys.executable, __file__, str(ccache_dir), str(done), *names],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_lowest_priority,
    )
    log.close()
    _current = Background(process, done, names)
    return _current


def _claim(done: Path, name: str, owner: str) -> bool:
    """Whether `owner` ("background" or "consumer") owns build `name`: each claims it
    before building it, and only the first gets it."""
    path = done / f"{name}.owner"
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return path.read_text() == owner
    with os.fdopen(fd, "w") as fh:
        fh.write(owner)
    return True


def wait(name: str) -> bool:
    """Wait until the background has built `name` when it has started it; when it has not,
    claim it, so that the background leaves it to the caller. Whether it waited."""
    current = _current
    if current is None or name not in current.names or _claim(current.done, name, "consumer"):
        return False
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if (current.done / name).exists() or current.process.poll() is not None:
            break
        time.sleep(0.2)
    return True


def _main(argv: list[str]) -> int:
    ccache_dir, done = Path(argv[0]), Path(argv[1])
    sys.path.insert(0, str(HERE))
    from builds import build_env

    from kernelpack.builder import engine
    from kernelpack.project.locate import locate

    for name in dict.fromkeys(argv[2:]):
        if not _claim(done, name, "background"):
            print(f"{name}: its consumer builds it", flush=True)
            continue
        started = time.monotonic()
        if name == CPU_TORCH_VENV:
            installed = make_cpu_torch_venv(done / name)
            print(f"{name}: pip exit {installed.returncode} in {time.monotonic() - started:.1f} s")
            print(installed.stdout + installed.stderr, flush=True)
            if installed.returncode == 0:
                (done / f"{name}.ok").touch()
            (done / name).touch()
            continue
        with tempfile.TemporaryDirectory(prefix=f"ahead-{name}-") as base:
            try:
                root = prepare(name, Path(base))
                if root is not None:
                    engine.build_project(locate(root), environ=build_env(ccache_dir))
                print(f"{name}: done in {time.monotonic() - started:.1f} s", flush=True)
            except Exception:  # the fixture's own build reports it
                traceback.print_exc()
        (done / name).touch()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
