"""The build plan: for each kernel, build (with exact flags) or skip (with a `Reason`).

The one home of planning a project. `plan_project()` gathers the inputs (the selection from
the environment, the manifest, the toolchain, the header dependencies' include folders, the
project's version and Python floor) and returns a complete `BuildPlan`, which the build, the
backend, `doctor`, `ci` and `bazel` read instead of re-deriving any of it. The decisions
themselves are pure: `make_plan()` and `decide()` take a `Manifest`, a `Toolchain` and a
`Selection` and do no I/O.

A kernel is skipped, checking in this order, when it is `not-selected` (not among the kernels
asked for, or none of its archs left by `TORCH_CUDA_ARCH_LIST` / `KERNELPACK_ARCH`), its sources are
missing (`sources-missing`), this platform is excluded (`platform-excluded`), there is no
nvcc (`nvcc-missing`), nvcc's CUDA major differs from torch's (`cuda-mismatch`), nvcc is
older than its `min-cuda` (`cuda-too-old`), or nvcc cannot build one of its archs
(`arch-unsupported`). What makes the decisions impossible to carry out, `BuildPlan.problems()`
(skips under `require`, kernels to build without torch, C++17 against torch 2.14's ATen
headers), is a `PlanError` from `plan()`, raised before anything is compiled; `decide()`
returns the decisions without raising, for reports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from kernelpack.abitag import AbiTag
from kernelpack.errors import KernelpackError, PlanError, SelectionError, UsageError
from kernelpack.project._toml import display_path
from kernelpack.project.manifest import KernelSpec, Manifest, Part
from kernelpack.toolchain import deps
from kernelpack.toolchain.detection import Toolchain, detect
from kernelpack.toolchain.environment import ArchFilter, BuildEnvironment, arch_filter
from kernelpack_runtime.arch import Arch
from kernelpack_runtime.reason import Reason

if TYPE_CHECKING:
    from kernelpack.project.locate import Project

__all__ = [
    "BuildPlan",
    "KernelPlan",
    "PartPlan",
    "Selection",
    "all_stable",
    "decide",
    "default_cxx_std",
    "make_plan",
    "parse_kernels",
    "plan_project",
]

#: From this torch release on, the classic (ATen) headers need C++20.
_ATEN_CXX20_FROM = Version("2.14")


@dataclass(frozen=True)
class Selection:
    """Which kernels to build and whether a skip is an error.

    From the environment: `<PREFIX>_KERNELS=a,b` / `KERNELPACK_KERNELS`, and
    `<PREFIX>_KERNELS_REQUIRE=1` / `KERNELPACK_REQUIRE=1`; CLI flags override.
    """

    kernels: frozenset[str] | None = None
    """None: every kernel."""
    require: bool = False
    origin: str = "--kernels"
    """Where `kernels` came from (an env var or a CLI flag), named in error messages."""
    archs: ArchFilter | None = None
    """The GPUs to build for (`TORCH_CUDA_ARCH_LIST`, `KERNELPACK_ARCH`); None: every arch."""

    @classmethod
    def from_environment(cls, environment: BuildEnvironment) -> Selection:
        """The selection `environment` asks for: `<PREFIX>_KERNELS`, `KERNELPACK_KERNELS`
        (the package's variable wins), `<PREFIX>_KERNELS_REQUIRE` / `KERNELPACK_REQUIRE`,
        `TORCH_CUDA_ARCH_LIST` and `KERNELPACK_ARCH` (`KERNELPACK_ARCH=native` asks NVML for
        this machine's GPUs). Names are checked against the manifest by `plan()`.
        """
        kernels, origin = environment.kernels or (None, "--kernels")
        archs = arch_filter(environment)
        return cls(kernels=kernels, require=environment.require, origin=origin, archs=archs)


def parse_kernels(value: str, name: str) -> frozenset[str]:
    """The kernel names of a `--kernels a,b` flag or setting; a list of no name is a
    `UsageError` naming `name` (an empty variable, by contrast, means every kernel)."""
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    if not names:
        raise UsageError(f"{name} {value!r} names no kernel; expected names such as a,b")
    return names


@dataclass(frozen=True)
class PartPlan:
    """The decision for one part of a kernel (`KernelSpec.parts`): the archs its sources
    are compiled for, with their `-gencode` flags."""

    part: Part
    archs: tuple[Arch, ...]
    gencode_flags: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.part.name


@dataclass(frozen=True)
class KernelPlan:
    """The decision for one kernel."""

    spec: KernelSpec
    skip: Reason | None
    """None: build it."""
    archs: tuple[Arch, ...] = ()
    gencode_flags: tuple[str, ...] = ()
    """`-gencode=…` for every arch (SASS), plus the PTX of the highest arch when `ptx`."""
    cxx_std: int = 17
    dep_include_dirs: tuple[Path, ...] = ()
    """Include folders of the kernel's `depends`, resolved on this machine (`plan_project`)."""
    parts: tuple[PartPlan, ...] = ()
    """The parts compiled into the library, each with its own archs (`KernelSpec.parts`)."""
    left_out: tuple[str, ...] = ()
    """Parts this toolkit leaves out of the library, one line each (below `cuda-minver`)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def build(self) -> bool:
        return self.skip is None


@dataclass(frozen=True)
class BuildPlan:
    """Every kernel's decision, plus what the version, the wheel tag and the flags need."""

    manifest: Manifest
    toolchain: Toolchain
    kernels: tuple[KernelPlan, ...]
    require: bool = False
    """Whether a skip is an error (`Selection.require`); not-selected kernels never are."""
    release: str = "0.0.0"
    """The project's own version (`[project].version`), before the ABI tag."""
    python_floor: tuple[int, int] = (3, 10)
    """Lowest CPython the stable (abi3) libraries load on (`Project.python_floor`)."""
    dep_problems: tuple[str, ...] = ()
    """Header dependencies of kernels to build that cannot be found here, one line each."""
    archs: ArchFilter | None = None
    """The arch narrowing the decisions applied (`Selection.archs`)."""
    environment: BuildEnvironment = field(default_factory=BuildEnvironment)
    """The variables the plan was made under, read once: what the build reads of them."""
    selected: frozenset[str] | None = None
    """The kernels a selection named (`Selection.kernels`; None: every kernel)."""

    @property
    def to_build(self) -> tuple[KernelPlan, ...]:
        return tuple(k for k in self.kernels if k.build)

    @property
    def skipped(self) -> tuple[KernelPlan, ...]:
        return tuple(k for k in self.kernels if not k.build)

    def kernel(self, name: str) -> KernelPlan:
        """The plan of kernel `name`; `KeyError` when the manifest has no such kernel."""
        for kernel in self.kernels:
            if kernel.name == name:
                return kernel
        raise KeyError(name)

    def problems(self) -> tuple[str, ...]:
        """Why these decisions cannot be carried out, one line each (empty when they can):
        required kernels skipped, torch missing, a `cxx-std` torch's headers reject."""
        found: list[str] = []
        left_out = self.left_out_by_archs()
        if left_out:
            names = ", ".join(k.name for k in left_out)
            assert self.archs is not None
            found.append(
                f"{self.archs.describe()} leaves out required kernel(s) {names}: "
                f"{left_out[0].skip.message if left_out[0].skip else ''}; unset it or "
                "widen it for a release build"
            )
        if self.require:
            # Not errors: kernels left out on purpose (not selected, or a build.toml kernel of
            # another backend, which the manifest itself skips).
            skipped = [
                k
                for k in self.skipped
                if k.skip and k.skip.code != "not-selected" and k.spec.skip is None
            ]
            if skipped:
                listing = "; ".join(
                    f"{k.name}: {k.skip.code}, {k.skip.message}" for k in skipped if k.skip
                )
                found.append(f"required kernels would be skipped ({len(skipped)}): {listing}")
        to_build = self.to_build
        if to_build and self.toolchain.torch_missing is not None:
            names = ", ".join(k.name for k in to_build)
            found.append(f"cannot build {names}: {self.toolchain.torch_missing}")
        for kernel in to_build:
            problem = _cxx_std_problem(kernel.spec, self.manifest, self.toolchain)
            if problem is not None:
                found.append(problem)
        found.extend(self.dep_problems)
        return tuple(found)

    def left_out_by_archs(self) -> tuple[KernelPlan, ...]:
        """Under `require`, the kernels an arch selection variable (`TORCH_CUDA_ARCH_LIST`,
        `KERNELPACK_ARCH`) leaves with no arch: a failure of the release build (exit 1),
        never a wheel silently missing them."""
        if not self.require or self.archs is None:
            return ()
        chosen = self.selected
        return tuple(
            k
            for k in self.skipped
            if k.skip is not None
            and k.skip.code == "not-selected"
            and (chosen is None or k.name in chosen)
        )

    def check(self) -> None:
        """Raise `PlanError` with the first of `problems()`, if any (`SelectionError`, exit
        1, when an arch selection variable leaves a required kernel out)."""
        if self.left_out_by_archs():
            raise SelectionError(self.problems()[0])
        problems = self.problems()
        if problems:
            raise PlanError(problems[0])

    @property
    def _abi_specs(self) -> list[KernelSpec]:
        # The kernels that decide the wheel's ABI: those built; all of them when none is.
        return [k.spec for k in self.to_build] or [k.spec for k in self.kernels]

    @property
    def all_stable(self) -> bool:
        """Whether this build is stable ABI (`all_stable` over the kernels to build, or every
        kernel when none is built). Decides the version tag, the wheel's `cp3X-abi3` tag
        and its torch requirement."""
        return all_stable(self._abi_specs)

    @property
    def stable_target(self) -> Version | None:
        """The highest `stable-target` of the kernels deciding the ABI, when all are stable."""
        if not self.all_stable:
            return None
        return max(spec.stable_target for spec in self._abi_specs)

    @property
    def cuda_label(self) -> str:
        """`cu130`: nvcc's CUDA release (torch's when there is no nvcc), `cpu` when neither
        has one."""
        cuda = self.toolchain.cuda or self.toolchain.torch_cuda
        return "cpu" if cuda is None else f"cu{cuda.major}{cuda.minor}"

    @property
    def abi_tag(self) -> AbiTag | None:
        """The ABI label (`cu130torch2.14.1`, `cu130stable2.10`); None for a classic plan
        without torch, which binds to no torch version."""
        label = self.cuda_label
        target = self.stable_target
        if target is not None:
            return AbiTag(
                cuda=label, kind="stable", torch=Version(f"{target.major}.{target.minor}")
            )
        if self.toolchain.torch_version is None:
            return None
        return AbiTag(cuda=label, kind="torch", torch=self.toolchain.torch_version)

    def version_tag(self) -> str:
        """The local version: `cu130torch2.14.1`, or `cu130stable2.10` when all stable.

        The CUDA part is nvcc's release (torch's when there is no nvcc, `cpu` when neither
        has one); a classic plan without torch is tagged with the CUDA part alone.
        """
        tag = self.abi_tag
        return self.cuda_label if tag is None else str(tag)

    @property
    def version(self) -> str:
        """The version a build of this plan carries: `0.3.0+cu130stable2.10`."""
        return f"{self.release}+{self.version_tag()}"


def all_stable(specs: Iterable[KernelSpec]) -> bool:
    """The one rule for "stable ABI": at least one kernel, and every one `abi = "stable"`.

    A build applies it to the kernels it builds (`BuildPlan.all_stable`); a release, which
    builds every kernel (`*_KERNELS_REQUIRE=1`), to the whole manifest (`kernelpack ci`).
    """
    listed = list(specs)
    return bool(listed) and all(spec.abi == "stable" for spec in listed)


def default_cxx_std(spec: KernelSpec, torch_version: Version | None) -> int:
    """The C++ standard a kernel compiles with: its `cxx-std`, else 17 for the stable ABI
    and the lowest standard the installed torch's classic headers accept."""
    if spec.cxx_std is not None:
        return spec.cxx_std
    if spec.compile_rules == "kernel-builder":
        # kernel-builder: C++17 below torch 2.12, C++20 from it (for every ABI)
        return 20 if torch_version is None or torch_version.release >= (2, 12) else 17
    if spec.abi == "stable":
        return 17
    return _classic_min_cxx(torch_version)


def plan_project(
    project: Project,
    environ: Mapping[str, str] | None = None,
    *,
    kernels: frozenset[str] | None = None,
    require: bool | None = None,
    strict: bool = True,
    tools: Toolchain | None = None,
) -> BuildPlan:
    """Plan `project` on this machine: the selection from `environ` (`<PREFIX>_KERNELS`, …,
    overridden by `kernels` and `require`), its manifest, the toolchain (`tools`, else
    detected), each built kernel's header dependencies, its version and Python floor.

    `strict` raises `PlanError` for `BuildPlan.problems()` (a build); without it the plan is
    returned as decided, problems included (a report such as `kernelpack doctor`).
    """
    environment = BuildEnvironment.from_environ(
        os.environ if environ is None else environ, project.env_prefix
    )
    selection = Selection.from_environment(environment)
    if kernels is not None:
        selection = replace(selection, kernels=kernels, origin="--kernels")
    if require is not None:
        selection = replace(selection, require=require)
    manifest = project.load_manifest(allow_missing_sources=True)
    # A build (strict) of CUDA kernels installs the CUDA wheels the toolkit rule asks for;
    # a report does not.
    cuda = any(spec.backend == "cuda" for spec in manifest.kernels)
    tools = tools or detect(environment=environment, provision=strict and cuda)
    decided = decide(manifest, tools, selection)
    planned: list[KernelPlan] = []
    problems: list[str] = []
    for kernel in decided.kernels:
        if kernel.build and kernel.spec.depends:
            try:
                folders = deps.include_dirs(
                    kernel.spec.depends, project.settings, project.root, environment
                )
            except KernelpackError as exc:
                problems.append(f"{kernel.name}: {exc}")
            else:
                kernel = replace(kernel, dep_include_dirs=folders)
        planned.append(kernel)
    result = replace(
        decided,
        kernels=tuple(planned),
        release=project.version,
        python_floor=project.python_floor,
        dep_problems=tuple(problems),
        environment=environment,
    )
    if strict:
        result.check()
    return result


def make_plan(
    manifest: Manifest, toolchain: Toolchain, selection: Selection | None = None
) -> BuildPlan:
    """Decide every kernel; raise `PlanError` when `selection.require` and any kernel skips,
    or when a kernel's settings cannot work with this toolchain (e.g. C++17 with torch 2.14's
    classic ATen headers). Unknown kernel names in `selection` are a `UsageError`."""
    result = decide(manifest, toolchain, selection)
    result.check()
    return result


def decide(
    manifest: Manifest, toolchain: Toolchain, selection: Selection | None = None
) -> BuildPlan:
    """Every kernel's decision without raising for `BuildPlan.problems()` (for reports such
    as `kernelpack doctor`); `make_plan()` is this plus `BuildPlan.check()`."""
    selection = selection or Selection()
    if selection.kernels is not None:
        unknown = sorted(selection.kernels - set(manifest.names))
        if unknown:
            raise UsageError(
                f"{selection.origin} names unknown kernel(s) {', '.join(unknown)}; "
                f"{display_path(manifest.path)} has: {', '.join(manifest.names) or 'none'}"
            )
    kernels = tuple(_decide(spec, toolchain, selection) for spec in manifest.kernels)
    return BuildPlan(
        manifest=manifest,
        toolchain=toolchain,
        kernels=kernels,
        require=selection.require,
        archs=selection.archs,
        selected=selection.kernels,
    )


def _decide(spec: KernelSpec, toolchain: Toolchain, selection: Selection) -> KernelPlan:
    archs = spec.archs_for(toolchain.machine) or ()
    if spec.loose_archs:
        buildable = tuple(a for a in archs if a.sm in toolchain.nvcc_targets)
        archs = buildable or archs  # none left: the arch-unsupported skip names them all
    skip = _skip_reason(spec, archs, toolchain, selection)
    if selection.archs is not None:
        archs = selection.archs.narrow(archs)
    if skip is not None:
        return KernelPlan(spec=spec, skip=skip, archs=archs)
    if spec.parts:
        return _decide_parts(spec, toolchain, selection)
    flags = [arch.gencode() for arch in archs]
    if spec.ptx and archs:
        flags.append(max(archs).ptx_gencode())
    return KernelPlan(
        spec=spec,
        skip=None,
        archs=archs,
        gencode_flags=tuple(flags),
        cxx_std=default_cxx_std(spec, toolchain.torch_version),
    )


def _decide_parts(spec: KernelSpec, toolchain: Toolchain, selection: Selection) -> KernelPlan:
    """A library of parts: each part keeps the archs this nvcc builds, narrowed by the
    selection (a part the selection would leave with none keeps its own: the library needs
    its code to link); a part below its `cuda-minver` is left out, as kernel-builder does."""
    parts: list[PartPlan] = []
    left_out: list[str] = []
    cuda = toolchain.cuda
    for part in spec.parts:
        if part.min_cuda is not None and cuda is not None and cuda < part.min_cuda:
            left_out.append(f"{part.name}: needs CUDA >= {part.min_cuda}, nvcc is CUDA {cuda}")
            continue
        archs = tuple(a for a in part.arch if a.sm in toolchain.nvcc_targets) or part.arch
        if selection.archs is not None:
            archs = selection.archs.narrow(archs) or archs
        flags = [arch.gencode() for arch in archs]
        flags += [
            a.ptx_gencode() for a in archs if a in part.ptx and a.compute in toolchain.nvcc_targets
        ]
        parts.append(PartPlan(part=part, archs=archs, gencode_flags=tuple(flags)))
    union = tuple(sorted({a for p in parts for a in p.archs}))
    return KernelPlan(
        spec=spec,
        skip=None,
        archs=union,
        cxx_std=default_cxx_std(spec, toolchain.torch_version),
        parts=tuple(parts),
        left_out=tuple(left_out),
    )


def _skip_reason(
    spec: KernelSpec, archs: tuple[Arch, ...], toolchain: Toolchain, selection: Selection
) -> Reason | None:
    machine = toolchain.machine
    if selection.kernels is not None and spec.name not in selection.kernels:
        return Reason(
            "not-selected",
            f"not in {selection.origin} ({', '.join(sorted(selection.kernels))})",
        )
    if selection.archs is not None and archs and not selection.archs.narrow(archs):
        return Reason(
            "not-selected",
            f"none of its archs ({', '.join(str(a) for a in archs)}) runs on the GPUs "
            f"of {selection.archs.describe()}",
        )
    if spec.skip is not None:
        return spec.skip
    if spec.missing_sources is not None:
        return Reason("sources-missing", spec.missing_sources)
    if spec.platforms is not None and machine not in spec.platforms:
        return Reason(
            "platform-excluded",
            f"platforms = [{', '.join(spec.platforms)}] excludes this {machine} machine",
        )
    if spec.archs_for(machine) is None:
        return Reason(
            "platform-excluded",
            f"the arch table names no archs for this {machine} machine "
            f"(only {', '.join(sorted(spec.arch))})",
        )
    torch_bounds = _torch_bounds_reason(spec, toolchain)
    if torch_bounds is not None:
        return torch_bounds
    if spec.backend == "cpu":
        return None  # the host C++ compiler builds it: no nvcc, no arch, no CUDA torch
    if toolchain.nvcc_missing is not None or toolchain.cuda is None:
        return toolchain.nvcc_missing or Reason("nvcc-missing", "no usable nvcc")
    cuda = toolchain.cuda
    if toolchain.torch_cuda is not None and toolchain.torch_cuda.major != cuda.major:
        return Reason(
            "cuda-mismatch",
            f"nvcc is CUDA {cuda} but torch {toolchain.torch_version} is built for CUDA "
            f"{toolchain.torch_cuda}; use a CUDA {toolchain.torch_cuda.major} toolkit "
            "(CUDA_HOME) or a torch built for it",
        )
    if (
        spec.abi == "torch"
        and toolchain.torch_missing is None
        and toolchain.torch_version is not None
        and toolchain.torch_cuda is None
    ):
        return Reason(
            "cuda-mismatch",
            f'torch {toolchain.torch_version} is a CPU-only build, so an abi = "torch" '
            "kernel cannot link against it; install a CUDA build of torch",
        )
    if spec.min_cuda is not None and cuda < spec.min_cuda:
        return Reason(
            "cuda-too-old",
            f"needs CUDA >= {spec.min_cuda} (min-cuda), nvcc is CUDA {cuda}",
        )
    if spec.max_cuda is not None and cuda > spec.max_cuda:
        return Reason(
            "cuda-mismatch",
            f"needs CUDA <= {spec.max_cuda} (maxver), nvcc is CUDA {cuda}",
        )
    if selection.archs is not None:
        archs = selection.archs.narrow(archs)  # nvcc needs to build only what is left
    wanted = [arch.sm for arch in archs]
    if spec.ptx and archs:
        wanted.append(max(archs).compute)
    unsupported = [target for target in wanted if target not in toolchain.nvcc_targets]
    if unsupported:
        return Reason(
            "arch-unsupported",
            f"nvcc {cuda} cannot build {', '.join(unsupported)}",
        )
    return None


def _torch_bounds_reason(spec: KernelSpec, toolchain: Toolchain) -> Reason | None:
    """A skip when the torch built against lies outside the kernel's torch bounds (a
    `build.toml` project's `[torch] minver`/`maxver`, compared as major.minor)."""
    torch = toolchain.torch_version
    if torch is None:
        return None
    release = Version(".".join(str(part) for part in torch.release[:2]))
    if (
        spec.compile_rules == "kernel-builder"
        and spec.abi == "stable"
        and release < spec.stable_target
    ):
        # kernel-builder refuses to build a stable target newer than the torch it builds with
        return Reason(
            "platform-excluded",
            f"targets the stable ABI of torch {spec.stable_target}, building against torch "
            f"{torch}, which does not provide it",
        )
    if spec.min_torch is not None and release < spec.min_torch:
        return Reason(
            "platform-excluded",
            f"needs torch >= {spec.min_torch} ([torch].minver), building against torch {torch}",
        )
    if spec.max_torch is not None and release > spec.max_torch:
        return Reason(
            "platform-excluded",
            f"needs torch <= {spec.max_torch} ([torch].maxver), building against torch {torch}",
        )
    return None


def _cxx_std_problem(spec: KernelSpec, manifest: Manifest, toolchain: Toolchain) -> str | None:
    if spec.abi != "torch":
        return None
    needed = _classic_min_cxx(toolchain.torch_version)
    if spec.cxx_std is None or spec.cxx_std >= needed:
        return _flag_std_problem(spec, manifest, toolchain, needed)
    return (
        f"{display_path(manifest.path)}: [{spec.name}].cxx-std: C++{spec.cxx_std} cannot compile "
        f'torch {toolchain.torch_version}\'s ATen headers (abi = "torch"), which need '
        f'C++{needed}; set cxx-std = {needed}, drop the key, or use abi = "stable"'
    )


_STD_FLAG = re.compile(r"--?std=(?:c|gnu)\+\+(\d\d)")


def _flag_std_problem(
    spec: KernelSpec, manifest: Manifest, toolchain: Toolchain, needed: int
) -> str | None:
    """A `-std=c++NN` in a kernel's own flags (kernel-builder's `cuda-flags`, `cxx-flags`),
    below what torch's ATen headers need: the last one on a command line wins, so the
    compile would stop at torch's `#error C++20 or later`."""
    lists = [(f"[{spec.name}]", "nvcc-flags", spec.nvcc_flags)]
    lists.append((f"[{spec.name}]", "cxx-flags", spec.cxx_flags))
    for part in spec.parts:
        lists.append((f"[kernel.{part.name}]", "cuda-flags", part.nvcc_flags))
        lists.append((f"[kernel.{part.name}]", "cxx-flags", part.cxx_flags))
    for table, key, flags in lists:
        found = [m for m in map(_STD_FLAG.fullmatch, flags) if m is not None]
        if found and int(found[-1].group(1)) < needed:
            return (
                f"{display_path(manifest.path)}: {table}.{key}: {found[-1].group(0)} cannot "
                f"compile torch {toolchain.torch_version}'s ATen headers, which need "
                f"C++{needed}; build against torch < {_ATEN_CXX20_FROM} or raise the standard"
            )
    return None


def _classic_min_cxx(torch_version: Version | None) -> int:
    if torch_version is not None and torch_version.release >= _ATEN_CXX20_FROM.release:
        return 20
    return 17
