"""Memory-aware jobs: each compile's peak memory is measured behind the real ninja, kept in
the build folder, and the next plan's pools use it. The "compiler" is a fake that allocates
a known amount (and touches every page) before it writes its object."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import ninja
import pytest

from kernelpack.builder import memory
from kernelpack.builder.flags import KernelFlags
from kernelpack.builder.graph import (
    FILENAME,
    HEAVY_JOB_BYTES,
    LIGHT_JOB_BYTES,
    GraphKernel,
    Pools,
    render,
)

NINJA = Path(ninja.BIN_DIR) / "ninja"
MIB = 1024**2
GIB = 1024**3

# A compiler that holds MIB megabytes (every page written), then writes `-o` and a depfile.
FAKE_COMPILER = f"""#!{sys.executable}
import sys
mib = int(sys.argv[sys.argv.index("-DMIB") + 1]) if "-DMIB" in sys.argv else 0
held = bytearray(mib * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
out = sys.argv[sys.argv.index("-o") + 1]
open(out, "w").write("object")
open(sys.argv[sys.argv.index("-MF") + 1], "w").write(out + ": \\n")
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "fake-nvcc"
    path.parent.mkdir()
    path.write_text(FAKE_COMPILER)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _build(tmp_path: Path, sizes: dict[str, int]) -> Path:
    """A graph of one kernel whose `.cu` sources allocate `sizes` MiB; run it with ninja."""
    root = tmp_path / "project"
    package = root / "pkg"
    (package / "k").mkdir(parents=True)
    sources = []
    for name in sizes:
        source = package / "k" / name
        source.write_text("// k\n")
        sources.append(source)
    build = root / "build"
    build.mkdir()
    kernels = []
    for source in sources:
        kernels.append(
            GraphKernel(
                name=source.stem,
                sources=(source,),
                flags=KernelFlags(
                    defines=("-DMIB", str(sizes[source.name])),
                    include_dirs=(),
                    nvcc=(),
                    cxx=(),
                    cc=(),
                    ldflags=(),
                    heavy=False,
                ),
                library=f"lib/{source.stem}/_C.abi3.so",
                package_dir=package,
            )
        )
    text = render(
        kernels,
        build_dir=build,
        root=root,
        nvcc=_fake(tmp_path),
        cxx="true",
        cc="true",
        launcher=None,
        pools=Pools(heavy=1, light=1),
        measure=memory.shim(),
    )
    (build / FILENAME).write_text(text.replace("$cxx -shared", "touch $out.tmp ||"))
    subprocess.run([str(NINJA), "-C", str(build)], check=True, capture_output=True, timeout=120)
    return build


def test_each_compile_peak_is_measured_and_kept_in_the_build_folder(tmp_path: Path) -> None:
    build = _build(tmp_path, {"small.cu": 20, "big.cu": 300})
    peaks = memory.collect(build)
    assert set(peaks) == {"obj/small/k/small.cu.o", "obj/big/k/big.cu.o"}
    assert 300 * MIB <= peaks["obj/big/k/big.cu.o"] < 400 * MIB
    assert 20 * MIB <= peaks["obj/small/k/small.cu.o"] < 120 * MIB
    assert json.loads((build / memory.PEAKS_FILE).read_text()) == peaks
    assert not (build / memory.LOG_FILE).exists()


def test_next_plan_budgets_each_job_with_the_largest_measured_peak(tmp_path: Path) -> None:
    build = _build(tmp_path, {"a.cu": 20, "b.cu": 300})
    peaks = memory.collect(build)
    outputs = {"light": ["obj/a/k/a.cu.o", "obj/b/k/b.cu.o"], "heavy": []}
    per_job = memory.plan(
        outputs, peaks, heavy_estimate=HEAVY_JOB_BYTES, light_estimate=LIGHT_JOB_BYTES
    )
    assert per_job.light == peaks["obj/b/k/b.cu.o"]
    assert per_job.light_why.startswith("measured peak of obj/b/k/b.cu.o, 2 of 2")
    assert per_job.heavy == HEAVY_JOB_BYTES
    assert per_job.heavy_why.startswith("estimate")
    # 2 GiB free holds 6 compiles of this size where the 1 GiB estimate held 2.
    measured = Pools.for_memory(16, 2 * GIB, heavy_bytes=per_job.heavy, light_bytes=per_job.light)
    assert measured.light == 2 * GIB // per_job.light >= 5
    assert Pools.for_memory(16, 2 * GIB).light == 2
    assert measured.light * per_job.light <= 2 * GIB


def test_a_cache_hit_never_lowers_a_known_peak(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / memory.LOG_FILE).write_text("obj/k.cu.o\t3000000000\t-\n")
    memory.collect(build)
    (build / memory.LOG_FILE).write_text("obj/k.cu.o\t9000000\t-\n")
    assert memory.collect(build) == {"obj/k.cu.o": 3000000000}


def test_the_shim_keeps_the_compiles_exit_status_and_stays_out_of_commands(
    tmp_path: Path,
) -> None:
    shim = memory.shim()
    log = tmp_path / "peaks.log"
    code = subprocess.run(
        [*shim[:-1], str(log), "obj/x.o", "--", sys.executable, "-c", "raise SystemExit(3)"],
        check=False,
    ).returncode
    assert code == 3
    assert log.read_text().startswith("obj/x.o\t")
    command = " ".join([*shim, "obj/x.o", "--", "nvcc", "-c", "x.cu"])
    assert memory.unshim(command) == "nvcc -c x.cu"


@pytest.mark.parametrize(("name", "measured"), [("sccache", False), ("ccache", True)])
def test_compiles_inside_sccaches_server_are_not_measured(name: str, measured: bool) -> None:
    assert memory.measurable(Path("/usr/bin") / name) is measured
    assert memory.measurable(None)


# nvcc --threads 3: three processes of MIB megabytes each, all alive at once.
THREADED = """
import subprocess, sys
hold = "import time; b = bytearray(%d << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1)"
children = [subprocess.Popen([sys.executable, "-c", hold % int(sys.argv[1])]) for _ in range(3)]
sys.exit(max(child.wait() for child in children))
"""


def test_a_threaded_compiles_peak_is_one_of_its_processes(tmp_path: Path) -> None:
    # The plan's per-thread figure: a compile of N nvcc threads needs N times this.
    command = [sys.executable, "-c", THREADED, "150"]
    code = subprocess.run([*memory.shim(), "obj/x.cu.o", "--", *command], cwd=tmp_path).returncode
    assert code == 0
    peak = memory.collect(tmp_path)["obj/x.cu.o"]
    assert 150 * MIB <= peak < 2 * 150 * MIB
