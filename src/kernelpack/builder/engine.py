"""The build: plan -> ONE ninja graph -> run -> staged libraries -> build record.

`compile_plan()` does the work under the build-tree lock and leaves every library staged in
the build folder (`lib/<kernel>/_C<suffix>`) with the record of the build (`outputs`);
`install.install_inplace()` copies them into the package atomically and writes
`<pkg>/_kernelpack.json`; the wheel builder packs the staged files instead. A failed compile
raises `BuildError` before anything is installed, so the previous libraries stay untouched.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from kernelpack.builder import clangd, graph, install, memory, symbols
from kernelpack.builder import ninja as ninja_runner
from kernelpack.builder.diagnostics import Relocator
from kernelpack.builder.lock import BuildLock, build_lock
from kernelpack.builder.ninja import Step
from kernelpack.builder.nodes import nodes_of, write_if_changed
from kernelpack.builder.outputs import (
    BuildResult,
    build_record,
    library_name,
    unavailable_stub,
    unavailable_stub_path,
)
from kernelpack.errors import BuildError
from kernelpack.plan import BuildPlan, KernelPlan, plan_project
from kernelpack.toolchain.launcher import Choice as LauncherChoice
from kernelpack.toolchain.launcher import cache as compiler_cache
from kernelpack.toolchain.launcher import farm
from kernelpack.toolchain.launcher.cache import CacheStats
from kernelpack.toolchain.launcher.cache import session as launcher_session
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

if TYPE_CHECKING:
    from packaging.version import Version

    from kernelpack.project.locate import Project
    from kernelpack.toolchain.detection import Toolchain

__all__ = [
    "COMPDB_FILENAME",
    "Announce",
    "BuildOptions",
    "Output",
    "build_dir_for",
    "build_project",
    "compile_plan",
]

#: The compilation database every build writes into its build folder (clangd, IDEs).
COMPDB_FILENAME = "compile_commands.json"

Output = Literal["quiet", "normal", "verbose"]
"""quiet: only errors; normal: progress and compiler output; verbose: also every command."""

Announce = Callable[[BuildPlan, int], str | None]
"""Renders the line printed before a build from the plan and its job count (None: no
line); the CLI's is `kernelpack.cli._render.settings_line`."""

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
    output: Output = "normal"
    env_prefix: str = ""
    """The package's env-var prefix (`[tool.kernelpack] env-prefix`), stored in the record so
    that `<PREFIX>_DISABLE` works at run time; empty: the package name upper-cased."""
    index_url: str | None = None
    """`[tool.kernelpack.release] index-url`, recorded for run-time install hints."""
    announce: Announce | None = None
    """The settings line printed before the build (not in quiet output); None: no line."""
    on_work: Callable[[tuple[Step, ...]], None] | None = None
    """Called once before anything compiles, with the steps the build will run (not called
    when there is nothing to do)."""
    oom_counters: tuple[Path, ...] = ()
    """Files whose `oom_kill N` lines count the out-of-memory killer's kills, instead of this
    build's cgroup's (or the machine's): where those files are elsewhere, and in tests. They
    go on every compile's command line."""


