"""Editable installs that rebuild on import (PEP 660), as meson-python's editable mode does.

`build_editable` compiles in place and ships a wheel with three files besides its metadata:
`_<dist>_editable.pth` (the source tree's parent folder, so the package imports from there),
`_<dist>_editable_hook.py` (a copy of `_editable_hook`, which holds the finder, ending in
`install(...)` with this project's facts) and `_<dist>_editable_hook.pth`
(`import _<dist>_editable_hook`). The finder runs `python -m kernelpack.backend.editable ROOT
--settings JSON` (this module's `main`) when anything changed; it says on stderr what it is
about to compile (`kernelpack: rebuilding rmsnorm (1 file)…`), rebuilds with the settings
the install was made with (config settings and the selection variables, so a shell that sets
other ones does not change what an import builds), installs in place, rewrites the stamp, and
prints one JSON line for the finder: what it compiled, or the error and the compiler's first
error lines.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kernelpack.backend import _editable_hook as hook
from kernelpack.builder import engine, install
from kernelpack.builder.ninja import Step, ninja_binary
from kernelpack.builder.outputs import BuildResult
from kernelpack.errors import KernelpackError
from kernelpack.plan import plan_project
from kernelpack.project.locate import Project, locate
from kernelpack.toolchain.environment import BuildEnvironment, replayed
from kernelpack_runtime._files import write_text_atomic
from kernelpack_runtime.record import FILENAME as RECORD_FILENAME
from kernelpack_runtime.record import BuildRecord, BuiltKernel, InvalidRecord

__all__ = [
    "Snapshot",
    "hook_files",
    "inputs",
    "main",
    "rebuild",
    "settings_for",
    "snapshot",
    "starting_line",
    "write_stamp",
]

#: Compiler output kept for the `ImportError`: from the first error line, this many lines.
_ERROR_LINES = 8
_ERROR_RE = re.compile(r"\berror\b", re.IGNORECASE)
#: Skip reasons that say this process has no toolchain, not that the kernel changed.
_TOOLCHAIN_MISSING = frozenset({"nvcc-missing"})


def settings_for(environment: BuildEnvironment, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a rebuild must reuse: the install's build options (`kernels`, `require`, `jobs`)
    and the variables that change what a build produces, as the install's build read them
    (`BuildEnvironment.fingerprint`; None: unset). `MAX_JOBS`, `PATH` and the launcher are
    not among them: they may differ."""
    recorded: dict[str, Any] = {}
    for key, value in options.items():
        recorded[key] = sorted(value) if isinstance(value, frozenset) else value
    return {"options": recorded, "env": environment.fingerprint()}


def _environment(
    project: Project, settings: Mapping[str, Any], environ: Mapping[str, str]
) -> dict[str, str]:
    """`environ` with the recorded variables as they were at install time (a replayed
    variable that was not recorded, such as a family member set since, is dropped)."""
    recorded: Mapping[str, str | None] = settings.get("env", {})
    env = {
        name: value
        for name, value in environ.items()
        if name in recorded or not replayed(name, project.env_prefix)
    }
    for name, value in recorded.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _options(settings: Mapping[str, Any]) -> dict[str, Any]:
    options = dict(settings.get("options", {}))
    if "kernels" in options:
        options["kernels"] = frozenset(options["kernels"])
    return options


def hook_files(project: Project, settings: Mapping[str, Any]) -> dict[str, str]:
    """Archive name -> text of the hook module and the `.pth` that imports it."""
    dist = re.sub(r"[^A-Za-z0-9]+", "_", project.dist_name).lower()
    module = f"_{dist}_editable_hook"
    facts = {
        "package": project.package,
        "root": str(project.root),
        "build_dir": str(engine.build_dir_for(project).absolute()),
        "python": sys.executable,
        "ninja": ninja_binary(),
        "settings": dict(settings),
    }
    source = Path(hook.__file__).read_text(encoding="utf-8")
    text = f"{source}\n\ninstall(**{facts!r})\n"
    return {f"{module}.py": text, f"{module}.pth": f"import {module}\n"}


Snapshot = dict[str, tuple[int | None, int | None]]


def snapshot(paths: Sequence[Path]) -> Snapshot:
    """Size and mtime (ns) of each path, (None, None) for one that does not exist."""
    found: Snapshot = {}
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            found[str(path.absolute())] = (None, None)
            continue
        found[str(path.absolute())] = (info.st_size, info.st_mtime_ns)
    return found


def inputs(project: Project) -> Snapshot:
    """The inputs the graph does not cover, taken before a build: an edit made while it
    runs is then seen by the next import."""
    files = [project.manifest_path]
    if project.pyproject is not None:
        files.append(project.pyproject)
    return snapshot(files)


