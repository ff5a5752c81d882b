"""`build.ninja`: ONE graph holding every kernel of a package.

Each source is one compile edge (nvcc for `.cu`, the host C++ compiler for `.cpp`/`.cc`,
the C compiler for a generated module init) with a depfile (`deps = gcc`), so a header edit
rebuilds exactly its includers; the full command line is on the edge, so a flag change
rebuilds too. An nvcc edge's `--threads N` is its own `threads` variable, as the memory plan
allows (`Pools`): a plan that lowers it rebuilds the edges whose value changes, no other.
Each kernel links into `lib/<kernel>/_C<suffix>` through a temporary name.

Paths below the project root are written relative to the build folder (where ninja runs), so
that the compiler launcher, with its base folder set to the project root, sees the same
command lines in a fresh clone elsewhere.

Outputs are path-independent and reproducible: every compile maps the project root's
relative spelling away (`-ffile-prefix-map`, through `-Xcompiler` for nvcc's host side), so
`__FILE__` and debug file names are project-relative; every compile seeds the compiler's
"random" names with its object path (`-frandom-seed`); nvcc keeps its intermediate files
beside the object (`-objtemp`: their names reach the object's symbol table, and nvcc's own
temporary names hold its process id); and cudafe++ and cicc, which nvcc hands the source's
absolute path to hash anonymous namespaces with, get the project-relative path instead (the
last `--orig_src_path_name` wins). Two clones at different paths then compile byte-identical
objects, with or without a compiler launcher.

sccache runs nvcc's steps itself and hands them the source's canonical absolute path when it
is given a relative one, which would reach `__FILE__`, and mapping that path away would put
it on the command line (every cache key would then differ between clones). Through sccache,
`.cu` sources below the root are therefore spelled `/proc/self/cwd/.root/<project path>`:
absolute (sccache keeps it as given), the same text in every clone, and resolved by each
process in its own working folder, which is the build folder for ninja, the compilers and
sccache's private server alike (`kernelpack.toolchain.launcher.cache`), where `.root` links
to the project root (`link_root`). No `..` in it, so ninja's depfile paths stay as they are.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from ninja.ninja_syntax import Writer, escape, escape_path

from kernelpack.builder.flags import KernelFlags
from kernelpack.errors import UsageError
from kernelpack.toolchain.launcher import kind_of

__all__ = [
    "CWD_ALIAS",
    "FILENAME",
    "HEAVY_JOB_BYTES",
    "LIGHT_JOB_BYTES",
    "ROOT_LINK",
    "GraphKernel",
    "Pools",
    "Unit",
    "aliases_sources",
    "compiles",
    "link_root",
    "render",
]

FILENAME = "build.ninja"

#: Every process's own working folder, as an absolute path that reads the same in any clone.
CWD_ALIAS = "/proc/self/cwd/"
#: The build folder's link to the project root (sccache's nvcc sources are spelled below it).
ROOT_LINK = ".root"

#: Memory budgeted per compile that includes the full ATen headers: nvcc peaks near 3 GB.
HEAVY_JOB_BYTES = 3 * 1024**3
#: Memory budgeted per compile of the stable-ABI or CUDA headers only: about 1 GB.
LIGHT_JOB_BYTES = 1024**3
_CUDA_SUFFIXES = (".cu",)
_C_SUFFIXES = (".c",)


@dataclass(frozen=True)
class Pools:
    """Concurrent compile slots: heavy (ATen, ~3 GB each) and light (headers only, ~1 GB),
    and the most nvcc threads one compile of each pool runs.

    The one memory model of the build: `-j` (default: the cores) may ask for more jobs than
    memory allows; the pools keep the compiles that include ATen within it while lighter
    ones use every job that fits. A job's memory is one compiler process's (one nvcc thread:
    one `cicc`); a compile of N nvcc threads runs N of them at once."""

    heavy: int
    light: int
    heavy_threads: int | None = None
    """The most nvcc threads (`--threads`) a heavy compile runs; None: each its own (one per
    arch target)."""
    light_threads: int | None = None
    """The same for the light pool."""
    single: frozenset[str] = frozenset()
    """Compiles (outputs) that run with one nvcc thread whatever their pool's cap: after an
    out-of-memory kill, those still to run (`fewer`)."""

    @classmethod
    def for_memory(
        cls,
        jobs: int,
        available_bytes: int | None,
        *,
        heavy_threads: int = 1,
        light_threads: int = 1,
        heavy_bytes: int = HEAVY_JOB_BYTES,
        light_bytes: int = LIGHT_JOB_BYTES,
    ) -> Pools:
        """Bound each pool by `jobs` and by what fits in `available_bytes`.

        `heavy_threads`/`light_threads` are the most nvcc threads a compile of the pool asks
        for (`--threads`, one per arch); `heavy_bytes`/`light_bytes` one thread's memory: the
        estimates, or the peaks the last build measured (`kernelpack.builder.memory`). When
        one compile with all its threads does not fit, its threads are lowered (down to 1)
        until threads x per-thread memory does; then a compile of N threads counts as N jobs
        and N times the memory: slots x threads x per-thread memory stays within
        `available_bytes` and slots x threads within `jobs` (at least 1 slot)."""
        heavy, heavy_threads = _fit(jobs, available_bytes, heavy_threads, heavy_bytes)
        light, light_threads = _fit(jobs, available_bytes, light_threads, light_bytes)
        return cls(
            heavy=heavy, light=light, heavy_threads=heavy_threads, light_threads=light_threads
        )

    def slots(self, pool: str) -> int:
        """The slots of `pool` (`heavy` or `light`)."""
        return self.heavy if pool == "heavy" else self.light

    def cap(self, pool: str, asked: int) -> int:
        """The nvcc threads a compile of `pool` that asks for `asked` runs."""
        most = self.heavy_threads if pool == "heavy" else self.light_threads
        return max(1, asked if most is None else min(asked, most))

    def threads(self, output: str, pool: str, asked: int) -> int:
        """The nvcc threads of compile `output` of `pool`, which asks for `asked`."""
        return 1 if output in self.single else self.cap(pool, asked)

    def fewer(self, pending: Iterable[str] | None) -> Pools:
        """The pools of a retry after an out-of-memory kill: half the slots (at least 1) and
        one nvcc thread for each compile still to run (`pending`; None: unknown, every
        compile). The compiles that finished keep their threads, so their command lines,
        and ninja does not run them again."""
        halved = replace(self, heavy=max(1, self.heavy // 2), light=max(1, self.light // 2))
        if pending is None:
            return replace(halved, heavy_threads=1, light_threads=1)
        return replace(halved, single=self.single | frozenset(pending))


def _fit(jobs: int, available: int | None, threads: int, per_thread: int) -> tuple[int, int]:
    """(slots, threads) of a pool whose compiles ask for `threads` nvcc threads of
    `per_thread` bytes each, within `jobs` and `available` bytes (`Pools.for_memory`)."""
    per_thread = max(1, per_thread)
    threads = max(1, threads)
    if available is not None:
        threads = max(1, min(threads, available // per_thread))
    slots = max(1, jobs // threads)
    if available is not None:
        slots = max(1, min(slots, available // (per_thread * threads)))
    return slots, threads


@dataclass(frozen=True)
class Unit:
    """Sources compiled with flags of their own and linked into their kernel's library (one
    part of a kernel-builder project)."""

    sources: tuple[Path, ...]
    flags: KernelFlags


@dataclass(frozen=True)
class GraphKernel:
    """One kernel's node set: its sources, flags and staged library path."""

    name: str
    sources: tuple[Path, ...]
    """Absolute; may include a generated module init (`.c`) under the build folder."""
    flags: KernelFlags
    library: str
    """Output path relative to the build folder, e.g. `lib/rmsnorm/_C.abi3.so`."""
    package_dir: Path
    root: Path | None = None
    """The project root, for sources outside the package (a `build.toml` project's)."""
    units: tuple[Unit, ...] = ()
    """Further sources with flags of their own, linked into the same library."""

    @property
    def groups(self) -> tuple[Unit, ...]:
        """Every compile group: the kernel's own sources and flags, then its units."""
        return (Unit(self.sources, self.flags), *self.units)

    def object_for(self, source: Path, build_dir: Path) -> str:
        """Object path (relative to the build folder) of one source."""
        for base, prefix in ((self.package_dir, ""), (build_dir, ""), (self.root, "_root/")):
            if base is None:
                continue
            try:
                rel = prefix + source.relative_to(base).as_posix()
            except ValueError:
                continue
            return f"obj/{self.name}/{rel}.o"
        raise ValueError(f"{source} lies outside the project {self.root or self.package_dir}")


