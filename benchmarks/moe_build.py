"""Build time of examples/moe_ops (the CUTLASS sm90 package) with kernelpack.

Two scenarios, each `kernelpack build --wheel-dir` end to end in a temporary copy of the
package, with a private ccache that starts empty:

- cold: nothing built, empty ccache;
- warm, fresh clone: the sources copied to another folder, the ccache of the cold build kept
  (kernelpack runs ccache with `CCACHE_BASEDIR`/`CCACHE_NOHASHDIR`, so another folder hits).

The per-translation-unit compile times come from kernelpack's build report. The machine's
load average is recorded before and after: on a shared machine it inflates the cold time.

Usage: `python benchmarks/moe_build.py [--json benchmarks/results/moe_build.json]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "examples" / "moe_ops"
RESULTS = HERE / "results" / "moe_build.json"
# A row of kernelpack's step report: boxed on a terminal, plain columns otherwise.
_ROW = re.compile(r"^[│\s]*(nvcc|c\+\+|cc|link)[│\s]+(\S+)[│\s]+([\d.]+)[│\s]*$", re.M)


def build(project: Path, env: dict[str, str]) -> dict[str, Any]:
    out = project.parent / "wheels"
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpack", "build", str(project), "--wheel-dir", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - began
    if proc.returncode != 0:
        raise SystemExit(f"moe_build: the build failed:\n{proc.stdout}\n{proc.stderr}")
    steps = {m.group(2): float(m.group(3)) for m in _ROW.finditer(proc.stdout + proc.stderr)}
    return {"seconds": round(seconds, 1), "steps": steps, "load_after": os.getloadavg()}


def copy(dest: Path) -> Path:
    shutil.copytree(
        PACKAGE,
        dest,
        ignore=shutil.ignore_patterns("build", "*.so", "_kernelpack.json", "__pycache__"),
    )
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="moe-build-") as tmp:
        root = Path(tmp)
        env = dict(os.environ, CCACHE_DIR=str(root / "ccache"))
        load_before = os.getloadavg()
        cold = build(copy(root / "a" / "moe_ops"), env)
        print(f"cold: {cold['seconds']} s", flush=True)
        warm = build(copy(root / "b" / "moe_ops"), env)
        print(f"warm, fresh clone: {warm['seconds']} s", flush=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_before": load_before,
        "cold": cold,
        "warm_fresh_clone": warm,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
