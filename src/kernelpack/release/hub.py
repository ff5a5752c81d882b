"""`kernelpack export --hub OUT`: the Hugging Face Hub layout of what this machine builds.

Hugging Face's loader (the `kernels` package: `get_kernel`, `get_local_kernel`,
`LOCAL_KERNELS=`) loads `OUT/build/<variant>/`, imported by path as the module
`metadata.json`'s `id`. For each backend this machine builds, the project is built once more
with every op namespace (and a `build.toml` project's library module) set to that id, so two
versions of a kernel load side by side in one process, and the variant folder gets:

- the package's Python files (as the wheel ships them; every file of a `[torch-noarch]`
  package, as kernel-builder copies it) and the generated ones: a self-contained `_ops.py` for
  a `build.toml` project, the stand-ins of skipped kernels;
- the libraries and the build record (`_kernelpack.json`, with each library's digest);
- the compat subfolder `<python name>/__init__.py`, the same module under its Python name,
  unless the package has a module or subpackage of that name (einops' `einops.py`), which the
  folder would shadow; `kernels` loads the variant's own `__init__.py` first;
- `metadata.json`: id, name, version, license, `python-depends` (kernel-builder's names, the
  backend's own included, which `kernels` checks are importable), backend with its archs,
  the SHA-256 of every file (as `kernels`' own `Digest.hash_variant` computes them) and
  provenance (the builder, the kernel source's git commit when known).

Variant names are the ones `kernels` parses: `torch-stable-abi<MAJ><MIN>-<cu<XYZ>|cpu>-<arch>-
linux` for an all-stable build, `torch<XY>-cxx11-<cu<XYZ>|cpu>-<arch>-linux` otherwise (also
for a stable build whose torch bounds exclude torch versions the stable name would claim), and
`torch-<backend>` for each backend a `[torch-noarch]` kernel-builder project lists (`torch-cpu`,
`torch-cuda`, `torch-metal`, …: Python only, so every one is written here).

Each variant is written into a temporary folder inside OUT and renamed into place: an
interrupted export leaves no half variant. OUT must be new, empty or an earlier export.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from packaging.version import InvalidVersion, Version

from kernelpack import __version__
from kernelpack.backend.wheel import package_files
from kernelpack.builder import engine
from kernelpack.builder.outputs import STUB_HEADER, BuildResult, library_path
from kernelpack.errors import UsageError
from kernelpack.plan import BuildPlan, KernelPlan, plan_project
from kernelpack.project import buildtoml
from kernelpack.project._toml import display_path
from kernelpack.project.buildtoml.model import Noarch
from kernelpack.project.locate import Project
from kernelpack.project.manifest import Manifest
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME

__all__ = ["METADATA", "SIGNATURE", "Variant", "export_hub", "hub_name", "variant_digest"]

#: The file `kernels` reads in each variant folder.
METADATA = "metadata.json"
#: Its sigstore bundle (`kernels verify-signature` checks it), written by the publishing job.
SIGNATURE = "metadata.json.sigstore"
_TEMP_PREFIX = ".kernelpack-export-"


@dataclass(frozen=True)
class Variant:
    """One build variant: its folder name and the kernels it holds."""

    name: str
    """`torch-stable-abi210-cu130-x86_64-linux`, `torch214-cxx11-cpu-x86_64-linux`, …"""
    backend: str
    """`cuda` or `cpu`: `metadata.json`'s `backend.type`."""
    kernels: tuple[KernelPlan, ...]


def hub_name(project: Project) -> str:
    """The kernel's Hub name (`kernels`' `KernelName`: lower case, digits, dashes)."""
    return project.package.replace("_", "-").lower()


