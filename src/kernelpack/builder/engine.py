"""The build: plan -> ONE ninja graph -> run -> staged libraries -> build record.

`compile_plan()` does the work under the build-tree lock and leaves every library staged in
the build folder (`lib/<kernel>/_C<suffix>`); `install_inplace()` copies them into the
package atomically and writes `<pkg>/_kernelpack.json`; the wheel builder packs the staged
files instead. A failed compile raises `BuildError` before anything is installed, so the
previous libraries stay untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
import sysconfig
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from kernelpack.builder import compiler_cache, graph, install, modinit, symbols
from kernelpack.builder import ninja as ninja_runner
from kernelpack.builder.compiler_cache import CacheStats
from kernelpack.builder.compiler_cache import session as launcher_session
from kernelpack.builder.diagnostics import Relocator
from kernelpack.builder.flags import kernel_flags, limited_api_hex
from kernelpack.builder.lock import BuildLock, build_lock
from kernelpack.builder.ninja import Step
from kernelpack.conventions import max_jobs
from kernelpack.errors import BuildError
from kernelpack.filekinds import is_header
from kernelpack.plan import BuildPlan, KernelPlan, plan_project
from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import (
    BuildRecord,
    BuiltKernel,
    KernelRecord,
    SelectionRecord,
    SkippedKernel,
    ToolchainRecord,
)

if TYPE_CHECKING:
    from packaging.version import Version

    from kernelpack.manifest import KernelSpec
    from kernelpack.project import Project
    from kernelpack.toolchain import Toolchain

__all__ = [
    "COMPDB_FILENAME",
    "BuildOptions",
    "BuildResult",
    "Output",
    "build_dir_for",
    "build_project",
    "compile_plan",
    "install_inplace",
    "library_name",
    "library_path",
    "sources_sha256",
]

#: The compilation database every build writes into its build folder (clangd, IDEs).
COMPDB_FILENAME = "compile_commands.json"

Output = Literal["quiet", "normal", "verbose"]
"""quiet: only errors; normal: progress and compiler output; verbose: also every command."""

# The module init's atomic writes (the link's temporaries follow the library's name).
_GEN_TEMP = install.temp_of("_C_init.c")


@dataclass(frozen=True)
class BuildOptions:
    """How to carry out a plan: where, and with how many jobs (what to build, with which
    version, Python floor and include folders, the plan itself says)."""

    root: Path
    """Project root: the launcher's base folder (paths below it are cache-portable)."""
    build_dir: Path
    jobs: int | None = None
    """None: the toolchain's budget."""
    stream: TextIO | None = None
    """Where progress and compiler output go (default stderr)."""
    environ: Mapping[str, str] | None = None
    output: Output = "normal"
    env_prefix: str = ""
    """The package's env-var prefix (`[tool.kernelpack] env-prefix`), stored in the record so
    that `<PREFIX>_DISABLE` works at run time; empty: the package name upper-cased."""


@dataclass(frozen=True)
class BuildResult:
    """A finished build: the record and the staged library of each built kernel."""

    plan: BuildPlan
    record: BuildRecord
    libraries: dict[str, Path]
    """Kernel name -> staged library (absolute path in the build folder)."""
    steps: tuple[Step, ...]
    """Graph steps this run executed (empty for a no-op build), with their times."""
    seconds: float
    build_dir: Path | None = None
    """The build folder (absolute) that holds the staged libraries."""
    cache: CacheStats | None = None
    """What the compiler cache did in this build (None: no launcher, or nothing compiled)."""
    generated: dict[str, Path] = field(default_factory=dict)
    """Generated package file (path relative to the package, e.g. `_ops.py`) -> staged copy."""

    @property
    def compiled(self) -> tuple[Step, ...]:
        """Compile steps only (no links)."""
        return tuple(s for s in self.steps if s.tool != "link")


def library_name(kernel: KernelPlan) -> str:
    """`_C.abi3.so` for a stable kernel, `_C<EXT_SUFFIX>` (e.g. `.cpython-311-…so`) else
    (`_C` is the kernel's module name: another for a `build.toml` project's library)."""
    if kernel.spec.abi == "stable":
        return f"{kernel.spec.module}.abi3.so"
    return kernel.spec.module + str(sysconfig.get_config_var("EXT_SUFFIX"))


def library_path(kernel: KernelPlan, package_dir: Path) -> str:
    """Where the library goes, relative to the package: `rmsnorm/_C.abi3.so` (the kernel's
    folder), or `_relu_1a2b3c4.abi3.so` for a kernel whose folder is the package itself."""
    folder = Path(os.path.relpath(kernel.spec.folder, package_dir))
    return (folder / library_name(kernel)).as_posix()


