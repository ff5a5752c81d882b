"""A compile the kernel's out-of-memory killer ends is not a compile error: the build says what
happened in one line and runs the rest with fewer compiles at once and one nvcc thread each;
a second kill is a one-line error that names the file, the figures and what to change.

The killer is faked at its edge: a compiler launcher (`ccache` on PATH) that, for its first
nvcc compiles, raises an `oom_kill` count the build reads instead of its cgroup's
(`BuildOptions.oom_counters`) and dies of SIGKILL, as a process the kernel chose does; after
that it runs the real nvcc on a tiny kernel of two archs.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import toolkits
from builds import build_env, copy_package

from kernelpack.builder import engine
from kernelpack.builder.outputs import BuildResult
from kernelpack.errors import BuildError
from kernelpack.plan import plan_project
from kernelpack.project.locate import locate

pytestmark = pytest.mark.integration

TINY = "__global__ void tiny_kernel(float* x) { x[threadIdx.x] = 1.0f; }\n"

# The launcher: `--` queries (statistics, configuration) fail, as a broken ccache's would;
# the first KILLS nvcc compiles are counted and killed; everything else runs as given.
KILLING_CCACHE = """#!/bin/sh
case "$1" in --*) exit 1 ;; esac
for arg in "$@"; do case "$arg" in *.cu) cu=1 ;; esac; done
if [ -n "$cu" ]; then
  echo "$*" >> {calls}
  done=$(cat {killed} 2>/dev/null || echo 0)
  if [ "$done" -lt {kills} ]; then
    echo $((done + 1)) > {killed}
    count=$(sed -n 's/^oom_kill //p' {counter})
    printf 'oom 1\\noom_kill %d\\n' $((count + 1)) > {counter}
    kill -9 $$
  fi
fi
exec "$@"
"""


def _build(tmp_path: Path, kills: int) -> tuple[io.StringIO, list[str], BuildResult | BuildError]:
    """Build a one-kernel package of two archs through the killing launcher with 2 jobs:
    (its output, the launcher's nvcc calls, the result or the error)."""
    if toolkits.nvcc() is None:
        pytest.skip(toolkits.NO_TOOLKIT)
    pytest.importorskip("torch")
    root = copy_package("kpdemo", tmp_path / "kpdemo")
    (root / "kpdemo" / "kernels.toml").write_text(
        '[scale]\nabi = "stable"\nsources = ["csrc/tiny.cu"]\n'
    )
    (root / "kpdemo" / "scale" / "csrc" / "tiny.cu").write_text(TINY)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('["9.0a"]', '["8.0", "9.0"]'))
    counter = tmp_path / "memory.events"
    counter.write_text("oom 0\noom_kill 0\n")
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "ccache"
    fake.parent.mkdir()
    fake.write_text(
        KILLING_CCACHE.format(calls=calls, killed=tmp_path / "killed", kills=kills, counter=counter)
    )
    fake.chmod(0o755)
    env = build_env(tmp_path / "ccache", KERNELPACK_LAUNCHER=str(fake))
    out = io.StringIO()
    project = locate(root)
    options = engine.BuildOptions(
        root=root,
        build_dir=engine.build_dir_for(project),
        jobs=2,
        stream=out,
        oom_counters=(counter,),
    )
    result: BuildResult | BuildError
    try:
        result = engine.compile_plan(plan_project(project, env), options)
    except BuildError as exc:
        result = exc
    return out, calls.read_text().splitlines(), result


def _killed_lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if "out-of-memory" in line]


def test_a_compile_killed_for_memory_is_retried_with_one_nvcc_thread_and_builds(
    tmp_path: Path,
) -> None:
    out, calls, result = _build(tmp_path, kills=1)
    assert isinstance(result, BuildResult), result
    assert result.libraries["scale"].is_file()
    (line,) = _killed_lines(out)
    assert re.fullmatch(
        r"kernelpack: kernel 'scale': scale/csrc/tiny\.cu: killed by the out-of-memory killer "
        r"at \d+\.\d GiB \(its largest process\), with 1 compile of 2 nvcc threads at once; "
        r"retrying with 1 compile of 1 nvcc thread at once",
        line,
    )
    assert "failed to compile" not in out.getvalue()
    killed, retried = calls
    assert " --threads 2 " in killed
    assert "--threads" not in retried


def test_a_compile_killed_again_is_one_error_that_says_what_to_change(tmp_path: Path) -> None:
    out, calls, result = _build(tmp_path, kills=2)
    assert isinstance(result, BuildError)
    message = str(result)
    assert message.startswith(
        "kernel 'scale': scale/csrc/tiny.cu: killed by the out-of-memory killer at "
    )
    assert "even with 1 compile of 1 nvcc thread at once (" in message
    assert re.search(r"\(\d+\.\d GiB free when the build started\)", message)
    assert "MAX_JOBS=1 (or -j 1)" in message
    assert "TORCH_CUDA_ARCH_LIST" in message
    assert "\n" not in message
    assert "failed to compile" not in message + out.getvalue()
    assert len(_killed_lines(out)) == 1  # the retry's line; the error is raised, not printed
    assert len(calls) == 2