def render(
    kernels: Sequence[GraphKernel],
    *,
    build_dir: Path,
    root: Path,
    nvcc: Path,
    cxx: str,
    cc: str,
    launcher: Path | None,
    pools: Pools,
    nvcc_prepend: Sequence[str] = (),
    nvcc_append: Sequence[str] = (),
    measure: Sequence[str] = (),
) -> str:
    """The text of `build.ninja` for `kernels`, built in `build_dir` of project `root`.

    `nvcc_prepend`/`nvcc_append` carry `NVCC_PREPEND_FLAGS`/`NVCC_APPEND_FLAGS` onto the
    command line, where ninja (rebuild on change) and the compiler cache (hash) see them.
    `measure` (the memory shim's words, `kernelpack.builder.memory.shim`) goes in front of
    every compile as `<measure> $out -- <command>`; the launcher never sees it. `pools` are
    the pools' depths and each nvcc compile's threads.
    """

    out = io.StringIO()
    w = Writer(cast(str, out), width=100)  # the stub says str; it takes a text stream
    w.comment("Generated by kernelpack: do not edit (rewritten on every build).")
    w.variable("ninja_required_version", "1.10")
    w.variable("launcher", _words([str(launcher)] if launcher else []))
    w.variable("nvcc", _words([str(nvcc)]))
    w.variable("nvcc_prepend", _words(nvcc_prepend))
    w.variable("nvcc_append", _words(nvcc_append))
    w.variable("cxx", _words([cxx]))
    w.variable("cc", _words([cc]))
    w.variable("measure", _words(measure))
    # `../../` (the root as the build folder spells it) -> ``: project-relative file names.
    # (nvcc splits -Xcompiler values at commas: a folder named with one keeps its prefix.)
    prefix = _root_prefix(build_dir, root)
    prefix_map = [] if "," in prefix else [f"-ffile-prefix-map={prefix}="]
    nvcc_maps = list(prefix_map)
    aliased = aliases_sources(launcher)
    if aliased:
        nvcc_maps.append(f"-ffile-prefix-map={CWD_ALIAS}{ROOT_LINK}/=")
    w.variable("prefix_map", _words(prefix_map))
    w.variable("nvcc_prefix_map", _words([x for m in nvcc_maps for x in ("-Xcompiler", m)]))
    w.newline()
    w.pool("heavy", pools.heavy)
    w.pool("light", pools.light)
    w.newline()
    _write_rules(w, "$measure $out -- " if measure else "")
    for kernel in kernels:
        _write_kernel(w, kernel, build_dir=build_dir, root=root, aliased=aliased, pools=pools)
    w.default([_path(k.library) for k in kernels])
    return out.getvalue()