def sources_sha256(spec: KernelSpec, package_dir: Path) -> str:
    """SHA-256 over the kernel's sources and the headers in its folder and include dirs.

    Each file contributes its path relative to the package (`../../csrc/x.cu` for a source
    outside it, as in a `build.toml` project) and its bytes, so the digest is the same in
    every clone. Recorded per built kernel; `kernelpack status` compares it with the
    sources of an in-place build to say when they changed since.
    """
    files = set(spec.sources)
    for folder in (spec.folder, *spec.include_dirs):
        if folder.is_dir():
            files.update(p for p in folder.rglob("*") if is_header(p) and p.is_file())
    digest = hashlib.sha256()
    for path in sorted(files):
        name = Path(os.path.relpath(path, package_dir)).as_posix()
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def compile_plan(plan: BuildPlan, options: BuildOptions) -> BuildResult:
    """Compile every kernel `plan` builds; stage their libraries; return the record."""
    started = time.monotonic()
    toolchain = plan.toolchain
    package_dir = plan.manifest.package_dir
    build_dir = options.build_dir.absolute()
    environ = dict(os.environ if options.environ is None else options.environ)
    to_build = plan.to_build
    libraries: dict[str, Path] = {}
    steps: tuple[Step, ...] = ()
    stats: CacheStats | None = None
    cap = max_jobs(environ)
    jobs = options.jobs or toolchain.jobs
    if cap is not None:
        jobs = min(jobs, cap)
    stream = options.stream
    settings = _settings_line(plan, jobs, cap, verbose=options.output == "verbose")
    if settings is not None and options.output != "quiet":
        (stream if stream is not None else sys.stderr).write(settings + "\n")
    with build_lock(build_dir) as lock:
        _remove_stale_temps(plan, build_dir)
        generated = _write_generated(plan, build_dir)
        if to_build:
            if toolchain.nvcc is None:
                raise BuildError("nvcc is needed to build kernels but none was found")
            nodes = []
            for kernel in to_build:
                headers = _write_headers(kernel, build_dir)
                if headers:
                    kernel = replace(kernel, dep_include_dirs=(*headers, *kernel.dep_include_dirs))
                flags = kernel_flags(kernel, toolchain, limited_api=plan.python_floor)
                sources = [s for s in kernel.spec.sources if not is_header(s)]
                if not modinit.defines_module_init(sources):
                    sources.append(_write_modinit(kernel, build_dir, plan.python_floor))
                library = f"lib/{kernel.name}/{library_name(kernel)}"
                libraries[kernel.name] = build_dir / library
                nodes.append(
                    graph.GraphKernel(
                        name=kernel.name,
                        sources=tuple(sources),
                        flags=flags,
                        library=library,
                        package_dir=package_dir,
                        root=options.root.absolute(),
                    )
                )
            root = options.root.absolute()
            nvcc = toolchain.nvcc
            # A multi-arch kernel's compiles run several nvcc threads each: fewer at once.
            threads = max(node.flags.threads for node in nodes)
            pools = graph.Pools.for_memory(jobs, toolchain.memory, threads=threads)

            def render(launcher: Path | None) -> None:
                text = graph.render(
                    nodes,
                    build_dir=build_dir,
                    root=root,
                    nvcc=nvcc,
                    cxx=environ.get("CXX", "c++"),
                    cc=environ.get("CC", "cc"),
                    launcher=launcher,
                    pools=pools,
                    nvcc_prepend=shlex.split(environ.get("NVCC_PREPEND_FLAGS", "")),
                    nvcc_append=shlex.split(environ.get("NVCC_APPEND_FLAGS", "")),
                )
                _write_if_changed(build_dir / graph.FILENAME, text)

            render(toolchain.launcher)
            env = ninja_runner.environment(environ, root=root, launcher=toolchain.launcher)
            work = ninja_runner.has_work(build_dir, env)
            # The launcher's server (sccache) lives for this ninja run only, outside its loop.
            with launcher_session(
                toolchain.launcher, env, stream=options.stream, active=work
            ) as cache:
                if cache.launcher != toolchain.launcher:
                    render(cache.launcher)  # the launcher could not start: compile without it
                entries = ninja_runner.compdb(build_dir, cache.env)
                _write_compdb(build_dir, entries)
                steps = _run_ninja(
                    build_dir,
                    libraries,
                    lock,
                    jobs=jobs,
                    env=cache.env,
                    options=options,
                    commands={e["output"]: e["command"] for e in entries},
                )
            _check_symbols(to_build, libraries, toolchain, build_dir)
            stats = cache.stats
            if stats is not None and options.output != "quiet":
                out = options.stream if options.stream is not None else sys.stderr
                out.write(stats.line() + "\n")
                out.flush()
            if work:
                compiler_cache.save(stats, build_dir)
            else:
                # Nothing compiled: the libraries (and so the record) are the last build's.
                stats = compiler_cache.load(build_dir)
        else:
            _write_compdb(build_dir, [])
        record = BuildRecord(
            package=plan.manifest.package,
            version=plan.version,
            toolchain=_toolchain_record(plan),
            kernels={k.name: _kernel_record(k, package_dir) for k in plan.kernels},
            selection=_selection_record(plan, cap, environ),
            env_prefix=options.env_prefix,
            cache=None if stats is None else stats.record(),
        )
    return BuildResult(
        plan=plan,
        record=record,
        libraries=libraries,
        generated=generated,
        steps=steps,
        seconds=time.monotonic() - started,
        build_dir=build_dir,
        cache=stats,
    )