def compile_plan(plan: BuildPlan, options: BuildOptions) -> BuildResult:
    """Compile every kernel `plan` builds; stage their libraries; return the record.

    What the environment asks (compilers, nvcc flags, the job cap, the lock timeout) is
    `plan.environment`'s, read when the plan was made."""
    started = time.monotonic()
    build_dir = options.build_dir.absolute()
    jobs = _job_count(plan, options)
    _announce(plan, options, jobs)
    libraries: dict[str, Path] = {}
    steps: tuple[Step, ...] = ()
    stats: CacheStats | None = None
    with build_lock(build_dir, plan.environment.lock_timeout) as lock:
        _remove_stale_temps(plan, build_dir)
        generated = _write_generated(plan, build_dir)
        if plan.to_build:
            cuda = any(k.spec.backend == "cuda" for k in plan.to_build)
            if plan.toolchain.nvcc is None and cuda:
                raise BuildError("nvcc is needed to build CUDA kernels but none was found")
            nvcc = plan.toolchain.nvcc or Path("nvcc")  # CPU kernels only: no edge runs it
            nodes = nodes_of(plan, build_dir, options.root.absolute())
            libraries = {node.name: build_dir / node.library for node in nodes}
            graph_inputs = _GraphInputs(
                nodes, build_dir, options.root.absolute(), nvcc, plan, options.oom_counters
            )
            steps, stats = _compile(plan, graph_inputs, libraries, lock, jobs=jobs, options=options)
            _check_symbols(plan.to_build, libraries, plan.toolchain)
        else:
            _write_compdb(build_dir, [])
        record = build_record(
            plan,
            env_prefix=options.env_prefix,
            cache=stats,
            libraries=libraries,
            index_url=options.index_url,
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


def _job_count(plan: BuildPlan, options: BuildOptions) -> int:
    """The jobs asked for (else the toolchain's budget), at most `MAX_JOBS`."""
    jobs = options.jobs or plan.toolchain.jobs
    cap = plan.environment.max_jobs
    return jobs if cap is None else min(jobs, cap)


def _announce(plan: BuildPlan, options: BuildOptions, jobs: int) -> None:
    if options.output == "quiet":
        return
    out = options.stream if options.stream is not None else sys.stderr
    for note in plan.manifest.notes:
        out.write(f"kernelpack: note: {note}\n")
    for kernel in plan.to_build:
        for left_out in kernel.left_out:
            out.write(f"kernelpack: {kernel.name}: leaves out {left_out}\n")
    settings = options.announce(plan, jobs) if options.announce is not None else None
    if settings is not None:
        out.write(settings + "\n")


@dataclass(frozen=True)
class _GraphInputs:
    """What `build.ninja` is written from, besides the launcher and the pools."""

    nodes: Sequence[graph.GraphKernel]
    build_dir: Path
    root: Path
    nvcc: Path
    plan: BuildPlan
    oom_counters: tuple[Path, ...]

    def write(self, launcher: Path | None, pools: graph.Pools) -> None:
        """Write `build.ninja` (left alone when unchanged); every compile's peak memory is
        measured unless sccache runs it (in its server, out of the shim's sight)."""
        environment = self.plan.environment
        text = graph.render(
            self.nodes,
            build_dir=self.build_dir,
            root=self.root,
            nvcc=self.nvcc,
            cxx=environment.cxx or "c++",
            cc=environment.cc or "cc",
            launcher=launcher,
            pools=pools,
            nvcc_prepend=environment.nvcc_prepend_flags,
            nvcc_append=environment.nvcc_append_flags,
            measure=memory.shim(self.oom_counters) if memory.measurable(launcher) else (),
        )
        if graph.aliases_sources(launcher):
            graph.link_root(self.build_dir, self.root)
        write_if_changed(self.build_dir / graph.FILENAME, text)


def _compile(
    plan: BuildPlan,
    inputs: _GraphInputs,
    libraries: Mapping[str, Path],
    lock: BuildLock,
    *,
    jobs: int,
    options: BuildOptions,
) -> tuple[tuple[Step, ...], CacheStats | None]:
    """Write the graph and run it inside the compiler launcher's session; return the steps
    run and what the cache did (when nothing compiled: the last compiling build's)."""
    launcher = plan.toolchain.launcher
    build_dir = inputs.build_dir
    budget = memory.Budget.for_build(
        graph.compiles(inputs.nodes, build_dir),
        memory.collect(build_dir),  # what a killed build left in the log too
        jobs=jobs,
        available=plan.toolchain.memory,
    )
    if options.output == "verbose":
        why = budget.describe()
        if not memory.measurable(launcher):
            why += "; sccache runs the compiles in its server: not measured"
        _say(options, f"kernelpack: plan: {jobs} jobs; {why}")
    inputs.write(launcher, budget.pools)
    env = ninja_runner.environment(plan.environment, root=inputs.root, launcher=launcher)
    pending = ninja_runner.pending(build_dir, env)
    work = pending is None or bool(pending)
    if pending and options.on_work is not None:
        options.on_work(pending)
    if work:  # the first lines of a build that compiles: which toolkit and launcher, and why
        _say(options, plan.toolchain.toolkit_line())
        _say(options, LauncherChoice(launcher, plan.toolchain.launcher_why).line())
    # The launcher's server (sccache) lives for this ninja run only, outside its loop.
    with launcher_session(
        launcher, env, stream=options.stream, active=work, cwd=build_dir
    ) as cache:
        if cache.launcher != launcher:
            # the launcher could not start: compile without it
            inputs.write(cache.launcher, budget.pools)
        try:
            steps = _run_retrying(cache, inputs, libraries, lock, budget, options=options)
        finally:
            memory.collect(build_dir)
    stats = cache.stats
    if stats is not None and options.output != "quiet":
        out = options.stream if options.stream is not None else sys.stderr
        out.write(stats.line() + "\n")
        out.flush()
    if not work:
        # Nothing compiled: the libraries (and so the record) are the last build's.
        return steps, compiler_cache.load(build_dir)
    compiler_cache.save(stats, build_dir)
    return steps, stats


def _run_retrying(
    cache: compiler_cache.Session,
    inputs: _GraphInputs,
    libraries: Mapping[str, Path],
    lock: BuildLock,
    budget: memory.Budget,
    *,
    options: BuildOptions,
) -> tuple[Step, ...]:
    """Run the graph. A failure that is not the code's runs the rest once more, once for
    each kind: a broken compiler cache without the cache; an out-of-memory kill with half
    the jobs and one nvcc thread per compile (the fewest cicc at once that still builds
    files side by side), whose second kill is the error."""
    retried: set[type[BuildError]] = set()
    while True:
        try:
            return _run_in(
                cache, inputs.build_dir, libraries, lock, jobs=budget.jobs, options=options
            )
        except compiler_cache.CacheFailure as failure:  # the cache broke, not the code
            if compiler_cache.CacheFailure in retried:
                raise
            retried.add(compiler_cache.CacheFailure)
            cache.bypass(cache.failed(failure))
        except memory.OutOfMemory as killed:  # memory ran out, not the code
            if memory.OutOfMemory in retried:
                raise BuildError(budget.exhausted(killed)) from None
            retried.add(memory.OutOfMemory)
            left = ninja_runner.pending(inputs.build_dir, cache.env)
            retry = budget.fewer(None if left is None else [step.output for step in left])
            _say(options, f"kernelpack: {budget.retrying(killed, retry)}")
            budget = retry
        inputs.write(cache.launcher, budget.pools)


def _run_in(
    cache: compiler_cache.Session,
    build_dir: Path,
    libraries: Mapping[str, Path],
    lock: BuildLock,
    *,
    jobs: int,
    options: BuildOptions,
) -> tuple[Step, ...]:
    """`compile_commands.json` for the session's environment, then the graph."""
    entries = [
        {**e, "command": memory.unshim(e["command"])}
        for e in ninja_runner.compdb(build_dir, cache.env)
    ]
    _write_compdb(build_dir, entries)
    linked = clangd.link(build_dir)
    if linked is not None:
        _say(options, f"kernelpack: linked {linked} for clangd (the build's database)")
    return _run_ninja(
        build_dir,
        libraries,
        lock,
        jobs=jobs,
        env=cache.env,
        options=options,
        commands={e["output"]: e["command"] for e in entries},
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
    announce: Announce | None = None,
    on_work: Callable[[tuple[Step, ...]], None] | None = None,
) -> BuildResult:
    """Plan and compile `project`'s kernels. Nothing is installed: see
    `install.install_inplace` and `kernelpack.backend.wheel`."""
    settings = project.settings
    environ = farm.with_settings(
        os.environ if environ is None else environ,
        settings.dist_scheduler,
        settings.dist_token_file,
        project.root,
    )
    options = BuildOptions(
        root=project.root,
        build_dir=build_dir or build_dir_for(project),
        jobs=jobs,
        stream=stream,
        output=output,
        env_prefix=project.env_prefix,
        index_url=project.settings.release.index_url,
        announce=announce,
        on_work=on_work,
    )
    plan = plan_project(project, environ, kernels=kernels, require=require)
    return compile_plan(plan, options)


def _write_compdb(build_dir: Path, entries: list[dict[str, str]]) -> None:
    """`compile_commands.json`: ninja's entries of the compile steps (links are no
    compilation), with the real command lines."""
    compiles = [
        # clangd resolves paths itself: sccache's `/proc/self/cwd/.root/...` sources (see
        # `graph`) as `.root/...`, relative to the entry's folder (the build folder)
        {k: v.replace(graph.CWD_ALIAS, "") for k, v in e.items()}
        for e in entries
        if not e.get("output", "").startswith("lib/")
    ]
    write_if_changed(build_dir / COMPDB_FILENAME, json.dumps(compiles, indent=2) + "\n")


def _write_generated(plan: BuildPlan, build_dir: Path) -> dict[str, Path]:
    """Stage the manifest's generated package files (`_ops.py`) in the build folder."""
    staged: dict[str, Path] = {}
    files = dict(plan.manifest.generated)
    package_dir = plan.manifest.package_dir
    for kernel in plan.skipped:
        if kernel.spec.sources or kernel.spec.missing_sources:
            files[unavailable_stub_path(kernel, package_dir)] = unavailable_stub(
                kernel, package_dir
            )
    for relative, text in files.items():
        path = build_dir / "gen" / "package" / relative
        write_if_changed(path, text)
        staged[relative] = path
    return staged


def _say(options: BuildOptions, line: str) -> None:
    """One line of the build's own output (none when quiet)."""
    if options.output != "quiet":
        out = options.stream if options.stream is not None else sys.stderr
        out.write(line + "\n")
        out.flush()


def _failure_message(failed: str, output: str, build_dir: Path) -> str:
    """`kernel 'k': <step> failed: <first compiler error line>`; `CacheFailure` when the
    compiler launcher (its cache), not the compiler, failed; `OutOfMemory` when the kernel's
    out-of-memory killer ended the compile."""
    problem = compiler_cache.launcher_failure(output)
    if problem is not None:
        raise compiler_cache.CacheFailure(problem)
    match = re.match(r"(?:obj|lib)/([^/]+)/(.*)", failed)
    if match:
        kernel, rest = match.groups()
        what = f"kernel {kernel!r}: {rest.removesuffix('.o')}"
        verb = "failed to link" if failed.startswith("lib/") else "failed to compile"
    else:
        what, verb = failed, "failed"
    peak = memory.killed(build_dir, failed)
    if peak is not None:
        raise memory.OutOfMemory(what, failed, peak)
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
