"""Build speed: torch's BuildExtension (setuptools) vs kernelpack on the same sources.

The package `benchmarks/packages/kpbench` has four classic-ABI kernels (one `.cu` each, ATen
headers). Each tool builds it in its own temporary copy, with a private, initially empty
ccache (both tools put ccache in front of nvcc when it is on PATH), in four scenarios:

- cold: empty caches (ccache, and kernelpack's cache of torch facts), nothing built;
- warm, fresh clone: the same sources copied to another folder, the cache kept;
- no-op: build the built tree again;
- one kernel edited: a real code change in one kernel's source.

BuildExtension runs as its users run it: `python setup.py build_ext --inplace` with one
`CUDAExtension` per kernel (same flags: -O3, C++20, sm_90a only, the same include folders
and `KERNELPACK_NAMESPACE` defines) and `MAX_JOBS` = the job count kernelpack uses. kernelpack runs
as `kernelpack build --inplace` (end to end, toolchain detection included).

Usage: `python benchmarks/build_speed.py [--json benchmarks/results/build_speed.json]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "packages" / "kpbench"
RESULTS = HERE / "results" / "build_speed.json"
KERNELPACK = Path(sys.executable).parent / "kernelpack"
SCENARIOS = ("cold", "warm_fresh_clone", "noop", "one_kernel_edited")
EDITED = "axpy"

_SETUP = """\
from pathlib import Path
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

KERNELS = {kernels!r}
INCLUDE_DIRS = {include_dirs!r}
COMMON = ["-O3", "-std=c++20"]
NVCC = COMMON + ["-gencode=arch=compute_90a,code=sm_90a"]