def _run_ninja(
    build_dir: Path,
    libraries: Mapping[str, Path],
    lock: BuildLock,
    *,
    jobs: int,
    env: Mapping[str, str],
    options: BuildOptions,
    commands: Mapping[str, str],
) -> tuple[Step, ...]:
    """Run the graph; a staged library that is not whole (truncated in the build folder
    after its link, say) is removed and linked again, once. `commands` (output -> command
    line) are printed in verbose output."""

    def run(targets: tuple[str, ...] = ()) -> tuple[Step, ...]:
        result = ninja_runner.run(
            build_dir,
            jobs=jobs,
            env=env,
            targets=targets,
            stream=options.stream,
            on_failure=lambda failed, output: _failure_message(failed, output, build_dir),
            on_start=lock.record_child,
            commands=commands if options.output == "verbose" else None,
            quiet=options.output == "quiet",
            relocate=Relocator.here(build_dir).line,
        )
        return tuple(result.steps)

    steps = run()
    broken = _broken_libraries(libraries)
    if broken:
        for kernel in broken:
            _unlink(libraries[kernel])
        steps += run(tuple(libraries[k].relative_to(build_dir).as_posix() for k in broken))
        for kernel, problem in _broken_libraries({k: libraries[k] for k in broken}).items():
            raise BuildError(
                f"kernel {kernel!r}: the linked library {libraries[kernel]}: {problem}"
            )
    return steps


def _check_symbols(
    kernels: Sequence[KernelPlan],
    libraries: Mapping[str, Path],
    toolchain: Toolchain,
    build_dir: Path,
) -> None:
    """`symbols.check_library` on every library built (each build, no-op ones too, so a
    refused library stays refused); the first problem is a one-line `BuildError`."""
    extension = toolchain.torch_extension
    include_dirs = [Path(d) for d in extension.include_dirs] if extension else []
    shims: dict[str, Version] = {}
    for include in include_dirs:
        if (include / symbols.SHIM_HEADERS[0]).is_file():
            shims = symbols.shim_versions(include)
            break
    for kernel in kernels:
        library = libraries[kernel.name]
        spec = kernel.spec
        problem = symbols.check_library(
            library,
            stable_target=spec.stable_target if spec.abi == "stable" else None,
            torch_version=toolchain.torch_version,
            shims=shims,
            shown=f"kernel {kernel.name!r}",
        )
        if problem is not None:
            raise BuildError(problem)


def _broken_libraries(libraries: Mapping[str, Path]) -> dict[str, str]:
    """Kernel -> why its staged library is not a whole shared library."""
    problems = {k: install.library_problem(p) for k, p in libraries.items()}
    return {k: problem for k, problem in problems.items() if problem is not None}


def _remove_stale_temps(plan: BuildPlan, build_dir: Path) -> None:
    """Remove the temporary files of writes a killed build left in the package and the
    build folder (they would otherwise end up in wheels and sdists)."""
    package_dir = plan.manifest.package_dir
    install.remove_stale_temps(package_dir, install.temp_of(RECORD_FILENAME))
    for kernel in plan.kernels:
        module = kernel.spec.module
        library_temp = (
            install.LIBRARY_TEMP if module == "_C" else install.temp_of(library_name(kernel))
        )
        install.remove_stale_temps(kernel.spec.folder, library_temp)
        link_temp = re.compile(re.escape(module) + r"(\.[^/]*)?\.so\.tmp")
        install.remove_stale_temps(build_dir / "lib" / kernel.name, link_temp)
        gen_temp = _GEN_TEMP if module == "_C" else install.temp_of(f"{module}_init.c")
        install.remove_stale_temps(build_dir / "gen" / kernel.name, gen_temp)
    for relative in plan.manifest.generated:
        where = (package_dir / relative).parent
        install.remove_stale_temps(where, install.temp_of(Path(relative).name))
    install.remove_stale_temps(build_dir, install.temp_of(graph.FILENAME))


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise BuildError(f"{path}: cannot remove it: {exc.strerror}") from None


