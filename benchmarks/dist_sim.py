"""Simulate a build on 1..64 sccache-dist build servers from one real build's measurements.

Input: a kernelpack build folder after a cold build: `.ninja_log` (each step's start and end,
ms) and `compile-peaks.json` (each compile's peak memory, measured by the build itself;
missing peaks use the per-kind estimates). The dependency sizes that sccache-dist would ship
come from ninja's deps log (`ninja -t deps`: every header a compile read), plus the object
coming back.

Model, per server count N (each server `--cores` cores and `--memory` GiB):
- the client sends each compile's inputs over one link of `--bandwidth` MB/s (transfers are
  serialised on it), and the toolchain archive to each server before its first job
  (`--toolchain-mb`, 81 MB for nvcc 13.0 + gcc 12 measured here);
- a fraction `--local-fraction` of each compile stays on the client (sccache runs nvcc's
  host preprocessing there), on `--client-cores` cores;
- a compile then runs on the server with the earliest free core whose memory still holds
  its peak (longest compiles first, as a list scheduler does);
- links run on the client after the last object of their library.
The result is the simulated wall time and the speedup against the measured local build
(the ninja log's first start to last end).

Usage: `python benchmarks/dist_sim.py BUILD_DIR [--json OUT]`, or without a build folder
`--synthetic COUNT,SECONDS,GIB,MB` (COUNT equal compiles of SECONDS each, GIB peak, MB of
inputs, one link step of 5 s, run locally on `--client-cores` for the measured figure).
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
MB = 1000**2
SERVERS = (1, 2, 4, 8, 16, 64)
HEAVY_JOB_BYTES = 3 * GIB  # kernelpack.builder.graph's estimates
LIGHT_JOB_BYTES = GIB


@dataclass(frozen=True)
class Step:
    output: str
    seconds: float
    peak: int
    inputs: int
    """Bytes sent to a server (the source and every header it read)."""
    result: int
    """Bytes coming back (the object)."""

    @property
    def link(self) -> bool:
        return self.output.startswith("lib/")

    @property
    def library(self) -> str:
        """`lib/<kernel>/...` for a link; the kernel's library folder for an object."""
        return self.output.split("/")[1]


def read_build(build_dir: Path) -> tuple[list[Step], float]:
    """The steps of the last complete build in `build_dir`, and its measured wall time."""
    rows: dict[str, tuple[int, int]] = {}
    for line in (build_dir / ".ninja_log").read_text().splitlines():
        parts = line.split("\t")
        if line.startswith("#") or len(parts) < 4:
            continue
        rows[parts[3]] = (int(parts[0]), int(parts[1]))
    peaks_file = build_dir / "compile-peaks.json"
    peaks = json.loads(peaks_file.read_text()) if peaks_file.is_file() else {}
    deps = _deps(build_dir)
    steps = []
    for output, (start, end) in rows.items():
        size = (build_dir / output).stat().st_size if (build_dir / output).is_file() else 0
        heavy = "ATen" in " ".join(deps.get(output, []))
        steps.append(
            Step(
                output=output,
                seconds=(end - start) / 1000,
                peak=int(peaks.get(output) or (HEAVY_JOB_BYTES if heavy else LIGHT_JOB_BYTES)),
                inputs=sum(_size(build_dir, d) for d in deps.get(output, [])),
                result=size,
            )
        )
    wall = (max(e for _, e in rows.values()) - min(s for s, _ in rows.values())) / 1000
    return steps, wall


