"""`kernelpack new PKG_DIR --kernel NAME [--abi stable|torch] [--arch 9.0a]`: a new kernel
package with one kernel, ready for `kernelpack check`, `kernelpack build` and pytest.

The package is named after PKG_DIR. No existing file is overwritten (exit 2, nothing written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelpack.project._toml import display_path
from kernelpack.scaffold.new import ABIS, Scaffold

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `new` verb."""
    parser = subparsers.add_parser(
        "new",
        help="scaffold a kernel package with one kernel",
        description=(
            "Write a kernel package named after PKG_DIR: pyproject.toml, kernels.toml, the "
            "registry wiring, one kernel (Python surface and csrc/) and its tests."
        ),
    )
    parser.add_argument("root", type=Path, metavar="PKG_DIR", help="the project folder to create")
    parser.add_argument("--kernel", required=True, metavar="NAME", help="the kernel's name")
    parser.add_argument(
        "--abi", default="stable", choices=ABIS, help="the kernel's ABI (default: stable)"
    )
    parser.add_argument(
        "--arch", default="9.0a", help="CUDA arch(s), comma-separated (default: 9.0a)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the files and list them; bad names or an existing file exit 2."""
    scaffold = Scaffold.create(args.root, args.kernel, abi=args.abi, arch=args.arch)
    for path in scaffold.write():
        print(f"wrote {display_path(path)}")
    root = display_path(scaffold.root)
    print(
        f"next: kernelpack check {root} && kernelpack build {root} --inplace "
        f"&& kernelpack status {root}/{scaffold.package}"
    )
    return 0
