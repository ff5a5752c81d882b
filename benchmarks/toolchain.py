"""The CUDA toolkit from NVIDIA's wheels against the system toolkit, side by side.

In one run on this machine:

- set-up of the wheel toolkit (`kernelpack toolchain install`, the real pip and index):
  cold (empty pip cache, empty kernelpack cache), warm (pip's cache filled by the cold run,
  an empty kernelpack cache) and again (installed: the digest check alone); the size of the
  five wheels (what a cold set-up downloads), the toolkit's size on disk, and where pip's
  index is (a machine whose index is a local `file://` mirror downloads nothing: its cold
  and warm set-ups are alike);
- the system toolkit: its size on disk (`/usr/local/cuda-<release>`). Its set-up time is
  not measured: it comes from NVIDIA's apt repository or installer, which this machine
  cannot reach. The size of NVIDIA's CUDA devel container image is a figure its publisher
  states on the image's tag page (`--devel-image-gb`, `--devel-image-source`); it is
  recorded as given, never guessed;
- `examples/llm_ops` built cold (no compiler cache: `KERNELPACK_LAUNCHER=none`) with each
  toolkit, `--repeat` times each, alternated, the system one hidden for the wheel builds (no
  nvcc on PATH, CUDA_HOME unset, no /usr/local/cuda); the wheels' names (version with its
  ABI tag, Python and manylinux tags) and their records' archs are compared. `--moe` does
  the same for examples/moe_ops (CUTLASS, classic ABI; many minutes on 2 cores).

Usage: `python benchmarks/toolchain.py [--json benchmarks/results/toolchain.json] [--moe]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "toolchain.json"
MIB = 1024**2
WHEELS = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
)
# The CLI with the default toolkit folder hidden too (it is not a variable).
_HIDDEN_CLI = (
    "import sys; from pathlib import Path; from kernelpack.toolchain import detection; "
    "detection.DEFAULT_CUDA_HOME = Path('/nonexistent/cuda'); "
    "from kernelpack.cli import main; sys.exit(main(sys.argv[1:]))"
)
_CLI = "import sys; from kernelpack.cli import main; sys.exit(main(sys.argv[1:]))"


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            file = Path(dirpath) / name
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def _kernelpack(args: list[str], env: dict[str, str], *, hidden: bool) -> tuple[float, str]:
    code = _HIDDEN_CLI if hidden else _CLI
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**env, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=7200,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"kernelpack {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def _hidden_env(base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(f for f in folders if f and not os.path.exists(f"{f}/nvcc"))
    return env


def setup(work: Path, base: dict[str, str]) -> dict[str, Any]:
    pip_cache = work / "pip-cache"
    env = {**base, "PIP_CACHE_DIR": str(pip_cache)}
    results: dict[str, Any] = {}
    for run in ("cold", "warm"):
        env["XDG_CACHE_HOME"] = str(work / f"xdg-{run}")
        seconds, _ = _kernelpack(["toolchain", "install", "--cuda", "13.0"], env, hidden=True)
        results[f"{run}_seconds"] = round(seconds, 1)
        if run == "cold":
            results["downloaded_mib"] = round(_size(pip_cache) / MIB, 1)
    seconds, out = _kernelpack(["toolchain", "install", "--cuda", "13.0"], env, hidden=True)
    results["installed_again_seconds"] = round(seconds, 1)
    wanted = [f"{name}==13.0.*" for name in WHEELS]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", work / "dl", *wanted],
        check=True,
        env=base,
    )
    results["wheels_mib"] = round(_size(work / "dl") / MIB, 1)
    results["wheels"] = sorted(p.name for p in (work / "dl").iterdir())
    config = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, env=base
    ).stdout
    results["pip_index"] = [
        line for line in config.splitlines() if "index" in line or "find-links" in line
    ]
    results["toolkit_root"] = out.split("toolkit: ", 1)[1].split(" (", 1)[0]
    folder = Path(results["toolkit_root"]).parent.parent
    results["disk_mib"] = round(_size(folder) / MIB, 1)
    results["xdg_cache_home"] = env["XDG_CACHE_HOME"]
    return results


def build(name: str, work: Path, env: dict[str, str], *, hidden: bool, tag: str) -> dict[str, Any]:
    project = work / f"{name}-{tag}"
    shutil.copytree(
        REPO / "examples" / name, project, ignore=shutil.ignore_patterns("build", "dist", "*.so")
    )
    out = project / "dist"
    seconds, log = _kernelpack(
        ["build", str(project), "--wheel-dir", str(out)],
        {**(_hidden_env(env) if hidden else env), "KERNELPACK_LAUNCHER": "none"},
        hidden=hidden,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (record_name,) = [n for n in zf.namelist() if n.endswith("/_kernelpack.json")]
        record = json.loads(zf.read(record_name))
    return {
        "seconds": round(seconds, 1),
        "toolkit_line": next(line for line in log.splitlines() if "CUDA toolkit" in line),
        "wheel": wheel.name,
        "archs": {k: v.get("archs", []) for k, v in sorted(record["kernels"].items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--moe", action="store_true", help="also build examples/moe_ops")
    parser.add_argument("--repeat", type=int, default=2, help="cold builds of each toolkit")
    parser.add_argument("--devel-image-gb", type=float, help="the publisher's figure")
    parser.add_argument("--devel-image-source", help="where the publisher states it")
    args = parser.parse_args()
    base = dict(os.environ)
    system_root = Path(os.path.realpath("/usr/local/cuda"))
    with tempfile.TemporaryDirectory(prefix="kp-toolchain-bench-") as tmp:
        work = Path(tmp)
        wheel = setup(work, base)
        built_env = {**base, "XDG_CACHE_HOME": wheel.pop("xdg_cache_home")}
        packages: dict[str, Any] = {}
        for name in ["llm_ops", *(["moe_ops"] if args.moe else [])]:
            runs: dict[str, list[dict[str, Any]]] = {"system": [], "wheel": []}
            for round_ in range(args.repeat):  # alternated, so load drifts hit both alike
                for kind in ("system", "wheel"):
                    tag = f"{kind}{round_}"
                    runs[kind].append(build(name, work, built_env, hidden=kind == "wheel", tag=tag))
            system, wheels = runs["system"], runs["wheel"]
            packages[name] = {
                "system": system,
                "wheel": wheels,
                "cold_seconds": {k: [r["seconds"] for r in v] for k, v in runs.items()},
                "same_wheel_name": {r["wheel"] for r in system + wheels} == {system[0]["wheel"]},
                "same_archs": all(r["archs"] == system[0]["archs"] for r in system + wheels),
            }
    result = {
        "benchmark": "toolchain",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_after": list(os.getloadavg()),
        },
        "wheel_toolkit": wheel,
        "system_toolkit": {
            "root": str(system_root),
            "disk_mib": round(_size(system_root) / MIB, 1) if system_root.is_dir() else None,
            "setup_seconds": None,
            "setup_note": "not measured: NVIDIA's apt repository and installer are not "
            "reachable from this machine",
        },
        "devel_container_image": {
            "compressed_gb": args.devel_image_gb,
            "source": args.devel_image_source,
            "note": "the publisher's figure (Docker Hub nvidia/cuda, the tag's compressed "
            "size); recorded as given, never measured or guessed here",
        },
        "packages": packages,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