def variant_digest(folder: Path) -> dict[str, str]:
    """Relative path -> base64 SHA-256 of every file of a variant folder but `metadata.json`,
    its signature bundle and bytecode: what `kernels.Digest.hash_variant(SHA256, folder)`
    computes (the export's test checks it against that function)."""
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if (
            not path.is_file()
            or rel.as_posix() in (METADATA, SIGNATURE)
            or "__pycache__" in rel.parts
            or rel.suffix == ".pyc"
        ):
            continue
        digest = hashlib.sha256(path.read_bytes()).digest()
        files[rel.as_posix()] = base64.b64encode(digest).decode("ascii")
    return files


def export_hub(
    project: Project,
    out: Path,
    *,
    environ: Mapping[str, str] | None = None,
    jobs: int | None = None,
    stream: TextIO | None = None,
) -> list[Path]:
    """Build and write every variant this machine builds into `out/build/`; return their
    folders. Bad input (`out` holding other files, a name that is no Python identifier, no
    variant buildable here) is a one-line `UsageError` before anything is written."""
    env = dict(os.environ if environ is None else environ)
    out = out.absolute()
    _check_out(out)
    if not project.package.isidentifier():
        raise UsageError(
            f"{display_path(project.manifest_path)}: the package name {project.package!r} is "
            "not a Python identifier; the Hub imports the kernel by its name"
        )
    plan = plan_project(project, env)
    manifest = plan.manifest
    noarch = not manifest.kernels and "_ops.py" in manifest.generated
    variants = _noarch_variants(project) if noarch else _variants(plan)
    if not variants:
        skips = "; ".join(
            f"{k.name}: {k.skip.code}, {k.skip.message}" for k in plan.skipped if k.skip
        )
        raise UsageError(
            f"{display_path(project.manifest_path)}: no Hub variant can be built on this "
            f"machine ({skips or 'no kernel'})"
        )
    written = []
    for variant in variants:
        written.append(_export_variant(project, plan, variant, out, env, jobs, stream))
    return written


def _check_out(out: Path) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise UsageError(f"{display_path(out)}: exists and is not a folder; expected a new folder")
    others = [p.name for p in out.iterdir() if p.name != "build"]
    build = out / "build"
    if build.is_dir():
        others += [
            f"build/{p.name}"
            for p in build.iterdir()
            if not (p.is_dir() and (p / METADATA).is_file())
        ]
    elif build.exists():
        others.append("build")
    if others:
        raise UsageError(
            f"{display_path(out)}: exists with other content ({', '.join(sorted(others)[:3])}); "
            "expected a new or empty folder, or an earlier export"
        )


def _variants(plan: BuildPlan) -> list[Variant]:
    built = plan.to_build
    if not built:
        return []
    groups: list[tuple[str, tuple[KernelPlan, ...]]]
    if plan.manifest.path.name == buildtoml.BUILD_TOML:
        groups = [(k.spec.backend, (k,)) for k in built]  # one library per backend
    else:
        cuda = any(k.spec.backend == "cuda" for k in built)
        groups = [("cuda" if cuda else "cpu", built)]
    return [
        Variant(_variant_name(plan, kernels, backend), backend, kernels)
        for backend, kernels in groups
    ]


def _variant_name(plan: BuildPlan, kernels: tuple[KernelPlan, ...], backend: str) -> str:
    toolchain = plan.toolchain
    if backend == "cuda":
        cuda = toolchain.cuda or toolchain.torch_cuda
        if cuda is None:
            raise UsageError("no CUDA version is known here (no nvcc, torch without CUDA)")
        device = f"cu{cuda.major}{cuda.minor}"
    else:
        device = "cpu"
    platform = f"{device}-{toolchain.machine}-linux"
    specs = [k.spec for k in kernels]
    torch = toolchain.torch_version
    if all(spec.abi == "stable" for spec in specs):
        target = max(spec.stable_target for spec in specs)
        lowest = max((s.min_torch for s in specs if s.min_torch is not None), default=target)
        bounded = any(s.max_torch is not None for s in specs) or lowest > target
        if not bounded or torch is None:
            return f"torch-stable-abi{target.major}{target.minor}-{platform}"
        # The stable name claims every torch >= target; the project excludes some of them.
    if torch is None:
        raise UsageError("torch is needed to name a Hub variant; install torch")
    abi = "cxx11" if toolchain.cxx11_abi else "cxx98"
    return f"torch{torch.major}{torch.minor}-{abi}-{platform}"