def build_dir_for(project: Project) -> Path:
    """The build folder of a project: `<root>/build/kernelpack`."""
    return project.root / "build" / "kernelpack"


def build_project(
    project: Project,
    *,
    kernels: frozenset[str] | None = None,
    require: bool | None = None,
    jobs: int | None = None,
    build_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    output: Output = "normal",
) -> BuildResult:
    """Plan and compile `project`'s kernels. Nothing is installed: see `install_inplace`
    and `kernelpack.backend.wheel`."""
    env = dict(os.environ if environ is None else environ)
    options = BuildOptions(
        root=project.root,
        build_dir=build_dir or build_dir_for(project),
        jobs=jobs,
        stream=stream,
        environ=env,
        output=output,
        env_prefix=project.env_prefix,
    )
    return compile_plan(plan_project(project, env, kernels=kernels, require=require), options)


def install_inplace(result: BuildResult) -> list[Path]:
    """Copy each staged library into `<pkg>/<kernel>/` and write `<pkg>/_kernelpack.json`.

    Each copy is atomic; a library of another ABI left from an earlier build (e.g. a classic
    `_C.cpython-311-….so` that would shadow a new `_C.abi3.so`) is removed afterwards.
    Returns the files that changed.
    """
    with build_lock(result.build_dir) if result.build_dir else nullcontext():
        try:
            return _install(result)
        except OSError as exc:
            raise BuildError(f"{exc.filename or 'install'}: {exc.strerror or exc}") from None


def _install(result: BuildResult) -> list[Path]:
    package_dir = result.plan.manifest.package_dir
    changed: list[Path] = []
    for name, staged in result.libraries.items():
        kernel = result.plan.kernel(name)
        destination = package_dir / library_path(kernel, package_dir)
        if install.install_library(staged, destination):
            changed.append(destination)
        stale = re.compile(rf"^{re.escape(kernel.spec.module)}(\..*)?\.so$")
        for other in destination.parent.iterdir():
            if other != destination and stale.match(other.name):
                other.unlink()
                changed.append(other)
    for relative, staged in result.generated.items():
        destination = package_dir / relative
        if install.install_file(staged, destination):
            changed.append(destination)
    record_path = package_dir / RECORD_FILENAME
    text = result.record.dumps()
    if _read_bytes(record_path) != text.encode("utf-8"):
        result.record.write(record_path)
        changed.append(record_path)
    return changed


def _kernel_record(kernel: KernelPlan, package_dir: Path) -> KernelRecord:
    spec = kernel.spec
    if kernel.skip is not None:
        return SkippedKernel(reason=kernel.skip, namespace=spec.ops)
    stable = spec.abi == "stable"
    return BuiltKernel(
        abi="stable" if stable else "torch",
        stable_target=(
            f"{spec.stable_target.major}.{spec.stable_target.minor}" if stable else None
        ),
        archs=tuple(str(a) for a in kernel.archs),
        ptx=spec.ptx,
        library=library_path(kernel, package_dir),
        sources_sha256=sources_sha256(spec, package_dir),
        namespace=spec.ops,
    )


def _toolchain_record(plan: BuildPlan) -> ToolchainRecord:
    tc = plan.toolchain
    return ToolchainRecord(
        nvcc=str(tc.nvcc_version) if tc.nvcc_version else None,
        cuda=str(tc.cuda) if tc.cuda else None,
        torch=str(tc.torch_version) if tc.torch_version else None,
        torch_cuda=str(tc.torch_cuda) if tc.torch_cuda else None,
        cxx11_abi=tc.cxx11_abi,
        python=tc.python,
        machine=tc.machine,
    )


def _write_compdb(build_dir: Path, entries: list[dict[str, str]]) -> None:
    """`compile_commands.json`: ninja's entries of the compile steps (links are no
    compilation), with the real command lines."""
    compiles = [e for e in entries if not e.get("output", "").startswith("lib/")]
    _write_if_changed(build_dir / COMPDB_FILENAME, json.dumps(compiles, indent=2) + "\n")