def synthetic(spec: str, client_cores: int) -> tuple[list[Step], float]:
    """`COUNT,SECONDS,GIB,MB` compiles of one library, and their wall time on the client."""
    count, seconds, gib, mb = spec.split(",")
    steps = [
        Step(f"obj/k/tu{i}.cu.o", float(seconds), int(float(gib) * GIB), int(float(mb) * MB), MB)
        for i in range(int(count))
    ]
    steps.append(Step("lib/k/_C.abi3.so", 5.0, GIB, 0, 0))
    rounds = -(-int(count) // client_cores)
    return steps, rounds * float(seconds) + 5.0


def _deps(build_dir: Path) -> dict[str, list[str]]:
    out = subprocess.run(
        ["ninja", "-C", str(build_dir), "-t", "deps"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    deps: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif line.strip() and current is not None:
            deps[current].append(line.strip())
    return deps


def _size(build_dir: Path, path: str) -> int:
    candidate = Path(path) if Path(path).is_absolute() else build_dir / path
    try:
        return candidate.stat().st_size
    except OSError:
        return 0


def simulate(
    steps: list[Step],
    *,
    servers: int,
    cores: int,
    memory: int,
    bandwidth: float,
    toolchain: int,
    local_fraction: float,
    client_cores: int,
) -> float:
    """Simulated wall seconds of `steps` on `servers` servers (see the module docstring)."""
    compiles = sorted((s for s in steps if not s.link), key=lambda s: -s.seconds)
    link_free = 0.0
    shipped = [False] * servers  # whether a server has the toolchain yet
    client = [0.0] * client_cores
    heapq.heapify(client)
    # Per server: a heap of (free-at, core) and the running jobs' (end, peak).
    free = [[0.0] * cores for _ in range(servers)]
    running: list[list[tuple[float, int]]] = [[] for _ in range(servers)]
    done: dict[str, float] = {}
    for step in compiles:
        local_start = heapq.heappop(client)
        local_end = local_start + step.seconds * local_fraction
        heapq.heappush(client, local_end)
        sent = max(link_free, local_end) + step.inputs / bandwidth
        best: tuple[float, int, int] | None = None
        for index in range(servers):
            core = min(range(cores), key=lambda c: free[index][c])
            arrival = sent if shipped[index] else sent + toolchain / bandwidth
            start = max(arrival, free[index][core])
            # Wait until the memory of the jobs still running there leaves room for this one.
            while True:
                used = sum(p for end, p in running[index] if end > start)
                if used + step.peak <= memory or not any(e > start for e, _ in running[index]):
                    break
                start = min(e for e, _ in running[index] if e > start)
            if best is None or start < best[0]:
                best = (start, index, core)
        assert best is not None
        start, index, core = best
        link_free = sent if shipped[index] else sent + toolchain / bandwidth
        shipped[index] = True
        end = start + step.seconds * (1 - local_fraction)
        free[index][core] = end
        running[index].append((end, step.peak))
        done[step.output] = end + step.result / bandwidth
    finish = 0.0
    for link in (s for s in steps if s.link):
        ready = max((t for o, t in done.items() if o.split("/")[1] == link.library), default=0)
        finish = max(finish, ready + link.seconds)
    return max(finish, max(done.values(), default=0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir", type=Path, nargs="?")
    parser.add_argument("--synthetic", metavar="COUNT,SECONDS,GIB,MB")
    parser.add_argument("--cores", type=int, default=16, help="cores per build server")
    parser.add_argument("--memory", type=float, default=64, help="GiB per build server")
    parser.add_argument("--bandwidth", type=float, default=125, help="client link, MB/s")
    parser.add_argument("--toolchain-mb", type=float, default=81)
    parser.add_argument("--local-fraction", type=float, default=0.1)
    parser.add_argument("--client-cores", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.synthetic:
        steps, wall = synthetic(args.synthetic, args.client_cores)
    elif args.build_dir is not None:
        steps, wall = read_build(args.build_dir)
    else:
        parser.error("give a build folder or --synthetic")
    if not steps:
        raise SystemExit(f"{args.build_dir}: no step in .ninja_log")
    rows: list[dict[str, Any]] = []
    for count in SERVERS:
        seconds = simulate(
            steps,
            servers=count,
            cores=args.cores,
            memory=int(args.memory * GIB),
            bandwidth=args.bandwidth * MB,
            toolchain=int(args.toolchain_mb * MB),
            local_fraction=args.local_fraction,
            client_cores=args.client_cores,
        )
        rows.append({"servers": count, "seconds": round(seconds, 1), "speedup": wall / seconds})
    result = {
        "build_dir": str(args.build_dir or f"synthetic {args.synthetic}"),
        "measured_local_seconds": wall,
        "compiles": sum(1 for s in steps if not s.link),
        "compile_cpu_seconds": round(sum(s.seconds for s in steps if not s.link), 1),
        "largest_peak_gib": round(max(s.peak for s in steps) / GIB, 2),
        "model": {
            k: v for k, v in vars(args).items() if k not in ("build_dir", "json", "synthetic")
        },
        "servers": rows,
    }
    print(f"measured local build: {wall:.1f} s, {result['compiles']} compiles")
    print("servers  simulated s  speedup")
    for row in rows:
        print(f"{row['servers']:>7}  {row['seconds']:>11.1f}  {row['speedup']:>6.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
