"""Remote compiler cache: a cold build vs a fresh clone that hits a shared sccache backend.

For each package (`examples/llm_ops`, and a CUTLASS-using package when one is given with
`--cutlass PATH`), in one run on this machine:

- cold: a clone with an empty local cache, sccache backed by a Redis server on loopback
  (started here, empty): every compile misses and is written to Redis;
- remote-warm: a fresh clone at the same path (as on another CI runner), another empty
  local cache, the same Redis: every compile is a remote hit;
- remote-warm, other path: the same from a clone in another folder (a developer's machine):
  the command lines are the same in every clone (`kernelpack.builder.graph`), but nvcc hands
  cudafe++ and cicc the canonical absolute source path, which sccache hashes: those steps
  run again there (the host steps and ptxas hit);
- sccache local-warm: a fresh clone, sccache on its local disk cache only, warmed by one
  build before;
- ccache local-warm: the same with ccache (`CCACHE_BASEDIR`/`CCACHE_NOHASHDIR`), warmed by a
  build that also wrote to the same Redis server (`CCACHE_REMOTE_STORAGE`);
- ccache remote-warm: a fresh clone with an empty local ccache reading that Redis server,
  at the same path and in another folder.

sccache splits every nvcc compile into its steps and must run the preprocessing steps even
when every step hits (their output is the next step's input and its key); ccache looks its
direct-mode manifest up without preprocessing. The two warm figures show that cost.

Each is `kernelpack build --inplace` end to end (toolchain detection included); the ratios
are to the cold build of the same run. The target is remote-warm <= 0.1x cold.

Usage: `python benchmarks/remote_cache.py [--json benchmarks/results/remote_cache.json]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "remote_cache.json"
KERNELPACK = Path(sys.executable).parent / "kernelpack"
GIB = 1024**3


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
    if found is None:
        raise SystemExit(f"{name} is not installed (scripts/bootstrap installs it)")
    return found


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(tool: str) -> str:
    out = subprocess.run([_tool(tool), "--version"], capture_output=True, text=True, check=False)
    return (out.stdout.splitlines() or ["unknown"])[0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCCACHE_", "CCACHE_", "KERNELPACK_"))
    }
    env.update(extra)
    return env


def _build(source: Path, checkout: Path, env: dict[str, str]) -> dict[str, Any]:
    """Copy `source` to `checkout`, build it in place, return the time and the cache line."""
    if checkout.exists():
        shutil.rmtree(checkout)
    shutil.copytree(
        source, checkout, ignore=shutil.ignore_patterns("build", "*.so", "_kernelpack.json")
    )
    started = time.monotonic()
    proc = subprocess.run(
        [str(KERNELPACK), "build", str(checkout), "--inplace"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"build of {checkout} failed:\n{proc.stdout}\n{proc.stderr}")
    line = next((x for x in proc.stderr.splitlines() if x.startswith("cache: ")), None)
    return {"seconds": round(seconds, 2), "cache": line}


def _package(name: str, source: Path, base: Path, redis: int) -> dict[str, Any]:
    sccache, ccache = _tool("sccache"), _tool("ccache")
    work = base / name
    checkout = work / "checkout" / name
    remote = {"SCCACHE_REDIS_ENDPOINT": f"redis://127.0.0.1:{redis}"}
    runs: dict[str, Any] = {}
    runs["cold"] = _build(
        source,
        checkout,
        _env(KERNELPACK_LAUNCHER=sccache, SCCACHE_DIR=str(work / "a-local"), **remote),
    )
    runs["remote_warm"] = _build(
        source,
        checkout,
        _env(KERNELPACK_LAUNCHER=sccache, SCCACHE_DIR=str(work / "b-local"), **remote),
    )
    runs["remote_warm_other_path"] = _build(
        source,
        work / "elsewhere" / "clone" / name,
        _env(KERNELPACK_LAUNCHER=sccache, SCCACHE_DIR=str(work / "c-local"), **remote),
    )
    local = _env(KERNELPACK_LAUNCHER=sccache, SCCACHE_DIR=str(work / "sccache-local"))
    _build(source, checkout, local)
    runs["sccache_local_warm"] = _build(source, checkout, local)
    ccache_remote = {"CCACHE_REMOTE_STORAGE": f"redis://127.0.0.1:{redis}"}
    cc = _env(KERNELPACK_LAUNCHER=ccache, CCACHE_DIR=str(work / "ccache-a"), **ccache_remote)
    runs["ccache_cold"] = _build(source, checkout, cc)
    runs["ccache_local_warm"] = _build(source, checkout, cc)
    runs["ccache_remote_warm"] = _build(
        source,
        checkout,
        _env(KERNELPACK_LAUNCHER=ccache, CCACHE_DIR=str(work / "ccache-b"), **ccache_remote),
    )
    runs["ccache_remote_warm_other_path"] = _build(
        source,
        work / "elsewhere" / "ccache-clone" / name,
        _env(KERNELPACK_LAUNCHER=ccache, CCACHE_DIR=str(work / "ccache-c"), **ccache_remote),
    )
    cold = runs["cold"]["seconds"]
    for run in runs.values():
        run["ratio_to_cold"] = round(run["seconds"] / cold, 3)
    return runs


def main() -> int:
    """Run the benchmark; print the table and write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--cutlass", type=Path, help="a CUTLASS-using kernel project")
    args = parser.parse_args()
    packages = {"llm_ops": REPO / "examples" / "llm_ops"}
    if args.cutlass:
        packages[args.cutlass.name] = args.cutlass.resolve()
    with tempfile.TemporaryDirectory(prefix="kp-remote-cache-") as tmp:
        base = Path(tmp)
        port = _free_port()
        server = subprocess.Popen(
            [_tool("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
            cwd=base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            load_before = os.getloadavg()
            results = {name: _package(name, path, base, port) for name, path in packages.items()}
            load_after = os.getloadavg()
        finally:
            server.terminate()
            server.wait(timeout=30)
    report = {
        "benchmark": "remote_cache",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu": _cpu_model(),
            "cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(
                os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
            ),
            "os": platform.platform(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
        "tools": {"sccache": _version("sccache"), "ccache": _version("ccache")},
        "packages": results,
    }
    for name, runs in results.items():
        print(name)
        for scenario, run in runs.items():
            print(f"  {scenario:24} {run['seconds']:8.2f} s  {run['ratio_to_cold']:6.3f}x")
            print(f"  {'':24} {run['cache']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
