"""The inner loop: edit one `.cu`, then `import llm_ops; llm_ops.load("rmsnorm")`.

Three ways to get from the edit to the loaded kernel, side by side in one run, on the same
source (`examples/llm_ops`, kernel `rmsnorm`, sm_90a), each in its own copy of the package,
venv and empty ccache:

- `kernelpack-editable`: `pip install --no-build-isolation -e` once with this checkout's
  kernelpack; each round is only the import, whose hook rebuilds what changed;
- `previous-editable`: the same with the kernelpack of commit a1db129 (before imports
  rebuilt anything): each round is `pip install --no-build-isolation -e` again, then the import;
- `torch-jit`: `torch.utils.cpp_extension.load(...)` on the same two sources, flags and
  arch (`TORCH_CUDA_ARCH_LIST=9.0a`), in a fresh process, as a JIT user's loop reruns it.

Each round makes a real code change in `rmsnorm.cu` (a new constant, so no compiler-cache
hit), and the contenders take turns within a round so load changes hit all three alike.
This machine has no GPU: the registry is given a probe reporting an sm_90 device so that
`load` goes on to import the library (which needs no GPU). Also measured: a no-op import
with the hook against the same import with the hook turned off (`KERNELPACK_EDITABLE_SKIP`).
Each round also records the wall time of the `rmsnorm.cu` compile itself (from ninja's log:
kernelpack's build folder, torch's extension folder), so the time each way adds beyond nvcc
can be told apart from the compile, which a loaded machine stretches the most.

Usage: `python benchmarks/editable_loop.py [--rounds 3] [--json FILE]` (default
`benchmarks/results/editable_loop.json`)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLE = REPO / "examples" / "llm_ops"
RESULTS = HERE / "results" / "editable_loop.json"
PREVIOUS = "a1db129"
EDITED = Path("llm_ops", "rmsnorm", "csrc", "rmsnorm.cu")
CONTENDERS = ("kernelpack-editable", "previous-editable", "torch-jit")

LOAD = (
    "from kernelpack_runtime import set_default_probe\n"
    "from kernelpack_runtime.testing.fakes import fake_probe\n"
    "set_default_probe(fake_probe('9.0'))\n"
    "import llm_ops\n"
    "llm_ops.load('rmsnorm')\n"
)

JIT = """\
import sys
from torch.utils.cpp_extension import load
pkg = sys.argv[1]
defines = ["-DKERNELPACK_NAMESPACE=llm_ops_rmsnorm", "-DTORCH_TARGET_VERSION=0x020a000000000000",
           "-DUSE_CUDA", "-DTORCH_EXTENSION_NAME=_C"]
load(
    name="llm_ops_rmsnorm_jit",
    sources=[f"{pkg}/llm_ops/rmsnorm/csrc/rmsnorm.cu", f"{pkg}/llm_ops/rmsnorm/csrc/binding.cpp"],
    extra_include_paths=[sys.argv[2], f"{pkg}/llm_ops/rmsnorm/csrc", f"{pkg}/llm_ops/csrc"],
    extra_cflags=["-O3", "-std=c++17", *defines],
    extra_cuda_cflags=["-O3", "-std=c++17", "--expt-relaxed-constexpr", *defines],
    is_python_module=False,
)
"""


def _venv(where: Path, first: Path | None = None) -> Path:
    """A venv that sees this interpreter's packages (torch); `first` (a source folder) goes
    ahead of them on `sys.path`."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    query = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run(
        [venv / "bin" / "python", "-c", query],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if first is not None:
        Path(purelib, "aa_first.pth").write_text(f"{first}\n")
    ours = sysconfig.get_paths()["purelib"]
    Path(purelib, "zz_parent_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return venv / "bin" / "python"


def _copy(where: Path) -> Path:
    ignore = shutil.ignore_patterns("build", "dist", "*.so", "_kernelpack.json", "__pycache__")
    shutil.copytree(EXAMPLE, where / "llm_ops", ignore=ignore)
    return where / "llm_ops"


def _timed(argv: list[Any], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, argv))} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds


def _edit(source: Path, round_: int, contender: str) -> None:
    text = source.read_text()
    marker = "\nnamespace kp_bench_edit {"
    text = text.split(marker)[0]
    value = time.time_ns() + 10 * round_ + CONTENDERS.index(contender)  # new every time
    source.write_text(f"{text}{marker} constexpr long long value = {value}LL; }}\n")


def _compile_seconds(log: Path) -> float:
    """Wall time of the last compile of `rmsnorm.cu` that ninja logged in `log`."""
    seconds = 0.0
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and "rmsnorm.cu" in parts[3] and parts[3].endswith(".o"):
            seconds = (int(parts[1]) - int(parts[0])) / 1000
    return seconds