def _settings_line(plan: BuildPlan, jobs: int, cap: int | None, *, verbose: bool) -> str | None:
    """`MAX_JOBS=2: 2 jobs; TORCH_CUDA_ARCH_LIST=9.0: rmsnorm 9.0a, moe none (not-selected)`;
    None when neither variable is set (verbose: always a line)."""
    if cap is None and plan.archs is None and not verbose:
        return None
    parts = [
        f"MAX_JOBS={cap}: {_jobs(jobs)}" if cap is not None else f"{_jobs(jobs)} (MAX_JOBS unset)"
    ]
    if plan.archs is None:
        parts.append("archs as declared (TORCH_CUDA_ARCH_LIST and KERNELPACK_ARCH unset)")
    else:
        shown = []
        for kernel in plan.kernels:
            if kernel.build:
                shown.append(f"{kernel.name} {' '.join(str(a) for a in kernel.archs)}")
            elif (
                kernel.skip is not None and kernel.skip.code == "not-selected" and not kernel.archs
            ):
                shown.append(f"{kernel.name} none (not-selected)")
        parts.append(f"{plan.archs.describe()}: {', '.join(shown) or 'no kernel'}")
    return "kernelpack: " + "; ".join(parts)


def _selection_record(
    plan: BuildPlan, cap: int | None, environ: Mapping[str, str]
) -> SelectionRecord | None:
    listed = environ.get("TORCH_CUDA_ARCH_LIST", "").strip() or None
    wanted = environ.get("KERNELPACK_ARCH", "").strip() or None
    if cap is None and listed is None and wanted is None:
        return None
    native: tuple[str, ...] = ()
    archs = plan.archs
    while archs is not None:
        if archs.native:
            native = tuple(f"{major}.{minor}" for major, minor in sorted(archs.capabilities))
        archs = archs.narrower
    return SelectionRecord(
        max_jobs=cap, torch_cuda_arch_list=listed, kernelpack_arch=wanted, native=native
    )


def _write_modinit(kernel: KernelPlan, build_dir: Path, floor: tuple[int, int]) -> Path:
    limited = limited_api_hex(floor) if kernel.spec.abi == "stable" else None
    path = build_dir / "gen" / kernel.name / f"{kernel.spec.module}_init.c"
    _write_if_changed(
        path, modinit.source(kernel.name, limited_api=limited, module=kernel.spec.module)
    )
    return path


def _write_headers(kernel: KernelPlan, build_dir: Path) -> tuple[Path, ...]:
    """Write the kernel's generated headers; return their include folder (if any)."""
    if not kernel.spec.generated_headers:
        return ()
    folder = build_dir / "gen" / kernel.name / "include"
    for name, text in kernel.spec.generated_headers.items():
        _write_if_changed(folder / name, text)
    return (folder,)


def _write_generated(plan: BuildPlan, build_dir: Path) -> dict[str, Path]:
    """Stage the manifest's generated package files (`_ops.py`) in the build folder."""
    staged: dict[str, Path] = {}
    for relative, text in plan.manifest.generated.items():
        path = build_dir / "gen" / "package" / relative
        _write_if_changed(path, text)
        staged[relative] = path
    return staged


def _write_if_changed(path: Path, text: str) -> None:
    """Atomic write that leaves an identical file (and its mtime) alone.

    Whatever the build folder holds at `path` (another encoding, a folder) is replaced, or
    is a one-line `BuildError`.
    """
    if _read_bytes(path) == text.encode("utf-8"):
        return
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        what = "is a folder" if path.is_dir() else (exc.strerror or str(exc)).lower()
        raise BuildError(f"{path}: cannot write it: {what}") from None


def _read_bytes(path: Path) -> bytes | None:
    """The content of the regular file `path`; None for anything else."""
    try:
        if not path.is_file():
            return None
        return path.read_bytes()
    except OSError:
        return None


def _failure_message(failed: str, output: str, build_dir: Path) -> str:
    """`kernel 'k': <step> failed: <first compiler error line>`."""
    match = re.match(r"(?:obj|lib)/([^/]+)/(.*)", failed)
    if match:
        kernel, rest = match.groups()
        what = f"kernel {kernel!r}: {rest.removesuffix('.o')}"
        verb = "failed to link" if failed.startswith("lib/") else "failed to compile"
    else:
        what, verb = failed, "failed"
    first = next(
        (
            line.strip()
            for line in output.splitlines()
            if re.search(r"\berror\b", line, re.IGNORECASE) and not line.startswith("FAILED:")
        ),
        None,
    )
    detail = f": {first}" if first else f" (see the output above; build folder {build_dir})"
    return f"{what} {verb}{detail}"


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