def _write_rules(w: Writer, front: str) -> None:
    """The compile rules (nvcc, c++, cc: with depfiles, each behind `front`) and the link
    rule."""
    w.rule(
        "nvcc",
        front + "$launcher $nvcc $nvcc_prepend $defines $includes $flags $threads $nvcc_prefix_map"
        " -frandom-seed=$out -objtemp -Xcudafe --orig_src_path_name=$source"
        " -Xcicc --orig_src_path_name=$source -MD -MF $out.d -c $in -o $out $nvcc_append",
        depfile="$out.d",
        deps="gcc",
        description="nvcc $out",
    )
    w.rule(
        "cxx",
        front + "$launcher $cxx $defines $includes $flags $prefix_map -frandom-seed=$out"
        " -MMD -MF $out.d -c $in -o $out",
        depfile="$out.d",
        deps="gcc",
        description="c++ $out",
    )
    w.rule(
        "cc",
        front + "$launcher $cc $defines $includes $flags $prefix_map -frandom-seed=$out"
        " -MMD -MF $out.d -c $in -o $out",
        depfile="$out.d",
        deps="gcc",
        description="cc $out",
    )
    # Link to a temporary name, then rename: an interrupted link never leaves half a library.
    w.rule(
        "link",
        "$cxx -shared $in -o $out.tmp $ldflags && mv -f $out.tmp $out",
        description="link $out",
    )
    w.newline()


def _write_kernel(
    w: Writer, kernel: GraphKernel, *, build_dir: Path, root: Path, aliased: bool, pools: Pools
) -> None:
    """One compile step per source of `kernel` (its rule by suffix) and the link of its
    library; `aliased`: `.cu` sources below the root are spelled below `CWD_ALIAS`."""
    objects = []
    w.comment(f"kernel {kernel.name}")
    for group in kernel.groups:
        objects += _write_group(
            w, kernel, group, build_dir=build_dir, root=root, aliased=aliased, pools=pools
        )
    w.build(
        [_path(kernel.library)],
        "link",
        [_path(o) for o in objects],
        variables={"ldflags": _words(kernel.flags.ldflags)},
    )
    w.newline()


