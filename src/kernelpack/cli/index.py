"""`kernelpack index WHEEL_OR_DIR... --out SITE [--default LABEL]`: a release's three channels.

Writes SITE (see `kernelpack.release.index`): a PEP 503 index per CUDA label, the default
variant re-versioned for PyPI, and PEP 825 variant wheels with a null variant. The default
label is `--default`, else `[tool.kernelpack.release] default` of the project in the current
folder (when it is the wheels' project), else the only label the wheels have.

Exit 0 with one line per channel; 2 for bad input (nothing is written then).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from packaging.utils import canonicalize_name

from kernelpack.errors import KernelpackError
from kernelpack.project.locate import locate
from kernelpack.release.index import build_site

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `index` verb."""
    parser = subparsers.add_parser(
        "index",
        help="publish a release's wheels: CUDA variant indexes, PyPI files, PEP 825 variants",
        description=(
            "Turn the wheels (and sdist) of one release into SITE/<cuda>/simple (PEP 503), "
            "SITE/pypi (the default variant, plain version) and SITE/variants (PEP 825)."
        ),
    )
    parser.add_argument(
        "inputs", metavar="WHEEL_OR_DIR", nargs="+", type=Path, help="wheels, sdist, or folders"
    )
    parser.add_argument("--out", metavar="SITE", type=Path, required=True, help="the site folder")
    parser.add_argument(
        "--default",
        metavar="LABEL",
        help="the variant label PyPI gets (e.g. cu130stable2.10)",
    )
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.set_defaults(func=run)


def _configured_default(project_name: str) -> str | None:
    """`[tool.kernelpack.release] default` of the project in the current folder, when that
    project is `project_name`."""
    try:
        project = locate(Path.cwd())
    except (KernelpackError, OSError):
        return None
    if canonicalize_name(project.dist_name) != canonicalize_name(project_name):
        return None
    return project.settings.release.default


def run(args: argparse.Namespace) -> int:
    """Write the site; print one line per channel (or JSON)."""
    from kernelpack.release.distfiles import read_release

    default = args.default
    if default is None:
        default = _configured_default(read_release(args.inputs).name)
    site = build_site(args.inputs, args.out, default)
    if args.json:
        print(json.dumps({"site": str(site.root), **site.to_json()}, indent=2))
        return 0
    for cuda in site.cuda:
        print(f"{site.root / cuda / 'simple'}: PEP 503 index of the {cuda} variants")
    print(f"{site.root / 'pypi'}: {', '.join(site.pypi)} (the {site.default} variant)")
    print(
        f"{site.root / 'variants' / 'simple'}: PEP 825 variants {', '.join(site.variants)} "
        f"of {site.project} {site.version}"
    )
    return 0