def _noarch_variants(project: Project) -> list[Variant]:
    backends = buildtoml.read(project.manifest_path).backends
    return [Variant(f"torch-{b}", b, ()) for b in sorted(backends)]


def _export_variant(
    project: Project,
    plan: BuildPlan,
    variant: Variant,
    out: Path,
    env: dict[str, str],
    jobs: int | None,
    stream: TextIO | None,
) -> Path:
    kernel_id = _kernel_id(project, plan, variant)
    variant_plan = _variant_plan(plan, variant, kernel_id)
    result = None
    if variant.kernels:
        options = engine.BuildOptions(
            root=project.root,
            build_dir=project.root / "build" / "kernelpack-hub" / variant.name,
            jobs=jobs,
            stream=stream,
            env_prefix=project.env_prefix,
        )
        result = engine.compile_plan(variant_plan, options)
    out.mkdir(parents=True, exist_ok=True)
    temp = out / f"{_TEMP_PREFIX}{os.getpid()}-{variant.name}"
    shutil.rmtree(temp, ignore_errors=True)
    try:
        _fill(temp, project, variant_plan, result, kernel_id, variant)
        destination = out / "build" / variant.name
        destination.parent.mkdir(exist_ok=True)
        old = out / f"{_TEMP_PREFIX}{os.getpid()}-old-{variant.name}"
        if destination.exists():
            destination.rename(old)
        temp.rename(destination)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return destination


def _kernel_id(project: Project, plan: BuildPlan, variant: Variant) -> str:
    """`_<python name>_<7 hex digits>`: unique per version, variant and sources, so two builds
    load side by side (kernel-builder derives it from the git revision)."""
    from kernelpack.builder.outputs import sources_sha256

    digest = hashlib.sha256(f"{project.package}\0{project.version}\0{variant.name}".encode())
    for kernel in variant.kernels:
        digest.update(sources_sha256(kernel.spec, plan.manifest.package_dir).encode())
    digest.update(__version__.encode())
    return f"_{project.package}_{digest.hexdigest()[:7]}"


def _variant_plan(plan: BuildPlan, variant: Variant, kernel_id: str) -> BuildPlan:
    """The plan of one variant: its kernels' op namespaces (and a `build.toml` library's
    module) set to the id; a `build.toml` project's `_ops.py` made self-contained."""
    manifest: Manifest = plan.manifest
    chosen = {k.name for k in variant.kernels}
    is_build_toml = manifest.path.name == buildtoml.BUILD_TOML
    libraries = {buildtoml.KERNEL, buildtoml.CPU_KERNEL}
    kernels: list[KernelPlan] = []
    # Kernels of a kernels.toml package each register their own ops (llm_ops' rmsnorm and
    # silu_mul both define `forward`): one namespace each, under the build's id.
    shared = is_build_toml or len(plan.kernels) == 1
    for kernel in plan.kernels:
        if is_build_toml and kernel.name in libraries and kernel.name not in chosen:
            continue  # the other backend's library: another variant
        namespace = kernel_id if shared else f"{kernel_id}_{kernel.name}"
        spec = replace(kernel.spec, namespace=namespace)
        if is_build_toml and kernel.name in libraries:
            spec = replace(spec, module=kernel_id)
        kernels.append(replace(kernel, spec=spec))
    generated = dict(manifest.generated)
    if is_build_toml:
        generated["_ops.py"] = buildtoml.ops_py(kernel_id, compiled=bool(variant.kernels))
    manifest = replace(manifest, kernels=tuple(k.spec for k in kernels), generated=generated)
    return replace(plan, manifest=manifest, kernels=tuple(kernels))


