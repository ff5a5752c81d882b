"""benchmarks/micro: the kernel microbenchmarks still build against the kernels' headers (they
run only on a GPU, through scripts/gpu-check's micro stage; here nvcc compiles them)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from toolkits import system_nvcc

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "micro" / "run.sh"


def test_every_microbenchmark_builds(tmp_path: Path) -> None:
    # run.sh calls nvcc as it is, with no include folders of a wheel-installed toolkit: the
    # system toolkit's, as on the GPU machine.
    compiler = system_nvcc()
    if compiler is None:
        pytest.skip("needs the system CUDA toolkit (nvcc on PATH), as run.sh uses it")
    programs = sorted(p.stem for p in RUN.parent.glob("*.cu"))
    result = subprocess.run(
        [str(RUN), "--build-only", str(tmp_path)],
        env={**os.environ, "NVCC": str(compiler)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    logs = {p.name: p.read_text() for p in tmp_path.glob("micro-*.txt")}
    assert result.returncode == 0, (result.stderr, logs)
    # run.sh builds every program of the folder (a new .cu needs its entry there).
    assert sorted(logs) == [f"micro-{name}.txt" for name in programs]
    assert not any("error" in log for log in logs.values()), logs


def test_a_program_that_does_not_build_fails_the_run(tmp_path: Path) -> None:
    broken = tmp_path / "bin"
    broken.mkdir()
    fake = broken / "nvcc"
    # A compiler that rejects everything: run.sh must say so and exit 1, not 0.
    fake.write_text("#!/bin/sh\necho 'nvcc: error: rejected' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = subprocess.run(
        [str(RUN), "--build-only", str(tmp_path / "out")],
        env={**os.environ, "NVCC": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "did not build" in result.stderr
