"""`nvcc --threads` for multi-arch kernels, and the job pools that account for it: fewer
compiles at once first, then fewer threads when one compile with all of them does not fit."""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

import ninja

from kernelpack.builder import memory
from kernelpack.builder import ninja as ninja_runner
from kernelpack.builder.flags import KernelFlags, nvcc_threads
from kernelpack.builder.graph import (
    FILENAME,
    HEAVY_JOB_BYTES,
    LIGHT_JOB_BYTES,
    GraphKernel,
    Pools,
    compiles,
    render,
)

GIB = 1024**3
SM90 = "-gencode=arch=compute_90a,code=sm_90a"
SM100 = "-gencode=arch=compute_100a,code=sm_100a"
NINJA = Path(ninja.BIN_DIR) / "ninja"

# A compiler (nvcc, c++) that writes its object and depfile, and nothing else.
FAKE_NVCC = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -MF) dep="$2"; shift ;;
  esac
  shift
done
echo object > "$out"
echo "$out: " > "$dep"
"""


def test_a_single_arch_kernel_gets_no_threads() -> None:
    assert nvcc_threads((SM90,)) == 1


def test_a_multi_arch_kernel_gets_one_thread_per_arch() -> None:
    assert nvcc_threads((SM90, SM100)) == 2


def test_threaded_compiles_share_the_jobs() -> None:
    pools = Pools.for_memory(jobs=8, available_bytes=None, heavy_threads=2, light_threads=2)
    assert (pools.heavy, pools.light) == (4, 4)
    assert (pools.heavy_threads, pools.light_threads) == (2, 2)


def test_jobs_times_threads_times_job_memory_stays_within_free_memory() -> None:
    free = 13 * GIB
    for threads in (1, 2, 3, 4):
        pools = Pools.for_memory(16, free, heavy_threads=threads, light_threads=threads)
        assert pools.heavy * threads * HEAVY_JOB_BYTES <= free
        assert pools.light * threads * LIGHT_JOB_BYTES <= free
        assert pools.light * threads <= 16
        assert (pools.heavy_threads, pools.light_threads) == (threads, threads)
    assert Pools.for_memory(16, free, heavy_threads=2).heavy == 2


def test_a_compile_whose_threads_do_not_fit_gets_fewer_threads() -> None:
    # The machine: 2 cores, a kernel-builder kernel of 9 archs, 20 GiB free.
    pools = Pools.for_memory(2, 20 * GIB, heavy_threads=9)
    assert (pools.heavy, pools.heavy_threads) == (1, 6)
    assert pools.heavy * pools.heavy_threads * HEAVY_JOB_BYTES <= 20 * GIB


def test_threads_are_lowered_down_to_one_and_no_further() -> None:
    pools = Pools.for_memory(jobs=2, available_bytes=2 * GIB, heavy_threads=4, light_threads=4)
    assert (pools.heavy, pools.heavy_threads) == (1, 1)
    assert (pools.light, pools.light_threads) == (1, 2)


def test_threads_follow_the_measured_per_thread_peak() -> None:
    peak = int(2.7 * GIB)
    pools = Pools.for_memory(2, 20 * GIB, heavy_threads=9, heavy_bytes=peak)
    assert pools.heavy_threads == 7


def test_fewer_compiles_come_before_fewer_threads() -> None:
    pools = Pools.for_memory(64, 30 * GIB, heavy_threads=9)
    assert (pools.heavy, pools.heavy_threads) == (1, 9)


def test_single_threaded_pools_are_unchanged() -> None:
    assert Pools.for_memory(jobs=8, available_bytes=7 * GIB) == Pools.for_memory(
        jobs=8, available_bytes=7 * GIB, heavy_threads=1, light_threads=1
    )


def test_each_compile_gets_its_own_threads_within_its_pools_cap() -> None:
    pools = Pools(heavy=1, light=1, heavy_threads=4, light_threads=None)
    assert pools.cap("heavy", 9) == 4
    assert pools.cap("heavy", 2) == 2
    assert pools.cap("light", 9) == 9


def test_a_retry_halves_the_slots_and_runs_what_is_left_with_one_thread() -> None:
    pools = Pools(heavy=4, light=3, heavy_threads=6, light_threads=9)
    retry = pools.fewer(["obj/late.cu.o"])
    assert (retry.heavy, retry.light) == (2, 1)
    assert retry.threads("obj/late.cu.o", "heavy", 9) == 1
    assert retry.threads("obj/done.cu.o", "heavy", 9) == 6  # finished: its command line stays
    unknown = pools.fewer(None)
    assert unknown.threads("obj/done.cu.o", "heavy", 9) == 1


def test_the_memory_plan_says_when_it_lowers_threads() -> None:
    budget = memory.Budget.for_build(
        {"heavy": {"obj/k/relu.cu.o": 9}, "light": {"obj/k/host.cpp.o": 1}},
        {},
        jobs=2,
        available=20 * GIB,
    )
    heavy, light, free = budget.describe().split("; ")
    assert heavy.startswith("heavy pool 1 x 6 nvcc threads x 3.0 GiB (estimate: ")
    assert heavy.endswith(", nvcc --threads lowered from 9 to 6 to fit one compile")
    assert light.startswith("light pool 2 x 1.0 GiB (estimate: ")
    assert "lowered" not in light
    assert free == "20.0 GiB free"


def _kernel(package: Path, name: str, threads: int, sources: tuple[str, ...]) -> GraphKernel:
    for source in sources:
        path = package / name / source
        if not path.exists():  # a second graph of the same tree leaves the sources alone
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("// x\n")
    return GraphKernel(
        name=name,
        sources=tuple(package / name / s for s in sources),
        flags=KernelFlags(
            defines=(),
            include_dirs=(),
            nvcc=("-O3",),
            cxx=(),
            cc=(),
            ldflags=(),
            heavy=True,
            threads=threads,
        ),
        library=f"lib/{name}/_C.so",
        package_dir=package,
    )


def _write_graph(tmp_path: Path, pools: Pools) -> tuple[Path, list[GraphKernel]]:
    """Three kernels (9-arch, 2-arch, one host source) rendered into `tmp_path/root/build`."""
    root = tmp_path / "root"
    build = root / "build"
    build.mkdir(parents=True, exist_ok=True)
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    kernels = [
        _kernel(root / "pkg", "wide", 9, ("wide.cu",)),
        _kernel(root / "pkg", "pair", 2, ("pair.cu",)),
        _kernel(root / "pkg", "host", 1, ("host.cpp",)),
    ]
    text = render(
        kernels,
        build_dir=build,
        root=root,
        nvcc=nvcc,
        cxx=str(nvcc),
        cc="true",
        launcher=None,
        pools=pools,
    )
    (build / FILENAME).write_text(text.replace("$cxx -shared", "touch $out.tmp ||"))
    return build, kernels


def _commands(build: Path) -> dict[str, list[str]]:
    out = subprocess.run(
        [str(NINJA), "-C", str(build), "-t", "commands"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found = {}
    for line in out.splitlines():
        words = shlex.split(line)
        if "-o" in words:
            found[words[words.index("-o") + 1]] = words
    return found


def _threads(words: list[str]) -> int | None:
    return int(words[words.index("--threads") + 1]) if "--threads" in words else None


def test_the_planned_threads_reach_the_nvcc_command_lines(tmp_path: Path) -> None:
    build, kernels = _write_graph(tmp_path, Pools(heavy=1, light=1, heavy_threads=4))
    commands = _commands(build)
    assert _threads(commands["obj/wide/wide/wide.cu.o"]) == 4
    assert _threads(commands["obj/pair/pair/pair.cu.o"]) == 2
    assert _threads(commands["obj/host/host/host.cpp.o"]) is None
    assert compiles(kernels, build)["heavy"] == {
        "obj/wide/wide/wide.cu.o": 9,
        "obj/pair/pair/pair.cu.o": 2,
        "obj/host/host/host.cpp.o": 1,
    }


def test_lowering_threads_rebuilds_only_the_compiles_whose_threads_change(
    tmp_path: Path,
) -> None:
    build, _ = _write_graph(tmp_path, Pools(heavy=1, light=1))
    subprocess.run([str(NINJA), "-C", str(build)], check=True, capture_output=True, timeout=60)
    assert _threads(_commands(build)["obj/wide/wide/wide.cu.o"]) == 9
    _write_graph(tmp_path, Pools(heavy=1, light=1, heavy_threads=4))
    pending = ninja_runner.pending(build, {"PATH": "/usr/bin:/bin"})
    assert pending is not None
    assert [step.output for step in pending] == ["obj/wide/wide/wide.cu.o", "lib/wide/_C.so"]