def _fill(
    folder: Path,
    project: Project,
    plan: BuildPlan,
    result: BuildResult | None,
    kernel_id: str,
    variant: Variant,
) -> None:
    package_dir = project.package_dir
    prefix = f"{project.package}/"
    for file, name in package_files(project, every_file=not variant.kernels):
        rel = name.removeprefix(prefix)
        if file.suffix == ".py" and file.read_bytes().startswith(STUB_HEADER.encode()):
            continue  # a stand-in left by an in-place build; the export writes its own
        _copy(file, folder / rel)
    if result is not None:
        for rel, staged in result.generated.items():
            _copy(staged, folder / rel)
        for name, staged in result.libraries.items():
            _copy(staged, folder / library_path(result.plan.kernel(name), package_dir))
        result.record.write(folder / RECORD_FILENAME)
    else:
        for rel, text in plan.manifest.generated.items():
            _write(folder / rel, text)
    if not _has_own_module(package_dir, project.package):
        _write(folder / project.package / "__init__.py", _compat(kernel_id))
    metadata = _metadata(project, variant, kernel_id, folder)
    _write(folder / METADATA, json.dumps(metadata, indent=2) + "\n")


def _has_own_module(package_dir: Path, name: str) -> bool:
    """Whether the package has a module or subpackage named `name` (`einops/einops.py`): a
    compat folder of that name would shadow it for the package's own `from .einops import`."""
    return (package_dir / name).exists() or (package_dir / f"{name}.py").exists()


def _compat(kernel_id: str) -> str:
    return f"""\
# Generated by kernelpack (as kernel-builder generates it): the kernel under its Python name,
# for loaders that import `build/<variant>/<name>/` rather than the variant folder itself.
import importlib.util
import sys
from pathlib import Path

_ID = {kernel_id!r}
_module = sys.modules.get(_ID)
if _module is None:
    _spec = importlib.util.spec_from_file_location(
        _ID, Path(__file__).resolve().parent.parent / "__init__.py"
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_ID] = _module
    _spec.loader.exec_module(_module)
globals().update({{k: v for k, v in vars(_module).items() if not k.startswith("__")}})
"""


def _metadata(project: Project, variant: Variant, kernel_id: str, folder: Path) -> dict[str, Any]:
    archs = sorted({str(a) for k in variant.kernels for a in k.archs})
    backend: dict[str, Any] = {"type": variant.backend}
    python_depends: list[str] = []
    if project.manifest_path.name == buildtoml.BUILD_TOML:
        facts = buildtoml.read(project.manifest_path)
        python_depends = list(facts.python_depends)
        if variant.backend == "cuda":
            python_depends += [d for d in facts.cuda_python_depends if d not in python_depends]
        if isinstance(facts.framework, Noarch):
            # kernel-builder writes a noarch project's declared archs (none: any device).
            noarch = facts.framework
            declared = {"cuda": noarch.cuda_capabilities, "rocm": noarch.rocm_archs}
            archs = list(declared.get(variant.backend) or ())
    if variant.backend == "cuda" or archs:
        backend["archs"] = archs
    license_ = project.metadata.get("license")
    provenance: dict[str, Any] = {"kernel-builder": {"version": f"kernelpack {__version__}"}}
    git = _git(project.root)
    if git is not None:
        provenance["kernel"] = git
    return {
        "id": kernel_id,
        "name": hub_name(project),
        "version": _major(project.version),
        "license": license_ if isinstance(license_, str) else "NOASSERTION",
        "python-depends": python_depends,
        "backend": backend,
        "digest": {"algorithm": "sha256", "files": variant_digest(folder)},
        "provenance": provenance,
    }


def _major(version: str) -> int:
    try:
        return Version(version).major
    except InvalidVersion:
        return 0


def _git(root: Path) -> dict[str, Any] | None:
    """The kernel source's git commit and whether its tree was dirty, when it is a git tree."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "."],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if len(commit) != 40:
        return None
    return {"commit": commit, "dirty": bool(dirty)}


def _copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)


def _write(destination: Path, text: str) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(text, encoding="utf-8")
