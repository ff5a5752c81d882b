"""Build times of the foreign projects in tests/foreign with kernelpack: cold, no-op, one edit.

For each project a fresh copy is built three times with the real nvcc:

- cold: an empty build folder and no compiler cache (`KERNELPACK_LAUNCHER=none`);
- no-op: the same tree again (nothing to do);
- one edit: one CUDA source changed (a line appended), the cache still off.

The kernel-builder copies get `[tool.kernelpack] arch = "9.0"` in a `pyproject.toml` next to
`build.toml` (their CUDA kernels list no capabilities, so kernel-builder would build its
whole default set); prime-kernels' copy gets its `requires-python` widened to this
interpreter. Nothing else in them changes.

    python benchmarks/foreign_build.py [--out results/foreign_build.json] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kernelpack.builder import engine
from kernelpack.project.locate import locate

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ROOT / "tests" / "foreign"
PROJECTS = {
    "relu": ("hf-kernels/examples/relu", "relu_cuda/relu.cu"),
    "relu-torch-stable-abi": ("hf-kernels/examples/relu-torch-stable-abi", "relu_cuda/relu.cu"),
    "cutlass-gemm": ("hf-kernels/examples/cutlass-gemm", "gemm.cu"),
    "prime-kernels": (
        "prime-kernels",
        "prime_kernels/flash_moe/csrc/kernels/fused_moe_bf16_kernel.cu",
    ),
}


def _prepare(name: str, base: Path) -> Path:
    source, _ = PROJECTS[name]
    root = base / name
    shutil.copytree(FOREIGN / source, root)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        this = f"{sys.version_info[0]}.{sys.version_info[1]}"
        text = pyproject.read_text().replace('"~=3.12.0"', f'">={this}"')
        pyproject.write_text(text)
    else:
        pyproject.write_text('[tool.kernelpack]\narch = "9.0"\n')
    return root


def _timed(root: Path, env: dict[str, str]) -> dict[str, object]:
    started = time.monotonic()
    result = engine.build_project(locate(root), environ=env)
    return {
        "seconds": round(time.monotonic() - started, 2),
        "compiled": [step.output for step in result.compiled],
    }


def measure(name: str, base: Path) -> dict[str, object]:
    root = _prepare(name, base)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELPACK_")}
    env["KERNELPACK_LAUNCHER"] = "none"  # no compiler cache at all: every compile is real
    cold = _timed(root, env)
    noop = _timed(root, env)
    edited = root / PROJECTS[name][1]
    edited.write_text(edited.read_text() + "\n// edited\n")
    one_edit = _timed(root, env)
    return {"cold": cold, "noop": noop, "one_edit": one_edit, "edited": PROJECTS[name][1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(PROJECTS), choices=list(PROJECTS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/foreign_build.json")
    args = parser.parse_args()
    results: dict[str, object] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
            "python": platform.python_version(),
        },
        "projects": {},
    }
    projects: dict[str, object] = {}
    results["projects"] = projects
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:  # the file is rewritten after each project
            print(f"{name}: building", file=sys.stderr, flush=True)
            projects[name] = measure(name, Path(tmp))
            print(json.dumps(projects[name]), file=sys.stderr, flush=True)
            results["load_after"] = os.getloadavg()
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