def _previous_source(where: Path) -> Path:
    folder = where / "previous"
    folder.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2
    return {
        "description": "kernelpack's CPU build machine: 2 vCPUs shared with other jobs, no GPU",
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "os": platform.platform(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="kp-editable-loop-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELPACK_", "LLM_OPS_"))}
    base.pop("MAX_JOBS", None)
    base.pop("TORCH_CUDA_ARCH_LIST", None)
    include = REPO / "src" / "kernelpack" / "include"
    setups: dict[str, dict[str, Any]] = {}
    for contender in CONTENDERS:
        where = work / contender
        where.mkdir()
        env = {**base, "CCACHE_DIR": str(where / "ccache")}
        first = _previous_source(where) if contender == "previous-editable" else None
        python = _venv(where, first)
        package = _copy(where)
        if contender == "torch-jit":
            env["TORCH_EXTENSIONS_DIR"] = str(where / "torch_extensions")
            env["TORCH_CUDA_ARCH_LIST"] = "9.0a"
            env.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")  # torch guesses wrong here
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
            script = where / "jit.py"
            script.write_text(JIT)
            command = [python, script, package, include]
            log = where / "torch_extensions" / "llm_ops_rmsnorm_jit" / ".ninja_log"
            setup = _timed(command, env, where)
        else:
            install = [python, "-m", "pip", "install", "-q", "--no-deps"]
            install += ["--no-build-isolation", "-e", package]
            setup = _timed(install, env, where) + _timed([python, "-c", LOAD], env, where)
            command = [python, "-c", LOAD]
            if contender == "previous-editable":
                command = install  # then the import, timed separately below
            log = package / "build" / "kernelpack" / ".ninja_log"
        setups[contender] = {
            "python": python,
            "package": package,
            "env": env,
            "command": command,
            "cold_seconds": setup,
            "rounds": [],
            "compiles": [],
            "log": log,
        }
        print(f"{contender}: set up in {setup:.1f} s", file=sys.stderr)
    for round_ in range(args.rounds):
        for contender in CONTENDERS:
            s = setups[contender]
            _edit(s["package"] / EDITED, round_, contender)
            where = s["package"].parent
            seconds = _timed(s["command"], s["env"], where)
            if contender == "previous-editable":
                seconds += _timed([s["python"], "-c", LOAD], s["env"], where)
            s["rounds"].append(seconds)
            s["compiles"].append(_compile_seconds(s["log"]))
            print(
                f"round {round_ + 1} {contender}: {seconds:.1f} s (nvcc {s['compiles'][-1]:.1f} s)",
                file=sys.stderr,
            )
    hook = setups["kernelpack-editable"]
    skip_env = {**hook["env"], "KERNELPACK_EDITABLE_SKIP": str(hook["package"])}
    noop: dict[str, list[float]] = {"hook": [], "hook_skipped": []}
    plain = [hook["python"], "-c", "import llm_ops"]
    _timed(plain, hook["env"], work)  # settle the last edit
    for _ in range(15):
        noop["hook"].append(_timed(plain, hook["env"], work))
        noop["hook_skipped"].append(_timed(plain, skip_env, work))
    medians = {c: statistics.median(setups[c]["rounds"]) for c in CONTENDERS}
    noop_ms = {k: statistics.median(v) * 1000 for k, v in noop.items()}
    result = {
        "benchmark": "editable_loop",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": _machine(),
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "previous_commit": PREVIOUS,
        "edited": str(EDITED),
        "rounds": args.rounds,
        "seconds_per_round": {c: setups[c]["rounds"] for c in CONTENDERS},
        "median_seconds": medians,
        "nvcc_seconds_per_round": {c: setups[c]["compiles"] for c in CONTENDERS},
        "median_seconds_beyond_nvcc": {
            c: statistics.median(
                r - n for r, n in zip(setups[c]["rounds"], setups[c]["compiles"], strict=True)
            )
            for c in CONTENDERS
        },
        "cold_setup_seconds": {c: setups[c]["cold_seconds"] for c in CONTENDERS},
        "noop_import_ms": {
            "median_with_hook": noop_ms["hook"],
            "median_hook_skipped": noop_ms["hook_skipped"],
            "overhead": noop_ms["hook"] - noop_ms["hook_skipped"],
            "samples": len(noop["hook"]),
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    beyond = result["median_seconds_beyond_nvcc"]
    for contender in CONTENDERS:
        print(
            f"{contender:22} median {medians[contender]:6.1f} s, "
            f"{beyond[contender]:5.1f} s beyond the nvcc step",
            file=sys.stderr,
        )
    print(
        f"no-op import: {noop_ms['hook']:.0f} ms with the hook, "
        f"{noop_ms['hook_skipped']:.0f} ms without",
        file=sys.stderr,
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