setup(
    name="kpbench",
    packages=["kpbench"] + [f"kpbench.{{k}}" for k in KERNELS],
    ext_modules=[
        CUDAExtension(
            f"kpbench.{{k}}._C",
            [f"kpbench/{{k}}/csrc/{{k}}.cu"],
            include_dirs=INCLUDE_DIRS,
            define_macros=[("KERNELPACK_NAMESPACE", f"kpbench_{{k}}")],
            extra_compile_args={{"cxx": COMMON, "nvcc": NVCC}},
        )
        for k in KERNELS
    ],
    cmdclass={{"build_ext": BuildExtension}},
)
"""


def _kernels() -> list[str]:
    import tomllib

    with (PACKAGE / "kpbench" / "kernels.toml").open("rb") as fh:
        return list(tomllib.load(fh))


def _copy(destination: Path) -> Path:
    shutil.copytree(
        PACKAGE, destination, ignore=shutil.ignore_patterns("build", "*.so", "_kernel*")
    )
    return destination


def _edit(root: Path) -> None:
    source = root / "kpbench" / EDITED / "csrc" / f"{EDITED}.cu"
    text = source.read_text().replace("float v = ", "const float v = ", 1)
    source.write_text(text)


#: CPU seconds (user + sys, children included) of each timed command, by the same keys.
CPU: dict[str, float] = {}


def _timed(cmd: list[str], cwd: Path, env: dict[str, str], label: str = "") -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU[label] = cpu
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return seconds


class _Tool:
    name = ""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def prepare(self, root: Path) -> None:
        """Anything the tool needs in a fresh copy."""

    def build(self, root: Path, label: str) -> float:
        raise NotImplementedError


class _BuildExtension(_Tool):
    name = "BuildExtension"

    def __init__(self, env: dict[str, str], include_dirs: list[str]) -> None:
        super().__init__(env)
        self.include_dirs = include_dirs

    def prepare(self, root: Path) -> None:
        text = _SETUP.format(kernels=_kernels(), include_dirs=self.include_dirs)
        (root / "setup.py").write_text(text)

    def build(self, root: Path, label: str) -> float:
        cmd = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
        return _timed(cmd, root, self.env, label)


class _Kernelpack(_Tool):
    name = "kernelpack"

    def build(self, root: Path, label: str) -> float:
        return _timed([str(KERNELPACK), "build", str(root), "--inplace"], root, self.env, label)


def _scenarios(tool: _Tool, work: Path) -> dict[str, float]:
    times: dict[str, float] = {}
    first = _copy(work / tool.name / "clone1" / "kpbench")
    tool.prepare(first)
    times["cold"] = tool.build(first, f"{tool.name}/cold")
    second = _copy(work / tool.name / "elsewhere" / "clone2" / "kpbench")
    tool.prepare(second)
    times["warm_fresh_clone"] = tool.build(second, f"{tool.name}/warm_fresh_clone")
    times["noop"] = tool.build(second, f"{tool.name}/noop")
    _edit(second)
    times["one_kernel_edited"] = tool.build(second, f"{tool.name}/one_kernel_edited")
    return times


def _machine() -> dict[str, Any]:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return {"cpu": model, "cores": cores, "memory_gib": memory, "os": platform.platform()}


def _toolchain() -> dict[str, Any]:
    from kernelpack.toolchain.detection import detect

    tc = detect()
    return {
        "nvcc": str(tc.nvcc_version),
        "torch": str(tc.torch_version),
        "launcher": str(tc.launcher) if tc.launcher else None,
        "jobs": tc.jobs,
        "cuda_home": str(tc.cuda_home),
        "include_dirs": [str(d) for d in tc.nvidia_include_dirs],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    toolchain = _toolchain()
    from kernelpack.builder.flags import INCLUDE_DIR

    console = Console()
    results: dict[str, dict[str, float]] = {}
    load: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kp-build-speed-") as tmp:
        work = Path(tmp)
        for tool_name in ("BuildExtension", "kernelpack"):
            env = dict(os.environ)
            env["CCACHE_DIR"] = str(work / f"ccache-{tool_name}")
            # Cold includes kernelpack's machine cache of torch facts: it starts empty too.
            env["XDG_CACHE_HOME"] = str(work / f"xdg-{tool_name}")
            env["MAX_JOBS"] = str(toolchain["jobs"])
            env["CUDA_HOME"] = toolchain["cuda_home"]
            tool: _Tool
            if tool_name == "BuildExtension":
                includes = [str(INCLUDE_DIR), *toolchain["include_dirs"]]
                tool = _BuildExtension(env, includes)
            else:
                tool = _Kernelpack(env)
            console.print(f"[bold]{tool_name}[/]: building {len(_kernels())} kernels …")
            load[f"{tool_name}/before"] = os.getloadavg()[0]
            results[tool_name] = _scenarios(tool, work)
            load[f"{tool_name}/after"] = os.getloadavg()[0]
            console.print(results[tool_name])

    be, kp = results["BuildExtension"], results["kernelpack"]
    ratios = {s: kp[s] / be[s] for s in SCENARIOS}
    targets = {
        "cold <= 0.6x BuildExtension": kp["cold"] <= 0.6 * be["cold"],
        "warm fresh clone <= 0.1x cold": kp["warm_fresh_clone"] <= 0.1 * kp["cold"],
        "no-op <= 1 s": kp["noop"] <= 1.0,
    }
    table = Table(title=f"build speed: {len(_kernels())} classic-ABI kernels, sm_90a")
    table.add_column("scenario")
    table.add_column("BuildExtension s", justify="right")
    table.add_column("kernelpack s", justify="right")
    table.add_column("kernelpack / BuildExtension", justify="right")
    for s in SCENARIOS:
        table.add_row(s, f"{be[s]:.1f}", f"{kp[s]:.2f}", f"{ratios[s]:.2f}x")
    console.print(table)
    warm_over_cold = kp["warm_fresh_clone"] / kp["cold"]
    for t in results:
        cpu, wall = CPU[f"{t}/cold"], results[t]["cold"]
        console.print(f"{t} cold: {cpu:.0f} CPU s in {wall:.0f} s ({cpu / wall:.2f} cores busy)")
    console.print(f"kernelpack warm fresh clone / its cold: {warm_over_cold:.3f}x")
    for name, met in targets.items():
        console.print(f"{'[green]met[/]' if met else '[red]missed[/]'}  {name}")

    payload = {
        "benchmark": "build_speed",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": _machine(),
        "toolchain": {k: v for k, v in toolchain.items() if k != "include_dirs"},
        "kernels": _kernels(),
        "seconds": results,
        "ratio_kernelpack_over_buildextension": ratios,
        "kernelpack_warm_fresh_clone_over_cold": warm_over_cold,
        "targets": targets,
        "cpu_seconds": CPU,
        "cores_busy_cold": {t: CPU[f"{t}/cold"] / results[t]["cold"] for t in results},
        "load_average_1min": load,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
