"""`kernelpack check [PATH] [--json]`: validate a package's `kernels.toml` (no compiler needed).

Every problem is reported, one line each in file order (at most 20, then "… and N more"),
with exit code 2. Every source must be present (a kernel whose sources are missing is an
error here, while `build` skips it) and every `depends` must be a known name. Nothing of
this machine is asked: whether a dependency's headers are installed here is `doctor`'s and
`build`'s question, so `check` gives the same answer on every machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kernelpack.errors import ManifestError
from kernelpack.project.locate import PATH_HELP, Project, locate
from kernelpack.project.manifest import ANY_PLATFORM, KernelSpec, Manifest

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `check` verb."""
    parser = subparsers.add_parser(
        "check",
        help="validate a package's kernels.toml (no compiler needed)",
        description="Validate kernels.toml: keys, types, archs, paths, sources and depends.",
    )
    parser.add_argument("path", nargs="?", type=Path, metavar="PATH", help=PATH_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


#: Most problems listed; the rest are counted.
MAX_ERRORS = 20


def run(args: argparse.Namespace) -> int:
    """Validate; print a summary (or JSON), or every problem on stderr (exit 2)."""
    project = locate(args.path)
    if project.found:
        print(f"kernelpack check: using {project.found}", file=sys.stderr)
    try:
        manifest = project.load_manifest(allow_missing_sources=False)
    except ManifestError as exc:
        lines = exc.lines(MAX_ERRORS)
        for line in lines:
            print(f"kernelpack check: error: {line}", file=sys.stderr)
        if args.json:
            error = {"message": lines[0], "exit_code": exc.exit_code, "errors": lines}
            print(json.dumps({"error": error}, indent=2))
        return exc.exit_code
    for note in manifest.notes:
        print(f"kernelpack check: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(project, manifest), indent=2))
    else:
        print(summary(project, manifest))
    return 0


def to_json(project: Project, manifest: Manifest) -> dict[str, Any]:
    """`{"package", "manifest", "kernels": {name: {...}}}` for tools."""
    return {
        "package": manifest.package,
        "dist_name": project.dist_name,
        "version": project.version,
        "manifest": str(manifest.path),
        "env_prefix": project.env_prefix,
        "kernels": {spec.name: spec.to_json() for spec in manifest.kernels},
    }


def summary(project: Project, manifest: Manifest) -> str:
    """A few lines: the package, then one line per kernel."""
    count = len(manifest.kernels)
    lines = [
        f"{manifest.package} ({project.dist_name} {project.version}): "
        f"{count} kernel{'s' if count != 1 else ''} in {_relative(manifest.path, Path.cwd())}: ok"
    ]
    if not manifest.kernels:  # a kernel-builder noarch project: pure Python kernels
        lines.append("  no kernel to compile")
    width = max((len(spec.name) for spec in manifest.kernels), default=0)
    for spec in manifest.kernels:
        files = len(spec.sources)
        if (
            spec.skip is not None
        ):  # decided by the manifest (a build.toml kernel of another backend)
            lines.append(f"  {spec.name:<{width}}  not built: {spec.skip.message}")
            continue
        lines.append(
            f"  {spec.name:<{width}}  abi={spec.abi:<6}  arch={_archs(spec)}  "
            f"{files} source{'s' if files != 1 else ''}"
        )
        for part in spec.parts:
            archs = ",".join(map(str, part.arch)) or "-"
            floor = f"  cuda>={part.min_cuda}" if part.min_cuda is not None else ""
            lines.append(f"    {part.name}: arch={archs}{floor}  {len(part.sources)} files")
    return "\n".join(lines)


def _archs(spec: KernelSpec) -> str:
    if ANY_PLATFORM in spec.arch:
        return ",".join(map(str, spec.arch[ANY_PLATFORM]))
    return " ".join(
        f"{platform}:{','.join(map(str, archs))}" for platform, archs in spec.arch.items()
    )


def _relative(path: Path, base: Path) -> str:
    return os.path.relpath(path, base)
