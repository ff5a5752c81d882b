"""`kernelpack contract PKG [--out FILE] [--against FILE] [--json]`: a package's host-side
contract (requirement constants, function signatures, op schemas), saved or compared.

    kernelpack contract llm_ops --out contract.json          # before the bump
    kernelpack contract llm_ops --against contract.json      # after: what callers must absorb

With `--against`, exit 1 when something callers rely on was changed or removed, 0 when the
new build only adds. Kernel modules are imported directly, so this works without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelpack.release.contract import Contract, collect, compare, resolve_package

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `contract` verb."""
    parser = subparsers.add_parser(
        "contract",
        help="a package's host-side contract: constants, signatures, op schemas; compare builds",
        description=(
            "Read the host-side contract of a built kernel package (exported constants, public "
            "function signatures, registered op schemas); write it, or compare it to an older one."
        ),
    )
    parser.add_argument("package", metavar="PKG", help="a package name or a package folder")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write the contract as JSON")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="FILE",
        help="compare with an earlier contract; exit 1 when callers must absorb a change",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Collect; write `--out`; print the contract or the comparison. Exit codes as above."""
    old = Contract.read(args.against) if args.against is not None else None
    contract = collect(resolve_package(args.package))
    unread = {name: k.error for name, k in contract.kernels.items() if k.error is not None}
    for name, error in unread.items():
        print(f"kernelpack contract: {contract.package}.{name}: {error}", file=sys.stderr)
    if args.out is not None:
        contract.write(args.out)
    if old is not None:
        changes = compare(old, contract)
        breaking = [change for change in changes if change.breaking]
        if args.json:
            report = {"breaking": bool(breaking), "changes": [c.to_json() for c in changes]}
            print(json.dumps(report, indent=2))
        else:
            for change in changes:
                print(change)
            print(_verdict(old, contract, len(changes), len(breaking)))
        return 1 if breaking or unread else 0
    if args.json:
        print(json.dumps(contract.to_json(), indent=2, sort_keys=True))
    elif args.out is not None:
        print(f"wrote {args.out} ({len(contract.kernels)} kernels of {contract.package})")
    else:
        print(_summary(contract))
    return 1 if unread else 0


def _verdict(old: Contract, new: Contract, changes: int, breaking: int) -> str:
    versions = f"{old.version} -> {new.version}"
    if breaking:
        return f"{breaking} of {changes} change(s) callers must absorb ({versions})"
    if changes:
        return f"only additions ({changes}) ({versions})"
    return f"no contract changes ({versions})"


def _summary(contract: Contract) -> str:
    lines = [f"{contract.package} {contract.version}"]
    for name, kernel in contract.kernels.items():
        if kernel.error is not None:
            lines.append(f"{name}: unreadable: {kernel.error}")
            continue
        lines.append(f"{name} (torch.ops.{kernel.namespace})")
        lines += [f"  {key} = {json.dumps(value)}" for key, value in kernel.constants.items()]
        lines += [f"  def {key}{sig}" for key, sig in kernel.functions.items()]
        lines += [f"  op {schema}" for schema in kernel.ops.values()]
    return "\n".join(lines)
