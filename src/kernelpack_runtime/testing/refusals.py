"""`python -m kernelpack_runtime.testing.refusals PACKAGE`: every op of an installed kernel
package, called with input it should refuse, raises an exception instead of crashing.

Each op of each built kernel's namespace is called once with float64 tensors of no elements
(on the GPU when there is one), zeros, empty lists and None for its arguments, in a child
process; an op may raise anything or return, but the process must live. A kernel library that
carries a second C++ runtime, or an exception that crosses torch's C shim the wrong way, ends
the process here (SIGSEGV, abort) instead of in a user's program. Prints one line per op;
exit 0 when every op answered, 1 (naming the op) when one crashed the process, 2 for bad use.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

__all__ = ["main"]


def _argument(kind: str, tensor: Any) -> Any:
    """A value of schema type `kind` that a kernel should refuse (or handle trivially)."""
    if kind.startswith("Optional") or kind.endswith("?"):
        return None
    if kind == "Tensor":
        return tensor
    if kind in ("List[Tensor]", "Tensor[]", "List[int]", "int[]", "List[float]", "float[]"):
        return []
    defaults: dict[str, Any] = {"int": 0, "SymInt": 0, "float": 0.0, "bool": False, "str": ""}
    if kind in defaults:
        return defaults[kind]
    raise LookupError(kind)


def _child(package: str) -> None:
    import torch

    from kernelpack_runtime.registry import registry_for

    importlib.import_module(package)
    record = registry_for(package).record
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensor = torch.empty(0, dtype=torch.float64, device=device)
    namespaces = []
    for kernel, entry in sorted(record.kernels.items() if record is not None else ()):
        if not getattr(entry, "namespace", None):
            continue
        try:  # a kernel module's import loads its library (also where there is no GPU)
            importlib.import_module(f"{package}.{kernel}")
        except Exception as exc:
            print(json.dumps({"op": f"{package}.{kernel}", "skipped": str(exc)[:200]}), flush=True)
            continue
        namespaces.append(entry.namespace)
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = name.partition("::")
        if namespace not in namespaces:
            continue
        schema = torch._C._get_schema(name, "")
        try:
            args = [_argument(str(a.type), tensor) for a in schema.arguments]
        except LookupError as exc:
            print(json.dumps({"op": name, "skipped": f"argument type {exc}"}), flush=True)
            continue
        print(json.dumps({"op": name, "start": True}), flush=True)
        try:
            getattr(getattr(torch.ops, namespace), op)(*args)
            answer = "returned"
        except Exception as exc:
            answer = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        if device == "cuda":
            torch.cuda.synchronize()
        print(json.dumps({"op": name, "answer": answer}), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--child":
        _child(args[1])
        return 0
    if len(args) != 1:
        print("usage: python -m kernelpack_runtime.testing.refusals PACKAGE", file=sys.stderr)
        return 2
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpack_runtime.testing.refusals", "--child", args[0]],
        capture_output=True,
        text=True,
    )
    running = None
    answered = 0
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        if row.get("start"):
            running = row["op"]
            continue
        running = None
        answered += "answer" in row
        print(f"{row['op']}: {row.get('answer') or 'skipped (' + row['skipped'] + ')'}")
    if running is not None:
        print(f"{args[0]}: {running} crashed the process (exit {proc.returncode})", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        print(f"{args[0]}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    print(f"{args[0]}: {answered} op(s) answered bad input without crashing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
