"""What kernelpack's runtime adds to importing a kernel package: `import pkg; pkg.status()`.

Each repetition is a fresh interpreter that imports torch first and then times
`import pkg; pkg.status()` alone, so the number is the cost *beyond* `import torch` (a kernel
package needs torch anyway). A second series times the same without importing torch first
(on a machine without a GPU the registry never imports torch). Reports medians and writes
`benchmarks/results/import_time.json`. Goal: <= 20 ms beyond torch.

    .venv/bin/python benchmarks/import_time.py [--package FOLDER] [-n 40]

Without `--package`, a package like `examples/llm_ops` is written to a temporary folder: three
kernels (two built, one skipped) in a build record and the two-line registry wiring.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelpack_runtime.reason import Reason
from kernelpack_runtime.record import (
    FILENAME,
    BuildRecord,
    BuiltKernel,
    SkippedKernel,
    ToolchainRecord,
)

GOAL_MS = 20.0

TIMED = """
import json, sys, time
{pre}
t0 = time.perf_counter()
import {package} as pkg
status = pkg.status()
t1 = time.perf_counter()
print(json.dumps({{"ms": (t1 - t0) * 1000, "status": status}}))
"""


def _built(name: str) -> BuiltKernel:
    return BuiltKernel(
        abi="stable",
        stable_target="2.10",
        archs=("9.0a",),
        library=f"{name}/_C.abi3.so",
        sources_sha256="0" * 64,
        namespace=f"kp_bench_ops_{name}",
    )


RECORD = BuildRecord(
    package="kp_bench_ops",
    version="0.1.0+cu130stable2.10",
    toolchain=ToolchainRecord("13.0.88", "13.0", "2.14.1", "13.0", True, "3.11", "x86_64"),
    kernels={
        "rmsnorm": _built("rmsnorm"),
        "silu_mul": _built("silu_mul"),
        "flash_moe": SkippedKernel(Reason("arch-unsupported", "nvcc 12.4 cannot build sm_100a")),
    },
)


def _synthetic_package(root: Path) -> Path:
    folder = root / "kp_bench_ops"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        "from kernelpack_runtime import Registry\n"
        "status, is_available, unavailable_reason, load = Registry(__name__).api()\n"
    )
    RECORD.write(folder / FILENAME)
    return folder


def _series(
    folder: Path, cache: Path, *, torch_first: bool, repetitions: int
) -> tuple[list[float], Any]:
    code = TIMED.format(pre="import torch" if torch_first else "", package=folder.name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder.parent), *sys.path[1:]]))
    # As installed: byte-compiled (into a private cache, leaving the source tree alone).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    times: list[float] = []
    status: Any = None
    for _ in range(repetitions + 1):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(float(result["ms"]))
        status = result["status"]
    return times[1:], status  # the first run writes the bytecode cache


def _machine() -> dict[str, Any]:
    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import torch

    return {
        "description": f"CPU-only machine ({model}, {os.cpu_count()} cores, no GPU)",
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, help="a built kernel package folder")
    parser.add_argument("-n", "--repetitions", type=int, default=40)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "import_time.json",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.package.resolve() if args.package else _synthetic_package(Path(tmp))
        cache = Path(tmp) / "pycache"
        after_torch, status = _series(folder, cache, torch_first=True, repetitions=args.repetitions)
        alone, _ = _series(folder, cache, torch_first=False, repetitions=args.repetitions)
    rows = {
        "import pkg; pkg.status() after import torch": after_torch,
        "import pkg; pkg.status() without torch": alone,
    }
    print(f"{'measurement':<48} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
    for label, times in rows.items():
        print(
            f"{label:<48} {statistics.median(times):>10.2f} {min(times):>8.2f} {max(times):>8.2f}"
        )
    median = statistics.median(after_torch)
    verdict = "meets" if median <= GOAL_MS else "misses"
    print(f"goal <= {GOAL_MS:.0f} ms beyond import torch: {verdict} ({median:.2f} ms)")
    result = {
        "benchmark": "import pkg; pkg.status() beyond import torch",
        "machine": _machine(),
        "package": "synthetic kp_bench_ops (3 kernels)" if args.package is None else str(folder),
        "status": status,
        "repetitions": args.repetitions,
        "goal_ms": GOAL_MS,
        "median_ms_after_torch": round(median, 3),
        "median_ms_without_torch": round(statistics.median(alone), 3),
        "samples_ms_after_torch": [round(t, 3) for t in after_torch],
        "samples_ms_without_torch": [round(t, 3) for t in alone],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