def _write_group(
    w: Writer,
    kernel: GraphKernel,
    group: Unit,
    *,
    build_dir: Path,
    root: Path,
    aliased: bool,
    pools: Pools,
) -> list[str]:
    """One compile step per source of `group`, with the group's flags (an nvcc step's
    threads as `pools` allow); returns the objects."""
    flags = group.flags
    defines = _words(flags.defines)
    includes = _words(
        [f"-I{_relative(Path(d), build_dir=build_dir, root=root)}" for d in flags.include_dirs]
    )
    objects = []
    for source in group.sources:
        obj = kernel.object_for(source, build_dir)
        objects.append(obj)
        spelled = _relative(Path(source), build_dir=build_dir, root=root)
        rule, pool = _rule(source, flags)
        variables = {
            "defines": defines,
            "includes": includes,
            "flags": _words({"nvcc": flags.nvcc, "cc": flags.cc}.get(rule, flags.cxx)),
            "source": _words([_project_name(source, root)]),
        }
        if rule == "nvcc":
            if aliased and not os.path.isabs(spelled):
                spelled = f"{CWD_ALIAS}{ROOT_LINK}/{_project_name(source, root)}"
            threads = pools.threads(obj, "heavy" if flags.heavy else "light", flags.threads)
            # Two words: sccache reads `--threads N` (it runs that many arch compiles at once
            # and keeps the value out of its cache key); `--threads=N` would reach nvcc --dryrun.
            variables["threads"] = _words(["--threads", str(threads)] if threads > 1 else [])
        w.build([_path(obj)], rule, [_path(spelled)], variables=variables, pool=pool)
    return objects


def _rule(source: Path, flags: KernelFlags) -> tuple[str, str | None]:
    """The rule that compiles `source` (`nvcc`, `cc`, `cxx`) and its pool (a generated
    module init's C compile is too small for one)."""
    pool = "heavy" if flags.heavy else "light"
    if source.suffix in _CUDA_SUFFIXES:
        return "nvcc", pool
    if source.suffix in _C_SUFFIXES:
        return "cc", None
    return "cxx", pool


def compiles(kernels: Sequence[GraphKernel], build_dir: Path) -> dict[str, dict[str, int]]:
    """The compiles of each pool (`heavy`, `light`), as `render` writes them: output -> the
    nvcc threads it asks for (one per arch target; 1 for a host compile)."""
    found: dict[str, dict[str, int]] = {"heavy": {}, "light": {}}
    for kernel in kernels:
        for group in kernel.groups:
            for source in group.sources:
                rule, pool = _rule(source, group.flags)
                if pool is not None:
                    threads = group.flags.threads if rule == "nvcc" else 1
                    found[pool][kernel.object_for(source, build_dir)] = threads
    return found


def aliases_sources(launcher: Path | None) -> bool:
    """Whether the graph spells `.cu` sources below `CWD_ALIAS` for `launcher` (sccache: the
    module's docstring says why); the build folder then needs `link_root`."""
    return kind_of(launcher) == "sccache"


def link_root(build_dir: Path, root: Path) -> None:
    """Make (or refresh) `build_dir/ROOT_LINK`, a relative link to `root`, atomically."""
    link = build_dir / ROOT_LINK
    target = _root_prefix(build_dir, root).rstrip("/")
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return
    temporary = build_dir / f"{ROOT_LINK}.{os.getpid()}.tmp"
    temporary.unlink(missing_ok=True)
    os.symlink(target, temporary)
    os.replace(temporary, link)


def _relative(path: Path, *, build_dir: Path, root: Path) -> str:
    """`path` relative to `build_dir` when it lies below `root`, else absolute."""
    path = path.absolute()
    try:
        path.relative_to(root)
    except ValueError:
        return str(path)
    return os.path.relpath(path, build_dir)


def _root_prefix(build_dir: Path, root: Path) -> str:
    """The project root as the graph spells paths below it, relative to the build folder
    and with a trailing slash (`../../`). Never absolute: an absolute path on the command
    line would differ between clones, and so would every cache key."""
    return os.path.relpath(root.absolute(), build_dir.absolute()) + "/"


def _project_name(source: Path, root: Path) -> str:
    """A source's name for nvcc's front ends: project-relative (`pkg/k/k.cu`) below the
    root, else absolute (a file outside the project is the same file in every clone)."""
    source = source.absolute()
    try:
        return source.relative_to(root.absolute()).as_posix()
    except ValueError:
        return source.as_posix()


def _words(words: Sequence[str]) -> str:
    """Words as one ninja variable value: quoted for the shell ninja runs commands with,
    then escaped for ninja (`$` -> `$$`), once each."""
    return escape(" ".join(shlex.quote(_one_line(word)) for word in words))


def _path(path: str) -> str:
    """A path as a ninja build input or output (`$`, space and `:` escaped)."""
    return escape_path(_one_line(path))


def _one_line(text: str) -> str:
    """build.ninja has no way to write a newline in a command or a path: refuse one."""
    if "\n" in text or "\r" in text or "\0" in text:
        raise UsageError(
            f"{text!r} holds a newline or NUL, which build.ninja cannot hold; rename the folder"
        )
    return text