def write_stamp(project: Project, result: BuildResult, before: Snapshot) -> None:
    """The stamp the finder compares against: `before` (see `inputs`), the record, the
    installed libraries and the source folders (a file added to a glob), and whether there
    is a graph for `ninja -n`."""
    package_dir = project.package_dir
    paths = [package_dir / "_kernelpack.json"]
    folders: set[Path] = set()
    for kernel in result.plan.kernels:
        folders.add(kernel.spec.folder)
        folders.update(source.parent for source in kernel.spec.sources)
        entry = result.record.kernels[kernel.name]
        if isinstance(entry, BuiltKernel):
            paths.append(package_dir / entry.library)
    stamp = {
        "files": {**before, **snapshot([*paths, *sorted(folders)])},
        "graph": bool(result.plan.to_build),
    }
    build_dir = engine.build_dir_for(project)
    build_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(build_dir / hook.STAMP, json.dumps(stamp, indent=1) + "\n")


def _compiled(steps: Sequence[Step]) -> dict[str, int]:
    """Kernel -> number of files compiled (`obj/<kernel>/…`), in build order."""
    counts: dict[str, int] = {}
    for step in steps:
        parts = step.output.split("/")
        if len(parts) > 2 and parts[0] == "obj":
            counts[parts[1]] = counts.get(parts[1], 0) + 1
    return counts


def starting_line(steps: Sequence[Step]) -> str:
    """`kernelpack: rebuilding rmsnorm (2 files)…`: what an import is about to compile."""
    counts = _compiled(steps)
    total = sum(counts.values())
    names = ", ".join(counts) or "the libraries"
    return f"kernelpack: rebuilding {names} ({total} {'file' if total == 1 else 'files'})…"


def _announce(steps: tuple[Step, ...]) -> None:
    # The finder passes this stream through as the rebuild runs (see `_editable_hook`).
    print(starting_line(steps), file=sys.stderr, flush=True)


def _first_error_lines(output: str) -> list[str]:
    lines = [ln for ln in output.splitlines() if not ln.startswith(("FAILED: ", "ninja: "))]
    for index, line in enumerate(lines):
        if _ERROR_RE.search(line):
            return [ln.rstrip() for ln in lines[index : index + _ERROR_LINES] if ln.strip()]
    return []


def _cannot_compile(
    project: Project, env: Mapping[str, str], settings: Mapping[str, Any]
) -> str | None:
    """Why this process cannot compile a kernel the last build compiled (no nvcc here), or
    None. Then nothing is rebuilt: the record, the stamp and the libraries stay as they are,
    so the next import with a toolchain rebuilds."""
    options = _options(settings)
    options.pop("jobs", None)
    plan = plan_project(project, env, strict=False, **options)
    try:
        record: BuildRecord | None = BuildRecord.read(project.package_dir / RECORD_FILENAME)
    except (InvalidRecord, OSError):
        record = None
    for kernel in plan.kernels:
        built = record is not None and isinstance(record.kernels.get(kernel.name), BuiltKernel)
        if built and kernel.skip is not None and kernel.skip.code in _TOOLCHAIN_MISSING:
            return f"{kernel.skip.code}: {kernel.skip.message}"
    return None


def rebuild(root: Path, settings: Mapping[str, Any], *, verbose: bool = False) -> dict[str, Any]:
    """Rebuild the project at `root` in place with the install's `settings`; the outcome as
    the finder reads it: `{"ok": true, "compiled": {kernel: files}}`, with `"kept": why`
    when this process cannot compile (nothing was touched), or `{"ok": false, "error":
    line, "compiler": [first error lines]}`."""
    from kernelpack.cli._render import settings_line

    captured = io.StringIO()
    try:
        project = locate(root)
        before = inputs(project)
        env = _environment(project, settings, os.environ)
        kept = _cannot_compile(project, env, settings)
        if kept is not None:
            return {"ok": True, "compiled": {}, "kept": kept}
        result = engine.build_project(
            project,
            environ=env,
            stream=sys.stderr if verbose else captured,
            output="normal" if verbose else "quiet",
            announce=settings_line,
            on_work=_announce,
            **_options(settings),
        )
        install.install_inplace(result)
        write_stamp(project, result, before)
    except KernelpackError as exc:
        return {
            "ok": False,
            "error": str(exc),
            "compiler": _first_error_lines(captured.getvalue()),
        }
    return {"ok": True, "compiled": _compiled(result.compiled)}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kernelpack.backend.editable ROOT --settings JSON [--verbose]`."""
    parser = argparse.ArgumentParser(prog="python -m kernelpack.backend.editable")
    parser.add_argument("root", type=Path)
    parser.add_argument("--settings", default="{}")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    outcome = rebuild(args.root, json.loads(args.settings), verbose=args.verbose)
    print(json.dumps(outcome))
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
